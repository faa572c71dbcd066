//! [`Kernel`] on Linux: the real calls.
#![allow(clippy::disallowed_methods)]

use std::ffi::{CString, OsStr};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::thread::LinkNameSpaceType;

use super::{resolve, Errno, Kernel, MountFlags, Namespace, UnshareFlags};

/// The real kernel. `openat2` is probed at its first use and, where the
/// kernel (before 5.6) or a seccomp filter answers `ENOSYS`, replaced for
/// good by a component-wise walk (crun's `safe_openat` does the same).
#[derive(Debug, Default)]
pub struct Linux {
    /// Whether `openat2` works here, once known.
    openat2: OnceLock<bool>,
}

/// The one real kernel of the process.
pub static LINUX: Linux = Linux::new();

impl Linux {
    /// A kernel whose `openat2` support is probed at first use.
    pub const fn new() -> Self {
        Linux {
            openat2: OnceLock::new(),
        }
    }

    /// A kernel that resolves paths by walking, as where `openat2` is
    /// missing (for tests of the fallback).
    pub fn without_openat2() -> Self {
        let k = Self::new();
        let _ = k.openat2.set(false);
        k
    }

    /// Whether paths are resolved with `openat2` (false once it answered
    /// `ENOSYS`).
    pub fn has_openat2(&self) -> bool {
        self.openat2.get().copied().unwrap_or(true)
    }
}

fn cstr(s: &OsStr) -> Result<CString, Errno> {
    CString::new(s.as_bytes()).map_err(|_| Errno::INVAL)
}

/// The errno of the last failed libc call.
fn last_errno() -> Errno {
    Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::IO)
}

impl Kernel for Linux {
    fn mount(
        &self,
        source: Option<&Path>,
        target: &Path,
        fstype: Option<&str>,
        flags: MountFlags,
        data: Option<&str>,
    ) -> Result<(), Errno> {
        let source = source.map(|s| cstr(s.as_os_str())).transpose()?;
        let target = cstr(target.as_os_str())?;
        let fstype = fstype.map(|s| cstr(OsStr::new(s))).transpose()?;
        let data = data.map(|s| cstr(OsStr::new(s))).transpose()?;
        let ptr = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        // SAFETY: every pointer is NULL or a NUL-terminated string that lives
        // until the call returns.
        let rc = unsafe {
            libc::mount(
                ptr(&source),
                target.as_ptr(),
                ptr(&fstype),
                flags,
                ptr(&data) as *const libc::c_void,
            )
        };
        if rc == -1 {
            return Err(last_errno());
        }
        Ok(())
    }

    fn unmount(&self, target: &Path, flags: libc::c_int) -> Result<(), Errno> {
        let target = cstr(target.as_os_str())?;
        // SAFETY: target is a valid NUL-terminated string.
        let rc = unsafe { libc::umount2(target.as_ptr(), flags) };
        if rc == -1 {
            return Err(last_errno());
        }
        Ok(())
    }

