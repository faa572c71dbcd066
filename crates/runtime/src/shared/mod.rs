//! Per-node shared containers (`berth run --shared KEY`, the Slurm plugin's
//! default mode, `berth exec`): the first task with a key builds the
//! container ([`crate::container::build`]) and starts its *anchor*, a
//! process that keeps that container's namespaces alive and does nothing
//! else ([`anchor`]); every task with the same key, the first one
//! included, joins the anchor's namespaces with `setns` and `exec`s its
//! command ([`join`]). The tasks of a node then share one user namespace,
//! one mount namespace and one page cache (MPI's shared memory and
//! cross-memory attach work between them), and a join costs about a plain
//! `exec`.
//!
//! Lifetime: [`crate::node`]'s lease protocol, as for keepers: each task
//! holds a share of the container while it lives (a task that crashes
//! drops its share with its descriptors and takes no one else down);
//! tasks decide to join or create under the container's `lock`; the
//! anchor leaves `linger` after the last task left, under that lock, so no
//! task joins an anchor that is going.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::container::{Process, RunSpec};
use crate::error::{Error, Result};
use crate::idmap::IdMode;
use crate::node::{self, Deciding, Share};

pub mod anchor;
mod create;
pub mod in_place;
mod join;
mod layer;
mod named;

pub use anchor::anchor_main;
pub use layer::writable_layer;
use named::{in_use, other_options, processes_in, replace_idle, ENDING_WAIT};
pub use named::{lookup_in_use, named_dir, not_in_use, NamedPlan};

/// The decision lock of a container's directory.
const DECIDE_LOCK: &str = "lock";

/// What a shared container records about itself (`info.json`), for the
/// tasks that join it, `berth ps` and `berth exec`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedInfo {
    /// The container's key (its name).
    pub key: String,
    /// The image as the creating task named it.
    pub image: String,
    /// The image id.
    pub image_id: String,
    /// The anchor's pid.
    pub pid: i32,
    /// The anchor's start time (clock ticks since boot, /proc/PID/stat),
    /// so a recycled pid is never taken for the anchor.
    pub start_time: u64,
    /// The keeper whose user namespace the container's was made in.
    pub keeper_pid: i32,
    /// Id mapping.
    pub mode: IdMode,
    /// What decides the container's file system (image, binds, options):
    /// a task asking for something else is refused rather than given a
    /// container that differs from what it asked for.
    pub fingerprint: String,
    /// Seconds since the epoch at creation.
    pub created: u64,
    /// The creating task's working directory.
    pub workdir: String,
    /// The creating task's environment (`berth exec` starts from it).
    pub env: Vec<(String, String)>,
    /// The namespaces of its own beyond mount and user (`net`, `ipc`,
    /// `uts`), which joining tasks enter too.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// The anchor's descriptor of the container's writable layer (a
    /// writable root's memory upper layer), which `berth commit KEY` takes
    /// from the anchor ([`writable_layer`]) and saves while the container
    /// runs.
    #[serde(default)]
    pub upper_fd: Option<i32>,
    /// The image's squashfs file and where the squashfs starts in it: how
    /// `berth commit KEY` finds an image run from a file, which is in no
    /// store.
    #[serde(default)]
    pub squashfs: Option<PathBuf>,
    /// See `squashfs` (an Apptainer SIF's partition; 0 otherwise).
    #[serde(default)]
    pub squashfs_offset: u64,
    /// The Slurm step whose task made it (`JOB.STEP`): the step's other
    /// tasks are not runs that join another step's container.
    #[serde(default)]
    pub step: Option<String>,
}

impl SharedInfo {
    /// Made by a task of Slurm step `step` (`JOB.STEP`): the container is
    /// that step's other tasks' own.
    pub fn made_by(&self, step: Option<&str>) -> bool {
        step.is_some() && self.step.as_deref() == step
    }
}

/// The namespaces of its own a container of `spec` has beyond mount and
/// user, by their /proc/PID/ns names: the network namespace is made in
/// the keeper's user namespace, IPC and UTS in the command's.
pub fn own_namespaces(spec: &RunSpec) -> Vec<(crate::sys::Namespace, &'static str)> {
    use crate::sys::Namespace;
    let mut out = Vec::new();
    if spec.net_none {
        out.push((Namespace::Net, "net"));
    }
    if spec.ipc_ns {
        out.push((Namespace::Ipc, "ipc"));
    }
    if spec.uts_ns {
        out.push((Namespace::Uts, "uts"));
    }
    out
}

/// Whether a container's own namespace of `kind` belongs to the keeper's
/// user namespace (network, IPC: made with the container's mount
/// namespace) rather than to the container's nested one (UTS).
pub(crate) fn of_keeper(kind: crate::sys::Namespace) -> bool {
    matches!(
        kind,
        crate::sys::Namespace::Net | crate::sys::Namespace::Ipc
    )
}

