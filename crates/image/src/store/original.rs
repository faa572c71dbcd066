//! A pulled image as it came: its config (kept byte for byte beside its
//! squashfs file) and its layers as distributed (kept by the layer
//! cache), put together again as a manifest for `berth push` and `berth
//! save`. Pushed so, an image keeps its layers: a registry that has some
//! of them (the base's) is sent only the others, and its digests are the
//! ones every other tool sees.

use std::path::PathBuf;

use sha2::{Digest, Sha256};

use super::blobs::Blobs;
use super::{Store, StoredImage};
use crate::error::{Error, Result};

/// The manifest media types, OCI's and Docker's.
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";

/// The manifest of `img` with its own config and layers, written into
/// `blobs` (the config and manifest as blobs, each layer linked from the
/// layer cache); its bytes. `None` when the image cannot be given so:
/// one not pulled (imported, saved or committed: the layers its record
/// lists are not what its config says), or one whose layers are not all
/// in the layer cache (turned off, capped, pruned).
pub fn original_manifest(
    store: &Store,
    img: &StoredImage,
    blobs: &Blobs,
) -> Result<Option<Vec<u8>>> {
    let layers = &img.record.layers;
    if layers.is_empty() {
        return Ok(None);
    }
    let config_path = img.dir.join("config.json");
    let Ok(config) = std::fs::read(&config_path) else {
        return Ok(None);
    };
    if format!("sha256:{}", hex::encode(Sha256::digest(&config))) != img.record.id {
        return Ok(None);
    }
    // The config's layers must be the record's, in order: a saved image's
    // config describes its own tree, not its base's layers.
    let diff_ids: Vec<String> = serde_json::from_slice::<serde_json::Value>(&config)
        .ok()
        .and_then(|c| {
            c["rootfs"]["diff_ids"].as_array().map(|a| {
                a.iter()
                    .filter_map(|d| d.as_str().map(str::to_string))
                    .collect()
            })
        })
        .unwrap_or_default();
    let recorded: Vec<&str> = layers.iter().map(|l| l.diff_id.as_str()).collect();
    if diff_ids != recorded {
        return Ok(None);
    }
    let cache = store.layer_cache()?;
    let mut cached: Vec<PathBuf> = Vec::new();
    for l in layers {
        match cache.path(&l.digest) {
            Some(p) if std::fs::metadata(&p).is_ok_and(|m| m.len() == l.size) => cached.push(p),
            _ => return Ok(None),
        }
    }
    for (l, from) in layers.iter().zip(&cached) {
        let to = blobs.path(&l.digest);
        if to.is_file() {
            continue;
        }
        // A link, not a copy: both lie in the store, and layers are big.
        if let Err(e) = std::fs::hard_link(from, &to) {
            if e.kind() != std::io::ErrorKind::AlreadyExists {
                tracing::debug!("cannot link {} into the blobs: {e}", from.display());
                return Ok(None);
            }
        }
    }
    let docker = layers
        .iter()
        .all(|l| l.media_type.starts_with("application/vnd.docker."));
    let (manifest_type, config_type) = if docker {
        (DOCKER_MANIFEST, DOCKER_CONFIG)
    } else {
        (OCI_MANIFEST, OCI_CONFIG)
    };
    let stored = blobs.put(&config)?;
    if stored != img.record.id {
        return Err(Error::BadImage(format!(
            "the config of {} changed while it was read",
            img.record.id
        )));
    }
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": manifest_type,
        "config": {
            "mediaType": config_type,
            "digest": img.record.id,
            "size": config.len(),
        },
        "layers": layers.iter().map(|l| serde_json::json!({
            "mediaType": l.media_type,
            "digest": l.digest,
            "size": l.size,
        })).collect::<Vec<_>>(),
    });
    let bytes = serde_json::to_vec(&manifest)
        .map_err(|e| Error::BadImage(format!("cannot write a manifest: {e}")))?;
    blobs.put(&bytes)?;
    Ok(Some(bytes))
}
