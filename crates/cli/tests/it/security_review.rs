//! Findings of the security review (../shared/notes/reviews/security.md),
//! each tried as the review describes it, as the unprivileged user: the
//! attack fails. Image identity files (M2, L12) and COPY sources outside
//! the build context (H3).

use std::fs;
use std::process::Command;

use crate::harness::Sandbox;
use crate::need_env;

/// Pushes a busybox image made with umoci whose `/etc` the shell snippet
/// `etc` fills (run in the rootfs's etc/, as root), and returns its
/// reference.
fn image_with_etc(sb: &Sandbox, name: &str, etc: &str) -> String {
    let work = sb.dir.path().join(format!("img-{name}"));
    fs::create_dir_all(&work).unwrap();
    let tag = format!("{}-{}", std::process::id(), name);
    let sh = format!(
        "set -e; cd {w}; umoci init --layout layout; umoci new --image layout:t; \
         umoci unpack --image layout:t bundle >/dev/null; r=bundle/rootfs; \
         mkdir -p $r/bin $r/etc $r/proc $r/tmp; cp /bin/busybox $r/bin/busybox; \
         for a in sh cat grep; do ln -s busybox $r/bin/$a; done; \
         (cd $r/etc && {etc}); \
         umoci repack --image layout:t bundle >/dev/null; \
         umoci config --image layout:t --config.env PATH=/bin >/dev/null; \
         skopeo --insecure-policy copy -q --dest-tls-verify=false oci:layout:t \
           docker://{reg}/berth-test/identity:{tag}",
        w = work.display(),
        reg = sb.env.anon(),
    );
    let st = Command::new("sh").arg("-c").arg(&sh).status().unwrap();
    assert!(st.success(), "making the {name} image failed");
    let r = format!("{}/berth-test/identity:{tag}", sb.env.anon());
    sb.run(&["pull", "--tls-verify=false", &r]).ok();
    r
}

/// M2: the image's /etc/passwd -> /proc/self/environ and /etc/group -> a
/// host file of the user's. berth used to read both on the host (before
/// pivot_root) and bind their content into the container; now it follows
/// them inside the image, where they lead nowhere, and says so.
#[test]
fn an_images_identity_file_symlinks_do_not_reach_host_files() {
    let env = need_env!();
    let mut sb = Sandbox::new(env);
    let secret = sb.home().join("secret.txt");
    fs::write(&secret, "HOST-SECRET-4711\n").unwrap();
    sb.chown_to_user(&secret);
    sb.extra_env
        .push(("BERTH_TEST_TOKEN".into(), "token-leak-0815".into()));
    for (name, etc) in [
        ("environ", "ln -s /proc/self/environ passwd".to_string()),
        ("hostfile", format!("ln -s {} group", secret.display())),
    ] {
        let img = image_with_etc(&sb, name, &etc);
        let out = sb.run(&["run", "--no-home", &img, "cat", "/etc/passwd", "/etc/group"]);
        let all = format!("{}{}", out.stdout(), out.stderr());
        assert!(
            !all.contains("HOST-SECRET"),
            "{name}: a host file reached the container: {all}"
        );
        assert!(
            !all.contains("token-leak"),
            "{name}: berth's environment leaked: {all}"
        );
        assert_ne!(out.code(), 0, "{name}: {all}");
        assert!(
            all.contains("is a symlink to something the image does not have"),
            "{name}: {all}"
        );
    }
    // A symlink that leads somewhere inside the image is read there.
    let img = image_with_etc(
        &sb,
        "inside",
        "mkdir -p ../opt && echo 'imageuser:x:4242:4242::/:/bin/sh' > ../opt/passwd && ln -s /opt/passwd passwd",
    );
    let out = sb
        .run(&["run", "--no-home", &img, "cat", "/etc/passwd"])
        .ok();
    let uid = env.user.as_ref().map(|u| u.0).unwrap_or(0);
    assert!(
        out.stdout().contains("imageuser:x:4242:"),
        "{}",
        out.stdout()
    );
    assert!(
        out.stdout().contains(&format!(":x:{uid}:")),
        "{}",
        out.stdout()
    );
}

