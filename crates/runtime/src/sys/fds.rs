//! Descriptors: what a command or helper inherits, and what a helper
//! takes over.

/// Whether `fd` is an open socket (what an MPI launcher's PMI channel is).
pub fn is_socket(fd: i32) -> bool {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a `stat` into the buffer we own, or fails (for a
    // closed or invalid descriptor) without touching memory we read.
    let rc = unsafe { libc::fstat(fd, st.as_mut_ptr()) };
    if rc != 0 {
        return false;
    }
    // SAFETY: fstat returned 0, so it filled the whole structure.
    let st = unsafe { st.assume_init() };
    st.st_mode & libc::S_IFMT == libc::S_IFSOCK
}

/// Marks every descriptor above 2 close-on-exec, so nothing berth opened
/// reaches the container's command (CVE-2024-21626 leaked a directory fd).
pub fn cloexec_all_but(keep: &[i32]) {
    for fd in open_fds_but(keep) {
        // SAFETY: F_SETFD on a descriptor number only changes its flags;
        // an already closed number fails harmlessly with EBADF.
        unsafe {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}

/// The open descriptors above 2, but those in `keep` (the listing's own
/// descriptor is closed again when this returns).
fn open_fds_but(keep: &[i32]) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .filter(|fd| *fd > 2 && !keep.contains(fd))
        .collect()
}

/// Closes every descriptor above 2 but those in `keep`: what a long-lived
/// helper (the keeper, a shared container's holder) does first, so that
/// descriptors its starter inherited (an MPI launcher's PMI socket, a
/// scheduler's pipes) are not held open for the helper's whole life (the
/// launcher would wait for them to close).
pub fn close_inherited(keep: &[i32]) {
    for fd in open_fds_but(keep) {
        // SAFETY: this runs in a single-threaded helper that owns nothing
        // it will use again through these numbers: the keeper calls it
        // first thing, a holder just before it only waits and exits with
        // `_exit` (no destructor runs to close a number twice). The
        // read_dir handle is already closed; its own number fails
        // harmlessly with EBADF.
        unsafe {
            libc::close(fd);
        }
    }
}

/// Takes ownership of descriptor `fd`, which the parent handed down on
/// purpose (`berth __keeper ... fd:N`); `None` if it is not open.
pub fn take_inherited_fd(fd: i32) -> Option<std::fs::File> {
    if fd < 3 {
        return None;
    }
    // SAFETY: F_GETFD only checks that the number is an open descriptor.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
        return None;
    }
    // SAFETY: the descriptor is open and was passed to this process for its
    // exclusive use; nothing else in the process refers to it, so owning
    // (and eventually closing) it is sound.
    let owned = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let _ = rustix::io::fcntl_setfd(&owned, rustix::io::FdFlags::CLOEXEC);
    Some(std::fs::File::from(owned))
}
