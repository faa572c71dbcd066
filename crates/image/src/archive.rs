//! Import sources: `oci:DIR[:TAG]` (an OCI image layout), `oci-archive:FILE[:TAG]`
//! (a tar of one) and `docker-archive:FILE[:NAME]` (what `docker save`,
//! `podman save` and `skopeo copy docker-archive:` write).
//!
//! Archives are not unpacked: one pass over the tar headers records where
//! each member lies, and blobs are then read in place with positioned reads.
//!
//! [`write_oci_archive`] writes the oci-archive format (`berth save`).

mod write;

pub use write::{write_oci_archive, WriteError};

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use oci_spec::image::{ImageIndex, ImageManifest};
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::layer::{sha256_digest, verify_bytes, VerifyingReader};
use crate::pipeline::{layers_of, parse_config, LayerDesc, LayerSource, ResolvedImage};
use crate::platform::{select, Platform};

/// A parsed import source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportSource {
    /// An OCI layout directory and an optional tag.
    OciDir(PathBuf, Option<String>),
    /// A tar of an OCI layout and an optional tag.
    OciArchive(PathBuf, Option<String>),
    /// A docker-archive tar and an optional image name in it.
    DockerArchive(PathBuf, Option<String>),
}

impl ImportSource {
    /// Parses `TRANSPORT:PATH[:SELECTOR]`.
    pub fn parse(spec: &str) -> Result<Self> {
        let bad = |reason: &str| Error::Source {
            source_spec: spec.to_string(),
            reason: reason.to_string(),
        };
        let (transport, rest) = spec.split_once(':').ok_or_else(|| {
            bad("expected docker-archive:FILE, oci-archive:FILE or oci:DIR[:TAG]")
        })?;
        if rest.is_empty() {
            return Err(bad("the path is empty"));
        }
        // The selector is what follows the last ':' unless that names an
        // existing file (paths may contain ':').
        let split = |rest: &str| -> (PathBuf, Option<String>) {
            if Path::new(rest).exists() {
                return (PathBuf::from(rest), None);
            }
            match rest.rsplit_once(':') {
                Some((p, sel)) if !sel.contains('/') || transport == "docker-archive" => {
                    (PathBuf::from(p), Some(sel.to_string()))
                }
                _ => (PathBuf::from(rest), None),
            }
        };
        match transport {
            "oci" => {
                let (p, t) = split(rest);
                Ok(Self::OciDir(p, t))
            }
            "oci-archive" => {
                let (p, t) = split(rest);
                Ok(Self::OciArchive(p, t))
            }
            "docker-archive" => {
                let (p, t) = split(rest);
                Ok(Self::DockerArchive(p, t))
            }
            other => Err(bad(&format!(
                "unknown transport {other:?}: use docker-archive:FILE, oci-archive:FILE, oci:DIR[:TAG], sif:FILE, squashfs:FILE, containers-storage:NAME or docker-daemon:NAME"
            ))),
        }
    }

    /// Opens the source and resolves the image in it.
    pub fn open(
        &self,
        platform: &Platform,
        spec: &str,
    ) -> Result<(ResolvedImage, Box<dyn LayerSource>)> {
        match self {
            Self::OciDir(dir, tag) => {
                let blobs = Blobs::Dir(dir.clone());
                resolve_oci(blobs, tag.as_deref(), platform, spec)
            }
            Self::OciArchive(file, tag) => {
                let blobs = Blobs::Tar(TarIndex::open(file)?);
                resolve_oci(blobs, tag.as_deref(), platform, spec)
            }
            Self::DockerArchive(file, name) => {
                resolve_docker(TarIndex::open(file)?, name.as_deref(), spec)
            }
        }
    }
}

/// Members of a tar file: name -> (offset of data, size).
#[derive(Clone)]
struct TarIndex {
    path: PathBuf,
    file: Arc<File>,
    members: HashMap<String, (u64, u64)>,
}