/// M2: a FIFO (or anything but a regular file) and an oversized file as
/// /etc/passwd are refused with a clear message, not read (a FIFO hung the
/// run, /dev/zero exhausted it).
#[test]
fn an_images_identity_file_must_be_a_small_regular_file() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let fifo = image_with_etc(&sb, "fifo", "mkfifo passwd");
    let big = image_with_etc(
        &sb,
        "big",
        "head -c 5000000 /dev/zero | tr '\\0' x > passwd",
    );
    for (img, needle) in [(fifo, "is not a regular file"), (big, "is 5000000 bytes")] {
        let start = std::time::Instant::now();
        // Bounded: before the fix the FIFO hung berth for good.
        let berth = env.berth.display().to_string();
        let out = crate::harness::Out(
            sb.command(
                std::path::Path::new("/usr/bin/timeout"),
                &["60", &berth, "run", &img, "true"],
            )
            .output()
            .unwrap(),
        );
        assert_ne!(out.code(), 0, "{img}: {}", out.stderr());
        assert!(out.stderr().contains("/etc/passwd"), "{}", out.stderr());
        assert!(out.stderr().contains(needle), "{}", out.stderr());
        assert!(!out.stderr().contains("panicked"), "{}", out.stderr());
        assert!(start.elapsed().as_secs() < 60, "the run hung");
    }
}

/// L12: a $HOME with a newline would add a line (another user) to the
/// container's /etc/passwd.
#[test]
fn a_home_with_a_newline_or_colon_is_refused() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let img = image_with_etc(
        &sb,
        "plain",
        "echo 'root:x:0:0:root:/root:/bin/sh' > passwd",
    );
    for home in ["/tmp/x\nevil:x:0:0::/:/bin/sh", "/tmp/a:b"] {
        let out = sb
            .berth(&["run", &img, "cat", "/etc/passwd"])
            .env("HOME", home)
            .output()
            .unwrap();
        let (text, err) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(
            !text.contains("evil:x:0:0"),
            "{home:?}: a line was injected: {text}"
        );
        assert!(!out.status.success(), "{home:?}: {text}");
        assert!(err.contains("holds ':' or a newline"), "{err}");
    }
}

/// H3: COPY sources reached through symlinks of the build context that
/// point outside it (relative, far up, and absolute) stay inside the
/// context (as BuildKit resolves them): nothing of the user's files is
/// copied into the image.
#[test]
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

/// M4: the container's command shares the caller's terminal; TIOCSTI would
/// push input into it, which the caller's shell runs after the container
/// exits. The default seccomp filter refuses it (EPERM); with
/// `--security-opt seccomp=unconfined` the same command is not refused by
/// berth (this kernel's `dev.tty.legacy_tiocsti` decides).
#[test]
fn the_container_cannot_inject_input_into_the_callers_terminal() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    sb.pull("debian-python:latest");
    let img = format!("{}/berth-test/debian-python:latest", env.anon());
    let probe = "import fcntl, termios\n\
                 try:\n    fcntl.ioctl(0, termios.TIOCSTI, b'#')\n    print('INJECTED')\n\
                 except OSError as e:\n    print('refused', e.errno)";
    // `python3 -c CODE` in the container, its stdin a pty (script(1)).
    let in_pty = |extra: &str, code: &str| {
        let cmd = format!(
            "{} run {extra} {img} python3 -c \"{code}\"",
            env.berth.display()
        );
        let out = sb
            .command(
                std::path::Path::new("/usr/bin/script"),
                &["-qec", &cmd, "/dev/null"],
            )
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let denied = in_pty("", probe);
    assert!(
        denied.contains("refused 1"),
        "TIOCSTI was not refused with EPERM: {denied}"
    );
    let open = in_pty("--security-opt seccomp=unconfined", probe);
    assert!(
        !open.contains("refused 1"),
        "unconfined still refused: {open}"
    );
    // An ordinary terminal ioctl still works under the filter.
    let size = in_pty("", "import os; print('size', os.get_terminal_size(0))");
    assert!(size.contains("size"), "{size}");
    sb.run(&["run", "--security-opt", "apparmor=x", &img, "true"])
        .fails(125, "--security-opt");
}
