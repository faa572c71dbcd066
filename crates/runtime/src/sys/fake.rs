//! A recording [`Kernel`] for tests: calls that change what a process sees
//! (mount, unshare, setns, `pivot_root`, capabilities) are written down and
//! have no effect; paths are really opened (in a test's own directory
//! tree), so code that resolves mount points inside a root runs as it
//! does for real and its mount targets can be checked.

use std::cell::RefCell;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::{Errno, Kernel, MountFlags, Namespace, OFlags, UnshareFlags};

/// One recorded call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `mount(2)`; `target` as [`Recording::describe`] shows it.
    Mount {
        /// Source, if any.
        source: Option<PathBuf>,
        /// Target, described.
        target: String,
        /// File system type, if any.
        fstype: Option<String>,
        /// `MS_*` flags.
        flags: MountFlags,
        /// Options, if any.
        data: Option<String>,
    },
    /// `umount2(2)`.
    Unmount(String),
    /// `mount_setattr(AT_RECURSIVE)` with these attributes.
    SetAttrRecursive {
        /// Target, described.
        target: String,
        /// `ATTR_*` bits added.
        set: u64,
    },
    /// `unshare(2)`.
    Unshare(UnshareFlags),
    /// `setns(2)` of this kind.
    Setns(Namespace),
    /// `pivot_root` into this path.
    PivotRoot(PathBuf),
    /// `chroot(2)`.
    Chroot(PathBuf),
    /// A path opened inside a root.
    OpenInRoot(String),
    /// `no_new_privs`.
    NoNewPrivs,
    /// Capabilities emptied.
    DropCapabilities,
    /// `keep_capabilities_across_exec`.
    KeepCapabilities,
    /// `forget_capabilities_across_exec`.
    ForgetCapabilities,
    /// Bounding set restricted to these.
    BoundingSet(Vec<u32>),
}

/// The recording kernel. Paths opened inside a root are resolved for real,
/// by the component-wise walk.
#[derive(Debug, Default)]
pub struct Recording {
    calls: RefCell<Vec<Call>>,
    /// Roots whose descriptors mount targets are described relative to.
    roots: RefCell<Vec<PathBuf>>,
    /// A call (by the start of its `Debug` text) made to fail, and how.
    failing: RefCell<Option<(String, Errno)>>,
}

impl Recording {
    /// A kernel that has recorded nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Mount targets under `root` are recorded as `in-root:/PATH`.
    pub fn with_root(self, root: &Path) -> Self {
        let real = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
        self.roots.borrow_mut().push(real);
        self
    }

    /// The calls made so far.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.borrow().clone()
    }

    /// The mounts made so far.
    pub fn mounts(&self) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| matches!(c, Call::Mount { .. }))
            .collect()
    }

    /// Makes the next calls whose `Debug` text starts with `prefix` fail
    /// with `errno` (e.g. `"Unshare"`, `"Mount { source: None"`).
    pub fn fail(&self, prefix: &str, errno: Errno) {
        *self.failing.borrow_mut() = Some((prefix.to_string(), errno));
    }

    /// How a target path is recorded: `/proc/self/fd/N` of a descriptor
    /// inside a root as `in-root:/PATH`, of one elsewhere as `fd:REAL`,
    /// any other path as it is.
    pub fn describe(&self, target: &Path) -> String {
        let Some(n) = target
            .to_str()
            .and_then(|t| t.strip_prefix("/proc/self/fd/"))
        else {
            return target.display().to_string();
        };
        let Ok(real) = std::fs::read_link(target) else {
            return format!("fd:{n}?");
        };
        for root in self.roots.borrow().iter() {
            if let Ok(rest) = real.strip_prefix(root) {
                return format!("in-root:/{}", rest.display());
            }
        }
        format!("fd:{}", real.display())
    }

    fn record(&self, call: Call) -> Result<(), Errno> {
        let text = format!("{call:?}");
        self.calls.borrow_mut().push(call);
        match &*self.failing.borrow() {
            Some((prefix, errno)) if text.starts_with(prefix.as_str()) => Err(*errno),
            _ => Ok(()),
        }
    }
}

impl Kernel for Recording {
    fn mount(
        &self,
        source: Option<&Path>,
        target: &Path,
        fstype: Option<&str>,
        flags: MountFlags,
        data: Option<&str>,
    ) -> Result<(), Errno> {
        self.record(Call::Mount {
            source: source.map(Path::to_path_buf),
            target: self.describe(target),
            fstype: fstype.map(str::to_string),
            flags,
            data: data.map(str::to_string),
        })
    }

    fn unmount(&self, target: &Path, _flags: libc::c_int) -> Result<(), Errno> {
        self.record(Call::Unmount(self.describe(target)))
    }

    fn set_mount_attr_recursive(&self, fd: BorrowedFd<'_>, set: u64) -> Result<(), Errno> {
        let target = self.describe(&super::fd_path(&fd.as_raw_fd()));
        self.record(Call::SetAttrRecursive { target, set })
    }

    fn unshare(&self, flags: UnshareFlags) -> Result<(), Errno> {
        self.record(Call::Unshare(flags))
    }

    fn setns(&self, _fd: BorrowedFd<'_>, kind: Namespace) -> Result<(), Errno> {
        self.record(Call::Setns(kind))
    }

    fn pivot_root(&self, new_root: &Path) -> Result<(), Errno> {
        self.record(Call::PivotRoot(new_root.to_path_buf()))
    }

    fn chroot(&self, path: &Path) -> Result<(), Errno> {
        self.record(Call::Chroot(path.to_path_buf()))
    }

    fn open_in_root(
        &self,
        root: BorrowedFd<'_>,
        path: &str,
        flags: OFlags,
    ) -> Result<OwnedFd, Errno> {
        self.record(Call::OpenInRoot(path.to_string()))?;
        super::resolve::open_in_root(root, path, flags)
    }

    fn set_no_new_privs(&self) -> Result<(), Errno> {
        self.record(Call::NoNewPrivs)
    }

    fn drop_capabilities(&self) -> Result<(), Errno> {
        self.record(Call::DropCapabilities)
    }

    fn keep_capabilities_across_exec(&self) -> Result<(), Errno> {
        self.record(Call::KeepCapabilities)
    }

    fn forget_capabilities_across_exec(&self) -> Result<(), Errno> {
        self.record(Call::ForgetCapabilities)
    }

    fn restrict_bounding_set(&self, keep: &[u32]) -> Result<(), Errno> {
        self.record(Call::BoundingSet(keep.to_vec()))
    }
}
