//! The job epilog's work (as root, on each node): the job's named
//! containers go, and its image keepers' directories. Their records live in the job user's runtime directory,
//! which that user (and their containers) can write, so nothing found
//! there is trusted:
//!
//! - a directory is opened without following a symlink and used only if
//!   it belongs to the job user and nobody else can write it (a runtime
//!   directory another user pre-created is skipped);
//! - a record is read only if it is a regular file of the job user's of at
//!   most [`MAX_RECORD`] bytes, opened non-blocking (a FIFO or a symlink to
//!   `/dev/zero` in its place cannot hang or exhaust the epilog);
//! - a container's directory (its record and locks) and a named
//!   container's changes are removed through descriptors, following no
//!   symlink and crossing no mount ([`remove_entry`]);
//! - a process is signalled only if it is a berth holder (`berth
//!   __holder`, the plugin's berth binary where it is known) of the job
//!   user whose start time is the record's, through a pidfd taken and
//!   checked again before the signal, so a reused pid is never hit.
//!
//! The task side notes its runtime directory in [`note_path`] for the
//! epilog (which does not see the job's environment), in a file created
//! without following a symlink and used only if it is the user's own.

use std::ffi::CString;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The largest record or note the epilog reads.
pub const MAX_RECORD: u64 = 64 * 1024;

/// The runtime directories the epilog looks in without a note: berth's
/// with `XDG_RUNTIME_DIR=/run/user/UID`, and without `XDG_RUNTIME_DIR`.
pub fn default_runtime_dirs(uid: u32) -> [PathBuf; 2] {
    [
        PathBuf::from(format!("/run/user/{uid}/berth")),
        PathBuf::from(format!("/tmp/berth-{uid}")),
    ]
}

/// Where a task notes the runtime directory its named containers live in.
pub fn note_path(uid: u32, job: u32) -> PathBuf {
    PathBuf::from(format!("/tmp/berth-slurm-{uid}-{job}.dirs"))
}

/// `openat(dir, path, flags)`, with `O_CLOEXEC | O_NOFOLLOW | O_NOCTTY`.
fn open_at(dir: Option<&OwnedFd>, path: &Path, flags: libc::c_int) -> Option<OwnedFd> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    let base = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    let flags = flags | libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NOCTTY;
    // SAFETY: `c` is a NUL-terminated string that outlives the call; the
    // mode argument is read only with O_CREAT.
    let fd = unsafe { libc::openat(base, c.as_ptr(), flags, 0o600 as libc::c_uint) };
    if fd < 0 {
        return None;
    }
    // SAFETY: openat returned a new descriptor that nothing else owns.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The metadata of an open descriptor.
fn meta(fd: &OwnedFd) -> Option<std::fs::Metadata> {
    std::fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()
}

/// A directory of `uid`'s that nobody else can write, opened (beneath
/// `parent`, where given, as [`open_beneath`] opens: no mount entered).
fn private_dir(parent: Option<&OwnedFd>, path: &Path, uid: u32) -> Option<OwnedFd> {
    use rustix::fs::OFlags;
    let fd = match parent {
        Some(p) => open_beneath(p, path.as_os_str(), OFlags::RDONLY | OFlags::DIRECTORY)?,
        None => open_at(None, path, libc::O_RDONLY | libc::O_DIRECTORY)?,
    };
    let m = meta(&fd)?;
    (m.is_dir() && m.uid() == uid && m.mode() & 0o022 == 0).then_some(fd)
}

/// At most [`MAX_RECORD`] bytes of a regular file of `uid`'s.
fn small_file(parent: Option<&OwnedFd>, path: &Path, uid: u32) -> Option<String> {
    let fd = open_at(parent, path, libc::O_RDONLY | libc::O_NONBLOCK)?;
    let m = meta(&fd)?;
    if !m.is_file() || m.uid() != uid || m.len() > MAX_RECORD {
        return None;
    }
    let mut text = String::new();
    std::fs::File::from(fd)
        .take(MAX_RECORD)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// Names of the entries of an open directory.
fn entries(dir: &OwnedFd) -> Vec<std::ffi::OsString> {
    std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))
        .map(|rd| rd.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default()
}

