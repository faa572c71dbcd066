//! The system call filter: the caller's terminal (M4), kernel keyrings
//! and userfaultfd, profiles from a file (`--security-opt seccomp=FILE`).

use std::fs;

use crate::harness::Sandbox;
use crate::need_env;

/// M4: the container's command shares the caller's terminal; TIOCSTI would
/// push input into it, which the caller's shell runs after the container
/// exits. The default seccomp filter refuses it (EPERM); with
/// `--security-opt seccomp=unconfined` the same command is not refused by
/// berth (this kernel's `dev.tty.legacy_tiocsti` decides).
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
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
    // Checked before anything is pulled: no pull of an image that is not
    // there, the option named.
    let missing = format!("{}/berth-test/not-there:latest", sb.env.anon());
    let out = sb.run(&["run", "--security-opt", "seccomp=x", &missing, "true"]);
    assert_eq!(out.code(), 125, "{}", out.stderr());
    assert!(out.stderr().contains("--security-opt"), "{}", out.stderr());
    assert!(!out.stderr().contains("Fetching"), "{}", out.stderr());
}

/// The default seccomp filter beyond the terminal: kernel keyrings (shared
/// with the caller, not namespaced) and userfaultfd are refused with EPERM;
/// `--security-opt seccomp=unconfined` lifts it.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn the_default_filter_refuses_keyrings_and_userfaultfd() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    sb.pull("debian-python:latest");
    let img = format!("{}/berth-test/debian-python:latest", env.anon());
    let probe = "import ctypes; c = ctypes.CDLL(None, use_errno=True); \
                 r = [c.syscall(250, 0, -3, 0), ctypes.get_errno(), c.syscall(323, 0), ctypes.get_errno()]; \
                 print(*r)";
    let run = |extra: &[&str]| {
        let mut a = vec!["run", "--entrypoint", ""];
        a.extend_from_slice(extra);
        a.extend_from_slice(&[&img, "python3", "-c", probe]);
        sb.run(&a).ok().stdout()
    };
    let filtered = run(&[]);
    assert_eq!(
        filtered.trim(),
        "-1 1 -1 1",
        "keyctl, userfaultfd: {filtered}"
    );
    let open = run(&["--security-opt", "seccomp=unconfined"]);
    let f: Vec<&str> = open.split_whitespace().collect();
    assert!(
        f.first() != Some(&"-1") || f.get(1) != Some(&"1"),
        "keyctl refused without the filter: {open}"
    );
}

/// `--security-opt seccomp=FILE`: a profile in Docker's format replaces the
/// default filter. podman's own profile (a file another tool wrote) runs
/// python, answers a system call it does not list (`add_key`) with its
/// default errno (ENOSYS, where the default filter says EPERM), and refuses an audit
/// netlink socket with its argument rule (EINVAL: no CAP_AUDIT_WRITE in
/// identity mode); a profile of the user's own with an `errnoRet` is
/// obeyed; one that is not a profile is refused before anything runs.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_seccomp_profile_from_a_file_replaces_the_default_filter() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    sb.pull("debian-python:latest");
    let img = format!("{}/berth-test/debian-python:latest", env.anon());
    let podmans = std::path::Path::new("/usr/share/containers/seccomp.json");
    let probe = "import ctypes, socket\n\
                 c = ctypes.CDLL(None, use_errno=True)\n\
                 r = [c.syscall(248, 0, 0, 0, 0, 0), ctypes.get_errno()]\n\
                 try:\n  socket.socket(16, socket.SOCK_RAW, 9); r.append('open')\n\
                 except OSError as e:\n  r.append(e.errno)\n\
                 print(*r)";
    let run = |extra: &[&str]| {
        let mut a = vec!["run", "--entrypoint", ""];
        a.extend_from_slice(extra);
        a.extend_from_slice(&[&img, "python3", "-c", probe]);
        sb.run(&a)
    };
    assert_eq!(run(&[]).ok().stdout().trim().split(' ').nth(1), Some("1"));
    if podmans.exists() {
        let opt = format!("seccomp={}", podmans.display());
        let out = run(&["--security-opt", &opt]).ok();
        assert_eq!(out.stdout().trim(), "-1 38 22", "{}", out.stderr());
    } else {
        eprintln!("podman's profile not tried: no {}", podmans.display());
        assert!(!crate::harness::required(), "CI installs podman");
    }
    let mine = sb.dir.path().join("profile.json");
    fs::write(
        &mine,
        r#"{"defaultAction": "SCMP_ACT_ALLOW",
            "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13}]}"#,
    )
    .unwrap();
    let opt = format!("seccomp={}", mine.display());
    let out = sb.run(&[
        "run",
        "--security-opt",
        &opt,
        &img,
        "sh",
        "-c",
        "mkdir /tmp/l13-dir 2>&1; echo rc=$?",
    ]);
    assert!(
        out.stdout().contains("Permission denied"),
        "{}",
        out.stdout()
    );
    assert!(out.stdout().contains("rc=1"), "{}", out.stdout());
    fs::write(&mine, r#"{"syscalls": 3}"#).unwrap();
    sb.run(&["run", "--security-opt", &opt, &img, "true"])
        .fails(125, "not a seccomp profile");
}
