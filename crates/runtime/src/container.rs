//! Starting a container: the parent stays outside to report the exit code
//! and forward signals; a forked child joins the keeper's namespaces, makes
//! its own mount namespace, assembles the root file system and `exec`s the
//! command. stdin, stdout and stderr are the caller's own descriptors: no
//! copying loop, no throughput loss.

use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::thread::{LinkNameSpaceType, UnshareFlags};

use crate::error::{Error, Result, EXIT_BERTH, EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND};
use crate::hooks;
use crate::keeper::{self, IdMode, KeeperLease};
use crate::rootfs::{self, Bind, RootfsPlan};
use crate::sys::{self, Exit, Fork, SigSet};

/// Signals forwarded to the container when a process sends them to berth.
/// (A terminal's Ctrl-C reaches the command directly: same process group.)
pub const FORWARDED: &[i32] = &[
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// A check run inside the container after its root is in place and
/// before the command starts (it sees the image at `/`): the MPI ABI check
/// of `--mpi` compares the image's libraries with the host's there. Its
/// error stops the start (exit 125) with its message.
#[derive(Clone)]
pub struct Preflight(pub std::sync::Arc<dyn Fn() -> std::result::Result<(), String> + Send + Sync>);

impl std::fmt::Debug for Preflight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Preflight(..)")
    }
}

/// Everything needed to start one container.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// The image's squashfs file.
    pub image: PathBuf,
    /// The image id (keys the keeper).
    pub image_id: String,
    /// Command line.
    pub argv: Vec<String>,
    /// Environment.
    pub env: Vec<(String, String)>,
    /// Working directory inside.
    pub workdir: String,
    /// Binds, in mount order.
    pub binds: Vec<Bind>,
    /// Writable overlay.
    pub writable: bool,
    /// Own PID namespace with a reaping init.
    pub pid_ns: bool,
    /// Empty network namespace.
    pub net_none: bool,
    /// Id mapping.
    pub mode: IdMode,
    /// Keeper idle time before it unmounts.
    pub keeper_idle: Duration,
    /// berth's own binary (to start keepers).
    pub berth_exe: PathBuf,
    /// Print start-up phases.
    pub timing: bool,
    /// When berth started, for `--timing`.
    pub started: Instant,
    /// `/etc/passwd` line to add.
    pub passwd_line: Option<String>,
    /// `/etc/group` line to add.
    pub group_line: Option<String>,
    /// What the keeper may prepare once for all default runs of the user;
    /// `binds` then holds the template's binds followed by `extra_binds`.
    pub template: Option<keeper::Template>,
    /// The run's binds that are not in the template (current directory, -v).
    pub extra_binds: Vec<Bind>,
    /// The image file, when the caller already opened it (handed to a
    /// keeper that starts, instead of a path to walk again).
    pub image_file: Option<std::sync::Arc<std::fs::File>>,
    /// A lock the caller holds while a node's first run starts the keeper
    /// (so the other ranks do not race it to start one by path); released
    /// as soon as the keeper is there.
    pub startup_lock: Option<std::sync::Arc<std::sync::Mutex<Option<std::fs::File>>>>,
    /// The seccomp filter the command runs under.
    pub seccomp: crate::seccomp::Seccomp,
    /// The caller's uid on the host.
    pub uid: u32,
    /// The caller's gid on the host.
    pub gid: u32,
    /// A check inside the container before the command starts.
    pub preflight: Option<Preflight>,
    /// OCI hooks to run, each at its stage.
    pub hooks: Vec<crate::hooks::Hook>,
    /// Annotations (for hooks' `when` and their OCI state).
    pub annotations: Vec<(String, String)>,
    /// The container's id in the OCI state (`--name`, else generated).
    pub id: String,
    /// An absolute command that the image lacks is looked up by its base
    /// name in the container's PATH (the Slurm plugin: srun resolves the
    /// command on the submit host, where `/usr/bin/python3` may be the
    /// image's `/usr/local/bin/python3`).
    pub argv0_fallback: bool,
}

