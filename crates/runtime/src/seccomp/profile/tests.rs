//! The profile compiler against known profiles, and its programs run.

use super::*;

fn ctx() -> Context {
    Context {
        has_cap: Box::new(|_| false),
        kernel: (6, 1),
    }
}

/// Every jump lands inside the program and the program ends in a
/// return.
fn well_formed(p: &[libc::sock_filter]) {
    for (i, ins) in p.iter().enumerate() {
        let code = u32::from(ins.code);
        if code & 0x07 == libc::BPF_JMP {
            let far = if code & 0xf0 == libc::BPF_JA {
                ins.k as usize
            } else {
                usize::from(ins.jt.max(ins.jf))
            };
            assert!(i + 1 + far < p.len(), "jump at {i} leaves the program");
        }
    }
    assert_eq!(u32::from(p[p.len() - 1].code), libc::BPF_RET | libc::BPF_K);
}

#[test]
fn podmans_profile_compiles() {
    let Ok(text) = std::fs::read_to_string("/usr/share/containers/seccomp.json") else {
        eprintln!("skipped: no /usr/share/containers/seccomp.json");
        assert!(
            std::env::var_os("CI").is_none(),
            "CI needs podman's profile"
        );
        return;
    };
    let p = compile_text(&text, Path::new("seccomp.json"), &ctx()).unwrap();
    well_formed(&p);
    assert!(p.len() > 300 && p.len() < 4096, "{}", p.len());
}

#[test]
fn bad_profiles_say_what_is_wrong() {
    for (text, needle) in [
        ("{", "not a seccomp profile"),
        (r#"{"defaultAction":"SCMP_ACT_NOPE"}"#, "unknown action"),
        (
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["read"],"action":"SCMP_ACT_NOTIFY"}]}"#,
            "listener",
        ),
        (
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["read"],"action":"SCMP_ACT_ERRNO","args":[{"index":7,"value":1,"op":"SCMP_CMP_EQ"}]}]}"#,
            "argument index 7",
        ),
        (
            r#"{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_S390X"]}"#,
            "does not list this machine's architecture",
        ),
    ] {
        let e = compile_text(text, Path::new("p.json"), &ctx())
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{text}: {e}");
    }
}

#[test]
fn includes_and_excludes() {
    let rule = |inc: &str, exc: &str| RuleFile {
        names: None,
        name: Some("read".into()),
        action: "SCMP_ACT_ALLOW".into(),
        errno_ret: None,
        args: None,
        includes: serde_json::from_str(inc).ok(),
        excludes: serde_json::from_str(exc).ok(),
    };
    let admin = Context {
        has_cap: Box::new(|n| n == 21),
        kernel: (5, 4),
    };
    assert!(in_scope(
        &rule(r#"{"caps":["CAP_SYS_ADMIN"]}"#, "{}"),
        &admin
    ));
    assert!(!in_scope(
        &rule(r#"{"caps":["CAP_SYS_ADMIN"]}"#, "{}"),
        &ctx()
    ));
    assert!(!in_scope(
        &rule("{}", r#"{"caps":["CAP_SYS_ADMIN"]}"#),
        &admin
    ));
    assert!(!in_scope(&rule(r#"{"minKernel":"5.8"}"#, "{}"), &admin));
    assert!(in_scope(&rule(r#"{"minKernel":"4.14"}"#, "{}"), &admin));
    assert!(!in_scope(&rule(r#"{"arches":["s390x"]}"#, "{}"), &admin));
    assert!(in_scope(
        &rule(&format!(r#"{{"arches":["{}"]}}"#, NATIVE_NAMES[1]), "{}"),
        &admin
    ));
    assert_eq!(parse_kernel("6.1.0-18-amd64"), (6, 1));
}

/// Runs the compiled profile in a forked child and reports what some
/// calls returned: (getppid errno, personality(0xffffffff) errno,
/// personality(8) result, umask result).
#[test]
fn the_compiled_profile_does_what_it_says() {
    let text = r#"{
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [
            {"names": ["getppid"], "action": "SCMP_ACT_ERRNO", "errnoRet": 42},
            {"names": ["personality"], "action": "SCMP_ACT_ERRNO", "errnoRet": 43,
             "args": [{"index": 0, "value": 4294967295, "op": "SCMP_CMP_EQ"}]},
            {"names": ["umask"], "action": "SCMP_ACT_ERRNO", "errnoRet": 44,
             "args": [{"index": 0, "value": 4095, "valueTwo": 511, "op": "SCMP_CMP_MASKED_EQ"}]},
            {"names": ["getpgid"], "action": "SCMP_ACT_ERRNO", "errnoRet": 45,
             "args": [{"index": 0, "value": 4294967296, "op": "SCMP_CMP_GE"}]},
            {"names": ["not_a_syscall_anywhere"], "action": "SCMP_ACT_KILL"}
        ]
    }"#;
    let program = compile_text(text, Path::new("t.json"), &ctx()).unwrap();
    well_formed(&program);
    let code = super::super::tests::exit_code_under(&program, || {
        let errno = || {
            // SAFETY: reads this thread's errno.
            unsafe { *libc::__errno_location() }
        };
        // SAFETY: raw syscalls with integer arguments.
        let r = unsafe { libc::syscall(libc::SYS_getppid) };
        if r != -1 || errno() != 42 {
            return Some(2);
        }
        // SAFETY: as above.
        let r = unsafe { libc::syscall(libc::SYS_personality, 0xffff_ffffu64) };
        if r != -1 || errno() != 43 {
            return Some(3);
        }
        // The high word differs: not equal, allowed.
        // SAFETY: as above.
        let r = unsafe { libc::syscall(libc::SYS_personality, 0x1_ffff_ffffu64) };
        if r == -1 && errno() == 43 {
            return Some(4);
        }
        // (mode & 0o7777) == 0o777 refused; 0o022 allowed.
        // SAFETY: as above.
        let r = unsafe { libc::syscall(libc::SYS_umask, 0o10777) };
        if r != -1 || errno() != 44 {
            return Some(5);
        }
        // SAFETY: as above.
        let r = unsafe { libc::syscall(libc::SYS_umask, 0o022) };
        if r == -1 {
            return Some(6);
        }
        // A 64-bit GE: 2^32 refused, 2^32 - 1 not.
        // SAFETY: as above.
        let r = unsafe { libc::syscall(libc::SYS_getpgid, 1u64 << 32) };
        if r != -1 || errno() != 45 {
            return Some(7);
        }
        // SAFETY: as above.
        let r = unsafe { libc::syscall(libc::SYS_getpgid, 0u64) };
        if r == -1 && errno() == 45 {
            return Some(8);
        }
        // The terminal guard stays.
        let c = b'x';
        // SAFETY: ioctl on fd 0 with a valid pointer.
        let r = unsafe { libc::ioctl(0, libc::TIOCSTI, &c as *const u8) };
        if r != -1 || errno() != libc::EPERM {
            return Some(9);
        }
        Some(0)
    });
    assert_eq!(code, 0);
}
