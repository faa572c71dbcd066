//! What each Dockerfile instruction does to a stage, outside the user
//! namespace: the state a stage's walk tracks (ENV, ARG, WORKDIR, USER,
//! SHELL, the image config, the cache key) and, for the instructions that
//! touch the file system, the worker's action with its digest for the
//! cache. One small function per instruction kind.

use std::collections::BTreeMap;
use std::path::Path;

use berth_image::store::blobs::BlobRef;
use oci_spec::image::History;

use crate::cache_key::{self, CopyStep, RunStep};
use crate::context::{self, Ignore};
use crate::dockerfile::{self, Cmd, Kind, Step};
use crate::image_config::{Healthcheck, ImageConfig};
use crate::plan::{Action, CopyFrom};
use crate::{Error, Result};

/// The PATH a RUN step gets when the image sets none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The state a stage's walk tracks.
#[derive(Debug, Clone)]
pub struct StageState {
    /// ENV, in order.
    pub env: Vec<(String, String)>,
    /// ARGs of this stage.
    pub args: BTreeMap<String, String>,
    /// WORKDIR.
    pub workdir: String,
    /// USER (empty: root).
    pub user: String,
    /// SHELL.
    pub shell: Vec<String>,
    /// The image config so far (its layers and history are set at the end).
    pub config: ImageConfig,
    /// The base's layers.
    pub layers: Vec<BlobRef>,
    /// History so far; each file-system step's entry learns at the end
    /// whether it made a layer.
    pub history: Vec<PendingHistory>,
    /// The cache key of the last file-system step (or of the base).
    pub key: String,
    /// Whether this stage set CMD (ENTRYPOINT then resets an inherited
    /// one only when not).
    pub cmd_set: bool,
}

/// A history entry of the image.
#[derive(Debug, Clone)]
pub struct PendingHistory {
    /// The entry.
    pub entry: History,
    /// A file-system step's entry: `empty_layer` once it is known that
    /// the step changed nothing.
    pub from_step: bool,
}

impl PendingHistory {
    /// The entry of a base layer, of `FROM image`.
    pub fn base_layer(image: &str) -> Self {
        Self::new(format!("berth build: FROM {image}"), None, false)
    }

    /// The entry of an instruction that changes only the config.
    pub fn config_only(text: &str) -> Self {
        Self::new(text.to_string(), Some(true), false)
    }

    /// The entry of a file-system step.
    pub fn step(text: &str) -> Self {
        Self::new(text.to_string(), None, true)
    }

    fn new(created_by: String, empty_layer: Option<bool>, from_step: bool) -> Self {
        let mut entry = History::default();
        entry.set_created_by(Some(created_by));
        entry.set_empty_layer(empty_layer);
        Self { entry, from_step }
    }
}

/// What an instruction needs from outside its stage.
pub struct Surroundings<'a> {
    /// The Dockerfile's escape character.
    pub escape: char,
    /// `--build-arg`s.
    pub build_args: &'a BTreeMap<String, String>,
    /// ARGs before the first FROM.
    pub globals: &'a BTreeMap<String, String>,
    /// The build context.
    pub context: &'a Path,
    /// Its `.dockerignore`.
    pub ignore: &'a Ignore,
    /// This stage's index.
    pub stage: usize,
    /// A stage named (or numbered) so, before the given index.
    pub stage_index: &'a dyn Fn(&str, usize) -> Option<usize>,
    /// The final cache keys of the stages prepared so far.
    pub stage_keys: &'a dyn Fn(usize) -> Option<String>,
}

/// A file-system step: the worker's action and the step's digest.
pub type FsStep = (Action, String);

impl StageState {
    /// A stage on `FROM scratch`: nothing but the defaults.
    pub fn scratch() -> Self {
        StageState {
            env: Vec::new(),
            args: BTreeMap::new(),
            workdir: "/".into(),
            user: String::new(),
            shell: vec!["/bin/sh".into(), "-c".into()],
            config: ImageConfig::scratch(),
            layers: Vec::new(),
            history: Vec::new(),
            key: cache_key::scratch(),
            cmd_set: false,
        }
    }

