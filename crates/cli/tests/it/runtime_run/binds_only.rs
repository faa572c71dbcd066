//! Roots without overlayfs (issue 20): where the kernel refuses overlayfs
//! in a user namespace (before 5.11) a read-only run's root is a tmpfs of
//! read-only binds of the image's entries, and a mount point missing in a
//! read-only image directory is made by covering that directory with a
//! tmpfs that binds its entries back. `[runtime] overlay = "none"` forces
//! it here (this kernel allows overlayfs). The tree the command sees must
//! be the image's, entry for entry; writes must fail; a writable run must
//! be refused saying why and what to do.

use super::overlay_setting;
use crate::harness::*;
use crate::need_env;

/// What a listing of the image's directories shows, owners aside (a
/// copied symlink is the run's own) and the size of directories (a
/// covered directory is a tmpfs).
const LISTING: &str = "{ find / /etc /usr/share /usr/lib -mindepth 1 -maxdepth 1 ! -type d \
     -printf '%p %y %m %s %l\\n'; find / /etc /usr/share /usr/lib -mindepth 1 -maxdepth 1 \
     -type d -printf '%p %m\\n'; } | sort | md5sum";

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_root_without_overlay_shows_the_image_and_makes_mount_points() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let d = sb.debian();
    let data = sb.dir.path().join("data");
    std::fs::create_dir_all(data.join("sub")).unwrap();
    std::fs::write(data.join("sub/f"), "bound\n").unwrap();
    sb.chown_to_user(&data);
    let (vol1, vol2) = (
        format!("{}:/usr/share/berth-data:ro", data.display()),
        format!("{}:/scratch/job", data.display()),
    );
    let volumes = ["-v", &vol1, "-v", &vol2, "-w", "/opt/work/dir"];
    // The same listing through the overlay, for comparison.
    let reference = sb.sh(&d, &volumes, LISTING).ok().stdout();

    // The keeper's prepared root follows the setting it started with.
    sb.wait_keepers_gone();
    overlay_setting(&sb, "none");
    let script = format!(
        "findmnt -n -o FSTYPE /; {LISTING}; cat /etc/debian_version; readlink /bin; \
         cat /usr/share/berth-data/sub/f /scratch/job/sub/f; pwd; \
         python3 -c 'import json; print(json.dumps(6*7))'; \
         touch /x 2>&1 | grep -c 'Read-only'; touch /usr/share/x 2>&1 | grep -c 'Read-only'; \
         touch /usr/share/berth-data/y 2>&1 | grep -c 'Read-only'; echo ok > /scratch/job/out"
    );
    // A run of its own (a PID namespace: no prepared root) and one on
    // the keeper's prepared root, which adds its mount points to a copy.
    for extra in [&["--pid"][..], &[][..]] {
        let mut args = extra.to_vec();
        args.extend(volumes);
        let out = sb.sh(&d, &args, &script).ok();
        let stdout = out.stdout();
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.first(), Some(&"tmpfs"), "{extra:?}: {stdout}");
        assert_eq!(
            lines.get(1).copied(),
            reference.lines().next(),
            "the image's entries, as the overlay shows them ({extra:?})"
        );
        assert!(lines[2].starts_with("12."), "{}", out.stdout());
        assert_eq!(
            &lines[3..],
            [
                "usr/bin",
                "bound",
                "bound",
                "/opt/work/dir",
                "42",
                "1",
                "1",
                "1"
            ],
            "{extra:?}"
        );
        assert_eq!(std::fs::read_to_string(data.join("out")).unwrap(), "ok\n");
        std::fs::remove_file(data.join("out")).unwrap();
    }

    // A working directory made in a cover that a bind then covers: the
    // bind (read-write) is not sealed with the cover.
    let rw = sb.dir.path().join("rw");
    std::fs::create_dir_all(rw.join("sub")).unwrap();
    sb.chown_to_user(&rw);
    let vol = format!("{}:/usr/share/doc", rw.display());
    let out = sb
        .sh(
            &d,
            &["-v", &vol, "-w", "/usr/share/doc/sub"],
            "echo w > /usr/share/doc/w && pwd",
        )
        .ok();
    assert_eq!(out.stdout(), "/usr/share/doc/sub\n");
    assert_eq!(std::fs::read_to_string(rw.join("w")).unwrap(), "w\n");

    // A writable run is refused, saying why and what to do.
    for flags in [&["--writable"][..], &["--name", "kept"][..]] {
        let mut args = vec!["run"];
        args.extend_from_slice(flags);
        args.extend([d.as_str(), "true"]);
        sb.run(&args)
            .fails(125, "needs a layer stacked on the read-only image")
            .fails(125, "overlay = \"none\"");
    }
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_mount_point_missing_in_a_read_only_bind_is_made_by_a_cover() {
    // Any root: a bind under a read-only bind whose directory lacks the
    // mount point (Docker refuses it; berth covers the directory).
    let env = need_env!();
    let sb = Sandbox::new(env);
    let d = sb.debian();
    let (outer, inner) = (sb.dir.path().join("outer"), sb.dir.path().join("inner"));
    std::fs::create_dir_all(&outer).unwrap();
    std::fs::create_dir_all(&inner).unwrap();
    std::fs::write(outer.join("kept"), "outer\n").unwrap();
    std::os::unix::fs::symlink("/etc/debian_version", outer.join("link")).unwrap();
    std::fs::write(inner.join("f"), "inner\n").unwrap();
    // A read-write bind on a directory of the read-only one, made before
    // the cover: it stays read-write.
    let rw = sb.dir.path().join("rw");
    std::fs::create_dir_all(outer.join("sub")).unwrap();
    std::fs::create_dir_all(&rw).unwrap();
    for dir in [&outer, &inner, &rw] {
        sb.chown_to_user(dir);
    }
    let out = sb
        .sh(
            &d,
            &[
                "-v",
                &format!("{}:/data:ro", outer.display()),
                "-v",
                &format!("{}:/data/sub", rw.display()),
                "-v",
                &format!("{}:/data/new", inner.display()),
            ],
            "cat /data/kept /data/new/f; readlink /data/link; head -c 3 /data/link; echo; \
             touch /data/kept 2>&1 | grep -c Read-only; echo w > /data/sub/w && cat /data/sub/w",
        )
        .ok();
    assert_eq!(
        out.stdout(),
        "outer\ninner\n/etc/debian_version\n12.\n1\nw\n"
    );
    assert!(
        !outer.join("new").exists(),
        "nothing is made in the read-only bind's host directory"
    );
}