    fn set_mount_attr_recursive(&self, fd: BorrowedFd<'_>, set: u64) -> Result<(), Errno> {
        /// `AT_RECURSIVE` of `<linux/fcntl.h>` (not in the libc crate for Linux).
        const AT_RECURSIVE: libc::c_uint = 0x8000;
        let attr = libc::mount_attr {
            attr_set: set,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        };
        // SAFETY: the path is a static NUL-terminated empty string, `attr` is
        // a valid `struct mount_attr` whose size is passed, and the kernel
        // only reads it; `fd` is a descriptor borrowed for the call.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_mount_setattr,
                fd.as_raw_fd(),
                c"".as_ptr(),
                (libc::AT_EMPTY_PATH as libc::c_uint) | AT_RECURSIVE,
                &attr as *const libc::mount_attr,
                std::mem::size_of::<libc::mount_attr>(),
            )
        };
        if rc == -1 {
            return Err(last_errno());
        }
        Ok(())
    }

    fn unshare(&self, flags: UnshareFlags) -> Result<(), Errno> {
        if flags.contains(UnshareFlags::FILES) {
            return Err(Errno::INVAL);
        }
        // SAFETY: unshare is unsafe in rustix because CLONE_FILES/CLONE_FS
        // can break invariants of other threads; berth calls it
        // single-threaded and never with CLONE_FILES (refused above).
        unsafe { rustix::thread::unshare_unsafe(flags) }
    }

    fn setns(&self, fd: BorrowedFd<'_>, kind: Namespace) -> Result<(), Errno> {
        let kind = match kind {
            Namespace::User => LinkNameSpaceType::User,
            Namespace::Mount => LinkNameSpaceType::Mount,
            Namespace::Net => LinkNameSpaceType::Network,
            Namespace::Ipc => LinkNameSpaceType::InterProcessCommunication,
            Namespace::Uts => LinkNameSpaceType::HostNameAndNISDomainName,
        };
        rustix::thread::move_into_link_name_space(fd, Some(kind))
    }

    fn pivot_root(&self, new_root: &Path) -> Result<(), Errno> {
        rustix::process::chdir(new_root)?;
        rustix::process::pivot_root(".", ".")?;
        self.unmount(Path::new("."), libc::MNT_DETACH)?;
        rustix::process::chdir("/")
    }

    fn chroot(&self, path: &Path) -> Result<(), Errno> {
        rustix::process::chroot(path)?;
        rustix::process::chdir("/")
    }

    fn open_in_root(
        &self,
        root: BorrowedFd<'_>,
        path: &str,
        flags: OFlags,
    ) -> Result<OwnedFd, Errno> {
        let rel = path.trim_start_matches('/');
        let rel = if rel.is_empty() { "." } else { rel };
        // A `..` met on the way (a symlink's `../lib`) gives EAGAIN when
        // anything on the machine was renamed meanwhile: tried again a few
        // times, then resolved component by component, as safely.
        for _ in 0..8 {
            if !self.has_openat2() {
                break;
            }
            let result = rustix::fs::openat2(
                root,
                rel,
                flags | OFlags::CLOEXEC,
                Mode::empty(),
                ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
            );
            match result {
                Err(Errno::NOSYS) => {
                    tracing::debug!("openat2: ENOSYS; resolving paths component by component");
                    let _ = self.openat2.set(false);
                }
                Err(Errno::AGAIN) => continue,
                other => {
                    let _ = self.openat2.set(true);
                    return other;
                }
            }
        }
        resolve::open_in_root(root, rel, flags)
    }

    fn set_no_new_privs(&self) -> Result<(), Errno> {
        rustix::thread::set_no_new_privs(true)
    }

    fn keep_capabilities_across_exec(&self) -> Result<(), Errno> {
        use rustix::thread::CapabilitySet;
        if rustix::process::getuid().is_root() {
            return Ok(());
        }
        let mut sets = rustix::thread::capabilities(None)?;
        sets.inheritable = sets.permitted;
        rustix::thread::set_capabilities(None, sets)?;
        for bit in 0..u64::BITS {
            let cap = CapabilitySet::from_bits_retain(1 << bit);
            if sets.permitted.contains(cap) {
                rustix::thread::configure_capability_in_ambient_set(cap, true)?;
            }
        }
        Ok(())
    }

    fn forget_capabilities_across_exec(&self) -> Result<(), Errno> {
        rustix::thread::clear_ambient_capability_set()?;
        let mut sets = rustix::thread::capabilities(None)?;
        sets.inheritable = rustix::thread::CapabilitySet::empty();
        rustix::thread::set_capabilities(None, sets)
    }

    fn drop_capabilities(&self) -> Result<(), Errno> {
        let none = rustix::thread::CapabilitySet::empty();
        rustix::thread::set_capabilities(
            None,
            rustix::thread::CapabilitySets {
                effective: none,
                permitted: none,
                inheritable: none,
            },
        )
    }

    fn restrict_bounding_set(&self, keep: &[u32]) -> Result<(), Errno> {
        let last: u32 = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(40);
        for cap in 0..=last {
            if keep.contains(&cap) {
                continue;
            }
            // SAFETY: PR_CAPBSET_DROP takes a capability number and no pointers.
            let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
            if rc == -1 {
                return Err(last_errno());
            }
        }
        Ok(())
    }
}
