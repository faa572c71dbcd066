//! Per-node shared containers (`berth run --shared KEY`, the Slurm plugin's
//! default mode, `berth exec`): the first task with a key builds the
//! container (namespaces, root file system, injected host resources) and
//! starts a *holder*, a process that keeps that container's namespaces
//! alive and does nothing else (see `create` for why it is a fresh
//! `berth __holder`); every task with the same key, the first
//! one included, joins the holder's namespaces with `setns` and `exec`s
//! its command. The tasks of a node then share one user namespace, one
//! mount namespace and one page cache (MPI's shared memory and cross-memory
//! attach work between them), and a join costs about a plain `exec`.
//!
//! Lifetime: each task holds a shared `flock` on the container's
//! `users.lock` while it lives; the holder waits for an exclusive lock on
//! it, so it leaves when the last task has left (a task that crashes drops
//! its share with its descriptors and takes no one else down). Tasks decide
//! to join or create under the container's `lock`, which the holder also
//! takes before it leaves, so no task joins a holder that is going: a task
//! that finds the holder already waiting to leave (its shared lock is
//! refused) lets go and looks again.

use std::fs::{self, File};
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::FlockOperation;
use rustix::thread::LinkNameSpaceType;
use serde::{Deserialize, Serialize};

use crate::container::{self, RunSpec, Timing};
use crate::error::{Error, Result, EXIT_BERTH};
use crate::keeper::{self, IdMode};
use crate::sys::{self, Fork};

/// What a shared container records about itself (`info.json`), for the
/// tasks that join it, `berth ps` and `berth exec`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SharedInfo {
    /// The container's key (its name).
    pub key: String,
    /// The image as the creating task named it.
    pub image: String,
    /// The image id.
    pub image_id: String,
    /// The holder's pid.
    pub pid: i32,
    /// The holder's start time (clock ticks since boot, /proc/PID/stat),
    /// so a recycled pid is never taken for the holder.
    pub start_time: u64,
    /// The keeper whose user namespace the container's was made in.
    pub keeper_pid: i32,
    /// Id mapping ([`IdMode::as_str`]).
    pub mode: String,
    /// What decides the container's file system (image, binds, options):
    /// a task asking for something else is refused rather than given a
    /// container that differs from what it asked for.
    pub fingerprint: String,
    /// Seconds since the epoch at creation.
    pub created: u64,
    /// The creating task's working directory.
    pub workdir: String,
    /// The creating task's environment (`berth exec` starts from it).
    pub env: Vec<(String, String)>,
}

/// A shared container that is alive, as `berth ps` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Listed {
    /// What the container recorded.
    #[serde(flatten)]
    pub info: SharedInfo,
    /// Processes in the container, the holder not counted.
    pub processes: usize,
}

/// What the holder keeps: descriptors opened for it by its creator (its
/// own open file descriptions, so its locks are not its creator's).
struct Hold {
    users: File,
    key_lock: File,
    devnull: File,
    ready: OwnedFd,
    keeper_share: File,
    linger: Duration,
}

/// What the process that builds a shared container keeps: it says when
/// the container is built, then stays (so that its namespaces live) until
/// the holder has joined them and its creator lets it go.
pub(crate) struct Built {
    ready: OwnedFd,
    release: OwnedFd,
}

/// A command to run in an existing shared container.
#[derive(Debug, Clone)]
pub struct Join {
    /// Command line.
    pub argv: Vec<String>,
    /// Environment.
    pub env: Vec<(String, String)>,
    /// Working directory inside.
    pub workdir: String,
    /// See [`RunSpec::argv0_fallback`].
    pub argv0_fallback: bool,
    /// See [`RunSpec::seccomp`].
    pub seccomp: crate::seccomp::Seccomp,
}

/// Whether `key` can name a shared container: 1 to 128 of `A-Za-z0-9._-`,
/// not starting with a dot or a dash.
pub fn validate_key(key: &str) -> Result<()> {
    let ok = !key.is_empty()
        && key.len() <= 128
        && !key.starts_with(['.', '-'])
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "container name {key:?}: use 1 to 128 letters, digits, '.', '_' or '-', not starting with '.' or '-'"
        )))
    }
}

fn containers_dir() -> Result<PathBuf> {
    Ok(keeper::state_dir()?.join("containers"))
}

fn key_dir(key: &str) -> Result<PathBuf> {
    validate_key(key)?;
    let dir = containers_dir()?.join(key);
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| Error::io("create", &dir, e))?;
    Ok(dir)
}

