//! Sandbox credentials as docker keeps them: credential helper programs on
//! PATH and `~/.docker/config.json`.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use crate::harness::Sandbox;

impl Sandbox {
    /// Installs `docker-credential-NAME`, a shell script whose `get`
    /// answers with `body` (it has read the server into `$server`), on
    /// the sandbox's PATH.
    pub fn credential_helper(&mut self, name: &str, body: &str) {
        let bin = self.dir.path().join("bin");
        fs::create_dir_all(&bin).unwrap();
        let helper = bin.join(format!("docker-credential-{name}"));
        fs::write(
            &helper,
            format!("#!/bin/sh\n[ \"$1\" = get ] || exit 1\nread -r server\n{body}"),
        )
        .unwrap();
        fs::set_permissions(&helper, fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!(
            "{}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
            bin.display()
        );
        if !self
            .extra_env
            .iter()
            .any(|(k, v)| k == "PATH" && *v == path)
        {
            self.extra_env.push(("PATH".into(), path));
        }
    }

    /// Writes the user's `~/.docker/config.json`.
    pub fn docker_config(&self, text: &str) {
        let docker = self.home().join(".docker");
        fs::create_dir_all(&docker).unwrap();
        fs::write(docker.join("config.json"), text).unwrap();
        self.chown_to_user(&self.home());
    }
}
