//! A node-local copy of an image's record, by id. Records are content
//! addressed (an id's record never changes), so a run given a full id (as
//! the Slurm plugin passes) needs no metadata request to the store, which
//! may sit on a parallel filesystem: one node reads the store once, not
//! once per rank. Ranks of a node starting at once serialise on a lock
//! per id ([`NodeLock`]): one reads the store and starts the keeper, the
//! others wait and use its copy.

use std::fs::File;
use std::path::{Component, Path, PathBuf};

use berth_config::Config;
use berth_image::store::{self, ImageRecord, StoredImage};
use berth_runtime::{node, state};

/// What the node keeps of an image.
#[derive(serde::Serialize, serde::Deserialize)]
struct CachedImage {
    dir: PathBuf,
    record: ImageRecord,
}

/// The node-local record of a full id (none for names).
fn cache_path(id: &str) -> Option<PathBuf> {
    if !store::is_full_id(id) {
        return None;
    }
    let hex = id.strip_prefix("sha256:")?;
    Some(
        node::state_dir()
            .ok()?
            .join("images")
            .join(format!("{hex}.json")),
    )
}

/// A path of root and plain components only (no `..`, nothing relative).
fn plain(p: &Path) -> bool {
    p.components()
        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}

/// Whether a cached record is one `config` may use: it must name an image
/// directory of a configured store (another configuration's store is not
/// this run's), without `..`, a plain file there, and the id asked for.
fn trusted(cached: &CachedImage, id: &str, config: &Config) -> bool {
    plain(&cached.dir)
        && cached.record.squashfs.file_is_plain()
        && std::iter::once(&config.store)
            .chain(config.shared_stores.iter())
            .any(|s| plain(s) && cached.dir.parent() == Some(&s.join("images")))
        && cached.record.id == id
}

/// The node-local record of `image`, if there is one `config` may use.
pub fn cached(image: &str, config: &Config) -> Option<StoredImage> {
    let path = cache_path(image)?;
    let cached: CachedImage = serde_json::from_str(&state::read(&path).ok()?).ok()?;
    trusted(&cached, image, config).then(|| StoredImage {
        record: cached.record,
        dir: cached.dir,
        names: Vec::new(),
        shared: false,
    })
}

/// An exclusive lock on the node-local record of a full id, held while
/// the node's first run reads the store and starts the keeper.
#[derive(Debug)]
pub struct NodeLock {
    _file: File,
}

/// Takes the lock of `image`'s record (none for names, or if it cannot be
/// made: the run goes on unserialised).
pub fn lock(image: &str) -> Option<NodeLock> {
    let path = cache_path(image)?.with_extension("lock");
    std::fs::create_dir_all(path.parent()?).ok()?;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .ok()?;
    rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive).ok()?;
    Some(NodeLock { _file: f })
}

/// Drops the node-local record of `image`; true if there was one.
pub fn forget(image: &str) -> bool {
    cache_path(image).is_some_and(|p| std::fs::remove_file(p).is_ok())
}

/// Keeps `img`'s record on the node (after a miss: replaces any). A run
/// that names its image (every run of `berth run NAME`) finds the same
/// record there already: it is then left as it is, which spares a write
/// and a rename per run (0.2 ms on a disk's file system).
pub fn remember(img: &StoredImage) {
    let Some(path) = cache_path(&img.record.id) else {
        return;
    };
    let cached = CachedImage {
        dir: img.dir.clone(),
        record: img.record.clone(),
    };
    let Ok(bytes) = serde_json::to_vec(&cached) else {
        return;
    };
    if state::read(&path).is_ok_and(|have| have.as_bytes() == bytes.as_slice()) {
        return;
    }
    if let Some(parent) = path.parent() {
        let _ = std::fs::create_dir_all(parent);
        let _ = state::write(&path, &bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_paths_count() {
        assert!(plain(Path::new("/store/images/sha256-ab")));
        assert!(!plain(Path::new("/store/../etc")));
    }

    #[test]
    fn names_have_no_node_record() {
        assert!(cache_path("debian:12").is_none());
        assert!(cache_path("sha256:abc").is_none());
    }
}
