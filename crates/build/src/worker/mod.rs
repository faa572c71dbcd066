//! The build worker, `berth __build-worker PLAN`: a fresh berth process that
//! enters a user namespace where the caller is root (with the subordinate
//! id range from /etc/subuid when there is one, so apt-get and dpkg can
//! chown), builds each needed stage's root under the plan's work directory
//! and runs its steps: RUN in a mount namespace pivoted into the root (the
//! host's network, /proc, a few /dev nodes, the host's resolv.conf), COPY
//! and ADD in a child chrooted into the root (so destinations resolve
//! symlinks inside the image). Each step's changes become a layer blob and
//! a build-cache entry. Steps the cache has are not run; their layers are
//! applied only when a later step needs the root.
//!
//! - `stage`: making a stage's root real (overlay on the base, or unpacked).
//! - `sandbox`: the RUN step's mount namespace and exec.
//! - `chroot`: a helper child chrooted into a stage root.
//! - `user`: USER and `--chown` as ids from the image's files.
//! - `copy`: COPY and ADD.
//! - [`error`]: the worker's errors.

mod chroot;
mod copy;
pub mod error;
mod sandbox;
mod stage;
mod user;

use std::fs;
use std::path::{Path, PathBuf};

use berth_image::store::blobs::Blobs;
use berth_image::store::build_cache::CacheEntry;
use berth_runtime::sys::{Kernel, LINUX};

use crate::context::{self, Ignore};
use crate::layer::{self, Snapshot};
use crate::plan::{Action, Base, CopyFrom, Plan};
use crate::{Error, Result};

pub use copy::parse_chmod;
pub use error::{InImageError, OverlayError, UserError};

use berth_config::exit::Exit;
use chroot::in_root;
use copy::copy_step;
use sandbox::run_step;
use stage::{ensure, StageRoot};

/// Exit code of the worker when a RUN step fails (it printed the step's
/// own code): the build's exit code.
pub const EXIT_STEP_FAILED: i32 = Exit::Build.code() as i32;

/// Set once, when the plan asks for root emulation: RUN steps get the
/// filter and apt's hint, `--chown` leaves files root's.
static ROOT_EMULATION: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether this worker emulates root.
fn emulating() -> bool {
    ROOT_EMULATION.load(std::sync::atomic::Ordering::Relaxed)
}

/// Exit code of the worker when it fails itself (it printed why).
pub const EXIT_WORKER: i32 = Exit::Berth.code() as i32;

/// Entry point of `berth __build-worker PLAN`.
pub fn main(args: &[String]) -> i32 {
    let [plan] = args else {
        eprintln!("berth: error: usage: berth __build-worker PLAN");
        return EXIT_WORKER;
    };
    let result = run(Path::new(plan));
    // Stage roots hold files of the image's owners (subordinate ids): only
    // this namespace can remove them.
    if let Some(work) = Path::new(plan).parent() {
        if let Ok(dir) = fs::read_dir(work) {
            let stages: Vec<PathBuf> = dir
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("stage"))
                .map(|e| e.path())
                .collect();
            // Overlay roots and their FUSE lower layers first.
            for p in &stages {
                let _ = LINUX.unmount(p, libc::MNT_DETACH);
            }
            for p in &stages {
                let _ = fs::remove_dir_all(p);
            }
        }
    }
    match result {
        Ok(()) => 0,
        Err(Error::StepFailed { .. }) => EXIT_STEP_FAILED,
        Err(e) => {
            eprintln!("berth: error: {e}");
            EXIT_WORKER
        }
    }
}

