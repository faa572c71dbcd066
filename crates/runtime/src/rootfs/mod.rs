//! Assembling a root file system inside its own mount namespace, for a
//! container or for a build's RUN step ([`Profile`]), then `pivot_root`.
//!
//! A container's root is an overlay whose lower layer is the keeper's
//! read-only image mount and whose upper layer is a tmpfs (discarded with
//! the container), then /proc, /sys (read-only all the way down), a
//! minimal /dev, identity files and binds. Without `--writable` the
//! overlay is remounted read-only once the mount points exist: the upper
//! layer only exists so that bind targets missing from the image can be
//! created (shifter#231). Read-only remounts come last. Where the kernel
//! refuses overlayfs, a read-only container's root is binds-only instead
//! ([`underlay`]).
//!
//! A build step's root is the stage's own writable directory, with a fresh
//! /proc, /sys read-only, a minimal /dev with its own /dev/shm, and the
//! host's resolv.conf and hosts where the stage has mount points for them.
//!
//! Every mount target is resolved inside the root with
//! [`Kernel::open_in_root`] and mounted through `/proc/self/fd/N`, so a
//! symlink in the image cannot redirect a mount onto the host (the runc
//! CVE-2021-30465 family). All kernel calls go through the [`Kernel`]
//! passed in: `tests.rs` checks the sequence with the recording fake.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use berth_config::RootOverlay;

use crate::error::{Error, Result};
use crate::sys::{self, fd_path, Errno, Kernel};

mod confine;
mod dev;
pub mod fuse_overlay;
mod identity;
mod loader_cache;
pub(crate) mod mounts;
mod options;
mod persistent;
#[cfg(test)]
mod tests;
mod underlay;

pub use identity::IDENTITY_FILE_MAX;
pub use loader_cache::LoaderCache;
pub use mounts::{resolve_target, submounts, TargetKind};
pub use options::{MountOptions, Propagation, TMPFS_OPTIONS};
pub use persistent::PersistentOverlay;

use mounts::{bind, exists_in_root, hide_dir, user_binds, BindHow};

/// One bind mount.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Bind {
    /// Host path.
    pub source: PathBuf,
    /// Path inside the container.
    pub target: String,
    /// Read-only.
    pub readonly: bool,
    /// How the user wrote it, for messages.
    pub spec: String,
    /// A device node: bound as it is, without `nodev` (the bind of an
    /// injected GPU or network device).
    #[serde(default)]
    pub device: bool,
    /// What else the user asked of the mount (noexec, propagation), or a
    /// tmpfs in place of the bind.
    #[serde(default)]
    pub options: MountOptions,
}

/// What the root is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// A container: the host's /dev/shm, identity files, binds, the
    /// runtime directory hidden, /dev read-only once populated.
    Container,
    /// A build's RUN step: a private /dev/shm, the host's resolv.conf and
    /// hosts, no identity files or binds, everything writable but /sys.
    BuildStep,
}

/// What the root is made of.
#[derive(Debug, Clone, Copy)]
pub enum Layers<'a> {
    /// An overlay: `image` (read-only) below a tmpfs mounted on `stage`,
    /// whose `root/` becomes the root.
    Overlay {
        /// The keeper's image mount.
        image: &'a Path,
        /// An empty directory to mount the run's tmpfs on.
        stage: &'a Path,
        /// Keep the overlay writable.
        writable: bool,
        /// A host directory whose `upper/` is the upper layer (in place of
        /// the tmpfs's), or, read-only, a layer above the image.
        persistent: Option<&'a PersistentOverlay>,
        /// Mounted in a user namespace: overlayfs keeps its marks in
        /// `user.` extended attributes (without them it cannot rename a
        /// directory dpkg unpacked: EXDEV).
        user_xattr: bool,
        /// Root emulation runs the command: apt's hint
        /// ([`crate::seccomp::root_emulation::APT_HINT_PATH`]) sits in a
        /// layer of its own above the image, never in the upper layer.
        apt_hint: bool,
        /// A writable root's loader cache, in the same layer
        /// ([`loader_cache`]).
        loader_cache: Option<&'a LoaderCache>,
        /// Kernel overlayfs, or a binds-only root where the kernel refuses
        /// it or the site chose so ([`underlay`]).
        overlay: RootOverlay,
    },
    /// An existing directory (a build stage's root), bound onto itself.
    Directory(&'a Path),
}