/// The job's end on this node: kills the holders of job `job`'s named
/// containers of user `uid` and removes their directories, with the
/// changes kept for the job's steps, and the job's keepers' directories
/// (see the module text). `berth` is the plugin's
/// berth binary, when it names a file.
pub fn remove_job_state(uid: u32, job: u32, berth: Option<&Path>) {
    let mut bases = default_runtime_dirs(uid).to_vec();
    let note = note_path(uid, job);
    if let Some(text) = small_file(None, &note, uid) {
        bases.extend(
            text.lines()
                .map(PathBuf::from)
                .filter(|p| p.is_absolute() && !p.components().any(|c| c.as_os_str() == "..")),
        );
        let _ = std::fs::remove_file(&note);
    }
    bases.sort();
    bases.dedup();
    let berth_id = berth
        .and_then(|b| std::fs::metadata(b).ok())
        .map(|m| (m.dev(), m.ino()));
    let prefix = format!("slurm-{job}-");
    for base in bases {
        // berth's runtime directory is 0700.
        let Some(base) = private_dir(None, &base, uid)
            .filter(|d| meta(d).is_some_and(|m| m.mode() & 0o077 == 0))
        else {
            continue;
        };
        if let Some(containers) = private_dir(Some(&base), Path::new("containers"), uid) {
            for name in entries(&containers) {
                if !name.to_string_lossy().starts_with(&prefix) {
                    continue;
                }
                let Some(dir) = private_dir(Some(&containers), Path::new(&name), uid) else {
                    continue;
                };
                if let Some((pid, start)) =
                    small_file(Some(&dir), Path::new("info.json"), uid).and_then(|i| holder(&i))
                {
                    kill_holder(pid, start, uid, berth_id);
                }
                // Its record and locks go with the job.
                drop(dir);
                remove_entry(&containers, &name, 0);
            }
        }
        // The changes kept for the job's later steps (`RUNTIME/named/KEY`).
        if let Some(named) = private_dir(Some(&base), Path::new("named"), uid) {
            for name in entries(&named) {
                if name.to_string_lossy().starts_with(&prefix) {
                    remove_entry(&named, &name, 0);
                }
            }
        }
        // The job's keepers' directories (`RUNTIME/keepers/ID-KIND-jobJ`,
        // and `…-jobJ-step_S` where each step had its own): their
        // keepers have ended or end when idle; nothing runs them again.
        if let Some(keepers) = private_dir(Some(&base), Path::new("keepers"), uid) {
            for name in entries(&keepers) {
                if !is_jobs_keeper(&name.to_string_lossy(), job) {
                    continue;
                }
                let Some(dir) = private_dir(Some(&keepers), Path::new(&name), uid) else {
                    continue;
                };
                // A keeper that still runs (being killed with its step, or
                // one that left the job's process tracking, idle) is ended
                // first: its directory holds its mount point (`mnt/`).
                let pid = small_file(Some(&dir), Path::new("pid"), uid)
                    .and_then(|p| p.trim().parse::<i32>().ok());
                drop(dir);
                let ended = |pid| end_keeper(pid, &name.to_string_lossy(), uid, berth_id);
                if pid.is_none_or(ended) {
                    remove_entry(&keepers, &name, 0);
                }
            }
        }
    }
}

/// Whether keeper directory `name` is one of job `job`'s
/// (`berth_runtime` `keeper_name`).
fn is_jobs_keeper(name: &str, job: u32) -> bool {
    let of_job = format!("-job{job}");
    name.ends_with(&of_job) || name.contains(&format!("{of_job}-step_"))
}

/// How deep [`remove_entry`] descends (each level holds a descriptor);
/// what lies deeper stays, with its directories.
const MAX_DEPTH: usize = 256;

