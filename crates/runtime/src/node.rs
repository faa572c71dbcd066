//! What berth keeps on a node, per user: the runtime directory, and the
//! one lease protocol by which runs share a long-lived process there (an
//! image keeper, a shared container's anchor).
//!
//! The protocol: a served directory has a *decision* lock and a *users*
//! lock. A client takes the decision lock (exclusive), checks that the
//! server lives, takes a shared lock on `users` (its share, held for as
//! long as it uses the server) and lets the decision lock go. The server
//! looks every poll interval: when it can take both locks exclusively (no
//! client is deciding and none holds a share), it has been idle since
//! then; once idle for its linger time, it leaves while holding them, so
//! no client ever joins a server on its way out.

use std::fs::{self, File, OpenOptions};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::fs::{flock, FlockOperation};

use crate::error::{Error, Result};

/// Real root's runtime directory.
pub const ROOT_STATE_DIR: &str = "/run/berth";

/// berth's per-user runtime directory on this node: `$XDG_RUNTIME_DIR/berth`
/// or `/tmp/berth-UID` (root: [`ROOT_STATE_DIR`]), created 0700, refused
/// if someone else owns it, and canonical (so that a bind showing it is
/// recognised by prefix).
pub fn state_dir() -> Result<PathBuf> {
    if let Some(d) = STATE_DIR.get() {
        return Ok(d.clone());
    }
    let dir = find_state_dir()?;
    Ok(STATE_DIR.get_or_init(|| dir).clone())
}

/// The runtime directory once known: worked out by the first call in the
/// caller's own identity (the run's children, inside user namespaces where
/// they are uid 0, inherit it), or set by a keeper from its directory.
static STATE_DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// A keeper's runtime directory: the one above `keepers/NAME`.
pub(crate) fn adopt_state_dir(keeper_dir: &Path) {
    if let Some(d) = keeper_dir.parent().and_then(Path::parent) {
        let _ = STATE_DIR.set(d.to_path_buf());
    }
}

fn find_state_dir() -> Result<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let uid = rustix::process::getuid().as_raw();
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        // Root's state never lives where users write.
        _ if berth_config::root::is_real_root() => PathBuf::from(ROOT_STATE_DIR),
        Some(d) if Path::new(&d).is_dir() => PathBuf::from(d).join("berth"),
        _ => std::env::temp_dir().join(format!("berth-{uid}")),
    };
    if !dir.exists() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| Error::io("create the runtime directory", &dir, e))?;
    }
    let meta = fs::symlink_metadata(&dir).map_err(|e| Error::io("inspect", &dir, e))?;
    if meta.uid() != uid {
        // Someone else made it first (a name in a shared /tmp can be
        // taken): berth will not use it, and the caller cannot remove it.
        return Err(Error::Setup(format!(
            "runtime directory {} belongs to another user (uid {}), so berth cannot keep its state there; \
             set XDG_RUNTIME_DIR to a private directory of yours on this node (for example \
             `export XDG_RUNTIME_DIR=$(mktemp -d)`), or ask the administrator to remove {}",
            dir.display(),
            meta.uid(),
            dir.display()
        )));
    }
    if !meta.is_dir() || meta.mode() & 0o077 != 0 {
        return Err(Error::Setup(format!(
            "runtime directory {} is not a private directory (mode {:o}); remove it (berth makes it again, mode 0700) or set XDG_RUNTIME_DIR",
            dir.display(),
            meta.mode() & 0o7777
        )));
    }
    Ok(fs::canonicalize(&dir).unwrap_or(dir))
}

/// Creates `dir` (and its parents) private to the caller.
pub(crate) fn private_dir(dir: &Path) -> Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| Error::io("create", dir, e))
}

/// Opens (creating) the lock file `path`, mode 0600.
pub fn open_lock(path: &Path) -> Result<File> {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io("open", path, e))
}

