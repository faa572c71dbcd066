//! `berth pull`: resolve a reference on a registry and convert it.

use oci_spec::image::{ImageIndex, ImageManifest};

use crate::downloads::{DownloadOptions, Downloads};
use crate::error::{Error, Result};
use crate::pipeline::{convert, layers_of, parse_config, ConvertOptions, ResolvedImage};
use crate::platform::{select, Platform};
use crate::reference::ImageRef;
use crate::registry::Registry;
use crate::store::{Store, StoredImage};

/// What a manifest document is.
enum Document {
    Index(Box<ImageIndex>),
    Manifest(Box<ImageManifest>),
}

fn parse_document(bytes: &[u8], reference: &str) -> Result<Document> {
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| Error::BadImage(format!("{reference}: the manifest is not JSON: {e}")))?;
    if value.get("schemaVersion").and_then(|v| v.as_i64()) == Some(1) {
        return Err(Error::BadImage(format!(
            "{reference} uses a Docker schema 1 manifest, which is deprecated and unsupported; re-push it with a current docker, podman or skopeo"
        )));
    }
    let malformed =
        |e: serde_json::Error| Error::BadImage(format!("{reference}: malformed manifest: {e}"));
    if value.get("manifests").is_some() {
        Ok(Document::Index(
            serde_json::from_value(value).map_err(malformed)?,
        ))
    } else if value.get("layers").is_some() {
        Ok(Document::Manifest(
            serde_json::from_value(value).map_err(malformed)?,
        ))
    } else {
        Err(Error::BadImage(format!(
            "{reference}: the registry returned a document that is neither a manifest nor an index"
        )))
    }
}

/// Resolves `reference` to a platform manifest and its verified config.
pub fn resolve(
    registry: &Registry,
    reference: &ImageRef,
    platform: &Platform,
) -> Result<ResolvedImage> {
    let name = reference.to_string();
    let (bytes, digest) = registry.manifest(reference)?;
    let (manifest, manifest_digest) = match parse_document(&bytes, &name)? {
        Document::Manifest(m) => (m, digest),
        Document::Index(index) => {
            let chosen = select(&name, index.manifests(), platform)?;
            let pinned = reference.with_digest(chosen.digest().as_ref());
            let (bytes, digest) = registry.manifest(&pinned)?;
            match parse_document(&bytes, &name)? {
                Document::Manifest(m) => (m, digest),
                Document::Index(_) => {
                    return Err(Error::BadImage(format!(
                        "{name}: nested image indexes are not supported"
                    )));
                }
            }
        }
    };
    let layers = layers_of(&manifest, &name)?;
    let config_desc = manifest.config();
    let config_bytes =
        registry.small_blob(reference, config_desc.digest().as_ref(), config_desc.size())?;
    let config = parse_config(&config_bytes, &name)?;
    let got = format!("{}/{}", config.os(), config.architecture());
    if got != format!("{}/{}", platform.os, platform.arch) {
        tracing::warn!("{name} is built for {got}, not {platform}: it may not run here");
    }
    Ok(ResolvedImage {
        manifest_digest: Some(manifest_digest),
        config_bytes,
        config,
        layers,
        source: name,
    })
}

/// Pulls `reference` into `store` and names it: the layers are downloaded
/// in parallel through the store's layer cache ([`Downloads`]). A cached
/// layer found corrupt is removed from the cache and the pull starts
/// again, once, downloading it.
pub fn pull(
    store: &Store,
    registry: &Registry,
    reference: &ImageRef,
    platform: &Platform,
    opts: &ConvertOptions<'_>,
    downloads: &DownloadOptions,
) -> Result<StoredImage> {
    let resolved = resolve(registry, reference, platform)?;
    let mut again = true;
    loop {
        let source = Downloads::new(
            store,
            registry.fetcher(reference),
            &resolved.layers,
            downloads.clone(),
        )?;
        match convert(store, &resolved, &source, opts) {
            Err(e) if again && source.evicted() => {
                tracing::warn!("{e}; pulling again without the corrupt cached layer");
                again = false;
            }
            Err(e) => return Err(e),
            Ok(image) => {
                opts.progress
                    .layers_cached(source.cached(), resolved.layers.len());
                drop(source);
                if let Some(max) = downloads.cache_max {
                    let (count, bytes) = store.layer_cache()?.shrink_to(max)?;
                    if count > 0 {
                        tracing::info!(
                            "layer cache over its {max}-byte cap: removed {count} least recently used layers ({bytes} bytes)"
                        );
                    }
                }
                return Ok(image);
            }
        }
    }
}