    /// Applies `step`: the config and state change; a file-system step
    /// also returns what the worker does and its digest.
    pub fn apply(&mut self, step: &Step, around: &Surroundings) -> Result<Option<FsStep>> {
        // Words expand with the values from before this instruction.
        let (env, args) = (self.env.clone(), self.args.clone());
        let lookup = move |n: &str| {
            env.iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.clone())
                .or_else(|| args.get(n).cloned())
        };
        let ex = |w: &str| dockerfile::expand(w, &lookup, around.escape);
        match &step.kind {
            Kind::Env(kvs) => self.env_(kvs, &ex),
            Kind::Arg(list) => self.arg(list, around, &ex),
            Kind::Workdir(p) => return Ok(Some(self.workdir_(&ex(p)))),
            Kind::User(u) => self.user_(ex(u)),
            Kind::Entrypoint(c) => self.entrypoint(c),
            Kind::Cmd(c) => self.cmd(c),
            Kind::Label(kvs) => self.label(kvs, &ex),
            Kind::Expose(ports) => self.expose(ports, &ex),
            Kind::Volume(vols) => self.volume(vols, &ex),
            Kind::Shell(sh) => self.shell_(sh),
            Kind::Stopsignal(s) => {
                self.config.config.oci.set_stop_signal(Some(ex(s)));
            }
            Kind::Maintainer(m) => self.config.author = Some(m.clone()),
            Kind::Healthcheck(check) => self.healthcheck(check.as_ref(), step.line)?,
            Kind::Run(c) => return Ok(Some(self.run(c))),
            Kind::Copy {
                add,
                from,
                chown,
                chmod,
                sources,
                dest,
            } => {
                let copy = CopyArgs {
                    add: *add,
                    from: from.as_deref(),
                    chown: chown.as_ref().map(|c| ex(c)),
                    chmod: chmod.as_deref(),
                    sources: sources.iter().map(|s| ex(s)).collect(),
                    dest: context::resolve_dest(&ex(dest), &self.workdir),
                };
                return self.copy(copy, step.line, around, &ex).map(Some);
            }
        }
        Ok(None)
    }

    fn env_(&mut self, kvs: &[(String, String)], ex: &dyn Fn(&str) -> String) {
        for (k, v) in kvs {
            let v = ex(v);
            match self.env.iter_mut().find(|(n, _)| n == k) {
                Some(e) => e.1 = v,
                None => self.env.push((k.clone(), v)),
            }
        }
        let env = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        self.config.config.oci.set_env(Some(env));
    }

    fn arg(
        &mut self,
        list: &[(String, Option<String>)],
        around: &Surroundings,
        ex: &dyn Fn(&str) -> String,
    ) {
        for (k, default) in list {
            let v = around
                .build_args
                .get(k)
                .cloned()
                .or_else(|| default.as_ref().map(|d| ex(d)))
                .or_else(|| around.globals.get(k).cloned());
            if let Some(v) = v {
                self.args.insert(k.clone(), v);
            }
        }
    }

    fn workdir_(&mut self, expanded: &str) -> FsStep {
        let path = context::resolve_dest(expanded, &self.workdir)
            .trim_end_matches('/')
            .to_string();
        let path = if path.is_empty() { "/".into() } else { path };
        self.workdir = path.clone();
        self.config.config.oci.set_working_dir(Some(path.clone()));
        let digest = cache_key::workdir(&path);
        (Action::Mkdir { path }, digest)
    }

    fn user_(&mut self, user: String) {
        self.config.config.oci.set_user(Some(user.clone()));
        self.user = user;
    }

    fn entrypoint(&mut self, c: &Cmd) {
        let oci = &mut self.config.config.oci;
        oci.set_entrypoint(Some(argv_of(c, &self.shell)));
        if !self.cmd_set {
            oci.set_cmd(None);
        }
    }

    fn cmd(&mut self, c: &Cmd) {
        self.config
            .config
            .oci
            .set_cmd(Some(argv_of(c, &self.shell)));
        self.cmd_set = true;
    }

    fn label(&mut self, kvs: &[(String, String)], ex: &dyn Fn(&str) -> String) {
        let mut labels = self.config.config.oci.labels().clone().unwrap_or_default();
        for (k, v) in kvs {
            labels.insert(ex(k), ex(v));
        }
        self.config.config.oci.set_labels(Some(labels));
    }

    fn expose(&mut self, ports: &[String], ex: &dyn Fn(&str) -> String) {
        let mut exposed = self
            .config
            .config
            .oci
            .exposed_ports()
            .clone()
            .unwrap_or_default();
        for p in ports {
            let p = ex(p);
            let p = if p.contains('/') {
                p
            } else {
                format!("{p}/tcp")
            };
            if !exposed.contains(&p) {
                exposed.push(p);
            }
        }
        self.config.config.oci.set_exposed_ports(Some(exposed));
    }

    fn volume(&mut self, vols: &[String], ex: &dyn Fn(&str) -> String) {
        let mut volumes = self.config.config.oci.volumes().clone().unwrap_or_default();
        for v in vols {
            let v = ex(v);
            if !volumes.contains(&v) {
                volumes.push(v);
            }
        }
        self.config.config.oci.set_volumes(Some(volumes));
    }

    fn shell_(&mut self, sh: &[String]) {
        self.shell = sh.to_vec();
        self.config.config.shell = Some(sh.to_vec());
    }

    fn healthcheck(
        &mut self,
        check: Option<&(Vec<(String, String)>, Cmd)>,
        line: usize,
    ) -> Result<()> {
        let Some((opts, c)) = check else {
            self.config.config.healthcheck = Some(Healthcheck {
                test: vec!["NONE".into()],
                ..Healthcheck::default()
            });
            return Ok(());
        };
        let test = match c {
            Cmd::Exec(a) => std::iter::once("CMD".to_string())
                .chain(a.iter().cloned())
                .collect(),
            Cmd::Shell(s) => vec!["CMD-SHELL".to_string(), s.clone()],
        };
        let mut hc = Healthcheck {
            test,
            ..Healthcheck::default()
        };
        for (k, v) in opts {
            let duration = || {
                duration_ns(v).ok_or_else(|| Error::Dockerfile {
                    line,
                    msg: format!("HEALTHCHECK --{k}={v}: not a duration (30s, 1m30s)"),
                })
            };
            match k.as_str() {
                "interval" => hc.interval = Some(duration()?),
                "timeout" => hc.timeout = Some(duration()?),
                "start-period" => hc.start_period = Some(duration()?),
                "start-interval" => hc.start_interval = Some(duration()?),
                // The parser admits only these and --retries.
                _ => hc.retries = Some(v.parse::<u64>().unwrap_or(3)),
            }
        }
        self.config.config.healthcheck = Some(hc);
        Ok(())
    }

    fn run(&self, c: &Cmd) -> FsStep {
        let argv = argv_of(c, &self.shell);
        let mut env = self.env.clone();
        for (k, v) in &self.args {
            if !env.iter().any(|(n, _)| n == k) {
                env.push((k.clone(), v.clone()));
            }
        }
        if !env.iter().any(|(k, _)| k == "PATH") {
            env.push(("PATH".into(), DEFAULT_PATH.into()));
        }
        let digest = RunStep {
            env: &env,
            run: &argv,
            user: &self.user,
            workdir: &self.workdir,
        }
        .digest();
        let action = Action::Run {
            argv,
            env,
            workdir: self.workdir.clone(),
            user: self.user.clone(),
        };
        (action, digest)
    }

    fn copy(
        &self,
        copy: CopyArgs,
        line: usize,
        around: &Surroundings,
        ex: &dyn Fn(&str) -> String,
    ) -> Result<FsStep> {
        let chmod = match copy.chmod {
            Some(m) => Some(
                crate::worker::parse_chmod(m).ok_or_else(|| Error::Dockerfile {
                    line,
                    msg: format!("--chmod={m}: expected an octal mode such as 0755"),
                })?,
            ),
            None => None,
        };
        let (from, content) = match copy.from {
            None => {
                let mut matches = Vec::new();
                for s in &copy.sources {
                    let found =
                        context::expand_source(around.context, s, around.ignore).map_err(|e| {
                            Error::Step {
                                line,
                                msg: e.to_string(),
                            }
                        })?;
                    matches.extend(found);
                }
                let hash = context::hash_sources(around.context, &matches, around.ignore)?;
                (CopyFrom::Context, hash)
            }
            Some(f) => {
                let j = (around.stage_index)(&ex(f), around.stage).ok_or_else(|| Error::Dockerfile {
                    line,
                    msg: format!("COPY --from={f}: no earlier stage of that name (to copy from an image, add a stage `FROM IMAGE AS name`)"),
                })?;
                (
                    CopyFrom::Stage(j),
                    (around.stage_keys)(j).unwrap_or_default(),
                )
            }
        };
        let digest = CopyStep {
            add: copy.add,
            chmod,
            chown: copy.chown.as_deref(),
            content: &content,
            dest: &copy.dest,
            sources: &copy.sources,
        }
        .digest();
        let action = Action::Copy {
            from,
            sources: copy.sources,
            dest: copy.dest,
            chown: copy.chown,
            chmod,
            add: copy.add,
        };
        Ok((action, digest))
    }
}

