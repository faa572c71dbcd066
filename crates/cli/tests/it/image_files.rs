//! SIF and squashfs files as images: run in place (`berth run ./app.sif`)
//! and imported (`berth import sif:FILE NAME`). The SIF files are written
//! by the reference SIF library (tests/setup/sif_images.sh), the squashfs
//! files by mksquashfs, laid out as Apptainer and enroot lay out theirs.

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use crate::harness::*;
use crate::need_env;

/// The fixture files, copied into the sandbox (the test user's directory,
/// where `./NAME` is run from).
fn files(sb: &Sandbox) -> PathBuf {
    let from = PathBuf::from(sb.env.var("BERTH_IT_SIF"));
    for name in [
        "app.sif",
        "app.sqfs",
        "encrypted.sif",
        "ext3.sif",
        "overlay.sif",
        "enroot.sqsh",
    ] {
        let to = sb.dir.path().join(name);
        fs::copy(from.join(name), &to).unwrap_or_else(|e| {
            panic!(
                "{}: {e}: re-run sudo bash tests/setup/setup.sh",
                from.join(name).display()
            )
        });
        sb.chown_to_user(&to);
    }
    sb.dir.path().to_path_buf()
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_sif_file_runs_in_place_as_apptainer_runs_it() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    files(&sb);
    // No command: the runscript, after the env scripts (in name order).
    let out = sb.run(&["run", "./app.sif"]).ok();
    assert!(out.stdout().contains("runscript: \n"), "{}", out.stdout());
    assert!(
        out.stdout()
            .contains("GREETING=hello from the sif ORDER=90,99"),
        "{}",
        out.stdout()
    );
    // A command replaces the runscript (apptainer exec): the environment
    // scripts ran, PATH is the image's.
    let out = sb
        .run(&[
            "run",
            "./app.sif",
            "sh",
            "-c",
            "echo $FROM_DOCKER; app-tool; cat /etc/sif-marker; echo $LD_LIBRARY_PATH",
        ])
        .ok();
    assert_eq!(
        out.stdout(),
        "docker-default\napp-tool\nmade by sif_images.sh\n/.singularity.d/libs\n"
    );
    // A value from outside wins over the image's ${VAR:-default}, as in
    // Apptainer; an absolute path and `berth shell`'s plan work too.
    let abs = sb.dir.path().join("app.sif");
    let out = sb
        .run(&[
            "run",
            "-e",
            "FROM_DOCKER=mine",
            abs.to_str().unwrap(),
            "sh",
            "-c",
            "echo $FROM_DOCKER",
        ])
        .ok();
    assert_eq!(out.stdout(), "mine\n");
    // Nothing was copied into the store.
    assert!(sb.store_entries("images").is_empty());
    // Exit codes pass through.
    assert_eq!(
        sb.run(&["run", "./app.sif", "sh", "-c", "exit 7"]).code(),
        7
    );
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn an_enroot_squashfs_runs_its_rc_with_its_environment() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    files(&sb);
    let out = sb.run(&["run", "./enroot.sqsh"]).ok();
    assert_eq!(
        out.stdout(),
        "entrypoint in /workspace: default-cmd\nIMAGE_VAR=from-etc-environment\n"
    );
    // Arguments replace the command, the entrypoint stays (enroot start).
    let out = sb.run(&["run", "./enroot.sqsh", "a", "b"]).ok();
    assert!(out.stdout().starts_with("entrypoint in /workspace: a b\n"));
    // A plain squashfs without either layout: /bin/sh, PATH only.
    let out = sb
        .run(&["run", "./app.sqfs", "cat", "/etc/sif-marker"])
        .ok();
    assert_eq!(out.stdout(), "made by sif_images.sh\n");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn image_files_berth_cannot_run_are_refused_with_the_reason() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let dir = files(&sb);
    sb.run(&["run", "./encrypted.sif", "true"])
        .fails(125, "encrypted");
    sb.run(&["run", "./ext3.sif", "true"]).fails(125, "ext3");
    sb.run(&["run", "./overlay.sif", "true"])
        .fails(125, "no primary system partition (only an overlay");
    fs::write(dir.join("notes.txt"), "text").unwrap();
    sb.chown_to_user(&dir.join("notes.txt"));
    sb.run(&["run", "./notes.txt"])
        .fails(125, "neither a SIF nor a squashfs file");
    let out = sb.run(&["run", "./missing.sif"]).fails(125, "missing.sif");
    assert_eq!(
        out.stderr().matches("No such file").count(),
        1,
        "{}",
        out.stderr()
    );
    // A SIF cut short: its partition lies past the end.
    let cut = fs::read(dir.join("app.sif")).unwrap();
    fs::write(dir.join("cut.sif"), &cut[..cut.len() / 2]).unwrap();
    sb.chown_to_user(&dir.join("cut.sif"));
    sb.run(&["run", "./cut.sif", "true"])
        .fails(125, "cut short");
    // The wrong transport says which one to use.
    sb.run(&["import", "squashfs:app.sif", "x"])
        .fails(14, "use sif:app.sif");
    assert!(sb.store_entries("images").is_empty());
    sb.assert_store_tmp_empty();
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn imported_image_files_run_like_the_files_and_keep_one_id() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let dir = files(&sb);
    let id = sb
        .run(&["import", "-q", "sif:app.sif", "app"])
        .ok()
        .stdout();
    let abs = format!("sif:{}", dir.join("app.sif").display());
    let again = sb.run(&["import", "-q", &abs, "app2"]).ok().stdout();
    assert_eq!(id, again, "the same file gives the same id");
    let out = sb.run(&["run", "app"]).ok();
    assert!(
        out.stdout()
            .contains("GREETING=hello from the sif ORDER=90,99"),
        "{}",
        out.stdout()
    );
    let inspect = sb.run(&["inspect", "app"]).ok().json();
    let text = inspect.to_string();
    assert!(text.contains("berth tests"), "labels: {text}");
    sb.run(&["check"]).ok();
    // The stored squashfs is the SIF's partition, byte for byte (padded
    // to 4 KiB as mksquashfs pads).
    // The verity table follows.
    let stored = fs::read(sb.squashfs_of("app")).unwrap();
    let sqfs = fs::read(dir.join("app.sqfs")).unwrap();
    assert_eq!(&stored[..sqfs.len()], &sqfs[..]);
    assert!(stored.ends_with(&[0u8; 16]) && stored.len() > sqfs.len());
    sb.run(&["import", "-q", "squashfs:enroot.sqsh", "en"]).ok();
    let out = sb.run(&["run", "en", "x"]).ok();
    assert!(out.stdout().starts_with("entrypoint in /workspace: x\n"));
}

