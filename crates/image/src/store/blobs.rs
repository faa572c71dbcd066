//! The store's blob directory (`STORE/blobs/sha256/HEX`): layer, config
//! and manifest blobs of built images, kept for push, save and the build
//! cache. Blobs are written to a temporary file (`.tmp-*`, in the same
//! directory) and renamed into place under their digest, so a blob that
//! exists is complete.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The OCI media type of berth's layers.
pub const LAYER_MEDIA_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// The subdirectory that holds the blobs, named by the digest algorithm.
pub(crate) const DIGEST_DIR: &str = "sha256";

/// The name prefix of a blob still being written.
pub(crate) const TMP_PREFIX: &str = ".tmp-";

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
        let dir = dir.join(DIGEST_DIR);
        fs::create_dir_all(&dir).map_err(|e| Error::store("create", &dir, e))?;
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
            .prefix(TMP_PREFIX)
            .tempfile_in(&self.dir)
            .map_err(|e| Error::store("create a blob in", &self.dir, e))?;
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
        let diff_id = format!("sha256:{}", hex::encode(w.diff_hash.finalize()));
        let blob =
            w.gz.finish()
                .map_err(|e| Error::store("compress the layer into", &self.dir, e))?;
        self.commit(blob, diff_id)
    }

    /// Stores a finished layer blob under its digest.
    fn commit(&self, w: BlobWriter, diff_id: String) -> Result<BlobRef> {
        let digest = format!("sha256:{}", hex::encode(w.hash.finalize()));
        let path = self.path(&digest);
        w.file
            .persist(&path)
            .map_err(|e| Error::store("store the blob", &path, e.error))?;
        Ok(BlobRef {
            digest,
            diff_id,
            size: w.size,
        })
    }

    /// Stores `bytes` (a config or manifest); returns its digest.
    pub fn put(&self, bytes: &[u8]) -> Result<String> {
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(bytes)));
        let path = self.path(&digest);
        if !path.is_file() {
            let mut w = self.writer()?;
            w.write_all(bytes)
                .map_err(|e| Error::store("write", &path, e))?;
            w.file
                .persist(&path)
                .map_err(|e| Error::store("store the blob", &path, e.error))?;
        }
        Ok(digest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_are_stored_under_their_digest() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::new(dir.path()).unwrap();
        let digest = blobs.put(b"config").unwrap();
        assert_eq!(digest, crate::layer::sha256_digest(b"config"));
        assert_eq!(blobs.put(b"config").unwrap(), digest);
        assert_eq!(fs::read(blobs.path(&digest)).unwrap(), b"config");
        let mut w = blobs.layer_writer().unwrap();
        w.write_all(b"a tar stream").unwrap();
        let layer = blobs.commit_layer(w).unwrap();
        let stored = fs::read(blobs.path(&layer.digest)).unwrap();
        assert_eq!(layer.digest, crate::layer::sha256_digest(&stored));
        assert_eq!(layer.size, stored.len() as u64);
        assert_eq!(layer.diff_id, crate::layer::sha256_digest(b"a tar stream"));
        // Nothing half-written is left beside them.
        assert_eq!(
            fs::read_dir(dir.path().join(DIGEST_DIR)).unwrap().count(),
            2
        );
    }
}
