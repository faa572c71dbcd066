//! State that outlives a run: `--overlay DIR` keeps a container's changes
//! (files, deletions, a package dpkg installed under `--fakeroot`) for the
//! next run, one writer at a time; `DIR:ro` stacks them for many.
//! `--save` makes a squashfs file or a store image of the container.

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
        .fails(125, "--overlay and --save are for a container of its own");
    sb.sh(&d, &["--overlay", "/tmp/a,b"], "true")
        .fails(125, "overlayfs's options cannot carry");
}

/// Asserts that `dir` holds one entry: no partial file, spool or overlay.
fn only_the_saved_file(dir: &std::path::Path) {
    let left: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn save_makes_a_file_or_an_image_of_the_container() {
    let env = need_env!();
    let mut sb = Sandbox::new(env);
    let d = sb.debian();
    let deb = hello_deb(&sb);
    let bind = format!("{}:/pkg/hello.deb:ro", deb.display());
    let out_dir = sb.dir.path().join("saved");
    fs::create_dir_all(&out_dir).unwrap();
    sb.chown_to_user(&out_dir);
    let file = out_dir.join("hello.sqsh");
    let file_arg = file.to_str().unwrap().to_string();
    // A package, a file of another owner, a deletion and a directory
    // replaced by an empty one.
    let changes = "dpkg -i /pkg/hello.deb >/dev/null && touch /owned && chown 7:8 /owned && rm /etc/debian_version && rm -r /usr/share/doc && mkdir /usr/share/doc && echo changed";
    let out = sb
        .sh(
            &d,
            &["--fakeroot", "--save", &file_arg, "-v", &bind],
            changes,
        )
        .ok();
    assert_eq!(out.stdout(), "changed\n");
    assert!(
        out.stderr().contains("saved the container as"),
        "{}",
        out.stderr()
    );
    let look = "berth-hello; dpkg-query -W -f '${Status}\\n' berth-hello; stat -c %u:%g /owned; test -e /etc/debian_version && echo version || echo no-version; ls -A /usr/share/doc | wc -l";
    // Under root emulation (the fallbacks pass) the chown was faked.
    let owner = if fallbacks() { "0:0" } else { "7:8" };
    let expect = format!("hello from a package\ninstall ok installed\n{owner}\nno-version\n0\n");
    assert_eq!(
        sb.sh(&file_arg, &["--fakeroot"], look).ok().stdout(),
        expect
    );
    // Nothing of the run's temporary overlay or the spool is left.
    only_the_saved_file(&out_dir);

    // As an image in the store, with the image's settings kept.
    sb.sh(
        &d,
        &["--save", "saved/hello:1", "-v", &bind],
        "echo note > /tmp-note 2>/dev/null; mkdir -p /srv/app/extra",
    )
    .ok();
    let out = sb
        .run(&[
            "run",
            "--entrypoint",
            "",
            "saved/hello:1",
            "/bin/sh",
            "-c",
            "echo \"$GREETING\"; pwd; ls -d /srv/app/extra",
        ])
        .ok()
        .stdout();
    assert_eq!(out, "hello from the image\n/srv/app\n/srv/app/extra\n");
    let images = sb.run(&["images"]).ok().stdout();
    assert!(images.contains("localhost/saved/hello"), "{images}");

    // A failed save leaves the earlier file as it was, and says why: the
    // image's file amended (its blocks kept) on a full disk, ...
    let before = fs::read(&file).unwrap();
    let small = sb.dir.path().join("small");
    fs::create_dir_all(&small).unwrap();
    let size = format!("size={}", before.len() + (1 << 20));
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", &size, "tmpfs"])
        .arg(&small)
        .status()
        .unwrap();
    assert!(mounted.success());
    let small_file = small.join("hello.sqsh");
    fs::write(&small_file, &before).unwrap();
    sb.chown_to_user(&small);
    let full = sb
        .sh(
            &d,
            &["--save", small_file.to_str().unwrap()],
            "head -c 4M /dev/urandom > /big",
        )
        .fails(125, "No space left");
    let _ = full;
    let kept = fs::read(&small_file).unwrap();
    only_the_saved_file(&small);
    let _ = std::process::Command::new("umount").arg(&small).status();
    assert!(kept == before, "the earlier file changed");
    // ... and rewritten whole (the store's settings differ from the
    // image's) by a tar2sqfs that fails.
    sb.site_config("[squashfs]\nblock_size = 65536\n");
    sb.extra_env
        .push(("BERTH_TAR2SQFS".into(), "/bin/false".into()));
    sb.sh(&d, &["--save", &file_arg], "true")
        .fails(125, "--save");
    sb.extra_env.pop();
    sb.site_config("");
    assert_eq!(fs::read(&file).unwrap(), before);
    only_the_saved_file(&out_dir);
    // Not to a file in a missing directory.
    sb.sh(&d, &["--save", "/nonexistent/x.sqsh"], "true")
        .fails(125, "does not exist");
}