/// Real root: the kernel mounts the SIF's partition through a loop device
/// set to its offset.
#[test]
#[cfg_attr(
    not(berth_it_root),
    ignore = "needs root and the test fixtures: sudo bash tests/setup/setup.sh, then the tests as root"
)]
fn real_root_mounts_a_sif_partition_at_its_offset() {
    let env = need_env!();
    env.test_user();
    let sb = Sandbox::new(env);
    let dir = files(&sb);
    let root = sb.dir.path().join("root");
    fs::create_dir_all(root.join("run")).unwrap();
    let out = Command::new(&env.berth)
        .args([
            "run",
            "./app.sif",
            "sh",
            "-c",
            "cat /etc/sif-marker; echo $GREETING",
        ])
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
        .env("HOME", &root)
        .env("BERTH_STORE", root.join("store"))
        .env("XDG_RUNTIME_DIR", root.join("run"))
        .env("BERTH_SYSTEM_CONFIG", root.join("no-site-config.toml"))
        .env("BERTH_KEEPER_IDLE", "1")
        .current_dir(&dir)
        .output()
        .unwrap();
    let out = Out(out).ok();
    assert_eq!(out.stdout(), "made by sif_images.sh\nhello from the sif\n");
}

/// Verified reads: a byte of a stored image file changed after it was
/// stored (a damaged copy on a parallel filesystem, a store writer) makes
/// the read of that part an I/O error, never other data; the rest of the
/// image still reads. Without the check (BERTH_SQUASHFS_VERIFY=0) the
/// same read returns the changed data.
#[test]
#[cfg_attr(
    not(berth_it_root),
    ignore = "needs root and the test fixtures: sudo bash tests/setup/setup.sh, then the tests as root"
)]
fn a_changed_byte_of_a_stored_image_is_an_io_error_not_other_data() {
    let env = need_env!();
    env.test_user();
    let sb = Sandbox::new(env);
    // A root with a shell and 1 MiB that does not compress (stored as
    // it is, so its bytes can be found in the image file).
    let root = sb.dir.path().join("rootfs");
    fs::create_dir_all(root.join("bin")).unwrap();
    fs::copy("/bin/busybox", root.join("bin/busybox")).unwrap();
    for t in ["sh", "cat", "sha256sum", "head"] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(t)).unwrap();
    }
    let mut noise = vec![0u8; 1 << 20];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for b in noise.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    fs::write(root.join("noise"), &noise).unwrap();
    fs::write(root.join("small"), "intact\n").unwrap();
    let sqfs = sb.dir.path().join("v.sqfs");
    let st = Command::new("mksquashfs")
        .arg(&root)
        .arg(&sqfs)
        .args(["-noappend", "-all-root", "-quiet", "-no-fragments"])
        .status()
        .unwrap();
    assert!(st.success());
    sb.chown_to_user(&sqfs);
    sb.run(&["import", "-q", &format!("squashfs:{}", sqfs.display()), "v"])
        .ok();
    let stored = sb.squashfs_of("v");
    let bytes = fs::read(&stored).unwrap();
    let at = bytes
        .windows(64)
        .position(|w| w == &noise[300_000..300_064])
        .expect("the noise is stored as it is");
    let mut changed = bytes[at + 10];
    changed ^= 0xff;
    std::os::unix::fs::FileExt::write_all_at(
        &fs::OpenOptions::new().write(true).open(&stored).unwrap(),
        &[changed],
        (at + 10) as u64,
    )
    .unwrap();
    let out = sb.run(&["run", "v", "sh", "-c", "cat /small; cat /noise > /dev/null"]);
    assert_eq!(out.stdout(), "intact\n");
    assert_ne!(out.code(), 0);
    assert!(
        out.stderr().contains("I/O error") || out.stderr().contains("Input/output error"),
        "{}",
        out.stderr()
    );
    // The same read without the check: other data, silently.
    sb.wait_keepers_gone();
    let mut c = sb.berth(&["run", "v", "sha256sum", "/noise"]);
    c.env("BERTH_SQUASHFS_VERIFY", "0");
    let out = Out(c.output().unwrap()).ok();
    let want: String = {
        use sha2::Digest;
        sha2::Sha256::digest(&noise)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    assert!(
        !out.stdout().contains(&want),
        "the change went unseen by the test"
    );
}
