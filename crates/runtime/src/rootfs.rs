//! Assembling a container's root file system inside its own mount namespace:
//! an overlay whose lower layer is the keeper's read-only image mount and
//! whose upper layer is a tmpfs (discarded with the container), then /proc,
//! /sys, a minimal /dev, identity files and binds, then `pivot_root`.
//!
//! Without `--writable` the overlay is remounted read-only once the mount
//! points exist: the upper layer only exists so that bind targets missing
//! from the image can be created (shifter#231).
//!
//! Bind targets are resolved with `openat2(RESOLVE_IN_ROOT)` and mounted
//! through `/proc/self/fd/N`, so a symlink in the image cannot redirect a
//! mount onto the host (the runc CVE-2021-30465 family).

use std::fs;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{openat2, Mode, OFlags, ResolveFlags};

use crate::error::{Error, Result};
use crate::sys;

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
}

/// What the root file system needs.
pub struct RootfsPlan<'a> {
    /// The keeper's image mount.
    pub image: &'a Path,
    /// An empty directory to mount the run's tmpfs on.
    pub stage: &'a Path,
    /// Keep the overlay writable.
    pub writable: bool,
    /// Mount a fresh /proc (the run has its own PID namespace).
    pub fresh_proc: bool,
    /// Binds in mount order.
    pub binds: &'a [Bind],
    /// `/etc/passwd` line for the user, if the image lacks one.
    pub passwd_line: Option<String>,
    /// `/etc/group` line for the user's group, if the image lacks one.
    pub group_line: Option<String>,
    /// The working directory to create if missing.
    pub workdir: &'a str,
    /// A container of real root: /proc's dangerous files masked or
    /// read-only (runc's lists) and a private /tmp instead of the host's.
    pub confined: bool,
}