/// Takes the lock file `name` in `dir` exclusively, waiting for its
/// holder, and makes `dir` (private) where it is missing.
///
/// `berth ps` removes the directory of a dead shared container under its
/// decision lock. A caller that opened a lock of that directory before and
/// waited for it would then hold a lock nobody else can find, in a
/// directory that is gone (and one that came just after would find no
/// directory to open it in): this makes the directory again and takes the
/// new lock instead.
pub fn lock_linked(dir: &Path, name: &str) -> Result<File> {
    let path = dir.join(name);
    loop {
        let file = match open_lock(&path) {
            Err(_) if !dir.exists() => {
                private_dir(dir)?;
                continue;
            }
            opened => opened?,
        };
        lock(&file, FlockOperation::LockExclusive, &path)?;
        if still_linked(&file, &path) {
            return Ok(file);
        }
        private_dir(dir)?;
    }
}

/// Whether `path` still names the open file `f` (not removed, nor
/// replaced, since it was opened).
pub fn still_linked(f: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (f.metadata(), fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// `flock(f, op)`, the path named on failure.
pub(crate) fn lock(f: &File, op: FlockOperation, path: &Path) -> Result<()> {
    flock(f, op).map_err(|e| Error::sys("lock", Some(path.into()), e))
}

/// `/proc/PID/ns/KIND`, open.
pub(crate) fn open_ns(pid: i32, kind: &str) -> Result<OwnedFd> {
    let p = format!("/proc/{pid}/ns/{kind}");
    let f = File::open(&p).map_err(|e| Error::io("open", &p, e))?;
    Ok(f.into())
}

/// Process `pid`'s descriptor `fd` of a directory, opened again (`O_PATH`)
/// through /proc/PID/fd/FD.
pub(crate) fn open_fd_of(pid: i32, fd: i32) -> Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    let p = format!("/proc/{pid}/fd/{fd}");
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    rustix::fs::open(&p, flags, Mode::empty()).map_err(|e| Error::io("open", &p, e.into()))
}

/// A process's start time and whether it is a zombie, from /proc/PID/stat.
pub(crate) fn proc_start(pid: i32) -> Option<(u64, bool)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields follow the
    // last ')'. Field 3 is the state, field 22 the start time.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let zombie = matches!(fields.first(), Some(&"Z") | Some(&"X"));
    Some((fields.get(19)?.parse().ok()?, zombie))
}

/// A process pinned by a pidfd taken before anything about it is checked:
/// while [`Pinned::still_runs`], its pid names that same process, so what
/// was read under `/proc/PID` and the namespaces opened there since are its
/// own, not those of a process that reused the pid.
pub(crate) struct Pinned {
    pid: i32,
    fd: OwnedFd,
}

impl Pinned {
    /// Pins the process `pid`, if there is one.
    pub(crate) fn new(pid: i32) -> Option<Self> {
        let p = rustix::process::Pid::from_raw(pid)?;
        let fd = rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok()?;
        Some(Pinned { pid, fd })
    }

    /// The pinned process's pid.
    pub(crate) fn pid(&self) -> i32 {
        self.pid
    }

    /// A duplicate of the pinned process's descriptor `fd`
    /// (`pidfd_getfd`, Linux 5.6; the caller may trace the process).
    pub(crate) fn take_fd(&self, fd: i32) -> rustix::io::Result<OwnedFd> {
        rustix::process::pidfd_getfd(&self.fd, fd, rustix::process::PidfdGetfdFlags::empty())
    }

    /// Sends the pinned process SIGKILL and waits, at most `wait`, until
    /// it has exited; whether it has.
    pub(crate) fn kill_and_wait(&self, wait: Duration) -> bool {
        let _ = rustix::process::pidfd_send_signal(&self.fd, rustix::process::Signal::KILL);
        matches!(self.wait_exit(wait), Ok(n) if n > 0)
    }

    /// Whether the pinned process has not exited.
    pub(crate) fn still_runs(&self) -> bool {
        matches!(self.wait_exit(Duration::ZERO), Ok(0))
    }

    /// Waits at most `wait` for the pinned process to exit (its pidfd
    /// turns readable when it does): poll's count of ready descriptors.
    fn wait_exit(&self, wait: Duration) -> rustix::io::Result<usize> {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
        let wait = Timespec {
            tv_sec: wait.as_secs() as _,
            tv_nsec: wait.subsec_nanos() as _,
        };
        poll(&mut fds, Some(&wait))
    }
}