/// A shared container that is alive, as `berth ps` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Listed {
    /// What the container recorded.
    #[serde(flatten)]
    pub info: SharedInfo,
    /// Processes in the container, the anchor not counted.
    pub processes: usize,
}

/// Where a run goes: the shared container `key`, which stays `linger`
/// after its last task; `image` is the image as the task named it.
#[derive(Debug, Clone, Serialize)]
pub struct Placement {
    /// The container's key.
    pub key: String,
    /// How long it stays without tasks.
    #[serde(serialize_with = "crate::container::seconds")]
    pub linger: Duration,
    /// The image as named.
    pub image: String,
    /// Which live container the task may join.
    pub reuse: Reuse,
    /// The task's join is handed over to its caller
    /// ([`in_place`]); the command is not run.
    #[serde(skip)]
    pub hand_over: bool,
    /// For a named container kept on the node (the Slurm plugin's): what
    /// the run was prepared for, checked again under the key's decision
    /// lock ([`Error::Replan`] where it no longer holds).
    pub named: Option<NamedPlan>,
    /// The Slurm step of the run (`JOB.STEP`), recorded by the task that
    /// makes the container ([`SharedInfo::step`]).
    pub step: Option<String>,
}

/// Which live container under a key a task joins, and whether it may
/// create one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reuse {
    /// One made from the same image with the same options (else the task
    /// is refused); created if none runs.
    #[default]
    Same,
    /// Whatever runs under the key, as it is (a named container of a
    /// Slurm job, Pyxis's `auto`); created if none runs.
    Any,
    /// Whatever runs under the key, as it is; never created (a step that
    /// names a container but no image).
    Existing,
    /// A new one: refused if one runs under the key, unless another task
    /// of the run's Slurm step made it with the same options (Pyxis's
    /// `NAME:create` makes one container per node for a step's tasks).
    New,
    /// One that a task runs in now (Pyxis's `NAME:exec`): never created,
    /// and not one whose tasks all left, which is on its way out.
    Running,
}

impl Reuse {
    /// The word for it (`same`, `any`, `existing`, `new`, `running`).
    pub fn parse(word: &str) -> Option<Self> {
        Some(match word {
            "same" => Reuse::Same,
            "any" => Reuse::Any,
            "existing" => Reuse::Existing,
            "new" => Reuse::New,
            "running" => Reuse::Running,
            _ => return None,
        })
    }
}

/// Whether `key` can name a shared container ([`berth_config::names`]).
pub fn validate_key(key: &str) -> Result<()> {
    if berth_config::names::key_ok(key) {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "container name {key:?}: {}",
            berth_config::names::KEY_RULE
        )))
    }
}

fn containers_dir() -> Result<PathBuf> {
    Ok(node::state_dir()?.join("containers"))
}

/// The directory of shared container `key` (made, private, if missing):
/// its record and locks, and what its tasks share.
pub fn container_dir(key: &str) -> Result<PathBuf> {
    validate_key(key)?;
    let dir = containers_dir()?.join(key);
    node::private_dir(&dir)?;
    Ok(dir)
}

fn anchor_alive(info: &SharedInfo) -> bool {
    node::proc_start(info.pid).is_some_and(|(t, zombie)| t == info.start_time && !zombie)
}

/// The container's record, if its anchor is alive.
fn read_alive(dir: &Path) -> Option<SharedInfo> {
    let text = crate::state::read(&dir.join("info.json")).ok()?;
    let info: SharedInfo = serde_json::from_str(&text).ok()?;
    anchor_alive(&info).then_some(info)
}

/// What of `spec` decides the container's file system.
fn fingerprint(spec: &RunSpec) -> String {
    let mut print = serde_json::json!({
        "image": spec.image.id,
        "binds": spec.binds,
        "writable": spec.writable,
        "mode": spec.identity.mode.as_str(),
        "net_none": spec.net_none,
        "ipc": spec.ipc_ns,
        "uts": spec.uts_ns,
    });
    // A named container's layer (only then: the prints of containers made
    // by an earlier berth stay as they were).
    if let Some(overlay) = &spec.overlay {
        print["overlay"] = serde_json::json!(overlay);
    }
    print.to_string()
}

/// A task placed in a live shared container, holding its share.
pub struct Placed {
    info: SharedInfo,
    share: Share,
    job: Process,
}

impl Placed {
    /// Runs the task's command in the container; its exit code.
    pub fn join(self) -> Result<i32> {
        join::join(&self.info, &self.job, self.share)
    }
}

