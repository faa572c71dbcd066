//! The SPANK callbacks (not built for unit tests: they need Slurm's
//! symbols, which resolve only inside srun and slurmstepd).

use std::error::Error;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use slurm_spank::{Context, Plugin, SpankHandle, SpankOption, SLURM_VERSION_NUMBER, SPANK_PLUGIN};

use crate::gather::{self, Given};
use crate::options::{self, Options, Step, Task, OPTIONS};

/// `plugin_version`: the Slurm found at build time, else the bindings'.
const VERSION: u32 = if crate::BUILT_FOR != 0 {
    crate::BUILT_FOR
} else {
    SLURM_VERSION_NUMBER
};

SPANK_PLUGIN!(b"berth", VERSION, BerthPlugin);

/// The variable that carries the job's resolved image id from srun to the
/// tasks (a `SLURM_` name: berth passes those into the container, where an
/// srun in a batch script needs it).
const IMAGE_VAR: &str = "SLURM_BERTH_IMAGE";
/// The reference it was resolved from: an srun inside the job (in a batch
/// script) that names the same image uses the job's id, not the tag's
/// digest of the moment.
const REF_VAR: &str = "SLURM_BERTH_IMAGE_REF";
/// The environment file whose image the job pinned (`--environment`).
const EDF_VAR: &str = "SLURM_BERTH_ENVIRONMENT";
const BATCH_STEP: u32 = 0xffff_fffb;
const INTERACTIVE_STEP: u32 = 0xffff_fffa;

#[derive(Default)]
struct BerthPlugin {
    berth: String,
    /// `container_scope=global`: named containers outlive the job.
    global_names: bool,
    /// Site modules every batch script's container gets
    /// (`batch_modules=` in plugstack.conf): the host's Slurm client, so
    /// that an srun in the script starts the job's steps.
    batch_modules: Vec<String>,
    /// The site's defaults (`writable=`, `mount_home=`, `remap_root=` in
    /// plugstack.conf, as enroot's configuration sets Pyxis's).
    site: Options,
    /// The step's tasks on this node that have ended (slurmstepd).
    tasks_exited: u32,
}

type Res = Result<(), Box<dyn Error>>;

fn fail(msg: String) -> Box<dyn Error> {
    msg.into()
}

impl BerthPlugin {
    /// The user's options, checked: srun's command line, else the job's
    /// `PYXIS_CONTAINER_*` variables (read from the job's environment in
    /// slurmstepd, from the process's own in srun, sbatch and salloc).
    fn options(&self, spank: &SpankHandle) -> Result<Options, Box<dyn Error>> {
        let remote = matches!(spank.context()?, Context::Remote);
        let given = |name: &str| -> Given {
            let (_, value, _) = OPTIONS.iter().find(|(n, _, _)| *n == name)?;
            if value.is_some() {
                let v = spank.get_option_value(name).ok().flatten()?;
                Some(Some(v.to_string()))
            } else {
                spank.is_option_set(name).then_some(None)
            }
        };
        let env = |k: &str| {
            if remote {
                spank.getenv(k).ok().flatten()
            } else {
                std::env::var(k).ok()
            }
        };
        gather::gather(&self.site, given, env).map_err(fail)
    }

