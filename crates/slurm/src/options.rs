//! The plugin's options (Pyxis's names, plus berth's own) and what they
//! become: the `berth run` command line a task is started with. Pure, so
//! it is tested without Slurm.

use crate::mounts::Mount;

/// How the tasks of a step on one node get their containers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// One container per node and step; every task joins it.
    #[default]
    Shared,
    /// One container per task.
    PerTask,
}

/// The options as the user gave them (`srun --container-...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// `--container-image`.
    pub image: Option<String>,
    /// `--container-mounts` binds, as berth's `-v` (each Pyxis entry
    /// `SRC[:DST[:FLAGS]]`, see [`crate::mounts`]).
    pub mounts: Vec<String>,
    /// `--container-mounts` tmpfs entries, as berth's `--tmpfs`.
    pub tmpfs: Vec<String>,
    /// `--container-mounts` umount entries, as berth's `--umount`.
    pub umount: Vec<String>,
    /// `--container-workdir`.
    pub workdir: Option<String>,
    /// `--container-name`.
    pub name: Option<String>,
    /// `--container-name`'s `:FLAG`.
    pub name_flag: NameFlag,
    /// `--container-writable` (vs `--container-readonly`, the default).
    pub writable: bool,
    /// `--container-mount-home` (default) or `--no-container-mount-home`.
    pub mount_home: bool,
    /// `--container-remap-root` (root inside) or not (the default).
    pub remap_root: bool,
    /// `--container-entrypoint` (run the image's entrypoint first, on its
    /// own; off by default, as in Pyxis).
    pub entrypoint: bool,
    /// `--container-entrypoint-log` (show the entrypoint's output).
    pub entrypoint_log: bool,
    /// `--container-env`: variables whose host value wins over the image's.
    pub env: Vec<String>,
    /// `--container-mode`.
    pub mode: Mode,
    /// `--container-gpus`.
    pub gpus: Option<String>,
    /// `--container-modules` (`mpi` is the host MPI, `berth run --mpi`).
    pub modules: Vec<String>,
    /// `--container-unshare`: `net`, `ipc`, `uts`.
    pub unshare: Vec<String>,
    /// `--environment`: an environment definition file (CSCS's EDF).
    pub environment: Option<String>,
    /// `--container-save`: the container's root saved as a squashfs file
    /// when the task ends.
    pub save: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            image: None,
            mounts: Vec::new(),
            tmpfs: Vec::new(),
            umount: Vec::new(),
            workdir: None,
            name: None,
            name_flag: NameFlag::Auto,
            writable: false,
            mount_home: true,
            remap_root: false,
            entrypoint: false,
            entrypoint_log: false,
            env: Vec::new(),
            mode: Mode::Shared,
            gpus: None,
            modules: Vec::new(),
            unshare: Vec::new(),
            environment: None,
            save: None,
        }
    }
}

/// What `--container-name=NAME:FLAG` asks of a named container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NameFlag {
    /// `auto` (the default): join it if it runs on the node, else start it
    /// from its changes (create it if the job has none on the node).
    #[default]
    Auto,
    /// `create`: it must not exist yet.
    Create,
    /// `exec`: it must run; the task joins it.
    Exec,
    /// `no_exec`: Pyxis starts a second instance on the same files where
    /// one runs; overlayfs cannot share a writable layer, so berth joins
    /// the one that runs, as `auto`.
    NoExec,
}

/// Which step a task belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The batch script (sbatch).
    Batch,
    /// An interactive allocation's shell step (salloc).
    Interactive,
    /// A numbered step (srun).
    Id(u32),
}

/// The task being started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    /// The job id.
    pub job_id: u32,
    /// The step.
    pub step: Step,
    /// The task's command line, as Slurm would run it.
    pub argv: Vec<String>,
    /// The task's working directory (the job's; berth binds it).
    pub cwd: Option<String>,
    /// The node's name in Slurm (`SLURMD_NODENAME`): slurmd's running
    /// on one host (Slurm's multiple-slurmd mode, the test cluster) have
    /// their containers apart.
    pub node: Option<String>,
    /// The step has more than one task on this node.
    pub several_on_node: bool,
}

/// How the site keeps named containers (plugstack.conf).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamedSite {
    /// `container_scope=global`: named containers outlive their job, as
    /// berth's named containers (`berth run --name`) in the user's store.
    pub global: bool,
}

impl NamedSite {
    /// Named containers of the job (`container_scope=job`, the default):
    /// their changes are kept on the node until the job ends, and each
    /// step starts them anew from those.
    pub const fn job() -> Self {
        NamedSite { global: false }
    }
}