/// A process's start time and whether it is a zombie, from /proc/PID/stat.
fn proc_start(pid: i32) -> Option<(u64, bool)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields follow the
    // last ')'. Field 3 is the state, field 22 the start time.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let zombie = matches!(fields.first(), Some(&"Z") | Some(&"X"));
    Some((fields.get(19)?.parse().ok()?, zombie))
}

fn holder_alive(info: &SharedInfo) -> bool {
    proc_start(info.pid).is_some_and(|(t, zombie)| t == info.start_time && !zombie)
}

/// The container's record, if its holder is alive.
fn read_alive(dir: &Path) -> Option<SharedInfo> {
    let text = crate::state::read(&dir.join("info.json")).ok()?;
    let info: SharedInfo = serde_json::from_str(&text).ok()?;
    holder_alive(&info).then_some(info)
}

fn fingerprint(spec: &RunSpec) -> String {
    serde_json::json!({
        "image": spec.image_id,
        "binds": spec.binds,
        "writable": spec.writable,
        "mode": spec.mode.as_str(),
        "net_none": spec.net_none,
    })
    .to_string()
}

/// Runs `spec`'s command in the shared container `key`, creating the
/// container if no live one has that key. Returns the command's exit code.
/// `linger`: how long the container stays after its last task left (a
/// task that comes in that time joins it).
pub fn run_shared(spec: &RunSpec, key: &str, image_name: &str, linger: Duration) -> Result<i32> {
    if spec.pid_ns {
        return Err(Error::Usage(
            "--pid cannot be combined with a shared container (its tasks join one container; they keep the host's PID namespace)".into(),
        ));
    }
    let dir = key_dir(key)?;
    let wanted = fingerprint(spec);
    let lock_path = dir.join("lock");
    let users_path = dir.join("users.lock");
    loop {
        let key_lock = keeper::open_lock(&lock_path)?;
        keeper::lock(&key_lock, FlockOperation::LockExclusive, &lock_path)?;
        let users = keeper::open_lock(&users_path)?;
        let info = match read_alive(&dir) {
            Some(info) => {
                if info.fingerprint != wanted {
                    return Err(Error::Usage(format!(
                        "shared container {key} already runs {} with other options (binds, --writable, --fakeroot or the image differ); use another key, or the same options",
                        info.image
                    )));
                }
                if rustix::fs::flock(&users, FlockOperation::NonBlockingLockShared).is_err() {
                    // Its holder is leaving (it holds the exclusive lock and
                    // waits for ours): let it go, then look again.
                    drop(key_lock);
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                info
            }
            None => {
                keeper::lock(&users, FlockOperation::LockShared, &users_path)?;
                create(spec, &dir, key, image_name, wanted.clone(), linger)?
            }
        };
        drop(key_lock);
        // A joining task starts no keeper: it must not keep the other
        // ranks of the node waiting on its start-up lock while it runs
        // (they would wait for a rank that waits for them: found by the
        // 3-node MPI test).
        container::release_startup_lock(spec);
        let job = Join {
            argv: spec.argv.clone(),
            env: spec.env.clone(),
            workdir: spec.workdir.clone(),
            argv0_fallback: spec.argv0_fallback,
            seccomp: spec.seccomp.clone(),
        };
        return join(&info, &job, users);
    }
}

/// Runs `job` in the live shared container `key` (`berth exec`).
pub fn exec(key: &str, job: &Join) -> Result<i32> {
    validate_key(key)?;
    let dir = containers_dir()?.join(key);
    let missing = || {
        Error::Usage(format!(
            "no shared container {key} on this node (berth ps lists them; they go away with their last task)"
        ))
    };
    if !dir.is_dir() {
        return Err(missing());
    }
    let lock_path = dir.join("lock");
    let users_path = dir.join("users.lock");
    loop {
        let key_lock = keeper::open_lock(&lock_path)?;
        keeper::lock(&key_lock, FlockOperation::LockExclusive, &lock_path)?;
        let info = read_alive(&dir).ok_or_else(missing)?;
        let users = keeper::open_lock(&users_path)?;
        if rustix::fs::flock(&users, FlockOperation::NonBlockingLockShared).is_err() {
            drop(key_lock);
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        drop(key_lock);
        return join(&info, job, users);
    }
}

/// The record of the live shared container `key`.
pub fn lookup(key: &str) -> Result<Option<SharedInfo>> {
    validate_key(key)?;
    Ok(read_alive(&containers_dir()?.join(key)))
}

/// The caller's live shared containers on this node, by key; records of
/// dead ones are removed.
pub fn list() -> Result<Vec<Listed>> {
    let dir = containers_dir()?;
    let Ok(entries) = fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        match read_alive(&path) {
            Some(info) => {
                let processes = processes_in(info.pid);
                out.push(Listed { info, processes });
            }
            None => {
                // Remove a dead container's directory, unless a task is
                // deciding under its lock right now.
                if let Ok(lock) = File::open(path.join("lock")) {
                    if rustix::fs::flock(&lock, FlockOperation::NonBlockingLockExclusive).is_ok() {
                        let _ = fs::remove_dir_all(&path);
                    }
                }
            }
        }
    }
    out.sort_by(|a, b| a.info.key.cmp(&b.info.key));
    Ok(out)
}

/// How many of the caller's processes share the holder's mount namespace.
fn processes_in(holder: i32) -> usize {
    let Ok(ns) = fs::read_link(format!("/proc/{holder}/ns/mnt")) else {
        return 0;
    };
    let Ok(procs) = fs::read_dir("/proc") else {
        return 0;
    };
    procs
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid != holder)
        .filter(|pid| fs::read_link(format!("/proc/{pid}/ns/mnt")).is_ok_and(|l| l == ns))
        .count()
}

