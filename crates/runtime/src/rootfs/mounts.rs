//! Mount points resolved inside the root and the binds made on them.
//!
//! A target is resolved with [`Kernel::open_in_root`] (symlinks stay
//! inside), missing components are created through the resolved parent's
//! descriptor, and the mount goes through `/proc/self/fd/N` of the
//! resolved target; the target is resolved again for the remount, since
//! the first descriptor names the directory under the new mount. A
//! missing component in a read-only directory (an image without overlay,
//! a read-only bind) is created in a cover of that directory
//! ([`super::underlay`]).

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use crate::error::{Error, Result};
use crate::sys::{self, fd_path, Errno, Kernel, MountFlags};

use super::Bind;

/// Which kind of mount point to create when missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    /// A directory.
    Dir,
    /// A regular file (for binds of files).
    File,
}

/// Resolves `path` inside `root` (symlinks stay inside), creating missing
/// components; returns an `O_PATH` descriptor of the target.
pub fn resolve_target(
    k: &dyn Kernel,
    root: &OwnedFd,
    path: &str,
    kind: TargetKind,
) -> Result<OwnedFd> {
    let comps: Vec<&str> = path
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    if comps.contains(&"..") {
        return Err(Error::Usage(format!(
            "container path {path:?} must not contain `..`"
        )));
    }
    let open = |rel: &str| k.open_in_root(root.as_fd(), rel, OFlags::PATH);
    let mut target = open("/").map_err(|e| Error::sys("open the container root", None, e))?;
    for (i, comp) in comps.iter().enumerate() {
        let prefix = comps[..=i].join("/");
        match open(&prefix) {
            Ok(fd) => target = fd,
            Err(Errno::NOENT) => {
                let last = i + 1 == comps.len();
                // Create in the resolved parent (a real directory inside root).
                let parent = comps[..i].join("/");
                let file = last && kind == TargetKind::File;
                let mut created = create(k, root, &parent, comp, file, path)?;
                if created == Err(Errno::ROFS) {
                    // A read-only directory (of a binds-only root's image,
                    // or a read-only bind): cover it with a tmpfs that
                    // binds its entries back, and create there.
                    super::underlay::cover(k, root, &parent)?;
                    created = create(k, root, &parent, comp, file, path)?;
                }
                match created {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(Error::sys("create mount point", Some(path.into()), e)),
                }
                target = open(&prefix)
                    .map_err(|e| Error::sys("open mount point", Some(path.into()), e))?;
            }
            Err(e) => return Err(Error::sys("resolve in the image", Some(path.into()), e)),
        }
    }
    Ok(target)
}

/// Creates `name` (a file or a directory) in the directory `parent`
/// resolved inside `root`; the outer error is the parent's resolution, the
/// inner the creation's (for `path`'s messages).
fn create(
    k: &dyn Kernel,
    root: &OwnedFd,
    parent: &str,
    name: &str,
    file: bool,
    path: &str,
) -> Result<std::result::Result<(), Errno>> {
    let dir = k
        .open_in_root(root.as_fd(), parent, OFlags::DIRECTORY | OFlags::RDONLY)
        .map_err(|e| Error::sys("resolve the parent of", Some(path.into()), e))?;
    Ok(if file {
        rustix::fs::openat(
            &dir,
            name,
            OFlags::CREATE | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .map(drop)
    } else {
        rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o755))
    })
}

/// Whether `path` exists inside `root` (resolved as a mount target is).
pub fn exists_in_root(k: &dyn Kernel, root: &OwnedFd, path: &str) -> bool {
    k.open_in_root(root.as_fd(), path, OFlags::PATH).is_ok()
}

/// Mount flags that a bind must keep: those of the source mount that a
/// user namespace may not clear (locked flags), plus nosuid and nodev.
pub fn locked_flags(path: &Path) -> MountFlags {
    let mut flags = libc::MS_NOSUID | libc::MS_NODEV;
    if let Ok(st) = rustix::fs::statvfs(path) {
        use rustix::fs::StatVfsMountFlags as F;
        for (st_flag, ms) in [
            (F::RDONLY, libc::MS_RDONLY),
            (F::NOEXEC, libc::MS_NOEXEC),
            (F::NOATIME, libc::MS_NOATIME),
            (F::NODIRATIME, libc::MS_NODIRATIME),
            (F::RELATIME, libc::MS_RELATIME),
        ] {
            if st.f_flag.contains(st_flag) {
                flags |= ms;
            }
        }
    }
    flags
}

