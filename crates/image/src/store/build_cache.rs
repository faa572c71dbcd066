//! The build cache (`STORE/build-cache/KEY.json`): one entry per build
//! step that touched the file system, keyed by the step's cache key (its
//! parent's key, the expanded instruction, its environment and, for COPY,
//! the sources' content hash), holding the layer blob the step made.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::blobs::BlobRef;

/// The file name suffix of an entry.
pub(crate) const SUFFIX: &str = ".json";

/// The result of a step, as the cache keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheEntry {
    /// The layer it made in the blob directory (none if it changed
    /// nothing).
    pub layer: Option<BlobRef>,
}

impl CacheEntry {
    /// The cache file of `key` under `dir`.
    pub fn path(dir: &Path, key: &str) -> PathBuf {
        dir.join(format!("{key}{SUFFIX}"))
    }

    /// Reads the entry of `key`, if any.
    pub fn load(dir: &Path, key: &str) -> Option<Self> {
        Self::read(&Self::path(dir, key))
    }

    /// Reads the entry in the file `path`, if it is one.
    pub(crate) fn read(path: &Path) -> Option<Self> {
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    }

    /// Writes the entry of `key` (atomically).
    pub fn save(&self, dir: &Path, key: &str) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let path = Self::path(dir, key);
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(
            &tmp,
            serde_json::to_vec(self).map_err(std::io::Error::other)?,
        )?;
        std::fs::rename(tmp, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_saved_loads_back() {
        let dir = tempfile::tempdir().unwrap();
        let layer = BlobRef {
            digest: format!("sha256:{}", "a".repeat(64)),
            diff_id: format!("sha256:{}", "b".repeat(64)),
            size: 3,
        };
        let entry = CacheEntry { layer: Some(layer) };
        entry.save(dir.path(), "k1").unwrap();
        assert_eq!(CacheEntry::load(dir.path(), "k1"), Some(entry));
        CacheEntry { layer: None }.save(dir.path(), "k2").unwrap();
        assert_eq!(
            CacheEntry::load(dir.path(), "k2"),
            Some(CacheEntry { layer: None })
        );
        assert_eq!(CacheEntry::load(dir.path(), "k3"), None);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }
}
