//! `berth import` from the archive formats skopeo, docker and podman write.

use crate::harness::{unsquash, Sandbox};
use crate::need_env;
use crate::tree::{assert_same, snapshot};

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn oci_dir_oci_archive_docker_archive_and_registry_agree() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let fx = env.fixtures();
    let pulled = sb.pull("layers").stdout().trim().to_string();
    let sources = [
        format!("oci:{}:latest", fx.join("oci/layers").display()),
        format!(
            "oci-archive:{}",
            fx.join("layers.oci-archive.tar").display()
        ),
        format!(
            "docker-archive:{}",
            fx.join("layers.docker-archive.tar").display()
        ),
    ];
    for (i, src) in sources.iter().enumerate() {
        let name = format!("imported{i}");
        let out = sb.run(&["import", src, &name]).ok();
        // Same config, so the same image id: the store converts it once.
        assert_eq!(out.stdout().trim(), pulled, "{src}");
        let j = sb.run(&["inspect", &name]).ok().json();
        assert!(j["names"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n == &format!("localhost/{name}:latest")));
    }
    // A fresh store: each import converts, and the tree equals the oracle.
    for src in &sources {
        let sb2 = Sandbox::new(env);
        sb2.run(&["import", src, "x"]).ok();
        let dest = sb2.dir.path().join("unpacked");
        unsquash(&sb2.squashfs_of("x"), &dest);
        let owners = env.user.is_some();
        let got = snapshot(&dest, owners, &[]);
        let want = snapshot(&fx.join("oracle/layers"), owners, &["special/chardev"]);
        assert_same(&got, &want, src);
    }
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn import_errors_are_clear() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let fx = env.fixtures();
    sb.run(&["import", "dir:/x", "n"])
        .fails(2, "unknown transport");
    sb.run(&["import", "oci-archive:/nonexistent.tar", "n"])
        .fails(10, "/nonexistent.tar");
    sb.run(&[
        "import",
        &format!("oci:{}:nope", fx.join("oci/layers").display()),
        "n",
    ])
    .fails(2, "no image tagged \"nope\"");
    // A tampered layer blob in an OCI layout is refused.
    let copy = sb.dir.path().join("layout");
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(fx.join("oci/layers"))
        .arg(&copy)
        .status()
        .unwrap();
    assert!(st.success());
    let blobs = copy.join("blobs/sha256");
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(copy.join("index.json")).unwrap()).unwrap();
    let mdigest = index["manifests"][0]["digest"]
        .as_str()
        .unwrap()
        .trim_start_matches("sha256:")
        .to_string();
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(blobs.join(&mdigest)).unwrap()).unwrap();
    let layer = manifest["layers"][0]["digest"]
        .as_str()
        .unwrap()
        .trim_start_matches("sha256:")
        .to_string();
    let path = blobs.join(&layer);
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&path, bytes).unwrap();
    sb.chown_to_user(&copy);
    sb.run(&["import", &format!("oci:{}", copy.display()), "tampered"])
        .fails(13, "tampered");
    assert!(sb.store_entries("images").is_empty());
    sb.assert_store_tmp_empty();
}

/// `image` runs as the registry's Debian test image does: its tree and
/// its configuration (GREETING).
fn runs_the_debian_image(sb: &Sandbox, image: &str) {
    let show = "cat /etc/debian_version; echo $GREETING";
    let out = sb.run(&["run", image, "sh", "-c", show]).ok().stdout();
    assert!(
        out.starts_with("12.") && out.ends_with("hello from the image\n"),
        "{out}"
    );
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn containers_storage_imports_the_users_podman_images() {
    let env = need_env!();
    let mut sb = Sandbox::new(env);
    let r = format!("{}/berth-test/debian-python:latest", env.anon());
    let pulled = sb
        .podman(&["pull", "-q", "--tls-verify=false", &r])
        .expect("the fixtures' podman home (BERTH_IT_PODMAN_HOME)");
    assert_eq!(pulled.code(), 0, "{}", pulled.stderr());
    // berth runs podman with the user's environment: the same storage.
    let home = std::path::PathBuf::from(env.var("BERTH_IT_PODMAN_HOME"));
    for (k, sub) in [
        ("XDG_CONFIG_HOME", "config"),
        ("XDG_DATA_HOME", "data"),
        ("XDG_RUNTIME_DIR", "runtime"),
    ] {
        sb.extra_env
            .push((k.into(), home.join(sub).display().to_string()));
    }
    let src = format!("containers-storage:{r}");
    sb.run(&["import", "-q", &src, "from-podman:1"]).ok();
    runs_the_debian_image(&sb, "from-podman:1");
    sb.run(&["import", "containers-storage:localhost/no-such:1", "x:1"])
        .fails(16, "podman could not export localhost/no-such:1");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn docker_daemon_imports_the_daemons_images() {
    // A real dockerd (the fixtures'), its socket open to the test user as
    // a site's docker group would have it; berth runs `docker save` with
    // the user's DOCKER_HOST.
    let env = need_env!();
    let mut sb = Sandbox::new(env);
    let host = env.var("BERTH_IT_DOCKER_HOST");
    let r = format!("{}/berth-test/debian-python:latest", env.anon());
    let pulled = std::process::Command::new("docker")
        .env("DOCKER_HOST", host)
        .args(["pull", "-q", &r])
        .output()
        .expect("docker (Debian's docker.io)");
    assert!(
        pulled.status.success(),
        "{}",
        String::from_utf8_lossy(&pulled.stderr)
    );
    sb.extra_env.push(("DOCKER_HOST".into(), host.to_string()));
    sb.run(&[
        "import",
        "-q",
        &format!("docker-daemon:{r}"),
        "from-docker:1",
    ])
    .ok();
    runs_the_debian_image(&sb, "from-docker:1");
    // The same tree as the registry's image, entry for entry.
    let list = "find / -xdev -printf '%p %y %m %U:%G %s %l\\n' | sort | md5sum";
    let pulled = sb.pulled("debian-python:latest");
    assert_eq!(
        sb.run(&["run", "--entrypoint", "", "from-docker:1", "sh", "-c", list])
            .ok()
            .stdout(),
        sb.run(&["run", "--entrypoint", "", &pulled, "sh", "-c", list])
            .ok()
            .stdout()
    );
    sb.run(&["import", "docker-daemon:localhost/no-such:1", "x:1"])
        .fails(16, "docker could not export localhost/no-such:1");
}