/// How [`bind`] binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BindHow {
    /// The mount point's kind when it must be created.
    pub kind: TargetKind,
    /// Read-only (all the way down when `recursive`).
    pub readonly: bool,
    /// The source's submounts too (`MS_REC`).
    pub recursive: bool,
}

impl BindHow {
    /// A recursive bind of a directory.
    pub const fn dir(readonly: bool) -> Self {
        BindHow {
            kind: TargetKind::Dir,
            readonly,
            recursive: true,
        }
    }

    /// A bind of a single file.
    pub const fn file(readonly: bool) -> Self {
        BindHow {
            kind: TargetKind::File,
            readonly,
            recursive: false,
        }
    }
}

/// Binds `source` onto `target` inside `root`, then applies nosuid, nodev
/// and read-only as asked (to every submount too when recursive).
pub fn bind(
    k: &dyn Kernel,
    source: &Path,
    root: &OwnedFd,
    target: &str,
    how: BindHow,
) -> Result<()> {
    let under = resolve_target(k, root, target, how.kind)?;
    let rec = if how.recursive { libc::MS_REC } else { 0 };
    k.mount(
        Some(source),
        &fd_path(&under),
        None,
        libc::MS_BIND | rec,
        None,
    )
    .map_err(|e| Error::sys("bind", Some(target.into()), e))?;
    drop(under);
    let on_top = resolve_target(k, root, target, how.kind)?;
    let mut flags = libc::MS_REMOUNT | libc::MS_BIND | locked_flags(source);
    if how.readonly {
        flags |= libc::MS_RDONLY;
    }
    k.mount(None, &fd_path(&on_top), None, flags, None)
        .map_err(|e| Error::sys("remount bind", Some(target.into()), e))?;
    if how.recursive {
        below_too(k, &on_top, how.readonly)
            .map_err(|e| Error::sys("remount submounts", Some(target.into()), e))?;
    }
    Ok(())
}

/// Gives the mounts below a recursive bind what its top mount got: nosuid,
/// nodev and, for a read-only bind, read-only (a `:ro` bind of a tree with
/// an NFS automount or `/sys/fs/cgroup` inside is read-only all the way
/// down, runc's `rro`). `mount_setattr(AT_RECURSIVE)` where the kernel has
/// it (5.12), else each submount listed in mountinfo is remounted.
pub fn below_too(k: &dyn Kernel, top: &OwnedFd, readonly: bool) -> std::result::Result<(), Errno> {
    let mut set = sys::ATTR_NOSUID | sys::ATTR_NODEV;
    if readonly {
        set |= sys::ATTR_RDONLY;
    }
    match k.set_mount_attr_recursive(top.as_fd(), set) {
        Err(Errno::NOSYS) => {}
        other => return other,
    }
    let io = |e: std::io::Error| Errno::from_io_error(&e).unwrap_or(Errno::IO);
    let top_path = std::fs::read_link(fd_path(top)).map_err(io)?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").map_err(io)?;
    for point in submounts(&mountinfo, &top_path) {
        let mut flags = libc::MS_REMOUNT | libc::MS_BIND | locked_flags(&point);
        if readonly {
            flags |= libc::MS_RDONLY;
        }
        k.mount(None, &point, None, flags, None)?;
    }
    Ok(())
}

/// Mount points strictly below `top` in a mountinfo text (field 5, with the
/// kernel's octal escapes undone), parents first.
pub fn submounts(mountinfo: &str, top: &Path) -> Vec<PathBuf> {
    let unescape = |s: &str| {
        let b = s.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            let octal = b.get(i + 1..i + 4).and_then(|d| {
                std::str::from_utf8(d)
                    .ok()
                    .and_then(|d| u8::from_str_radix(d, 8).ok())
            });
            match (b[i], octal) {
                (b'\\', Some(c)) => {
                    out.push(c);
                    i += 4;
                }
                (c, _) => {
                    out.push(c);
                    i += 1;
                }
            }
        }
        PathBuf::from(<std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(out))
    };
    mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape)
        .filter(|p| p != top && p.starts_with(top))
        .collect()
}

/// Binds a host device node onto `target` inside `root`. No remount: the
/// bind keeps the host mount's flags (devtmpfs allows devices), where
/// berth's other binds add `nodev`.
fn bind_device(k: &dyn Kernel, source: &Path, root: &OwnedFd, target: &str) -> Result<()> {
    let under = resolve_target(k, root, target, TargetKind::File)?;
    k.mount(Some(source), &fd_path(&under), None, libc::MS_BIND, None)
        .map_err(|e| Error::sys("bind device", Some(target.into()), e))
}

