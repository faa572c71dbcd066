//! Container escapes tried as the unprivileged user, each refused: a bind
//! target through the image's absolute symlink, device nodes, berth's own
//! process through /proc (its binary, its descriptors), and writing the
//! image. (Setuid programs, leaked descriptors and host files bound in are
//! in runtime_run::security_settings_hold.)

use std::fs;
use std::path::Path;

use crate::harness::Sandbox;
use crate::need_env;

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_bind_target_through_the_images_absolute_symlink_stays_inside() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let d = sb.debian();
    // The image's /var/run is a symlink to /run: resolved on the host's
    // side, a bind under it would land in the host's /run.
    let name = format!("berth-escape-{}", std::process::id());
    let src = sb.dir.path().join("payload");
    fs::write(&src, "inside\n").unwrap();
    sb.chown_to_user(&src);
    let bind = format!("{}:/var/run/{name}", src.display());
    let out = sb
        .sh(&d, &["-v", &bind], &format!("cat /run/{name}"))
        .ok()
        .stdout();
    assert_eq!(out, "inside\n");
    assert!(
        !Path::new("/run").join(&name).exists(),
        "the bind escaped to the host's /run"
    );
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn device_nodes_berths_process_and_the_image_are_out_of_reach() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let d = sb.debian();
    let out = sb
        .sh(
            &d,
            &["--writable"],
            "mknod /tmp/null2 c 1 3 2>/dev/null && echo made || echo refused; \
         mknod /dev/sda0 b 8 0 2>/dev/null && echo made || echo refused",
        )
        .ok()
        .stdout();
    assert_eq!(out, "refused\nrefused\n", "device nodes");
    // berth's supervising process (the command's parent, in the host's PID
    // namespace): neither its binary nor its descriptors (CVE-2019-5736,
    // CVE-2024-21626).
    let out = sb
        .sh(
            &d,
            &[],
            "p=$PPID; cat /proc/$p/exe >/dev/null 2>&1 && echo read || echo refused; \
         echo x >> /proc/$p/exe 2>/dev/null && echo wrote || echo refused; \
         ls /proc/$p/fd >/dev/null 2>&1 && echo listed || echo refused; \
         ls -l /proc/$p/cwd >/dev/null 2>&1 && echo cwd || echo refused",
        )
        .ok()
        .stdout();
    assert_eq!(
        out, "refused\nrefused\nrefused\nrefused\n",
        "berth's process"
    );
    // The image, from inside: read-only, also for a file its owner could
    // write outside (the mount is the image's, not the store's file).
    let out = sb
        .sh(
            &d,
            &[],
            "echo x > /bin/ls 2>/dev/null && echo wrote || echo refused; \
         chmod u+w /bin/ls 2>/dev/null && echo chmod || echo refused",
        )
        .ok()
        .stdout();
    assert_eq!(out, "refused\nrefused\n", "the image");
}

/// A second unprivileged user (created here when missing).
fn other_user() -> Option<(u32, u32)> {
    let name = "berthtest2";
    let id = |flag: &str| -> Option<u32> {
        let o = std::process::Command::new("id")
            .args([flag, name])
            .output()
            .ok()?;
        String::from_utf8_lossy(&o.stdout).trim().parse().ok()
    };
    if id("-u").is_none() {
        let st = std::process::Command::new("useradd")
            .args(["--no-create-home", "--shell", "/usr/sbin/nologin", name])
            .status()
            .ok()?;
        if !st.success() {
            return None;
        }
    }
    Some((id("-u")?, id("-g")?))
}