/// Removes entry `name` of the open directory `parent` and everything
/// below it, as root in a directory of the user's. Nothing found there is
/// trusted: each entry is resolved with `openat2` beneath its directory,
/// following no symlink and not leaving the file system
/// (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV`), so a mount
/// point (a FUSE server of the user's) is not entered, not even looked at,
/// and stays; directories are entered only through descriptors, so one
/// renamed elsewhere meanwhile is still one of the user's. Errors leave
/// the entry.
fn remove_entry(parent: &OwnedFd, name: &std::ffi::OsStr, depth: usize) {
    use rustix::fs::{fstat, unlinkat, AtFlags, FileType, OFlags};
    // O_PATH: a FIFO or a device is not opened, a symlink is itself.
    let Some(st) = open_beneath(parent, name, OFlags::PATH).and_then(|at| fstat(&at).ok()) else {
        return;
    };
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        let _ = unlinkat(parent, name, AtFlags::empty());
        return;
    }
    if depth >= MAX_DEPTH {
        return;
    }
    if let Some(dir) = open_beneath(parent, name, OFlags::RDONLY | OFlags::DIRECTORY) {
        for entry in entries(&dir) {
            remove_entry(&dir, &entry, depth + 1);
        }
    }
    let _ = unlinkat(parent, name, AtFlags::REMOVEDIR);
}

/// Entry `name` of `parent`, opened with `flags` without following a
/// symlink or leaving `parent`'s file system (`openat2` with
/// `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV`). Before Linux
/// 5.6: `openat` with `O_NOFOLLOW`, then a check that it is on `parent`'s
/// file system (a mount point's root is then looked at once).
// berth_runtime's Kernel::open_in_root resolves inside a root, following
// symlinks there; this is one name beneath a directory, following none.
#[allow(clippy::disallowed_methods)]
fn open_beneath(
    parent: &OwnedFd,
    name: &std::ffi::OsStr,
    flags: rustix::fs::OFlags,
) -> Option<OwnedFd> {
    use rustix::fs::{fstat, openat, openat2, Mode, OFlags, ResolveFlags};
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_XDEV;
    match openat2(parent, name, flags, Mode::empty(), resolve) {
        Ok(fd) => Some(fd),
        Err(rustix::io::Errno::NOSYS) => {
            let fd = openat(parent, name, flags, Mode::empty()).ok()?;
            let same = fstat(&fd).ok()?.st_dev == fstat(parent).ok()?.st_dev;
            same.then_some(fd)
        }
        Err(_) => None,
    }
}

/// Whether `pid` is, right now, a berth process of `uid` running as `role`
/// (`berth __holder ...`, `berth __keeper DIR`), whose next argument ends
/// with `arg_end` where one is given; the plugin's berth binary (device and
/// inode) where it is known.
pub(crate) fn is_berth(
    pid: i32,
    uid: u32,
    (role, arg_end): (&[u8], Option<&[u8]>),
    berth: Option<(u64, u64)>,
) -> bool {
    if proc_uid(pid) != Some(uid) {
        return false;
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let mut args = cmdline.split(|b| *b == 0).skip(1);
    if args.next() != Some(role) {
        return false;
    }
    if let Some(end) = arg_end {
        if !args.next().is_some_and(|a| a.ends_with(end)) {
            return false;
        }
    }
    match berth {
        Some(id) => {
            std::fs::metadata(format!("/proc/{pid}/exe")).is_ok_and(|m| (m.dev(), m.ino()) == id)
        }
        None => true,
    }
}

/// Whether `pid` is, right now, a berth holder of `uid` started at `start`.
fn is_holder(pid: i32, start: u64, uid: u32, berth: Option<(u64, u64)>) -> bool {
    start_time(pid) == Some(start) && is_berth(pid, uid, (b"__holder", None), berth)
}

/// SIGKILLs process `pid` through a pidfd, if `verified` says it is the
/// one meant, before and again once the pidfd pins it; the pidfd, to wait
/// on.
fn kill_verified(pid: i32, verified: &dyn Fn() -> bool) -> Option<OwnedFd> {
    if pid <= 1 || !verified() {
        return None;
    }
    // SAFETY: pidfd_open takes a pid and flags and returns a descriptor.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the syscall returned a new descriptor that nothing else owns.
    let pidfd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    if !verified() {
        return None;
    }
    // SAFETY: pidfd_send_signal with an open pidfd, a signal number, no
    // siginfo and no flags touches no memory of ours.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            libc::SIGKILL,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        );
    }
    Some(pidfd)
}

/// SIGKILLs a verified holder.
fn kill_holder(pid: i32, start: u64, uid: u32, berth: Option<(u64, u64)>) {
    kill_verified(pid, &|| is_holder(pid, start, uid, berth));
}