/// Builds the container and starts its holder; returns its record, written
/// to `info.json`. The caller holds the key's lock and a share of it.
///
/// A forked child builds the container (as a run's does), then a fresh
/// `berth __holder` joins its namespaces and takes over: executed in the
/// keeper's user namespace, the holder's memory belongs to that namespace,
/// so once it is not dumpable the container's processes (no capabilities
/// there) can neither trace it nor open its `/proc` files, while the
/// user's runs outside still join it.
fn create(
    spec: &RunSpec,
    dir: &Path,
    key: &str,
    image_name: &str,
    fingerprint: String,
    linger: Duration,
) -> Result<SharedInfo> {
    let lease = container::lease_for(spec)?;
    let pipe = || rustix::pipe::pipe().map_err(|e| Error::Setup(format!("pipe: {e}")));
    let (ready_read, ready_write) = pipe()?;
    let (release_read, release_write) = pipe()?;
    let built = Built {
        ready: ready_write,
        release: release_read,
    };
    let sync = if spec.hooks.is_empty() {
        None
    } else {
        Some(crate::hooks::Sync::new().map_err(|e| Error::Setup(format!("pipe: {e}")))?)
    };
    let builder = match sys::fork().map_err(|e| Error::Setup(format!("fork: {e}")))? {
        Fork::Child => {
            drop(ready_read);
            drop(release_write);
            let code = match container::child(spec, &lease, Timing::off(), sync, Some(built)) {
                Ok(never) => match never {},
                Err(e) => {
                    eprintln!("berth: error: shared container {key}: {e}");
                    EXIT_BERTH
                }
            };
            sys::exit_now(code)
        }
        Fork::Parent(pid) => pid,
    };
    drop(built);
    if let Some(sync) = sync {
        if let Err(msg) = container::hooks_before_start(spec, sync.parent_side()) {
            sys::kill(builder, libc::SIGKILL);
            let _ = sys::wait(builder, false);
            return Err(Error::Setup(msg));
        }
    }
    let ready = read_ready(ready_read);
    let holder = if ready {
        start_holder(spec, dir, &lease, builder, linger)
    } else {
        Err(Error::Setup(format!(
            "shared container {key} could not be set up (the reason is above)"
        )))
    };
    // The holder has joined (or failed): the builder may go.
    drop(release_write);
    let _ = sys::wait(builder, false);
    let pid = holder?;
    let start_time = proc_start(pid)
        .map(|(t, _)| t)
        .ok_or_else(|| Error::Setup(format!("shared container {key}: its holder vanished")))?;
    let info = SharedInfo {
        key: key.to_string(),
        image: image_name.to_string(),
        image_id: spec.image_id.clone(),
        pid,
        start_time,
        keeper_pid: lease.pid,
        mode: spec.mode.as_str().to_string(),
        fingerprint,
        created: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        workdir: spec.workdir.clone(),
        env: spec.env.clone(),
    };
    let path = dir.join("info.json");
    let json = serde_json::to_vec(&info).map_err(|e| Error::Setup(e.to_string()))?;
    crate::state::write(&path, &json).map_err(|e| Error::io("write", &path, e))?;
    // The holder keeps its own share of the keeper (inherited descriptor).
    drop(lease);
    Ok(info)
}

