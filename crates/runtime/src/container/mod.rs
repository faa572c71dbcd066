//! Starting a container: the parent stays outside to report the exit code
//! and forward signals; a forked child joins the keeper's namespaces, makes
//! its own mount namespace, assembles the root file system ([`build`]) and
//! `exec`s the command. stdin, stdout and stderr are the caller's own
//! descriptors: no copying loop, no throughput loss.
//!
//! Two phases, so that the caller can let other ranks go between them:
//! [`lease`] takes a share in the image's keeper (starting it if needed),
//! [`Leased::run`] starts the container.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rustix::thread::UnshareFlags;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::hooks::{ContainerHooks, Hook, Sync};
use crate::idmap::IdMode;
use crate::keeper::{self, client::KeeperRequest, KeeperLease, Template};
use crate::process::{self, Timing};
use crate::rootfs::{self, Bind, Layers, Profile, RootfsPlan};
use crate::sys::{self, Fork, Kernel, Namespace, LINUX};
use identity::{become_user, own_uts};

/// A check run inside the container after its root is in place and
/// before the command starts (it sees the image at `/`): the MPI ABI check
/// of `--mpi` compares the image's libraries with the host's there. Its
/// error stops the start (exit 125) with its message.
#[derive(Clone)]
pub struct Preflight(
    pub std::sync::Arc<dyn Fn() -> std::result::Result<(), String> + Send + std::marker::Sync>,
);

impl std::fmt::Debug for Preflight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Preflight(..)")
    }
}

/// The command a container runs (also what a task runs in a shared
/// container).
#[derive(Debug, Clone, Serialize)]
pub struct Process {
    /// Command line.
    pub argv: Vec<String>,
    /// Environment (shown as `NAME=VALUE`).
    #[serde(serialize_with = "env_strings")]
    pub env: Vec<(String, String)>,
    /// Working directory inside.
    pub workdir: String,
    /// An absolute command that the image lacks is looked up by its base
    /// name in the container's PATH (the Slurm plugin: srun resolves the
    /// command on the submit host, where `/usr/bin/python3` may be the
    /// image's `/usr/local/bin/python3`).
    pub argv0_fallback: bool,
    /// A missing working directory is created (Docker's way); false: it
    /// is an error (Pyxis's `--container-workdir`).
    pub create_workdir: bool,
    /// The seccomp filter the command runs under.
    pub seccomp: crate::seccomp::Seccomp,
    /// Root emulation (owner and identity calls faked) for `--fakeroot`.
    #[serde(default)]
    pub root_emulation: crate::seccomp::RootEmulation,
    /// An entrypoint to run on its own before the command, whose
    /// environment the command gets (`--entrypoint-first`).
    #[serde(default)]
    pub entrypoint_first: Option<crate::entrypoint_first::EntrypointFirst>,
}

impl Process {
    /// The command's environment: `env`, or what the entrypoint that runs
    /// first left (see [`crate::entrypoint_first`]; exits on its failure).
    pub fn env_after_entrypoint(&self, env: &[(String, String)]) -> Vec<(String, String)> {
        match &self.entrypoint_first {
            Some(first) => crate::entrypoint_first::run(
                first,
                env,
                &self.workdir,
                self.argv0_fallback,
                (&self.seccomp, self.root_emulation.wanted()),
            ),
            None => env.to_vec(),
        }
    }
}

impl Process {
    /// The working directory to create where missing (`/`: none).
    pub fn workdir_to_create(&self) -> &str {
        if self.create_workdir {
            &self.workdir
        } else {
            "/"
        }
    }
}

fn env_strings<S: serde::Serializer>(
    env: &[(String, String)],
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    s.collect_seq(env.iter().map(|(k, v)| format!("{k}={v}")))
}

/// Who the caller is inside.
#[derive(Debug, Clone, Serialize)]
pub struct Identity {
    /// Id mapping.
    pub mode: IdMode,
    /// The caller's uid on the host.
    pub uid: u32,
    /// The caller's gid on the host.
    pub gid: u32,
    /// `/etc/passwd` line to add.
    pub passwd_line: Option<String>,
    /// `/etc/group` line to add.
    pub group_line: Option<String>,
}

