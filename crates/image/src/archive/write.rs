//! Writing an oci-archive (`berth save`): an OCI image layout in a tar,
//! with `oci-layout`, `index.json` and the image's manifest, config and
//! layer blobs, read back by [`super::ImportSource::OciArchive`] (and by
//! skopeo and podman). Written beside the output and renamed into place,
//! so the output is whole or absent.

use std::fs::File;
use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};

use oci_spec::image::{DescriptorBuilder, ImageIndexBuilder, ImageManifest, MediaType};

use crate::store::blobs::Blobs;

/// The annotation that tags an image in a layout.
const REF_NAME: &str = "org.opencontainers.image.ref.name";
/// The annotation containerd and podman read the image's name from.
const CONTAINERD_NAME: &str = "io.containerd.image.name";

/// Why an oci-archive could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// A blob of the image cannot be read from the blob directory.
    #[error("cannot read blob {digest} ({path}): {source}; the image's blobs are incomplete: build it again")]
    Blob {
        /// The blob's digest.
        digest: String,
        /// Where it should be.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The manifest is not an OCI image manifest.
    #[error("the manifest {digest} is malformed: {reason}; build the image again")]
    Manifest {
        /// Its digest.
        digest: String,
        /// What is wrong.
        reason: String,
    },
    /// The archive cannot be written.
    #[error("cannot write {path}: {source}; choose another output (-o FILE) or free space")]
    Output {
        /// The file being written.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}

/// Writes the image whose manifest is the blob `manifest_digest` of
/// `blobs` to `output` as an oci-archive. With `name` (`REPO:TAG`), the
/// index names it: the tag as `org.opencontainers.image.ref.name` (so
/// `oci-archive:FILE:TAG` selects it) and the whole name for containerd.
pub fn write_oci_archive(
    output: &Path,
    blobs: &Blobs,
    manifest_digest: &str,
    name: Option<&str>,
) -> Result<(), WriteError> {
    let manifest_path = blobs.path(manifest_digest);
    let manifest_bytes = std::fs::read(&manifest_path).map_err(|source| WriteError::Blob {
        digest: manifest_digest.to_string(),
        path: manifest_path,
        source,
    })?;
    let bad_manifest = |reason: String| WriteError::Manifest {
        digest: manifest_digest.to_string(),
        reason,
    };
    let manifest: ImageManifest =
        serde_json::from_slice(&manifest_bytes).map_err(|e| bad_manifest(e.to_string()))?;
    let index = index_json(manifest_digest, manifest_bytes.len(), name).map_err(bad_manifest)?;
    let tmp = beside(output);
    let written = write_tar(
        &tmp,
        blobs,
        manifest_digest,
        &manifest_bytes,
        &manifest,
        &index,
    )
    .and_then(|()| {
        std::fs::rename(&tmp, output).map_err(|source| WriteError::Output {
            path: output.to_path_buf(),
            source,
        })
    });
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// `index.json`: one manifest, named when `name` is given. Keys sorted (as
/// a `serde_json::Value` writes them), so equal inputs give equal bytes.
fn index_json(
    manifest_digest: &str,
    manifest_size: usize,
    name: Option<&str>,
) -> Result<Vec<u8>, String> {
    let mut descriptor = DescriptorBuilder::default()
        .media_type(MediaType::ImageManifest)
        .digest(
            manifest_digest
                .parse::<oci_spec::image::Digest>()
                .map_err(|e| e.to_string())?,
        )
        .size(manifest_size as u64);
    if let Some(name) = name {
        let tag = name.rsplit_once(':').map(|(_, t)| t).unwrap_or("latest");
        descriptor = descriptor.annotations([
            (REF_NAME.to_string(), tag.to_string()),
            (CONTAINERD_NAME.to_string(), name.to_string()),
        ]);
    }
    let index = ImageIndexBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageIndex)
        .manifests(vec![descriptor.build().map_err(|e| e.to_string())?])
        .build()
        .map_err(|e| e.to_string())?;
    let value = serde_json::to_value(&index).map_err(|e| e.to_string())?;
    serde_json::to_vec(&value).map_err(|e| e.to_string())
}

fn write_tar(
    path: &Path,
    blobs: &Blobs,
    manifest_digest: &str,
    manifest_bytes: &[u8],
    manifest: &ImageManifest,
    index: &[u8],
) -> Result<(), WriteError> {
    let output = |source| WriteError::Output {
        path: path.to_path_buf(),
        source,
    };
    let file = File::create(path).map_err(output)?;
    let mut tar = tar::Builder::new(BufWriter::new(file));
    let mut add = |name: &str, size: u64, data: &mut dyn io::Read| {
        let mut h = tar::Header::new_ustar();
        h.set_size(size);
        h.set_mode(0o644);
        h.set_mtime(0);
        tar.append_data(&mut h, name, data).map_err(output)
    };
    let layout = br#"{"imageLayoutVersion":"1.0.0"}"#;
    add("oci-layout", layout.len() as u64, &mut &layout[..])?;
    add("index.json", index.len() as u64, &mut &index[..])?;
    add(
        &blob_member(manifest_digest),
        manifest_bytes.len() as u64,
        &mut &manifest_bytes[..],
    )?;
    let named = std::iter::once(manifest.config()).chain(manifest.layers());
    for digest in named.map(|d| d.digest().to_string()) {
        let path = blobs.path(&digest);
        let blob_error = |source| WriteError::Blob {
            digest: digest.clone(),
            path: path.clone(),
            source,
        };
        let mut f = File::open(&path).map_err(blob_error)?;
        let size = f.metadata().map_err(blob_error)?.len();
        add(&blob_member(&digest), size, &mut f)?;
    }
    tar.into_inner()
        .map_err(output)?
        .into_inner()
        .map_err(|e| output(e.into_error()))?
        .sync_all()
        .map_err(output)
}

/// The member of a blob in an OCI layout.
fn blob_member(digest: &str) -> String {
    format!("blobs/sha256/{}", digest.trim_start_matches("sha256:"))
}

/// A temporary name beside `path`.
fn beside(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(format!(".tmp{}", std::process::id()));
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::archive::ImportSource;
    use crate::platform::Platform;

    #[test]
    fn a_written_archive_imports_back_as_the_same_image() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::new(&dir.path().join("blobs")).unwrap();
        let mut w = blobs.layer_writer().unwrap();
        let mut layer_tar = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(3);
        h.set_mode(0o644);
        layer_tar
            .append_data(&mut h, "hello.txt", &b"hi\n"[..])
            .unwrap();
        w.write_all(&layer_tar.into_inner().unwrap()).unwrap();
        let layer = blobs.commit_layer(w).unwrap();
        let config = serde_json::json!({
            "architecture": "amd64", "os": "linux", "config": {"Cmd": ["/bin/sh"]},
            "rootfs": {"type": "layers", "diff_ids": [layer.diff_id]},
        })
        .to_string();
        let config_digest = blobs.put(config.as_bytes()).unwrap();
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": config_digest, "size": config.len()},
            "layers": [{"mediaType": crate::store::blobs::LAYER_MEDIA_TYPE,
                        "digest": layer.digest, "size": layer.size}],
        })
        .to_string();
        let manifest_digest = blobs.put(manifest.as_bytes()).unwrap();
        let out = dir.path().join("image.tar");
        write_oci_archive(&out, &blobs, &manifest_digest, Some("localhost/demo:1")).unwrap();
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers.len(), 2, "{leftovers:?}");

        let spec = format!("oci-archive:{}:1", out.display());
        let (image, layers) = ImportSource::parse(&spec)
            .unwrap()
            .open(&Platform::host(), &spec)
            .unwrap();
        assert_eq!(
            image.manifest_digest.as_deref(),
            Some(manifest_digest.as_str())
        );
        assert_eq!(image.config_bytes, config.as_bytes());
        assert_eq!(image.layers.len(), 1);
        assert_eq!(image.layers[0].digest, layer.digest);
        let mut read_back = Vec::new();
        std::io::Read::read_to_end(
            &mut layers.open_layer(&image.layers[0]).unwrap(),
            &mut read_back,
        )
        .unwrap();
        assert_eq!(read_back, std::fs::read(blobs.path(&layer.digest)).unwrap());
    }

    #[test]
    fn a_missing_blob_leaves_no_output() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::new(&dir.path().join("blobs")).unwrap();
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": format!("sha256:{}", "0".repeat(64)), "size": 2},
            "layers": [],
        })
        .to_string();
        let digest = blobs.put(manifest.as_bytes()).unwrap();
        let out = dir.path().join("image.tar");
        let err = write_oci_archive(&out, &blobs, &digest, None).unwrap_err();
        assert!(matches!(err, WriteError::Blob { .. }), "{err}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
