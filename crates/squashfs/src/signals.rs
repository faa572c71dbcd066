//! SIGTERM, taken by one thread: the keeper stops its server with it (and
//! the kernel sends it when the keeper dies), and the server writes the
//! read profile it is noting before it leaves.

#![allow(unsafe_code)]

/// Blocks SIGTERM in the calling thread and every thread it starts from
/// now on, so that only [`wait_term`] takes it.
pub fn block_term() {
    // SAFETY: a sigset on the stack, filled by sigemptyset/sigaddset, and
    // pthread_sigmask reading it; no pointer outlives the calls.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Undoes [`block_term`] in the calling thread (where nothing could wait
/// for it): SIGTERM ends the process at once again.
pub fn unblock_term() {
    // SAFETY: as in `block_term`.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
}

/// Waits until SIGTERM comes (blocked with [`block_term`]).
pub fn wait_term() {
    // SAFETY: as in `block_term`; sigwait writes the signal's number into
    // a live i32.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        let mut sig = 0;
        while libc::sigwait(&set, &mut sig) != 0 || sig != libc::SIGTERM {}
    }
}