    /// Pins the step's image: `--container-image`'s, else the environment
    /// file's (read now: a missing or malformed file stops the step here).
    fn pin_for(&self, opts: &Options) -> Res {
        if let Some(image) = &opts.image {
            return self.pin(image);
        }
        let Some(edf) = &opts.environment else {
            return Ok(());
        };
        let out = Command::new(&self.berth)
            .args(["environments", "--resolve", edf])
            .stderr(std::process::Stdio::inherit())
            .output()
            .map_err(|e| fail(format!("berth: cannot run {}: {e}", self.berth)))?;
        if !out.status.success() {
            return Err(fail(format!(
                "berth: cannot read environment {edf} (the reason is above)"
            )));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        // `"image": "REF"` (or null: the file names none; berth run says so).
        let image = text
            .split("\"image\": \"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .map(str::to_string);
        if let Some(image) = image {
            self.pin(&image)?;
            std::env::set_var(EDF_VAR, edf);
        }
        Ok(())
    }

    /// Resolves the image once for the job and exports it to the tasks; an
    /// srun within a job that resolved the same reference keeps its id.
    fn pin(&self, image: &str) -> Res {
        let pinned = std::env::var(IMAGE_VAR)
            .ok()
            .filter(|_| std::env::var(REF_VAR).is_ok_and(|r| r == image));
        if pinned.is_none() {
            let id = self.resolve(image)?;
            // srun and sbatch pass their environment to the job.
            std::env::set_var(IMAGE_VAR, &id);
            std::env::set_var(REF_VAR, image);
        }
        for (k, v) in crate::carried::settings_to_carry(|k| std::env::var(k).ok()) {
            std::env::set_var(k, v);
        }
        Ok(())
    }

    /// Resolves the image, in srun, sbatch or salloc: a registry reference
    /// is pulled (its tag's digest now), a stored name is looked up.
    fn resolve(&self, image: &str) -> Result<String, Box<dyn Error>> {
        // A SIF or squashfs file: its absolute path (the tasks run in the
        // same file, on a filesystem the nodes share).
        if crate::images::names_a_file(image) {
            let path = std::fs::canonicalize(image)
                .map_err(|e| fail(format!("berth: container image file {image}: {e}")))?;
            if !path.is_file() {
                return Err(fail(format!(
                    "berth: container image {image} is not a file (a SIF or squashfs file is expected)"
                )));
            }
            return path
                .to_str()
                .map(str::to_string)
                .ok_or_else(|| fail(format!("berth: container image path {image} is not UTF-8")));
        }
        // A registry reference is pulled (its tag's digest now); a short
        // name is the store's if it has it, else pulled from Docker Hub or
        // its mirrors, as Pyxis and enroot pull it; an id is the store's.
        let run = |args: &[&str], stderr: std::process::Stdio| {
            Command::new(&self.berth)
                .args(args)
                .envs(crate::carried::settings_to_restore(|k| {
                    std::env::var(k).ok()
                }))
                .stderr(stderr)
                .output()
                .map_err(|e| {
                    fail(format!(
                        "berth: cannot run {}: {e} (set berth=PATH in plugstack.conf)",
                        self.berth
                    ))
                })
        };
        let pull = || run(&["pull", "-q", image], std::process::Stdio::inherit());
        let (out, what) = if crate::images::names_registry(image) {
            (pull()?, "pull")
        } else {
            let found = run(&["inspect", image], std::process::Stdio::piped())?;
            if found.status.success() || crate::images::looks_like_id(image) {
                if !found.status.success() {
                    eprint!("{}", String::from_utf8_lossy(&found.stderr));
                }
                (found, "find")
            } else {
                (pull()?, "pull")
            }
        };
        if !out.status.success() {
            // Pyxis's words for a failed pull, which job scripts look for.
            return Err(fail(if what == "pull" {
                format!("berth: failed to import docker image {image}: cannot pull it for this job (the reason is above)")
            } else {
                format!("berth: cannot find image {image} for this job (the reason is above)")
            }));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let id = if what == "pull" {
            text.trim().to_string()
        } else {
            // `berth inspect` prints JSON whose first "id" is the image's.
            text.split("\"id\": \"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or_default()
                .to_string()
        };
        if !id.starts_with("sha256:") {
            return Err(fail(format!(
                "berth: unexpected answer for image {image}: {text}"
            )));
        }
        Ok(id)
    }
}

unsafe impl Plugin for BerthPlugin {
    fn init(&mut self, spank: &mut SpankHandle) -> Res {
        self.berth = "berth".into();
        for arg in spank.plugin_argv()? {
            match arg.split_once('=') {
                Some(("berth", path)) => self.berth = path.to_string(),
                Some(("batch_modules", list)) => {
                    self.batch_modules = list
                        .split(',')
                        .filter(|m| !m.is_empty())
                        .map(str::to_string)
                        .collect()
                }
                Some(("container_scope", scope)) => {
                    self.global_names = match scope {
                        "job" => false,
                        "global" => true,
                        other => {
                            return Err(fail(format!(
                                "berth plugin: container_scope={other}: use job or global"
                            )))
                        }
                    }
                }
                // Earlier berths kept a named container running this long
                // between steps; each step now starts it anew (as Pyxis).
                Some(("named_linger", s)) => {
                    s.parse::<u64>()
                        .map_err(|_| fail(format!("berth plugin: named_linger={s}: not a number of seconds")))?;
                }
                Some((key, value)) if gather::is_site_default(key) => {
                    gather::site_default(&mut self.site, key, value)
                        .unwrap_or(Ok(()))
                        .map_err(fail)?
                }
                _ => return Err(fail(format!("berth plugin: unknown argument {arg:?} in plugstack.conf (berth=PATH, container_scope=job|global, batch_modules=NAME,..., writable=yes|no, mount_home=yes|no, remap_root=yes|no)"))),
            }
        }
        if matches!(spank.context()?, Context::Slurmd | Context::JobScript) {
            return Ok(());
        }
        for (name, value, usage) in OPTIONS {
            let mut opt = SpankOption::new(name).usage(usage);
            if let Some(v) = value {
                opt = opt.takes_value(v);
            }
            spank.register_option(opt)?;
        }
        Ok(())
    }

    fn init_post_opt(&mut self, spank: &mut SpankHandle) -> Res {
        let context = spank.context()?;
        if matches!(
            context,
            Context::Local | Context::Allocator | Context::Remote
        ) {
            // Bad option values stop the job here, with the reason.
            let opts = self.options(spank)?;
            // sbatch and salloc: the image is resolved at submission, as
            // srun does it for a step, and the job's environment carries it.
            if context == Context::Allocator {
                self.pin_for(&opts)?;
            }
        }
        Ok(())
    }

    fn local_user_init(&mut self, spank: &mut SpankHandle) -> Res {
        let opts = self.options(spank)?;
        self.pin_for(&opts)
    }

    fn task_init(&mut self, spank: &mut SpankHandle) -> Res {
        let opts = self.options(spank)?;
        // Neither an image nor a container name: not a container step. A
        // name alone joins that container as it runs on the node.
        if opts.image.is_none() && opts.name.is_none() && opts.environment.is_none() {
            return Ok(());
        }
        let mut env: Vec<(String, String)> = spank
            .job_env()?
            .iter()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        // berth's settings from submission, for the steps of a batch script.
        let restored = crate::carried::settings_to_restore(|k| {
            env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        });
        env.extend(restored);
        // The job's pinned id of the image, when the image is the one
        // pinned (a step of a batch script naming the script's image).
        let pinned = env
            .iter()
            .find(|(k, _)| k == IMAGE_VAR)
            .map(|(_, v)| v.clone())
            .filter(|_| {
                env.iter()
                    .any(|(k, v)| k == REF_VAR && Some(v) == opts.image.as_ref())
            });
        let var = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let image = match (&opts.image, &opts.environment) {
            (Some(i), _) => Some(pinned.clone().unwrap_or_else(|| i.clone())),
            // The environment file's image, as pinned at submission.
            (None, Some(edf)) if var(EDF_VAR).as_ref() == Some(edf) => var(IMAGE_VAR),
            (None, _) => None,
        };
        let several_on_node =
            var("SLURM_STEP_TASKS_PER_NODE").is_some_and(|n| several_per_node(&n));
        // Each task saves its own container: two on a node would write
        // one file.
        if let (Some(path), Some(per_node)) = (&opts.save, var("SLURM_STEP_TASKS_PER_NODE")) {
            if several_per_node(&per_node) {
                // The task's standard error is srun's output here.
                let msg = format!(
                    "berth: --container-save={path} needs one task per node (this step has {per_node} per node): each task's container is saved to PATH; run the step with --ntasks-per-node=1"
                );
                eprintln!("{msg}");
                return Err(fail(msg));
            }
        }
        let step = match spank.job_stepid()? {
            BATCH_STEP => Step::Batch,
            INTERACTIVE_STEP => Step::Interactive,
            n => Step::Id(n),
        };
        let argv: Vec<String> = spank.job_argv()?.iter().map(|s| s.to_string()).collect();
        // The batch script lives in slurmd's spool directory: bind it.
        let mut extra = Vec::new();
        if step == Step::Batch {
            if let Some(dir) = argv
                .first()
                .and_then(|s| std::path::Path::new(s).parent())
                .and_then(|d| d.to_str())
            {
                extra.push(format!("{dir}:{dir}:ro"));
            }
        }
        extra.extend(crate::pmix::binds(&env, |d| Path::new(d).is_dir()));
        let mca = crate::pmix::mca_variables(&env);
        env.extend(mca);
        let home = env
            .iter()
            .find(|(k, _)| k == "HOME")
            .map(|(_, v)| v.as_str());
        extra.extend(options::root_home_bind(
            &opts,
            home.filter(|h| Path::new(h).is_dir()),
        ));
        let mut opts = opts;
        if step == Step::Batch {
            opts.modules.extend(self.batch_modules.iter().cloned());
        }
        let task = Task {
            job_id: spank.job_id()?,
            step,
            argv,
            cwd: std::env::current_dir()
                .ok()
                .and_then(|d| d.to_str().map(str::to_string)),
            node: env
                .iter()
                .find(|(k, _)| k == "SLURMD_NODENAME")
                .map(|(_, v)| v.clone()),
            several_on_node,
        };
        note_state_dir(&env, task.job_id, opts.name.is_some());
        let cmd = options::berth_argv(
            &self.berth,
            &opts,
            image.as_deref(),
            &task,
            &extra,
            options::NamedSite {
                global: self.global_names,
            },
        );
        // A step's tasks join its shared container from here, as Pyxis's
        // do: only the first of a node starts berth (returns where the
        // task must run berth itself).
        if crate::in_place::eligible(&opts) {
            let key = options::key(&opts, &task);
            crate::in_place::join(&cmd, &key, &env, &task.argv);
        }
        // Slurm 22.05 has no spank_prepend_task_argv: the task becomes
        // berth here, with the environment Slurm built for it (PMI
        // variables included) and its descriptors.
        let err = Command::new(&cmd[0])
            .args(&cmd[1..])
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .exec();
        Err(fail(format!(
            "berth plugin: cannot start {}: {err}",
            cmd[0]
        )))
    }

    fn task_exit(&mut self, spank: &mut SpankHandle) -> Res {
        // After the step's last task on the node, before Slurm kills the
        // step's cgroup: what other steps still use of it goes to them
        // (crate::handoff).
        self.tasks_exited += 1;
        if self.tasks_exited < spank.job_local_task_count()? {
            return Ok(());
        }
        let opts = self.options(spank)?;
        if opts.image.is_none() && opts.name.is_none() && opts.environment.is_none() {
            return Ok(());
        }
        let step = match spank.job_stepid()? {
            BATCH_STEP => "step_batch".to_string(),
            INTERACTIVE_STEP => "step_interactive".to_string(),
            n => format!("step_{n}"),
        };
        let berth = Path::new(&self.berth);
        let berth = berth
            .is_absolute()
            .then(|| std::fs::metadata(berth).ok())
            .flatten()
            .map(|m| (m.dev(), m.ino()));
        crate::handoff::hand_off(spank.job_uid()?, spank.job_id()?, &step, berth);
        Ok(())
    }

    fn job_epilog(&mut self, spank: &mut SpankHandle) -> Res {
        // Named containers of this job stay after their last task, for the
        // next step: they go now, with the job's keepers' directories
        // (crate::epilog says what is trusted).
        let uid = spank.job_uid()?;
        let job = spank.job_id()?;
        let berth = Path::new(&self.berth);
        let berth = berth.is_absolute().then_some(berth);
        crate::epilog::remove_job_state(uid, job, berth);
        Ok(())
    }
}

/// Notes berth's runtime directory for this task (as berth chooses it:
/// `$XDG_RUNTIME_DIR/berth`, else `$TMPDIR/berth-UID`, `/tmp` without
/// `TMPDIR`) for the job epilog, which removes the job's named containers
/// and keepers there: where the job has a named container (`named`), or
/// the directory is not one the epilog looks in anyway.
fn note_state_dir(env: &[(String, String)], job: u32, named: bool) {
    let uid = own_uid();
    let var = |name: &str| {
        env.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_empty())
    };
    let dir = match var("XDG_RUNTIME_DIR").filter(|v| Path::new(v).is_dir()) {
        Some(v) => PathBuf::from(v).join("berth"),
        None => PathBuf::from(var("TMPDIR").unwrap_or_else(|| "/tmp".into()))
            .join(format!("berth-{uid}")),
    };
    if !named && crate::epilog::default_runtime_dirs(uid).contains(&dir) {
        return;
    }
    let Some(dir) = dir.to_str() else {
        return;
    };
    if let Err(e) = crate::epilog::note_state_dir(dir, uid, job) {
        eprintln!("berth plugin: warning: {e}");
    }
}

fn own_uid() -> u32 {
    // SAFETY: getuid(2) cannot fail and touches no memory.
    unsafe { libc::getuid() }
}

/// Whether Slurm's tasks-per-node list (`2(x3),1`) has a node with more
/// than one task.
fn several_per_node(list: &str) -> bool {
    list.split(',')
        .filter_map(|item| item.split('(').next()?.trim().parse::<u32>().ok())
        .any(|n| n > 1)
}
