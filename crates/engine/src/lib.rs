//! berth's run path between a front end and the runtime.
//!
//! A front end (the command line; later the Slurm plugin) builds a
//! [`RunRequest`], plain data. [`prepare`] resolves it against the
//! configuration and the [`Caller`] into one [`Launch`]: the image, the
//! identity, every bind, the injected host resources, hooks and the
//! environment. A `Launch` serialises to what `--dry-run` prints, and
//! [`run`] starts it. [`start`] does both, and retries once when a
//! node-local record named an image file that has gone.
//!
//! Modules, each a step of the resolution: [`image`] (which image),
//! [`identity`] (who inside), [`inject`] (host resources), [`binds`]
//! (what is bound), [`node_cache`] (the node's copy of records by id).

#![forbid(unsafe_code)]

use std::fs::File;
use std::time::Duration;

use berth_config::Config;
use berth_runtime::container::{ImageSpec, Process, RunSpec};
use berth_runtime::entrypoint_first::EntrypointFirst;
use berth_runtime::seccomp::{RootEmulation, Seccomp};
use berth_runtime::semantics::{self, ImageDefaults, UserRequest};
use berth_runtime::shared::{self, NamedPlan, Placement};
use berth_runtime::IdMode;
use serde::Serialize;

use attach::{attached, slurm_step, Unshare};

mod attach;
pub mod binds;
pub mod caller;
pub mod doctor;
pub mod entrypoint;
pub mod environment;
mod error;
pub mod hand_over;
pub mod identity;
pub mod image;
pub mod inject;
pub mod launcher;
pub mod ld_cache;
pub mod named;
pub mod node_cache;
pub mod overlay;
pub mod request;
pub mod save;
mod start;

pub use caller::Caller;
pub use error::{Error, Result};
pub use request::{RunRequest, SharedRequest};
pub use start::{run, start};

/// A run resolved: everything the runtime needs, and what the run holds
/// until the container starts. Serialised, it is the `--dry-run` plan.
#[derive(Debug, Serialize)]
pub struct Launch {
    /// The container the runtime starts.
    #[serde(flatten)]
    pub spec: RunSpec,
    /// The host resources injected (site modules, devices, MPI, hooks).
    pub injected: berth_inject::Plan,
    /// The shared container the command joins, if any.
    pub shared: Option<Placement>,
    /// `--save`: what becomes of the container's root when it ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub save: Option<save::SaveJob>,
    /// The command's environment has values worked out from the task's
    /// own (its rank, its GPUs): no other task can join with it.
    #[serde(skip)]
    pub per_task_env: bool,
    /// The names of the command's environment that are the caller's own
    /// values (for tasks joining in place: each keeps its own).
    #[serde(skip)]
    pub passed: Vec<String>,
    /// Held until the container starts.
    #[serde(skip)]
    held: Held,
}

/// What a run holds between resolution and start.
#[derive(Debug, Default)]
struct Held {
    /// The image's squashfs file, when the store was read now.
    image_file: Option<File>,
    /// The node's lock of the image's record, when this run read the store.
    node_lock: Option<node_cache::NodeLock>,
    /// The `--overlay` directory's lock, held until the container ends.
    overlay: Option<File>,
}

impl Launch {
    /// Warnings of the host-resource plan, for the front end to show.
    pub fn warnings(&self) -> &[String] {
        &self.injected.warnings
    }
}

/// `--security-opt` values: `seccomp=default|unconfined|FILE` (the last
/// wins), for a command in `mode` (a profile's `includes` depend on it).
pub fn security_options(opts: &[String], mode: IdMode) -> Result<Seccomp> {
    let mut seccomp = Seccomp::Default;
    for opt in opts {
        match opt.split_once('=') {
            Some(("seccomp", v)) => seccomp = Seccomp::parse(v, mode)?,
            _ => {
                return Err(Error::Usage(format!(
                    "--security-opt {opt:?}: berth knows seccomp=default, seccomp=unconfined and seccomp=FILE (a Docker or OCI seccomp profile)"
                )))
            }
        }
    }
    Ok(seccomp)
}