pub(crate) struct Timing {
    on: bool,
    started: Instant,
    marks: Vec<(&'static str, Duration)>,
}

impl Timing {
    /// Off: for processes whose phases nobody reports.
    pub(crate) fn off() -> Self {
        Timing {
            on: false,
            started: Instant::now(),
            marks: Vec::new(),
        }
    }

    fn mark(&mut self, phase: &'static str) {
        if self.on {
            self.marks.push((phase, self.started.elapsed()));
        }
    }

    fn report(&self) {
        if !self.on {
            return;
        }
        let mut prev = Duration::ZERO;
        let parts: Vec<String> = self
            .marks
            .iter()
            .map(|(p, t)| {
                let d = t.saturating_sub(prev);
                prev = *t;
                format!("{p}={}us", d.as_micros())
            })
            .collect();
        eprintln!(
            "berth timing: {} total={}us",
            parts.join(" "),
            prev.as_micros()
        );
    }
}

/// Descriptors the command must inherit besides stdio: the PMI channel an
/// MPI launcher (Hydra's mpiexec, Slurm's PMI-2) hands each rank and names
/// in `PMI_FD`. The variable is read from berth's own environment (the
/// launcher's), never from the container's, where an image's `Env` could
/// set it; and only a socket is kept, so it cannot pass one of berth's own
/// descriptors (a directory, a namespace) on.
pub(crate) fn inherited_fds() -> Vec<i32> {
    std::env::var("PMI_FD")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|fd: &i32| *fd > 2 && sys::is_socket(*fd))
        .into_iter()
        .collect()
}

/// Runs a container and returns its exit code (128+N for death by signal N).
pub fn run(spec: &RunSpec) -> Result<i32> {
    let mut timing = Timing {
        on: spec.timing,
        started: spec.started,
        marks: Vec::new(),
    };
    timing.mark("config");
    let lease = lease_for(spec)?;
    timing.mark("keeper");
    let set = watched_signals();
    sys::mask(&set, true).map_err(|e| Error::Setup(format!("sigprocmask: {e}")))?;
    let sync = if spec.hooks.is_empty() {
        None
    } else {
        Some(hooks::Sync::new().map_err(|e| Error::Setup(format!("pipe: {e}")))?)
    };
    match sys::fork().map_err(|e| Error::Setup(format!("fork: {e}")))? {
        Fork::Child => {
            let code = match child(spec, &lease, timing, sync, None) {
                Ok(never) => match never {},
                Err(e) => {
                    eprintln!("berth: error: {e}");
                    EXIT_BERTH
                }
            };
            sys::exit_now(code)
        }
        Fork::Parent(pid) => {
            // Processes in the container run as the same user: keep them
            // from ptracing berth or opening /proc/PID/exe (CVE-2019-5736).
            let _ = rustix::process::set_dumpable_behavior(
                rustix::process::DumpableBehavior::NotDumpable,
            );
            let bundle = match sync {
                Some(sync) => match hooks_before_start(spec, sync.parent_side()) {
                    Ok(b) => b,
                    Err(msg) => {
                        sys::kill(pid, libc::SIGKILL);
                        let _ = supervise(pid, &set);
                        eprintln!("berth: error: {msg}");
                        return Ok(EXIT_BERTH);
                    }
                },
                None => None,
            };
            let exit = supervise(pid, &set);
            if let Some((bundle, container_pid)) = bundle {
                let _ = run_stage(spec, "poststop", "stopped", container_pid, &bundle, false);
                let _ = std::fs::remove_dir_all(&bundle);
            }
            drop(lease);
            Ok(exit.as_code())
        }
    }
}

