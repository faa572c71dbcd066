//! The writable layer of a live shared container, taken from its
//! anchor (`berth commit KEY` of a running container).

use super::{anchor_alive, SharedInfo};
use crate::error::{Error, Result};
use crate::node;

/// The live container `info`'s writable layer (its memory upper layer,
/// `O_PATH`), taken from its anchor; `None` for a read-only root. Taken
/// with `pidfd_getfd` (Linux 5.6), not opened through /proc/PID/fd: the
/// kernel gives a non-dumpable process's /proc files to the root of its
/// memory's user namespace, which a keeper that keeps host ids does not
/// map, so they are not the user's to open.
pub fn writable_layer(info: &SharedInfo) -> Result<Option<std::os::fd::OwnedFd>> {
    let Some(fd) = info.upper_fd else {
        return Ok(None);
    };
    let key = &info.key;
    let ended = || Error::Setup(format!("shared container {key} ended meanwhile"));
    let Some(anchor) = node::Pinned::new(info.pid) else {
        return Err(match anchor_alive(info) {
            true => Error::Setup(format!(
                "cannot pin shared container {key}'s anchor (pid {}) with a pidfd: this needs Linux 5.6 or later",
                info.pid
            )),
            false => ended(),
        });
    };
    if !anchor_alive(info) {
        return Err(ended());
    }
    let layer = anchor.take_fd(fd).map_err(|e| {
        let hint = match e {
            crate::sys::Errno::NOSYS => "; this needs Linux 5.6 or later",
            crate::sys::Errno::PERM => "; tracing your own processes may be restricted on this node (kernel.yama.ptrace_scope)",
            _ => "",
        };
        Error::Setup(format!(
            "cannot take the writable layer of shared container {key} from its anchor (pid {}): {e}{hint}",
            info.pid
        ))
    })?;
    if !anchor.still_runs() {
        return Err(ended());
    }
    Ok(Some(layer))
}
