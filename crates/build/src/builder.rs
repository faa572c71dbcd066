//! The build driver, outside the user namespace: resolves each stage's
//! base, walks the instructions to track ENV, ARG, WORKDIR, USER, SHELL and
//! the image config, keys every file-system step for the cache (the parent
//! key, the expanded instruction, its environment and, for COPY, the
//! sources' content hash), hands the steps the cache lacks to the worker,
//! and assembles the image: config, OCI manifest and layer blobs in the
//! store's blob directory, ready to convert to squashfs and to push.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use berth_image::store::blobs::Blobs;
use berth_image::store::build_cache::CacheEntry;

use crate::base_layer::flatten_base;
pub use crate::base_layer::BaseImage;
use crate::cache_key;
use crate::context::Ignore;
use crate::dockerfile::{self, Dockerfile, Kind, Stage};
use crate::instructions::{PendingHistory, StageState, Surroundings};
pub use crate::manifest::Built;
use crate::manifest::{assemble, StepResults};
use crate::plan::{Base, Plan, PlanStage, PlanStep};
use crate::{Error, Result};
use berth_runtime::seccomp::RootEmulation;

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
    /// `--root-emulation`: how RUN steps are root.
    pub root_emulation: RootEmulation,
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

/// Builds per `req`. `base` resolves (pulling if need be) a FROM image;
/// `worker` runs `berth __build-worker PLAN` and returns its exit code.
pub fn build(
    req: &Request,
    paths: &StorePaths,
    base: &dyn Fn(&str, usize) -> Result<BaseImage>,
    worker: &dyn Fn(&Path) -> Result<i32>,
) -> Result<Built> {
    let df = dockerfile::parse(&req.dockerfile)?;
    let emulate = req.root_emulation.decide().map_err(Error::Usage)?;
    let escape = df.escape;
    let blobs = Blobs::new(&paths.blobs)?;
    let globals = global_args(&df, &req.build_args);
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
        let (plan_base, mut st) = match stage_index(&froms[i], i) {
            Some(j) => {
                let prev = states[j]
                    .clone()
                    .ok_or_else(|| Error::Plan(format!("stage {j} was not prepared")))?;
                let st = StageState {
                    args: BTreeMap::new(),
                    cmd_set: false,
                    ..prev
                };
                (Base::Stage(j), st)
            }
            None => {
                let (b, mut st) = start_stage(&froms[i], stage, base, &blobs, &paths.cache)?;
                // Emulated root gives other owners: a cache of its own.
                if emulate {
                    st.key = cache_key::chain(&st.key, &cache_key::of(&["root-emulation"]));
                }
                (b, st)
            }
        };
        let stage_keys = |j: usize| states[j].as_ref().map(|s| s.key.clone());
        let around = Surroundings {
            escape,
            build_args: &req.build_args,
            globals: &globals,
            context: &req.context,
            ignore: &ignore,
            stage: i,
            stage_index: &stage_index,
            stage_keys: &stage_keys,
        };
        let mut steps = Vec::new();
        for step in &stage.steps {
            let Some((action, digest)) = st.apply(step, &around)? else {
                st.history.push(PendingHistory::config_only(&step.text));
                continue;
            };
            let key = cache_key::chain(&st.key, &digest);
            st.key = key.clone();
            let hit = match req.no_cache {
                true => None,
                false => CacheEntry::load(&paths.cache, &key),
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
            // Whether it made a layer is known after the worker ran.
            st.history.push(PendingHistory::step(&step.text));
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
        root_emulation: emulate,
    };
    if ran > 0 {
        run_worker(&plan, &paths.work, worker)?;
    } else {
        eprintln!("berth: all {cached} steps are in the build cache");
    }
    let counts = StepResults { ran, cached };
    assemble(&plan, target, states[target].take(), &blobs, counts)
}

/// The values of the ARGs before the first FROM (for FROM lines): a
/// `--build-arg`, else the default, expanded with the ARGs above it.
fn global_args(df: &Dockerfile, build_args: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut globals: BTreeMap<String, String> = BTreeMap::new();
    for (k, default) in &df.global_args {
        let v = build_args.get(k).cloned().or_else(|| {
            default
                .as_ref()
                .map(|d| dockerfile::expand(d, &|n| globals.get(n).cloned(), df.escape))
        });
        if let Some(v) = v {
            globals.insert(k.clone(), v);
        }
    }
    globals
}

/// A stage that starts from `FROM scratch` or an image (not an earlier
/// stage): its base for the worker and its state.
fn start_stage(
    from: &str,
    stage: &Stage,
    base: &dyn Fn(&str, usize) -> Result<BaseImage>,
    blobs: &Blobs,
    cache: &Path,
) -> Result<(Base, StageState)> {
    let mut st = StageState::scratch();
    if from == "scratch" {
        return Ok((Base::Scratch, st));
    }
    let img = base(from, stage.line)?;
    st.layers = match &img.layers {
        Some(l) => l.clone(),
        None => vec![flatten_base(&img, blobs, cache)?],
    };
    st.history = st
        .layers
        .iter()
        .map(|_| PendingHistory::base_layer(from))
        .collect();
    st.env = img.config.env();
    let oci = &img.config.config.oci;
    st.workdir = oci
        .working_dir()
        .clone()
        .filter(|w| !w.is_empty())
        .unwrap_or_else(|| "/".into());
    st.user = oci.user().clone().unwrap_or_default();
    st.key = cache_key::image(&img.id);
    st.config = img.config;
    Ok((Base::Image(img.squashfs), st))
}

/// Writes the plan into the work directory and runs the worker on it.
fn run_worker(plan: &Plan, work: &Path, worker: &dyn Fn(&Path) -> Result<i32>) -> Result<()> {
    let plan_path = work.join("plan.json");
    std::fs::create_dir_all(work).map_err(|e| Error::io("create", work, e))?;
    let bytes = serde_json::to_vec(plan).map_err(|e| Error::Plan(e.to_string()))?;
    std::fs::write(&plan_path, bytes).map_err(|e| Error::io("write", &plan_path, e))?;
    match worker(&plan_path)? {
        0 => Ok(()),
        code => Err(Error::WorkerFailed(code)),
    }
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
