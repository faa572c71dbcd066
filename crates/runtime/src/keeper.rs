//! The image keeper: one process per (user, image, id mapping) on a node
//! that holds a user namespace and a mount namespace in which the image's
//! squashfs file is mounted read-only, served by `squashfuse_ll` (rootless)
//! or a kernel loop mount (real root).
//!
//! A mount made afresh for every start costs about 25 ms plus cold
//! decompression (../shared/notes: 28 to 33 ms for `true`, 108 to 133 ms for
//! `python3 -c pass`); a mount that stays alive keeps its page cache and
//! dentries. Runs join the keeper's namespaces with `setns` and make their
//! own mount namespace from it, so `pivot_root` never moves the FUSE server.
//!
//! Lifetime: each run holds a shared `flock` on `users.lock` for as long as
//! it lives; the keeper exits after `idle` seconds without users. Both sides
//! decide under `keeper.lock`, so a run never joins a keeper that is leaving.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rustix::fs::{flock, FlockOperation};

use crate::error::{Error, Result};
use crate::{state, sys};

/// How container user ids map to the caller's.
///
/// The keeper's user namespace always maps the caller to root (0 -> U):
/// setting up the container needs root's powers over the image's
/// root-owned directories (creating mount points in them), which a user
/// namespace grants only for mapped owners. An `Identity` container then
/// enters a nested user namespace that maps the caller back to themself
/// (U -> 0 -> U) just before `exec`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdMode {
    /// The caller is themself inside.
    Identity,
    /// The caller is root inside (uid 0 maps to U), one id only.
    FakeRoot,
    /// The caller is real root: no user namespace.
    HostRoot,
}

impl IdMode {
    /// The keeper serving this mode. Identity and fakeroot runs never
    /// share one: a fakeroot container is root in its own nested user
    /// namespace, and keeping its prepared root (and the upper layer it
    /// writes) apart from identity runs' is what keeps it out of theirs.
    fn keeper_kind(self) -> &'static str {
        match self {
            IdMode::Identity => "user",
            IdMode::FakeRoot => "fakeroot",
            IdMode::HostRoot => "root",
        }
    }

    /// The mode's name (`identity`, `fakeroot`, `root`).
    pub fn as_str(self) -> &'static str {
        match self {
            IdMode::Identity => "identity",
            IdMode::FakeRoot => "fakeroot",
            IdMode::HostRoot => "root",
        }
    }

    /// The mode named `s` ([`IdMode::as_str`]).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "identity" => Some(IdMode::Identity),
            "fakeroot" => Some(IdMode::FakeRoot),
            "root" => Some(IdMode::HostRoot),
            _ => None,
        }
    }
}

/// Real root's runtime directory.
pub const ROOT_STATE_DIR: &str = "/run/berth";

/// berth's per-user runtime directory on this node: `$XDG_RUNTIME_DIR/berth`
/// or `/tmp/berth-UID` (root: [`ROOT_STATE_DIR`]), created 0700 and
/// refused if someone else owns it.
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
fn adopt_state_dir(keeper_dir: &Path) {
    if let Some(d) = keeper_dir.parent().and_then(Path::parent) {
        let _ = STATE_DIR.set(d.to_path_buf());
    }
}

fn find_state_dir() -> Result<PathBuf> {
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
    use std::os::unix::fs::MetadataExt;
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
    Ok(dir)
}

/// A live keeper a run is using; dropping it releases the run's share.
pub struct KeeperLease {
    /// The keeper's directory (its tmpfs is mounted at `mnt/` inside its namespace).
    pub dir: PathBuf,
    /// The keeper's pid.
    pub pid: i32,
    /// `/proc/PID/ns/user`, when the keeper has a user namespace.
    pub userns: Option<OwnedFd>,
    /// `/proc/PID/ns/mnt`.
    pub mntns: OwnedFd,
    /// The mount namespace of the keeper's prepared root, when it was
    /// prepared for the same [`Template`] as this run's.
    pub template_mntns: Option<OwnedFd>,
    /// The user namespace nested in the keeper's that every run of the
    /// keeper joins just before `exec`: in identity mode the caller's own
    /// ids inside, in fakeroot mode root and the subordinate ids (mapped
    /// to the keeper's same ids). One namespace for all ranks of a node, so
    /// MPI's shared-memory and cross-memory-attach transports (which open
    /// /proc/PID/fd of a peer, or ptrace-read it) work between containers;
    /// and none of them holds a capability in the keeper's namespace, so a
    /// container cannot enter, trace or remount what the keeper holds.
    pub nested_userns: Option<OwnedFd>,
    _users: File,
}

/// What a keeper prepares once so that runs need not: the root file system
/// with the binds and identity files every default run of this user has.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Template {
    /// Binds common to the user's runs (site binds, home, /tmp).
    pub binds: Vec<crate::rootfs::Bind>,
    /// `/etc/passwd` line.
    pub passwd_line: Option<String>,
    /// `/etc/group` line.
    pub group_line: Option<String>,
}