/// What the root file system needs.
#[derive(Debug, Clone, Copy)]
pub struct RootfsPlan<'a> {
    /// Container or build step.
    pub profile: Profile,
    /// What the root is made of.
    pub layers: Layers<'a>,
    /// Mount a fresh /proc (the run has its own PID namespace).
    pub fresh_proc: bool,
    /// Binds in mount order.
    pub binds: &'a [Bind],
    /// `/etc/passwd` line for the user, if the image lacks one.
    pub passwd_line: Option<&'a str>,
    /// `/etc/group` line for the user's group, if the image lacks one.
    pub group_line: Option<&'a str>,
    /// The working directory to create if missing.
    pub workdir: &'a str,
    /// A container of real root: /proc's dangerous files masked or
    /// read-only (runc's lists) and a private /tmp instead of the host's.
    pub confined: bool,
    /// Directories to hide wherever a bind shows them (berth's runtime
    /// directory; a persistent overlay's, whose layer must change only
    /// through the overlay: a live commit reads it), canonical.
    pub hidden: &'a [&'a Path],
    /// The container has its own IPC namespace (made in the current user
    /// namespace): /dev/mqueue is its own mqueue, not the host's.
    pub own_ipc: bool,
}

/// Builds the root file system and pivots into it. Runs in the container's
/// (or step's) fresh mount namespace.
pub fn assemble(k: &dyn Kernel, plan: &RootfsPlan<'_>) -> Result<()> {
    let root = prepare(k, plan)?;
    pivot(k, &root)
}

/// [`assemble`] on a base mounted earlier by [`mount_base`] (before the
/// container's PID namespace, so that a fuse-overlayfs server stays out
/// of it).
pub fn assemble_on(k: &dyn Kernel, plan: &RootfsPlan<'_>, base: Base<'_>) -> Result<()> {
    let root = prepare_on(k, plan, base)?;
    pivot(k, &root)
}

/// The root's base, mounted: the path of the root and, for an overlay, the
/// image and the stage.
#[derive(Debug)]
pub struct Base<'a> {
    root: PathBuf,
    image: Option<(&'a Path, &'a Path)>,
}

/// Mounts the root's base (the overlay, or the stage's own root) in the
/// current mount namespace, made a slave first.
pub fn mount_base<'a>(k: &dyn Kernel, layers: Layers<'a>) -> Result<Base<'a>> {
    // Nothing mounted from here on may propagate to the keeper or the host.
    sys::make_rslave(k).map_err(|e| Error::sys("make / a slave mount", None, e))?;
    let (root, image) = base(k, layers)?;
    Ok(Base { root, image })
}

/// Builds the root file system (without entering it) and returns its
/// path. Also used for a keeper's prepared root, which runs copy with
/// their mount namespace and then [`extend_and_pivot`].
pub fn prepare(k: &dyn Kernel, plan: &RootfsPlan<'_>) -> Result<PathBuf> {
    let base = mount_base(k, plan.layers)?;
    prepare_on(k, plan, base)
}

