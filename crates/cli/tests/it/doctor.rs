//! `berth doctor` as the unprivileged user on this machine (everything
//! there), as a user without a subordinate range (a warning: root is
//! emulated), with /dev/fuse closed (a failure naming the fix, exit 17),
//! and with a shared store berth skips (a warning), in text and JSON.

use std::os::unix::process::CommandExt;

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

    // /dev/fuse closed (mode 0600, root's, as without udev): runs unpack
    // images instead (a warning), unless FUSE is asked for (a failure).
    let report = |out: Out| -> serde_json::Value {
        serde_json::from_str(&out.stdout()).unwrap_or_else(|e| panic!("{e}: {}", out.stdout()))
    };
    let auto = report(sb.berth_without_fuse(&["doctor", "--format", "json"]).ok());
    assert_eq!(status(&auto, "/dev/fuse"), "warn");
    assert_eq!(status(&auto, "FUSE in a user namespace"), "warn");
    assert_eq!(auto["passed"], true);
    sb.site_config("[runtime]\nimage_mount = \"fuse\"\n");
    let out = sb.berth_without_fuse(&["doctor", "--format", "json"]);
    assert_eq!(out.code(), 17, "{}", out.stderr());
    let fuse_only = report(out);
    assert_eq!(status(&fuse_only, "/dev/fuse"), "fail");
    assert_eq!(status(&fuse_only, "FUSE in a user namespace"), "fail");
    assert_eq!(status(&fuse_only, "overlay in a user namespace"), "ok");
    assert_eq!(fuse_only["passed"], false);
    let fuse = fuse_only["checks"]
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

    // Binds-only roots chosen by the site: overlay is not used.
    sb.site_config("[runtime]\noverlay = \"none\"\n");
    let out = sb.run(&["doctor"]).ok().stdout();
    assert!(
        out.lines()
            .any(|l| l.contains("ok    overlay in a user namespace")
                && l.contains("not used (overlay = \"none\")")),
        "{out}"
    );

    // A shared store: doctor applies the rule runs apply (a group may
    // not write it either) and says that berth skips it.
    use std::os::unix::fs::PermissionsExt;
    let shared = sb.dir.path().join("site-store");
    std::fs::create_dir_all(shared.join("images")).unwrap();
    for (mode, want) in [(0o775, "warn"), (0o755, "ok")] {
        for d in [&shared, &shared.join("images")] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        sb.site_config(&format!("shared_stores = [\"{}\"]\n", shared.display()));
        let r = report(sb.run(&["doctor", "--format", "json"]).ok());
        assert_eq!(status(&r, "shared store"), want, "mode {mode:o}: {r}");
    }
    let out = sb.run(&["doctor"]).ok().stdout();
    assert!(out.contains("ok    shared store"), "{out}");
}