/// A comma-separated list; an empty item (`A,,B`, `A,`) is an error.
fn comma_list(name: &str, value: &str) -> Result<Vec<String>, String> {
    value
        .split(',')
        .map(str::trim)
        .map(|s| {
            if s.is_empty() {
                Err(format!("--{name}={value}: an empty item in the list"))
            } else {
                Ok(s.to_string())
            }
        })
        .collect()
}

/// Sets option `name` from its value (`None` for flags); an error says
/// what is wrong with the value.
pub fn apply(opts: &mut Options, name: &str, value: Option<&str>) -> Result<(), String> {
    let need = |v: Option<&str>| -> Result<String, String> {
        match v.map(str::trim).filter(|v| !v.is_empty()) {
            Some(v) => Ok(v.to_string()),
            None => Err(format!("--{name} needs a value")),
        }
    };
    match name {
        "container-image" => opts.image = Some(need(value)?),
        "environment" => opts.environment = Some(need(value)?),
        "container-save" => {
            let path = need(value)?;
            if path.ends_with('/') {
                return Err(format!("--{name}={path}: names a directory; give a file (DIR/NAME.sqsh)"));
            }
            // Always a file to berth run, never an image name.
            opts.save = Some(if path.starts_with(['/', '.']) { path } else { format!("./{path}") });
        }
        "container-mounts" => {
            for m in comma_list(name, &need(value)?)? {
                // Repeated entries are skipped, as Pyxis does.
                match crate::mounts::parse(&m)? {
                    Mount::Bind(b) if !opts.mounts.contains(&b) => opts.mounts.push(b),
                    Mount::Tmpfs(t) if !opts.tmpfs.contains(&t) => opts.tmpfs.push(t),
                    Mount::Umount(u) if !opts.umount.contains(&u) => opts.umount.push(u),
                    _ => {}
                }
            }
        }
        "container-workdir" => opts.workdir = Some(workdir(&need(value)?)),
        "container-name" => {
            let given = need(value)?;
            let (n, flag) = given.split_once(':').unwrap_or((&given, "auto"));
            opts.name_flag = match flag {
                "auto" => NameFlag::Auto,
                "create" => NameFlag::Create,
                "exec" => NameFlag::Exec,
                "no_exec" => NameFlag::NoExec,
                other => {
                    return Err(format!(
                        "--container-name={given}: unknown flag {other:?} (auto, create, exec or no_exec)"
                    ))
                }
            };
            let n = n.to_string();
            // The node's rule, checked at submission.
            if !berth_config::names::name_ok(&n) {
                return Err(format!(
                    "--container-name={n:?}: {}",
                    berth_config::names::NAME_RULE
                ));
            }
            opts.name = Some(n);
        }
        "container-writable" => opts.writable = true,
        "container-readonly" => opts.writable = false,
        "container-mount-home" => opts.mount_home = true,
        "no-container-mount-home" => opts.mount_home = false,
        "container-remap-root" => opts.remap_root = true,
        "no-container-remap-root" => opts.remap_root = false,
        "container-entrypoint" => opts.entrypoint = true,
        "no-container-entrypoint" => opts.entrypoint = false,
        "container-entrypoint-log" => opts.entrypoint_log = true,
        // Only as PYXIS_CONTAINER_ENTRYPOINT_LOG=0 (Pyxis has no such flag).
        "no-container-entrypoint-log" => opts.entrypoint_log = false,
        "container-env" => opts.env.extend(comma_list(name, &need(value)?)?),
        "container-mode" => {
            opts.mode = match need(value)?.as_str() {
                "shared" => Mode::Shared,
                "per-task" => Mode::PerTask,
                other => {
                    return Err(format!(
                        "--container-mode={other}: use shared (one container per node that tasks join) or per-task"
                    ))
                }
            }
        }
        "container-gpus" => opts.gpus = Some(need(value)?),
        "container-modules" => opts.modules.extend(comma_list(name, &need(value)?)?),
        "container-unshare" => {
            for ns in comma_list(name, &need(value)?)? {
                if !matches!(ns.as_str(), "net" | "ipc" | "uts") {
                    return Err(format!(
                        "--container-unshare: unknown namespace {ns:?} (net, ipc or uts)"
                    ));
                }
                if !opts.unshare.contains(&ns) {
                    opts.unshare.push(ns);
                }
            }
        }
        other => return Err(format!("unknown option --{other}")),
    }
    Ok(())
}

/// A working directory inside the container as Pyxis takes it: a relative
/// one is from `/`, and `..` stops at `/`.
fn workdir(dir: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in dir.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    format!("/{}", parts.join("/"))
}