/// [`prepare`] on a base already mounted.
fn prepare_on(k: &dyn Kernel, plan: &RootfsPlan<'_>, base: Base<'_>) -> Result<PathBuf> {
    let Base { root, image } = base;
    let root_fd: OwnedFd = std::fs::File::open(&root)
        .map_err(|e| Error::io("open", &root, e))?
        .into();

    // /proc and /sys.
    if plan.fresh_proc || plan.profile == Profile::BuildStep {
        let proc_t = resolve_target(k, &root_fd, "/proc", TargetKind::Dir)?;
        k.mount(
            Some(Path::new("proc")),
            &fd_path(&proc_t),
            Some("proc"),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            None,
        )
        .map_err(|e| Error::sys("mount proc on", Some("/proc".into()), e))?;
    } else {
        bind(
            k,
            Path::new("/proc"),
            &root_fd,
            "/proc",
            BindHow::dir(false),
        )?;
    }
    bind(k, Path::new("/sys"), &root_fd, "/sys", BindHow::dir(true))?;
    if plan.confined {
        confine::confine(k, &root_fd)?;
    }
    let dev = dev::populate(k, &root_fd, plan.profile, plan.own_ipc)?;

    // Identity and name resolution.
    let mut etc_files: Vec<(&str, PathBuf)> = Vec::new();
    if let (Profile::Container, Some((image, stage))) = (plan.profile, image) {
        let files = [
            ("passwd", "/etc/passwd", plan.passwd_line),
            ("group", "/etc/group", plan.group_line),
        ];
        for (name, target, line) in files {
            if let Some(file) = identity::write_file(k, image, name, line, stage)? {
                etc_files.push((target, file));
            }
        }
    }
    for host in ["/etc/resolv.conf", "/etc/hosts"] {
        let wanted = match plan.profile {
            Profile::Container => Path::new(host).exists(),
            // Only where the stage has a mount point (the worker makes one).
            Profile::BuildStep => Path::new(host).is_file() && exists_in_root(k, &root_fd, host),
        };
        if wanted {
            etc_files.push((host, PathBuf::from(host)));
        }
    }
    for (target, source) in &etc_files {
        bind(k, source, &root_fd, target, BindHow::file(true))?;
    }

    if plan.profile == Profile::Container {
        // The working directory exists (Docker creates a missing WORKDIR).
        if plan.workdir != "/" && !plan.binds.iter().any(|b| b.target == plan.workdir) {
            let _ = resolve_target(k, &root_fd, plan.workdir, TargetKind::Dir);
        }
        // User binds, parents first.
        user_binds(k, &root_fd, plan.binds)?;
        for hidden in plan.hidden {
            hide_dir(k, &root_fd, plan.binds, hidden)?;
        }
        // /dev is read-only once populated (its own mount, even if a bind
        // now covers it): runs of a keeper share the prepared root, and
        // one container must not replace /dev/stdout or /dev/ptmx, drop
        // files or fill the tmpfs for the next. Device nodes stay writable
        // (a read-only mount refuses writes to files, not to devices);
        // /dev/shm, /dev/pts and /dev/mqueue are mounts of their own.
        k.mount(None, &fd_path(&dev), None, dev::DEV_READ_ONLY, None)
            .map_err(|e| Error::sys("remount read-only", Some("/dev".into()), e))?;
    }
    underlay::seal_all(k, &root_fd)?;
    if let Layers::Overlay {
        writable: false, ..
    } = plan.layers
    {
        k.mount(None, &root, None, ROOT_READ_ONLY, None)
            .map_err(|e| Error::sys("remount read-only", Some(root.clone()), e))?;
    }
    Ok(root)
}

/// The remount that makes a container's root read-only (and a cover).
const ROOT_READ_ONLY: sys::MountFlags =
    libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV;

/// Fault injection for tests: set, a mount in a user namespace takes the
/// kernel overlay's refusal (EPERM, as before Linux 5.11) without asking
/// the kernel, so the fallbacks run on a kernel that allows it.
pub const REFUSE_OVERLAY_FAULT: &str = "BERTH_FAULT_REFUSE_OVERLAY";

/// The overlay's mount flags (the kernel's or fuse-overlayfs's).
const OVERLAY_FLAGS: sys::MountFlags = libc::MS_NOSUID | libc::MS_NODEV;