impl KeeperLease {
    /// Where the image is mounted, as seen inside the keeper's namespace.
    pub fn image_mount(&self) -> PathBuf {
        self.dir.join("mnt/image")
    }

    /// The descriptor that holds this lease's share of the keeper (a
    /// process that inherits it keeps the keeper alive while it lives).
    pub(crate) fn share_fd(&self) -> i32 {
        self._users.as_raw_fd()
    }

    /// This run's share of the keeper, to hand to a helper that must keep
    /// the keeper (and its image mount) alive.
    pub(crate) fn share(&self) -> std::os::fd::BorrowedFd<'_> {
        self._users.as_fd()
    }

    /// A scratch mount point for a run's own tmpfs.
    pub fn stage(&self) -> PathBuf {
        self.dir.join("mnt/stage")
    }
}

pub(crate) fn open_lock(path: &Path) -> Result<File> {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io("open", path, e))
}

pub(crate) fn lock(f: &File, op: FlockOperation, path: &Path) -> Result<()> {
    flock(f, op).map_err(|e| Error::io("lock", path, e.into()))
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

    /// Whether the pinned process has not exited (a pidfd turns readable
    /// when it does).
    pub(crate) fn still_runs(&self) -> bool {
        use rustix::event::{poll, PollFd, PollFlags};
        let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
        matches!(
            poll(&mut fds, Some(&rustix::event::Timespec::default())),
            Ok(0)
        )
    }
}

/// The helper in a helper's pid file (`holder.pid`, `identity.pid`) if it
/// names a child of `keeper` (the keeper forks its helpers), so a pid
/// planted there cannot make a run join some other process's namespaces.
fn helper_of(file: &Path, keeper: i32) -> Option<Pinned> {
    let pid: i32 = state::read(file).ok()?.trim().parse().ok()?;
    let pinned = Pinned::new(pid)?;
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let ppid: i32 = status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))?
        .trim()
        .parse()
        .ok()?;
    (ppid == keeper).then_some(pinned)
}

/// A namespace of a helper (`helper_of`), opened while the helper still
/// runs.
fn helper_ns(helper: Option<Pinned>, kind: &str) -> Option<OwnedFd> {
    let helper = helper?;
    let ns = open_ns(helper.pid(), kind).ok()?;
    helper.still_runs().then_some(ns)
}

/// The keeper of `dir`, if its pid file names a live one: a process
/// running this very berth binary (same device and inode: a process that
/// only calls itself `__keeper` is not one) with `__keeper DIR` as its
/// first arguments.
fn keeper_alive(dir: &Path) -> Option<Pinned> {
    use std::os::unix::fs::MetadataExt;
    let pid: i32 = state::read(&dir.join("pid")).ok()?.trim().parse().ok()?;
    let pinned = Pinned::new(pid)?;
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let mut args = cmdline.split(|b| *b == 0).skip(1);
    let ours = args.next() == Some(b"__keeper".as_slice())
        && args.next() == Some(dir.as_os_str().as_encoded_bytes());
    let exe = fs::metadata(format!("/proc/{pid}/exe")).ok()?;
    let me = fs::metadata("/proc/self/exe").ok()?;
    (ours && (exe.dev(), exe.ino()) == (me.dev(), me.ino())).then_some(pinned)
}

pub(crate) fn open_ns(pid: i32, kind: &str) -> Result<OwnedFd> {
    let p = format!("/proc/{pid}/ns/{kind}");
    let f = File::open(&p).map_err(|e| Error::io("open", &p, e))?;
    Ok(f.into())
}

/// The keeper directory's name for image `hex` in `mode`. Under Slurm each
/// job has its own keepers: a keeper lives in the cgroup of the job that
/// started it, so a later job of the same user that shared it would lose
/// its image mount when the first job ends and Slurm kills that cgroup.
fn keeper_name(hex: &str, mode: IdMode, slurm_job: Option<&str>) -> String {
    match slurm_job.filter(|j| !j.is_empty() && j.bytes().all(|b| b.is_ascii_digit())) {
        Some(job) => format!("{hex}-{}-job{job}", mode.keeper_kind()),
        None => format!("{hex}-{}", mode.keeper_kind()),
    }
}

