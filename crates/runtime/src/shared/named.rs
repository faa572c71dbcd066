//! Named containers kept on the node (`--shared KEY --name NAME`, the
//! Slurm plugin's): where their changes live, whether a container is in
//! use, and ending an idle one so that a run starts it anew from its
//! changes with its own options (Pyxis's semantics).

use std::fs;
use std::path::PathBuf;

use serde::Serialize;

use super::{anchor_alive, containers_dir, lookup, validate_key, SharedInfo};
use crate::error::{Error, Result};
use crate::node;

/// What a run of a named container kept on the node was prepared for
/// (each step starts it afresh from its kept changes with its own
/// options, as Pyxis does, unless a task of another step runs in it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NamedPlan {
    /// Join the container as it runs: a task runs in it.
    Join,
    /// Start it anew: none runs, or one that runs no task, which is ended.
    Fresh,
}

/// The error for a container that no task runs in under `key` (`--reuse
/// running`, Pyxis's `NAME:exec`).
pub fn not_in_use(key: &str) -> Error {
    Error::Usage(format!(
        "no task runs in a shared container {key} on this node, and this run only joins a running one (NAME:exec, --reuse running)"
    ))
}

/// The record of the live shared container `key` while it is in use
/// ([`in_use`]; `None` for one whose tasks all left, which a
/// [`NamedPlan::Fresh`] run replaces). Without the key's decision lock,
/// so [`place`] checks it again.
pub fn lookup_in_use(key: &str) -> Result<Option<SharedInfo>> {
    let Some(info) = lookup(key)? else {
        return Ok(None);
    };
    let dir = containers_dir()?.join(key);
    let idle = node::open_lock(&dir.join("users.lock"))
        .map(|users| users.try_lock().is_ok())
        .unwrap_or(false);
    Ok(in_use(idle, &info).then_some(info))
}

/// Whether the live container `info` is in use: a task holds a share of it
/// (`idle` is false), or a process still runs in it (one started in the
/// background, or a task that closed its share): as its anchor, which
/// stays while either holds, a run does not end it then.
pub(super) fn in_use(idle: bool, info: &SharedInfo) -> bool {
    !idle || processes_in(info.pid) > 0
}

/// The directory where the changes of the named container kept on the
/// node under `key` live (`RUNTIME/named/KEY`: apart from the container's
/// record, which goes when the container goes; the Slurm job epilog
/// removes it), its parent made if missing.
pub fn named_dir(key: &str) -> Result<PathBuf> {
    validate_key(key)?;
    let named = node::state_dir()?.join("named");
    node::private_dir(&named)?;
    Ok(named.join(key))
}

/// Ends the idle container `info` (no task runs in it; its caller holds
/// the key's decision lock) and waits until its anchor has gone.
pub(super) fn replace_idle(info: &SharedInfo) -> Result<()> {
    let Some(anchor) = node::Pinned::new(info.pid) else {
        if !anchor_alive(info) {
            return Ok(());
        }
        return Err(Error::Setup(format!(
            "shared container {}: cannot take hold of its anchor (pid {}) to start it anew (pidfd_open needs Linux 5.3)",
            info.key, info.pid
        )));
    };
    if !anchor_alive(info) {
        return Ok(());
    }
    if anchor.kill_and_wait(std::time::Duration::from_secs(5)) {
        Ok(())
    } else {
        Err(Error::Setup(format!(
            "shared container {}: its anchor (pid {}) did not end; it was to be started anew",
            info.key, info.pid
        )))
    }
}

/// How many of the caller's processes share the anchor's mount namespace.
pub(super) fn processes_in(anchor: i32) -> usize {
    let Ok(ns) = fs::read_link(format!("/proc/{anchor}/ns/mnt")) else {
        return 0;
    };
    let Ok(procs) = fs::read_dir("/proc") else {
        return 0;
    };
    procs
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid != anchor)
        .filter(|pid| fs::read_link(format!("/proc/{pid}/ns/mnt")).is_ok_and(|l| l == ns))
        .count()
}