/// True once the other end wrote its ready byte (false: it ended first).
fn read_ready(pipe: OwnedFd) -> bool {
    let mut byte = [0u8; 1];
    File::from(pipe).read(&mut byte).unwrap_or(0) == 1
}

/// In the builder, the container built: say so, then wait until the
/// creator lets go (the holder has joined), and leave.
pub(crate) fn built(built: Built) -> ! {
    let _ = rustix::io::write(&built.ready, b"r");
    drop(built.ready);
    let mut byte = [0u8; 1];
    let _ = rustix::io::read(&built.release, &mut byte);
    sys::exit_now(0)
}

/// Starts `berth __holder` in the keeper's user namespace with the
/// descriptors it keeps and the builder's namespaces to join; returns its
/// pid once it is in the container.
fn start_holder(
    spec: &RunSpec,
    dir: &Path,
    lease: &keeper::KeeperLease,
    builder: i32,
    linger: Duration,
) -> Result<i32> {
    use std::os::unix::process::CommandExt;
    let users = keeper::open_lock(&dir.join("users.lock"))?;
    let key_lock = keeper::open_lock(&dir.join("lock"))?;
    let devnull = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(|e| Error::io("open", "/dev/null", e))?;
    let mntns = keeper::open_ns(builder, "mnt")?;
    let userns = match spec.mode {
        IdMode::Identity | IdMode::FakeRoot => Some(keeper::open_ns(builder, "user")?),
        IdMode::HostRoot => None,
    };
    let (ready_read, ready_write) =
        rustix::pipe::pipe().map_err(|e| Error::Setup(format!("pipe: {e}")))?;
    let fd = |f: &dyn AsRawFd| f.as_raw_fd().to_string();
    let args = [
        fd(&users),
        fd(&key_lock),
        fd(&devnull),
        fd(&ready_write),
        fd(&mntns),
        userns.as_ref().map_or("-".into(), |ns| fd(ns)),
        lease.share_fd().to_string(),
        linger.as_millis().to_string(),
    ];
    match sys::fork().map_err(|e| Error::Setup(format!("fork: {e}")))? {
        Fork::Child => {
            drop(ready_read);
            if let Some(ns) = &lease.userns {
                if let Err(e) = rustix::thread::move_into_link_name_space(
                    ns.as_fd(),
                    Some(LinkNameSpaceType::User),
                ) {
                    eprintln!("berth: error: holder: join the keeper's user namespace: {e}");
                    sys::exit_now(EXIT_BERTH);
                }
            }
            let share = lease.share();
            let handed: [&dyn AsFd; 6] =
                [&users, &key_lock, &devnull, &ready_write, &mntns, &share];
            for f in handed
                .iter()
                .copied()
                .chain(userns.as_ref().map(|ns| ns as &dyn AsFd))
            {
                let _ = rustix::io::fcntl_setfd(f.as_fd(), rustix::io::FdFlags::empty());
            }
            let err = std::process::Command::new("/proc/self/exe")
                .arg0("berth")
                .arg("__holder")
                .args(&args)
                .exec();
            eprintln!("berth: error: cannot start the shared container's holder: {err}");
            sys::exit_now(EXIT_BERTH)
        }
        Fork::Parent(pid) => {
            drop(ready_write);
            if read_ready(ready_read) {
                Ok(pid)
            } else {
                let _ = sys::wait(pid, false);
                Err(Error::Setup(
                    "the shared container's holder could not start (the reason is above)".into(),
                ))
            }
        }
    }
}

/// `berth __holder USERS KEY_LOCK DEVNULL READY MNTNS USERNS SHARE LINGER_MS`:
/// a shared container's holder, started by [`start_holder`]. Joins the
/// container and holds it; the exit code is berth's on a set-up failure.
pub fn holder_main(args: &[String]) -> i32 {
    match holder_run(args) {
        Ok(never) => match never {},
        Err(e) => {
            eprintln!("berth: error: shared container holder: {e}");
            EXIT_BERTH
        }
    }
}