/// The two lock files of a served directory (see the module doc).
pub struct LeaseFiles {
    /// Taken exclusively to decide: to join, or (the server) to leave.
    pub decide: File,
    /// Shared by each client while it uses the server.
    pub users: File,
}

impl LeaseFiles {
    /// Opens the locks `decide` and `users.lock` in `dir`.
    pub fn open(dir: &Path, decide: &str) -> Result<Self> {
        Ok(LeaseFiles {
            decide: open_lock(&dir.join(decide))?,
            users: open_lock(&dir.join("users.lock"))?,
        })
    }
}

/// A client's decision in progress: the decision lock is held until this
/// is dropped.
pub struct Deciding {
    lock: File,
    users: PathBuf,
}

impl Deciding {
    /// Takes `dir`'s decision lock `decide`, waiting for other clients and
    /// for a server on its way out (see [`lock_linked`]: a directory
    /// removed meanwhile is made again).
    pub fn begin(dir: &Path, decide: &str) -> Result<Self> {
        Ok(Deciding {
            lock: lock_linked(dir, decide)?,
            users: dir.join("users.lock"),
        })
    }

    /// Takes a share of the server (after checking it lives): it cannot
    /// leave while the share is held. Its own open file, so a helper that
    /// inherits it keeps the server too.
    pub fn share(&self) -> Result<Share> {
        let users = open_lock(&self.users)?;
        // The server takes `users` only under the decision lock, which we
        // hold: this never waits.
        lock(&users, FlockOperation::LockShared, &self.users)?;
        Ok(Share { users })
    }

    /// Takes a share if the server is not on its way out: `None` when a
    /// server holds `users` exclusively (a shared container's anchor of an
    /// earlier berth, which waits for the decision lock with it held: the
    /// caller ends its decision and begins again, so neither waits for the
    /// other).
    pub fn try_share(&self) -> Result<Option<Share>> {
        let users = open_lock(&self.users)?;
        match flock(&users, FlockOperation::NonBlockingLockShared) {
            Ok(()) => Ok(Some(Share { users })),
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
            Err(e) => Err(Error::sys("lock", Some(self.users.clone()), e)),
        }
    }

    /// Whether no client holds a share of the server (nor the server the
    /// users' lock, as it does on its way out).
    pub fn idle(&self) -> Result<bool> {
        let users = open_lock(&self.users)?;
        match flock(&users, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(false),
            Err(e) => Err(Error::sys("lock", Some(self.users.clone()), e)),
        }
    }

    /// Ends the decision (other clients may decide).
    pub fn end(self) {
        drop(self.lock);
    }
}

/// A client's share of a server; dropping it gives the share back.
#[derive(Debug)]
pub struct Share {
    users: File,
}

impl Share {
    /// The descriptor that holds the share (a process that inherits it
    /// keeps the server alive while it lives).
    pub fn as_file(&self) -> &File {
        &self.users
    }
}

/// Why [`serve_until_idle`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// No client for `linger`: the caller holds both locks until it drops
    /// `files`, and should leave.
    Idle,
    /// `alive` said the server can serve no longer.
    Gone,
}

