//! Sandbox commands on a node as the fallbacks meet it: /dev/fuse
//! closed, a site configuration.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use crate::harness::{Out, Sandbox};

impl Sandbox {
    /// Writes the sandbox's system configuration (berth.toml text).
    pub fn site_config(&self, text: &str) {
        fs::write(self.dir.path().join("no-site-config.toml"), text).unwrap();
    }

    /// `berth ARGS` as the test user where /dev/fuse is closed as on a node
    /// without udev (a 0600 root file bound over it, in a mount namespace
    /// of this command only), with the sandbox's environment.
    pub fn berth_without_fuse(&self, args: &[&str]) -> Out {
        let closed = self.dir.path().join("closed-fuse");
        fs::write(&closed, "").unwrap();
        fs::set_permissions(&closed, fs::Permissions::from_mode(0o600)).unwrap();
        let (uid, gid, _) = self.env.test_user().clone();
        let mut c = Command::new("unshare");
        c.args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(format!(
                "mount --bind {} /dev/fuse && exec setpriv --reuid {uid} --regid {gid} --clear-groups \"$@\"",
                closed.display()
            ))
            .arg("sh")
            .arg(&self.env.berth)
            .args(args);
        self.clean_env(&mut c);
        Out(c.output().unwrap())
    }
}