/// A COPY or ADD with its words expanded.
struct CopyArgs<'a> {
    add: bool,
    from: Option<&'a str>,
    chown: Option<String>,
    chmod: Option<&'a str>,
    sources: Vec<String>,
    dest: String,
}

/// The command line of `cmd`: the exec form as written, the shell form
/// after the SHELL.
fn argv_of(cmd: &Cmd, shell: &[String]) -> Vec<String> {
    match cmd {
        Cmd::Exec(a) => a.clone(),
        Cmd::Shell(s) => shell.iter().cloned().chain([s.clone()]).collect(),
    }
}

/// A Go duration (`30s`, `1m30s`, `500ms`) in nanoseconds.
fn duration_ns(s: &str) -> Option<u64> {
    let mut total = 0f64;
    let mut num = String::new();
    let mut chars = s.chars().peekable();
    let mut any = false;
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() || c == '.' {
            num.push(c);
            continue;
        }
        let mut unit = c.to_string();
        if c == 'm' && chars.peek() == Some(&'s') {
            unit.push('s');
            chars.next();
        }
        let n: f64 = num.parse().ok()?;
        num.clear();
        let mult = match unit.as_str() {
            "h" => 3.6e12,
            "m" => 6e10,
            "s" => 1e9,
            "ms" => 1e6,
            _ => return None,
        };
        total += n * mult;
        any = true;
    }
    (any && num.is_empty()).then_some(total as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration_ns("30s"), Some(30_000_000_000));
        assert_eq!(duration_ns("1m30s"), Some(90_000_000_000));
        assert_eq!(duration_ns("500ms"), Some(500_000_000));
        assert_eq!(duration_ns("5"), None);
    }

    /// The config instructions of a Dockerfile, applied in order, give the
    /// config JSON the untyped builder of earlier versions wrote.
    #[test]
    fn config_instructions_write_the_config() {
        let text =
            "FROM scratch\nENV A=1 B=x\nENV B=$A C=$B\nUSER app\nWORKDIR /srv\nWORKDIR sub/\n\
                    LABEL k=$A k2=\"two words\"\nEXPOSE 80 53/udp 80\nVOLUME /data\n\
                    SHELL [\"/bin/bash\", \"-c\"]\nSTOPSIGNAL SIGINT\nMAINTAINER me\n\
                    HEALTHCHECK --interval=5s --retries=2 CMD [\"/bin/true\"]\n\
                    ENTRYPOINT [\"/bin/cat\"]\nCMD echo $A\n";
        let df = dockerfile::parse(text).unwrap();
        let (build_args, globals) = (BTreeMap::new(), BTreeMap::new());
        let around = Surroundings {
            escape: df.escape,
            build_args: &build_args,
            globals: &globals,
            context: Path::new("/nonexistent"),
            ignore: &Ignore::default(),
            stage: 0,
            stage_index: &|_, _| None,
            stage_keys: &|_| None,
        };
        let mut st = StageState::scratch();
        let mut mkdirs = Vec::new();
        for step in &df.stages[0].steps {
            if let Some((Action::Mkdir { path }, _)) = st.apply(step, &around).unwrap() {
                mkdirs.push(path);
            }
        }
        assert_eq!(mkdirs, vec!["/srv", "/srv/sub"]);
        let written: serde_json::Value =
            serde_json::from_slice(&st.config.to_bytes().unwrap()).unwrap();
        let expected = serde_json::json!({
            "architecture": crate::image_config::host_arch(), "os": "linux", "author": "me",
            "config": {
                "Env": ["A=1", "B=1", "C=x"], "User": "app", "WorkingDir": "/srv/sub",
                "Labels": {"k": "1", "k2": "two words"},
                "ExposedPorts": {"80/tcp": {}, "53/udp": {}}, "Volumes": {"/data": {}},
                "Shell": ["/bin/bash", "-c"], "StopSignal": "SIGINT",
                "Healthcheck": {"Test": ["CMD", "/bin/true"], "Interval": 5_000_000_000u64, "Retries": 2},
                "Entrypoint": ["/bin/cat"], "Cmd": ["/bin/bash", "-c", "echo $A"],
            },
        });
        assert_eq!(written, expected);
    }

    #[test]
    fn entrypoint_clears_an_inherited_cmd_but_not_its_own() {
        let df = dockerfile::parse(
            "FROM scratch\nENTRYPOINT [\"a\"]\nCMD [\"b\"]\nENTRYPOINT [\"c\"]\n",
        )
        .unwrap();
        let (build_args, globals) = (BTreeMap::new(), BTreeMap::new());
        let around = Surroundings {
            escape: df.escape,
            build_args: &build_args,
            globals: &globals,
            context: Path::new("/nonexistent"),
            ignore: &Ignore::default(),
            stage: 0,
            stage_index: &|_, _| None,
            stage_keys: &|_| None,
        };
        let mut st = StageState::scratch();
        st.config.config.oci.set_cmd(Some(vec!["inherited".into()]));
        st.apply(&df.stages[0].steps[0], &around).unwrap();
        assert_eq!(st.config.config.oci.cmd(), &None);
        for step in &df.stages[0].steps[1..] {
            st.apply(step, &around).unwrap();
        }
        assert_eq!(st.config.config.oci.cmd(), &Some(vec!["b".to_string()]));
    }
}