/// Finds or starts the keeper of `image` for `mode` and takes a share in it.
/// `berth_exe` is the binary to start it with (`berth __keeper ...`).
pub fn acquire(
    berth_exe: &Path,
    image: &Path,
    image_id: &str,
    mode: IdMode,
    idle: Duration,
    template: Option<&Template>,
    image_file: Option<&File>,
) -> Result<KeeperLease> {
    // The whole id: two images never share a keeper.
    let hex = image_id.trim_start_matches("sha256:");
    if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::Setup(format!("{image_id:?} is not an image id")));
    }
    let dir = state_dir()?.join("keepers").join(keeper_name(
        hex,
        mode,
        std::env::var("SLURM_JOB_ID").ok().as_deref(),
    ));
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir.join("mnt"))
        .map_err(|e| Error::io("create", &dir, e))?;
    let keeper_lock_path = dir.join("keeper.lock");
    let keeper_lock = open_lock(&keeper_lock_path)?;
    lock(
        &keeper_lock,
        FlockOperation::LockExclusive,
        &keeper_lock_path,
    )?;
    let wanted = template.and_then(|t| serde_json::to_string(t).ok());
    let keeper = match keeper_alive(&dir) {
        Some(pinned) => pinned,
        None => {
            // The keeper prepares the root for the template of the run that
            // starts it.
            let path = dir.join("template.json");
            match &wanted {
                Some(json) => state::write(&path, json.as_bytes())
                    .map_err(|e| Error::io("write", &path, e))?,
                None => {
                    let _ = fs::remove_file(&path);
                }
            }
            let pid = start(berth_exe, &dir, image, image_file, mode, idle)?;
            Pinned::new(pid).ok_or_else(|| {
                Error::Setup(format!(
                    "the keeper (pid {pid}) ended at once; its log: {}",
                    dir.join("keeper.log").display()
                ))
            })?
        }
    };
    let pid = keeper.pid();
    let template_mntns = match (&wanted, state::read(&dir.join("template.json"))) {
        (Some(w), Ok(have)) if *w == have => {
            helper_ns(helper_of(&dir.join("holder.pid"), pid), "mnt")
        }
        _ => None,
    };
    let users_path = dir.join("users.lock");
    let users = open_lock(&users_path)?;
    lock(&users, FlockOperation::LockShared, &users_path)?;
    let userns = match mode {
        IdMode::HostRoot => None,
        IdMode::Identity | IdMode::FakeRoot => Some(open_ns(pid, "user")?),
    };
    let mntns = open_ns(pid, "mnt")?;
    let nested_userns = match mode {
        IdMode::Identity | IdMode::FakeRoot => {
            helper_ns(helper_of(&dir.join("identity.pid"), pid), "user")
        }
        IdMode::HostRoot => None,
    };
    // Everything above was opened by pid: it is the keeper's only if the
    // keeper still runs (else the pid may name another process by now).
    if !keeper.still_runs() {
        return Err(Error::Setup(format!(
            "the keeper of {} ended while this run was joining it; run again",
            dir.display()
        )));
    }
    drop(keeper_lock);
    Ok(KeeperLease {
        dir,
        pid,
        userns,
        mntns,
        template_mntns,
        nested_userns,
        _users: users,
    })
}

fn start(
    berth_exe: &Path,
    dir: &Path,
    image: &Path,
    image_file: Option<&File>,
    mode: IdMode,
    idle: Duration,
) -> Result<i32> {
    let log_path = dir.join("keeper.log");
    let log = state::create_fresh(&log_path).map_err(|e| Error::io("create", &log_path, e))?;
    // An already open image goes to the keeper as /dev/fd/N: reopening it
    // through that link costs no path walk on a parallel filesystem. The
    // descriptor is inheritable only while the keeper starts.
    let image_arg = match image_file {
        Some(f) if rustix::io::fcntl_setfd(f, rustix::io::FdFlags::empty()).is_ok() => {
            PathBuf::from(format!("fd:{}", f.as_raw_fd()))
        }
        _ => image.to_path_buf(),
    };
    let spawned = Command::new(berth_exe)
        .arg("__keeper")
        .arg(dir)
        .arg(&image_arg)
        .arg(mode.as_str())
        .arg(idle.as_secs().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .env_remove("BERTH_TIMING")
        .spawn();
    if let Some(f) = image_file {
        // Never into the container: close-on-exec again.
        let _ = rustix::io::fcntl_setfd(f, rustix::io::FdFlags::CLOEXEC);
    }
    let mut child = spawned.map_err(|e| Error::io("start the image keeper", berth_exe, e))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| Error::Setup("keeper has no stdout".into()))?;
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .map_err(|e| Error::io("read from the keeper", dir, e))?;
    if let Some(pid) = line.trim().strip_prefix("ready ") {
        // The keeper detaches (setsid) and outlives this run: leave it be.
        drop(child);
        return pid
            .parse()
            .map_err(|_| Error::Setup(format!("keeper said {line:?}")));
    }
    let _ = child.wait();
    // The keeper opened the image by path: if it is not there (any more),
    // say so plainly, so that a caller holding a stale record can retry.
    if image_arg == image
        && fs::symlink_metadata(image).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
    {
        return Err(Error::ImageMissing(image.to_path_buf()));
    }
    let log = state::read(&log_path).unwrap_or_default();
    let msg = log
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no message")
        .to_string();
    Err(Error::Mount(
        msg.trim_start_matches("berth: error: ").to_string(),
    ))
}