fn holder_run(args: &[String]) -> Result<std::convert::Infallible> {
    let [users, key_lock, devnull, ready, mntns, userns, share, linger] = args else {
        return Err(Error::Setup(
            "usage: berth __holder USERS KEY_LOCK DEVNULL READY MNTNS USERNS SHARE LINGER_MS"
                .into(),
        ));
    };
    let take = |s: &String| {
        s.parse()
            .ok()
            .and_then(sys::take_inherited_fd)
            .ok_or_else(|| Error::Setup(format!("no inherited descriptor {s:?}")))
    };
    let holding = Hold {
        users: take(users)?,
        key_lock: take(key_lock)?,
        devnull: take(devnull)?,
        ready: take(ready)?.into(),
        keeper_share: take(share)?,
        linger: Duration::from_millis(
            linger
                .parse()
                .map_err(|_| Error::Setup(format!("bad linger {linger:?}")))?,
        ),
    };
    let mntns = take(mntns)?;
    rustix::thread::move_into_link_name_space(mntns.as_fd(), Some(LinkNameSpaceType::Mount))
        .map_err(|e| Error::Namespace(format!("join the container's mount namespace: {e}")))?;
    drop(mntns);
    if userns != "-" {
        let ns = take(userns)?;
        rustix::thread::move_into_link_name_space(ns.as_fd(), Some(LinkNameSpaceType::User))
            .map_err(|e| Error::Namespace(format!("join the container's user namespace: {e}")))?;
    }
    let _ = std::env::set_current_dir("/");
    hold(holding)
}

/// The holder's life, in the container it just built: tell the creator it
/// is ready, then wait until no task uses the container, and leave under
/// the key's lock (with its record) so that no task joins it on its way
/// out.
fn hold(hold: Hold) -> ! {
    // Its own session: a terminal's Ctrl-C for the creating task does not
    // end the container of the others.
    let _ = rustix::process::setsid();
    // berth blocked the signals it forwards; the holder takes the defaults
    // (the job epilog ends a named container with a signal).
    sys::reset_signals();
    // No task's output pipe stays open in the holder (srun waits for
    // those to close).
    let _ = rustix::stdio::dup2_stdin(&hold.devnull);
    let _ = rustix::stdio::dup2_stdout(&hold.devnull);
    let _ = rustix::stdio::dup2_stderr(&hold.devnull);
    let keep = [
        hold.users.as_raw_fd(),
        hold.key_lock.as_raw_fd(),
        hold.ready.as_raw_fd(),
        // Its share of the keeper: the image mount stays while it lives.
        hold.keeper_share.as_raw_fd(),
    ];
    sys::close_inherited(&keep);
    // The holder needs no capability to wait on locks: it drops those it
    // had to join the container, and turns not dumpable (its memory is
    // the keeper's namespace's: see `create`).
    let none = rustix::thread::CapabilitySet::empty();
    let _ = rustix::thread::set_capabilities(
        None,
        rustix::thread::CapabilitySets {
            effective: none,
            permitted: none,
            inheritable: none,
        },
    );
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
    // Ready: tell the creator, then wait until no task uses the container
    // (and `linger` more), and leave under the key's lock.
    let _ = rustix::io::write(&hold.ready, b"r");
    drop(hold.ready);
    loop {
        let _ = rustix::fs::flock(&hold.users, FlockOperation::LockExclusive);
        if hold.linger.is_zero() || !linger(&hold.users, hold.linger) {
            break;
        }
    }
    let _ = rustix::fs::flock(&hold.key_lock, FlockOperation::LockExclusive);
    // The record is outside this mount namespace; the next task sees the
    // holder gone (its pid dead) and the record is replaced then.
    sys::exit_now(0)
}

/// With no task left (the caller holds `users` exclusively): wait up to
/// `linger` for one to come. Lets go of the lock while it waits and looks
/// every 100 ms; true if a task came (the caller waits for it to leave),
/// false with the lock held again when the time is up.
fn linger(users: &File, linger: Duration) -> bool {
    let deadline = std::time::Instant::now() + linger;
    loop {
        let _ = rustix::fs::flock(users, FlockOperation::Unlock);
        std::thread::sleep(Duration::from_millis(100));
        if rustix::fs::flock(users, FlockOperation::NonBlockingLockExclusive).is_err() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
    }
}