/// The image a container runs.
#[derive(Debug, Clone, Serialize)]
pub struct ImageSpec {
    /// The image id (keys the keeper).
    pub id: String,
    /// The image's squashfs file.
    pub squashfs: PathBuf,
    /// Where the squashfs starts in that file (an Apptainer SIF's
    /// partition; 0 for berth's own image files).
    #[serde(skip_serializing_if = "is_zero")]
    pub offset: u64,
    /// The root of the file's verity table, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verity: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Everything needed to start one container.
#[derive(Debug, Clone, Serialize)]
pub struct RunSpec {
    /// The container's id in the OCI state (`--name`, else generated).
    pub id: String,
    /// The image.
    pub image: ImageSpec,
    /// The command.
    #[serde(flatten)]
    pub process: Process,
    /// Who the caller is inside.
    pub identity: Identity,
    /// Binds, all of them, in mount order.
    pub binds: Vec<Bind>,
    /// What the keeper may prepare once for all default runs of the user;
    /// `binds` then holds the template's binds and `extra_binds`.
    pub template: Option<Template>,
    /// The run's binds that are not in the template (current directory, -v).
    pub extra_binds: Vec<Bind>,
    /// Writable overlay.
    pub writable: bool,
    /// `--overlay DIR[:ro]`: a persistent layer on the host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overlay: Option<rootfs::PersistentOverlay>,
    /// A writable root's loader cache with the injected libraries, in a
    /// layer above the image (a read-only root has it among its binds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loader_cache: Option<rootfs::LoaderCache>,
    /// Own PID namespace with a reaping init.
    pub pid_ns: bool,
    /// Empty network namespace.
    pub net_none: bool,
    /// Own IPC namespace, with a private /dev/shm.
    #[serde(default)]
    pub ipc_ns: bool,
    /// Own UTS namespace (the hostname can be set inside).
    #[serde(default)]
    pub uts_ns: bool,
    /// OCI hooks to run, each at its stage.
    pub hooks: Vec<Hook>,
    /// Annotations (for hooks' `when` and their OCI state).
    pub annotations: Vec<(String, String)>,
    /// A check inside the container before the command starts.
    #[serde(skip)]
    pub preflight: Option<Preflight>,
    /// Keeper idle time before it unmounts.
    #[serde(serialize_with = "seconds")]
    pub keeper_idle: Duration,
    /// What serves the image to rootless runs.
    pub squashfs_server: berth_config::SquashfsServer,
    /// FUSE or unpacked (rootless runs).
    #[serde(default)]
    pub image_mount: berth_config::ImageMount,
    /// What stacks the container's layer on the image.
    #[serde(default)]
    pub root_overlay: berth_config::RootOverlay,
    /// berth's own binary (to start keepers).
    #[serde(skip)]
    pub berth_exe: PathBuf,
    /// Print start-up phases, counted from this instant.
    #[serde(skip)]
    pub timing: Option<Instant>,
}

/// A duration shown as whole seconds.
pub(crate) fn seconds<S: serde::Serializer>(
    d: &Duration,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_secs())
}

impl RunSpec {
    /// The hooks of this container, with what they see.
    pub fn hooks(&self) -> ContainerHooks<'_> {
        ContainerHooks {
            hooks: &self.hooks,
            id: &self.id,
            annotations: &self.annotations,
            argv: &self.process.argv,
            env: &self.process.env,
            workdir: &self.process.workdir,
        }
    }

    /// Whether a run can start from the keeper's prepared root: it wants the
    /// same template, a read-only image and the host's /proc, and none of its
    /// own binds would cover one of the template's.
    fn uses_template(&self) -> bool {
        let Some(t) = &self.template else {
            return false;
        };
        // The prepared root's /dev has the host's /dev/mqueue.
        !self.writable
            && self.overlay.is_none()
            && !self.pid_ns
            && !self.ipc_ns
            && !self.extra_binds.iter().any(|b| {
                t.binds.iter().any(|tb| {
                    let under = tb.target.strip_prefix(&b.target);
                    under.is_some_and(|rest| rest.starts_with('/') || b.target == "/")
                })
            })
    }

    /// A timing recorder for this run.
    pub(crate) fn timing(&self) -> Timing {
        match self.timing {
            Some(started) => Timing::new(true, started),
            None => Timing::off(),
        }
    }
}

