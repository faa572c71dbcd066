//! The store's blob directory (`STORE/blobs/sha256/HEX`): layer, config
//! and manifest blobs of built images, kept for push, save and the build
//! cache. Blobs are written to a temporary file and renamed into place
//! under their digest, so a blob that exists is complete.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::context::hex;
use crate::{Error, Result};

/// The OCI media type of berth's layers.
pub const LAYER_MEDIA_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// A stored layer blob.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BlobRef {
    /// `sha256:...` of the compressed blob.
    pub digest: String,
    /// `sha256:...` of the uncompressed tar.
    pub diff_id: String,
    /// Compressed size.
    pub size: u64,
}

/// The blob directory of a store.
#[derive(Debug, Clone)]
pub struct Blobs {
    dir: PathBuf,
}

/// A blob being written: hashed as it goes.
pub struct BlobWriter {
    file: tempfile::NamedTempFile,
    hash: Sha256,
    size: u64,
}

impl Write for BlobWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.hash.update(&buf[..n]);
        self.size += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// A layer being written: gzip-compressed into a blob (hashed for its
/// digest), the uncompressed stream hashed for its diff_id.
pub struct LayerWriter {
    gz: flate2::write::GzEncoder<BlobWriter>,
    diff_hash: Sha256,
}

impl Write for LayerWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.gz.write(buf)?;
        self.diff_hash.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.gz.flush()
    }
}

impl Blobs {
    /// The blob directory under `dir` (`STORE/blobs`), created if needed.
    pub fn new(dir: &Path) -> Result<Self> {
        let dir = dir.join("sha256");
        fs::create_dir_all(&dir).map_err(|e| Error::io("create", &dir, e))?;
        Ok(Self { dir })
    }

    /// Where the blob of `digest` lives.
    pub fn path(&self, digest: &str) -> PathBuf {
        self.dir.join(digest.trim_start_matches("sha256:"))
    }

    /// Whether the blob of `digest` is here.
    pub fn has(&self, digest: &str) -> bool {
        self.path(digest).is_file()
    }

    /// A new blob.
    pub fn writer(&self) -> Result<BlobWriter> {
        let file = tempfile::Builder::new()
            .prefix(".tmp-")
            .tempfile_in(&self.dir)
            .map_err(|e| Error::io("create a blob in", &self.dir, e))?;
        Ok(BlobWriter {
            file,
            hash: Sha256::new(),
            size: 0,
        })
    }

    /// A new layer blob: write its uncompressed tar stream, then
    /// [`Blobs::commit_layer`].
    pub fn layer_writer(&self) -> Result<LayerWriter> {
        Ok(LayerWriter {
            gz: flate2::write::GzEncoder::new(self.writer()?, flate2::Compression::fast()),
            diff_hash: Sha256::new(),
        })
    }

    /// Finishes a layer blob and stores it under its digest, with the
    /// uncompressed stream's digest as its diff_id.
    pub fn commit_layer(&self, w: LayerWriter) -> Result<BlobRef> {
        let diff_id = format!("sha256:{}", hex(&w.diff_hash.finalize()));
        let blob =
            w.gz.finish()
                .map_err(|e| Error::io("compress the layer into", &self.dir, e))?;
        self.commit(blob, diff_id)
    }

    /// Stores a finished layer blob under its digest.
    fn commit(&self, w: BlobWriter, diff_id: String) -> Result<BlobRef> {
        let digest = format!("sha256:{}", hex(&w.hash.finalize()));
        let path = self.path(&digest);
        w.file
            .persist(&path)
            .map_err(|e| Error::io("store the blob", &path, e.error))?;
        Ok(BlobRef {
            digest,
            diff_id,
            size: w.size,
        })
    }

    /// Stores `bytes` (a config or manifest); returns its digest.
    pub fn put(&self, bytes: &[u8]) -> Result<String> {
        let digest = format!("sha256:{}", hex(&Sha256::digest(bytes)));
        let path = self.path(&digest);
        if !path.is_file() {
            let mut w = self.writer()?;
            w.write_all(bytes)
                .map_err(|e| Error::io("write", &path, e))?;
            w.file
                .persist(&path)
                .map_err(|e| Error::io("store the blob", &path, e.error))?;
        }
        Ok(digest)
    }
}
