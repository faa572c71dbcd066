//! The FUSE device: more descriptors for one connection, one per thread.

#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `FUSE_DEV_IOC_CLONE`: `_IOR(229, 0, uint32_t)`.
const FUSE_DEV_IOC_CLONE: libc::c_ulong = 0x8004_e500;

/// A new descriptor of `/dev/fuse` attached to the connection of `fuse`:
/// requests are then read on either (each by one reader), and each reply
/// is written on the descriptor its request came from.
pub fn clone_connection(fuse: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let dev = File::options().read(true).write(true).open("/dev/fuse")?;
    let mut src: u32 =
        u32::try_from(fuse.as_raw_fd()).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: FUSE_DEV_IOC_CLONE reads one u32 (a descriptor number) from
    // the pointer, which points at a live, aligned u32 for the whole call;
    // `dev` is an open descriptor we own.
    let rc = unsafe { libc::ioctl(dev.as_raw_fd(), FUSE_DEV_IOC_CLONE, &mut src as *mut u32) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(OwnedFd::from(dev))
}

/// Takes ownership of descriptor `fd`, inherited from the process that
/// started this one.
pub fn take_fd(fd: i32) -> io::Result<OwnedFd> {
    rustix::io::fcntl_getfd(
        // SAFETY: only borrowed to check it is open; ownership is taken
        // below once it is known to be.
        unsafe { BorrowedFd::borrow_raw(fd) },
    )?;
    // SAFETY: `fd` is open (checked above) and was handed to this process
    // to own: nothing else in it uses that number.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
