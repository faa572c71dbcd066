//! The content-addressed image store.
//!
//! ```text
//! STORE/
//!   images/sha256-<id>/      one directory per image, named by its config digest
//!       image.sqfs           the flattened root filesystem
//!       config.json          the OCI image config, byte for byte (its sha256 is the id)
//!       meta.json            berth's record: names' sources, layers, squashfs facts
//!   names.json               name -> id
//!   blobs/sha256/<hex>       manifest, config and layer blobs of the images berth
//!                            built, for push, save and the build cache
//!   build-cache/<key>.json   one per build step: the layer blob it made, if any
//!   locks/                   flock files: the store, one per image id, blobs.lock
//!                            (held shared by builds, exclusively by prune)
//!   tmp/                     work directories of running pulls and builds
//! ```
//!
//! Publication is one `rename` of a finished work directory into `images/`, so
//! a crash at any point leaves no visible partial image; leftovers in `tmp/`
//! are reclaimed by the next pull or `berth prune`. Locks are `flock`s, which
//! Linux maps to POSIX locks on NFS and Lustre (mounted with `flock`): many
//! processes on many nodes pulling one image convert it once. `berth prune`
//! also removes the blobs and build-cache entries no stored image needs
//! ([`prune`]).
//!
//! - `records`: `meta.json` and the image found in a store.
//! - `locks`: the locks and work directories.
//! - [`blobs`]: the blob directory.
//! - [`build_cache`]: the build cache's entries.
//! - [`prune`]: what `berth prune` removes and what it keeps.
//! - [`original`]: a pulled image's own manifest again, for push and save.

pub mod blobs;
pub mod build_cache;
pub mod layer_cache;
mod locks;
mod lookup;
pub mod original;
pub mod prune;
mod records;
mod trust;

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::reference::ImageRef;

pub use crate::image_config::RunConfig;
pub use locks::{LockGuard, WorkDir};
pub use prune::Pruned;
pub use records::{ImageRecord, LayerRecord, SquashfsRecord, StoredImage};
pub use trust::distrust_shared;

use blobs::Blobs;
use locks::lock_file;
use trust::{distrust_path, trusted_shared};

fn id_dir_name(id: &str) -> String {
    id.replace(':', "-")
}

/// A store: the user's writable one plus read-only shared ones.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
    shared: Vec<PathBuf>,
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Creates `dir` and its missing parents, mode 0700, unless it exists.
pub(crate) fn create_private_dir(dir: &Path) -> Result<()> {
    if !dir.is_dir() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| Error::store("create", dir, e))?;
    }
    Ok(())
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let mut f = File::create(&tmp).map_err(|e| Error::store("write", &tmp, e))?;
    f.write_all(bytes).and_then(|_| f.sync_all()).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        Error::store("write", &tmp, e)
    })?;
    fs::rename(&tmp, path).map_err(|e| Error::store("rename", path, e))
}

impl Store {
    /// Opens (creating if needed) the store at `root`, with `shared` stores
    /// searched after it. A store that someone other than the caller (or
    /// root) could write is refused; such shared stores are skipped.
    pub fn open(root: &Path, shared: &[PathBuf]) -> Result<Self> {
        for sub in ["", "images", "locks", "tmp"] {
            create_private_dir(&root.join(sub))?;
        }
        for p in [root.to_path_buf(), root.join("images")] {
            if let Some(why) = distrust_path(&p, false) {
                return Err(Error::UntrustedStore { path: p, why });
            }
        }
        Ok(Self {
            root: root.to_path_buf(),
            shared: trusted_shared(shared),
        })
    }

    /// The store's root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Locks the whole store (names index updates, prune).
    pub fn lock(&self) -> Result<LockGuard> {
        lock_file(&self.root.join("locks/store.lock"))
    }

    /// The blob directory, `STORE/blobs` (created if missing).
    pub fn blobs(&self) -> Result<Blobs> {
        Blobs::new(&self.blobs_dir())
    }

    /// Where the blob directory is: `STORE/blobs`.
    pub fn blobs_dir(&self) -> PathBuf {
        self.root.join("blobs")
    }

    /// The layer cache, `STORE/layers/sha256` (created if missing).
    pub fn layer_cache(&self) -> Result<layer_cache::LayerCache> {
        layer_cache::LayerCache::new(&self.root)
    }

    /// Where the build cache is: `STORE/build-cache`.
    pub fn build_cache_dir(&self) -> PathBuf {
        self.root.join("build-cache")
    }

    /// Locks one image id while it is converted.
    pub fn lock_image(&self, id: &str) -> Result<LockGuard> {
        lock_file(
            &self
                .root
                .join("locks")
                .join(format!("{}.lock", id_dir_name(id))),
        )
    }

    fn image_dir(&self, id: &str) -> PathBuf {
        self.root.join("images").join(id_dir_name(id))
    }