/// Files and directories of /proc and /sys hidden from a real-root
/// container (runc's `maskedPaths`, with podman's `/sys/fs/selinux`): a directory gets an empty
/// read-only tmpfs, a file `/dev/null`.
const MASKED: &[&str] = &[
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
const READ_ONLY: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// Masks and write-protects [`MASKED`] and [`READ_ONLY`] under `root`;
/// paths this kernel lacks are skipped.
fn confine_proc_and_sys(root: &OwnedFd) -> Result<()> {
    let existing = |p: &str| {
        openat2(
            root.as_fd(),
            p.trim_start_matches('/'),
            OFlags::PATH | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
            ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
        )
        .ok()
        .and_then(|fd| rustix::fs::fstat(&fd).ok())
    };
    for path in MASKED {
        let Some(st) = existing(path) else { continue };
        let under = resolve_target(root, path, TargetKind::Dir)
            .or_else(|_| resolve_target(root, path, TargetKind::File))?;
        let t = fd_path(&under);
        let r =
            if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory {
                sys::mount(
                    Some(Path::new("berth-masked")),
                    &t,
                    Some("tmpfs"),
                    libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    Some("size=0"),
                )
            } else {
                sys::mount(Some(Path::new("/dev/null")), &t, None, libc::MS_BIND, None)
            };
        r.map_err(|e| mount_err("mask", Path::new(path), e))?;
    }
    for path in READ_ONLY {
        if existing(path).is_none() {
            continue;
        }
        let under = resolve_target(root, path, TargetKind::Dir)
            .or_else(|_| resolve_target(root, path, TargetKind::File))?;
        let t = fd_path(&under);
        sys::mount(Some(&t), &t, None, libc::MS_BIND | libc::MS_REC, None)
            .map_err(|e| mount_err("bind", Path::new(path), e))?;
        drop(under);
        let on_top = resolve_target(root, path, TargetKind::Dir)
            .or_else(|_| resolve_target(root, path, TargetKind::File))?;
        let top = fd_path(&on_top);
        sys::mount(
            None,
            &top,
            None,
            libc::MS_REMOUNT
                | libc::MS_BIND
                | libc::MS_RDONLY
                | libc::MS_NOEXEC
                | locked_flags(&top),
            None,
        )
        .map_err(|e| mount_err("remount read-only", Path::new(path), e))?;
        below_too(&on_top, true).map_err(|e| mount_err("remount read-only", Path::new(path), e))?;
    }
    Ok(())
}

const DEV_NODES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

fn mount_err(what: &str, target: &Path, e: std::io::Error) -> Error {
    Error::Mount(format!("{what} on {}: {e}", target.display()))
}

fn fd_path(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

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
pub fn resolve_target(root: &OwnedFd, path: &str, kind: TargetKind) -> Result<OwnedFd> {
    let comps: Vec<&str> = path
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    if comps.contains(&"..") {
        return Err(Error::Usage(format!(
            "container path {path:?} must not contain `..`"
        )));
    }
    let how = ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS;
    let open = |rel: &str| {
        openat2(
            root.as_fd(),
            rel,
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            how,
        )
    };
    if comps.is_empty() {
        return open(".").map_err(|e| Error::Mount(format!("open the container root: {e}")));
    }
    let mut parent =
        open(".").map_err(|e| Error::Mount(format!("open the container root: {e}")))?;
    for (i, comp) in comps.iter().enumerate() {
        let prefix = comps[..=i].join("/");
        match open(&prefix) {
            Ok(fd) => parent = fd,
            Err(rustix::io::Errno::NOENT) => {
                let last = i + 1 == comps.len();
                // Create in the resolved parent (a real directory inside root).
                let dirfd = openat2(
                    root.as_fd(),
                    if i == 0 {
                        "."
                    } else {
                        &prefix[..prefix.len() - comp.len() - 1]
                    },
                    OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
                    Mode::empty(),
                    how,
                )
                .map_err(|e| Error::Mount(format!("resolve the parent of {path:?}: {e}")))?;
                let created = if last && kind == TargetKind::File {
                    rustix::fs::openat(
                        &dirfd,
                        *comp,
                        OFlags::CREATE | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                        Mode::from_raw_mode(0o644),
                    )
                    .map(drop)
                } else {
                    rustix::fs::mkdirat(&dirfd, *comp, Mode::from_raw_mode(0o755))
                };
                match created {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(rustix::io::Errno::ROFS) => {
                        return Err(Error::Mount(format!(
                            "{path:?} does not exist in the image and the image is read-only here"
                        )))
                    }
                    Err(e) => {
                        return Err(Error::Mount(format!("create mount point {path:?}: {e}")))
                    }
                }
                parent = open(&prefix)
                    .map_err(|e| Error::Mount(format!("open mount point {path:?}: {e}")))?;
            }
            Err(e) => return Err(Error::Mount(format!("resolve {path:?} in the image: {e}"))),
        }
    }
    Ok(parent)
}

/// Mount flags that a bind must keep: those of the source mount that a
/// user namespace may not clear (locked flags), plus nosuid and nodev.
fn locked_flags(path: &Path) -> libc::c_ulong {
    let mut flags = libc::MS_NOSUID | libc::MS_NODEV;
    if let Ok(st) = rustix::fs::statvfs(path) {
        use rustix::fs::StatVfsMountFlags as F;
        let f = st.f_flag;
        for (st_flag, ms) in [
            (F::RDONLY, libc::MS_RDONLY),
            (F::NOEXEC, libc::MS_NOEXEC),
            (F::NOATIME, libc::MS_NOATIME),
            (F::NODIRATIME, libc::MS_NODIRATIME),
            (F::RELATIME, libc::MS_RELATIME),
        ] {
            if f.contains(st_flag) {
                flags |= ms;
            }
        }
    }
    flags
}

/// Binds `source` onto `target` inside `root`, then applies nosuid, nodev
/// and read-only as asked. The remount goes through a fresh resolution: the
/// descriptor used for the bind still names the directory under the mount.
fn bind(
    source: &Path,
    root: &OwnedFd,
    target: &str,
    kind: TargetKind,
    readonly: bool,
    recursive: bool,
) -> Result<()> {
    let under = resolve_target(root, target, kind)?;
    let t = fd_path(&under);
    let rec = if recursive { libc::MS_REC } else { 0 };
    sys::mount(Some(source), &t, None, libc::MS_BIND | rec, None)
        .map_err(|e| mount_err(&format!("bind {}", source.display()), Path::new(target), e))?;
    drop(under);
    let on_top = resolve_target(root, target, kind)?;
    let mut flags = libc::MS_REMOUNT | libc::MS_BIND | locked_flags(source);
    if readonly {
        flags |= libc::MS_RDONLY;
    }
    sys::mount(None, &fd_path(&on_top), None, flags, None)
        .map_err(|e| mount_err("remount bind", Path::new(target), e))?;
    if recursive {
        below_too(&on_top, readonly)
            .map_err(|e| mount_err("remount submounts", Path::new(target), e))?;
    }
    Ok(())
}

/// Gives the mounts below a recursive bind what its top mount got: nosuid,
/// nodev and, for a read-only bind, read-only (a `:ro` bind of a tree with
/// an NFS automount or `/sys/fs/cgroup` inside is read-only all the way
/// down, runc's `rro`). `mount_setattr(AT_RECURSIVE)` where the kernel has
/// it (5.12), else each submount listed in mountinfo is remounted.
fn below_too(top: &OwnedFd, readonly: bool) -> std::io::Result<()> {
    let mut set = sys::ATTR_NOSUID | sys::ATTR_NODEV;
    if readonly {
        set |= sys::ATTR_RDONLY;
    }
    match sys::set_mount_attr_recursive(top.as_fd(), set) {
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {}
        other => return other,
    }
    let top_path = fs::read_link(fd_path(top))?;
    let mountinfo = fs::read_to_string("/proc/self/mountinfo")?;
    for point in submounts(&mountinfo, &top_path) {
        let mut flags = libc::MS_REMOUNT | libc::MS_BIND | locked_flags(&point);
        if readonly {
            flags |= libc::MS_RDONLY;
        }
        sys::mount(None, &point, None, flags, None)?;
    }
    Ok(())
}

/// Mount points strictly below `top` in a mountinfo text (field 5, with the
/// kernel's octal escapes undone), parents first.
fn submounts(mountinfo: &str, top: &Path) -> Vec<PathBuf> {
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
fn bind_device(source: &Path, root: &OwnedFd, target: &str) -> Result<()> {
    let under = resolve_target(root, target, TargetKind::File)?;
    sys::mount(Some(source), &fd_path(&under), None, libc::MS_BIND, None).map_err(|e| {
        mount_err(
            &format!("bind device {}", source.display()),
            Path::new(target),
            e,
        )
    })
}

/// Mounts the user's binds in order; a file source gets a file mount point.
fn user_binds(root: &OwnedFd, binds: &[Bind]) -> Result<()> {
    for b in binds {
        if b.device {
            bind_device(&b.source, root, &b.target).map_err(|e| Error::Bind {
                spec: b.spec.clone(),
                reason: e.to_string(),
            })?;
            continue;
        }
        let kind = if fs::metadata(&b.source).map(|m| m.is_dir()).unwrap_or(true) {
            TargetKind::Dir
        } else {
            TargetKind::File
        };
        bind(&b.source, root, &b.target, kind, b.readonly, true).map_err(|e| Error::Bind {
            spec: b.spec.clone(),
            reason: e.to_string(),
        })?;
    }
    Ok(())
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    let mut f = fs::File::create(path).map_err(|e| Error::io("write", path, e))?;
    f.write_all(text.as_bytes())
        .map_err(|e| Error::io("write", path, e))
}

/// The largest image `/etc/passwd` or `/etc/group` berth reads (real ones
/// are kilobytes; LDAP-sized dumps a few hundred).
const IDENTITY_FILE_MAX: u64 = 4 << 20;

/// The image's `etc/NAME` (`passwd`, `group`), read inside the image root:
/// a symlink is followed in the image, never on the host (an image's
/// `/etc/passwd -> /proc/self/environ` finds the image's own empty
/// `/proc`), magic links are refused, and only a regular file of at most
/// [`IDENTITY_FILE_MAX`] bytes is read (a FIFO or a device would hang or
/// exhaust berth). Missing (or a dangling link): empty.
fn read_image_identity_file(image: &Path, name: &str) -> Result<String> {
    use rustix::io::Errno;
    let refused = |why: String| {
        Error::Setup(format!(
            "the image's /etc/{name} {why}; berth reads only a regular file of at most {} MiB there. Fix the image (its /etc/{name} must be a plain file)",
            IDENTITY_FILE_MAX >> 20
        ))
    };
    let root = rustix::fs::open(
        image,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::io("open", image, e.into()))?;
    let fd = match openat2(
        root.as_fd(),
        format!("etc/{name}"),
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT | Errno::NOTDIR) => {
            // A symlink to nothing in the image (a host path, say): the
            // entry berth adds could not be mounted there either.
            let dangling = openat2(
                root.as_fd(),
                format!("etc/{name}"),
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
                ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
            )
            .is_ok();
            if dangling {
                return Err(refused(
                    "is a symlink to something the image does not have (symlinks are followed inside the image, never on the host)".into(),
                ));
            }
            return Ok(String::new());
        }
        Err(Errno::LOOP) => return Err(refused("is a symlink loop or a /proc magic link".into())),
        Err(e) => return Err(Error::io("open", image.join("etc").join(name), e.into())),
    };
    let st = rustix::fs::fstat(&fd)
        .map_err(|e| Error::io("stat", image.join("etc").join(name), e.into()))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(refused("is not a regular file".into()));
    }
    if st.st_size as u64 > IDENTITY_FILE_MAX {
        return Err(refused(format!("is {} bytes", st.st_size)));
    }
    let mut text = String::new();
    fs::File::from(fd)
        .take(IDENTITY_FILE_MAX)
        .read_to_string(&mut text)
        .map_err(|e| Error::io("read", image.join("etc").join(name), e))?;
    Ok(text)
}

/// Identity files: the image's file plus our line, when it lacks one.
fn identity_file(
    image: &Path,
    name: &str,
    line: &Option<String>,
    stage: &Path,
) -> Result<Option<PathBuf>> {
    let Some(line) = line else { return Ok(None) };
    let fields: Vec<&str> = line.split(':').collect();
    let (our_name, our_id) = (
        fields.first().copied().unwrap_or(""),
        fields.get(2).copied().unwrap_or(""),
    );
    let existing = read_image_identity_file(image, name)?;
    // Our entry replaces any with the same name or id, so `id` and `whoami`
    // show the caller's name.
    let mut text: String = existing
        .lines()
        .filter(|l| {
            let f: Vec<&str> = l.split(':').collect();
            !(f.first() == Some(&our_name) || f.get(2) == Some(&our_id))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    text.push_str(line);
    text.push('\n');
    let out = stage.join(name);
    write_file(&out, &text)?;
    Ok(Some(out))
}

/// Builds the root file system and pivots into it. Runs in the container's
/// fresh mount namespace.
pub fn assemble(plan: &RootfsPlan<'_>) -> Result<()> {
    let root = prepare(plan)?;
    pivot(&root)
}

/// Builds the root file system under `plan.stage` (without entering it) and
/// returns its path. Also used for a keeper's prepared root, which runs
/// copy with their mount namespace and then [`extend_and_pivot`].
pub fn prepare(plan: &RootfsPlan<'_>) -> Result<PathBuf> {
    // Nothing mounted from here on may propagate to the keeper or the host.
    sys::make_rslave().map_err(|e| mount_err("make rslave", Path::new("/"), e))?;
    let stage = plan.stage;
    sys::mount(
        Some(Path::new("berth")),
        stage,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("mode=0755"),
    )
    .map_err(|e| mount_err("tmpfs", stage, e))?;
    for d in ["upper", "work", "root"] {
        fs::create_dir(stage.join(d)).map_err(|e| Error::io("create", stage.join(d), e))?;
    }
    let root = stage.join("root");
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        plan.image.display(),
        stage.join("upper").display(),
        stage.join("work").display()
    );
    sys::mount(
        Some(Path::new("berth")),
        &root,
        Some("overlay"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&opts),
    )
    .map_err(|e| mount_err("overlay", &root, e))?;
    let root_fd: OwnedFd = fs::File::open(&root)
        .map_err(|e| Error::io("open", &root, e))?
        .into();

    // /proc and /sys.
    let proc_t = resolve_target(&root_fd, "/proc", TargetKind::Dir)?;
    if plan.fresh_proc {
        let t = fd_path(&proc_t);
        sys::mount(
            Some(Path::new("proc")),
            &t,
            Some("proc"),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            None,
        )
        .map_err(|e| mount_err("proc", &t, e))?;
    } else {
        drop(proc_t);
        bind(
            Path::new("/proc"),
            &root_fd,
            "/proc",
            TargetKind::Dir,
            false,
            true,
        )?;
    }
    bind(
        Path::new("/sys"),
        &root_fd,
        "/sys",
        TargetKind::Dir,
        true,
        true,
    )?;

    if plan.confined {
        confine_proc_and_sys(&root_fd)?;
        let tmp = resolve_target(&root_fd, "/tmp", TargetKind::Dir)?;
        let t = fd_path(&tmp);
        sys::mount(
            Some(Path::new("berth-tmp")),
            &t,
            Some("tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some("mode=1777"),
        )
        .map_err(|e| mount_err("tmpfs", &t, e))?;
    }

    // A minimal /dev: a tmpfs with the host's harmless nodes bound in (a
    // rootless process cannot mknod), a private devpts, and a shared /dev/shm
    // (MPI ranks in different containers use it to talk).
    let dev_t = resolve_target(&root_fd, "/dev", TargetKind::Dir)?;
    let dev = fd_path(&dev_t);
    sys::mount(
        Some(Path::new("berth-dev")),
        &dev,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NOEXEC | libc::MS_NODEV,
        Some("mode=0755,size=64k"),
    )
    .map_err(|e| mount_err("tmpfs", &dev, e))?;
    // Re-resolve: the tmpfs now covers the old /dev.
    let dev_t = resolve_target(&root_fd, "/dev", TargetKind::Dir)?;
    for node in DEV_NODES {
        let host = Path::new("/dev").join(node);
        if !host.exists() {
            continue;
        }
        let t = resolve_target(&root_fd, &format!("/dev/{node}"), TargetKind::File)?;
        let tp = fd_path(&t);
        sys::mount(Some(&host), &tp, None, libc::MS_BIND, None)
            .map_err(|e| mount_err("bind", &host, e))?;
    }
    if mount_devpts(&root_fd).is_ok() {
        let _ = rustix::fs::symlinkat("pts/ptmx", &dev_t, "ptmx");
    }
    for (link, to) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        let _ = rustix::fs::symlinkat(to, &dev_t, link);
    }
    if Path::new("/dev/shm").is_dir() {
        bind(
            Path::new("/dev/shm"),
            &root_fd,
            "/dev/shm",
            TargetKind::Dir,
            false,
            false,
        )?;
    }
    let mqueue = Path::new("/dev/mqueue");
    if mqueue.is_dir() {
        let _ = bind(
            mqueue,
            &root_fd,
            "/dev/mqueue",
            TargetKind::Dir,
            false,
            false,
        );
    }

    // Identity and name resolution.
    let etc_files: Vec<(String, PathBuf)> = [
        (
            "passwd",
            identity_file(plan.image, "passwd", &plan.passwd_line, stage)?,
        ),
        (
            "group",
            identity_file(plan.image, "group", &plan.group_line, stage)?,
        ),
    ]
    .into_iter()
    .filter_map(|(n, p)| p.map(|p| (format!("/etc/{n}"), p)))
    .chain(
        ["/etc/resolv.conf", "/etc/hosts"]
            .into_iter()
            .filter(|p| Path::new(p).exists())
            .map(|p| (p.to_string(), PathBuf::from(p))),
    )
    .collect();
    for (target, source) in &etc_files {
        bind(source, &root_fd, target, TargetKind::File, true, false)?;
    }

    // The working directory exists (Docker creates a missing WORKDIR).
    if plan.workdir != "/" && !plan.binds.iter().any(|b| b.target == plan.workdir) {
        let _ = resolve_target(&root_fd, plan.workdir, TargetKind::Dir);
    }

    // User binds, parents first.
    user_binds(&root_fd, plan.binds)?;
    hide_state_dir(&root_fd, plan.binds)?;

    // /dev is read-only once populated (its own mount, even if a bind now
    // covers it): runs of a keeper share the prepared root, and one
    // container must not replace /dev/stdout or /dev/ptmx, drop files or
    // fill the tmpfs for the next. Device nodes stay writable (a read-only
    // mount refuses writes to files, not to devices); /dev/shm, /dev/pts
    // and /dev/mqueue are mounts of their own.
    sys::mount(None, &fd_path(&dev_t), None, DEV_READ_ONLY, None)
        .map_err(|e| mount_err("remount read-only", Path::new("/dev"), e))?;

    if !plan.writable {
        sys::mount(
            None,
            &root,
            None,
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
            None,
        )
        .map_err(|e| mount_err("remount read-only", &root, e))?;
    }
    drop(root_fd);
    Ok(root)
}

/// For a run on a prepared root (a copy of the keeper's template mount
/// namespace): adds the run's own binds and working directory, creating
/// missing mount points in the (shared, memory-backed) upper layer, then
/// pivots. The template's root mount is read-only; this copy's is made
/// writable only while mount points are created.
pub fn extend_and_pivot(root: &Path, binds: &[Bind], workdir: &str) -> Result<()> {
    let root_fd: OwnedFd = fs::File::open(root)
        .map_err(|e| Error::io("open", root, e))?
        .into();
    let missing = |p: &str| {
        let rel = p.trim_start_matches('/');
        rel.is_empty()
            || openat2(
                root_fd.as_fd(),
                rel,
                OFlags::PATH | OFlags::CLOEXEC,
                Mode::empty(),
                ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
            )
            .is_err()
    };
    let need_write =
        binds.iter().any(|b| missing(&b.target)) || (workdir != "/" && missing(workdir));
    // A mount point to create under /dev needs the (read-only) /dev too.
    let dev = need_write
        .then(|| {
            binds
                .iter()
                .any(|b| b.target.starts_with("/dev/") && missing(&b.target))
        })
        .filter(|d| *d)
        .and_then(|_| read_only_dev(&root_fd));
    let ro = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_NOSUID | libc::MS_NODEV;
    if need_write {
        sys::mount(None, root, None, ro, None)
            .map_err(|e| mount_err("remount writable", root, e))?;
    }
    if let Some(dev) = &dev {
        sys::mount(
            None,
            &fd_path(dev),
            None,
            DEV_READ_ONLY & !libc::MS_RDONLY,
            None,
        )
        .map_err(|e| mount_err("remount writable", Path::new("/dev"), e))?;
    }
    if workdir != "/" && !binds.iter().any(|b| b.target == workdir) {
        let _ = resolve_target(&root_fd, workdir, TargetKind::Dir);
    }
    user_binds(&root_fd, binds)?;
    hide_state_dir(&root_fd, binds)?;
    if let Some(dev) = &dev {
        sys::mount(None, &fd_path(dev), None, DEV_READ_ONLY, None)
            .map_err(|e| mount_err("remount read-only", Path::new("/dev"), e))?;
    }
    if need_write {
        sys::mount(None, root, None, ro | libc::MS_RDONLY, None)
            .map_err(|e| mount_err("remount read-only", root, e))?;
    }
    // Terminals of its own: the prepared root's devpts is every run's, and
    // one container could open another's pty slaves (same uid, 0620).
    if let Err(e) = mount_devpts(&root_fd) {
        tracing::warn!("{e}: this run shares the prepared root's terminals");
    }
    drop(root_fd);
    pivot(root)
}

/// The flags of the container's /dev once populated (`MS_REMOUNT` of that
/// mount alone).
const DEV_READ_ONLY: libc::c_ulong = libc::MS_REMOUNT
    | libc::MS_BIND
    | libc::MS_RDONLY
    | libc::MS_NOSUID
    | libc::MS_NODEV
    | libc::MS_NOEXEC;

/// The root's /dev when it is berth's read-only tmpfs (not a bind of the
/// user's, which stays as it was bound).
fn read_only_dev(root: &OwnedFd) -> Option<OwnedFd> {
    let dev = openat2(
        root.as_fd(),
        "dev",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    )
    .ok()?;
    let st = rustix::fs::fstatvfs(&dev).ok()?;
    let fs = rustix::fs::fstatfs(&dev).ok()?;
    let tmpfs = fs.f_type as i64 == libc::TMPFS_MAGIC;
    (tmpfs && st.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY)).then_some(dev)
}

/// A new devpts instance at the root's /dev/pts (its own pty numbers and
/// slaves; `/dev/ptmx` links to its `ptmx`).
fn mount_devpts(root: &OwnedFd) -> Result<()> {
    let pts = resolve_target(root, "/dev/pts", TargetKind::Dir)?;
    let pts_p = fd_path(&pts);
    sys::mount(
        Some(Path::new("devpts")),
        &pts_p,
        Some("devpts"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620"),
    )
    .map_err(|e| mount_err("devpts", &pts_p, e))
}

/// Covers berth's runtime directory with an empty read-only tmpfs wherever
/// a bind shows it in the container (host /tmp holds `/tmp/berth-UID`; a
/// home may hold `$XDG_RUNTIME_DIR`): what berth later trusts there (keeper
/// and container records, the image cache, hook bundles) is out of the
/// container's reach.
fn hide_state_dir(root: &OwnedFd, binds: &[Bind]) -> Result<()> {
    let state = crate::keeper::state_dir()?;
    let real = |p: &Path| fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let state = real(&state);
    for b in binds.iter().filter(|b| !b.device) {
        let Ok(rest) = state.strip_prefix(real(&b.source)) else {
            continue;
        };
        let inside = Path::new(&b.target).join(rest);
        let Some(inside) = inside.to_str() else {
            continue;
        };
        let present = openat2(
            root.as_fd(),
            inside.trim_start_matches('/'),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
        )
        .is_ok();
        if !present {
            continue;
        }
        let at = resolve_target(root, inside, TargetKind::Dir)?;
        sys::mount(
            Some(Path::new("berth-hidden")),
            &fd_path(&at),
            Some("tmpfs"),
            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            Some("size=0,mode=0500"),
        )
        .map_err(|e| mount_err("hide the runtime directory at", Path::new(inside), e))?;
    }
    Ok(())
}

/// `pivot_root` into `root` and detach the old root, without a directory
/// for it: pivot_root(".", ".") stacks the old root on the new one.
fn pivot(root: &Path) -> Result<()> {
    std::env::set_current_dir(root).map_err(|e| Error::io("enter", root, e))?;
    rustix::process::pivot_root(".", ".").map_err(|e| Error::Mount(format!("pivot_root: {e}")))?;
    sys::umount(Path::new("."), libc::MNT_DETACH)
        .map_err(|e| Error::Mount(format!("detach the old root: {e}")))?;
    std::env::set_current_dir("/").map_err(|e| Error::io("enter", "/", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn submounts_are_those_strictly_below_with_escapes_undone() {
        let info = "\
22 1 0:21 / / rw - ext4 /dev/sda rw
30 22 0:25 / /data rw - ext4 /dev/sdb rw
31 30 0:26 / /data/nfs rw - nfs srv:/x rw
32 30 0:27 / /data/with\\040space rw - tmpfs t rw
33 22 0:28 / /database rw - tmpfs t rw
";
        assert_eq!(
            submounts(info, Path::new("/data")),
            vec![
                PathBuf::from("/data/nfs"),
                PathBuf::from("/data/with space")
            ]
        );
        assert!(submounts(info, Path::new("/data/nfs")).is_empty());
    }
}
