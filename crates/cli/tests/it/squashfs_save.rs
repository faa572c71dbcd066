//! A saved image (`berth __save`, the worker of `--save` and `berth
//! commit`) against the kernel: an image made by mksquashfs, changed
//! through a real overlayfs mount (copy-ups, whiteouts, an opaque
//! directory, hard links), saved by berth's writer, must show in the
//! kernel's squashfs driver the tree that mksquashfs makes of the same
//! changes made on disk; and berth's server must show the saved file as
//! the kernel does.

use std::fs;
use std::path::Path;
use std::process::Command;

use crate::harness::*;
use crate::squashfs_server::{berth_mount, finished, make_tree, sh, snapshot, tool, unmount};

/// The changes, as a shell script run in the tree (or the overlay on it).
const CHANGES: &str = "set -e
rm sizes/noise-3000000
echo new > sizes/text-100
rm -r d0 && mkdir d0 && echo b > d0/only
rm big/entry-00007-* && echo z > big/entry-new
mkdir -p new/sub && seq 1 200000 > new/sub/data && ln new/sub/data new/hard
rm links/hard1
chmod 0600 modes/setuid
chown 42:43 owners/a
ln -s newtarget links/soft2
mkfifo new/fifo
";

fn mount_kernel(img: &Path, dir: &Path) {
    sh(Command::new("mount")
        .args(["-t", "squashfs", "-o", "loop,ro"])
        .arg(img)
        .arg(dir));
}

#[test]
#[cfg_attr(
    not(berth_it_root),
    ignore = "needs root and the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_saved_image_is_the_kernels_view_of_the_image_and_its_changes() {
    let env = env();
    let work = tempfile::tempdir().unwrap();
    let p = |n: &str| work.path().join(n);
    let tree = p("tree");
    make_tree(&tree);
    let img = p("image.sqfs");
    sh(Command::new(tool("mksquashfs")).arg(&tree).arg(&img).args([
        "-noappend",
        "-quiet",
        "-no-progress",
        "-comp",
        "zstd",
    ]));
    // The same changes on a copy of the tree, and through an overlay.
    sh(Command::new("cp").arg("-a").arg(&tree).arg(p("expected")));
    sh(Command::new("sh")
        .arg("-c")
        .arg(CHANGES)
        .current_dir(p("expected")));
    for d in ["upper", "ovwork", "merged", "spool", "kernel", "berth"] {
        fs::create_dir(p(d)).unwrap();
    }
    sh(Command::new("mount")
        .args(["-t", "overlay", "overlay", "-o"])
        .arg(format!(
            "lowerdir={},upperdir={},workdir={}",
            tree.display(),
            p("upper").display(),
            p("ovwork").display()
        ))
        .arg(p("merged")));
    let changed = Command::new("sh")
        .arg("-c")
        .arg(CHANGES)
        .current_dir(p("merged"))
        .status()
        .unwrap();
    sh(Command::new("umount").arg(p("merged")));
    assert!(changed.success());
    let plan = serde_json::json!({
        "upper": p("upper"), "remove": null, "image": img, "output": p("saved.sqfs"),
        "spool": p("spool"), "jobs": 2, "mode": "root",
        "squashfs": {"compressor": "zstd", "level": null, "block_size": 131072},
    });
    fs::write(p("plan.json"), plan.to_string()).unwrap();
    sh(Command::new(&env.berth).arg("__save").arg(p("plan.json")));
    // The saved file keeps the image's data as it was: the same bytes up
    // to where the image's tables began.
    let (old, new) = (fs::read(&img).unwrap(), fs::read(p("saved.sqfs")).unwrap());
    let inode_table = u64::from_le_bytes(old[64..72].try_into().unwrap()) as usize;
    assert!(
        old[96..inode_table] == new[96..inode_table],
        "the image's blocks were rewritten"
    );
    sh(Command::new(tool("mksquashfs"))
        .arg(p("expected"))
        .arg(p("expected.sqfs"))
        .args(["-noappend", "-quiet", "-no-progress", "-comp", "zstd"]));
    let view = |img: &Path| {
        mount_kernel(img, &p("kernel"));
        let s = snapshot(&p("kernel"));
        sh(Command::new("umount").arg(p("kernel")));
        s
    };
    let want = view(&p("expected.sqfs"));
    let got = view(&p("saved.sqfs"));
    assert!(want.len() > 3000, "{} entries", want.len());
    // Inode numbers, times and directory sizes are each writer's own.
    let same = |a: &crate::squashfs_server::Entry, b: &crate::squashfs_server::Entry| {
        let dir = a.mode & 0o170000 == 0o040000;
        (
            a.mode, a.uid, a.gid, a.nlink, a.rdev, &a.target, &a.sha256, &a.xattrs,
        ) == (
            b.mode, b.uid, b.gid, b.nlink, b.rdev, &b.target, &b.sha256, &b.xattrs,
        ) && (dir || a.size == b.size)
    };
    for (path, w) in &want {
        let g = got.get(path);
        assert!(
            g.is_some_and(|g| same(g, w)),
            "{path}: saved {g:?}, expected {w:?}"
        );
    }
    assert_eq!(got.len(), want.len(), "entries");
    // berth's server shows the saved file as the kernel does.
    let server = berth_mount(&env.berth, &p("saved.sqfs"), &p("berth"));
    let served = snapshot(&p("berth"));
    unmount(&p("berth"));
    let (status, log) = finished(server);
    assert!(status.success() && log.is_empty(), "server {status}: {log}");
    assert!(
        served == got,
        "berth's server and the kernel differ on the saved file"
    );
}