/// Ends the keeper of keeper directory `name` whose pid file names `pid`
/// (a berth `__keeper .../keepers/NAME` of `uid`), waiting up to
/// [`KEEPER_WAIT_MS`] for it to go; whether none runs now.
fn end_keeper(pid: i32, name: &str, uid: u32, berth: Option<(u64, u64)>) -> bool {
    let end = format!("/keepers/{name}");
    let is_keeper = || is_berth(pid, uid, (b"__keeper", Some(end.as_bytes())), berth);
    let Some(pidfd) = kill_verified(pid, &is_keeper) else {
        // Not (or no longer) that keeper: what runs under the pid is not it.
        return true;
    };
    let mut poll = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut poll, 1, KEEPER_WAIT_MS) > 0 }
}

/// How long the epilog waits for a killed keeper to end.
const KEEPER_WAIT_MS: libc::c_int = 2000;

/// Notes the task's berth runtime directory `dir` for the epilog. The
/// note is created without following a symlink, and written only if it is
/// a regular file of ours; otherwise the reason is returned (another user
/// made the file first).
pub fn note_state_dir(dir: &str, uid: u32, job: u32) -> Result<(), String> {
    use std::io::Write;
    let note = note_path(uid, job);
    let fd =
        open_at(None, &note, libc::O_RDWR | libc::O_APPEND | libc::O_CREAT).ok_or_else(|| {
            format!(
                "cannot open {}: {}",
                note.display(),
                std::io::Error::last_os_error()
            )
        })?;
    let m = meta(&fd).ok_or_else(|| format!("cannot inspect {}", note.display()))?;
    if !m.is_file() || m.uid() != uid {
        return Err(format!(
            "{} is not a file of yours (owner {}); the job's named containers may outlive it",
            note.display(),
            m.uid()
        ));
    }
    // Each directory once: every task of the job notes its own, and the
    // epilog reads at most MAX_RECORD bytes.
    let mut file = std::fs::File::from(fd);
    let mut text = String::new();
    let _ = (&mut file).take(MAX_RECORD).read_to_string(&mut text);
    if text.lines().any(|l| l == dir) {
        return Ok(());
    }
    writeln!(file, "{dir}").map_err(|e| format!("{}: {e}", note.display()))
}