impl TarIndex {
    fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| Error::input(path, e))?;
        let mut head = [0u8; 4];
        let n = file
            .read_at(&mut head, 0)
            .map_err(|e| Error::input(path, e))?;
        if n >= 2 && head[..2] == [0x1f, 0x8b] || n == 4 && head == [0x28, 0xb5, 0x2f, 0xfd] {
            return Err(Error::Source {
                source_spec: path.display().to_string(),
                reason: "the archive is compressed; decompress it first (gunzip / zstd -d), berth reads blobs in place".to_string(),
            });
        }
        let mut members = HashMap::new();
        let mut archive = tar::Archive::new(&file);
        let bad = |e: io::Error| {
            Error::BadImage(format!(
                "{} is not a valid tar archive: {e}",
                path.display()
            ))
        };
        for entry in archive.entries().map_err(bad)? {
            let entry = entry.map_err(bad)?;
            if entry.header().entry_type().is_file() {
                let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
                let name = name.trim_start_matches("./").to_string();
                members.insert(name, (entry.raw_file_position(), entry.size()));
            }
        }
        Ok(Self {
            path: path.to_path_buf(),
            file: Arc::new(file),
            members,
        })
    }

    fn member(&self, name: &str) -> Result<RangeReader> {
        let (offset, len) = self
            .members
            .get(name.trim_start_matches("./"))
            .copied()
            .ok_or_else(|| {
                Error::BadImage(format!("{} has no member {name:?}", self.path.display()))
            })?;
        Ok(RangeReader {
            file: self.file.clone(),
            pos: offset,
            end: offset + len,
        })
    }

    fn read_member(&self, name: &str, limit: u64) -> Result<Vec<u8>> {
        let (_, len) = self
            .members
            .get(name.trim_start_matches("./"))
            .copied()
            .unwrap_or((0, 0));
        if len > limit {
            return Err(Error::BadImage(format!(
                "{name} in {} is too large ({len} bytes)",
                self.path.display()
            )));
        }
        let mut out = Vec::new();
        self.member(name)?
            .read_to_end(&mut out)
            .map_err(|e| Error::input(&self.path, e))?;
        Ok(out)
    }
}

/// Reads a byte range of a shared file with positioned reads.
struct RangeReader {
    file: Arc<File>,
    pos: u64,
    end: u64,
}

impl Read for RangeReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.end.saturating_sub(self.pos);
        let want = (buf.len() as u64).min(left) as usize;
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// Where an OCI layout's blobs are.
enum Blobs {
    Dir(PathBuf),
    Tar(TarIndex),
}

const SMALL: u64 = 64 << 20;

impl Blobs {
    fn file_name(digest: &str) -> Result<String> {
        let (alg, hex) = digest
            .split_once(':')
            .ok_or_else(|| Error::BadImage(format!("malformed digest {digest:?}")))?;
        if alg != "sha256" || hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::BadImage(format!(
                "unsupported or malformed digest {digest:?}"
            )));
        }
        Ok(format!("blobs/{alg}/{hex}"))
    }

    fn read_small(&self, name: &str) -> Result<Vec<u8>> {
        match self {
            Blobs::Dir(dir) => {
                let p = dir.join(name);
                std::fs::read(&p).map_err(|e| Error::input(&p, e))
            }
            Blobs::Tar(t) => t.read_member(name, SMALL),
        }
    }

    fn blob_bytes(&self, digest: &str, what: &str) -> Result<Vec<u8>> {
        let bytes = self.read_small(&Self::file_name(digest)?)?;
        verify_bytes(what, &bytes, digest)?;
        Ok(bytes)
    }

    fn open(&self, digest: &str, size: u64) -> Result<Box<dyn Read + Send + '_>> {
        let name = Self::file_name(digest)?;
        let raw: Box<dyn Read + Send> = match self {
            Blobs::Dir(dir) => {
                let p = dir.join(&name);
                Box::new(File::open(&p).map_err(|e| Error::input(&p, e))?)
            }
            Blobs::Tar(t) => Box::new(t.member(&name)?),
        };
        Ok(Box::new(VerifyingReader::new(
            raw,
            &format!("layer {digest}"),
            digest,
            Some(size),
        )))
    }
}

impl LayerSource for Blobs {
    fn open_layer(&self, layer: &LayerDesc) -> Result<Box<dyn Read + Send + '_>> {
        self.open(&layer.digest, layer.size)
    }
}

