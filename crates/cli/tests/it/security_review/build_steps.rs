//! `berth build`: COPY sources outside the build context (H3) and what a
//! RUN step can reach (H2, L8).

use std::fs;

use crate::harness::Sandbox;
use crate::need_env;

/// H3: COPY sources reached through symlinks of the build context that
/// point outside it (relative, far up, and absolute) stay inside the
/// context (as BuildKit resolves them): nothing of the user's files is
/// copied into the image.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn copy_through_context_symlinks_never_reads_outside_the_context() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let secret_dir = sb.home().join("private");
    fs::create_dir_all(&secret_dir).unwrap();
    fs::write(secret_dir.join("key"), "HOST-SECRET-KEY\n").unwrap();
    let ctx = sb.dir.path().join("ctx");
    fs::create_dir_all(ctx.join("sub")).unwrap();
    fs::write(ctx.join("sub/ok"), "inside\n").unwrap();
    let ln = |t: &str, n: &str| std::os::unix::fs::symlink(t, ctx.join(n)).unwrap();
    ln("../home/private", "rel-out");
    ln("../../../../../../../../..", "far-up");
    ln(secret_dir.to_str().unwrap(), "abs-out");
    ln("sub", "in");
    sb.chown_to_user(sb.dir.path());
    let up = sb.home().strip_prefix("/").unwrap().display().to_string();
    for (i, src) in [
        "rel-out/key".to_string(),
        format!("far-up/{up}/private/key"),
        "abs-out/key".to_string(),
        "abs-out".to_string(),
    ]
    .iter()
    .enumerate()
    {
        fs::write(
            ctx.join("Dockerfile"),
            format!("FROM scratch\nCOPY {src} /stolen\n"),
        )
        .unwrap();
        let tag = format!("h3-{i}");
        let out = sb.run(&["build", "-t", &tag, ctx.to_str().unwrap()]);
        assert_ne!(
            out.code(),
            0,
            "{src}: the build copied it: {}",
            out.stderr()
        );
        assert!(
            out.stderr().contains("not found in the build context"),
            "{src}: {}",
            out.stderr()
        );
        assert!(!out.stderr().contains("panicked"), "{}", out.stderr());
    }
    // Symlinks inside the context still work.
    fs::write(
        ctx.join("Dockerfile"),
        "FROM scratch\nCOPY in/ok /ok\nCOPY far-up/sub/ok /ok2\n",
    )
    .unwrap();
    sb.run(&["build", "-t", "h3-ok", ctx.to_str().unwrap()])
        .ok();
    let sqfs = sb.squashfs_of("h3-ok");
    let dest = sb.dir.path().join("unpacked");
    crate::harness::unsquash(&sqfs, &dest);
    assert_eq!(fs::read_to_string(dest.join("ok")).unwrap(), "inside\n");
    assert_eq!(fs::read_to_string(dest.join("ok2")).unwrap(), "inside\n");
}

/// H2, L8: a Dockerfile's RUN step looked for the build worker in /proc
/// (`__build-worker`) and read the user's files through
/// `/proc/WORKER/root`, the host's root. Now the step has its own PID
/// namespace and procfs (no worker there; the worker is not dumpable
/// either), no_new_privs, none of the worker's descriptors, and a /sys that
/// is read-only all the way down.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_run_step_cannot_reach_the_build_worker_or_the_host() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let secret = sb.home().join("secret.txt");
    fs::write(&secret, "HOST-SECRET-0042\n").unwrap();
    let base = format!("{}/berth-test/layers:latest", env.anon());
    let ctx = sb.dir.path().join("ctx-h2");
    fs::create_dir_all(&ctx).unwrap();
    let script = format!(
        "for p in /proc/[0-9]*; do grep -qa '__build-worke[r]' $p/cmdline 2>/dev/null && echo WORKER-SEEN; \
         cat $p/root{s} 2>/dev/null; done; \
         grep -q 'NoNewPrivs:.*1' /proc/self/status || echo NO-NO-NEW-PRIVS; \
         ls -l /proc/$$/fd | grep -- '->' | grep -v -e /dev/ -e pipe: -e 'proc/' | sed 's/^/LEAKED-FD /'; \
         mkdir /sys/fs/cgroup/berth-h2 2>/dev/null && echo SYS-WRITABLE; \
         grep -E ' /sys(/| )' /proc/self/mountinfo | while read -r a b c d e f rest; do \
           case $f in ro*) ;; *) echo SYS-RW $e;; esac; done; echo STEP-RAN",
        s = secret.display()
    );
    fs::write(
        ctx.join("Dockerfile"),
        format!("FROM {base}\nRUN {script}\n"),
    )
    .unwrap();
    sb.chown_to_user(sb.dir.path());
    let out = sb.run(&[
        "build",
        "--tls-verify=false",
        "-t",
        "h2",
        ctx.to_str().unwrap(),
    ]);
    let _ = fs::remove_dir("/sys/fs/cgroup/berth-h2");
    // The step's own output, without the build's echo of its text.
    let log: String = out
        .stderr()
        .lines()
        .filter(|l| !l.starts_with("STEP "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(out.code(), 0, "{log}");
    assert!(log.contains("STEP-RAN"), "{log}");
    for bad in [
        "WORKER-SEEN",
        "HOST-SECRET",
        "NO-NO-NEW-PRIVS",
        "LEAKED-FD",
        "SYS-WRITABLE",
        "SYS-RW",
    ] {
        assert!(!log.contains(bad), "{bad}: {log}");
    }
}