/// The options registered with Slurm: (name, value's name or `None` for a
/// flag, usage).
pub const OPTIONS: &[(&str, Option<&str>, &str)] = &[
    ("container-image", Some("IMAGE"), "[berth] run the tasks in a container of IMAGE (a registry reference, enroot's REGISTRY#IMAGE, a name or id in the berth store, or a SIF or squashfs file: ./image.sqsh)"),
    ("container-mounts", Some("SRC[:DST[:FLAGS]],..."), "[berth] bind host paths into the container (SRC a path, or tmpfs; FLAGS joined by +: ro, rw, noexec, rprivate, unbindable...)"),
    ("container-workdir", Some("DIR"), "[berth] working directory inside the container"),
    ("container-name", Some("NAME[:auto|create|exec|no_exec]"), "[berth] a named container: its changes stay on the node until the job ends, and later steps start it from them (or join it while it runs), with or without --container-image"),
    ("container-writable", None, "[berth] make the container's file system writable (changes live in memory)"),
    ("container-readonly", None, "[berth] keep the container's file system read-only (default)"),
    ("container-mount-home", None, "[berth] bind the user's home directory (default)"),
    ("no-container-mount-home", None, "[berth] do not bind the user's home directory"),
    ("container-remap-root", None, "[berth] be root inside the container (mapped to you)"),
    ("no-container-remap-root", None, "[berth] be yourself inside the container (default)"),
    ("container-entrypoint", None, "[berth] run the image's entrypoint first, on its own (output hidden), then the command in the environment it left"),
    ("no-container-entrypoint", None, "[berth] do not run the image's entrypoint (default)"),
    ("container-entrypoint-log", None, "[berth] show the output of the entrypoint that --container-entrypoint runs (hidden by default)"),
    ("container-env", Some("NAME[,NAME...]"), "[berth] these variables take the job's value over the image's"),
    ("container-mode", Some("shared|per-task"), "[berth] one container per node that all tasks join (shared, default) or one per task"),
    ("container-gpus", Some("all|LIST"), "[berth] GPUs to give the container (berth run --gpus)"),
    ("container-modules", Some("NAME[,NAME...]"), "[berth] site modules to apply; mpi replaces the image's MPI with the host's"),
    ("container-save", Some("PATH"), "[berth] when the step ends, save the container's root as a squashfs file (PATH, relative to the job's directory): the tasks get containers of their own (one task per node)"),
    ("environment", Some("NAME|PATH"), "[berth] run as the environment definition file says (CSCS's EDF: NAME.toml in EDF_PATH or ~/.edf, or a path); --container-* options add to it"),
    ("container-unshare", Some("net,ipc,uts"), "[berth] namespaces of the container's own (the node's tasks share them): net (no network but loopback), ipc, uts"),
];

/// Whether `name` is a step of job `job` (`JOB.STEP`, the name Pyxis gives
/// a step's unnamed container): a step that names it joins that step's
/// container while it runs.
fn names_a_step(name: &str, job: u32) -> bool {
    name.split_once('.').is_some_and(|(j, step)| {
        j == job.to_string() && !step.is_empty() && step.bytes().all(|b| b.is_ascii_digit())
    })
}

/// The shared container key of a task's step (or of its named container).
pub fn key(opts: &Options, task: &Task) -> String {
    let base = match (&opts.name, task.step) {
        (Some(name), _) if names_a_step(name, task.job_id) => format!("slurm-{name}"),
        (Some(name), _) => format!("slurm-{}-{name}", task.job_id),
        (None, Step::Batch) => format!("slurm-{}.batch", task.job_id),
        (None, Step::Interactive) => format!("slurm-{}.interactive", task.job_id),
        (None, Step::Id(n)) => format!("slurm-{}.{n}", task.job_id),
    };
    let node: String = task
        .node
        .as_deref()
        .unwrap_or_default()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        .take(48)
        .collect();
    if node.is_empty() {
        base
    } else {
        format!("{base}.{node}")
    }
}

