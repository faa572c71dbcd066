//! State that outlives a run: `--overlay DIR` keeps a container's changes
//! (files, deletions, a package dpkg installed under `--fakeroot`) for the
//! next run, one writer at a time; `DIR:ro` stacks them for many.

use std::fs;
use std::process::Command;

use crate::harness::*;
use crate::need_env;

/// A Debian package made by dpkg-deb, installing `/usr/bin/berth-hello`.
fn hello_deb(sb: &Sandbox) -> std::path::PathBuf {
    let root = sb.dir.path().join("pkg/root");
    fs::create_dir_all(root.join("DEBIAN")).unwrap();
    fs::create_dir_all(root.join("usr/bin")).unwrap();
    fs::write(
        root.join("DEBIAN/control"),
        "Package: berth-hello\nVersion: 1.0\nArchitecture: all\nMaintainer: berth tests <t@example.org>\nDescription: a package for berth's overlay test\n",
    )
    .unwrap();
    let bin = root.join("usr/bin/berth-hello");
    fs::write(&bin, "#!/bin/sh\necho hello from a package\n").unwrap();
    Command::new("chmod").arg("755").arg(&bin).status().unwrap();
    let deb = sb.dir.path().join("pkg/berth-hello.deb");
    let st = Command::new("dpkg-deb")
        .args(["--build", "--root-owner-group"])
        .arg(&root)
        .arg(&deb)
        .output()
        .expect("dpkg-deb (Debian's dpkg) builds the test package");
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    sb.chown_to_user(&sb.dir.path().join("pkg"));
    deb
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn an_overlay_keeps_changes_and_packages_across_runs() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let d = sb.debian();
    let ov = sb.dir.path().join("state/ov");
    let ov_arg = ov.to_str().unwrap();
    // Made if missing; a file written, one of the image's deleted, a
    // directory replaced by an empty one (an opaque directory).
    sb.sh(
        &d,
        &["--overlay", ov_arg],
        "echo kept > /etc/berth-note && rm /etc/debian_version && rm -r /usr/share/doc && mkdir /usr/share/doc && touch /usr/share/doc/only",
    )
    .ok();
    assert!(ov.join("upper").is_dir() && ov.join("work").is_dir());
    let look = "cat /etc/berth-note; test -e /etc/debian_version && echo version || echo no-version; ls /usr/share/doc";
    assert_eq!(
        sb.sh(&d, &["--overlay", ov_arg], look).ok().stdout(),
        "kept\nno-version\nonly\n"
    );
    // The image itself is unchanged.
    let out = sb
        .sh(
            &d,
            &[],
            "cat /etc/berth-note 2>&1; test -e /etc/debian_version && echo version",
        )
        .stdout();
    assert!(out.ends_with("version\n") && !out.contains("kept"), "{out}");
    // Read-only: the changes are seen, the run's own go to memory.
    let ro = format!("{ov_arg}:ro");
    let out = sb
        .sh(
            &d,
            &["--overlay", &ro, "--writable"],
            "cat /etc/berth-note; echo more > /etc/berth-more; cat /etc/berth-more",
        )
        .ok()
        .stdout();
    assert_eq!(out, "kept\nmore\n");
    assert_eq!(
        sb.sh(
            &d,
            &["--overlay", &ro],
            "cat /etc/berth-more 2>/dev/null || echo gone"
        )
        .ok()
        .stdout(),
        "gone\n"
    );
    let out = sb
        .sh(&d, &["--overlay", &ro], "touch /etc/x 2>&1; echo rc=$?")
        .stdout();
    assert!(out.contains("Read-only file system"), "{out}");

    // A package installed as root inside is there next time.
    let deb = hello_deb(&sb);
    let bind = format!("{}:/pkg/hello.deb:ro", deb.display());
    let pkg = sb.dir.path().join("state/pkg");
    let pkg_arg = pkg.to_str().unwrap();
    sb.sh(
        &d,
        &["--fakeroot", "--overlay", pkg_arg, "-v", &bind],
        "dpkg -i /pkg/hello.deb >/dev/null",
    )
    .ok();
    let out = sb
        .sh(
            &d,
            &["--fakeroot", "--overlay", pkg_arg],
            "dpkg-query -W -f '${Status}\\n' berth-hello; berth-hello",
        )
        .ok()
        .stdout();
    assert_eq!(out, "install ok installed\nhello from a package\n");
    // As the user too, without --fakeroot.
    assert_eq!(
        sb.sh(&d, &["--overlay", &format!("{pkg_arg}:ro")], "berth-hello")
            .ok()
            .stdout(),
        "hello from a package\n"
    );
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn an_overlay_has_one_writer_at_a_time() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let d = sb.debian();
    let ov = sb.dir.path().join("ov");
    let ov_arg = ov.to_str().unwrap().to_string();
    let ro = format!("{ov_arg}:ro");
    // :ro of a directory no run has made is refused.
    sb.sh(&d, &["--overlay", &ro], "true")
        .fails(125, "has no upper/ directory");
    let mut writer = sb
        .berth(&[
            "run",
            "--entrypoint",
            "",
            "--overlay",
            &ov_arg,
            &d,
            "/bin/sh",
            "-c",
            "echo ready; read x || true",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let _out = wait_ready(&mut writer);
    for arg in [&ov_arg, &ro] {
        sb.sh(&d, &["--overlay", arg], "true")
            .fails(125, "is in use by another container");
    }
    drop(writer.stdin.take());
    assert!(writer.wait().unwrap().success());
    // Readers share it.
    let readers = sb.spawn_berths(4, |_| {
        [
            "run",
            "--entrypoint",
            "",
            "--overlay",
            &ro,
            &d,
            "/bin/sh",
            "-c",
            "sleep 0.3; echo read",
        ]
        .map(String::from)
        .to_vec()
    });
    for out in outputs(readers) {
        assert_eq!(out.ok().stdout(), "read\n");
    }
    // Not with a shared container, and not a path overlayfs cannot carry.
    sb.sh(&d, &["--overlay", &ov_arg, "--shared", "k"], "true")
        .fails(125, "--overlay is for a container of its own");
    sb.sh(&d, &["--overlay", "/tmp/a,b"], "true")
        .fails(125, "overlayfs's options cannot carry");
}