#[test]
#[cfg_attr(
    not(berth_it_root),
    ignore = "needs root and the test fixtures: sudo bash tests/setup/setup.sh, then the tests as root"
)]
fn another_users_private_store_is_out_of_reach() {
    let env = need_env!();
    // Root, to run as a second user.
    env.test_user();
    let sb = Sandbox::new(env);
    let Some((uid, gid)) = other_user() else {
        panic!("cannot create the second test user berthtest2");
    };
    // A store berth creates itself is private (0700).
    let store = sb.dir.path().join("private/store");
    let s = store.to_string_lossy().into_owned();
    let img = format!("{}/berth-test/layers:latest", env.anon());
    sb.run(&["--store", &s, "pull", "-q", "--tls-verify=false", &img])
        .ok();
    let sqfs = std::path::PathBuf::from(
        sb.run(&["--store", &s, "inspect", &img]).ok().json()["squashfs"]["path"]
            .as_str()
            .unwrap(),
    );
    use std::os::unix::process::CommandExt;
    let as_other = |args: &[&str]| {
        let mut c = sb.berth(args);
        c.uid(uid)
            .gid(gid)
            .env("HOME", "/tmp")
            .env_remove("XDG_RUNTIME_DIR");
        crate::harness::Out(c.output().unwrap())
    };
    let out = as_other(&["--store", &s, "images"]);
    assert_ne!(out.code(), 0, "{}", out.stdout());
    assert!(
        out.stderr().contains("ermission denied"),
        "{}",
        out.stderr()
    );
    let out = as_other(&["--store", &s, "run", &img, "true"]);
    assert_eq!(out.code(), 125, "{}", out.stderr());
    let read = std::process::Command::new("cat")
        .arg(&sqfs)
        .uid(uid)
        .gid(gid)
        .output()
        .unwrap();
    assert!(!read.status.success(), "the other user read the image file");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn berths_helpers_cannot_be_traced_from_a_container() {
    let env = need_env!();
    let mut sb = Sandbox::new(env);
    sb.extra_env.push(("BERTH_KEEPER_IDLE".into(), "10".into()));
    let d = sb.debian();
    sb.run(&["run", &d, "true"]).ok();
    // The keeper and its namespace holders (executed in the keeper's
    // user namespace, not dumpable); the squashfs server has no
    // capabilities.
    let keepers = sb.dir.path().join("run/berth/keepers");
    let dir = fs::read_dir(&keepers)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("pid").exists())
        .expect("a keeper");
    let pids: Vec<String> = ["pid", "identity.pid", "holder.pid"]
        .iter()
        .filter_map(|f| fs::read_to_string(dir.join(f)).ok())
        .map(|s| s.trim().to_string())
        .collect();
    assert_eq!(pids.len(), 3, "{pids:?}");
    let script: String = pids
        .iter()
        .map(|p| {
            format!(
                "cat /proc/{p}/environ >/dev/null 2>&1 && echo {p} environ || echo refused; \
                 readlink /proc/{p}/ns/mnt >/dev/null 2>&1 && echo {p} ns || echo refused; "
            )
        })
        .collect();
    let out = sb.sh(&d, &[], &script).ok().stdout();
    assert_eq!(out, "refused\n".repeat(6), "berth's helpers");
    // The keeper's child serving the image.
    let ppid = format!("PPid:\t{}\n", pids[0]);
    let server = fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| fs::read_to_string(e.path().join("status")).ok())
        .find(|st| {
            (st.starts_with("Name:\tberth-squashfs") || st.starts_with("Name:\tsquashfuse"))
                && st.contains(&ppid)
        });
    let status = server.expect("the keeper's squashfs server");
    assert!(status.contains("CapEff:\t0000000000000000"), "{status}");
    // With the test user's subordinate range it runs as an id of its own,
    // so the container (the user's id) cannot read or trace it either.
    let pid = status
        .lines()
        .find_map(|l| l.strip_prefix("Pid:\t"))
        .unwrap()
        .trim()
        .to_string();
    let uid_line = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .unwrap()
        .to_string();
    if let Some((uid, _, _)) = &env.user {
        assert!(!uid_line.contains(&format!("\t{uid}\t")), "{uid_line}");
    }
    let script = format!(
        "cat /proc/{pid}/environ >/dev/null 2>&1 && echo environ || echo refused; \
         kill -0 {pid} 2>/dev/null && echo signalled || echo refused"
    );
    let out = sb.sh(&d, &[], &script).ok().stdout();
    assert_eq!(out, "refused\nrefused\n", "the squashfs server");
}