/// Runs the hooks of `stage` in order with the OCI state on stdin; the
/// variables they set, or the first failure. `fatal: false` (poststart,
/// poststop) turns failures into warnings.
fn run_stage(
    spec: &RunSpec,
    stage: &str,
    status: &str,
    pid: i32,
    bundle: &Path,
    fatal: bool,
) -> std::result::Result<Vec<(String, String)>, String> {
    let state = hooks::state_json(&spec.id, status, pid, bundle, &spec.annotations);
    let mut env = Vec::new();
    for h in spec.hooks.iter().filter(|h| h.stage == stage) {
        match hooks::run(h, &state) {
            Ok(e) => env.extend(e),
            Err(msg) if fatal => return Err(msg),
            Err(msg) => eprintln!("berth: warning: {msg}"),
        }
    }
    Ok(env)
}

/// In berth, once the container process is ready: createRuntime and
/// createContainer hooks (in berth's namespaces, with the container's pid
/// and a bundle whose root is /proc/PID/root), then `go`, then poststart.
/// Returns the bundle and the pid for poststop; `Ok(None)` when the
/// container process ended before it was ready.
pub(crate) fn hooks_before_start(
    spec: &RunSpec,
    sync: hooks::ParentEnd,
) -> std::result::Result<Option<(PathBuf, i32)>, String> {
    let Some(pid) = sync.wait() else {
        return Ok(None);
    };
    let bundle = keeper::state_dir()
        .map_err(|e| e.to_string())?
        .join("bundles")
        .join(format!("{}-{pid}", spec.id));
    hooks::write_bundle(
        &bundle,
        pid,
        &spec.argv,
        &spec.env,
        &spec.workdir,
        &spec.annotations,
    )
    .map_err(|e| format!("cannot write the hooks' bundle {}: {e}", bundle.display()))?;
    let result = (|| {
        let mut env = run_stage(spec, "createRuntime", "created", pid, &bundle, true)?;
        env.extend(run_stage(
            spec,
            "createContainer",
            "created",
            pid,
            &bundle,
            true,
        )?);
        Ok(env)
    })();
    match result {
        Ok(env) => {
            sync.go(&env);
            let _ = run_stage(spec, "poststart", "running", pid, &bundle, false);
            Ok(Some((bundle, pid)))
        }
        Err(msg) => {
            let _ = std::fs::remove_dir_all(&bundle);
            Err(msg)
        }
    }
}

/// The signals a supervising berth waits for: those it forwards, and
/// SIGCHLD.
pub(crate) fn watched_signals() -> SigSet {
    let mut watched: Vec<i32> = FORWARDED.to_vec();
    watched.push(libc::SIGCHLD);
    SigSet::of(&watched)
}

/// Waits for `pid`, forwarding signals that processes send us.
pub(crate) fn supervise(pid: libc::pid_t, set: &SigSet) -> Exit {
    loop {
        match sys::wait_signal(set) {
            Ok(sig) if sig.signo == libc::SIGCHLD => {
                if let Ok(Some((_, exit))) = sys::wait(pid, true) {
                    return exit;
                }
            }
            Ok(sig) if sig.from_process => sys::kill(pid, sig.signo),
            Ok(_) => {}
            Err(_) => {
                // Cannot wait for signals: fall back to a plain wait.
                return match sys::wait(pid, false) {
                    Ok(Some((_, exit))) => exit,
                    _ => Exit::Code(EXIT_BERTH),
                };
            }
        }
    }
}

/// As PID 1 of a PID namespace: reap every process, forward signals to the
/// command, exit with the command's status.
fn init_loop(command: libc::pid_t, set: &SigSet) -> Exit {
    loop {
        match sys::wait_signal(set) {
            Ok(sig) if sig.signo == libc::SIGCHLD => {
                while let Ok(Some((pid, exit))) = sys::wait(-1, true) {
                    if pid == command {
                        return exit;
                    }
                }
            }
            Ok(sig) => sys::kill(command, sig.signo),
            Err(_) => return Exit::Code(EXIT_BERTH),
        }
    }
}

