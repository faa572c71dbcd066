//! Squashfs data mounts: `-v FILE:DST:sqsh` (and an environment file's
//! `:sqsh` mounts) show a squashfs file made by mksquashfs as a read-only
//! tree, mounted once by the image's keeper and shared by every container
//! of the node that names it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::harness::*;
use crate::need_env;

/// A squashfs file of a small tree (a text file and 1 MiB of data) made by
/// mksquashfs in the sandbox, owned by the test user; its path.
pub(crate) fn dataset(sb: &Sandbox) -> PathBuf {
    let tree = sb.dir.path().join("tree");
    fs::create_dir_all(tree.join("sub")).unwrap();
    fs::write(tree.join("a.txt"), "hello from the dataset\n").unwrap();
    let data: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 % 251) as u8).collect();
    fs::write(tree.join("sub/b.bin"), data).unwrap();
    let file = sb.dir.path().join("ds.sqsh");
    let st = Command::new("mksquashfs")
        .arg(&tree)
        .arg(&file)
        .args(["-noappend", "-quiet", "-no-progress", "-comp", "zstd"])
        .status()
        .expect("mksquashfs is missing: sudo bash tests/setup/setup.sh installs it");
    assert!(st.success());
    sb.chown_to_user(&file);
    file
}

/// Whether this pass unpacks images (tests/run.sh's fallback pass): data
/// mounts then need FUSE and say so.
fn refused_without_fuse(out: Out) -> bool {
    if !fallbacks() {
        return false;
    }
    out.fails(125, "needs FUSE");
    true
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_squashfs_file_is_a_read_only_tree_shared_by_16_containers() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let img = sb.layers();
    dataset(&sb);
    let script = "cat /ds/a.txt; ls /ds/sub; touch /ds/new 2>/dev/null || echo read-only";
    let out = sb.sh(&img, &["-v", "./ds.sqsh:/ds:sqsh"], script);
    if refused_without_fuse(out) {
        return;
    }
    let out = sb
        .sh(&img, &["-v", "./ds.sqsh:/ds:sqsh"], script)
        .ok()
        .stdout();
    assert_eq!(out, "hello from the dataset\nb.bin\nread-only\n");
    // 16 containers at once read it through one mount: the same device
    // number (one FUSE superblock, so one page cache) in each, and the
    // same bytes.
    let runs = sb.spawn_berths(16, |_| {
        [
            "run",
            "--entrypoint",
            "",
            "-v",
            "./ds.sqsh:/data:sqsh,noexec",
            &img,
            "/bin/sh",
            "-c",
            "stat -c %d /data; busybox md5sum /data/sub/b.bin; sleep 2",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    });
    let outs: Vec<String> = outputs(runs).into_iter().map(|o| o.ok().stdout()).collect();
    assert!(
        outs.iter().all(|o| *o == outs[0] && o.lines().count() == 2),
        "{outs:?}"
    );
    sb.wait_keepers_gone();
    // Nothing of the data mount's server stays behind.
    assert!(
        !sb.processes().iter().any(|(_, c)| c.contains("__squashfs")),
        "{:?}",
        sb.processes()
    );
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn an_environment_files_sqsh_mount_and_bad_data_files() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let img = sb.layers();
    let file = dataset(&sb);
    let edf = sb.dir.path().join("ds.toml");
    fs::write(
        &edf,
        format!("image = \"{img}\"\nentrypoint = false\nmounts = [\"${{DS}}:/ds:sqsh\"]\n"),
    )
    .unwrap();
    sb.chown_to_user(&edf);
    let mut sb = sb;
    sb.extra_env.push(("DS".into(), file.display().to_string()));
    let out = sb.run(&["run", "--environment", "./ds.toml", "cat", "/ds/a.txt"]);
    if !refused_without_fuse(out) {
        let out = sb
            .run(&["run", "--environment", "./ds.toml", "cat", "/ds/a.txt"])
            .ok();
        assert_eq!(out.stdout(), "hello from the dataset\n");
    }
    // Not a squashfs file, no container path, rw: refused before anything
    // starts, with what to do.
    let notes = sb.dir.path().join("notes.txt");
    fs::write(&notes, "plain text\n").unwrap();
    sb.chown_to_user(&notes);
    let at = |spec: &str| sb.run(&["run", "-v", spec, &img, "true"]);
    at("./notes.txt:/ds:sqsh").fails(125, "neither a SIF nor a squashfs file");
    at("./ds.sqsh:sqsh").fails(125, "needs a container path");
    at("./ds.sqsh:/ds:sqsh+rw").fails(125, "read-only");
    at("./missing.sqsh:/ds:sqsh").fails(125, "missing.sqsh");
    assert!(Path::new(&file).is_file());
}
