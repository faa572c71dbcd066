//! Processes: fork, signal masks and waiting, exit, and what a helper
//! program is started with.

use std::io;

/// The result of [`fork`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fork {
    /// In the parent: the child's pid.
    Parent(libc::pid_t),
    /// In the child.
    Child,
}

/// `fork(2)`.
///
/// Callers must be single-threaded (berth's run path is: it forks before
/// starting any thread), so the child may allocate and run ordinary Rust.
pub fn fork() -> io::Result<Fork> {
    // SAFETY: fork has no memory-safety preconditions of its own; the
    // hazard of forking a multi-threaded process (locks held by other
    // threads) does not arise because callers are single-threaded.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Fork::Child),
        p => Ok(Fork::Parent(p)),
    }
}

/// A set of signals.
pub struct SigSet(libc::sigset_t);

impl SigSet {
    /// The set of `signals`.
    pub fn of(signals: &[i32]) -> Self {
        // SAFETY: sigemptyset/sigaddset initialise and fill a local sigset_t.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in signals {
                libc::sigaddset(&mut set, *s);
            }
            SigSet(set)
        }
    }
}

/// Blocks (`block = true`) or unblocks the signals of `set` for the thread.
pub fn mask(set: &SigSet, block: bool) -> io::Result<()> {
    let how = if block {
        libc::SIG_BLOCK
    } else {
        libc::SIG_UNBLOCK
    };
    // SAFETY: pthread_sigmask reads a valid sigset_t; the old mask is not needed.
    let rc = unsafe { libc::pthread_sigmask(how, &set.0, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Makes the process `cmd` starts begin with the signals of a freshly
/// started process ([`reset_signals`]): berth blocks the signals it
/// forwards, and a hook (or a server a hook starts, which must reap its
/// children on SIGCHLD) must not inherit that mask.
pub fn reset_signals_in_child(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec and
    // calls only reset_signals, which allocates nothing and makes only
    // async-signal-safe calls (signal, sigemptyset, pthread_sigmask).
    unsafe {
        cmd.pre_exec(|| {
            reset_signals();
            Ok(())
        });
    }
}

/// A received signal: number and whether a process sent it explicitly
/// (`kill`, `sigqueue`) rather than the kernel or the terminal.
#[derive(Debug, Clone, Copy)]
pub struct Received {
    /// Signal number.
    pub signo: i32,
    /// Sent by `kill(2)`/`sigqueue(3)`.
    pub from_process: bool,
}

/// Waits for one of the (blocked) signals of `set`.
pub fn wait_signal(set: &SigSet) -> io::Result<Received> {
    loop {
        // SAFETY: sigwaitinfo fills a zeroed siginfo_t we own.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid sigset_t and `info` a valid out pointer.
        let rc = unsafe { libc::sigwaitinfo(&set.0, &mut info) };
        if rc == -1 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        return Ok(Received {
            signo: rc,
            from_process: info.si_code == libc::SI_USER || info.si_code == libc::SI_QUEUE,
        });
    }
}

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Exited with a code.
    Code(i32),
    /// Killed by a signal.
    Signal(i32),
}

impl Exit {
    /// The shell's convention: the code, or 128 + the signal number.
    pub fn as_code(self) -> i32 {
        match self {
            Exit::Code(c) => c,
            Exit::Signal(s) => 128 + s,
        }
    }
}

/// Waits for `pid` (any child with `-1`); `None` with `nohang` when none ended.
pub fn wait(pid: libc::pid_t, nohang: bool) -> io::Result<Option<(libc::pid_t, Exit)>> {
    let mut status = 0;
    loop {
        let flags = if nohang { libc::WNOHANG } else { 0 };
        // SAFETY: waitpid writes the status into a local integer.
        let rc = unsafe { libc::waitpid(pid, &mut status, flags) };
        if rc == -1 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if rc == 0 {
            return Ok(None);
        }
        let exit = if libc::WIFEXITED(status) {
            Exit::Code(libc::WEXITSTATUS(status))
        } else if libc::WIFSIGNALED(status) {
            Exit::Signal(libc::WTERMSIG(status))
        } else {
            continue;
        };
        return Ok(Some((rc, exit)));
    }
}

/// Sends `signo` to `pid`; a vanished process is not an error.
pub fn kill(pid: libc::pid_t, signo: i32) {
    // SAFETY: kill has no memory effects.
    unsafe {
        libc::kill(pid, signo);
    }
}

/// Ends the calling process at once with `code` (no destructors, no stdio
/// flushing): for forked children whose parent owns those resources.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and touches no Rust state.
    unsafe { libc::_exit(code) }
}

/// Restores the default disposition of every signal and the empty mask, so
/// the container's command starts as a freshly started process would.
pub fn reset_signals() {
    for signo in 1..32 {
        if signo == libc::SIGKILL || signo == libc::SIGSTOP {
            continue;
        }
        // SAFETY: SIG_DFL is always a valid disposition.
        unsafe {
            libc::signal(signo, libc::SIG_DFL);
        }
    }
    // An empty mask, set without allocating (this runs between fork and
    // exec too).
    // SAFETY: sigemptyset fills a local sigset_t, which pthread_sigmask
    // reads; the old mask is not needed.
    unsafe {
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    }
}

/// Makes `cmd`'s process receive `signal` when its parent (the caller)
/// dies, so a helper never outlives the process that owns it.
pub fn kill_with_parent(cmd: &mut std::process::Command, signal: rustix::process::Signal) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs between fork and exec and only calls
    // prctl(PR_SET_PDEATHSIG), which is async-signal-safe and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(signal)).map_err(io::Error::from)
        });
    }
}