/// In a forked child: join the keeper, build the container, `exec` the
/// command; or, given `hold`, stay until a shared container's holder has
/// joined.
pub(crate) fn child(
    spec: &RunSpec,
    lease: &KeeperLease,
    mut timing: Timing,
    mut sync: Option<hooks::Sync>,
    hold: Option<crate::shared::Built>,
) -> Result<std::convert::Infallible> {
    timing.mark("fork");
    if let Some(userns) = &lease.userns {
        rustix::thread::move_into_link_name_space(userns.as_fd(), Some(LinkNameSpaceType::User))
            .map_err(|e| Error::Namespace(format!("join the keeper's user namespace: {e}")))?;
    }
    // Default runs copy the keeper's prepared root; the others build theirs
    // from the keeper's image mount.
    let prepared = lease
        .template_mntns
        .as_ref()
        .filter(|_| uses_template(spec));
    let base = prepared.unwrap_or(&lease.mntns);
    rustix::thread::move_into_link_name_space(base.as_fd(), Some(LinkNameSpaceType::Mount))
        .map_err(|e| Error::Namespace(format!("join the keeper's mount namespace: {e}")))?;
    let mut flags = UnshareFlags::NEWNS;
    if spec.pid_ns {
        flags |= UnshareFlags::NEWPID;
    }
    if spec.net_none {
        flags |= UnshareFlags::NEWNET;
    }
    sys::unshare(flags).map_err(|e| Error::Namespace(format!("unshare: {e}")))?;
    if spec.net_none {
        // An empty network namespace has only a downed loopback.
        if let Err(e) = sys::loopback_up() {
            tracing::warn!("cannot bring up the loopback interface: {e}");
        }
    }
    timing.mark("namespace");
    let set = watched_signals();
    if spec.pid_ns {
        // The next child is PID 1 of the new namespace; we relay its status.
        match sys::fork().map_err(|e| Error::Setup(format!("fork: {e}")))? {
            Fork::Parent(init) => {
                // Only the container process talks to berth about hooks.
                drop(sync.take());
                let exit = supervise(init, &set);
                sys::exit_now(exit.as_code());
            }
            Fork::Child => {}
        }
    }
    // The container process's pid as berth sees it (the host's /proc is
    // still mounted here), for the hooks' OCI state.
    let host_pid: i32 = std::fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str().and_then(|s| s.parse().ok()))
        .unwrap_or(0);
    if prepared.is_some() {
        rootfs::extend_and_pivot(
            &lease.stage().join("root"),
            &spec.extra_binds,
            &spec.workdir,
        )?;
    } else {
        let plan = RootfsPlan {
            image: &lease.image_mount(),
            stage: &lease.stage(),
            writable: spec.writable,
            fresh_proc: spec.pid_ns,
            binds: &spec.binds,
            passwd_line: spec.passwd_line.clone(),
            group_line: spec.group_line.clone(),
            workdir: &spec.workdir,
            confined: spec.mode == IdMode::HostRoot,
        };
        rootfs::assemble(&plan)?;
    }
    timing.mark("mount");
    if let Some(check) = &spec.preflight {
        (check.0)().map_err(Error::Setup)?;
    }
    // Hooks: berth runs createRuntime and createContainer now; their
    // variables join the command's environment.
    let mut env = spec.env.clone();
    if let Some(sync) = sync.take() {
        match sync.child_ready(host_pid) {
            Some(extra) => {
                for (k, v) in extra {
                    env.retain(|(n, _)| *n != k);
                    env.push((k, v));
                }
            }
            // berth said why; stop quietly.
            None => sys::exit_now(EXIT_BERTH),
        }
    }
    std::env::set_current_dir(&spec.workdir).map_err(|e| {
        Error::Setup(format!(
            "working directory {:?} is not usable in the container: {e}",
            spec.workdir
        ))
    })?;
    match (spec.mode, &lease.nested_userns) {
        // The keeper's nested namespace: one for all runs, and none of its
        // capabilities (fakeroot's root has all of them) reach the
        // keeper's namespace, its mounts or its processes.
        (IdMode::Identity | IdMode::FakeRoot, Some(ns)) => {
            rustix::thread::move_into_link_name_space(ns.as_fd(), Some(LinkNameSpaceType::User))
                .map_err(|e| Error::Namespace(format!("join the nested user namespace: {e}")))?
        }
        (IdMode::Identity, None) => become_caller(spec.uid, spec.gid)?,
        (IdMode::FakeRoot, None) => become_caller(0, 0)?,
        // Real root has real capabilities: keep Docker's default set only.
        (IdMode::HostRoot, _) => sys::restrict_bounding_set(sys::ROOT_KEEPS)
            .map_err(|e| Error::Setup(format!("drop capabilities: {e}")))?,
    }
    rustix::thread::set_no_new_privs(true)
        .map_err(|e| Error::Setup(format!("no_new_privs: {e}")))?;
    // startContainer hooks run in the container, their paths the image's.
    if spec.hooks.iter().any(|h| h.stage == "startContainer") {
        let state = hooks::state_json(
            &spec.id,
            "created",
            host_pid,
            Path::new("/"),
            &spec.annotations,
        );
        for h in spec.hooks.iter().filter(|h| h.stage == "startContainer") {
            let extra = hooks::run(h, &state).map_err(Error::Setup)?;
            for (k, v) in extra {
                env.retain(|(n, _)| *n != k);
                env.push((k, v));
            }
        }
    }
    if let Some(built) = hold {
        crate::shared::built(built);
    }
    let program = resolve_or_exit(&spec.argv[0], &env, &spec.workdir, spec.argv0_fallback);
    timing.mark("pivot");
    if spec.pid_ns {
        // PID 1 stays berth: it reaps orphans and forwards signals.
        match sys::fork().map_err(|e| Error::Setup(format!("fork: {e}")))? {
            Fork::Parent(command) => {
                let _ = rustix::process::set_dumpable_behavior(
                    rustix::process::DumpableBehavior::NotDumpable,
                );
                let exit = init_loop(command, &set);
                sys::exit_now(exit.as_code());
            }
            Fork::Child => {}
        }
    }
    timing.mark("exec");
    exec_command(&program, &spec.argv, &env, &spec.seccomp, timing)
}