/// Joins the holder's namespaces in a forked child and `exec`s `job`;
/// the parent forwards signals and returns the exit code. `users` is the
/// caller's share of the container, held until the command ends.
fn join(info: &SharedInfo, job: &Join, users: File) -> Result<i32> {
    let mode = IdMode::parse(&info.mode).unwrap_or(IdMode::Identity);
    // Pinned first: checked below, once their namespaces are open.
    let holder = keeper::Pinned::new(info.pid);
    let keeper_pinned = keeper::Pinned::new(info.keeper_pid);
    let keeper_userns = match mode {
        IdMode::HostRoot => None,
        IdMode::Identity | IdMode::FakeRoot => Some(keeper::open_ns(info.keeper_pid, "user")?),
    };
    let mntns = keeper::open_ns(info.pid, "mnt")?;
    let inner_userns = match mode {
        IdMode::Identity | IdMode::FakeRoot => Some(keeper::open_ns(info.pid, "user")?),
        IdMode::HostRoot => None,
    };
    // The pid could have been recycled between reading the record and
    // opening its namespaces: check it is still the holder.
    let pinned_run = |p: &Option<keeper::Pinned>| p.as_ref().is_some_and(|p| p.still_runs());
    if !holder_alive(info) || !pinned_run(&holder) || !pinned_run(&keeper_pinned) {
        return Err(Error::Setup(format!(
            "shared container {} ended while this task was joining it; start the task again",
            info.key
        )));
    }
    let set = container::watched_signals();
    sys::mask(&set, true).map_err(|e| Error::Setup(format!("sigprocmask: {e}")))?;
    match sys::fork().map_err(|e| Error::Setup(format!("fork: {e}")))? {
        Fork::Child => {
            let code = match enter_and_exec(mode, keeper_userns, mntns, inner_userns, job) {
                Ok(never) => match never {},
                Err(e) => {
                    eprintln!("berth: error: {e}");
                    EXIT_BERTH
                }
            };
            sys::exit_now(code)
        }
        Fork::Parent(pid) => {
            let _ = rustix::process::set_dumpable_behavior(
                rustix::process::DumpableBehavior::NotDumpable,
            );
            let exit = container::supervise(pid, &set);
            drop(users);
            Ok(exit.as_code())
        }
    }
}

fn enter_and_exec(
    mode: IdMode,
    keeper_userns: Option<OwnedFd>,
    mntns: OwnedFd,
    inner_userns: Option<OwnedFd>,
    job: &Join,
) -> Result<std::convert::Infallible> {
    // The keeper's user namespace first: the container's mount namespace
    // belongs to it, and joining one needs CAP_SYS_ADMIN there.
    if let Some(ns) = &keeper_userns {
        rustix::thread::move_into_link_name_space(ns.as_fd(), Some(LinkNameSpaceType::User))
            .map_err(|e| Error::Namespace(format!("join the keeper's user namespace: {e}")))?;
    }
    rustix::thread::move_into_link_name_space(mntns.as_fd(), Some(LinkNameSpaceType::Mount))
        .map_err(|e| Error::Namespace(format!("join the container's mount namespace: {e}")))?;
    if let Some(ns) = &inner_userns {
        rustix::thread::move_into_link_name_space(ns.as_fd(), Some(LinkNameSpaceType::User))
            .map_err(|e| Error::Namespace(format!("join the container's user namespace: {e}")))?;
    }
    if mode == IdMode::HostRoot {
        sys::restrict_bounding_set(sys::ROOT_KEEPS)
            .map_err(|e| Error::Setup(format!("drop capabilities: {e}")))?;
    }
    std::env::set_current_dir(&job.workdir).map_err(|e| {
        Error::Setup(format!(
            "working directory {:?} is not in the shared container: {e} (tasks of one container share its binds; start them from the same directory)",
            job.workdir
        ))
    })?;
    rustix::thread::set_no_new_privs(true)
        .map_err(|e| Error::Setup(format!("no_new_privs: {e}")))?;
    let program =
        container::resolve_or_exit(&job.argv[0], &job.env, &job.workdir, job.argv0_fallback);
    container::exec_command(
        &program,
        &job.argv,
        &job.env,
        &job.seccomp,
        container::Timing::off(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        for ok in ["a", "job-12.3", "slurm-7_0", "X.y-z"] {
            assert!(validate_key(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".hidden", "-x", "a/b", "..", "a b", &"k".repeat(129)] {
            assert!(validate_key(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn own_start_time() {
        let me = std::process::id() as i32;
        let (t, zombie) = proc_start(me).unwrap();
        assert!(t > 0 && !zombie);
    }
}
