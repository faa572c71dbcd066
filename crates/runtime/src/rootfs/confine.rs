//! What a container of real root does not get: /proc's and /sys's
//! dangerous files masked or read-only (runc's lists) and the host's /tmp
//! (a private one instead).

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{FileType, OFlags};

use crate::error::{Error, Result};
use crate::sys::{fd_path, Kernel};

use super::mounts::{below_too, locked_flags, resolve_target, TargetKind};

/// Files and directories of /proc and /sys hidden from a real-root
/// container (runc's `maskedPaths`, with podman's `/sys/fs/selinux`): a
/// directory gets an empty read-only tmpfs, a file `/dev/null`.
pub const MASKED: &[&str] = &[
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/sys/devices/virtual/powercap",
    "/sys/firmware",
    "/sys/fs/selinux",
];

/// Parts of /proc a real-root container sees read-only (runc's
/// `readonlyPaths`): sysctls (`core_pattern`, `modprobe`), sysrq, irq.
pub const READ_ONLY: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// The kind of an existing `path` inside `root` (not followed if a link).
fn existing(k: &dyn Kernel, root: &OwnedFd, path: &str) -> Option<FileType> {
    let fd = k
        .open_in_root(root.as_fd(), path, OFlags::PATH | OFlags::NOFOLLOW)
        .ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    Some(FileType::from_raw_mode(st.st_mode))
}

/// `path` resolved as a directory or, failing that, as a file.
fn either(k: &dyn Kernel, root: &OwnedFd, path: &str) -> Result<OwnedFd> {
    resolve_target(k, root, path, TargetKind::Dir)
        .or_else(|_| resolve_target(k, root, path, TargetKind::File))
}

/// Masks and write-protects [`MASKED`] and [`READ_ONLY`] under `root`, and
/// mounts a private /tmp; paths this kernel lacks are skipped.
pub fn confine(k: &dyn Kernel, root: &OwnedFd) -> Result<()> {
    for path in MASKED {
        let Some(kind) = existing(k, root, path) else {
            continue;
        };
        // The descriptor stays open until the mount is made.
        let target = either(k, root, path)?;
        let t = fd_path(&target);
        let r = if kind == FileType::Directory {
            k.mount(
                Some(Path::new("berth-masked")),
                &t,
                Some("tmpfs"),
                libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                Some("size=0"),
            )
        } else {
            k.mount(Some(Path::new("/dev/null")), &t, None, libc::MS_BIND, None)
        };
        r.map_err(|e| Error::sys("mask", Some(path.into()), e))?;
    }
    for path in READ_ONLY {
        if existing(k, root, path).is_none() {
            continue;
        }
        let under = either(k, root, path)?;
        let t = fd_path(&under);
        k.mount(Some(&t), &t, None, libc::MS_BIND | libc::MS_REC, None)
            .map_err(|e| Error::sys("bind", Some(path.into()), e))?;
        drop(under);
        let on_top = either(k, root, path)?;
        let top = fd_path(&on_top);
        let flags = libc::MS_REMOUNT
            | libc::MS_BIND
            | libc::MS_RDONLY
            | libc::MS_NOEXEC
            | locked_flags(&top);
        k.mount(None, &top, None, flags, None)
            .map_err(|e| Error::sys("remount read-only", Some(path.into()), e))?;
        below_too(k, &on_top, true)
            .map_err(|e| Error::sys("remount read-only", Some(path.into()), e))?;
    }
    let tmp = resolve_target(k, root, "/tmp", TargetKind::Dir)?;
    k.mount(
        Some(Path::new("berth-tmp")),
        &fd_path(&tmp),
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("mode=1777"),
    )
    .map_err(|e| Error::sys("mount a tmpfs on", Some("/tmp".into()), e))
}
