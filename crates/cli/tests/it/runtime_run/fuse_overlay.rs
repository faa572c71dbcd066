//! Writable roots without kernel overlayfs (issue 20): where the kernel
//! refuses overlayfs in a user namespace (before 5.11), a writable run's
//! layer is served by fuse-overlayfs, and read-only runs keep binds-only
//! roots; `[runtime] overlay = "fuse"` uses fuse-overlayfs for every root.
//! This kernel allows overlayfs, so its refusal is injected
//! (`BERTH_FAULT_REFUSE_OVERLAY`, a fault named as such); fuse-overlayfs
//! is Debian's.

use super::overlay_setting;
use crate::harness::*;
use crate::need_env;

/// The root's file system type, then the script's output.
fn fstype_then(script: &str) -> String {
    format!("findmnt -n -o FSTYPE /; {script}")
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn where_the_kernel_refuses_overlay_writable_runs_use_fuse_overlayfs() {
    let env = need_env!();
    let mut sb = Sandbox::new(env);
    let d = sb.debian();
    sb.wait_keepers_gone();
    overlay_setting(&sb, "auto");
    sb.extra_env
        .push(("BERTH_FAULT_REFUSE_OVERLAY".into(), "1".into()));

    // Read-only: a binds-only root, no server.
    let out = sb.sh(&d, &[], &fstype_then("true")).ok();
    assert_eq!(out.stdout(), "tmpfs\n");

    // Writable: fuse-overlayfs, its server outside the container's PIDs
    // (the command is PID 2 under --pid, as with the kernel's overlay).
    let out = sb
        .sh(
            &d,
            &["--writable", "--pid"],
            &fstype_then(
                "echo $$; echo new > /etc/new && cat /etc/new; rm /etc/debian_version; \
                 test -e /etc/debian_version || echo gone; \
                 mkdir -p /opt/a && touch /opt/a/f && ls /opt/a",
            ),
        )
        .ok();
    assert_eq!(
        out.stdout(),
        "fuse.fuse-overlayfs\n2\nnew\ngone\nf\n",
        "{}",
        out.stderr()
    );

    // A persistent overlay keeps the changes for the next run.
    let ov = sb.dir.path().join("ov");
    let ov = ov.to_str().unwrap();
    sb.sh(&d, &["--overlay", ov], "echo kept > /etc/berth-note")
        .ok();
    let out = sb
        .sh(&d, &["--overlay", ov], &fstype_then("cat /etc/berth-note"))
        .ok();
    assert_eq!(out.stdout(), "fuse.fuse-overlayfs\nkept\n");

    // A directory stays with the overlay that wrote it (their marks
    // differ): fuse-overlayfs serves this one where the kernel's overlay
    // works, and one the kernel wrote is refused where only
    // fuse-overlayfs could serve it.
    let fault = sb.extra_env.pop().unwrap();
    let out = sb
        .sh(&d, &["--overlay", ov], &fstype_then("cat /etc/berth-note"))
        .ok();
    assert_eq!(out.stdout(), "fuse.fuse-overlayfs\nkept\n");
    let by_kernel = sb.dir.path().join("ov-kernel");
    let by_kernel = by_kernel.to_str().unwrap();
    let out = sb
        .sh(
            &d,
            &["--overlay", by_kernel],
            &fstype_then("rm /etc/debian_version"),
        )
        .ok();
    assert_eq!(out.stdout(), "overlay\n");
    sb.extra_env.push(fault);
    sb.run(&["run", "--overlay", by_kernel, &d, "true"]).fails(
        125,
        "it was written through kernel overlayfs, and fuse-overlayfs would misread",
    );

    // A shared container's layer outlives the process that made it: a
    // second run of the key sees the first one's file.
    let shared = |script: &str| {
        sb.sh(
            &d,
            &["--shared", "fw", "--writable", "--linger", "5"],
            script,
        )
        .ok()
        .stdout()
    };
    assert_eq!(
        shared("echo one > /etc/shared-note; findmnt -n -o FSTYPE /"),
        "fuse.fuse-overlayfs\n"
    );
    assert_eq!(shared("cat /etc/shared-note"), "one\n");

    // Every server leaves with the last container that holds its mount.
    sb.wait_keepers_gone();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let servers = || {
        sb.processes()
            .into_iter()
            .filter(|(_, cmd)| cmd.contains("fuse-overlayfs"))
            .collect::<Vec<_>>()
    };
    while !servers().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(servers(), vec![]);

    // Without the program, the refusal says what to install.
    sb.extra_env.push((
        "BERTH_FUSE_OVERLAYFS".into(),
        "/nonexistent/fuse-overlayfs".into(),
    ));
    sb.run(&["run", "--writable", &d, "true"])
        .fails(125, "this kernel refuses overlayfs in a user namespace")
        .fails(125, "cannot start /nonexistent/fuse-overlayfs")
        .fails(125, "apt-get install fuse-overlayfs");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn overlay_fuse_serves_every_root() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let d = sb.debian();
    sb.wait_keepers_gone();
    overlay_setting(&sb, "fuse");
    // Read-only runs too, and the root stays read-only; binds and the
    // working directory are made in it.
    let data = sb.dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    sb.chown_to_user(&data);
    let vol = format!("{}:/scratch/job", data.display());
    let out = sb
        .sh(
            &d,
            &["-v", &vol, "-w", "/opt/work"],
            &fstype_then(
                "pwd; touch /x 2>&1 | grep -c 'Read-only'; echo ok > /scratch/job/out; \
                 python3 -c 'print(6*7)'",
            ),
        )
        .ok();
    assert_eq!(
        out.stdout(),
        "fuse.fuse-overlayfs\n/opt/work\n1\n42\n",
        "{}",
        out.stderr()
    );
    assert_eq!(std::fs::read_to_string(data.join("out")).unwrap(), "ok\n");

    // berth doctor says who serves the overlay.
    let out = sb.run(&["doctor"]).ok().stdout();
    assert!(
        out.lines()
            .any(|l| l.contains("ok    fuse-overlayfs") && l.contains("serves the writable layer")),
        "{out}"
    );
}