/// Makes `cmd`'s process a FUSE server that lives as long as its mount:
/// it starts in a mount namespace of its own (a copy of the caller's, so
/// the caller's later `pivot_root` and unmounts do not move its root, its
/// `/proc` or the paths it serves from), without its copy of the mount it
/// serves (`mounted`, detached there: the server would otherwise hold its
/// own mount and never see it go), and with no descriptor of the caller's
/// but `keep` (the connection) and stdio.
#[allow(clippy::disallowed_methods)] // the server's namespace, not a container's
pub fn serve_from_own_mount_namespace(
    cmd: &mut std::process::Command,
    mounted: std::ffi::CString,
    keep: std::os::fd::RawFd,
) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs between fork and exec and only makes system
    // calls (unshare(CLONE_NEWNS), umount2 of a string made before the
    // fork, fcntl), which are async-signal-safe and allocate nothing.
    unsafe {
        cmd.pre_exec(move || {
            use super::Kernel;
            super::LINUX
                .unshare(rustix::thread::UnshareFlags::NEWNS)
                .map_err(io::Error::from)?;
            if libc::umount2(mounted.as_ptr(), libc::MNT_DETACH) == -1 {
                return Err(io::Error::last_os_error());
            }
            // Descriptors berth inherited or holds (a launcher's PMI socket,
            // a keeper's pipes) are not the server's.
            for fd in 3..1024 {
                if fd != keep {
                    libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
                }
            }
            if libc::fcntl(keep, libc::F_SETFD, 0) == -1 {
                return Err(io::Error::last_os_error());
            }
            // The server works as the run's setup does: with the
            // capabilities the run holds in the keeper's namespace.
            super::LINUX
                .keep_capabilities_across_exec()
                .map_err(io::Error::from)
        });
    }
}

/// Makes `cmd` start in a user and a mount namespace of its own, made
/// between fork and exec, with the capabilities it holds there as their
/// creator kept across the `exec` (as ambient ones): the program is
/// loaded inside the namespace, so its memory belongs to it. Its id maps
/// are the caller's to write meanwhile (`idmap::map_child`); until then
/// it runs unmapped, with the caller's own ids underneath.
pub fn exec_in_new_user_namespace(cmd: &mut std::process::Command) {
    use super::Kernel;
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs between fork and exec and only makes
    // unshare, capget/capset and prctl(PR_CAP_AMBIENT) system calls
    // (through rustix, on the stack), which are async-signal-safe and
    // allocate nothing.
    unsafe {
        cmd.pre_exec(|| {
            super::LINUX
                .unshare(
                    rustix::thread::UnshareFlags::NEWUSER | rustix::thread::UnshareFlags::NEWNS,
                )
                .map_err(io::Error::from)?;
            super::LINUX
                .keep_capabilities_across_exec()
                .map_err(io::Error::from)
        });
    }
}

/// Makes `cmd` start without capabilities although it runs as root in the
/// keeper's user namespace, or with the ambient capabilities a keeper with
/// host ids keeps (both cleared; securebits `NOROOT`, locked): the squashfs
/// server needs none, and a process of the user's containers that traced
/// it would find none to use.
pub fn exec_without_root_powers(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    const SECBIT_NOROOT: libc::c_ulong = 1;
    const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
    // SAFETY: the closure runs between fork and exec and only calls
    // prctl(PR_CAP_AMBIENT), capget/capset and prctl(PR_SET_SECUREBITS),
    // which are async-signal-safe and allocate nothing; a failure (no
    // CAP_SETPCAP) leaves the old behaviour.
    unsafe {
        cmd.pre_exec(|| {
            // Nor the ambient (and inheritable) ones a keeper with host
            // ids keeps.
            use super::Kernel;
            let _ = super::LINUX.forget_capabilities_across_exec();
            libc::prctl(
                libc::PR_SET_SECUREBITS,
                SECBIT_NOROOT | SECBIT_NOROOT_LOCKED,
                0,
                0,
                0,
            );
            Ok(())
        });
    }
}

/// Loads `program` as the thread's seccomp filter (allocates nothing).
/// Needs `no_new_privs` (set before) or `CAP_SYS_ADMIN`.
///
/// The filter is loaded with `SECCOMP_FILTER_FLAG_SPEC_ALLOW`: kernels
/// before 5.16 (RHEL 8 and 9, SLES 15, Ubuntu 20.04) otherwise turn on
/// the speculative store bypass mitigation (SSBD) for every process under
/// a filter, slowing memory-bound code for no gain in isolation (it guards
/// a process against itself); 5.16 made that the default everywhere.
/// Kernels before 4.17 know no such flag: there the filter is loaded as
/// before, with `prctl` (as where an outer sandbox refuses `seccomp(2)`).
pub fn load_seccomp_filter(program: &[libc::sock_filter]) -> std::io::Result<()> {
    let fprog = libc::sock_fprog {
        len: program.len() as u16,
        // The kernel only reads through this pointer.
        filter: program.as_ptr() as *mut libc::sock_filter,
    };
    let fprog_addr = &fprog as *const libc::sock_fprog as libc::c_ulong;
    // SAFETY: `fprog` points at `program`, which outlives the call; the
    // kernel copies the program (it never writes it) and keeps no pointer
    // to it.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_SPEC_ALLOW,
            fprog_addr,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    // EINVAL: a kernel before 4.17 (the flag); ENOSYS: before 3.17 (the
    // call); EPERM: an outer sandbox that allows prctl but not seccomp(2)
    // (which itself never answers EPERM here).
    if !matches!(
        err.raw_os_error(),
        Some(libc::EINVAL | libc::ENOSYS | libc::EPERM)
    ) {
        return Err(err);
    }
    // SAFETY: as above.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER as libc::c_ulong,
            fprog_addr,
            0,
            0,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