/// The server's side: waits until no client has held a share for
/// `linger`, looking every `poll` (and asking `alive` each time).
pub fn serve_until_idle(
    files: &LeaseFiles,
    linger: Duration,
    poll: Duration,
    mut alive: impl FnMut() -> bool,
) -> Served {
    let mut idle_since: Option<Instant> = None;
    loop {
        std::thread::sleep(poll);
        if !alive() {
            return Served::Gone;
        }
        if flock(&files.decide, FlockOperation::NonBlockingLockExclusive).is_err() {
            continue; // A client is deciding right now.
        }
        if flock(&files.users, FlockOperation::NonBlockingLockExclusive).is_ok() {
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= linger {
                return Served::Idle;
            }
            let _ = flock(&files.users, FlockOperation::Unlock);
        } else {
            idle_since = None;
        }
        let _ = flock(&files.decide, FlockOperation::Unlock);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn own_start_time() {
        let me = std::process::id() as i32;
        let (t, zombie) = proc_start(me).unwrap();
        assert!(t > 0 && !zombie);
    }

    /// A server stays while a client holds a share, leaves `linger` after
    /// the last one went, and a client deciding meanwhile is never left
    /// with a server on its way out.
    #[test]
    fn the_server_leaves_only_when_idle_for_its_linger_time() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().to_path_buf();
        let decision = Deciding::begin(&dir, "lock").unwrap();
        let share = decision.share().unwrap();
        decision.end();
        let left = Arc::new(AtomicBool::new(false));
        let server = {
            let (dir, left) = (dir.clone(), left.clone());
            std::thread::spawn(move || {
                let files = LeaseFiles::open(&dir, "lock").unwrap();
                let t0 = Instant::now();
                let why = serve_until_idle(
                    &files,
                    Duration::from_millis(200),
                    Duration::from_millis(10),
                    || true,
                );
                left.store(true, Ordering::SeqCst);
                // Leaving: the locks stay held until the files go.
                std::thread::sleep(Duration::from_millis(100));
                (why, t0.elapsed())
            })
        };
        std::thread::sleep(Duration::from_millis(300));
        assert!(!left.load(Ordering::SeqCst), "left while a share was held");
        drop(share);
        // A client that decides while the server is leaving waits for it.
        while !left.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let t = Instant::now();
        let again = Deciding::begin(&dir, "lock").unwrap();
        assert!(
            t.elapsed() >= Duration::from_millis(50),
            "joined a leaving server"
        );
        drop(again);
        let (why, took) = server.join().unwrap();
        assert_eq!(why, Served::Idle);
        assert!(took >= Duration::from_millis(500), "{took:?}");
    }

    /// `berth ps` removing a dead container's directory while a client
    /// waits for its decision lock: the client decides under a lock that
    /// is found at its path again, in the directory made anew.
    #[test]
    fn a_decision_survives_its_directory_removed_meanwhile() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("containers").join("k");
        private_dir(&dir).unwrap();
        let path = dir.join("lock");
        let held = open_lock(&path).unwrap();
        flock(&held, FlockOperation::LockExclusive).unwrap();
        let client = {
            let dir = dir.clone();
            std::thread::spawn(move || Deciding::begin(&dir, "lock").map(|d| d.lock))
        };
        std::thread::sleep(Duration::from_millis(100));
        fs::remove_dir_all(&dir).unwrap();
        drop(held);
        let lock = client.join().unwrap().unwrap();
        assert!(still_linked(&lock, &path), "decided under a removed lock");
        // And the lock is the one every later client takes.
        let other = open_lock(&path).unwrap();
        assert_eq!(
            flock(&other, FlockOperation::NonBlockingLockExclusive),
            Err(rustix::io::Errno::WOULDBLOCK)
        );
    }

    /// A server holding `users` exclusively (leaving) is not waited for
    /// under the decision lock: the client is told to look again.
    #[test]
    fn a_share_of_a_leaving_server_is_not_waited_for() {
        let d = tempfile::tempdir().unwrap();
        let files = LeaseFiles::open(d.path(), "lock").unwrap();
        flock(&files.users, FlockOperation::LockExclusive).unwrap();
        let deciding = Deciding::begin(d.path(), "lock").unwrap();
        assert!(deciding.try_share().unwrap().is_none());
        flock(&files.users, FlockOperation::Unlock).unwrap();
        assert!(deciding.try_share().unwrap().is_some());
    }

    #[test]
    fn a_server_whose_work_ended_says_so() {
        let d = tempfile::tempdir().unwrap();
        let files = LeaseFiles::open(d.path(), "keeper.lock").unwrap();
        let mut n = 0;
        let why = serve_until_idle(
            &files,
            Duration::from_secs(60),
            Duration::from_millis(1),
            || {
                n += 1;
                n < 3
            },
        );
        assert_eq!(why, Served::Gone);
    }
}