fn resolve_oci(
    blobs: Blobs,
    tag: Option<&str>,
    platform: &Platform,
    spec: &str,
) -> Result<(ResolvedImage, Box<dyn LayerSource>)> {
    let index_bytes = blobs.read_small("index.json")?;
    let index: ImageIndex = serde_json::from_slice(&index_bytes)
        .map_err(|e| Error::BadImage(format!("{spec}: malformed index.json: {e}")))?;
    let manifests = index.manifests();
    let ref_name = |d: &oci_spec::image::Descriptor| {
        d.annotations()
            .as_ref()
            .and_then(|a| a.get("org.opencontainers.image.ref.name").cloned())
    };
    let candidates: Vec<&oci_spec::image::Descriptor> = match tag {
        Some(t) => manifests
            .iter()
            .filter(|d| ref_name(d).as_deref() == Some(t))
            .collect(),
        None => manifests.iter().collect(),
    };
    let tags: Vec<String> = manifests.iter().filter_map(ref_name).collect();
    let chosen = match candidates.as_slice() {
        [] => {
            return Err(Error::Source {
                source_spec: spec.to_string(),
                reason: format!(
                    "no image tagged {:?}; the layout has: {}",
                    tag.unwrap_or(""),
                    tags.join(", ")
                ),
            })
        }
        [one] => (*one).clone(),
        many if many.iter().all(|d| d.platform().is_some()) => {
            let owned: Vec<_> = many.iter().map(|d| (*d).clone()).collect();
            select(spec, &owned, platform)?.clone()
        }
        _ => {
            return Err(Error::Source {
                source_spec: spec.to_string(),
                reason: format!(
                    "the layout holds several images; add :TAG (one of: {})",
                    tags.join(", ")
                ),
            })
        }
    };
    let mut desc = chosen;
    let mut manifest_bytes = blobs.blob_bytes(desc.digest().as_ref(), "manifest")?;
    // An entry may itself be an index (multi-platform image under one tag).
    for _ in 0..2 {
        let v: serde_json::Value = serde_json::from_slice(&manifest_bytes)
            .map_err(|e| Error::BadImage(format!("{spec}: malformed manifest: {e}")))?;
        if v.get("manifests").is_none() {
            break;
        }
        let inner: ImageIndex = serde_json::from_value(v)
            .map_err(|e| Error::BadImage(format!("{spec}: malformed index: {e}")))?;
        desc = select(spec, inner.manifests(), platform)?.clone();
        manifest_bytes = blobs.blob_bytes(desc.digest().as_ref(), "manifest")?;
    }
    let manifest: ImageManifest = serde_json::from_slice(&manifest_bytes)
        .map_err(|e| Error::BadImage(format!("{spec}: malformed manifest: {e}")))?;
    let layers = layers_of(&manifest, spec)?;
    let config_bytes = blobs.blob_bytes(manifest.config().digest().as_ref(), "config")?;
    let config = parse_config(&config_bytes, spec)?;
    Ok((
        ResolvedImage {
            manifest_digest: Some(sha256_digest(&manifest_bytes)),
            config_bytes,
            config,
            layers,
            source: spec.to_string(),
        },
        Box::new(blobs),
    ))
}

#[derive(Debug, Deserialize)]
struct DockerManifestEntry {
    #[serde(rename = "Config")]
    config: String,
    #[serde(rename = "RepoTags", default)]
    repo_tags: Option<Vec<String>>,
    #[serde(rename = "Layers")]
    layers: Vec<String>,
}

/// Layers of a docker-archive, by member name. Legacy archives name layers
/// by path, not digest: their content is verified through the config's
/// diff_ids instead (the config itself is verified by the image id).
struct DockerLayers {
    tar: TarIndex,
    /// Layer digest (or member name, for legacy archives) -> member name.
    members: HashMap<String, String>,
}

