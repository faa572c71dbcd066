//! `berth prune`: images no name points to, leftovers of crashed pulls and
//! builds, and blobs and build-cache entries no stored image needs.
//!
//! Which blobs an image needs is read from its record: `meta.json`'s
//! manifest digest, the config and layer blobs that manifest names, the
//! config's own digest (the image id) and the layer digests the record
//! lists. Every image directory of the writable store counts, named or
//! not yet (a build publishes first, then names). If any record or
//! manifest cannot be read, no blob is removed: a blob is never deleted
//! while a stored image might name it.
//!
//! A build-cache entry is kept while the layer blob it names is kept, so a
//! rebuild of an image still in the store stays all cache hits; an entry
//! whose layer went is useless (the builder would not take it) and goes
//! too. Entries of steps that changed nothing name no blob: they are kept,
//! one small file each.
//!
//! Builds hold `locks/blobs.lock` shared from their first step until their
//! image is published and named ([`Store::hold_blobs`]); prune takes it
//! exclusively without waiting and, while a build holds it, leaves blobs
//! and the build cache alone and says so.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use oci_spec::image::ImageManifest;

use super::blobs::{DIGEST_DIR, TMP_PREFIX};
use super::build_cache::{CacheEntry, SUFFIX};
use super::records::ImageRecord;
use super::Store;
use crate::error::{Error, Result};

/// What [`Store::prune`] removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Ids of the images no name pointed to.
    pub images: Vec<String>,
    /// How many blobs no stored image needed.
    pub blobs: usize,
    /// Their size in bytes.
    pub blob_bytes: u64,
    /// How many layer-cache blobs no stored image listed.
    pub cached_layers: usize,
    /// Their size in bytes.
    pub cached_layer_bytes: u64,
    /// How many build-cache entries went with their layers.
    pub cache_entries: usize,
    /// Why blobs and the build cache were left as they were, when they
    /// were (a build was running, a record could not be read).
    pub blobs_kept_because: Option<String>,
}

impl Store {
    /// Removes images no name points to, leftovers of crashed pulls and
    /// builds, and the blobs and build-cache entries no stored image needs
    /// (see the module documentation for the rule).
    pub fn prune(&self) -> Result<Pruned> {
        self.reclaim_tmp();
        let _lock = self.lock()?;
        let names = Self::read_names(&self.root)?;
        let mut pruned = Pruned::default();
        for img in self.list()? {
            if img.shared || names.values().any(|v| *v == img.record.id) {
                continue;
            }
            self.delete_image_dir(&img.dir)?;
            pruned.images.push(img.record.id);
        }
        let Some(_no_build) = self.try_lock_blobs_exclusively()? else {
            pruned.blobs_kept_because = Some(
                "a build is running (it holds locks/blobs.lock); run berth prune again after it"
                    .into(),
            );
            return Ok(pruned);
        };
        match self.needed_blobs() {
            Ok(needed) => {
                self.collect_blobs(&needed, &mut pruned)?;
                self.collect_layer_cache(&needed, &mut pruned)?;
                self.collect_build_cache(&mut pruned)?;
            }
            Err(why) => pruned.blobs_kept_because = Some(why),
        }
        Ok(pruned)
    }