/// Enters a new user namespace (unless `HostRoot`), mapping the caller to
/// root, and a new mount namespace. Returns the (uid, gid) seen inside.
pub fn enter_namespaces(mode: IdMode) -> Result<(u32, u32)> {
    use rustix::thread::UnshareFlags;
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    match mode {
        IdMode::HostRoot => {
            sys::unshare(UnshareFlags::NEWNS)
                .map_err(|e| Error::Namespace(format!("unshare(mount): {e}")))?;
            // Mounts made here must not propagate back to the host.
            sys::make_rslave()
                .map_err(|e| Error::Namespace(format!("make / a slave mount: {e}")))?;
            Ok((uid, gid))
        }
        IdMode::Identity | IdMode::FakeRoot => {
            // With a subordinate id range (/etc/subuid, /etc/subgid) the
            // setuid helpers newuidmap/newgidmap map the caller to root and
            // the range to 1..N, so image files of other owners keep their
            // owners (apt-get and dpkg can chown under --fakeroot --writable).
            // They run from outside the namespace, once it exists.
            let ranges = subid_ranges(uid, gid);
            let helper = match &ranges {
                Some((u, g)) => spawn_map_helper(uid, gid, *u, *g),
                None => None,
            };
            sys::unshare(UnshareFlags::NEWUSER | UnshareFlags::NEWNS).map_err(|e| {
                Error::Namespace(format!(
                    "cannot create a user namespace ({e}); unprivileged user namespaces may be disabled: \
                     ask your admin to set kernel.unprivileged_userns_clone=1 / user.max_user_namespaces > 0"
                ))
            })?;
            if let Some(helper) = helper {
                match finish_map_helper(helper) {
                    Ok(()) => return Ok((0, 0)),
                    Err(e) => {
                        tracing::warn!("newuidmap/newgidmap failed ({e}); mapping your ids only")
                    }
                }
            }
            sys::write_id_maps(&format!("0 {uid} 1"), &format!("0 {gid} 1"))
                .map_err(|e| Error::Namespace(format!("cannot write the id maps: {e}")))?;
            Ok((0, 0))
        }
    }
}

/// The caller's subordinate uid and gid ranges `(start, count)`, when both
/// files grant one and the helpers exist.
fn subid_ranges(uid: u32, gid: u32) -> Option<((u32, u32), (u32, u32))> {
    if std::env::var_os("BERTH_NO_SUBIDS").is_some() {
        return None;
    }
    let name = sys::getpwuid(uid).map(|p| p.name);
    let group_owner = name.clone();
    let find = |file: &str, id: u32, owner: &Option<String>| -> Option<(u32, u32)> {
        let text = fs::read_to_string(file).ok()?;
        text.lines().find_map(|l| {
            let f: Vec<&str> = l.trim().split(':').collect();
            let [who, start, count] = f.as_slice() else {
                return None;
            };
            let mine = owner.as_deref() == Some(*who) || *who == id.to_string();
            let (start, count): (u32, u32) = (start.parse().ok()?, count.parse().ok()?);
            (mine && count > 0).then_some((start, count))
        })
    };
    let u = find("/etc/subuid", uid, &name)?;
    // subgid entries are keyed by user name (or uid), like subuid.
    let g = find("/etc/subgid", uid, &group_owner).or_else(|| find("/etc/subgid", gid, &None))?;
    let on_path = |b: &str| {
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join(b).is_file()))
            .unwrap_or(false)
            || Path::new("/usr/bin").join(b).is_file()
    };
    (on_path("newuidmap") && on_path("newgidmap")).then_some((u, g))
}

/// Starts a shell that waits for a line on stdin, then maps our ids.
fn spawn_map_helper(
    uid: u32,
    gid: u32,
    u: (u32, u32),
    g: (u32, u32),
) -> Option<std::process::Child> {
    let pid = std::process::id();
    let script = format!(
        "read go || exit 1; newuidmap {pid} 0 {uid} 1 1 {} {} && newgidmap {pid} 0 {gid} 1 1 {} {}",
        u.0, u.1, g.0, g.1
    );
    Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .ok()
}

fn finish_map_helper(mut helper: std::process::Child) -> std::result::Result<(), String> {
    if let Some(mut stdin) = helper.stdin.take() {
        stdin.write_all(b"go\n").map_err(|e| e.to_string())?;
    }
    let out = helper.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// The keeper process (`berth __keeper DIR IMAGE MODE IDLE_SECS`). Prints
/// `ready PID` on stdout once the image is mounted, then serves until idle.
pub fn keeper_main(args: &[String]) -> i32 {
    match keeper_run(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("berth: error: {e}");
            1
        }
    }
}