/// The `berth run` command line for `task`: `berth` is the binary, `image`
/// the image as resolved for the job (its id; `None` for a step that names
/// a container but no image: it joins the container as it runs),
/// `extra_binds` binds the step needs (the batch script's directory),
/// `named` how the site keeps named containers.
pub fn berth_argv(
    berth: &str,
    opts: &Options,
    image: Option<&str>,
    task: &Task,
    extra_binds: &[String],
    named: NamedSite,
) -> Vec<String> {
    let mut a: Vec<String> = vec![
        berth.into(),
        "run".into(),
        "--argv0-fallback".into(),
        "--env-below-image".into(),
    ];
    // A named container of global scope is berth's named container in the
    // user's store, each task's own (several tasks of a node stack it
    // read-only); of the job's scope, a shared container of the node.
    // A name of another step's unnamed container joins it while it runs.
    let step = opts
        .name
        .as_deref()
        .is_some_and(|n| names_a_step(n, task.job_id));
    let global = opts.name.as_ref().filter(|_| named.global && !step);
    // A saved container is the task's own: a shared one outlives it.
    let shared = (opts.mode == Mode::Shared || opts.name.is_some())
        && opts.save.is_none()
        && global.is_none();
    // A named container is joined as it runs (Pyxis's auto): its image and
    // options are those it was made with. One that does not run is started
    // again from its changes, with the step's options.
    let reuse = match (image, opts.name_flag) {
        _ if step => "running",
        (_, NameFlag::Exec) if !named.global => "running",
        (_, NameFlag::Exec) => "existing",
        (None, _) => "existing",
        (_, NameFlag::Create) => "new",
        (_, NameFlag::Auto | NameFlag::NoExec) => "any",
    };
    if shared {
        a.push("--shared".into());
        a.push(key(opts, task));
        if let Some(name) = &opts.name {
            a.extend(["--reuse".into(), reuse.into()]);
            // The changes are kept on the node for the job's later steps
            // (`:exec` and a step's name only join the container that runs).
            if reuse != "running" {
                a.extend(["--name".into(), name.clone()]);
                if !opts.writable {
                    a.push("--name-readonly".into());
                }
            }
        }
    }
    if let Some(name) = global {
        a.extend([
            "--name".into(),
            name.clone(),
            "--reuse".into(),
            reuse.into(),
        ]);
        if task.several_on_node {
            a.push("--name-readonly".into());
        }
    }
    // An environment file says whether the entrypoint runs (by default
    // it does, as in CSCS's Container Engine).
    if opts.entrypoint {
        // Pyxis's way: the entrypoint runs on its own first, its output
        // hidden, and the task's command in the environment it left.
        a.push("--entrypoint-first".into());
    } else if opts.environment.is_none() {
        a.push("--entrypoint=".into());
    }
    // Also for an environment file, which runs the entrypoint first.
    if opts.entrypoint_log && (opts.entrypoint || opts.environment.is_some()) {
        a.push("--entrypoint-log".into());
    }
    for m in opts.mounts.iter().chain(extra_binds) {
        a.push("-v".into());
        a.push(m.clone());
    }
    for t in &opts.tmpfs {
        a.push("--tmpfs".into());
        a.push(t.clone());
    }
    for u in &opts.umount {
        a.push("--umount".into());
        a.push(u.clone());
    }
    // The directory the user named, else (as Pyxis) the image's WORKDIR or
    // /. A batch script runs in the job's directory: an srun in it starts
    // from there, and the image's WORKDIR may not exist on the host.
    let batch = matches!(task.step, Step::Batch | Step::Interactive);
    match opts
        .workdir
        .as_ref()
        .or(task.cwd.as_ref().filter(|_| batch))
    {
        Some(w) => {
            a.extend(["-w".into(), w.clone()]);
            // A directory the user named must exist, as in Pyxis; the
            // job's own directory is created where the image lacks it.
            if opts.workdir.is_some() {
                a.push("--workdir-must-exist".into());
            }
        }
        None => a.push("--workdir-image".into()),
    }
    for e in &opts.env {
        a.push("-e".into());
        a.push(e.clone());
    }
    if opts.writable {
        a.push("--writable".into());
    }
    if let Some(path) = &opts.save {
        a.extend(["--save".into(), path.clone()]);
    }
    if !opts.mount_home {
        a.push("--no-home".into());
    }
    if opts.remap_root {
        a.push("--fakeroot".into());
    }
    if !opts.unshare.is_empty() {
        a.push("--unshare".into());
        a.push(opts.unshare.join(","));
    }
    if let Some(g) = &opts.gpus {
        a.push("--gpus".into());
        a.push(g.clone());
    }
    for m in &opts.modules {
        if m == "mpi" {
            a.push("--mpi".into());
        } else {
            a.push("--module".into());
            a.push(m.clone());
        }
    }
    if let Some(edf) = &opts.environment {
        a.extend(["--environment".into(), edf.clone()]);
        a.extend(
            image
                .into_iter()
                .flat_map(|i| ["--image".to_string(), i.to_string()]),
        );
    } else if !matches!(reuse, "existing" | "running") || !(shared || global.is_some()) {
        a.extend(image.map(str::to_string));
    }
    a.extend(task.argv.iter().cloned());
    a
}

/// Under `--container-remap-root` with the home bound, the home is also
/// root's (`HOME:/root`), as enroot mounts it: root's HOME is /root there.
pub fn root_home_bind(opts: &Options, home: Option<&str>) -> Option<String> {
    let home = home?.trim_end_matches('/');
    let plain = home.starts_with('/') && !home.contains([':', ',']) && home != "/root";
    (opts.remap_root && opts.mount_home && plain && !home.is_empty())
        .then(|| format!("{home}:/root"))
}

#[cfg(test)]
mod tests;