    /// The digests of every blob an image of the writable store names;
    /// `Err` says which record or manifest could not be read.
    fn needed_blobs(&self) -> std::result::Result<BTreeSet<String>, String> {
        let images = self.root.join("images");
        let entries = match fs::read_dir(&images) {
            Ok(entries) => entries,
            Err(e) => return Err(format!("cannot list {}: {e}", images.display())),
        };
        let blobs = self.blobs_dir().join(DIGEST_DIR);
        let mut needed = BTreeSet::new();
        for entry in entries {
            let dir = entry
                .map_err(|e| format!("cannot list {}: {e}", images.display()))?
                .path();
            if !dir.is_dir() {
                // Not an image (a publication is one rename of a directory).
                continue;
            }
            let meta = dir.join("meta.json");
            let record: ImageRecord = fs::read(&meta)
                .map_err(|e| e.to_string())
                .and_then(|bytes| serde_json::from_slice(&bytes).map_err(|e| e.to_string()))
                .map_err(|e| format!("cannot read {}: {e}", meta.display()))?;
            needed.insert(record.id.clone());
            needed.extend(record.layers.iter().map(|l| l.digest.clone()));
            let Some(manifest_digest) = record.manifest_digest else {
                continue;
            };
            let manifest_path = blobs.join(hex_of(&manifest_digest));
            needed.insert(manifest_digest);
            let bytes = match fs::read(&manifest_path) {
                Ok(bytes) => bytes,
                // A pulled image: its manifest is not kept here.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(format!("cannot read {}: {e}", manifest_path.display())),
            };
            let manifest: ImageManifest = serde_json::from_slice(&bytes).map_err(|e| {
                format!("{} is not an image manifest: {e}", manifest_path.display())
            })?;
            needed.insert(manifest.config().digest().to_string());
            needed.extend(manifest.layers().iter().map(|l| l.digest().to_string()));
        }
        Ok(needed)
    }

    /// Removes the blobs not in `needed`, and blobs half-written by a
    /// crashed build (no build runs: the caller holds the blobs lock).
    fn collect_blobs(&self, needed: &BTreeSet<String>, pruned: &mut Pruned) -> Result<()> {
        let dir = self.blobs_dir().join(DIGEST_DIR);
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::store("list", &dir, e)),
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_blob = name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit());
            if is_blob && needed.contains(&format!("sha256:{name}")) {
                continue;
            }
            if !is_blob && !name.starts_with(TMP_PREFIX) {
                // Not berth's: left alone.
                continue;
            }
            let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
            remove_file(&entry.path())?;
            if is_blob {
                pruned.blobs += 1;
                pruned.blob_bytes += size;
            }
        }
        Ok(())
    }

    /// Removes the layer-cache blobs no stored image lists (a pull that
    /// reads one has it open and reads on).
    fn collect_layer_cache(&self, needed: &BTreeSet<String>, pruned: &mut Pruned) -> Result<()> {
        if !self.root.join(super::layer_cache::LAYERS_DIR).is_dir() {
            return Ok(());
        }
        let cache = self.layer_cache()?;
        for entry in cache.entries()? {
            if !needed.contains(&entry.digest) && cache.remove(&entry.digest) {
                pruned.cached_layers += 1;
                pruned.cached_layer_bytes += entry.size;
            }
        }
        Ok(())
    }

    /// Removes the build-cache entries whose layer blob is gone, unreadable
    /// entries and leftovers of crashed writes.
    fn collect_build_cache(&self, pruned: &mut Pruned) -> Result<()> {
        let dir = self.build_cache_dir();
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::store("list", &dir, e)),
        };
        let blobs = self.blobs_dir().join(DIGEST_DIR);
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let keep = name.ends_with(SUFFIX)
                && CacheEntry::read(&path).is_some_and(|e| match e.layer {
                    Some(layer) => blobs.join(hex_of(&layer.digest)).is_file(),
                    None => true,
                });
            if !keep {
                remove_file(&path)?;
                if name.ends_with(SUFFIX) {
                    pruned.cache_entries += 1;
                }
            }
        }
        Ok(())
    }
}

/// The hex part of a `sha256:` digest, the blob's file name.
fn hex_of(digest: &str) -> &str {
    digest.trim_start_matches("sha256:")
}

