//! Named containers kept on the node (`--shared KEY --name NAME`, the
//! Slurm plugin's): where their changes live, whether a container is in
//! use, and ending an idle one so that a run starts it anew from its
//! changes with its own options (Pyxis's semantics).

use std::fs;
use std::path::PathBuf;

use serde::Serialize;

use super::{
    anchor_alive, container_dir, lookup, read_alive, validate_key, SharedInfo, DECIDE_LOCK,
};
use crate::error::{Error, Result};
use crate::node::{self, Deciding};

/// What a run of a named container kept on the node was prepared for
/// (each step starts it afresh from its kept changes with its own
/// options, as Pyxis does, unless a task of another step runs in it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NamedPlan {
    /// Join the container as it runs: a task runs in it (the instance of
    /// this anchor, pid and start time).
    Join {
        /// The anchor's pid.
        anchor: i32,
        /// The anchor's start time.
        started: u64,
    },
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
/// [`NamedPlan::Fresh`] run replaces). Looked at under the key's decision
/// lock (a task deciding meanwhile is not disturbed), which is let go
/// after: [`super::place`] checks it again.
pub fn lookup_in_use(key: &str) -> Result<Option<SharedInfo>> {
    if lookup(key)?.is_none() {
        return Ok(None);
    }
    let dir = container_dir(key)?;
    let deciding = Deciding::begin(&dir, DECIDE_LOCK)?;
    let Some(info) = read_alive(&dir) else {
        return Ok(None);
    };
    let busy = in_use(&deciding, &info)?;
    deciding.end();
    Ok(busy.then_some(info))
}

/// Whether the live container `info` (its key's decision taken) is in
/// use: a task holds a share of it, or a process still runs in it (one
/// started in the background, or a task that closed its share): as its
/// anchor, which stays while either holds, a run does not end it then.
pub(super) fn in_use(deciding: &Deciding, info: &SharedInfo) -> Result<bool> {
    Ok(!deciding.idle()? || processes_in(info.pid) > 0)
}

/// The directory where the changes of the named container kept on the
/// node under `key` live (`RUNTIME/named/KEY`: apart from the container's
/// record, which goes when the container goes; the Slurm job epilog
/// removes it), its parent made if missing.
pub fn named_dir(key: &str) -> Result<PathBuf> {
    validate_key(key)?;
    let named = node::state_dir()?.join("named");
    node::private_dir(&named)?;
    if let Some(fs) = network_fs(&named) {
        return Err(Error::Usage(format!(
            "berth's runtime directory {} is on {fs}, where overlayfs cannot keep a named container's changes: set XDG_RUNTIME_DIR to a private directory on this node (for example under /tmp or /dev/shm)",
            named.display()
        )));
    }
    Ok(named.join(key))
}

/// The network or FUSE file system `dir` is on, which overlayfs refuses as
/// an upper layer; `None` for a local one.
fn network_fs(dir: &std::path::Path) -> Option<&'static str> {
    // f_type is a 32-bit magic number in a wider signed field.
    let magic = rustix::fs::statfs(dir).ok()?.f_type as u32;
    Some(match magic {
        0x6969 => "NFS",
        0x0bd0_0bd0 => "Lustre",
        0x4750_4653 => "GPFS",
        0x1983_0326 => "BeeGFS",
        0xff53_4d42 | 0xfe53_4d42 => "SMB",
        0x0102_1997 => "9p",
        0x00c3_6400 => "CephFS",
        0x5346_414f => "AFS",
        0x2003_0528 => "OrangeFS",
        0x6573_5546 => "a FUSE file system",
        _ => return None,
    })
}

/// Ends the idle container `info` (no task runs in it; its caller holds
/// the key's decision lock) and waits until its anchor has gone.
pub(super) fn replace_idle(info: &SharedInfo) -> Result<()> {
    // Pinned first: the anchor checked alive is then the one killed.
    let pinned = node::Pinned::new(info.pid);
    if !anchor_alive(info) {
        return Ok(());
    }
    let Some(anchor) = pinned else {
        return Err(Error::Setup(format!(
            "shared container {}: cannot take hold of its anchor (pid {}) to start it anew (pidfd_open needs Linux 5.3)",
            info.key, info.pid
        )));
    };
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

/// How long a run of a named container waits for the tasks of an ended
/// container that still run in it (a step being ended; Slurm's KillWait
/// is 30 s by default) before it fails.
pub(super) const ENDING_WAIT: std::time::Duration = std::time::Duration::from_secs(35);

/// The error for a run that asks for container `key` with other options
/// than those it runs with (`--reuse same`).
pub(super) fn other_options(key: &str, info: &SharedInfo) -> Error {
    Error::Usage(format!(
        "shared container {key} already runs {} with other options (binds, --writable, --fakeroot or the image differ); use another key, or the same options",
        info.image
    ))
}
