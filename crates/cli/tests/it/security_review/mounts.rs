//! The container's view of mounts: read-only binds all the way down (M7),
//! berth's runtime directory (M1), /dev (L5), the keeper's mounts under
//! `--fakeroot` (L4).

use std::fs;
use std::process::Command;

use super::image_with_etc;
use crate::harness::Sandbox;
use crate::need_env;

/// Unmounts a host mount the test made, however the test ends.
struct HostMount(std::path::PathBuf);

impl Drop for HostMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// M7: a `:ro` bind of a directory with a mount inside it (an NFS
/// automount, say; here a tmpfs the test mounts as root) used to be
/// read-only at the top only, so the container could write the submount;
/// and /sys's submounts (/sys/fs/cgroup, ...) stayed writable. Now every
/// mount below a read-only bind and below /sys is read-only, nosuid and
/// nodev.
#[test]
#[cfg_attr(
    not(berth_it_root),
    ignore = "needs root and the test fixtures: sudo bash tests/setup/setup.sh, then the tests as root"
)]
fn a_read_only_bind_is_read_only_all_the_way_down() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let data = sb.dir.path().join("data");
    fs::create_dir_all(data.join("sub")).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "mode=0777", "m7"])
        .arg(data.join("sub"))
        .status()
        .unwrap();
    assert!(st.success(), "mounting the test's tmpfs failed");
    let _guard = HostMount(data.join("sub"));
    sb.chown_to_user(&data);
    let img = image_with_etc(&sb, "m7", "true");
    let bind = format!("{}:/data:ro", data.display());
    let out = sb.run(&[
        "run",
        "-v",
        &bind,
        &img,
        "sh",
        "-c",
        "echo x > /data/sub/planted && echo WROTE-SUB; echo x > /data/top && echo WROTE-TOP; \
         grep -E ' /sys(/| )' /proc/self/mountinfo | while read -r a b c d e f rest; do \
           case $f in ro*) ;; *) echo \"SYS-RW $e\";; esac; done; true",
    ]);
    let all = format!("{}{}", out.stdout(), out.stderr());
    assert_eq!(out.code(), 0, "{all}");
    assert!(
        !all.contains("WROTE-SUB"),
        "the submount was writable: {all}"
    );
    assert!(!all.contains("WROTE-TOP"), "the bind was writable: {all}");
    assert!(!all.contains("SYS-RW"), "a /sys mount is writable: {all}");
    assert!(
        !data.join("sub/planted").exists(),
        "a file was written through the read-only bind"
    );
}

/// M1: berth's runtime directory (keeper and container records, the node's
/// image cache) sat under host /tmp, which every container sees: an image
/// could plant a record there that a later run trusted. Now the directory
/// is covered by an empty read-only tmpfs in every container.
#[test]
#[cfg_attr(
    not(berth_it_root),
    ignore = "needs root and the test fixtures: sudo bash tests/setup/setup.sh, then the tests as root"
)]
fn a_container_cannot_see_or_write_berths_runtime_directory() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let img = image_with_etc(&sb, "m1", "true");
    let state = sb.dir.path().join("run/berth");
    for extra in [&[][..], &["--no-home"][..], &["-v", "/tmp:/scratch"][..]] {
        let mut args = vec!["run"];
        args.extend_from_slice(extra);
        let s = state.display();
        let script = format!(
            "ls {s} /scratch/{rel} 2>/dev/null | grep -v : | grep . && echo STATE-LISTED; \
             mkdir -p {s}/images 2>/dev/null && echo x > {s}/images/planted.json && echo STATE-WRITTEN; \
             true",
            rel = state.strip_prefix("/tmp").unwrap().display()
        );
        args.extend_from_slice(&[&img, "sh", "-c", &script]);
        let out = sb.run(&args);
        let all = format!("{}{}", out.stdout(), out.stderr());
        assert_eq!(out.code(), 0, "{extra:?}: {all}");
        assert!(!all.contains("STATE-LISTED"), "{extra:?}: {all}");
        assert!(!all.contains("STATE-WRITTEN"), "{extra:?}: {all}");
        assert!(!state.join("images/planted.json").exists(), "{extra:?}");
    }
    // Without XDG_RUNTIME_DIR (usual on compute nodes) the directory is
    // $TMPDIR/berth-UID, worked out before berth enters its namespaces
    // (inside them it is uid 0): hidden too.
    let tmpdir = sb.dir.path().join("tmpdir");
    fs::create_dir_all(&tmpdir).unwrap();
    sb.chown_to_user(&tmpdir);
    let (uid, _, _) = sb.env.test_user().clone();
    let state = tmpdir.join(format!("berth-{uid}"));
    let s = state.display();
    let out = sb
        .berth(&[
            "run",
            &img,
            "sh",
            "-c",
            &format!(
                "ls {s} | grep . && echo STATE-LISTED; echo x > {s}/planted && echo STATE-WRITTEN; true"
            ),
        ])
        .env_remove("XDG_RUNTIME_DIR")
        .env("TMPDIR", &tmpdir)
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{all}");
    assert!(state.join("keepers").is_dir(), "no state in {s}: {all}");
    assert!(!all.contains("STATE-LISTED"), "{all}");
    assert!(!all.contains("STATE-WRITTEN"), "{all}");
}