fn keeper_run(args: &[String]) -> Result<()> {
    // After the re-exec inside the namespaces (below): the ids inside and
    // the caller's ids outside follow.
    let (args, in_ns) = match args {
        [a @ .., flag, uid, gid, huid, hgid] if flag == "--in-ns" => {
            let n = |s: &String| s.parse::<u32>().ok();
            match (n(uid), n(gid), n(huid), n(hgid)) {
                (Some(u), Some(g), Some(hu), Some(hg)) => (a, Some(((u, g), (hu, hg)))),
                _ => return Err(Error::Setup("bad --in-ns ids".into())),
            }
        }
        _ => (args, None),
    };
    let [dir, image, mode, idle] = args else {
        return Err(Error::Setup(
            "usage: berth __keeper DIR IMAGE MODE IDLE".into(),
        ));
    };
    let dir = PathBuf::from(dir);
    adopt_state_dir(&dir);
    let image = PathBuf::from(image);
    let mode = IdMode::parse(mode).ok_or_else(|| Error::Setup(format!("bad mode {mode}")))?;
    let idle = Duration::from_secs(idle.parse().unwrap_or(30));
    // Leave the caller's session: a Ctrl-C or hang-up of the terminal that
    // started the first run must not take the mount from later runs.
    let _ = rustix::process::setsid();
    // `fd:N`: the starting run passed the open image as descriptor N.
    let image_fd: Option<i32> = image
        .to_str()
        .and_then(|s| s.strip_prefix("fd:"))
        .and_then(|n| n.parse().ok());
    // Nothing else the starting run inherited stays open in the keeper.
    sys::close_inherited(image_fd.as_slice());
    let image_file = match image_fd {
        Some(fd) => {
            sys::take_inherited_fd(fd).ok_or_else(|| Error::Setup(format!("no descriptor {fd}")))?
        }
        None if image.is_relative() => {
            return Err(Error::Setup(format!(
                "the image path {} is relative; the keeper takes an absolute path or fd:N",
                image.display()
            )))
        }
        None => File::open(&image).map_err(|e| Error::io("open the image", &image, e))?,
    };
    let (uid, gid, host_ids) = match in_ns {
        Some((inside, outside)) => {
            // The keeper's memory now belongs to its user namespace: not
            // dumpable, it cannot be traced or opened through /proc by
            // identity-mode containers (no capabilities in this namespace),
            // while runs (outside, its owners) still open its namespaces.
            // Its forked helpers (the prepared root's and the identity
            // namespace's holders) inherit that.
            let _ = rustix::process::set_dumpable_behavior(
                rustix::process::DumpableBehavior::NotDumpable,
            );
            (inside.0, inside.1, outside)
        }
        None => {
            let host_ids = (
                rustix::process::getuid().as_raw(),
                rustix::process::getgid().as_raw(),
            );
            let (uid, gid) = enter_namespaces(mode)?;
            if mode != IdMode::HostRoot {
                reexec_in_namespaces(args, &image_file, (uid, gid), host_ids);
            }
            (uid, gid, host_ids)
        }
    };
    let mnt = dir.join("mnt");
    sys::mount(
        Some(Path::new("berth")),
        &mnt,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("mode=0700"),
    )
    .map_err(|e| Error::Mount(format!("tmpfs on {}: {e}", mnt.display())))?;
    let image_dir = mnt.join("image");
    for d in ["image", "stage"] {
        fs::create_dir(mnt.join(d)).map_err(|e| Error::io("create", mnt.join(d), e))?;
    }
    let mut server = match mode {
        IdMode::HostRoot => {
            mount_kernel_squashfs(&image_file, &image_dir)?;
            None
        }
        _ => Some(mount_fuse(&image, &image_file, &image_dir, uid, gid)?),
    };
    drop(image_file);
    // The first request blocks until the server answers (or fails at once
    // if it died): the mount is usable when this returns.
    fs::metadata(image_dir.join("."))
        .map_err(|e| Error::Mount(format!("the squashfs server did not come up: {e}")))?;
    let holder = start_holder(&dir);
    let identity = match mode {
        IdMode::Identity => start_nested_holder(&dir, NestedMaps::caller(host_ids)),
        IdMode::FakeRoot => start_nested_holder(&dir, NestedMaps::same_as_keeper()),
        IdMode::HostRoot => None,
    };
    let pid = std::process::id();
    state::write(&dir.join("pid"), format!("{pid}\n").as_bytes())
        .map_err(|e| Error::io("write", dir.join("pid"), e))?;
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "ready {pid}");
        let _ = out.flush();
    }
    // Let the starter's read finish: stdout now goes nowhere.
    if let Ok(null) = File::options().write(true).open("/dev/null") {
        let _ = rustix::stdio::dup2_stdout(null.as_fd());
    }
    serve(&dir, idle, server.as_mut());
    if let Some(h) = holder {
        sys::kill(h, libc::SIGKILL);
        let _ = sys::wait(h, false);
        let _ = fs::remove_file(dir.join("holder.pid"));
    }
    if let Some(h) = identity {
        sys::kill(h, libc::SIGKILL);
        let _ = sys::wait(h, false);
        let _ = fs::remove_file(dir.join("identity.pid"));
    }
    if let Some(mut s) = server {
        sys::kill(s.id() as i32, libc::SIGTERM);
        let _ = s.wait();
    }
    Ok(())
}