/// A container whose keeper is leased, ready to start.
pub struct Leased<'a> {
    spec: &'a RunSpec,
    lease: KeeperLease,
    timing: Timing,
}

/// Takes a share in the keeper of `spec`'s image (starting it if needed;
/// `image_file` is the image already open, handed to a keeper started
/// now).
pub fn lease<'a>(spec: &'a RunSpec, image_file: Option<&File>) -> Result<Leased<'a>> {
    let mut timing = spec.timing();
    timing.mark("config");
    let data = keeper::data::data_files(&spec.binds)?;
    let lease = keeper::acquire(&KeeperRequest {
        berth_exe: &spec.berth_exe,
        image: &spec.image.squashfs,
        image_offset: spec.image.offset,
        image_verity: spec.image.verity.as_deref(),
        image_id: &spec.image.id,
        mode: spec.identity.mode,
        idle: spec.keeper_idle,
        server: spec.squashfs_server,
        image_mount: spec.image_mount,
        root_overlay: spec.root_overlay,
        template: spec.template.as_ref(),
        image_file,
        data: &data,
    })?;
    timing.mark("keeper");
    Ok(Leased {
        spec,
        lease,
        timing,
    })
}

impl Leased<'_> {
    /// The keeper's lease (a shared container's anchor keeps a share).
    pub(crate) fn keeper(&self) -> &KeeperLease {
        &self.lease
    }

    /// Runs the container and returns its exit code (128+N for death by
    /// signal N).
    pub fn run(self) -> Result<i32> {
        let Leased {
            spec,
            lease,
            timing,
        } = self;
        let set = process::block_watched()?;
        let sync = new_sync(spec)?;
        let pid = match sys::fork().map_err(|e| Error::Setup(format!("fork: {e}")))? {
            Fork::Child => {
                let Err(e) = start_in_child(&LINUX, spec, &lease, timing, sync);
                eprintln!("berth: error: {e}");
                sys::exit_now(crate::error::EXIT_BERTH)
            }
            Fork::Parent(pid) => pid,
        };
        process::not_dumpable();
        let hooks = spec.hooks();
        let bundle = match sync {
            Some(sync) => match hooks.before_start(
                &crate::node::state_dir()?.join("bundles"),
                sync.parent_side(),
            ) {
                Ok(b) => b,
                Err(msg) => {
                    sys::kill(pid, libc::SIGKILL);
                    let _ = process::supervise(pid, &set);
                    eprintln!("berth: error: {msg}");
                    return Ok(crate::error::EXIT_BERTH);
                }
            },
            None => None,
        };
        let exit = process::supervise(pid, &set);
        if let Some((bundle, container_pid)) = bundle {
            hooks.after_stop(&bundle, container_pid);
        }
        drop(lease);
        Ok(exit.as_code())
    }
}

/// The hooks' hand-shake, when there are hooks.
pub(crate) fn new_sync(spec: &RunSpec) -> Result<Option<Sync>> {
    if spec.hooks.is_empty() {
        return Ok(None);
    }
    Sync::new()
        .map(Some)
        .map_err(|e| Error::Setup(format!("pipe: {e}")))
}