/// Resolves `req` for `caller` under `config`. `trust_cache: false`
/// ignores the node's copy of the image's record.
pub fn prepare(
    config: &Config,
    req: &RunRequest,
    caller: &Caller,
    trust_cache: bool,
) -> Result<Launch> {
    // A run that joins whatever container runs under its key takes that
    // container's image and identity; its own binds cannot apply.
    let step = slurm_step(caller);
    let attached = attached(req, step.as_deref())?;
    let owned;
    let req = match &attached {
        Some(info) => {
            owned = RunRequest {
                image: info.image_id.clone(),
                fakeroot: info.mode == IdMode::FakeRoot,
                ..req.clone()
            };
            &owned
        }
        None => req,
    };
    // A named container may run its own image (`--reuse existing|any`).
    // One that runs is joined as it is.
    let named_at = match req.kept_name().filter(|_| attached.is_none()) {
        Some(name) => {
            let key = req.shared.as_ref().map(|s| s.key.as_str());
            Some((name, named::dir_of(config, name, key)?))
        }
        None => None,
    };
    let owned_named;
    let own_image = match &named_at {
        Some((name, dir)) => {
            let on_node = (req.shared.is_some(), step.as_deref());
            named::image_of(config, (name, dir), req.name_reuse, on_node)?
        }
        None => None,
    };
    let req = match own_image {
        Some(image) => {
            owned_named = RunRequest {
                image,
                ..req.clone()
            };
            &owned_named
        }
        None => req,
    };
    let mode = identity::id_mode(caller, req.fakeroot);
    // Bad options fail before anything is pulled or started.
    let own = Unshare::parse(&req.unshare)?;
    if let Some(info) = &attached {
        own.check_joinable(info)?;
    }
    let seccomp = security_options(&req.security_opt, mode)?;
    let root_emulation = root_emulation(req.root_emulation.as_deref(), mode)?;
    if let Some(s) = &req.shared {
        shared::validate_key(&s.key)?;
        if mode == IdMode::HostRoot {
            return Err(Error::Usage(
                "shared containers (--shared, Slurm's per-node containers) are not supported as real root: their tasks share the host's PID namespace, where a root container could signal any process; run as a user, or without --shared".into(),
            ));
        }
    }
    if (req.overlay.is_some() || req.save.is_some()) && req.shared.is_some() {
        return Err(Error::Usage(
            "--overlay and --save are for a container of its own: a shared container (--shared, Slurm's per-node containers) outlives the run that made it, while the overlay is locked for one run; give the container --writable, or run without --shared".into(),
        ));
    }
    let found = image::find(config, &req.image, trust_cache)?;
    let img = &found.image;
    let run = &img.record.run;
    let defaults = ImageDefaults {
        env: run.env.clone(),
        entrypoint: run.entrypoint.clone(),
        cmd: run.cmd.clone(),
        workdir: run.workdir.clone(),
    };
    let user = user_request(req)?;
    let (argv, first) = if req.entrypoint_first {
        let (cmd, entrypoint) = semantics::command_apart(&defaults, &user)?;
        let first = (!entrypoint.is_empty()).then_some(EntrypointFirst {
            argv: entrypoint,
            log: req.entrypoint_log,
            sees: None,
            after: Vec::new(),
        });
        (cmd, first)
    } else {
        (semantics::command_line(&defaults, &user)?, None)
    };
    let inside = identity::inside(mode, caller);
    let fixed = identity::fixed_env(&inside, &caller.hostname);
    let env = semantics::environment(&defaults, &user, &caller.env, &fixed)?;
    // Under the plugin's policy the entrypoint that runs first sees less
    // of the task's environment than the command (Pyxis's split).
    let entry_env = match (&first, req.env_below_image) {
        (Some(_), true) => {
            let host = entrypoint::imported(&caller.env, &req.env);
            Some(semantics::environment(&defaults, &user, &host, &fixed)?)
        }
        _ => None,
    };
    let image_env: Vec<(String, String)> = run
        .env
        .iter()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let launcher = launcher::pytorch(&image_env, &caller.env, &env);
    let cwd = caller.cwd.to_str().filter(|_| !req.workdir_image);
    let workdir = semantics::workdir(&defaults, &user, cwd)?;
    // Host resources: what every run gets (site modules that apply always:
    // prepared once, with the user's other common binds) and what this run
    // asks for.
    let annotations = inject::annotations(&req.annotations)?;
    // The GPU variables as -e and --env-file set them, else the task's.
    let asked_env: Vec<(String, String)> = inject::set_by_user(&user, &env)
        .into_iter()
        .chain(caller.env.iter().cloned())
        .collect();
    let (always, requested) = inject::plans(
        config,
        req,
        &argv[0],
        &annotations,
        (&asked_env, &image_env),
    )?;
    // The image's loader cache with the injected libraries: bound over
    // the image's, or in a layer above it for a writable root. Whether the
    // container has it: a run that joins a running container finds that
    // container's root, not its own.
    let (mut site_always, mut injected) = (inject::binds(&always), inject::binds(&requested));
    let placed = ld_cache::place(
        img,
        ld_cache::Root::of(req, attached.is_some()),
        (&always, &mut site_always),
        (&requested, &mut injected),
    );
    let loader = placed.loader();
    // The rest of an environment: the launcher's variables, the unset
    // names gone, the host resources' variables.
    let finish = |mut e: Vec<(String, String)>, launcher: &[(String, String)]| {
        e.extend(launcher.iter().cloned());
        e.retain(|(k, _)| !req.unset_env.contains(k));
        always.apply_env(&mut e, loader);
        requested.apply_env(&mut e, loader);
        e
    };
    let env = finish(env, &launcher);
    let entry_env = entry_env.map(|e| finish(e, &launcher));
    // For tasks joining in place: the names each keeps its own value of,
    // and whether a value is worked out from the task's own (its rank;
    // its GPUs, which the injection plans chose from its variables). The
    // environment is built again as above, from marked values.
    let (passed, derived) = match &req.shared {
        Some(s) if s.hand_over => hand_over::own_values(&caller.env, |host| {
            let e = semantics::environment(&defaults, &user, host, &fixed)?;
            let launcher = launcher::pytorch(&image_env, host, &e);
            Ok(finish(e, &launcher))
        })?,
        _ => (Vec::new(), false),
    };
    let per_task_env = derived
        || [&always, &requested]
            .iter()
            .any(|p| p.env.iter().any(|e| e.name.ends_with("_VISIBLE_DEVICES")));
    // The split: the entrypoint sees its own environment, and the
    // command's goes under what it leaves, with the named variables (as
    // the command would have them: injected paths kept) over both.
    let first = first.map(|mut first| {
        if entry_env.is_some() {
            first.after = entrypoint::named(&env, &req.env);
            first.sees = entry_env;
        }
        first
    });
    // An IPC namespace of its own comes with a /dev/shm of its own.
    let mut tmpfs = req.tmpfs.clone();
    if own.ipc {
        tmpfs.push("/dev/shm:mode=1777".to_string());
    }
    let run_binds = binds::run_binds(binds::BindInputs {
        site: &config.runtime.binds,
        home: caller.home.as_deref(),
        no_home: req.no_home,
        host_root: mode == IdMode::HostRoot,
        cwd: &caller.cwd,
        volumes: &req.volumes,
        tmpfs: &tmpfs,
        umount: &req.umount,
        site_always,
        injected,
    })?;
    // A run with its own device or library binds does not use the keeper's
    // prepared root: their mount points would stay behind in the shared
    // /dev and upper layer, where later runs would find them. Nor does
    // real root: each of its runs gets its own /proc and /tmp.
    let use_template = !req.no_home
        && req.umount.is_empty()
        && requested.binds().is_empty()
        && mode != IdMode::HostRoot;
    let mut plan = always;
    plan.extend(requested);
    if let Some(info) = &attached {
        let own: Vec<&str> = req
            .volumes
            .iter()
            .chain(&req.tmpfs)
            .map(String::as_str)
            .collect();
        if !own.is_empty() {
            plan.warnings.push(format!(
                "ignoring --container-mounts/-v ({}) when attaching to the running container {}: its mounts stay as they are",
                own.join(", "),
                info.key
            ));
        }
    }
    let identity = identity::identity(mode, caller, &inside)?;
    let save_target = req
        .save
        .as_deref()
        .map(|t| save::Target::parse(t, &caller.cwd))
        .transpose()?;
    if save_target.is_some() && img.record.squashfs.offset != 0 {
        return Err(Error::Usage(
            "--save of an image run in place from a SIF file is not offered: import it first (berth import sif:FILE NAME), then run that".into(),
        ));
    }
    // A named container keeps its changes in the store, in an overlay
    // directory of its name.
    let named_dir = match &named_at {
        Some((name, dir)) => {
            if req.overlay.is_some() {
                return Err(Error::Usage(
                    "--name keeps the container's changes under its name: give --name or --overlay DIR, not both (--name with --rm keeps nothing)".into(),
                ));
            }
            // A file image is recorded by its absolute path, for a later
            // `berth commit NAME` from anywhere.
            let image = match berth_image::image_file::names_a_file(&req.image) {
                true => std::path::absolute(&req.image)
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|_| req.image.clone()),
                false => req.image.clone(),
            };
            let on_node = (req.shared.is_some(), step.as_deref());
            let dir = named::prepare(dir, name, (&image, &img.record.id), mode, on_node)?;
            Some(match req.name_readonly {
                true => format!("{}:ro", dir.display()),
                false => dir.display().to_string(),
            })
        }
        None => None,
    };
    // A run that saves without --overlay keeps its changes in a temporary
    // directory of its own.
    let temporary = match (&save_target, req.overlay.is_some() || named_dir.is_some()) {
        (Some(_), false) => Some(save::temporary_overlay(&|k| {
            caller.var(k).map(str::to_string)
        })?),
        _ => None,
    };
    let overlay_spec = req
        .overlay
        .clone()
        .or_else(|| named_dir.clone())
        .or_else(|| temporary.as_ref().map(|t| t.display().to_string()));
    let claimed = overlay_spec
        .as_deref()
        // A shared container's anchor locks it when it is made.
        .map(|o| {
            overlay::claim(
                o,
                &caller.cwd,
                mode != IdMode::HostRoot,
                req.shared.is_none(),
            )
        })
        .transpose()?;
    let save_job = match (save_target, &claimed) {
        (Some(_), Some(c)) if c.overlay.readonly => {
            return Err(Error::Usage(
                "--save with --overlay DIR:ro: the run's changes go to memory and cannot be saved; give --overlay DIR (writable), or no --overlay".into(),
            ))
        }
        (Some(target), Some(c)) => Some(save::SaveJob {
            target,
            upper: c.overlay.upper(),
            temporary: temporary.clone(),
            image: img.squashfs_path(),
            base: img.record.id.clone(),
            run: run.clone(),
            mode,
            config: config.clone(),
        }),
        _ => None,
    };
    let (persistent, overlay_lock) = match claimed {
        Some(c) => (Some(c.overlay), c.lock),
        None => (None, None),
    };
    // A writable persistent layer is the point of the run: the root stays
    // writable.
    let writable = req.writable || persistent.as_ref().is_some_and(|p| !p.readonly);
    let idle = caller
        .var("BERTH_KEEPER_IDLE")
        .and_then(|v| v.parse().ok())
        .unwrap_or(config.runtime.keeper_idle_seconds);
    let timing = req.timing
        || caller
            .var("BERTH_TIMING")
            .is_some_and(|v| v != "0" && !v.is_empty());
    let spec = RunSpec {
        id: req
            .name
            .clone()
            .unwrap_or_else(|| format!("berth-{}", caller.pid)),
        image: ImageSpec {
            id: img.record.id.clone(),
            squashfs: img.squashfs_path(),
            offset: img.record.squashfs.offset,
            verity: img.record.squashfs.verity.clone(),
        },
        process: Process {
            argv,
            env,
            workdir,
            argv0_fallback: req.argv0_fallback,
            // Only a directory the user named must exist; the image's
            // WORKDIR is created where missing, as Docker does.
            create_workdir: !(req.workdir_must_exist && req.workdir.is_some()),
            seccomp,
            root_emulation,
            entrypoint_first: first,
        },
        template: use_template.then(|| berth_runtime::keeper::Template {
            binds: run_binds.common.clone(),
            passwd_line: identity.passwd_line.clone(),
            group_line: identity.group_line.clone(),
        }),
        identity,
        binds: run_binds.all,
        extra_binds: run_binds.extra,
        writable,
        overlay: persistent,
        loader_cache: placed.layer,
        // Real root always gets a PID namespace: its CAP_KILL then reaches
        // the container's processes only.
        pid_ns: req.pid || mode == IdMode::HostRoot,
        net_none: req.net_none || own.net,
        ipc_ns: own.ipc,
        uts_ns: own.uts,
        hooks: inject::hooks(&plan),
        annotations,
        preflight: inject::preflight(&plan),
        keeper_idle: Duration::from_secs(idle),
        squashfs_server: config.runtime.squashfs_server,
        image_mount: config.runtime.image_mount,
        root_overlay: config.runtime.overlay,
        berth_exe: caller.berth_exe.clone(),
        timing: timing.then_some(caller.started),
    };
    Ok(Launch {
        spec,
        injected: plan,
        shared: req.shared.as_ref().map(|s| Placement {
            key: s.key.clone(),
            linger: s.linger,
            image: req.image.clone(),
            reuse: s.reuse,
            hand_over: s.hand_over,
            step: step.clone(),
            named: req.kept_name().map(|_| match &attached {
                Some(info) => NamedPlan::Join {
                    anchor: info.pid,
                    started: info.start_time,
                },
                None => NamedPlan::Fresh,
            }),
        }),
        save: save_job,
        per_task_env,
        passed,
        held: Held {
            image_file: found.file,
            node_lock: found.lock,
            overlay: overlay_lock,
        },
    })
}