/// Places `spec`'s command in the shared container `placement.key`,
/// creating the container if no live one has that key (`image_file`: the
/// image, already open, for a keeper started then). `let_go` is called as
/// soon as the task needs nothing more of the node's other ranks: when
/// the keeper is leased for a container it creates, or when it has
/// decided to join one. The task joins with [`Placed::join`].
pub fn place(
    spec: &RunSpec,
    placement: &Placement,
    image_file: Option<&File>,
    let_go: &mut dyn FnMut(),
) -> Result<Placed> {
    if spec.pid_ns {
        return Err(Error::Usage(
            "--pid cannot be combined with a shared container (its tasks join one container; they keep the host's PID namespace)".into(),
        ));
    }
    let key = &placement.key;
    let dir = container_dir(key)?;
    let wanted = fingerprint(spec);
    let mut ending_since = None;
    loop {
        let deciding = Deciding::begin(&dir, DECIDE_LOCK)?;
        let (info, share) = match read_alive(&dir) {
            // One another task of this run's Slurm step made is its own.
            Some(info)
                if placement.reuse == Reuse::New && !info.made_by(placement.step.as_deref()) =>
            {
                return Err(Error::Usage(format!(
                    "shared container {key} already runs ({}); it was asked to be created anew",
                    info.image
                )))
            }
            Some(info) if placement.reuse == Reuse::Running && !in_use(&deciding, &info)? => {
                return Err(not_in_use(key))
            }
            Some(info) if placement.named.is_some() => {
                let busy = in_use(&deciding, &info)?;
                // Made meanwhile with this run's options (by another task
                // of its step): joined, as nothing of the run's is lost.
                let same = info.fingerprint == wanted;
                match (placement.named, busy) {
                    // (New: made by another task of the run's step.)
                    (Some(NamedPlan::Fresh), true)
                        if !same && matches!(placement.reuse, Reuse::Same | Reuse::New) =>
                    {
                        return Err(other_options(key, &info))
                    }
                    (Some(NamedPlan::Fresh), true) if !same => {
                        return Err(Error::Replan(key.clone()))
                    }
                    // Not the instance the run was prepared for.
                    (Some(NamedPlan::Join { anchor, started }), true)
                        if (anchor, started) != (info.pid, info.start_time) =>
                    {
                        return Err(Error::Replan(key.clone()))
                    }
                    (Some(NamedPlan::Join { .. }), false) => {
                        return Err(Error::Replan(key.clone()))
                    }
                    (Some(NamedPlan::Fresh), false) => {
                        replace_idle(&info)?;
                        deciding.end();
                        continue;
                    }
                    _ => match deciding.try_share()? {
                        Some(share) => {
                            let_go();
                            (info, share)
                        }
                        None => return Err(Error::Replan(key.clone())),
                    },
                }
            }
            Some(info)
                if info.fingerprint != wanted
                    && matches!(placement.reuse, Reuse::Same | Reuse::New) =>
            {
                return Err(other_options(key, &info))
            }
            Some(info) => match deciding.try_share()? {
                Some(share) => {
                    let_go();
                    (info, share)
                }
                None => {
                    // Its anchor is leaving: let it go, then look again.
                    deciding.end();
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    continue;
                }
            },
            None if placement.reuse == Reuse::Running => return Err(not_in_use(key)),
            None if matches!(placement.named, Some(NamedPlan::Join { .. })) => {
                return Err(Error::Replan(key.clone()))
            }
            // Its anchor was killed (Slurm's cgroup ends a step's processes)
            // while another step's tasks still run in it: their overlay on
            // the changes is mounted still, and a second one on the same
            // layer is undefined.
            None if placement.named.is_some() && !deciding.idle()? => {
                // A step that is being ended: its tasks go within Slurm's
                // KillWait.
                let since = *ending_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() < ENDING_WAIT {
                    deciding.end();
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    continue;
                }
                return Err(Error::Usage(format!(
                    "shared container {key} ended while tasks of another step still run in it; its changes cannot be used again until they end: wait for them (or end them), then run again"
                )));
            }
            // A named container that does not run is started anew.
            None if placement.reuse == Reuse::Existing && placement.named.is_none() => {
                return Err(not_running(key))
            }
            None => {
                let info =
                    create::create(spec, &dir, placement, wanted.clone(), image_file, let_go)?;
                (info, deciding.share()?)
            }
        };
        deciding.end();
        return Ok(Placed {
            info,
            share,
            job: spec.process.clone(),
        });
    }
}

/// The error for a container that does not run under `key`.
pub fn not_running(key: &str) -> Error {
    Error::Usage(format!(
        "no shared container {key} runs on this node, and no image was given to create it (berth ps lists them; they go away with their last task)"
    ))
}

/// Runs `job` in the live shared container `key` (`berth exec`).
pub fn exec(key: &str, job: &Process) -> Result<i32> {
    let (info, share) = hold(key)?.ok_or_else(|| {
        Error::Usage(format!(
            "no shared container {key} on this node (berth ps lists them; they go away with their last task)"
        ))
    })?;
    join::join(&info, job, share)
}

