//! The layer cache, `STORE/layers/sha256/HEX`: the compressed layer blobs
//! of pulled images, shared by every image of the store. A pull downloads
//! into its work directory and renames a blob here only once its digest
//! and size are verified, so a blob here is whole; later pulls of images
//! that share it (a new tag of the same stack) read it instead of
//! downloading it, and check its digest again as they read it.
//!
//! A blob's modification time is its last use (set when a pull reads it):
//! over a size cap ([`LayerCache::shrink_to`]) the least recently used go
//! first. `berth prune` removes the blobs no stored image lists.
//!
//! A pull that downloads a blob holds its lock (`STORE/layers/locks/HEX`,
//! an `flock`): another pull of the store that needs the same blob (a tag
//! sharing layers, pulled at the same time on this node or another) waits
//! for it and reads it from the cache instead of downloading it too.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::error::{Error, Result};

/// The directory of the layer cache under a store's root.
pub(crate) const LAYERS_DIR: &str = "layers/sha256";

/// The layer cache of a store.
#[derive(Debug, Clone)]
pub struct LayerCache {
    dir: PathBuf,
}

/// One cached blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedLayer {
    /// `sha256:...` of the compressed blob.
    pub digest: String,
    /// Its size in bytes.
    pub size: u64,
    /// When a pull last used it.
    pub used: SystemTime,
}

/// The 64 hex digits of a `sha256:` digest, or `None` for anything else
/// (never a path component that could leave the directory).
fn hex_of(digest: &str) -> Option<&str> {
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then_some(hex)
}

impl LayerCache {
    /// The cache of the store at `root` (`STORE/layers/sha256`), created
    /// (mode 0700) if missing.
    pub fn new(root: &Path) -> Result<Self> {
        let dir = root.join(LAYERS_DIR);
        super::create_private_dir(&dir)?;
        Ok(Self { dir })
    }

    /// Where the blob of `digest` is (or would be).
    pub fn path(&self, digest: &str) -> Option<PathBuf> {
        hex_of(digest).map(|hex| self.dir.join(hex))
    }

    /// Opens the cached blob of `digest` and marks it used now; `None`
    /// when it is not cached (or cannot be read).
    pub fn open(&self, digest: &str) -> Option<File> {
        let file = File::open(self.path(digest)?).ok()?;
        // The last use, for the size cap; a failure only makes it older.
        let _ = file.set_modified(SystemTime::now());
        Some(file)
    }

    /// Moves the verified blob at `file` (on the store's filesystem) into
    /// the cache as `digest`.
    pub fn insert(&self, file: &Path, digest: &str) -> Result<()> {
        let Some(dest) = self.path(digest) else {
            return Err(Error::BadImage(format!("unsupported digest {digest:?}")));
        };
        fs::rename(file, &dest).map_err(|e| Error::store("store the layer", &dest, e))
    }

    /// Removes the blob of `digest` (a corrupt one); false if it was not
    /// there.
    pub fn remove(&self, digest: &str) -> bool {
        self.path(digest)
            .is_some_and(|p| fs::remove_file(p).is_ok())
    }

    /// Waits until no other pull of the store downloads `digest`, and
    /// holds its download (the lock goes with the file). `None` for a
    /// digest that is not one, or when the lock cannot be made (then the
    /// pull downloads as if alone).
    pub fn hold_download(&self, digest: &str) -> Option<File> {
        let hex = hex_of(digest)?;
        let dir = self.dir.parent()?.join("locks");
        let made = super::create_private_dir(&dir);
        let file = made.ok().and_then(|()| {
            File::options()
                .create(true)
                .truncate(false)
                .write(true)
                .open(dir.join(hex))
                .ok()
        })?;
        file.lock().ok()?;
        Some(file)
    }

    /// The cached blobs, least recently used first. Files that are not
    /// blobs are not listed (and never removed).
    pub fn entries(&self) -> Result<Vec<CachedLayer>> {
        let read = match fs::read_dir(&self.dir) {
            Ok(read) => read,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::store("list", &self.dir, e)),
        };
        let mut entries = Vec::new();
        for entry in read.flatten() {
            let digest = format!("sha256:{}", entry.file_name().to_string_lossy());
            if hex_of(&digest).is_none() {
                continue;
            }
            let Ok(meta) = entry.metadata() else { continue };
            entries.push(CachedLayer {
                digest,
                size: meta.len(),
                used: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            });
        }
        entries.sort_by(|a, b| a.used.cmp(&b.used).then(a.digest.cmp(&b.digest)));
        Ok(entries)
    }

    /// Removes the least recently used blobs until the cache holds at most
    /// `max` bytes; returns how many blobs and bytes went. A pull that
    /// opened one of them reads on from its open file.
    pub fn shrink_to(&self, max: u64) -> Result<(usize, u64)> {
        let entries = self.entries()?;
        let mut total: u64 = entries.iter().map(|e| e.size).sum();
        let (mut count, mut bytes) = (0, 0);
        for e in entries {
            if total <= max {
                break;
            }
            if self.remove(&e.digest) {
                count += 1;
                bytes += e.size;
            }
            total -= e.size;
        }
        Ok((count, bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn digest(n: u8) -> String {
        format!("sha256:{}", hex::encode([n; 32]))
    }

    fn put(cache: &LayerCache, dir: &Path, n: u8, size: usize, age_s: u64) {
        let tmp = dir.join(format!("tmp-{n}"));
        fs::write(&tmp, vec![n; size]).unwrap();
        cache.insert(&tmp, &digest(n)).unwrap();
        let f = File::options()
            .write(true)
            .open(cache.path(&digest(n)).unwrap())
            .unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(age_s))
            .unwrap();
    }

    #[test]
    fn blobs_are_found_by_digest_and_only_digests_name_files() {
        let dir = tempfile::tempdir().unwrap();
        let cache = LayerCache::new(dir.path()).unwrap();
        assert!(cache.open(&digest(1)).is_none());
        put(&cache, dir.path(), 1, 10, 0);
        assert!(cache.open(&digest(1)).is_some());
        for bad in ["sha256:../../etc/passwd", "sha512:00", "sha256:", "x"] {
            assert!(cache.path(bad).is_none(), "{bad}");
            assert!(cache.open(bad).is_none());
        }
        fs::write(dir.path().join(LAYERS_DIR).join("README"), b"not a blob").unwrap();
        assert_eq!(cache.entries().unwrap().len(), 1);
    }

    #[test]
    fn the_least_recently_used_go_first() {
        let dir = tempfile::tempdir().unwrap();
        let cache = LayerCache::new(dir.path()).unwrap();
        put(&cache, dir.path(), 1, 100, 300);
        put(&cache, dir.path(), 2, 100, 200);
        put(&cache, dir.path(), 3, 100, 100);
        // Reading the oldest makes it the newest.
        drop(cache.open(&digest(1)));
        assert_eq!(cache.shrink_to(150).unwrap(), (2, 200));
        let left: Vec<_> = cache
            .entries()
            .unwrap()
            .into_iter()
            .map(|e| e.digest)
            .collect();
        assert_eq!(left, vec![digest(1)]);
        assert_eq!(cache.shrink_to(1000).unwrap(), (0, 0));
        assert_eq!(cache.shrink_to(0).unwrap(), (1, 100));
    }
}
