//! A base image whose layers the store does not keep (pulled or imported:
//! berth keeps only their squashfs file) becomes one gzip layer, its
//! squashfs as a tar (`sqfs2tar`), made once per base image and found
//! again through the build cache.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use berth_image::store::blobs::{BlobRef, Blobs};
use berth_image::store::build_cache::CacheEntry;

use crate::cache_key;
use crate::image_config::ImageConfig;
use crate::{Error, Result};

/// A base image from the store, as the builder needs it.
#[derive(Debug, Clone)]
pub struct BaseImage {
    /// Image id.
    pub id: String,
    /// Its squashfs file.
    pub squashfs: PathBuf,
    /// Its config.json.
    pub config: ImageConfig,
    /// Its layers, when the store's blob directory has all of them (an
    /// image berth built); else the image is flattened into one layer.
    pub layers: Option<Vec<BlobRef>>,
}

/// The one layer of `img`, from the cache or made now.
pub fn flatten_base(img: &BaseImage, blobs: &Blobs, cache: &std::path::Path) -> Result<BlobRef> {
    let key = cache_key::flattened_base(&img.id);
    if let Some(CacheEntry { layer: Some(l) }) = CacheEntry::load(cache, &key) {
        if blobs.has(&l.digest) {
            return Ok(l);
        }
    }
    eprintln!(
        "berth: making one layer of the base image {} (once per base image)",
        short(&img.id)
    );
    let mut child = Command::new("sqfs2tar")
        .arg(&img.squashfs)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::io("run sqfs2tar (squashfs-tools-ng) on", &img.squashfs, e))?;
    let mut out = child
        .stdout
        .take()
        .ok_or_else(|| Error::Plan("sqfs2tar has no output".into()))?;
    let mut layer = blobs.layer_writer()?;
    std::io::copy(&mut out, &mut layer).map_err(|e| {
        Error::io(
            "copy sqfs2tar's output into the base layer for",
            &img.squashfs,
            e,
        )
    })?;
    let st = child
        .wait_with_output()
        .map_err(|e| Error::io("run sqfs2tar on", &img.squashfs, e))?;
    if !st.status.success() {
        return Err(Error::Plan(format!(
            "sqfs2tar {}: {}",
            img.squashfs.display(),
            String::from_utf8_lossy(&st.stderr).trim()
        )));
    }
    let layer = blobs.commit_layer(layer)?;
    CacheEntry {
        layer: Some(layer.clone()),
    }
    .save(cache, &key)
    .map_err(|e| Error::io("write the cache entry", cache, e))?;
    Ok(layer)
}

/// The first 12 hex digits of an image id.
fn short(id: &str) -> &str {
    let h = id.trim_start_matches("sha256:");
    &h[..h.len().min(12)]
}