/// The command's program in the container, or berth's message and exit
/// (127 not found, 126 not executable).
pub(crate) fn resolve_or_exit(
    cmd: &str,
    env: &[(String, String)],
    workdir: &str,
    argv0_fallback: bool,
) -> PathBuf {
    match resolve_command(cmd, env, workdir, argv0_fallback) {
        Ok(p) => p,
        Err((code, msg)) => {
            eprintln!("berth: error: {msg}");
            sys::exit_now(code);
        }
    }
}

/// The last step in the container: only the descriptors the command must
/// inherit (stdio, the launcher's PMI socket) stay open, signals
/// take their defaults, the seccomp filter is on, and `program` replaces
/// berth. `timing` is reported with the filter's installation as its last
/// phase (`seccomp`).
pub(crate) fn exec_command(
    program: &Path,
    argv: &[String],
    env: &[(String, String)],
    seccomp: &crate::seccomp::Seccomp,
    mut timing: Timing,
) -> ! {
    sys::cloexec_all_but(&inherited_fds());
    sys::reset_signals();
    timing.mark("fds");
    if let Err(e) = crate::seccomp::install(seccomp) {
        eprintln!("berth: error: {e}");
        sys::exit_now(crate::error::EXIT_BERTH);
    }
    timing.mark("seccomp");
    timing.report();
    let err = std::process::Command::new(program)
        .arg0(&argv[0])
        .args(&argv[1..])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .exec();
    let code = match err.raw_os_error() {
        Some(libc::ENOENT) => EXIT_NOT_FOUND,
        _ => EXIT_NOT_EXECUTABLE,
    };
    eprintln!("berth: error: cannot execute {}: {err}", program.display());
    sys::exit_now(code)
}

