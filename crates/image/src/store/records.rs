//! berth's records of images: `meta.json` and what it holds.

use crate::image_config::RunConfig;
use std::fs::File;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Facts about one layer of an image.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LayerRecord {
    /// Digest of the blob as distributed (compressed), if known.
    pub digest: String,
    /// Digest of the uncompressed tar (the config's diff_id).
    pub diff_id: String,
    /// Media type of the blob.
    pub media_type: String,
    /// Size of the blob in bytes.
    pub size: u64,
}

/// Facts about the squashfs file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SquashfsRecord {
    /// File name inside the image directory.
    pub file: String,
    /// Size in bytes.
    pub size: u64,
    /// sha256 of the file, for `berth check`.
    pub sha256: String,
    /// Block compressor.
    pub compressor: String,
    /// Block size in bytes.
    pub block_size: u32,
    /// Where the squashfs starts in the file (a SIF run in place); 0 for
    /// the store's own files.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub offset: u64,
    /// The digest of the verity table at the file's end (berth's squashfs
    /// server checks every chunk it reads against it); absent for images
    /// stored before berth wrote tables, and for files run in place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verity: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl SquashfsRecord {
    /// Whether `file` is one plain name (no `/`, `.` or `..`): a record,
    /// written by whoever can write its directory, never names a file
    /// outside its image's directory.
    pub fn file_is_plain(&self) -> bool {
        !self.file.is_empty() && !self.file.contains('/') && self.file != "." && self.file != ".."
    }
}

/// berth's record of one image (`meta.json`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ImageRecord {
    /// Format version of this record.
    pub version: u32,
    /// The image id: the config's digest.
    pub id: String,
    /// Digest of the platform manifest it came from, when pulled.
    pub manifest_digest: Option<String>,
    /// Where it came from: a reference or an import source.
    pub source: String,
    /// `os/arch[/variant]`.
    pub platform: String,
    /// When it was stored (seconds since the epoch).
    pub stored_at: u64,
    /// Run-time settings from the config.
    pub run: RunConfig,
    /// The layers, bottom first.
    pub layers: Vec<LayerRecord>,
    /// The squashfs file.
    pub squashfs: SquashfsRecord,
    /// Device nodes dropped while flattening.
    pub dropped_devices: Vec<String>,
}

/// An image found in a store.
#[derive(Debug, Clone)]
pub struct StoredImage {
    /// Its record.
    pub record: ImageRecord,
    /// The image directory.
    pub dir: PathBuf,
    /// The names pointing to it in that store.
    pub names: Vec<String>,
    /// Whether it lies in a read-only shared store.
    pub shared: bool,
}

impl StoredImage {
    /// Path of the squashfs file.
    pub fn squashfs_path(&self) -> PathBuf {
        self.dir.join(&self.record.squashfs.file)
    }

    /// The run-time settings from the image's own config.json, after
    /// checking that its sha256 is the image id: `meta.json` sits in the
    /// same directory and whoever can write that could change it, the
    /// content-addressed config they cannot change unseen.
    pub fn verified_run_config(&self) -> Result<RunConfig> {
        use sha2::Digest;
        let path = self.config_path();
        let mut bytes = Vec::new();
        File::open(&path)
            .and_then(|f| {
                std::io::Read::read_to_end(&mut std::io::Read::take(f, 16 << 20), &mut bytes)
            })
            .map_err(|e| Error::store("read", &path, e))?;
        let digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(&bytes)));
        if digest != self.record.id {
            return Err(Error::BadImage(format!(
                "{}: digest {digest}, but the image id is {}: the store was changed; remove the image (berth rmi) and pull it again",
                path.display(),
                self.record.id
            )));
        }
        let config = crate::image_config::parse_config(&bytes, &self.record.id)?;
        Ok(crate::image_config::run_config(&config))
    }

    /// Path of the exact config JSON.
    pub fn config_path(&self) -> PathBuf {
        self.dir.join("config.json")
    }
}