impl LayerSource for DockerLayers {
    fn open_layer(&self, layer: &LayerDesc) -> Result<Box<dyn Read + Send + '_>> {
        let member = self
            .members
            .get(&layer.digest)
            .cloned()
            .unwrap_or_else(|| layer.digest.clone());
        let reader = self.tar.member(&member)?;
        if layer.digest.starts_with("sha256:") {
            Ok(Box::new(VerifyingReader::new(
                reader,
                &format!("layer {}", layer.digest),
                &layer.digest,
                Some(layer.size),
            )))
        } else {
            Ok(Box::new(reader))
        }
    }
}

fn resolve_docker(
    tar: TarIndex,
    name: Option<&str>,
    spec: &str,
) -> Result<(ResolvedImage, Box<dyn LayerSource>)> {
    let manifest_bytes = tar.read_member("manifest.json", SMALL)?;
    let entries: Vec<DockerManifestEntry> = serde_json::from_slice(&manifest_bytes)
        .map_err(|e| Error::BadImage(format!("{spec}: malformed manifest.json: {e}")))?;
    let all_tags: Vec<String> = entries
        .iter()
        .flat_map(|e| e.repo_tags.clone().unwrap_or_default())
        .collect();
    let entry = match name {
        Some(n) => entries
            .iter()
            .find(|e| {
                e.repo_tags.as_ref().is_some_and(|t| {
                    t.iter().any(|t| {
                        t == n
                            || t.ends_with(&format!("/{n}"))
                            || t.trim_start_matches("docker.io/") == n
                    })
                })
            })
            .ok_or_else(|| Error::Source {
                source_spec: spec.to_string(),
                reason: format!(
                    "no image named {n:?}; the archive has: {}",
                    all_tags.join(", ")
                ),
            })?,
        None => match entries.as_slice() {
            [one] => one,
            [] => {
                return Err(Error::BadImage(format!(
                    "{spec}: manifest.json lists no image"
                )))
            }
            _ => {
                return Err(Error::Source {
                    source_spec: spec.to_string(),
                    reason: format!(
                        "the archive holds several images; add :NAME (one of: {})",
                        all_tags.join(", ")
                    ),
                })
            }
        },
    };
    let config_bytes = tar.read_member(&entry.config, SMALL)?;
    let config = parse_config(&config_bytes, spec)?;
    let mut layers = Vec::new();
    let mut members = HashMap::new();
    for member in &entry.layers {
        let size = tar
            .members
            .get(member.trim_start_matches("./"))
            .map(|m| m.1)
            .ok_or_else(|| {
                Error::BadImage(format!(
                    "{spec}: layer {member:?} listed in manifest.json is missing"
                ))
            })?;
        // Newer archives store layers as blobs/sha256/<hex>: a real digest.
        let digest = member
            .strip_prefix("blobs/sha256/")
            .map(|h| format!("sha256:{h}"))
            .unwrap_or_else(|| member.clone());
        members.insert(digest.clone(), member.clone());
        layers.push(LayerDesc {
            digest,
            size,
            media_type: "application/vnd.docker.image.rootfs.diff.tar".to_string(),
        });
    }
    Ok((
        ResolvedImage {
            manifest_digest: None,
            config_bytes,
            config,
            layers,
            source: spec.to_string(),
        },
        Box::new(DockerLayers { tar, members }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sources() {
        assert_eq!(
            ImportSource::parse("oci:/tmp/lay:v1").unwrap(),
            ImportSource::OciDir("/tmp/lay".into(), Some("v1".into()))
        );
        assert_eq!(
            ImportSource::parse("oci:/nonexistent/x").unwrap(),
            ImportSource::OciDir("/nonexistent/x".into(), None)
        );
        assert_eq!(
            ImportSource::parse("docker-archive:/a.tar").unwrap(),
            ImportSource::DockerArchive("/a.tar".into(), None)
        );
        assert!(ImportSource::parse("dir:/x").is_err());
        assert!(ImportSource::parse("oci:").is_err());
        assert!(ImportSource::parse("/just/a/path").is_err());
    }

    #[test]
    fn compressed_archive_is_refused_clearly() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.tar.gz");
        std::fs::write(&p, [0x1f, 0x8b, 8, 0]).unwrap();
        let err = TarIndex::open(&p).err().unwrap().to_string();
        assert!(err.contains("decompress"), "{err}");
    }
}
