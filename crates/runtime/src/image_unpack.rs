//! The image unpacked, where FUSE cannot serve it (`[runtime] image_mount
//! = "unpack"`, or `auto` when the FUSE mount fails): the keeper unpacks
//! it with berth's squashfs reader (every read checked against the verity
//! table where the image has one) into `$TMPDIR` or /var/tmp, under
//! `berth-UID/unpacked/` (the user's, mode 0700), binds the tree read-only
//! where the FUSE mount would be, and removes it when it leaves.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::image_mount::ServedImage;
use crate::sys::Kernel;

/// The directory that holds `user`'s unpacked images on this node.
fn base(host_uid: u32) -> PathBuf {
    let tmp = std::env::var_os("TMPDIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| PathBuf::from("/var/tmp"));
    tmp.join(format!("berth-{host_uid}"))
}

/// `dir`, made if missing, if it is the caller's own directory that no one
/// else can enter (another user could otherwise have made it first).
fn own_private_dir(dir: &Path) -> Result<()> {
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(Error::io("create", dir, e))
        }
        _ => {}
    }
    let m = std::fs::symlink_metadata(dir).map_err(|e| Error::io("read", dir, e))?;
    let me = rustix::process::getuid().as_raw();
    if !m.is_dir() || m.uid() != me {
        return Err(Error::Mount(format!(
            "{} is not a directory of yours: remove it, or set TMPDIR to one of your own",
            dir.display()
        )));
    }
    if m.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| Error::io("chmod", dir, e))?;
    }
    Ok(())
}

/// Unpacks `image` for the keeper of `keeper_dir` (started by host user
/// `host_uid`) and binds the tree read-only on `target`; the tree.
pub fn unpack_and_bind(
    k: &dyn Kernel,
    image: ServedImage<'_>,
    keeper_dir: &Path,
    host_uid: u32,
    target: &Path,
) -> Result<PathBuf> {
    let base = base(host_uid);
    own_private_dir(&base)?;
    own_private_dir(&base.join("unpacked"))?;
    let name = keeper_dir
        .file_name()
        .ok_or_else(|| Error::Setup(format!("keeper directory {}", keeper_dir.display())))?;
    // Keepers of one image in other runtime directories (two jobs) may
    // unpack it at the same time: each tree is its keeper's, by pid.
    let unpacked = base.join("unpacked");
    remove_orphans(&unpacked);
    let mut name = name.to_os_string();
    name.push(format!(".{}", host_pid()));
    let tree = unpacked.join(name);
    std::fs::create_dir(&tree).map_err(|e| Error::io("create", &tree, e))?;
    let noexec = rustix::fs::statvfs(&tree)
        .map(|v| v.f_flag.contains(rustix::fs::StatVfsMountFlags::NOEXEC))
        .unwrap_or(false);
    if noexec {
        remove_unpacked(&tree);
        return Err(Error::Mount(format!(
            "{} is on a noexec file system, where the image's programs could not run: \
             set TMPDIR to a directory on another one",
            base.display()
        )));
    }
    let file = image
        .file
        .try_clone()
        .map_err(|e| Error::Mount(format!("cannot reopen the image: {e}")))?;
    let opened = match image.verity {
        Some(root) => berth_squashfs::Image::open_verified(file, image.offset, root),
        None => berth_squashfs::Image::open(file, image.offset),
    };
    let t0 = std::time::Instant::now();
    let done = opened
        .map_err(|e| e.to_string())
        .and_then(|img| {
            let owners = berth_squashfs::fuse::owners::Owners::of_this_namespace();
            berth_squashfs::unpack::unpack(&img, &tree, &owners).map_err(|e| e.to_string())
        })
        .map_err(|e| {
            remove_unpacked(&tree);
            Error::Mount(format!(
                "cannot unpack the image into {}: {e}",
                tree.display()
            ))
        })?;
    eprintln!(
        "berth: unpacked {} entries ({} MiB, {} device nodes left out) into {} in {:.1} s",
        done.entries,
        done.bytes >> 20,
        done.devices,
        tree.display(),
        t0.elapsed().as_secs_f64()
    );
    k.mount(
        Some(&tree),
        target,
        None,
        libc::MS_BIND | libc::MS_REC,
        None,
    )
    .and_then(|()| {
        k.mount(
            None,
            target,
            None,
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
            None,
        )
    })
    .map_err(|e| {
        let _ = k.unmount(target, libc::MNT_DETACH);
        remove_unpacked(&tree);
        Error::sys("bind the unpacked image on", Some(target.into()), e)
    })?;
    Ok(tree)
}

/// This process's pid as the host sees it (the keeper runs in a PID
/// namespace of its own only where it is real root, which never unpacks).
fn host_pid() -> u32 {
    std::process::id()
}

/// Removes the trees of keepers that are gone (killed before they could).
/// Trees of other id mappings stay where this namespace cannot remove
/// them.
fn remove_orphans(unpacked: &Path) {
    let Ok(entries) = std::fs::read_dir(unpacked) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let pid = name
            .to_str()
            .and_then(|n| n.rsplit_once('.'))
            .and_then(|(_, p)| p.parse::<i32>().ok());
        // Not a keeper's tree (no pid): not ours to judge.
        let Some(pid) = pid else { continue };
        let alive = Path::new(&format!("/proc/{pid}")).exists();
        if !alive {
            remove_unpacked(&e.path());
        }
    }
}

/// Removes an unpacked tree (in the keeper's user namespace, where its
/// owners are mapped).
pub fn remove_unpacked(tree: &Path) {
    if let Err(e) = std::fs::remove_dir_all(tree) {
        eprintln!(
            "berth: cannot remove the unpacked image {}: {e}",
            tree.display()
        );
    }
}