/// In the forked child of a run: build the container, then `exec` the
/// command (behind an init when the run has its own PID namespace).
fn start_in_child(
    k: &dyn Kernel,
    spec: &RunSpec,
    lease: &KeeperLease,
    mut timing: Timing,
    sync: Option<Sync>,
) -> Result<std::convert::Infallible> {
    let built = build(k, spec, lease, &mut timing, sync)?;
    let p = &spec.process;
    let env = p.env_after_entrypoint(&built.env);
    let program = process::resolve_or_exit(&p.argv[0], &env, &p.workdir, p.argv0_fallback);
    timing.mark("pivot");
    if spec.pid_ns {
        // PID 1 stays berth: it reaps orphans and forwards signals.
        if let Fork::Parent(command) =
            sys::fork().map_err(|e| Error::Setup(format!("fork: {e}")))?
        {
            process::not_dumpable();
            let exit = process::init_loop(command, &built.signals);
            sys::exit_now(exit.as_code());
        }
    }
    timing.mark("exec");
    let emulate = p.root_emulation.wanted();
    process::exec_command(&program, &p.argv, &env, (&p.seccomp, emulate), timing, &[])
}

/// A container built in the calling process: it is in the container's
/// namespaces, with its root, identity and privileges, ready to `exec`.
pub struct Built {
    /// The command's environment, with what hooks set.
    pub env: Vec<(String, String)>,
    /// The signals the process watches.
    pub signals: sys::SigSet,
    /// The container's own writable layer (a writable root's memory upper
    /// layer), opened `O_PATH` before the pivot hid it: a shared
    /// container's anchor keeps it, so that `berth commit KEY` can save
    /// the container while it runs.
    pub upper: Option<OwnedFd>,
}

