//! `--fakeroot` for a user without a subordinate id range: root emulation
//! (a seccomp filter faking owner and identity calls) lets apt-get install
//! a package whose files belong to another user; `--root-emulation none`
//! shows what fails without it.

use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::harness::*;
use crate::need_env;

/// A user with no /etc/subuid or /etc/subgid range (made if missing).
fn user_without_range() -> (u32, u32) {
    let name = "berthnosub";
    if Command::new("id")
        .arg(name)
        .output()
        .map(|o| !o.status.success())
        .unwrap_or(true)
    {
        let st = Command::new("useradd")
            .args(["-M", "-s", "/usr/sbin/nologin", name])
            .status()
            .unwrap();
        assert!(st.success(), "useradd {name}");
    }
    for f in ["/etc/subuid", "/etc/subgid"] {
        let _ = Command::new("sed")
            .args(["-i", &format!("/^{name}:/d"), f])
            .status();
    }
    (
        id_number(&["-u", name]).unwrap(),
        id_number(&["-g", name]).unwrap(),
    )
}

/// Gives `sb`'s directory to the user without a range; its ids.
pub(crate) fn sandbox_of_user_without_range(sb: &Sandbox) -> (u32, u32) {
    let (uid, gid) = user_without_range();
    let st = Command::new("chown")
        .arg("-R")
        .arg(format!("{uid}:{gid}"))
        .arg(sb.dir.path())
        .status()
        .unwrap();
    assert!(st.success());
    (uid, gid)
}

/// `berth-owned`, a package (made with dpkg-deb under `dir/pkg`) whose
/// /var/spool/berth and its file `job` belong to user 7 (lp): dpkg chowns
/// them; /usr/share/berth-owned/README is root's.
pub(crate) fn owned_deb(dir: &std::path::Path) -> std::path::PathBuf {
    let root = dir.join("pkg/root");
    std::fs::create_dir_all(root.join("DEBIAN")).unwrap();
    std::fs::create_dir_all(root.join("var/spool/berth")).unwrap();
    std::fs::write(
        root.join("DEBIAN/control"),
        "Package: berth-owned\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@example.org>\nDescription: files of another owner\n",
    )
    .unwrap();
    std::fs::write(root.join("var/spool/berth/job"), "x\n").unwrap();
    std::fs::create_dir_all(root.join("usr/share/berth-owned")).unwrap();
    std::fs::write(root.join("usr/share/berth-owned/README"), "root's\n").unwrap();
    Command::new("chown")
        .args(["-R", "7:7"])
        .arg(root.join("var/spool/berth"))
        .status()
        .unwrap();
    let deb = dir.join("pkg/owned.deb");
    let st = Command::new("dpkg-deb")
        .arg("--build")
        .arg(&root)
        .arg(&deb)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    deb
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn fakeroot_without_a_range_installs_packages_by_emulation() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let d = sb.debian();
    let deb = owned_deb(sb.dir.path());
    let (uid, gid) = sandbox_of_user_without_range(&sb);
    let bind = format!("{}:/pkg.deb:ro", deb.display());
    let run = |extra: &[&str], script: &str| {
        let mut args = vec![
            "run",
            "--entrypoint",
            "",
            "--fakeroot",
            "--writable",
            "-v",
            &bind,
        ];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[&d, "/bin/sh", "-c", script]);
        let mut c = sb.berth(&args);
        c.uid(uid).gid(gid);
        Out(c.output().unwrap())
    };
    let script = "cat /proc/self/uid_map | wc -l; touch /f && chown 7:8 /f && stat -c %u:%g /f && { apt-get install -y -q /pkg.deb >/tmp/apt.log 2>&1 || { tail -5 /tmp/apt.log; exit 1; }; } && dpkg -s berth-owned >/dev/null && cat /var/spool/berth/job && setpriv --reuid 7 true && useradd -u 1234 app && echo done";
    // apt (which checks that it became _apt) under emulation; its hint
    // to stay root is berth's, not the container's change.
    let ov = sb.dir.path().join("ov");
    let ov_arg = ov.display().to_string();
    let out = run(&["--overlay", &ov_arg], script).ok().stdout();
    assert_eq!(out, "1\n0:0\nx\ndone\n");
    assert!(ov.join("upper/var/spool/berth/job").exists());
    assert!(!ov
        .join("upper/etc/apt/apt.conf.d/zz-berth-root-emulation")
        .exists());
    // Without emulation the same chown fails (no id 7 in the map).
    let out = run(
        &["--root-emulation", "none"],
        "touch /f; chown 7:8 /f 2>&1; echo rc=$?",
    )
    .stdout();
    assert!(out.contains("rc=1"), "{out}");
    // Forced on where the user has a range, and refused without --fakeroot.
    let mut c = sb.berth(&["run", "--root-emulation", "seccomp", &d, "true"]);
    c.uid(uid).gid(gid);
    Out(c.output().unwrap()).fails(125, "is for --fakeroot runs");
}
