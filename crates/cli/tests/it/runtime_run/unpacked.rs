//! Images unpacked where FUSE cannot serve them (issue 20): with
//! `image_mount = "unpack"` the keeper unpacks the image under
//! /var/tmp/berth-UID/unpacked, runs see the same tree (owners, a
//! writable layer, the image's config) and the tree goes with the keeper;
//! with /dev/fuse closed, `auto` unpacks with a warning and `fuse` fails
//! saying why.

use crate::harness::*;
use crate::need_env;

/// The user's unpacked trees on this node.
fn trees(uid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/var/tmp/berth-{uid}/unpacked"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn images_are_unpacked_where_fuse_cannot_serve_them() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let d = sb.debian();
    let uid = env.test_user().0;
    sb.site_config("[runtime]\nimage_mount = \"unpack\"\n");
    let script = "findmnt -n -o FSTYPE /; echo $GREETING; stat -c %U /etc/passwd; \
                  echo x > /new && cat /new; python3 -c 'print(6*7)'";
    let out = sb.run(&["run", "--writable", &d, "sh", "-c", script]).ok();
    assert_eq!(
        out.stdout(),
        "overlay\nhello from the image\nberthtest\nx\n42\n"
    );
    assert!(!out.stderr().contains("warning"), "{}", out.stderr());
    let keeper = sb.keeper_pid().expect("the keeper lingers a second");
    assert!(
        trees(uid)
            .iter()
            .any(|t| t.ends_with(&format!(".{keeper}"))),
        "{:?}",
        trees(uid)
    );
    // --fakeroot: the image's root files are root's.
    let out = sb
        .run(&[
            "run",
            "--fakeroot",
            &d,
            "stat",
            "-c",
            "%u:%g",
            "/etc/passwd",
        ])
        .ok();
    assert_eq!(out.stdout(), "0:0\n");
    sb.wait_keepers_gone();
    assert!(
        !trees(uid)
            .iter()
            .any(|t| t.ends_with(&format!(".{keeper}"))),
        "the tree goes with its keeper: {:?}",
        trees(uid)
    );

    // /dev/fuse closed: auto unpacks, saying so; fuse fails saying why.
    sb.site_config("");
    let out = sb
        .berth_without_fuse(&["run", &d, "cat", "/etc/debian_version"])
        .ok();
    assert!(out.stdout().starts_with("12."), "{}", out.stdout());
    assert!(
        out.stderr()
            .contains("warning: FUSE cannot serve the image here")
            && out.stderr().contains("/dev/fuse"),
        "{}",
        out.stderr()
    );
    sb.wait_keepers_gone();
    sb.site_config("[runtime]\nimage_mount = \"fuse\"\n");
    sb.berth_without_fuse(&["run", &d, "true"])
        .fails(125, "cannot open /dev/fuse");
}