/// In a forked child: joins the keeper's namespaces, makes the
/// container's own, assembles its root, runs the hooks of the stages
/// before the command and becomes the container's user.
pub fn build(
    k: &dyn Kernel,
    spec: &RunSpec,
    lease: &KeeperLease,
    timing: &mut Timing,
    mut sync: Option<Sync>,
) -> Result<Built> {
    timing.mark("fork");
    if let Some(userns) = &lease.userns {
        k.setns(userns.as_fd(), Namespace::User)
            .map_err(|e| Error::sys("join the keeper's user namespace", None, e))?;
    }
    // Default runs copy the keeper's prepared root; the others build theirs
    // from the keeper's image mount.
    let prepared = lease
        .template_mntns
        .as_ref()
        .filter(|_| spec.uses_template());
    let base = prepared.unwrap_or(&lease.mntns);
    k.setns(base.as_fd(), Namespace::Mount)
        .map_err(|e| Error::sys("join the keeper's mount namespace", None, e))?;
    let mut flags = UnshareFlags::NEWNS;
    if spec.net_none {
        flags |= UnshareFlags::NEWNET;
    }
    // In the keeper's user namespace, whose capabilities mount the IPC
    // namespace's own mqueue file system on /dev/mqueue.
    if spec.ipc_ns {
        flags |= UnshareFlags::NEWIPC;
    }
    k.unshare(flags)
        .map_err(|e| Error::sys("unshare the container's namespaces", None, e))?;
    // This copy's binds (a root of its own, or the run's own over the
    // prepared one) leave the keeper's mounts out too.
    keeper::keep_out_of_binds(k, &lease.dir);
    if spec.net_none {
        // An empty network namespace has only a downed loopback.
        if let Err(e) = sys::net::loopback_up() {
            tracing::warn!("cannot bring up the loopback interface: {e}");
        }
    }
    timing.mark("namespace");
    // The root's base is mounted before the PID namespace: a
    // fuse-overlayfs server is then a child of this process, outside the
    // container's PIDs (the command stays PID 2 under `--pid`).
    let (image, stage) = (lease.image_mount(), lease.stage());
    let layers = Layers::Overlay {
        image: &image,
        stage: &stage,
        writable: spec.writable,
        persistent: spec.overlay.as_ref(),
        user_xattr: spec.identity.mode.has_user_namespace(),
        apt_hint: spec.process.root_emulation.wanted(),
        loader_cache: spec.loader_cache.as_ref(),
        overlay: spec.root_overlay,
    };
    let base = match prepared {
        Some(_) => None,
        None => Some(rootfs::mount_base(k, layers)?),
    };
    if spec.pid_ns {
        k.unshare(UnshareFlags::NEWPID)
            .map_err(|e| Error::sys("unshare the container's PID namespace", None, e))?;
    }
    let signals = process::watched_signals();
    if spec.pid_ns {
        // The next child is PID 1 of the new namespace; we relay its status.
        if let Fork::Parent(init) = sys::fork().map_err(|e| Error::Setup(format!("fork: {e}")))? {
            // Only the container process talks to berth about hooks.
            drop(sync.take());
            let exit = process::supervise(init, &signals);
            sys::exit_now(exit.as_code());
        }
    }
    // The container process's pid as berth sees it (the host's /proc is
    // still mounted here), for the hooks' OCI state.
    let host_pid: i32 = std::fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str().and_then(|s| s.parse().ok()))
        .unwrap_or(0);
    let hidden = crate::node::state_dir().ok();
    let mut upper = None;
    match base {
        None => {
            let root = stage.join("root");
            let p = &spec.process;
            rootfs::extend_and_pivot(
                k,
                &root,
                &keeper::data::resolve(&spec.extra_binds, &lease.dir),
                p.workdir_to_create(),
                hidden.as_deref(),
            )?;
        }
        Some(base) => {
            if spec.writable && spec.overlay.is_none() {
                upper = Some(open_path_dir(&stage.join("upper"))?);
            }
            let binds = keeper::data::resolve(&spec.binds, &lease.dir);
            // A persistent overlay's directory too: its layer changes only
            // through the overlay, never under a live commit's walk.
            let overlay_dir = spec.overlay.as_ref().map(|o| &o.dir);
            let overlay_dir = overlay_dir.and_then(|d| std::fs::canonicalize(d).ok());
            let hidden_dirs: Vec<_> = hidden
                .iter()
                .chain(&overlay_dir)
                .map(|p| p.as_path())
                .collect();
            let plan = RootfsPlan {
                profile: Profile::Container,
                layers,
                fresh_proc: spec.pid_ns,
                binds: &binds,
                passwd_line: spec.identity.passwd_line.as_deref(),
                group_line: spec.identity.group_line.as_deref(),
                workdir: spec.process.workdir_to_create(),
                confined: spec.identity.mode == IdMode::HostRoot,
                hidden: &hidden_dirs,
                own_ipc: spec.ipc_ns,
            };
            rootfs::assemble_on(k, &plan, base)?;
        }
    }
    timing.mark("mount");
    if let Some(check) = &spec.preflight {
        (check.0)().map_err(Error::Setup)?;
    }
    // Hooks: berth runs createRuntime and createContainer now; their
    // variables join the command's environment.
    let mut env = spec.process.env.clone();
    if let Some(sync) = sync.take() {
        match sync.child_ready(host_pid) {
            Some(extra) => set_all(&mut env, extra),
            // berth said why; stop quietly.
            None => sys::exit_now(crate::error::EXIT_BERTH),
        }
    }
    let workdir = &spec.process.workdir;
    std::env::set_current_dir(workdir).map_err(|e| {
        Error::Setup(format!(
            "working directory {workdir:?} is not usable in the container: {e}"
        ))
    })?;
    become_user(k, spec, lease)?;
    own_uts(k, spec)?;
    k.set_no_new_privs()
        .map_err(|e| Error::sys("set no_new_privs", None, e))?;
    // startContainer hooks run in the container, their paths the image's.
    let hooks = spec.hooks();
    if hooks.any_at("startContainer") {
        let set = hooks
            .start_container(host_pid, &env)
            .map_err(Error::Setup)?;
        set_all(&mut env, set);
    }
    Ok(Built {
        env,
        signals,
        upper,
    })
}

/// `dir` opened `O_PATH`, a directory and not a symlink.
fn open_path_dir(dir: &std::path::Path) -> Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rustix::fs::open(dir, flags, Mode::empty()).map_err(|e| Error::io("open", dir, e.into()))
}

/// Sets each of `vars` in `env`, replacing earlier values.
fn set_all(env: &mut Vec<(String, String)>, vars: Vec<(String, String)>) {
    for (k, v) in vars {
        env.retain(|(n, _)| *n != k);
        env.push((k, v));
    }
}

mod identity;
#[cfg(test)]
mod tests;