/// L5: every default run of an image shares the keeper's prepared root,
/// whose /dev was one writable tmpfs and one devpts: a container could
/// replace `/dev/stdout` or drop files for the next run, and open the pty
/// slaves of another. Now /dev is read-only and each run mounts its own
/// devpts.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn one_container_cannot_change_dev_for_the_next_or_reach_its_terminals() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    sb.pull("debian-python:latest");
    let img = format!("{}/berth-test/debian-python:latest", env.anon());
    let out = sb.run(&[
        "run",
        &img,
        "sh",
        "-c",
        "ln -sf /tmp/x /dev/stdout 2>/dev/null && echo REPLACED; \
         touch /dev/l5-planted 2>/dev/null && echo PLANTED; \
         echo /dev/null works > /dev/null && echo NULL-OK",
    ]);
    let all = format!("{}{}", out.stdout(), out.stderr());
    assert_eq!(out.code(), 0, "{all}");
    assert!(!all.contains("REPLACED"), "{all}");
    assert!(!all.contains("PLANTED"), "{all}");
    assert!(all.contains("NULL-OK"), "device nodes stay writable: {all}");
    let out = sb.run(&["run", &img, "ls", "/dev/l5-planted"]);
    assert_ne!(out.code(), 0, "{}", out.stdout());
    // One run holds a pty; the next sees none of its terminals and still
    // gets its own.
    let mut holder = sb
        .berth(&[
            "run",
            &img,
            "python3",
            "-c",
            "import os, pty, sys, time; m, s = pty.openpty(); print(os.ttyname(s), flush=True); time.sleep(60)",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.starts_with("/dev/pts/"), "{line:?}");
    let out = sb
        .run(&[
            "run",
            &img,
            "python3",
            "-c",
            "import os, pty; print(sorted(os.listdir('/dev/pts'))); m, s = pty.openpty(); print(os.ttyname(s))",
        ])
        .ok();
    let _ = holder.kill();
    let _ = holder.wait();
    let first = out.stdout().lines().next().unwrap_or_default().to_string();
    assert_eq!(
        first,
        "['ptmx']",
        "another run's terminal is visible: {}",
        out.stdout()
    );
    assert!(out.stdout().contains("/dev/pts/0"), "{}", out.stdout());
}

/// L4: a `--fakeroot` container was root, with every capability, in the
/// keeper's user namespace: it could enter the keeper's mount namespace (a
/// copy of the host's) or walk `/proc/KEEPER/root` to the user's files past
/// `--no-home`, and remount the prepared root read-write for later runs.
/// Now it is root in a namespace nested in the keeper's (same ids, no
/// capability above), with a keeper of its own.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_fakeroot_container_cannot_enter_or_remount_what_its_keeper_holds() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    // Outside every default bind (home, /tmp, the working directory).
    let private = tempfile::Builder::new()
        .prefix("berth-l4-")
        .tempdir_in("/var/tmp")
        .unwrap();
    sb.chown_to_user(private.path());
    let secret = private.path().join("l4-secret.txt");
    fs::write(&secret, "HOME-SECRET-L4\n").unwrap();
    sb.chown_to_user(&secret);
    let img = image_with_etc(&sb, "l4", "true");
    let s = secret.display();
    let script = format!(
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q '^berth __keeper .* fakeroot ' && k=${{p#/proc/}}; done; \
         [ -n \"$k\" ] || echo NO-KEEPER-SEEN; \
         nsenter -t $k -m cat {s} 2>&1 | grep -q HOME-SECRET && echo ENTERED-KEEPER; \
         cat /proc/$k/root{s} 2>&1 | grep -q HOME-SECRET && echo WALKED-KEEPER-ROOT; \
         id -u"
    );
    let out = sb.run(&["run", "--fakeroot", "--no-home", &img, "sh", "-c", &script]);
    let all = format!("{}{}", out.stdout(), out.stderr());
    assert_eq!(out.code(), 0, "{all}");
    assert!(
        !all.contains("NO-KEEPER-SEEN"),
        "the attack found no keeper: {all}"
    );
    assert!(!all.contains("ENTERED-KEEPER"), "{all}");
    assert!(!all.contains("WALKED-KEEPER-ROOT"), "{all}");
    assert_eq!(out.stdout().lines().last(), Some("0"), "still root: {all}");
    // The prepared root cannot be made writable for the runs after it.
    let out = sb.run(&[
        "run",
        "--fakeroot",
        &img,
        "sh",
        "-c",
        "mount -o remount,rw / 2>/dev/null && echo x > /l4-planted && echo REMOUNTED; true",
    ]);
    assert!(!out.stdout().contains("REMOUNTED"), "{}", out.stdout());
    let out = sb
        .run(&[
            "run",
            "--fakeroot",
            &img,
            "sh",
            "-c",
            "cat /l4-planted 2>&1; true",
        ])
        .ok();
    assert!(
        !out.stdout().lines().any(|l| l.trim() == "x"),
        "{}",
        out.stdout()
    );
    // Identity and fakeroot runs have keepers of their own.
    sb.run(&["run", &img, "sh", "-c", ":"]).ok();
    let keepers: Vec<String> = fs::read_dir(sb.dir.path().join("run/berth/keepers"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    assert!(
        keepers.iter().any(|k| k.ends_with("-fakeroot"))
            && keepers.iter().any(|k| k.ends_with("-user")),
        "{keepers:?}"
    );
}