/// Mounts the root's base; the root's path and, for an overlay, the image
/// and the stage.
fn base<'a>(k: &dyn Kernel, layers: Layers<'a>) -> Result<(PathBuf, Option<(&'a Path, &'a Path)>)> {
    match layers {
        Layers::Directory(root) => {
            // pivot_root needs a mount point.
            k.mount(Some(root), root, None, libc::MS_BIND | libc::MS_REC, None)
                .map_err(|e| Error::sys("bind the stage root on itself", Some(root.into()), e))?;
            Ok((root.to_path_buf(), None))
        }
        Layers::Overlay {
            image,
            stage,
            persistent,
            user_xattr,
            apt_hint,
            loader_cache,
            writable,
            overlay,
        } => {
            k.mount(
                Some(Path::new("berth")),
                stage,
                Some("tmpfs"),
                libc::MS_NOSUID | libc::MS_NODEV,
                Some("mode=0755"),
            )
            .map_err(|e| Error::sys("mount a tmpfs on", Some(stage.into()), e))?;
            for d in ["upper", "work", "root"] {
                match std::fs::create_dir(stage.join(d)) {
                    // The tmpfs is fresh; only a test's stage has them.
                    Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                        return Err(Error::io("create", stage.join(d), e))
                    }
                    _ => {}
                }
            }
            let root = stage.join("root");
            let needs_layer = writable || persistent.is_some();
            if overlay == RootOverlay::None && !needs_layer {
                underlay::root(k, image, &root)?;
                return Ok((root, Some((image, stage))));
            }
            let hints = stage.join("hints");
            if apt_hint || loader_cache.is_some() {
                std::fs::create_dir(&hints).map_err(|e| Error::io("create", &hints, e))?;
            }
            let apt = apt_hint
                && crate::seccomp::root_emulation::write_apt_hint(image, &hints)
                    .inspect_err(|e| tracing::warn!("cannot write apt's hint: {e}"))
                    .unwrap_or(false);
            // The engine left the injected libraries off LD_LIBRARY_PATH
            // for this cache (having checked the image's directories): not
            // having it is an error.
            let cache = match loader_cache {
                Some(c) => {
                    let written = loader_cache::write(image, &hints, c)
                        .map_err(|e| Error::io("write the loader cache into", &hints, e))?;
                    if !written {
                        return Err(Error::Setup(
                            "the image's /etc or /etc/ld.so.conf.d is not a directory: no place for the loader cache with the injected libraries".into(),
                        ));
                    }
                    true
                }
                None => false,
            };
            let hints = (apt || cache).then_some(hints.as_path());
            if overlay == RootOverlay::None {
                return Err(no_overlay(None, None));
            }
            let opts = persistent::overlay_options(image, stage, persistent, user_xattr, hints);
            let log = stage.join("fuse-overlayfs.log");
            // A directory stays with the overlay that wrote it (rootless
            // runs: real root's kernel overlay keeps its own marks).
            let dir = persistent.filter(|_| user_xattr);
            let written = dir.and_then(|p| persistent::Writer::of(p).map(|w| (p, w)));
            let record = |w: persistent::Writer| {
                if let Some(p) = dir {
                    w.record(p);
                }
            };
            // In a user namespace only: real root keeps the kernel's
            // overlay (fuse-overlayfs would run with every capability).
            let fuse_wanted = overlay == RootOverlay::Fuse && user_xattr;
            let written_by_fuse = matches!(written, Some((_, persistent::Writer::Fuse)));
            if let Some((p, w)) = written.filter(|_| fuse_wanted && !written_by_fuse) {
                let why = " ([runtime] overlay = \"fuse\")";
                return Err(w.refuse(p, persistent::Writer::Fuse, why));
            }
            if fuse_wanted || written_by_fuse {
                fuse_overlay::mount(k, &opts, &root, OVERLAY_FLAGS, &log)?;
                record(persistent::Writer::Fuse);
                return Ok((root, Some((image, stage))));
            }
            let mounted = if user_xattr && std::env::var_os(REFUSE_OVERLAY_FAULT).is_some() {
                Err(Errno::PERM)
            } else {
                k.mount(
                    Some(Path::new("berth")),
                    &root,
                    Some("overlay"),
                    OVERLAY_FLAGS,
                    Some(&opts),
                )
            };
            match mounted {
                Ok(()) => record(persistent::Writer::Kernel),
                // The kernel refuses overlayfs here (before 5.11 in a user
                // namespace, or turned off): a read-only run does not need it.
                Err(e @ (Errno::PERM | Errno::NODEV | Errno::INVAL))
                    if overlay == RootOverlay::Auto && user_xattr && !needs_layer =>
                {
                    tracing::debug!("no overlayfs ({e}): a binds-only root");
                    if hints.is_some() {
                        let _ = std::fs::remove_dir_all(stage.join("hints"));
                    }
                    underlay::root(k, image, &root)?;
                }
                // EINVAL: `userxattr` unknown before 5.11 (or a persistent
                // layer's file system, whose error is its own). A writable
                // run gets fuse-overlayfs where it is installed.
                Err(e)
                    if overlay == RootOverlay::Auto
                        && user_xattr
                        && (matches!(e, Errno::PERM | Errno::NODEV)
                            || (e == Errno::INVAL && persistent.is_none())) =>
                {
                    if let Some((p, w)) = written {
                        let why =
                            format!(" (this kernel refuses overlayfs in a user namespace: {e})");
                        return Err(w.refuse(p, persistent::Writer::Fuse, &why));
                    }
                    if fuse_overlay::program().is_none() {
                        return Err(no_overlay(Some(e), None));
                    }
                    tracing::debug!("no overlayfs ({e}): fuse-overlayfs");
                    fuse_overlay::mount(k, &opts, &root, OVERLAY_FLAGS, &log)
                        .map_err(|f| no_overlay(Some(e), Some(&f)))?;
                    record(persistent::Writer::Fuse);
                }
                Err(e) => return Err(Error::sys("mount the overlay on", Some(root.clone()), e)),
            }
            Ok((root, Some((image, stage))))
        }
    }
}