/// Real root: the kernel's squashfs driver mounts the open image through a
/// loop device configured from its descriptor. No path is walked again and
/// no program is looked up, so neither the caller's cwd (a planted `fd:3`)
/// nor its `PATH` chooses what is mounted.
fn mount_kernel_squashfs(image: &File, target: &Path) -> Result<()> {
    let (dev, _attached) = sys::attach_loop_readonly(image)
        .map_err(|e| Error::Mount(format!("cannot attach the image to a loop device: {e}")))?;
    sys::mount(
        Some(&dev),
        target,
        Some("squashfs"),
        libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
        None,
    )
    .map_err(|e| {
        Error::Mount(format!(
            "mounting the image from {} failed: {e}",
            dev.display()
        ))
    })
}

/// Re-executes the keeper inside the namespaces it just entered (see
/// `keeper_run`), with the image descriptor, stdout (the starter reads
/// `ready PID` from it) and stderr (its log). Returns only if the exec
/// failed: the keeper then goes on as it is.
fn reexec_in_namespaces(
    args: &[String],
    image_file: &File,
    inside: (u32, u32),
    outside: (u32, u32),
) {
    use std::os::unix::process::CommandExt;
    let _ = rustix::io::fcntl_setfd(image_file, rustix::io::FdFlags::empty());
    let mut a: Vec<String> = args.to_vec();
    if let Some(image) = a.get_mut(1) {
        *image = format!("fd:{}", image_file.as_raw_fd());
    }
    a.extend([
        "--in-ns".to_string(),
        inside.0.to_string(),
        inside.1.to_string(),
        outside.0.to_string(),
        outside.1.to_string(),
    ]);
    let err = Command::new("/proc/self/exe")
        .arg0("berth")
        .arg("__keeper")
        .args(&a)
        .exec();
    eprintln!("berth: warning: the keeper could not re-execute itself in its namespaces ({err}); it stays traceable");
    let _ = rustix::io::fcntl_setfd(image_file, rustix::io::FdFlags::CLOEXEC);
}

/// The id maps of the user namespace nested in the keeper's.
struct NestedMaps {
    uid_map: String,
    gid_map: String,
    /// `setgroups` is denied (identity mode: one id only, as the kernel
    /// requires of a map written without `CAP_SETGID` above it).
    deny_setgroups: bool,
}

impl NestedMaps {
    /// Identity mode: the caller's host ids `(uid, gid)` map to the
    /// keeper's root (which is the caller outside).
    fn caller((uid, gid): (u32, u32)) -> Self {
        NestedMaps {
            uid_map: format!("{uid} 0 1"),
            gid_map: format!("{gid} 0 1"),
            deny_setgroups: true,
        }
    }

    /// Fakeroot mode: every id of the keeper's namespace (root, and the
    /// subordinate range when there is one) maps to itself, so the
    /// container is root over the same files, but in a namespace of its
    /// own, with no capability in the keeper's.
    fn same_as_keeper() -> Self {
        let same = |file: &str| {
            let text = fs::read_to_string(file).unwrap_or_default();
            let lines: Vec<String> = text
                .lines()
                .filter_map(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    match f.as_slice() {
                        [inside, _outside, count] => Some(format!("{inside} {inside} {count}")),
                        _ => None,
                    }
                })
                .collect();
            if lines.is_empty() {
                "0 0 1".to_string()
            } else {
                lines.join("\n")
            }
        };
        NestedMaps {
            uid_map: same("/proc/self/uid_map"),
            gid_map: same("/proc/self/gid_map"),
            deny_setgroups: false,
        }
    }
}