/// The real uid of process `pid`, from `/proc/PID/status`.
pub(crate) fn proc_uid(pid: i32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The holder's pid and start time in a container record (`info.json`).
fn holder(info: &str) -> Option<(i32, u64)> {
    let num = |key: &str| -> Option<u64> {
        let rest = info.split(&format!("\"{key}\":")).nth(1)?;
        rest.trim_start()
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    Some((i32::try_from(num("pid")?).ok()?, num("start_time")?))
}

fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own_uid() -> u32 {
        // SAFETY: getuid(2) cannot fail and touches no memory.
        unsafe { libc::getuid() }
    }

    #[test]
    fn a_record_is_a_small_regular_file_of_the_user() {
        let d = tempfile::tempdir().unwrap();
        let uid = own_uid();
        let dir = open_at(None, d.path(), libc::O_RDONLY | libc::O_DIRECTORY).unwrap();
        std::fs::write(d.path().join("ok.json"), r#"{"pid":7,"start_time":9}"#).unwrap();
        assert_eq!(
            small_file(Some(&dir), Path::new("ok.json"), uid)
                .as_deref()
                .and_then(holder),
            Some((7, 9))
        );
        // A FIFO: refused at once (no writer, no hang).
        let fifo = CString::new(d.path().join("fifo.json").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid path string.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert_eq!(small_file(Some(&dir), Path::new("fifo.json"), uid), None);
        // A symlink (to /dev/zero): not followed.
        std::os::unix::fs::symlink("/dev/zero", d.path().join("zero.json")).unwrap();
        assert_eq!(small_file(Some(&dir), Path::new("zero.json"), uid), None);
        // Too big.
        std::fs::write(
            d.path().join("big.json"),
            vec![b' '; MAX_RECORD as usize + 1],
        )
        .unwrap();
        assert_eq!(small_file(Some(&dir), Path::new("big.json"), uid), None);
        // Someone else's.
        assert_eq!(small_file(Some(&dir), Path::new("ok.json"), uid + 1), None);
    }

    #[test]
    fn a_containers_directory_goes_without_following_its_links() {
        let d = tempfile::tempdir().unwrap();
        let outside = d.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), "x").unwrap();
        // What a container's changes may hold: symlinks out (to a file and
        // to a directory), a deep tree, a FIFO.
        let c = d.path().join("containers/slurm-7-dev");
        std::fs::create_dir_all(c.join("named/upper/etc/deep/er")).unwrap();
        std::fs::create_dir_all(c.join("named/work/work")).unwrap();
        std::fs::write(c.join("named/upper/etc/deep/er/f"), "y").unwrap();
        std::os::unix::fs::symlink(&outside, c.join("named/upper/dir")).unwrap();
        std::os::unix::fs::symlink(outside.join("keep"), c.join("named/upper/file")).unwrap();
        let fifo = CString::new(c.join("named/fifo").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid path string.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let containers = open_at(
            None,
            &d.path().join("containers"),
            libc::O_RDONLY | libc::O_DIRECTORY,
        )
        .unwrap();
        remove_entry(&containers, std::ffi::OsStr::new("slurm-7-dev"), 0);
        assert!(!c.exists(), "the container's directory is gone");
        assert!(outside.join("keep").is_file(), "what its links named stays");
        // A symlink in its place: removed, not followed.
        std::os::unix::fs::symlink(&outside, &c).unwrap();
        remove_entry(&containers, std::ffi::OsStr::new("slurm-7-dev"), 0);
        assert!(!c.exists() && outside.join("keep").is_file());
    }

    /// The task's note lists each runtime directory once; the epilog
    /// removes the job's keepers' directories there, ending a keeper that
    /// still runs first, and no other job's.
    #[test]
    fn the_epilog_removes_the_jobs_ended_keepers() {
        let uid = own_uid();
        let job = 3_000_000_000 + std::process::id() % 1_000_000;
        let d = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let base = d.path().to_str().unwrap();
        for dir in [base, base, "/elsewhere", base] {
            note_state_dir(dir, uid, job).unwrap();
        }
        let note = std::fs::read_to_string(note_path(uid, job)).unwrap();
        assert_eq!(note, format!("{base}\n/elsewhere\n"));
        let keepers = d.path().join("keepers");
        let make = |name: &str, pid: Option<u32>| {
            std::fs::create_dir_all(keepers.join(name).join("mnt")).unwrap();
            if let Some(pid) = pid {
                std::fs::write(keepers.join(name).join("pid"), pid.to_string()).unwrap();
            }
        };
        let ended = format!("ab-user-job{job}-step_0");
        let killed = format!("ab-user-job{job}");
        let reused = format!("ef-user-job{job}");
        let running = format!("cd-user-job{job}-step_1");
        let other = format!("ab-user-job{}", job + 1);
        // A keeper that still runs: `… __keeper …/keepers/NAME`.
        std::fs::write(d.path().join("__keeper"), "sleep 30\n").unwrap();
        let mut keeper = std::process::Command::new("/bin/sh")
            .current_dir(d.path())
            .arg("__keeper")
            .arg(keepers.join(&running))
            .spawn()
            .unwrap();
        make(&ended, None);
        make(&killed, Some(u32::MAX / 2));
        // Its pid now another process (this test's): not signalled.
        make(&reused, Some(std::process::id()));
        make(&running, Some(keeper.id()));
        make(&other, None);
        remove_job_state(uid, job, None);
        let left: Vec<String> = std::fs::read_dir(&keepers)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(left, [other], "{left:?}");
        assert!(
            keeper.try_wait().unwrap().is_some(),
            "the keeper still runs"
        );
        assert!(!note_path(uid, job).exists());
    }

    #[test]
    fn a_jobs_keepers_are_its_own() {
        for (name, is) in [
            ("ab12-user-job7", true),
            ("ab12-fakeroot-job7-step_0", true),
            ("ab12-user-job7-step_batch", true),
            ("ab12-user-job77", false),
            ("ab12-user-job77-step_0", false),
            ("ab12-user", false),
        ] {
            assert_eq!(is_jobs_keeper(name, 7), is, "{name}");
        }
    }

    #[test]
    fn only_a_holder_is_one() {
        let me = std::process::id() as i32;
        let start = start_time(me).unwrap();
        assert!(
            !is_holder(me, start, own_uid(), None),
            "a test binary is no holder"
        );
        assert!(!is_holder(me, start + 1, own_uid(), None));
    }
}