/// The record of the live shared container `key` and a share of it: the
/// container does not end while the share lives (`berth exec`, `berth
/// commit`). `None` if no container of the key runs.
pub fn hold(key: &str) -> Result<Option<(SharedInfo, Share)>> {
    validate_key(key)?;
    let dir = containers_dir()?.join(key);
    if !dir.is_dir() {
        return Ok(None);
    }
    loop {
        let deciding = Deciding::begin(&dir, DECIDE_LOCK)?;
        let Some(info) = read_alive(&dir) else {
            deciding.end();
            return Ok(None);
        };
        let Some(share) = deciding.try_share()? else {
            deciding.end();
            std::thread::sleep(std::time::Duration::from_millis(1));
            continue;
        };
        deciding.end();
        return Ok(Some((info, share)));
    }
}

/// The record of the live shared container `key`.
pub fn lookup(key: &str) -> Result<Option<SharedInfo>> {
    validate_key(key)?;
    Ok(read_alive(&containers_dir()?.join(key)))
}

/// The caller's live shared containers on this node, by key; records of
/// dead ones are removed.
pub fn list() -> Result<Vec<Listed>> {
    let dir = containers_dir()?;
    let Ok(entries) = fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if entry
            .file_name()
            .as_encoded_bytes()
            .starts_with(GONE.as_bytes())
        {
            // A removal an earlier `berth ps` did not finish: no key names it.
            let _ = fs::remove_dir_all(&path);
            continue;
        }
        match read_alive(&path) {
            Some(info) => {
                let processes = processes_in(info.pid);
                out.push(Listed { info, processes });
            }
            None => remove_dead(&path),
        }
    }
    out.sort_by(|a, b| a.info.key.cmp(&b.info.key));
    Ok(out)
}

/// The start of the name a dead container's directory is renamed to
/// before it is removed (no key starts with a dot).
const GONE: &str = ".gone-";

/// Removes the dead container's directory `path`, unless a task is
/// deciding under its lock right now or made it live meanwhile. It is
/// renamed first, under the lock, to a name no key reaches, so a task that
/// comes while it is being removed makes a fresh directory (see
/// [`node::lock_linked`]) instead of working in one being emptied.
fn remove_dead(path: &Path) {
    use rustix::fs::{flock, FlockOperation};
    let Ok(lock) = File::open(path.join(DECIDE_LOCK)) else {
        return;
    };
    if flock(&lock, FlockOperation::NonBlockingLockExclusive).is_err() || read_alive(path).is_some()
    {
        return;
    }
    // Tasks still hold shares of a container whose anchor was killed: its
    // lock stays for the next run to see (a named container's changes are
    // still mounted by them).
    let users = File::open(path.join("users.lock"));
    if users.is_ok_and(|u| flock(&u, FlockOperation::NonBlockingLockExclusive).is_err()) {
        return;
    }
    let Some(name) = path.file_name() else {
        return;
    };
    let mut gone = std::ffi::OsString::from(GONE);
    gone.push(name);
    gone.push(format!("-{}", std::process::id()));
    let gone = path.with_file_name(gone);
    if fs::rename(path, &gone).is_ok() {
        let _ = fs::remove_dir_all(&gone);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dead container's directory goes (by way of a name no key
    /// reaches); one whose lock a task holds stays.
    #[test]
    fn only_an_undecided_dead_container_is_removed() {
        use rustix::fs::{flock, FlockOperation};
        let d = tempfile::tempdir().unwrap();
        let dead = d.path().join("k1");
        let busy = d.path().join("k2");
        for dir in [&dead, &busy] {
            fs::create_dir(dir).unwrap();
            File::create(dir.join(DECIDE_LOCK)).unwrap();
        }
        let held = File::open(busy.join(DECIDE_LOCK)).unwrap();
        flock(&held, FlockOperation::LockExclusive).unwrap();
        remove_dead(&dead);
        remove_dead(&busy);
        let left: Vec<_> = fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["k2"]);
    }

    #[test]
    fn keys() {
        for ok in ["a", "job-12.3", "slurm-7_0", "X.y-z"] {
            assert!(validate_key(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".hidden",
            "-x",
            "_x",
            "a/b",
            "..",
            "a b",
            &"k".repeat(201),
        ] {
            assert!(validate_key(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn records_name_the_mode_as_before() {
        // `berth ps --format json` and the Slurm epilog read `mode`.
        let j = serde_json::to_value(IdMode::FakeRoot).unwrap();
        assert_eq!(j, "fakeroot");
        assert_eq!(serde_json::to_value(IdMode::HostRoot).unwrap(), "root");
    }
}
