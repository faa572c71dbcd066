//! The build driver, outside the user namespace: resolves each stage's
//! base, walks the instructions to track ENV, ARG, WORKDIR, USER, SHELL and
//! the image config, keys every file-system step for the cache (the parent
//! key, the expanded instruction, its environment and, for COPY, the
//! sources' content hash), hands the steps the cache lacks to the worker,
//! and assembles the image: config, OCI manifest and layer blobs in the
//! store's blob directory, ready to convert to squashfs and to push.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::blobs::{BlobRef, Blobs, LAYER_MEDIA_TYPE};
use crate::context::{self, hex, Ignore};
use crate::dockerfile::{self, Cmd, Dockerfile, Kind};
use crate::plan::{Action, Base, CacheEntry, CopyFrom, Plan, PlanStage, PlanStep};
use crate::{Error, Result};

/// What `berth build` asks for.
#[derive(Debug, Clone)]
pub struct Request {
    /// The Dockerfile's text.
    pub dockerfile: String,
    /// The build context directory.
    pub context: PathBuf,
    /// `--build-arg K=V`.
    pub build_args: BTreeMap<String, String>,
    /// `--target STAGE`.
    pub target: Option<String>,
    /// `--no-cache`: run every step.
    pub no_cache: bool,
}

/// A base image from the store, as the builder needs it.
#[derive(Debug, Clone)]
pub struct BaseImage {
    /// Image id.
    pub id: String,
    /// Its squashfs file.
    pub squashfs: PathBuf,
    /// Its config.json.
    pub config: Value,
    /// Its layers, when the store's blob directory has all of them (an
    /// image berth built); else the image is flattened into one layer.
    pub layers: Option<Vec<BlobRef>>,
}

/// A built image: blobs are in the store's blob directory.
#[derive(Debug, Clone)]
pub struct Built {
    /// config.json, byte for byte.
    pub config: Vec<u8>,
    /// The OCI manifest, byte for byte.
    pub manifest: Vec<u8>,
    /// Its digest.
    pub manifest_digest: String,
    /// Layers, bottom first.
    pub layers: Vec<BlobRef>,
    /// File-system steps run and taken from the cache.
    pub ran: usize,
    /// Steps the cache had.
    pub cached: usize,
}

/// Where the build keeps things in the store.
pub struct StorePaths {
    /// `STORE/blobs`.
    pub blobs: PathBuf,
    /// `STORE/build-cache`.
    pub cache: PathBuf,
    /// A scratch directory for this build (removed by the caller).
    pub work: PathBuf,
}

/// The state a stage's walk tracks.
#[derive(Clone)]
struct StageState {
    env: Vec<(String, String)>,
    args: BTreeMap<String, String>,
    workdir: String,
    user: String,
    shell: Vec<String>,
    config: Value,
    layers: Vec<BlobRef>,
    history: Vec<Value>,
    key: String,
    cmd_set: bool,
}

fn sha(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    hex(&h.finalize())
}

