//! Thin wrappers around the system calls `rustix` does not cover safely:
//! fork, signal masks and waiting. Every `unsafe` block of the crate lives
//! here, each with its reason.

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

/// Unshares namespaces of the calling thread.
pub fn unshare(flags: rustix::thread::UnshareFlags) -> io::Result<()> {
    // SAFETY: unshare is unsafe in rustix because CLONE_FILES/CLONE_FS can
    // break invariants of other threads; berth calls it single-threaded and
    // never with CLONE_FILES.
    unsafe { rustix::thread::unshare_unsafe(flags) }.map_err(io::Error::from)
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
    let _ = mask(&SigSet::of(&(1..65).collect::<Vec<i32>>()), false);
}

fn cstr(s: &std::ffi::OsStr) -> io::Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(s.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// `mount(2)` with raw flags; `None` arguments pass NULL.
pub fn mount(
    source: Option<&std::path::Path>,
    target: &std::path::Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let source = source.map(|s| cstr(s.as_os_str())).transpose()?;
    let target = cstr(target.as_os_str())?;
    let fstype = fstype.map(|s| cstr(std::ffi::OsStr::new(s))).transpose()?;
    let data = data.map(|s| cstr(std::ffi::OsStr::new(s))).transpose()?;
    let ptr = |c: &Option<std::ffi::CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
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
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `AT_RECURSIVE` of `<linux/fcntl.h>` (not in the libc crate for Linux).
const AT_RECURSIVE: libc::c_uint = 0x8000;

/// Mount attributes [`set_mount_attr_recursive`] can add.
pub const ATTR_RDONLY: u64 = libc::MOUNT_ATTR_RDONLY;
/// See [`ATTR_RDONLY`].
pub const ATTR_NOSUID: u64 = libc::MOUNT_ATTR_NOSUID;
/// See [`ATTR_RDONLY`].
pub const ATTR_NODEV: u64 = libc::MOUNT_ATTR_NODEV;

/// `mount_setattr(fd, "", AT_EMPTY_PATH | AT_RECURSIVE)`: adds `set` (some
/// of the `ATTR_*` bits) to the mount `fd` names and to every mount below
/// it (Linux 5.12; `ENOSYS` before).
pub fn set_mount_attr_recursive(fd: std::os::fd::BorrowedFd<'_>, set: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let attr = libc::mount_attr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: the path is a static NUL-terminated empty string, `attr` is a
    // valid `struct mount_attr` whose size is passed, and the kernel only
    // reads it; `fd` is a descriptor borrowed for the call.
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
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `struct loop_info64` of `<linux/loop.h>`.
#[repr(C)]
struct LoopInfo64 {
    device: u64,
    inode: u64,
    rdevice: u64,
    offset: u64,
    sizelimit: u64,
    number: u32,
    encrypt_type: u32,
    encrypt_key_size: u32,
    flags: u32,
    file_name: [u8; 64],
    crypt_name: [u8; 64],
    encrypt_key: [u8; 32],
    init: [u64; 2],
}

/// `struct loop_config` of `<linux/loop.h>`.
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LOOP_SET_FD: libc::c_ulong = 0x4C00;
const LOOP_CLR_FD: libc::c_ulong = 0x4C01;
const LOOP_SET_STATUS64: libc::c_ulong = 0x4C04;
const LO_FLAGS_READ_ONLY: u32 = 1;
const LO_FLAGS_AUTOCLEAR: u32 = 4;

/// Attaches `file` (by descriptor: no path is walked) to a free loop
/// device, read-only and cleared when its last user goes (the unmount).
/// Returns the device's path and an open descriptor that keeps it attached
/// until the mount holds it. Root only.
pub fn attach_loop_readonly(
    file: &std::fs::File,
) -> io::Result<(std::path::PathBuf, std::fs::File)> {
    use std::os::fd::AsRawFd;
    let control = std::fs::File::options()
        .read(true)
        .write(true)
        .open("/dev/loop-control")?;
    let mut last = io::Error::from(io::ErrorKind::ResourceBusy);
    // Another process may take the free device between the two calls.
    for _ in 0..8 {
        // SAFETY: LOOP_CTL_GET_FREE takes no argument and returns a number.
        let n = unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE as _) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let path = std::path::PathBuf::from(format!("/dev/loop{n}"));
        let dev = std::fs::File::options().read(true).open(&path)?;
        // SAFETY: all-zero bytes are a valid loop_config (plain integers and
        // arrays).
        let mut config: LoopConfig = unsafe { std::mem::zeroed() };
        config.fd = file.as_raw_fd() as u32;
        config.info.flags = LO_FLAGS_READ_ONLY | LO_FLAGS_AUTOCLEAR;
        // SAFETY: `config` is a valid `struct loop_config` the kernel only
        // reads during the call; both descriptors are open.
        let rc = unsafe {
            libc::ioctl(
                dev.as_raw_fd(),
                LOOP_CONFIGURE as _,
                &config as *const LoopConfig,
            )
        };
        if rc == 0 {
            return Ok((path, dev));
        }
        last = io::Error::last_os_error();
        if matches!(last.raw_os_error(), Some(libc::EINVAL | libc::ENOTTY)) {
            // Before Linux 5.8: LOOP_SET_FD (read-only: the file is open
            // read-only), then the autoclear flag.
            // SAFETY: LOOP_SET_FD takes a descriptor number.
            let rc = unsafe { libc::ioctl(dev.as_raw_fd(), LOOP_SET_FD as _, file.as_raw_fd()) };
            if rc != 0 {
                last = io::Error::last_os_error();
                if last.raw_os_error() == Some(libc::EBUSY) {
                    continue;
                }
                break;
            }
            // SAFETY: `config.info` is a valid loop_info64 the kernel reads.
            let rc = unsafe {
                libc::ioctl(
                    dev.as_raw_fd(),
                    LOOP_SET_STATUS64 as _,
                    &config.info as *const LoopInfo64,
                )
            };
            if rc == 0 {
                return Ok((path, dev));
            }
            last = io::Error::last_os_error();
            // SAFETY: LOOP_CLR_FD takes no argument.
            unsafe { libc::ioctl(dev.as_raw_fd(), LOOP_CLR_FD as _, 0) };
            break;
        }
        if last.raw_os_error() != Some(libc::EBUSY) {
            break;
        }
    }
    Err(last)
}

/// `umount2(2)`.
pub fn umount(target: &std::path::Path, flags: libc::c_int) -> io::Result<()> {
    let target = cstr(target.as_os_str())?;
    // SAFETY: target is a valid NUL-terminated string.
    let rc = unsafe { libc::umount2(target.as_ptr(), flags) };
    if rc == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A user database entry, looked up through NSS (so LDAP/SSSD users of a
/// cluster are found, not only /etc/passwd).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passwd {
    /// Login name.
    pub name: String,
    /// GECOS field.
    pub gecos: String,
    /// Home directory.
    pub home: String,
}

/// `getpwuid_r(3)`.
pub fn getpwuid(uid: u32) -> Option<Passwd> {
    let mut buf = vec![0u8; 16384];
    // SAFETY: a zeroed passwd is a valid out value for getpwuid_r.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: buffers are valid for their lengths; on success `result`
    // points to `pwd`, whose strings point into `buf`.
    let rc = unsafe {
        libc::getpwuid_r(
            uid,
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() {
        return None;
    }
    let s = |p: *const libc::c_char| {
        if p.is_null() {
            String::new()
        } else {
            // SAFETY: getpwuid_r stored NUL-terminated strings inside `buf`.
            unsafe { std::ffi::CStr::from_ptr(p) }
                .to_string_lossy()
                .into_owned()
        }
    };
    Some(Passwd {
        name: s(pwd.pw_name),
        gecos: s(pwd.pw_gecos),
        home: s(pwd.pw_dir),
    })
}

/// `getgrgid_r(3)`: the group's name.
pub fn group_name(gid: u32) -> Option<String> {
    let mut buf = vec![0u8; 65536];
    // SAFETY: a zeroed group is a valid out value for getgrgid_r.
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::group = std::ptr::null_mut();
    // SAFETY: as in getpwuid.
    let rc = unsafe {
        libc::getgrgid_r(
            gid,
            &mut grp,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() || grp.gr_name.is_null() {
        return None;
    }
    // SAFETY: gr_name is a NUL-terminated string inside `buf`.
    Some(
        unsafe { std::ffi::CStr::from_ptr(grp.gr_name) }
            .to_string_lossy()
            .into_owned(),
    )
}

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

/// Writes the id maps of the calling process's (fresh) user namespace:
/// `setgroups` denied first (required to map groups unprivileged), then
/// one `uid_map` and one `gid_map` line.
///
/// The files are opened as `/proc/PID/...` without following any symlink
/// and must be on a procfs: after `pivot_root` /proc is the container's,
/// and an image whose `/proc` is a symlink into a later bind (the
/// CVE-2019-16884 pattern) would otherwise take the writes.
pub fn write_id_maps(uid_line: &str, gid_line: &str) -> io::Result<()> {
    const PROC_SUPER_MAGIC: i64 = 0x9fa0;
    let pid = std::process::id();
    let write = |name: &str, text: &str| -> io::Result<()> {
        use std::io::Write;
        let fd = rustix::fs::openat2(
            rustix::fs::CWD,
            format!("/proc/{pid}/{name}"),
            rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
            rustix::fs::ResolveFlags::NO_SYMLINKS,
        )?;
        if rustix::fs::fstatfs(&fd)?.f_type as i64 != PROC_SUPER_MAGIC {
            return Err(io::Error::other(format!(
                "/proc/{pid}/{name} is not on a proc file system"
            )));
        }
        std::fs::File::from(fd).write_all(text.as_bytes())
    };
    write("setgroups", "deny")?;
    write("uid_map", &format!("{uid_line}\n"))?;
    write("gid_map", &format!("{gid_line}\n"))
}

/// Makes every mount of the current mount namespace a slave, so nothing
/// mounted from here on propagates back (to a keeper or the host).
pub fn make_rslave() -> io::Result<()> {
    mount(
        None,
        std::path::Path::new("/"),
        None,
        libc::MS_REC | libc::MS_SLAVE,
        None,
    )
}

/// Brings the loopback interface of the current network namespace up.
pub fn loopback_up() -> io::Result<()> {
    // SAFETY: socket() has no memory effects; the descriptor is owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor we own.
    let sock = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: a zeroed ifreq is valid; we fill the name and flags fields.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (i, b) in b"lo\0".iter().enumerate() {
        req.ifr_name[i] = *b as libc::c_char;
    }
    use std::os::fd::AsRawFd;
    // SAFETY: SIOCGIFFLAGS reads into `req`, a valid ifreq.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the flags member of the union was just filled by the kernel.
    unsafe {
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
    }
    // SAFETY: SIOCSIFFLAGS reads a valid ifreq.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
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

/// Makes `cmd` start without capabilities although it runs as root in the
/// keeper's user namespace (securebits `NOROOT`, locked): the squashfs
/// server needs none, and a process of the user's containers that traced
/// it would find none to use.
pub fn exec_without_root_powers(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    const SECBIT_NOROOT: libc::c_ulong = 1;
    const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
    // SAFETY: the closure runs between fork and exec and only calls
    // prctl(PR_SET_SECUREBITS), which is async-signal-safe and allocates
    // nothing; a failure (no CAP_SETPCAP) leaves the old behaviour.
    unsafe {
        cmd.pre_exec(|| {
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

/// Drops every capability not in `keep` from the bounding set.
pub fn restrict_bounding_set(keep: &[u32]) -> io::Result<()> {
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
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// L6 of the security review: with something other than a procfs at
    /// /proc (here a tmpfs in a private mount namespace, holding plain
    /// files and then a symlink where /proc/PID/ would be), the id maps are
    /// not written there.
    #[test]
    fn id_maps_are_written_only_to_a_procfs() {
        // SAFETY: the child makes only system calls and exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = (|| -> Option<i32> {
                let (uid, gid) = (
                    rustix::process::getuid().as_raw(),
                    rustix::process::getgid().as_raw(),
                );
                unshare(rustix::thread::UnshareFlags::NEWUSER).ok()?;
                // On the real procfs: written.
                write_id_maps(&format!("0 {uid} 1"), &format!("0 {gid} 1")).ok()?;
                unshare(
                    rustix::thread::UnshareFlags::NEWUSER | rustix::thread::UnshareFlags::NEWNS,
                )
                .ok()?;
                write_id_maps("0 0 1", "0 0 1").ok()?;
                make_rslave().ok()?;
                let proc_dir = std::path::Path::new("/proc");
                mount(Some(proc_dir), proc_dir, Some("tmpfs"), 0, None).ok()?;
                let me = proc_dir.join(std::process::id().to_string());
                std::fs::create_dir(&me).ok()?;
                for f in ["setgroups", "uid_map", "gid_map"] {
                    std::fs::write(me.join(f), "").ok()?;
                }
                // As a procfs has it (the previous code wrote through it).
                std::os::unix::fs::symlink(std::process::id().to_string(), proc_dir.join("self"))
                    .ok()?;
                let plain = write_id_maps("0 0 1", "0 0 1");
                if !plain.is_err_and(|e| e.to_string().contains("not on a proc")) {
                    return Some(2);
                }
                std::fs::remove_dir_all(&me).ok()?;
                std::os::unix::fs::symlink("/tmp", &me).ok()?;
                Some(if write_id_maps("0 0 1", "0 0 1").is_err() {
                    0
                } else {
                    3
                })
            })()
            .unwrap_or(4);
            exit_now(code);
        }
        let (_, exit) = wait(pid, false).unwrap().unwrap();
        assert_eq!(exit.as_code(), 0);
    }
}
