//! A container's minimal /dev: a tmpfs with the host's harmless nodes
//! bound in (a rootless process cannot mknod), a devpts of its own and
//! the links a program expects.

use std::os::fd::OwnedFd;
use std::path::Path;

use crate::error::{Error, Result};
use crate::sys::{fd_path, Kernel, MountFlags};

use super::mounts::{bind, resolve_target, BindHow, TargetKind};
use super::Profile;

/// The host's device nodes every container gets.
pub const DEV_NODES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// The flags of a container's /dev once populated (`MS_REMOUNT` of that
/// mount alone).
pub const DEV_READ_ONLY: MountFlags = libc::MS_REMOUNT
    | libc::MS_BIND
    | libc::MS_RDONLY
    | libc::MS_NOSUID
    | libc::MS_NODEV
    | libc::MS_NOEXEC;

/// Mounts the minimal /dev of `profile` under `root`; returns the
/// descriptor of the new /dev (for its read-only remount).
pub fn populate(
    k: &dyn Kernel,
    root: &OwnedFd,
    profile: Profile,
    own_ipc: bool,
) -> Result<OwnedFd> {
    let under = resolve_target(k, root, "/dev", TargetKind::Dir)?;
    k.mount(
        Some(Path::new("berth-dev")),
        &fd_path(&under),
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NOEXEC | libc::MS_NODEV,
        Some("mode=0755,size=64k"),
    )
    .map_err(|e| Error::sys("mount a tmpfs on", Some("/dev".into()), e))?;
    // Re-resolve: the tmpfs now covers the old /dev.
    let dev = resolve_target(k, root, "/dev", TargetKind::Dir)?;
    for node in DEV_NODES {
        let host = Path::new("/dev").join(node);
        if !host.exists() {
            continue;
        }
        let t = resolve_target(k, root, &format!("/dev/{node}"), TargetKind::File)?;
        k.mount(Some(&host), &fd_path(&t), None, libc::MS_BIND, None)
            .map_err(|e| Error::sys("bind", Some(host.clone()), e))?;
    }
    if mount_devpts(k, root).is_ok() {
        let _ = rustix::fs::symlinkat("pts/ptmx", &dev, "ptmx");
    }
    for (link, to) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        let _ = rustix::fs::symlinkat(to, &dev, link);
    }
    match profile {
        // The host's /dev/shm: MPI ranks in different containers of a node
        // talk through it.
        Profile::Container => {
            if Path::new("/dev/shm").is_dir() {
                let how = BindHow {
                    recursive: false,
                    ..BindHow::dir(false)
                };
                bind(k, Path::new("/dev/shm"), root, "/dev/shm", how)?;
            }
            let mqueue = Path::new("/dev/mqueue");
            if own_ipc {
                // The IPC namespace's own POSIX message queues.
                let at = resolve_target(k, root, "/dev/mqueue", TargetKind::Dir)?;
                k.mount(
                    Some(Path::new("mqueue")),
                    &fd_path(&at),
                    Some("mqueue"),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    None,
                )
                .map_err(|e| Error::sys("mount mqueue on", Some(mqueue.into()), e))?;
            } else if mqueue.is_dir() {
                let how = BindHow {
                    recursive: false,
                    ..BindHow::dir(false)
                };
                let _ = bind(k, mqueue, root, "/dev/mqueue", how);
            }
        }
        // A build step's own.
        Profile::BuildStep => {
            let shm = resolve_target(k, root, "/dev/shm", TargetKind::Dir)?;
            k.mount(
                Some(Path::new("berth-shm")),
                &fd_path(&shm),
                Some("tmpfs"),
                libc::MS_NOSUID | libc::MS_NODEV,
                Some("mode=1777"),
            )
            .map_err(|e| Error::sys("mount a tmpfs on", Some("/dev/shm".into()), e))?;
        }
    }
    Ok(dev)
}

/// A new devpts instance at the root's /dev/pts (its own pty numbers and
/// slaves; `/dev/ptmx` links to its `ptmx`).
pub fn mount_devpts(k: &dyn Kernel, root: &OwnedFd) -> Result<()> {
    let pts = resolve_target(k, root, "/dev/pts", TargetKind::Dir)?;
    k.mount(
        Some(Path::new("devpts")),
        &fd_path(&pts),
        Some("devpts"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620"),
    )
    .map_err(|e| Error::sys("mount devpts on", Some("/dev/pts".into()), e))
}

/// The root's /dev when it is berth's read-only tmpfs (not a bind of the
/// user's, which stays as it was bound).
pub fn read_only_dev(k: &dyn Kernel, root: &OwnedFd) -> Option<OwnedFd> {
    use std::os::fd::AsFd;
    let dev = k
        .open_in_root(
            root.as_fd(),
            "dev",
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY,
        )
        .ok()?;
    let st = rustix::fs::fstatvfs(&dev).ok()?;
    let fs = rustix::fs::fstatfs(&dev).ok()?;
    let tmpfs = fs.f_type as i64 == libc::TMPFS_MAGIC;
    (tmpfs && st.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY)).then_some(dev)
}