fn remove_file(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::store("remove", path, e)),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::store::blobs::{BlobRef, LAYER_MEDIA_TYPE};
    use crate::store::tests::{put_record, record};

    /// A built image: a layer, a config and a manifest in the blob
    /// directory, a record that names the manifest; returns the layer.
    fn built(store: &Store, name: Option<&str>, content: &[u8]) -> (String, BlobRef) {
        let blobs = store.blobs().unwrap();
        let mut w = blobs.layer_writer().unwrap();
        w.write_all(content).unwrap();
        let layer = blobs.commit_layer(w).unwrap();
        let config = format!(r#"{{"rootfs":{{"diff_ids":["{}"]}}}}"#, layer.diff_id);
        let config_digest = blobs.put(config.as_bytes()).unwrap();
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": config_digest, "size": config.len()},
            "layers": [{"mediaType": LAYER_MEDIA_TYPE, "digest": layer.digest, "size": layer.size}],
        });
        let manifest_digest = blobs.put(manifest.to_string().as_bytes()).unwrap();
        let mut rec = record(&config_digest);
        rec.manifest_digest = Some(manifest_digest);
        put_record(store, &rec, name);
        (config_digest, layer)
    }

    fn blob_count(store: &Store) -> usize {
        fs::read_dir(store.blobs_dir().join(DIGEST_DIR))
            .unwrap()
            .count()
    }

    #[test]
    fn unneeded_blobs_go_and_a_named_image_keeps_all_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &[]).unwrap();
        let (kept_id, kept_layer) = built(&store, Some("localhost/kept:1"), b"kept");
        let (gone_id, gone_layer) = built(&store, None, b"gone");
        let orphan = store.blobs().unwrap().put(b"orphan").unwrap();
        let cache = store.build_cache_dir();
        let entry = |layer: Option<BlobRef>| CacheEntry { layer };
        entry(Some(kept_layer.clone()))
            .save(&cache, "kept")
            .unwrap();
        entry(Some(gone_layer.clone()))
            .save(&cache, "gone")
            .unwrap();
        entry(None).save(&cache, "empty").unwrap();
        fs::write(cache.join("crashed.tmp123"), b"{").unwrap();
        fs::write(store.blobs_dir().join("sha256/.tmp-crashed"), b"x").unwrap();
        assert_eq!(blob_count(&store), 8);

        let pruned = store.prune().unwrap();
        assert_eq!(pruned.images, vec![gone_id.clone()]);
        // The unnamed image's manifest, config and layer, and the orphan.
        assert_eq!(pruned.blobs, 4);
        assert_eq!(pruned.cache_entries, 1);
        assert_eq!(pruned.blobs_kept_because, None);
        let blobs = store.blobs().unwrap();
        assert!(!blobs.has(&orphan) && !blobs.has(&gone_layer.digest) && !blobs.has(&gone_id));
        let img = store.find("localhost/kept:1").unwrap();
        for d in [
            img.record.manifest_digest.clone().unwrap(),
            kept_id,
            kept_layer.digest,
        ] {
            assert!(blobs.has(&d), "{d} was removed");
        }
        assert_eq!(blob_count(&store), 3);
        let mut left: Vec<_> = fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, vec!["empty.json", "kept.json"]);
        // Nothing more to do the second time.
        let again = store.prune().unwrap();
        assert_eq!((again.images.len(), again.blobs), (0, 0));
    }

    #[test]
    fn a_running_build_keeps_blobs_and_cache() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &[]).unwrap();
        let orphan = store
            .blobs()
            .unwrap()
            .put(b"a layer of a running build")
            .unwrap();
        let building = store.hold_blobs().unwrap();
        let pruned = store.prune().unwrap();
        assert!(pruned.blobs_kept_because.is_some());
        assert!(store.blobs().unwrap().has(&orphan));
        drop(building);
        assert_eq!(store.prune().unwrap().blobs, 1);
    }

    #[test]
    fn an_unreadable_record_keeps_every_blob() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &[]).unwrap();
        built(&store, Some("localhost/a:1"), b"a");
        let orphan = store.blobs().unwrap().put(b"orphan").unwrap();
        let broken = dir.path().join("images/sha256-broken");
        fs::create_dir_all(&broken).unwrap();
        fs::write(broken.join("meta.json"), b"not json").unwrap();
        let pruned = store.prune().unwrap();
        assert!(
            pruned
                .blobs_kept_because
                .as_deref()
                .is_some_and(|why| why.contains("sha256-broken")),
            "{pruned:?}"
        );
        assert!(store.blobs().unwrap().has(&orphan));
    }
}