fn run(plan_path: &Path) -> Result<()> {
    let plan: Plan =
        serde_json::from_slice(&fs::read(plan_path).map_err(|e| Error::io("read", plan_path, e))?)
            .map_err(|e| Error::Plan(e.to_string()))?;
    berth_runtime::idmap::enter_namespaces(&LINUX, berth_runtime::IdMode::FakeRoot)
        .map_err(|e| Error::Plan(format!("cannot enter the build's user namespace: {e}")))?;
    let full_map = fs::read_to_string("/proc/self/uid_map")
        .map(|m| m.lines().count() > 1)
        .unwrap_or(false);
    // The worker's memory belongs to the initial user namespace (it was
    // executed there): not dumpable, RUN steps (root of the build's
    // namespace only) cannot open its /proc files, its root (the host's)
    // among them. They also get their own PID namespace (sandbox_exec).
    berth_runtime::process::not_dumpable();
    ROOT_EMULATION.store(plan.root_emulation, std::sync::atomic::Ordering::Relaxed);
    if plan.root_emulation {
        eprintln!(
            "berth: note: RUN steps run under root emulation (no subordinate id range for you, or \
             --root-emulation seccomp): chown, setuid and device mknod succeed without effect, \
             so every file the build makes is root's"
        );
    } else if !full_map {
        eprintln!(
            "berth: note: no subordinate id range for you in /etc/subuid and /etc/subgid (or no newuidmap): \
             the build maps only your own id, so files keep root as owner and steps that chown to other users fail"
        );
    }
    let blobs = Blobs::new(&plan.blobs)?;
    let mut states: Vec<StageRoot> = plan
        .stages
        .iter()
        .enumerate()
        .map(|(i, _)| StageRoot {
            root: plan.work.join(format!("stage{i}")),
            upper: None,
            ready: false,
            pending: Vec::new(),
        })
        .collect();
    let total: usize = plan
        .stages
        .iter()
        .filter(|s| s.needed)
        .map(|s| s.steps.len())
        .sum();
    let mut n = 0;
    for (i, stage) in plan.stages.iter().enumerate() {
        if !stage.needed {
            continue;
        }
        eprintln!("[{}/{}] {}", i + 1, plan.stages.len(), stage.title);
        if let Base::Stage(j) = stage.base {
            // Its layers are the earlier stage's, then its own.
            states[i].pending = states[j].pending.clone();
        }
        for step in &stage.steps {
            n += 1;
            if let Some(hit) = &step.cached {
                eprintln!(
                    "STEP {n}/{total} (line {}): {} (cached)",
                    step.line, step.text
                );
                states[i].pending.extend(hit.layer.clone());
                continue;
            }
            eprintln!("STEP {n}/{total} (line {}): {}", step.line, step.text);
            let t0 = std::time::Instant::now();
            ensure(&plan, &mut states, i, full_map)?;
            let root = states[i].root.clone();
            // What to walk for changes: the overlay's upper directory (only
            // what the build changed), else the whole root.
            let scan = states[i].upper.clone().unwrap_or_else(|| root.clone());
            let t1 = std::time::Instant::now();
            let before = Snapshot::take(&scan)?;
            let t2 = std::time::Instant::now();
            match &step.action {
                Action::Run {
                    argv,
                    env,
                    workdir,
                    user,
                } => {
                    let code = run_step(&root, argv, env, workdir, user)?;
                    if code != 0 {
                        eprintln!(
                            "berth: error: Dockerfile line {}: {} failed with exit code {code}",
                            step.line, step.text
                        );
                        return Err(Error::StepFailed {
                            line: step.line,
                            code,
                        });
                    }
                }
                Action::Copy {
                    from,
                    sources,
                    dest,
                    chown,
                    chmod,
                    add,
                } => {
                    let (src_root, ignore) = match from {
                        CopyFrom::Context => (plan.context.clone(), Ignore::load(&plan.context)),
                        CopyFrom::Stage(j) => {
                            ensure(&plan, &mut states, *j, full_map)?;
                            (states[*j].root.clone(), Ignore::default())
                        }
                    };
                    copy_step(
                        &root,
                        &src_root,
                        &ignore,
                        sources,
                        dest,
                        chown.as_deref(),
                        *chmod,
                        *add,
                    )
                    .map_err(|e| Error::Step {
                        line: step.line,
                        msg: e.to_string(),
                    })?;
                }
                Action::Mkdir { path } => {
                    let p = context::inside(&root, path);
                    if !p.is_dir() {
                        in_root(&root, &mut || {
                            fs::create_dir_all(path)
                                .map_err(|e| InImageError::file("create", path, e))
                        })
                        .map_err(|e| Error::Step {
                            line: step.line,
                            msg: e.to_string(),
                        })?;
                    }
                }
            }
            let t3 = std::time::Instant::now();
            let layer = layer::diff(&scan, &before, &blobs, states[i].upper.is_some())?;
            if std::env::var_os("BERTH_TIMING").is_some() {
                eprintln!(
                    "berth: timing: root {:?}, snapshot {:?}, step {:?}, layer {:?}",
                    t1 - t0,
                    t2 - t1,
                    t3 - t2,
                    t3.elapsed()
                );
            }
            let entry = CacheEntry { layer };
            entry
                .save(&plan.cache, &step.key)
                .map_err(|e| Error::io("write the cache entry", &plan.cache, e))?;
        }
    }
    Ok(())
}
