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
    /// `--container-entrypoint` (run the image's entrypoint; off by default,
    /// as in Pyxis).
    pub entrypoint: bool,
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
            env: Vec::new(),
            mode: Mode::Shared,
            gpus: None,
            modules: Vec::new(),
            unshare: Vec::new(),
            environment: None,
        }
    }
}

/// What `--container-name=NAME:FLAG` asks of a named container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NameFlag {
    /// `auto` (the default): join it if it runs on the node, else create it.
    #[default]
    Auto,
    /// `create`: it must not exist yet.
    Create,
    /// `exec`: it must exist; the task joins it.
    Exec,
    /// `no_exec`: Pyxis starts the container's file system afresh; berth's
    /// named container is one live container, so this joins it as `auto`.
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
            if n.is_empty()
                || !n
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            {
                return Err(format!(
                    "--container-name={n:?}: use letters, digits, '.', '_' and '-'"
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
    ("container-name", Some("NAME[:auto|create|exec|no_exec]"), "[berth] a named container: later steps of the job on the node join it, with or without --container-image (it stays until the job ends)"),
    ("container-writable", None, "[berth] make the container's file system writable (changes live in memory)"),
    ("container-readonly", None, "[berth] keep the container's file system read-only (default)"),
    ("container-mount-home", None, "[berth] bind the user's home directory (default)"),
    ("no-container-mount-home", None, "[berth] do not bind the user's home directory"),
    ("container-remap-root", None, "[berth] be root inside the container (mapped to you)"),
    ("no-container-remap-root", None, "[berth] be yourself inside the container (default)"),
    ("container-entrypoint", None, "[berth] run the image's entrypoint before the command"),
    ("no-container-entrypoint", None, "[berth] do not run the image's entrypoint (default)"),
    ("container-env", Some("NAME[,NAME...]"), "[berth] these variables take the job's value over the image's"),
    ("container-mode", Some("shared|per-task"), "[berth] one container per node that all tasks join (shared, default) or one per task"),
    ("container-gpus", Some("all|LIST"), "[berth] GPUs to give the container (berth run --gpus)"),
    ("container-modules", Some("NAME[,NAME...]"), "[berth] site modules to apply; mpi replaces the image's MPI with the host's"),
    ("environment", Some("NAME|PATH"), "[berth] run as the environment definition file says (CSCS's EDF: NAME.toml in EDF_PATH or ~/.edf, or a path); --container-* options add to it"),
    ("container-unshare", Some("net,ipc,uts"), "[berth] namespaces of the container's own (the node's tasks share them): net (no network but loopback), ipc, uts"),
];

/// How long a named container stays after its last task when the plugin
/// is not told otherwise (`named_linger=` in plugstack.conf): long enough
/// for the next step; the job's end removes it earlier.
pub const NAMED_LINGER_SECONDS: u64 = 3600;

/// The shared container key of a task's step (or of its named container).
pub fn key(opts: &Options, task: &Task) -> String {
    let base = match (&opts.name, task.step) {
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
/// `named_linger` the seconds a named container stays after its last task.
pub fn berth_argv(
    berth: &str,
    opts: &Options,
    image: Option<&str>,
    task: &Task,
    extra_binds: &[String],
    named_linger: u64,
) -> Vec<String> {
    let mut a: Vec<String> = vec![
        berth.into(),
        "run".into(),
        "--argv0-fallback".into(),
        "--env-below-image".into(),
    ];
    let shared = opts.mode == Mode::Shared || opts.name.is_some();
    // A named container is joined as it runs (Pyxis's auto): its image and
    // options are those it was made with.
    let reuse = match (image, opts.name_flag) {
        (None, _) | (_, NameFlag::Exec) => "existing",
        (_, NameFlag::Create) => "new",
        (_, NameFlag::Auto | NameFlag::NoExec) => "any",
    };
    if shared {
        a.push("--shared".into());
        a.push(key(opts, task));
        if opts.name.is_some() {
            a.extend(["--linger".into(), named_linger.to_string()]);
            a.extend(["--reuse".into(), reuse.into()]);
        }
    }
    // An environment file says whether the entrypoint runs (by default
    // it does, as in CSCS's Container Engine).
    if !opts.entrypoint && opts.environment.is_none() {
        a.push("--entrypoint=".into());
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
        Some(w) => a.extend(["-w".into(), w.clone()]),
        None => a.push("--workdir-image".into()),
    }
    for e in &opts.env {
        a.push("-e".into());
        a.push(e.clone());
    }
    if opts.writable {
        a.push("--writable".into());
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
    } else if reuse != "existing" || !shared {
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
mod tests {
    use super::*;

    fn task(step: Step) -> Task {
        Task {
            job_id: 42,
            step,
            argv: vec!["/usr/bin/hostname".into(), "-s".into()],
            cwd: None,
            node: None,
        }
    }

    #[test]
    fn defaults_are_pyxis_defaults_and_shared_mode() {
        let mut o = Options::default();
        apply(&mut o, "container-image", Some("reg:5000/x:1")).unwrap();
        let a = berth_argv("/b", &o, Some("sha256:ab"), &task(Step::Id(3)), &[], 9);
        assert_eq!(
            a,
            [
                "/b",
                "run",
                "--argv0-fallback",
                "--env-below-image",
                "--shared",
                "slurm-42.3",
                "--entrypoint=",
                "--workdir-image",
                "sha256:ab",
                "/usr/bin/hostname",
                "-s"
            ]
        );
    }

    #[test]
    fn every_option_maps() {
        let mut o = Options::default();
        for (n, v) in [
            ("container-image", Some("img")),
            (
                "container-mounts",
                Some("/data,/scratch:/s:ro,tmpfs:/t:size=1G,/data"),
            ),
            ("container-workdir", Some("/work")),
            ("container-name", Some("dev:exec")),
            ("container-writable", None),
            ("no-container-mount-home", None),
            ("container-remap-root", None),
            ("container-entrypoint", None),
            ("container-env", Some("A,B")),
            ("container-gpus", Some("0,1")),
            ("container-modules", Some("mpi,cxi")),
        ] {
            apply(&mut o, n, v).unwrap();
        }
        let a = berth_argv(
            "b",
            &o,
            Some("img"),
            &task(Step::Batch),
            &["/spool:/spool:ro".into()],
            60,
        )
        .join(" ");
        assert_eq!(
            a,
            "b run --argv0-fallback --env-below-image --shared slurm-42-dev --linger 60 --reuse existing -v /data:/data -v /scratch:/s:ro -v /spool:/spool:ro --tmpfs /t:size=1G -w /work -e A -e B --writable --no-home --fakeroot --gpus 0,1 --mpi --module cxi /usr/bin/hostname -s"
        );
    }

    #[test]
    fn the_images_workdir_unless_one_is_named_or_a_batch_script() {
        let mut o = Options::default();
        let mut t = task(Step::Id(1));
        t.cwd = Some("/home/u/run".into());
        let a = berth_argv("b", &o, Some("img"), &t, &[], 0).join(" ");
        assert!(
            a.contains(" --workdir-image ") && !a.contains(" -w "),
            "{a}"
        );
        t.step = Step::Batch;
        let a = berth_argv("b", &o, Some("img"), &t, &[], 0).join(" ");
        assert!(a.contains(" -w /home/u/run "), "{a}");
        apply(&mut o, "container-workdir", Some("/w")).unwrap();
        let a = berth_argv("b", &o, Some("img"), &t, &[], 0).join(" ");
        assert!(a.contains(" -w /w ") && !a.contains("/home/u/run"), "{a}");
        for (given, dir) in [("../", "/"), ("usr/../bin", "/bin"), ("/a/./b/", "/a/b")] {
            apply(&mut o, "container-workdir", Some(given)).unwrap();
            assert_eq!(o.workdir.as_deref(), Some(dir), "{given}");
        }
    }

    #[test]
    fn named_containers_are_joined_as_they_run() {
        let mut o = Options::default();
        apply(&mut o, "container-name", Some("dev")).unwrap();
        let t = task(Step::Id(2));
        let a = berth_argv("b", &o, None, &t, &[], 5).join(" ");
        assert!(
            a.contains("--shared slurm-42-dev --linger 5 --reuse existing")
                && a.ends_with("--workdir-image /usr/bin/hostname -s"),
            "{a}"
        );
        let a = berth_argv("b", &o, Some("img"), &t, &[], 5).join(" ");
        assert!(
            a.contains("--reuse any") && a.contains(" img /usr/bin/hostname"),
            "{a}"
        );
        apply(&mut o, "container-name", Some("dev:create")).unwrap();
        let a = berth_argv("b", &o, Some("img"), &t, &[], 5).join(" ");
        assert!(a.contains("--reuse new"), "{a}");
        apply(&mut o, "container-name", Some("dev:exec")).unwrap();
        let a = berth_argv("b", &o, Some("img"), &t, &[], 5).join(" ");
        assert!(
            a.contains("--reuse existing") && !a.contains(" img "),
            "{a}"
        );
    }

    #[test]
    fn roots_home_is_the_users_home_under_remap_root() {
        let mut o = Options::default();
        assert_eq!(root_home_bind(&o, Some("/home/u")), None);
        apply(&mut o, "container-remap-root", None).unwrap();
        assert_eq!(
            root_home_bind(&o, Some("/home/u/")).as_deref(),
            Some("/home/u:/root")
        );
        assert_eq!(root_home_bind(&o, Some("rel")), None);
        assert_eq!(root_home_bind(&o, None), None);
        apply(&mut o, "no-container-mount-home", None).unwrap();
        assert_eq!(root_home_bind(&o, Some("/home/u")), None);
    }

    #[test]
    fn per_task_mode_and_keys() {
        let mut o = Options::default();
        apply(&mut o, "container-mode", Some("per-task")).unwrap();
        let a = berth_argv("b", &o, Some("img"), &task(Step::Id(0)), &[], 0);
        assert!(!a.contains(&"--shared".to_string()));
        assert_eq!(key(&o, &task(Step::Batch)), "slurm-42.batch");
        let mut on = task(Step::Id(7));
        on.node = Some("nid0012/x".into());
        assert_eq!(key(&o, &on), "slurm-42.7.nid0012x");
        assert_eq!(key(&o, &task(Step::Interactive)), "slurm-42.interactive");
    }

    #[test]
    fn bad_values_say_why() {
        let mut o = Options::default();
        assert!(apply(&mut o, "container-mode", Some("pod"))
            .unwrap_err()
            .contains("per-task"));
        assert!(apply(&mut o, "container-mounts", Some("rel:/x"))
            .unwrap_err()
            .contains("use a path"));
        assert!(apply(&mut o, "container-env", Some("FOO,"))
            .unwrap_err()
            .contains("empty item"));
        assert!(apply(&mut o, "container-name", Some("n:attach"))
            .unwrap_err()
            .contains("unknown flag"));
        assert!(apply(&mut o, "container-mounts", Some("/a:/b:rbind+suid"))
            .unwrap_err()
            .contains("suid"));
        assert!(apply(&mut o, "container-name", Some("a/b")).is_err());
        assert!(apply(&mut o, "container-image", Some(" ")).is_err());
    }

    #[test]
    fn an_environment_file_names_the_image_and_the_entrypoint() {
        let mut o = Options::default();
        apply(&mut o, "environment", Some("pt")).unwrap();
        let a = berth_argv("b", &o, Some("sha256:1"), &task(Step::Id(0)), &[], 0).join(" ");
        assert!(
            a.contains("--environment pt --image sha256:1 ") && !a.contains("--entrypoint"),
            "{a}"
        );
    }
}