/// `--root-emulation` for a command in `mode`: only `--fakeroot` runs get
/// one (`auto` unless asked otherwise).
fn root_emulation(word: Option<&str>, mode: IdMode) -> Result<RootEmulation> {
    let asked = match word {
        None => RootEmulation::Auto,
        Some(w) => RootEmulation::parse(w).ok_or_else(|| {
            Error::Usage(format!(
                "--root-emulation {w:?}: use auto (when you have no subordinate id range), seccomp, subuid or none"
            ))
        })?,
    };
    if mode == IdMode::FakeRoot && asked == RootEmulation::Subuid {
        asked.decide().map_err(Error::Usage)?;
    }
    Ok(match mode {
        IdMode::FakeRoot => asked,
        _ if asked == RootEmulation::Seccomp => {
            return Err(Error::Usage(
                "--root-emulation seccomp is for --fakeroot runs (root inside)".into(),
            ))
        }
        _ => RootEmulation::None,
    })
}

/// The request's command and environment options as Docker's semantics
/// take them (env files read now).
fn user_request(req: &RunRequest) -> Result<UserRequest> {
    let mut env_files = Vec::new();
    for f in &req.env_files {
        let text = std::fs::read_to_string(f).map_err(|source| Error::Read {
            what: "--env-file",
            path: f.clone(),
            source,
        })?;
        env_files.extend(semantics::parse_env_file(&text)?);
    }
    Ok(UserRequest {
        entrypoint: req.entrypoint.clone(),
        args: req.args.clone(),
        env_files,
        env: req.env.clone(),
        env_host: req.env_host,
        env_below_image: req.env_below_image,
        workdir: req.workdir.clone(),
    })
}
