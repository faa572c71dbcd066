//! The image's identity files (/etc/passwd, /etc/group) and the user's
//! home, which berth writes into the container's passwd (M2, L12).

use std::fs;

use super::image_with_etc;
use crate::harness::Sandbox;
use crate::need_env;

/// M2: the image's /etc/passwd -> /proc/self/environ and /etc/group -> a
/// host file of the user's. berth used to read both on the host (before
/// pivot_root) and bind their content into the container; now it follows
/// them inside the image, where they lead nowhere, and says so.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
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
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
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
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
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
