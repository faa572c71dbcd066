//! SIGTERM, taken by one thread: the keeper stops its server with it (and
//! the kernel sends it when the keeper dies), and the server writes the
//! read profile it is noting before it leaves.

#![allow(unsafe_code)]

/// A signal set holding SIGTERM alone.
fn term_set() -> libc::sigset_t {
    // SAFETY: a zeroed sigset_t is a valid argument to sigemptyset, which
    // (with sigaddset) fills the set on the stack; no pointer outlives
    // the calls.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        set
    }
}

/// `pthread_sigmask(how, {SIGTERM})` for the calling thread.
fn mask_term(how: libc::c_int) {
    let set = term_set();
    // SAFETY: pthread_sigmask reads the set on the stack and writes no
    // old mask.
    unsafe {
        libc::pthread_sigmask(how, &set, std::ptr::null_mut());
    }
}

/// Blocks SIGTERM in the calling thread and every thread it starts from
/// now on, so that only [`wait_term`] takes it.
pub fn block_term() {
    mask_term(libc::SIG_BLOCK);
}

/// Undoes [`block_term`] in the calling thread (where nothing could wait
/// for it): SIGTERM ends the process at once again.
pub fn unblock_term() {
    mask_term(libc::SIG_UNBLOCK);
}

/// Waits until SIGTERM comes (blocked with [`block_term`]).
pub fn wait_term() {
    let set = term_set();
    let mut sig = 0;
    // SAFETY: sigwait reads the set and writes the signal's number into a
    // live i32.
    while unsafe { libc::sigwait(&set, &mut sig) } != 0 || sig != libc::SIGTERM {}
}