fn env_of(config: &Value) -> Vec<(String, String)> {
    config["config"]["Env"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| {
                    v.as_str()?
                        .split_once('=')
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn set_env(env: &mut Vec<(String, String)>, k: &str, v: String) {
    match env.iter_mut().find(|(n, _)| n == k) {
        Some(e) => e.1 = v,
        None => env.push((k.to_string(), v)),
    }
}

fn argv_of(cmd: &Cmd, shell: &[String]) -> Vec<String> {
    match cmd {
        Cmd::Exec(a) => a.clone(),
        Cmd::Shell(s) => shell.iter().cloned().chain([s.clone()]).collect(),
    }
}

fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// Builds per `req`. `base` resolves (pulling if need be) a FROM image;
/// `worker` runs `berth __build-worker PLAN` and returns its exit code.
pub fn build(
    req: &Request,
    paths: &StorePaths,
    base: &dyn Fn(&str, usize) -> Result<BaseImage>,
    worker: &dyn Fn(&Path) -> Result<i32>,
) -> Result<Built> {
    let df = dockerfile::parse(&req.dockerfile)?;
    let escape = df.escape;
    let blobs = Blobs::new(&paths.blobs)?;
    // Global ARGs (before the first FROM): for FROM lines.
    let mut globals: BTreeMap<String, String> = BTreeMap::new();
    for (k, default) in &df.global_args {
        let v = req.build_args.get(k).cloned().or_else(|| {
            default
                .as_ref()
                .map(|d| dockerfile::expand(d, &|n| globals.get(n).cloned(), escape))
        });
        if let Some(v) = v {
            globals.insert(k.clone(), v);
        }
    }
    let names: Vec<Option<String>> = df.stages.iter().map(|s| s.name.clone()).collect();
    let stage_index = |name: &str, before: usize| -> Option<usize> {
        let lower = name.to_lowercase();
        names[..before]
            .iter()
            .position(|n| n.as_deref() == Some(lower.as_str()))
            .or_else(|| name.parse::<usize>().ok().filter(|i| *i < before))
    };
    let target = match &req.target {
        Some(t) => stage_index(t, df.stages.len()).ok_or_else(|| {
            Error::Usage(format!(
                "--target {t}: no stage of that name in the Dockerfile"
            ))
        })?,
        None => df.stages.len() - 1,
    };
    let froms: Vec<String> = df
        .stages
        .iter()
        .map(|s| dockerfile::expand(&s.from, &|n| globals.get(n).cloned(), escape))
        .collect();
    let needed = needed_stages(&df, &froms, target, &stage_index);
    let ignore = Ignore::load(&req.context);
    let mut states: Vec<Option<StageState>> = vec![None; df.stages.len()];
    let mut plan_stages = Vec::new();
    let (mut ran, mut cached) = (0, 0);
    for (i, stage) in df.stages.iter().enumerate() {
        let title = format!(
            "FROM {}{}",
            froms[i],
            stage
                .name
                .as_ref()
                .map(|n| format!(" AS {n}"))
                .unwrap_or_default()
        );
        if !needed.contains(&i) {
            plan_stages.push(PlanStage {
                title,
                needed: false,
                base: Base::Scratch,
                steps: Vec::new(),
            });
            continue;
        }
        let (plan_base, mut st) = match (froms[i].as_str(), stage_index(&froms[i], i)) {
            (_, Some(j)) => {
                let prev = states[j]
                    .clone()
                    .ok_or_else(|| Error::Plan(format!("stage {j} was not prepared")))?;
                (
                    Base::Stage(j),
                    StageState {
                        args: BTreeMap::new(),
                        cmd_set: false,
                        ..prev
                    },
                )
            }
            ("scratch", None) => (
                Base::Scratch,
                StageState {
                    env: Vec::new(),
                    args: BTreeMap::new(),
                    workdir: "/".into(),
                    user: String::new(),
                    shell: vec!["/bin/sh".into(), "-c".into()],
                    config: json!({"architecture": host_arch(), "os": "linux", "config": {}}),
                    layers: Vec::new(),
                    history: Vec::new(),
                    key: sha(&["scratch"]),
                    cmd_set: false,
                },
            ),
            (image, None) => {
                let img = base(image, stage.line)?;
                let layers = match &img.layers {
                    Some(l) => l.clone(),
                    None => vec![flatten_base(&img, &blobs, &paths.cache)?],
                };
                let history = layers
                    .iter()
                    .map(|_| json!({"created_by": format!("berth build: FROM {image}")}))
                    .collect();
                let config = img.config.clone();
                (
                    Base::Image(img.squashfs.clone()),
                    StageState {
                        env: env_of(&config),
                        args: BTreeMap::new(),
                        workdir: config["config"]["WorkingDir"]
                            .as_str()
                            .filter(|w| !w.is_empty())
                            .unwrap_or("/")
                            .to_string(),
                        user: config["config"]["User"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                        shell: vec!["/bin/sh".into(), "-c".into()],
                        config,
                        layers,
                        history,
                        key: sha(&["image", &img.id]),
                        cmd_set: false,
                    },
                )
            }
        };
        let mut steps = Vec::new();
        for step in &stage.steps {
            let vars_env = st.env.clone();
            let vars_args = st.args.clone();
            let lookup = move |n: &str| {
                vars_env
                    .iter()
                    .find(|(k, _)| k == n)
                    .map(|(_, v)| v.clone())
                    .or_else(|| vars_args.get(n).cloned())
            };
            let ex = |w: &str| dockerfile::expand(w, &lookup, escape);
            let cfg = &mut st.config["config"];
            let mut fs_action: Option<(Action, String)> = None;
            match &step.kind {
                Kind::Env(kvs) => {
                    for (k, v) in kvs {
                        let v = ex(v);
                        set_env(&mut st.env, k, v);
                    }
                    cfg["Env"] = json!(st
                        .env
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>());
                }
                Kind::Arg(list) => {
                    for (k, default) in list {
                        let v = req
                            .build_args
                            .get(k)
                            .cloned()
                            .or_else(|| default.as_ref().map(|d| ex(d)))
                            .or_else(|| globals.get(k).cloned());
                        if let Some(v) = v {
                            st.args.insert(k.clone(), v);
                        }
                    }
                }
                Kind::Workdir(p) => {
                    let path = context::resolve_dest(&ex(p), &st.workdir)
                        .trim_end_matches('/')
                        .to_string();
                    let path = if path.is_empty() {
                        "/".to_string()
                    } else {
                        path
                    };
                    st.workdir = path.clone();
                    cfg["WorkingDir"] = json!(path);
                    fs_action = Some((
                        Action::Mkdir { path: path.clone() },
                        sha(&["WORKDIR", &path]),
                    ));
                }
                Kind::User(u) => {
                    st.user = ex(u);
                    cfg["User"] = json!(st.user);
                }
                Kind::Entrypoint(c) => {
                    cfg["Entrypoint"] = json!(argv_of(c, &st.shell));
                    if !st.cmd_set {
                        cfg["Cmd"] = Value::Null;
                    }
                }
                Kind::Cmd(c) => {
                    cfg["Cmd"] = json!(argv_of(c, &st.shell));
                    st.cmd_set = true;
                }
                Kind::Label(kvs) => {
                    if !cfg["Labels"].is_object() {
                        cfg["Labels"] = json!({});
                    }
                    for (k, v) in kvs {
                        cfg["Labels"][ex(k)] = json!(ex(v));
                    }
                }
                Kind::Expose(ports) => {
                    if !cfg["ExposedPorts"].is_object() {
                        cfg["ExposedPorts"] = json!({});
                    }
                    for p in ports {
                        let p = ex(p);
                        let p = if p.contains('/') {
                            p
                        } else {
                            format!("{p}/tcp")
                        };
                        cfg["ExposedPorts"][p] = json!({});
                    }
                }
                Kind::Volume(vols) => {
                    if !cfg["Volumes"].is_object() {
                        cfg["Volumes"] = json!({});
                    }
                    for v in vols {
                        cfg["Volumes"][ex(v)] = json!({});
                    }
                }
                Kind::Shell(sh) => {
                    st.shell = sh.clone();
                    cfg["Shell"] = json!(sh);
                }
                Kind::Stopsignal(s) => cfg["StopSignal"] = json!(ex(s)),
                Kind::Maintainer(m) => st.config["author"] = json!(m),
                Kind::Healthcheck(None) => cfg["Healthcheck"] = json!({"Test": ["NONE"]}),
                Kind::Healthcheck(Some((opts, c))) => {
                    let test = match c {
                        Cmd::Exec(a) => std::iter::once("CMD".to_string())
                            .chain(a.iter().cloned())
                            .collect::<Vec<_>>(),
                        Cmd::Shell(s) => vec!["CMD-SHELL".to_string(), s.clone()],
                    };
                    let mut hc = json!({"Test": test});
                    for (k, v) in opts {
                        let field = match k.as_str() {
                            "interval" => "Interval",
                            "timeout" => "Timeout",
                            "start-period" => "StartPeriod",
                            "start-interval" => "StartInterval",
                            _ => "Retries",
                        };
                        hc[field] = match field {
                            "Retries" => json!(v.parse::<u64>().unwrap_or(3)),
                            _ => json!(duration_ns(v).ok_or_else(|| Error::Dockerfile {
                                line: step.line,
                                msg: format!("HEALTHCHECK --{k}={v}: not a duration (30s, 1m30s)"),
                            })?),
                        };
                    }
                    cfg["Healthcheck"] = hc;
                }
                Kind::Run(c) => {
                    let argv = argv_of(c, &st.shell);
                    let mut env = st.env.clone();
                    for (k, v) in &st.args {
                        if !env.iter().any(|(n, _)| n == k) {
                            env.push((k.clone(), v.clone()));
                        }
                    }
                    if !env.iter().any(|(k, _)| k == "PATH") {
                        env.push((
                            "PATH".into(),
                            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
                        ));
                    }
                    let desc = serde_json::to_string(
                        &json!({"run": argv, "env": env, "workdir": st.workdir, "user": st.user}),
                    )
                    .unwrap_or_default();
                    fs_action = Some((
                        Action::Run {
                            argv,
                            env,
                            workdir: st.workdir.clone(),
                            user: st.user.clone(),
                        },
                        sha(&["RUN", &desc]),
                    ));
                }
                Kind::Copy {
                    add,
                    from,
                    chown,
                    chmod,
                    sources,
                    dest,
                } => {
                    let sources: Vec<String> = sources.iter().map(|s| ex(s)).collect();
                    let dest = context::resolve_dest(&ex(dest), &st.workdir);
                    let chown = chown.as_ref().map(|c| ex(c));
                    let chmod = match chmod {
                        Some(m) => Some(crate::worker::parse_chmod(m).ok_or_else(|| {
                            Error::Dockerfile {
                                line: step.line,
                                msg: format!("--chmod={m}: expected an octal mode such as 0755"),
                            }
                        })?),
                        None => None,
                    };
                    let (copy_from, content) = match from {
                        None => {
                            let mut matches = Vec::new();
                            for s in &sources {
                                matches.extend(
                                    context::expand_source(&req.context, s, &ignore).map_err(
                                        |e| Error::Step {
                                            line: step.line,
                                            msg: e.to_string(),
                                        },
                                    )?,
                                );
                            }
                            (
                                CopyFrom::Context,
                                context::hash_sources(&req.context, &matches, &ignore)?,
                            )
                        }
                        Some(f) => {
                            let j = stage_index(&ex(f), i).ok_or_else(|| Error::Dockerfile {
                                line: step.line,
                                msg: format!("COPY --from={f}: no earlier stage of that name (to copy from an image, add a stage `FROM IMAGE AS name`)"),
                            })?;
                            let key = states[j]
                                .as_ref()
                                .map(|s| s.key.clone())
                                .unwrap_or_default();
                            (CopyFrom::Stage(j), key)
                        }
                    };
                    let desc = serde_json::to_string(&json!({
                        "add": add, "sources": sources, "dest": dest, "chown": chown, "chmod": chmod, "content": content
                    }))
                    .unwrap_or_default();
                    fs_action = Some((
                        Action::Copy {
                            from: copy_from,
                            sources,
                            dest,
                            chown,
                            chmod,
                            add: *add,
                        },
                        sha(&["COPY", &desc]),
                    ));
                }
            }
            let Some((action, digest)) = fs_action else {
                st.history
                    .push(json!({"created_by": step.text, "empty_layer": true}));
                continue;
            };
            let key = sha(&[&st.key, &digest]);
            st.key = key.clone();
            let hit = if req.no_cache {
                None
            } else {
                CacheEntry::load(&paths.cache, &key)
            };
            let hit = hit.filter(|h| h.layer.as_ref().is_none_or(|l| blobs.has(&l.digest)));
            match &hit {
                Some(_) => cached += 1,
                None => ran += 1,
            }
            steps.push(PlanStep {
                line: step.line,
                text: step.text.clone(),
                key,
                cached: hit,
                action,
            });
            // The layer list is completed after the worker ran.
            st.history
                .push(json!({"created_by": step.text, "berth_step": steps.len() - 1}));
        }
        plan_stages.push(PlanStage {
            title,
            needed: true,
            base: plan_base,
            steps,
        });
        states[i] = Some(st);
    }
    let plan = Plan {
        work: paths.work.clone(),
        blobs: paths.blobs.clone(),
        cache: paths.cache.clone(),
        context: req.context.clone(),
        stages: plan_stages,
    };
    if ran > 0 {
        let plan_path = paths.work.join("plan.json");
        std::fs::create_dir_all(&paths.work).map_err(|e| Error::io("create", &paths.work, e))?;
        std::fs::write(
            &plan_path,
            serde_json::to_vec(&plan).map_err(|e| Error::Plan(e.to_string()))?,
        )
        .map_err(|e| Error::io("write", &plan_path, e))?;
        let code = worker(&plan_path)?;
        if code != 0 {
            return Err(Error::WorkerFailed(code));
        }
    } else {
        eprintln!("berth: all {cached} steps are in the build cache");
    }
    assemble(
        &plan,
        target,
        states[target].take(),
        &blobs,
        &paths.cache,
        ran,
        cached,
    )
}

/// The stages the target needs: itself, the stages it starts from and
/// those it copies from, transitively.
fn needed_stages(
    df: &Dockerfile,
    froms: &[String],
    target: usize,
    stage_index: &dyn Fn(&str, usize) -> Option<usize>,
) -> BTreeSet<usize> {
    let mut needed = BTreeSet::new();
    let mut todo = vec![target];
    while let Some(i) = todo.pop() {
        if !needed.insert(i) {
            continue;
        }
        if let Some(j) = stage_index(&froms[i], i) {
            todo.push(j);
        }
        for step in &df.stages[i].steps {
            if let Kind::Copy { from: Some(f), .. } = &step.kind {
                if let Some(j) = stage_index(f, i) {
                    todo.push(j);
                }
            }
        }
    }
    needed
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

/// One gzip layer of a base image whose layers the store does not keep:
/// its squashfs as a tar (`sqfs2tar`), cached by image id.
fn flatten_base(img: &BaseImage, blobs: &Blobs, cache: &Path) -> Result<BlobRef> {
    let key = sha(&["flatten", &img.id]);
    if let Some(CacheEntry { layer: Some(l) }) = CacheEntry::load(cache, &key) {
        if blobs.has(&l.digest) {
            return Ok(l);
        }
    }
    eprintln!(
        "berth: making one layer of the base image {} (once per base image)",
        short(&img.id)
    );
    let mut child = Command::new("sqfs2tar")
        .arg(&img.squashfs)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::io("run sqfs2tar (squashfs-tools-ng) on", &img.squashfs, e))?;
    let mut out = child
        .stdout
        .take()
        .ok_or_else(|| Error::Plan("sqfs2tar has no output".into()))?;
    let mut layer = blobs.layer_writer()?;
    std::io::copy(&mut out, &mut layer).map_err(|e| {
        Error::io(
            "copy sqfs2tar's output into the base layer for",
            &img.squashfs,
            e,
        )
    })?;
    let st = child
        .wait_with_output()
        .map_err(|e| Error::io("run sqfs2tar on", &img.squashfs, e))?;
    if !st.status.success() {
        return Err(Error::Plan(format!(
            "sqfs2tar {}: {}",
            img.squashfs.display(),
            String::from_utf8_lossy(&st.stderr).trim()
        )));
    }
    let layer = blobs.commit_layer(layer)?;
    CacheEntry {
        layer: Some(layer.clone()),
    }
    .save(cache, &key)
    .map_err(|e| Error::io("write the cache entry", cache, e))?;
    Ok(layer)
}

fn short(id: &str) -> &str {
    let h = id.trim_start_matches("sha256:");
    &h[..h.len().min(12)]
}

/// The target stage's config and manifest, with every layer: its base's,
/// those of the stages it starts from, its own.
fn assemble(
    plan: &Plan,
    target: usize,
    state: Option<StageState>,
    blobs: &Blobs,
    cache: &Path,
    ran: usize,
    cached: usize,
) -> Result<Built> {
    let st = state.ok_or_else(|| Error::Plan("the target stage was not prepared".into()))?;
    // Layers: the chain of stages the target starts from, bottom first.
    let mut chain = vec![target];
    while let Base::Stage(j) = plan.stages[*chain.last().unwrap_or(&target)].base {
        chain.push(j);
    }
    let mut layers = st.layers.clone();
    let mut history = Vec::new();
    for h in &st.history {
        history.push(h.clone());
    }
    // st.layers holds the base's layers (and, through FROM stage, the
    // earlier stages' ones already resolved at their end); now each stage
    // of the chain adds its steps' layers in order.
    let mut step_layers = Vec::new();
    for &s in chain.iter().rev() {
        for step in &plan.stages[s].steps {
            let entry = step
                .cached
                .clone()
                .or_else(|| CacheEntry::load(cache, &step.key))
                .ok_or_else(|| {
                    Error::Plan(format!(
                        "line {}: the step left no result in the build cache",
                        step.line
                    ))
                })?;
            step_layers.push(entry.layer);
        }
    }
    // History entries tagged with a step index: empty_layer when the step
    // changed nothing.
    let mut k = 0;
    for h in history.iter_mut() {
        if h.get("berth_step").is_some() {
            let layer = step_layers.get(k).cloned().flatten();
            k += 1;
            if let Some(obj) = h.as_object_mut() {
                obj.remove("berth_step");
                if layer.is_none() {
                    obj.insert("empty_layer".into(), json!(true));
                }
            }
        }
    }
    layers.extend(step_layers.into_iter().flatten());
    for l in &layers {
        if !blobs.has(&l.digest) {
            return Err(Error::Plan(format!(
                "layer {} is missing from the blob store",
                l.digest
            )));
        }
    }
    let mut config = st.config;
    config["rootfs"] = json!({"type": "layers", "diff_ids": layers.iter().map(|l| l.diff_id.clone()).collect::<Vec<_>>()});
    config["history"] = json!(history);
    if config["architecture"].is_null() {
        config["architecture"] = json!(host_arch());
    }
    if config["os"].is_null() {
        config["os"] = json!("linux");
    }
    let config_bytes = serde_json::to_vec(&config).map_err(|e| Error::Plan(e.to_string()))?;
    let config_digest = blobs.put(&config_bytes)?;
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config_bytes.len()},
        "layers": layers.iter().map(|l| json!({"mediaType": LAYER_MEDIA_TYPE, "digest": l.digest, "size": l.size})).collect::<Vec<_>>(),
    });
    let manifest_bytes = serde_json::to_vec(&manifest).map_err(|e| Error::Plan(e.to_string()))?;
    let manifest_digest = blobs.put(&manifest_bytes)?;
    Ok(Built {
        config: config_bytes,
        manifest: manifest_bytes,
        manifest_digest,
        layers,
        ran,
        cached,
    })
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
}
