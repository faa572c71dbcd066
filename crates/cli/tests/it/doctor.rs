//! `berth doctor` as the unprivileged user on this machine (everything
//! there), as a user without a subordinate range (a warning: root is
//! emulated), and with /dev/fuse closed (a failure naming the fix, exit
//! 17), in text and JSON.

use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::harness::{Out, Sandbox};
use crate::need_env;
use crate::runtime_run::root_emulation::sandbox_of_user_without_range;

/// The status of check `name` in a JSON report.
fn status(report: &serde_json::Value, name: &str) -> String {
    report["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == name))
        .map(|c| c["status"].as_str().unwrap_or_default().to_string())
        .unwrap_or_else(|| panic!("no check {name} in {report}"))
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn doctor_finds_what_the_node_gives_and_says_what_is_missing() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let out = sb.run(&["doctor"]).ok().stdout();
    for want in [
        "ok    user namespaces",
        "ok    subordinate ids",
        "ok    /dev/fuse",
        "ok    FUSE in a user namespace",
        "ok    overlay in a user namespace",
        "ok    squashfs tools",
    ] {
        assert!(out.contains(want), "{want} in {out}");
    }

    // Without a range: root emulation, a warning with the fix.
    let nosub = Sandbox::new(env);
    let (uid, gid) = sandbox_of_user_without_range(&nosub);
    let mut c = nosub.berth(&["doctor", "--format", "json"]);
    c.uid(uid).gid(gid);
    let out = Out(c.output().unwrap()).ok().stdout();
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(status(&report, "subordinate ids"), "warn");
    assert_eq!(report["passed"], true);

    // /dev/fuse closed (mode 0600, root's, as without udev): a bind of such
    // a file over it in a mount namespace of this run only.
    let closed = sb.dir.path().join("closed-fuse");
    std::fs::write(&closed, "").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (uid, gid, _) = env.test_user().clone();
    let berth = env.berth.display().to_string();
    let script = format!(
        "mount --bind {} /dev/fuse && exec setpriv --reuid {uid} --regid {gid} --clear-groups \
         env -i PATH=/usr/bin:/bin HOME={} BERTH_STORE={} {berth} doctor --format json",
        closed.display(),
        sb.home().display(),
        sb.store().display()
    );
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(17),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status(&report, "/dev/fuse"), "fail");
    assert_eq!(status(&report, "FUSE in a user namespace"), "fail");
    assert_eq!(status(&report, "overlay in a user namespace"), "ok");
    assert_eq!(report["passed"], false);
    let fuse = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "/dev/fuse")
        .unwrap();
    assert!(
        fuse["detail"].as_str().unwrap().contains("mode 600"),
        "{fuse}"
    );
    assert!(
        fuse["fix"]
            .as_str()
            .unwrap()
            .contains("chmod 0666 /dev/fuse"),
        "{fuse}"
    );
}