    /// Whether the writable store has image `id`.
    pub fn has_image(&self, id: &str) -> bool {
        self.image_dir(id).join("meta.json").is_file()
    }

    /// Publishes a finished work directory (holding `image.sqfs` and
    /// `config.json`) as image `record.id`, atomically. The caller holds the
    /// image lock.
    pub fn publish(&self, work: WorkDir, record: &ImageRecord) -> Result<()> {
        let meta = serde_json::to_vec_pretty(record)
            .map_err(|e| Error::BadImage(format!("cannot encode the image record: {e}")))?;
        write_atomic(&work.path().join("meta.json"), &meta)?;
        // Image files are read-only once published.
        for f in ["image.sqfs", "config.json", "meta.json"] {
            let p = work.path().join(f);
            let _ = fs::set_permissions(&p, fs::Permissions::from_mode(0o444));
        }
        // A site store made readable for everyone (0755) shares its images;
        // a private one (0700) keeps them private.
        let shared_mode = fs::metadata(self.root.join("images"))
            .map(|m| m.permissions().mode() & 0o755)
            .unwrap_or(0o700);
        let _ = fs::set_permissions(work.path(), fs::Permissions::from_mode(shared_mode | 0o700));
        let dest = self.image_dir(&record.id);
        if dest.exists() {
            // Someone published it meanwhile without our lock (should not
            // happen); keep theirs.
            return Ok(());
        }
        fs::rename(work.path(), &dest).map_err(|e| Error::store("publish", &dest, e))?;
        if let Ok(d) = File::open(self.root.join("images")) {
            let _ = d.sync_all();
        }
        Ok(())
    }

    fn read_names(root: &Path) -> Result<BTreeMap<String, String>> {
        let path = root.join("names.json");
        if let Some(why) = distrust_path(&path, true) {
            tracing::warn!("ignoring the names in {}: it {why}", path.display());
            return Ok(BTreeMap::new());
        }
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                Error::store(
                    "parse",
                    &path,
                    std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()),
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
            Err(e) => Err(Error::store("read", &path, e)),
        }
    }

    /// Points `name` at image `id` (replacing what it pointed to).
    pub fn set_name(&self, name: &str, id: &str) -> Result<()> {
        let _lock = self.lock()?;
        let mut names = Self::read_names(&self.root)?;
        names.insert(name.to_string(), id.to_string());
        let bytes = serde_json::to_vec_pretty(&names)
            .map_err(|e| Error::BadImage(format!("cannot encode names: {e}")))?;
        write_atomic(&self.root.join("names.json"), &bytes)
    }

    fn load(dir: &Path, shared: bool, names: Vec<String>) -> Option<StoredImage> {
        for p in [dir.to_path_buf(), dir.join("meta.json")] {
            if let Some(why) = distrust_path(&p, shared) {
                tracing::warn!("ignoring {}: it {why}", p.display());
                return None;
            }
        }
        let bytes = fs::read(dir.join("meta.json")).ok()?;
        let record: ImageRecord = serde_json::from_slice(&bytes).ok()?;
        if !record.squashfs.file_is_plain() {
            tracing::warn!(
                "ignoring {}: its squashfs file {:?} is not a plain name",
                dir.display(),
                record.squashfs.file
            );
            return None;
        }
        if let Some(why) = distrust_path(&dir.join(&record.squashfs.file), shared) {
            tracing::warn!("ignoring {}: its squashfs file {why}", dir.display());
            return None;
        }
        Some(StoredImage {
            record,
            dir: dir.to_path_buf(),
            names,
            shared,
        })
    }

    /// Every image of every store (the writable one first).
    pub fn list(&self) -> Result<Vec<StoredImage>> {
        let mut out = Vec::new();
        let mut seen = std::collections::HashSet::new();
        // The writable store's names also name images of shared stores.
        let mine = Self::read_names(&self.root)?;
        for (root, shared) in
            std::iter::once((&self.root, false)).chain(self.shared.iter().map(|s| (s, true)))
        {
            let mut names = mine.clone();
            if shared {
                let Ok(theirs) = Self::read_names(root) else {
                    continue;
                };
                for (name, id) in theirs {
                    names.entry(name).or_insert(id);
                }
            }
            let Ok(entries) = fs::read_dir(root.join("images")) else {
                continue;
            };
            let mut dirs: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
            dirs.sort();
            for dir in dirs {
                let id = dir
                    .file_name()
                    .map(|n| n.to_string_lossy().replacen('-', ":", 1))
                    .unwrap_or_default();
                if !seen.insert(id.clone()) {
                    continue;
                }
                let image_names: Vec<String> = names
                    .iter()
                    .filter(|(_, v)| **v == id)
                    .map(|(k, _)| k.clone())
                    .collect();
                if let Some(img) = Self::load(&dir, shared, image_names) {
                    out.push(img);
                }
            }
        }
        Ok(out)
    }

    /// Removes `wanted`'s name, and the image itself once no name points to
    /// it (or at once for an id). Returns the ids removed.
    pub fn remove(&self, wanted: &str) -> Result<Vec<String>> {
        let img = self.find(wanted)?;
        let _lock = self.lock()?;
        let mut names = Self::read_names(&self.root)?;
        let id = img.record.id.clone();
        let matches = |n: &String| {
            *n == wanted
                || ImageRef::parse(wanted).is_ok_and(|r| r.store_name() == *n)
                || ImageRef::parse_local_name(wanted).is_ok_and(|r| r.store_name() == *n)
        };
        // Only the writable store's names go: a shared store's stay its own,
        // whichever store holds the image they name.
        let by_name: Vec<String> = names
            .iter()
            .filter(|(n, v)| **v == id && matches(n))
            .map(|(n, _)| n.clone())
            .collect();
        let hex = wanted.strip_prefix("sha256:").unwrap_or(wanted);
        let by_id = hex.len() >= 4
            && hex.bytes().all(|b| b.is_ascii_hexdigit())
            && id.trim_start_matches("sha256:").starts_with(hex);
        let mine = names.values().any(|v| *v == id);
        if by_name.is_empty() && !(by_id && (mine || !img.shared)) {
            return Err(Error::Store {
                what: "cannot remove an image or name of a shared store",
                path: img.dir.clone(),
                source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
                hint: "; shared stores are read-only for berth: their owner manages them"
                    .to_string(),
            });
        }
        if by_name.is_empty() {
            names.retain(|_, v| *v != id);
        } else {
            for n in &by_name {
                names.remove(n);
            }
        }
        let bytes = serde_json::to_vec_pretty(&names)
            .map_err(|e| Error::BadImage(format!("cannot encode names: {e}")))?;
        write_atomic(&self.root.join("names.json"), &bytes)?;
        let mut removed = Vec::new();
        if !img.shared && !names.values().any(|v| *v == img.record.id) {
            self.delete_image_dir(&img.dir)?;
            removed.push(img.record.id.clone());
        }
        Ok(removed)
    }

    fn delete_image_dir(&self, dir: &Path) -> Result<()> {
        // Move it out of images/ first: readers never see half an image.
        let grave =
            self.root
                .join("tmp")
                .join(format!("removed-{}-{}", std::process::id(), now_nanos()));
        fs::rename(dir, &grave).map_err(|e| Error::store("remove", dir, e))?;
        let _ = fs::set_permissions(&grave, fs::Permissions::from_mode(0o700));
        fs::remove_dir_all(&grave).map_err(|e| Error::store("remove", &grave, e))
    }
}

