//! Whom a store may be trusted by: owner and mode checks.

use std::fs;
use std::path::{Path, PathBuf};

/// Why a store path may not be trusted by the calling user: its metadata
/// `m` must show an owner that is the caller or root (root: root only; a
/// shared store may have any owner for other callers, as a site's service
/// account) and no write permission for group or others. Whoever can write
/// a store can change what the containers run from it.
pub(super) fn distrust(m: &fs::Metadata, shared: bool) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    let owner_ok = m.uid() == 0 || m.uid() == me || (shared && me != 0);
    if !owner_ok {
        return Some(format!(
            "belongs to uid {}{}",
            m.uid(),
            if me == 0 {
                " (root uses only root's stores)"
            } else {
                ""
            }
        ));
    }
    if m.mode() & 0o022 != 0 {
        return Some(format!(
            "is writable by its group or others (mode {:o})",
            m.mode() & 0o7777
        ));
    }
    None
}

/// [`distrust`] of the path `p` (not following a last symlink).
pub(super) fn distrust_path(p: &Path, shared: bool) -> Option<String> {
    match fs::symlink_metadata(p) {
        Ok(m) if m.file_type().is_symlink() => {
            // A store root may be a symlink (to scratch, say): its target.
            fs::metadata(p).ok().and_then(|m| distrust(&m, shared))
        }
        Ok(m) => distrust(&m, shared),
        Err(_) => None,
    }
}

/// Why berth does not use the shared store at `path` (its directory or
/// `images/` is writable by a group or others, or root would use another
/// user's), or `None` where it does. `berth doctor` says the same.
pub fn distrust_shared(path: &Path) -> Option<String> {
    distrust_path(path, true).or_else(|| distrust_path(&path.join("images"), true))
}

/// The shared stores a run may use; the others are named in a warning.
pub(super) fn trusted_shared(shared: &[PathBuf]) -> Vec<PathBuf> {
    shared
        .iter()
        .filter(|s| match distrust_shared(s) {
            Some(why) => {
                tracing::warn!("not using the shared store {}: it {why}", s.display());
                false
            }
            None => true,
        })
        .cloned()
        .collect()
}