/// A writable run where the root cannot have an overlay: the kernel's
/// refusal (`errno`) with fuse-overlayfs missing or failing (`fuse`, its
/// error), or the site's `[runtime] overlay = "none"`.
fn no_overlay(errno: Option<Errno>, fuse: Option<&Error>) -> Error {
    let why = match errno {
        Some(e) => format!(
            "this kernel refuses overlayfs in a user namespace ({e}; Linux 5.11 and later allow it)"
        ),
        None => "the site gives containers no overlay ([runtime] overlay = \"none\")".into(),
    };
    let fuse = match (errno, fuse) {
        (_, Some(f)) => format!(". fuse-overlayfs, which stands in for it, failed: {f}"),
        (Some(_), None) => format!("; or {}", fuse_overlay::INSTALL_HINT),
        (None, None) => String::new(),
    };
    Error::Mount(format!(
        "a writable container (--writable, --overlay, --save, --name) needs a layer stacked on \
         the read-only image, and {why}. Run it read-only and write to a bound directory \
         (-v DIR:/path), or build the image with the change (berth build){fuse}"
    ))
}

/// For a run on a prepared root (a copy of the keeper's template mount
/// namespace): adds the run's own binds and working directory, creating
/// missing mount points in the (shared, memory-backed) upper layer, then
/// pivots. The template's root mount is read-only; this copy's is made
/// writable only while mount points are created.
pub fn extend_and_pivot(
    k: &dyn Kernel,
    root: &Path,
    binds: &[Bind],
    workdir: &str,
    hidden: Option<&Path>,
) -> Result<()> {
    let root_fd: OwnedFd = std::fs::File::open(root)
        .map_err(|e| Error::io("open", root, e))?
        .into();
    let missing = |p: &str| p.trim_start_matches('/').is_empty() || !exists_in_root(k, &root_fd, p);
    let need_write =
        binds.iter().any(|b| missing(&b.target)) || (workdir != "/" && missing(workdir));
    // A mount point to create under /dev needs the (read-only) /dev too.
    let dev = binds
        .iter()
        .any(|b| b.target.starts_with("/dev/") && missing(&b.target))
        .then(|| dev::read_only_dev(k, &root_fd))
        .flatten();
    let writable_root = ROOT_READ_ONLY & !libc::MS_RDONLY;
    if need_write {
        k.mount(None, root, None, writable_root, None)
            .map_err(|e| Error::sys("remount writable", Some(root.into()), e))?;
    }
    if let Some(dev) = &dev {
        k.mount(
            None,
            &fd_path(dev),
            None,
            dev::DEV_READ_ONLY & !libc::MS_RDONLY,
            None,
        )
        .map_err(|e| Error::sys("remount writable", Some("/dev".into()), e))?;
    }
    if workdir != "/" && !binds.iter().any(|b| b.target == workdir) {
        let _ = resolve_target(k, &root_fd, workdir, TargetKind::Dir);
    }
    user_binds(k, &root_fd, binds)?;
    if let Some(hidden) = hidden {
        hide_dir(k, &root_fd, binds, hidden)?;
    }
    if let Some(dev) = &dev {
        k.mount(None, &fd_path(dev), None, dev::DEV_READ_ONLY, None)
            .map_err(|e| Error::sys("remount read-only", Some("/dev".into()), e))?;
    }
    underlay::seal_all(k, &root_fd)?;
    if need_write {
        k.mount(None, root, None, ROOT_READ_ONLY, None)
            .map_err(|e| Error::sys("remount read-only", Some(root.into()), e))?;
    }
    // Terminals of its own: the prepared root's devpts is every run's, and
    // one container could open another's pty slaves (same uid, 0620).
    if let Err(e) = dev::mount_devpts(k, &root_fd) {
        tracing::warn!("{e}: this run shares the prepared root's terminals");
    }
    drop(root_fd);
    pivot(k, root)
}

/// `pivot_root` into `root` and detach the old root.
fn pivot(k: &dyn Kernel, root: &Path) -> Result<()> {
    k.pivot_root(root)
        .map_err(|e| Error::sys("pivot_root into", Some(root.into()), e))
}