/// Takes a share in the keeper of `spec`'s image (starting it if needed)
/// and lets the other ranks waiting on the caller's start-up lock go.
pub(crate) fn lease_for(spec: &RunSpec) -> Result<KeeperLease> {
    let lease = keeper::acquire(
        &spec.berth_exe,
        &spec.image,
        &spec.image_id,
        spec.mode,
        spec.keeper_idle,
        spec.template.as_ref(),
        spec.image_file.as_deref(),
    )?;
    release_startup_lock(spec);
    Ok(lease)
}

/// Lets the other ranks waiting on the caller's start-up lock go (the
/// keeper is there, or this run joins a shared container and needs none).
pub(crate) fn release_startup_lock(spec: &RunSpec) {
    if let Some(lock) = &spec.startup_lock {
        if let Ok(mut held) = lock.lock() {
            held.take();
        }
    }
}

/// Whether a run can start from the keeper's prepared root: it wants the
/// same template, a read-only image and the host's /proc, and none of its
/// own binds would cover one of the template's.
fn uses_template(spec: &RunSpec) -> bool {
    spec.template.is_some()
        && !spec.writable
        && !spec.pid_ns
        && spec.template.as_ref().is_some_and(|t| {
            !spec.extra_binds.iter().any(|b| {
                t.binds.iter().any(|tb| {
                    let under = tb.target.strip_prefix(&b.target);
                    under.is_some_and(|rest| rest.starts_with('/') || b.target == "/")
                })
            })
        })
}

/// Leaves root of the keeper's user namespace for the caller's own ids: a
/// nested user namespace mapping `uid` to the outer root (which is the
/// caller on the host). Capabilities go with it at `exec`.
fn become_caller(uid: u32, gid: u32) -> Result<()> {
    sys::unshare(UnshareFlags::NEWUSER)
        .map_err(|e| Error::Namespace(format!("nested user namespace: {e}")))?;
    sys::write_id_maps(&format!("{uid} 0 1"), &format!("{gid} 0 1"))
        .map_err(|e| Error::Namespace(format!("cannot write the nested id maps: {e}")))
}

/// Finds the command in the container, as a shell would: a name with a `/`
/// is a path (relative to the working directory), anything else is searched
/// in the container's PATH. Errors carry exit codes 127 and 126.
pub(crate) fn resolve_command(
    cmd: &str,
    env: &[(String, String)],
    workdir: &str,
    argv0_fallback: bool,
) -> Result<PathBuf, (i32, String)> {
    let executable = |p: &Path| -> Option<bool> {
        let m = std::fs::metadata(p).ok()?;
        Some(m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if cmd.contains('/') {
        let p = if cmd.starts_with('/') {
            PathBuf::from(cmd)
        } else {
            Path::new(workdir).join(cmd)
        };
        return match executable(&p) {
            Some(true) => Ok(p),
            None if argv0_fallback && cmd.starts_with('/') => {
                let base = Path::new(cmd)
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or(cmd);
                resolve_command(base, env, workdir, false)
                    .map_err(|(code, msg)| (code, format!("{cmd}: not in the image, and {msg}")))
            }
            Some(false) => Err((
                EXIT_NOT_EXECUTABLE,
                format!("{cmd}: permission denied (not an executable file)"),
            )),
            None => Err((
                EXIT_NOT_FOUND,
                format!("{cmd}: no such file or directory in the container"),
            )),
        };
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .unwrap_or(crate::semantics::DEFAULT_PATH);
    let mut found_non_exec = None;
    for dir in path.split(':').filter(|d| !d.is_empty()) {
        let p = Path::new(dir).join(cmd);
        match executable(&p) {
            Some(true) => return Ok(p),
            Some(false) => {
                found_non_exec.get_or_insert(p);
            }
            None => {}
        }
    }
    match found_non_exec {
        Some(p) => Err((
            EXIT_NOT_EXECUTABLE,
            format!("{cmd}: {} is not executable", p.display()),
        )),
        None => Err((
            EXIT_NOT_FOUND,
            format!("{cmd}: command not found in the image (PATH={path})"),
        )),
    }
}