/// Mounts the user's binds in order; a file source gets a file mount point.
pub fn user_binds(k: &dyn Kernel, root: &OwnedFd, binds: &[Bind]) -> Result<()> {
    for b in binds {
        let result = if b.device {
            bind_device(k, &b.source, root, &b.target)
        } else if let Some(data) = &b.options.tmpfs {
            tmpfs(k, root, b, data)
        } else {
            let dir = std::fs::metadata(&b.source)
                .map(|m| m.is_dir())
                .unwrap_or(true);
            let how = BindHow {
                kind: if dir {
                    TargetKind::Dir
                } else {
                    TargetKind::File
                },
                readonly: b.readonly,
                recursive: true,
            };
            bind(k, &b.source, root, &b.target, how).and_then(|()| after_bind(k, root, b))
        };
        result.map_err(|e| Error::Bind {
            spec: b.spec.clone(),
            reason: e.to_string(),
        })?;
    }
    Ok(())
}

/// A bind's own options once it is mounted: noexec, propagation.
fn after_bind(k: &dyn Kernel, root: &OwnedFd, b: &Bind) -> Result<()> {
    if b.options.noexec {
        let at = resolve_target(k, root, &b.target, TargetKind::Dir)?;
        let mut flags =
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_NOEXEC | locked_flags(&b.source);
        if b.readonly {
            flags |= libc::MS_RDONLY;
        }
        k.mount(None, &fd_path(&at), None, flags, None)
            .map_err(|e| Error::sys("remount noexec", Some((&b.target).into()), e))?;
    }
    propagate(k, root, b)
}

/// Sets the propagation the user asked for on the mount at `b.target`.
fn propagate(k: &dyn Kernel, root: &OwnedFd, b: &Bind) -> Result<()> {
    if let Some(p) = b.options.propagation {
        let at = resolve_target(k, root, &b.target, TargetKind::Dir)?;
        k.mount(None, &fd_path(&at), None, p.flags(), None)
            .map_err(|e| Error::sys("set the propagation of", Some((&b.target).into()), e))?;
    }
    Ok(())
}

/// A fresh tmpfs at `b.target` with tmpfs options `data` (nosuid and
/// nodev, as every bind; read-only and noexec if asked).
fn tmpfs(k: &dyn Kernel, root: &OwnedFd, b: &Bind, data: &str) -> Result<()> {
    let at = resolve_target(k, root, &b.target, TargetKind::Dir)?;
    let mut flags = libc::MS_NOSUID | libc::MS_NODEV;
    if b.readonly {
        flags |= libc::MS_RDONLY;
    }
    if b.options.noexec {
        flags |= libc::MS_NOEXEC;
    }
    let data = (!data.is_empty()).then_some(data);
    k.mount(
        Some(Path::new("tmpfs")),
        &fd_path(&at),
        Some("tmpfs"),
        flags,
        data,
    )
    .map_err(|e| Error::sys("mount a tmpfs on", Some((&b.target).into()), e))?;
    drop(at);
    propagate(k, root, b)
}

/// Covers `hidden` (berth's runtime directory) with an empty read-only
/// tmpfs wherever a bind shows it in the container (host /tmp holds
/// `/tmp/berth-UID`; a home may hold `$XDG_RUNTIME_DIR`): what berth later
/// trusts there (keeper and container records, the image cache, hook
/// bundles) is out of the container's reach. Binds whose source cannot
/// contain it cost no lookup.
pub fn hide_dir(k: &dyn Kernel, root: &OwnedFd, binds: &[Bind], hidden: &Path) -> Result<()> {
    for b in binds
        .iter()
        .filter(|b| !b.device && b.options.tmpfs.is_none())
    {
        // The runtime directory is canonical (made by berth); a source
        // must be a prefix of it, in its real form, to show it.
        let Ok(rest) = hidden.strip_prefix(&b.source).or_else(|_| {
            let real = std::fs::canonicalize(&b.source).map_err(|_| ())?;
            hidden.strip_prefix(real).map_err(|_| ())
        }) else {
            continue;
        };
        let inside = Path::new(&b.target).join(rest);
        let Some(inside) = inside.to_str() else {
            continue;
        };
        let present = k
            .open_in_root(root.as_fd(), inside, OFlags::PATH | OFlags::DIRECTORY)
            .is_ok();
        if !present {
            continue;
        }
        let at = resolve_target(k, root, inside, TargetKind::Dir)?;
        k.mount(
            Some(Path::new("berth-hidden")),
            &fd_path(&at),
            Some("tmpfs"),
            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            Some("size=0,mode=0500"),
        )
        .map_err(|e| Error::sys("hide the runtime directory at", Some(inside.into()), e))?;
    }
    Ok(())
}