/// Forks the holder of the nested user namespace: a process that creates a
/// user namespace nested in the keeper's, whose maps the keeper writes
/// (`maps`), and then only sleeps. Runs join it (see
/// [`KeeperLease::nested_userns`]) instead of each making its own, so all
/// of them share one user namespace. `None` (runs make their own) if it
/// cannot be set up.
fn start_nested_holder(dir: &Path, maps: NestedMaps) -> Option<i32> {
    let (ready_r, ready_w) = rustix::pipe::pipe().ok()?;
    let (mapped_r, mapped_w) = rustix::pipe::pipe().ok()?;
    match sys::fork().ok()? {
        sys::Fork::Child => {
            drop(ready_r);
            drop(mapped_w);
            let ok = rustix::process::set_parent_process_death_signal(Some(
                rustix::process::Signal::KILL,
            ))
            .is_ok()
                && sys::unshare(rustix::thread::UnshareFlags::NEWUSER).is_ok();
            let _ = rustix::io::write(&ready_w, if ok { b"y" } else { b"n" });
            drop(ready_w);
            if !ok {
                sys::exit_now(1);
            }
            // Wait until the keeper has written the maps, then hold.
            let mut b = [0u8; 1];
            let _ = rustix::io::read(&mapped_r, &mut b);
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
        sys::Fork::Parent(pid) => {
            drop(ready_w);
            drop(mapped_r);
            let mut b = [0u8; 1];
            let n = rustix::io::read(&ready_r, &mut b).unwrap_or(0);
            let setgroups_ok =
                !maps.deny_setgroups || fs::write(format!("/proc/{pid}/setgroups"), "deny").is_ok();
            let mapped = n == 1
                && b[0] == b'y'
                && setgroups_ok
                && fs::write(format!("/proc/{pid}/uid_map"), &maps.uid_map).is_ok()
                && fs::write(format!("/proc/{pid}/gid_map"), &maps.gid_map).is_ok();
            let _ = rustix::io::write(&mapped_w, b"y");
            drop(mapped_w);
            if !mapped
                || state::write(&dir.join("identity.pid"), format!("{pid}\n").as_bytes()).is_err()
            {
                eprintln!(
                    "berth: the keeper's nested user namespace could not be set up; runs make their own"
                );
                sys::kill(pid, libc::SIGKILL);
                let _ = sys::wait(pid, false);
                return None;
            }
            Some(pid)
        }
    }
}

/// Forks the holder of the prepared root: a process that builds the
/// template root (see [`Template`]) in its own mount namespace and then
/// only sleeps, so runs can copy that namespace instead of building their
/// own. Returns its pid; `None` (runs build their root) if there is no
/// template or it could not be prepared.
fn start_holder(dir: &Path) -> Option<i32> {
    let text = state::read(&dir.join("template.json")).ok()?;
    let template: Template = serde_json::from_str(&text).ok()?;
    let (reader, writer) = rustix::pipe::pipe().ok()?;
    match sys::fork().ok()? {
        sys::Fork::Child => {
            drop(reader);
            let result = (|| -> Result<()> {
                rustix::process::set_parent_process_death_signal(Some(
                    rustix::process::Signal::KILL,
                ))
                .map_err(|e| Error::Setup(format!("prctl: {e}")))?;
                sys::unshare(rustix::thread::UnshareFlags::NEWNS)
                    .map_err(|e| Error::Namespace(format!("unshare(mount): {e}")))?;
                let plan = crate::rootfs::RootfsPlan {
                    image: &dir.join("mnt/image"),
                    stage: &dir.join("mnt/stage"),
                    writable: false,
                    fresh_proc: false,
                    confined: false,
                    binds: &template.binds,
                    passwd_line: template.passwd_line.clone(),
                    group_line: template.group_line.clone(),
                    workdir: "/",
                };
                crate::rootfs::prepare(&plan).map(drop)
            })();
            let msg = match &result {
                Ok(()) => "ok".to_string(),
                Err(e) => format!("{e}"),
            };
            let _ = rustix::io::write(&writer, msg.as_bytes());
            drop(writer);
            if result.is_err() {
                sys::exit_now(1);
            }
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
        sys::Fork::Parent(pid) => {
            drop(writer);
            let mut buf = [0u8; 512];
            let n = rustix::io::read(&reader, &mut buf).unwrap_or(0);
            let msg = String::from_utf8_lossy(&buf[..n]).to_string();
            if msg != "ok" {
                eprintln!("berth: the prepared root failed ({msg}); runs will build their own");
                let _ = sys::wait(pid, false);
                return None;
            }
            state::write(&dir.join("holder.pid"), format!("{pid}\n").as_bytes()).ok()?;
            Some(pid)
        }
    }
}

/// Mounts the squashfs `image_file` read-only on `target` through FUSE
/// (`squashfuse_ll` serving an already mounted connection), for the
/// namespace's `uid`/`gid`; returns the server. Needs CAP_SYS_ADMIN in the
/// current user namespace (the keeper's, or a build worker's).
pub fn mount_fuse(
    image: &Path,
    image_file: &File,
    target: &Path,
    uid: u32,
    gid: u32,
) -> Result<std::process::Child> {
    let fuse = File::options()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(|e| {
            let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
                "; /dev/fuse must be mode 0666 (as distributions ship it): ask your admin"
            } else if e.kind() == std::io::ErrorKind::NotFound {
                "; load the fuse kernel module (modprobe fuse)"
            } else {
                ""
            };
            Error::Mount(format!("cannot open /dev/fuse: {e}{hint}"))
        })?;
    let opts = format!(
        "fd={},rootmode=40000,user_id={uid},group_id={gid},allow_other",
        fuse.as_raw_fd()
    );
    sys::mount(
        Some(Path::new("berth-squashfs")),
        target,
        Some("fuse.squashfuse_ll"),
        libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
        Some(&opts),
    )
    .map_err(|e| Error::Mount(format!("FUSE mount on {}: {e}", target.display())))?;
    // squashfuse_ll takes the already mounted connection as /dev/fd/N.
    rustix::io::fcntl_setfd(&fuse, rustix::io::FdFlags::empty())
        .map_err(|e| Error::Mount(format!("fcntl: {e}")))?;
    // The image goes by descriptor too: on a parallel filesystem every path
    // walk costs metadata requests, and the file is already open.
    rustix::io::fcntl_setfd(image_file, rustix::io::FdFlags::empty())
        .map_err(|e| Error::Mount(format!("fcntl: {e}")))?;
    let _ = image;
    let mut cmd = Command::new(squashfuse_path());
    // If the keeper dies, however, the server must go too: it lives in the
    // keeper's mount namespace and would otherwise keep it (and itself) alive.
    sys::kill_with_parent(&mut cmd, rustix::process::Signal::TERM);
    sys::exec_without_root_powers(&mut cmd);
    // With a subordinate id range, the server runs as an id of its own:
    // the user's containers (the user's id) can then neither trace it nor
    // signal it.
    if let Some(id) = spare_id() {
        use std::os::unix::process::CommandExt;
        cmd.uid(id).gid(id);
    }
    let child = cmd
        .arg("-f")
        .arg(format!("/dev/fd/{}", image_file.as_raw_fd()))
        .arg(format!("/dev/fd/{}", fuse.as_raw_fd()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| {
            Error::Mount(format!(
                "cannot start {} ({e}): install squashfuse (Debian/Ubuntu: apt-get install squashfuse), or set BERTH_SQUASHFUSE",
                squashfuse_path().display()
            ))
        })?;
    // Our copy must go, so a dead server aborts the connection instead of
    // hanging every request.
    drop(fuse);
    Ok(child)
}

/// The highest id mapped in both this user namespace's uid and gid maps,
/// when they map more than root (a subordinate range); `None` in the
/// initial namespace or with a single-id map.
fn spare_id() -> Option<u32> {
    let top = |file: &str| -> Option<u32> {
        let text = fs::read_to_string(file).ok()?;
        let mut top = None;
        for line in text.lines() {
            let f: Vec<u64> = line
                .split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect();
            let [inside, _, count] = f.as_slice() else {
                return None;
            };
            if *count >= u64::from(u32::MAX) {
                return None;
            }
            top = top.max(Some(inside + count - 1));
        }
        top.and_then(|t| u32::try_from(t).ok()).filter(|t| *t > 0)
    };
    Some(top("/proc/self/uid_map")?.min(top("/proc/self/gid_map")?))
}

fn squashfuse_path() -> PathBuf {
    std::env::var_os("BERTH_SQUASHFUSE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("squashfuse_ll"))
}

fn serve(dir: &Path, idle: Duration, mut server: Option<&mut std::process::Child>) {
    let keeper_lock_path = dir.join("keeper.lock");
    let users_path = dir.join("users.lock");
    let (Ok(keeper_lock), Ok(users)) = (open_lock(&keeper_lock_path), open_lock(&users_path))
    else {
        return;
    };
    let mut idle_since: Option<Instant> = None;
    loop {
        std::thread::sleep(Duration::from_millis(250));
        if let Some(s) = server.as_deref_mut() {
            if let Ok(Some(status)) = s.try_wait() {
                eprintln!("berth: squashfuse_ll exited ({status})");
                let _ = fs::remove_file(dir.join("pid"));
                return;
            }
        }
        if flock(&keeper_lock, FlockOperation::NonBlockingLockExclusive).is_err() {
            continue; // A run is joining right now.
        }
        if flock(&users, FlockOperation::NonBlockingLockExclusive).is_ok() {
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= idle {
                let _ = fs::remove_file(dir.join("pid"));
                let _ = flock(&users, FlockOperation::Unlock);
                let _ = flock(&keeper_lock, FlockOperation::Unlock);
                return;
            }
            let _ = flock(&users, FlockOperation::Unlock);
        } else {
            idle_since = None;
        }
        let _ = flock(&keeper_lock, FlockOperation::Unlock);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pid planted in a helper's pid file counts only if the process is
    /// the keeper's child.
    #[test]
    fn a_helper_is_a_child_of_its_keeper() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("holder.pid");
        state::write(&f, format!("{}\n", std::process::id()).as_bytes()).unwrap();
        let parent = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get());
        assert_eq!(
            helper_of(&f, parent).map(|p| p.pid()),
            Some(std::process::id() as i32)
        );
        assert!(helper_of(&f, parent + 1).is_none());
        state::write(&f, b"1\n").unwrap();
        assert!(helper_of(&f, parent).is_none());
    }

    #[test]
    fn each_slurm_job_has_its_own_keepers() {
        let a = keeper_name("ab12", IdMode::Identity, Some("41"));
        let b = keeper_name("ab12", IdMode::Identity, Some("42"));
        assert_ne!(a, b);
        assert_eq!(keeper_name("ab12", IdMode::Identity, None), "ab12-user");
        assert_eq!(keeper_name("ab12", IdMode::FakeRoot, None), "ab12-fakeroot");
        // Not a job id: no part of the name.
        assert_eq!(
            keeper_name("ab12", IdMode::Identity, Some("../x")),
            "ab12-user"
        );
    }
}
