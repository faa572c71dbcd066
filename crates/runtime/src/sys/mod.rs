//! berth's boundary with the kernel.
//!
//! - [`Kernel`]: the calls that change what a process sees (mount,
//!   unshare, setns, `pivot_root`, chroot, opening a path inside a root,
//!   capabilities). Code that assembles a container takes a `&dyn Kernel`
//!   passed explicitly: [`Linux`] makes the calls, the recording fake
//!   (`fake::Recording`, in tests) writes them down, so the mount sequence of
//!   a root file system is unit-tested without privileges. `clippy.toml`'s
//!   `disallowed-methods` keeps the raw calls out of every other module.
//! - Thin safe wrappers for what `rustix` does not cover safely: fork,
//!   signal masks and waiting ([`process`]), descriptors inherited or
//!   handed on ([`fds`]), the user database ([`users`]), loop devices
//!   ([`loopdev`]), the loopback interface ([`net`]), id maps ([`idmaps`]).
//!   Every `unsafe` block of the crate lives in these files, each with its
//!   reason.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;

pub use rustix::fs::OFlags;
pub use rustix::io::Errno;
pub use rustix::thread::UnshareFlags;

mod linux;
mod resolve;

pub mod fds;
pub mod idmaps;
pub mod loopdev;
pub mod net;
pub mod process;
pub mod users;

#[cfg(any(test, feature = "fake-kernel"))]
pub mod fake;

/// A root with the classic symlink escapes, and a reader through a
/// kernel's `open_in_root` (for tests of other modules).
#[cfg(test)]
pub(crate) use resolve::tests::{read as read_in_root_for_tests, tree as resolve_tests_tree};

pub use fds::{close_inherited, is_socket, take_inherited_fd};
pub use linux::{Linux, LINUX};
pub use process::{exit_now, fork, kill, wait, Exit, Fork, SigSet};
pub use users::{getpwuid, group_name, Passwd};

/// Mount flags (`MS_*` of `<sys/mount.h>`).
pub type MountFlags = libc::c_ulong;

/// A namespace kind for [`Kernel::setns`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Namespace {
    /// A user namespace.
    User,
    /// A mount namespace.
    Mount,
    /// A network namespace.
    Net,
    /// An IPC namespace (System V IPC, POSIX message queues).
    Ipc,
    /// A UTS namespace (host and domain name).
    Uts,
}

/// Mount attributes [`Kernel::set_mount_attr_recursive`] can add.
pub const ATTR_RDONLY: u64 = libc::MOUNT_ATTR_RDONLY;
/// See [`ATTR_RDONLY`].
pub const ATTR_NOSUID: u64 = libc::MOUNT_ATTR_NOSUID;
/// See [`ATTR_RDONLY`].
pub const ATTR_NODEV: u64 = libc::MOUNT_ATTR_NODEV;

/// The kernel calls that assemble and enter a container. Each returns the
/// kernel's errno; callers turn it into [`crate::Error::Sys`] with what
/// they were doing.
pub trait Kernel {
    /// `mount(2)` with raw flags; `None` arguments pass NULL.
    fn mount(
        &self,
        source: Option<&Path>,
        target: &Path,
        fstype: Option<&str>,
        flags: MountFlags,
        data: Option<&str>,
    ) -> Result<(), Errno>;

    /// `umount2(2)`.
    fn unmount(&self, target: &Path, flags: libc::c_int) -> Result<(), Errno>;

    /// `mount_setattr(fd, "", AT_EMPTY_PATH | AT_RECURSIVE)`: adds `set`
    /// (some `ATTR_*` bits) to the mount `fd` names and every mount below
    /// it. `ENOSYS` before Linux 5.12.
    fn set_mount_attr_recursive(&self, fd: BorrowedFd<'_>, set: u64) -> Result<(), Errno>;

    /// `unshare(2)` of the calling thread (never `CLONE_FILES`).
    fn unshare(&self, flags: UnshareFlags) -> Result<(), Errno>;

    /// `setns(2)`: joins the namespace `fd` names.
    fn setns(&self, fd: BorrowedFd<'_>, kind: Namespace) -> Result<(), Errno>;

    /// Makes `new_root` the root: enters it, `pivot_root(".", ".")` (the
    /// old root stacks on the new one, no directory needed for it),
    /// detaches the old root and goes to `/`.
    fn pivot_root(&self, new_root: &Path) -> Result<(), Errno>;

    /// `chroot(2)` and `chdir("/")`.
    fn chroot(&self, path: &Path) -> Result<(), Errno>;

    /// Opens `path` inside the directory `root` as if `root` were `/`:
    /// symlinks, absolute ones included, and `..` never leave it, and no
    /// magic link of /proc is followed (`openat2` with
    /// `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS`, or a component-wise walk
    /// with `O_NOFOLLOW` where the kernel lacks it). `flags` as for
    /// `openat` (`O_CREAT` is not taken).
    fn open_in_root(
        &self,
        root: BorrowedFd<'_>,
        path: &str,
        flags: OFlags,
    ) -> Result<OwnedFd, Errno>;

    /// `PR_SET_NO_NEW_PRIVS`: `exec` never grants privileges again.
    fn set_no_new_privs(&self) -> Result<(), Errno>;

    /// Empties the effective, permitted and inheritable capability sets.
    fn drop_capabilities(&self) -> Result<(), Errno>;

    /// Makes the permitted capabilities survive the next `exec` although
    /// the uid is not 0, as inheritable and ambient ones: a process that
    /// keeps the caller's host ids in a keeper's user namespace holds its
    /// capabilities there as the namespace's creator or joiner, which
    /// `exec` would drop. Root keeps its own (a process in a namespace
    /// not yet mapped is not root: a keeper being started keeps them all
    /// this way). System calls only, no allocation: usable between fork
    /// and exec.
    fn keep_capabilities_across_exec(&self) -> Result<(), Errno>;

    /// Undoes [`Kernel::keep_capabilities_across_exec`]: empties the
    /// ambient and inheritable sets, so the next `exec` of a uid other
    /// than 0 keeps no capability. System calls only, no allocation.
    fn forget_capabilities_across_exec(&self) -> Result<(), Errno>;

    /// Drops every capability not in `keep` from the bounding set.
    fn restrict_bounding_set(&self, keep: &[u32]) -> Result<(), Errno>;
}

/// Makes every mount of the current mount namespace a slave, so nothing
/// mounted from here on propagates back (to a keeper or the host).
pub fn make_rslave(k: &dyn Kernel) -> Result<(), Errno> {
    k.mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_SLAVE,
        None,
    )
}

/// The path through which a descriptor is named to a call that takes
/// paths (`mount(2)`): `/proc/self/fd/N`.
pub fn fd_path(fd: &impl std::os::fd::AsRawFd) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Capabilities a container of real root keeps (Docker's default set);
/// every other one leaves the bounding set, so `exec` cannot grant it.
pub const ROOT_KEEPS: &[u32] = &[
    0,  // CHOWN
    1,  // DAC_OVERRIDE
    3,  // FOWNER
    4,  // FSETID
    5,  // KILL
    6,  // SETGID
    7,  // SETUID
    8,  // SETPCAP
    10, // NET_BIND_SERVICE
    18, // SYS_CHROOT
    31, // SETFCAP
];