/// Whether `id` is a full image id, `sha256:` and 64 hex digits.
pub fn is_full_id(id: &str) -> bool {
    id.strip_prefix("sha256:")
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn now_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// Seconds since the epoch, for records.
pub fn timestamp() -> u64 {
    now_secs()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A record of image `id` for tests.
    pub(crate) fn record(id: &str) -> ImageRecord {
        ImageRecord {
            version: 1,
            id: id.to_string(),
            manifest_digest: None,
            source: "test".into(),
            platform: "linux/amd64".into(),
            stored_at: 0,
            run: RunConfig::default(),
            layers: vec![],
            squashfs: SquashfsRecord {
                file: "image.sqfs".into(),
                size: 0,
                sha256: String::new(),
                compressor: "zstd".into(),
                block_size: 131072,
                offset: 0,
                verity: None,
            },
            dropped_devices: vec![],
        }
    }

    /// Publishes an image of `rec`, named `name` if given.
    pub(crate) fn put_record(store: &Store, rec: &ImageRecord, name: Option<&str>) {
        let w = store.work_dir().unwrap();
        fs::write(w.path().join("image.sqfs"), b"x").unwrap();
        fs::write(w.path().join("config.json"), b"{}").unwrap();
        store.publish(w, rec).unwrap();
        if let Some(name) = name {
            store.set_name(name, &rec.id).unwrap();
        }
    }

    /// Publishes image `id` named `name`.
    pub(crate) fn put(store: &Store, id: &str, name: &str) {
        put_record(store, &record(id), Some(name));
    }

    #[test]
    fn publish_find_remove() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &[]).unwrap();
        let id = format!("sha256:{}", "ab".repeat(32));
        put(&store, &id, "localhost/a:latest");
        store.set_name("localhost/b:latest", &id).unwrap();
        assert_eq!(store.find("a").unwrap().record.id, id);
        assert_eq!(store.find("abab").unwrap().record.id, id);
        assert_eq!(store.find(&id).unwrap().names.len(), 2);
        assert!(matches!(store.find("nope"), Err(Error::ImageNotInStore(_))));
        assert!(store.remove("a").unwrap().is_empty());
        assert_eq!(store.remove("localhost/b").unwrap(), vec![id.clone()]);
        assert!(!store.has_image(&id));
        assert_eq!(fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0);
    }
}
