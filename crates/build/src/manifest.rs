//! Assembling the built image once the worker ran: the target stage's
//! layers (its base's, those of the stages it starts from, its steps'),
//! the config with its `rootfs` and `history`, and the OCI manifest, all
//! stored in the blob directory.

use berth_image::store::blobs::{BlobRef, Blobs, LAYER_MEDIA_TYPE};
use berth_image::store::build_cache::CacheEntry;
use oci_spec::image::{
    DescriptorBuilder, Digest, History, ImageManifest, ImageManifestBuilder, MediaType, RootFs,
};

use crate::image_config::host_arch;
use crate::instructions::{PendingHistory, StageState};
use crate::plan::{Base, Plan};
use crate::{Error, Result};

/// A built image: blobs are in the store's blob directory.
#[derive(Debug, Clone)]
pub struct Built {
    /// config.json, byte for byte.
    pub config: Vec<u8>,
    /// The OCI manifest, byte for byte.
    pub manifest: Vec<u8>,
    /// Its digest.
    pub manifest_digest: String,
    /// Layers, bottom first.
    pub layers: Vec<BlobRef>,
    /// File-system steps run and taken from the cache.
    pub ran: usize,
    /// Steps the cache had.
    pub cached: usize,
}

/// What the steps of the target's stages made.
pub struct StepResults {
    /// File-system steps run.
    pub ran: usize,
    /// File-system steps taken from the cache.
    pub cached: usize,
}

/// The target stage's config and manifest, with every layer: its base's,
/// those of the stages it starts from, its own.
pub fn assemble(
    plan: &Plan,
    target: usize,
    state: Option<StageState>,
    blobs: &Blobs,
    counts: StepResults,
) -> Result<Built> {
    let st = state.ok_or_else(|| Error::Plan("the target stage was not prepared".into()))?;
    // st.layers holds the base's layers (through FROM stage, the first
    // stage's base's); each stage of the chain the target starts from adds
    // its steps' layers, in order.
    let mut chain = vec![target];
    while let Base::Stage(j) = plan.stages[*chain.last().unwrap_or(&target)].base {
        chain.push(j);
    }
    let mut step_layers = Vec::new();
    for &s in chain.iter().rev() {
        for step in &plan.stages[s].steps {
            let entry = step
                .cached
                .clone()
                .or_else(|| CacheEntry::load(&plan.cache, &step.key))
                .ok_or_else(|| {
                    Error::Plan(format!(
                        "line {}: the step left no result in the build cache",
                        step.line
                    ))
                })?;
            step_layers.push(entry.layer);
        }
    }
    let history = resolve_history(st.history, &step_layers);
    let mut layers = st.layers;
    layers.extend(step_layers.into_iter().flatten());
    for l in &layers {
        if !blobs.has(&l.digest) {
            return Err(Error::Plan(format!(
                "layer {} is missing from the blob store",
                l.digest
            )));
        }
    }
    let (config_bytes, manifest_bytes, manifest_digest) =
        store_image(st.config, &layers, history, blobs)?;
    Ok(Built {
        config: config_bytes,
        manifest: manifest_bytes,
        manifest_digest,
        layers,
        ran: counts.ran,
        cached: counts.cached,
    })
}

/// An image whose layers the store does not keep (pulled, imported or
/// saved: only its squashfs file), as one gzip layer of its tree (made
/// once, found again through the build cache) under its own config:
/// `rootfs` and `history` name that layer. The config and manifest go to
/// the blob directory; the manifest's bytes and digest.
pub fn one_layer_image(
    img: &crate::base_layer::BaseImage,
    blobs: &Blobs,
    cache: &std::path::Path,
) -> Result<(Vec<u8>, String)> {
    let layer = crate::base_layer::flatten_base(img, blobs, cache)?;
    let mut entry = History::default();
    entry.set_created_by(Some(
        "berth push: the image's tree as one layer".to_string(),
    ));
    let (_, bytes, digest) = store_image(img.config.clone(), &[layer], vec![entry], blobs)?;
    Ok((bytes, digest))
}

/// `config` naming `layers` (its `rootfs`) and `history`, and the OCI
/// manifest of both, stored in the blob directory: the config's bytes,
/// the manifest's bytes and digest.
fn store_image(
    mut config: crate::image_config::ImageConfig,
    layers: &[BlobRef],
    history: Vec<History>,
    blobs: &Blobs,
) -> Result<(Vec<u8>, Vec<u8>, String)> {
    let mut rootfs = RootFs::default();
    rootfs.set_diff_ids(layers.iter().map(|l| l.diff_id.clone()).collect());
    config.rootfs = Some(rootfs);
    config.history = Some(history);
    config
        .architecture
        .get_or_insert_with(|| host_arch().into());
    config.os.get_or_insert_with(|| "linux".into());
    let config_bytes = config.to_bytes()?;
    let config_digest = blobs.put(&config_bytes)?;
    let manifest = manifest(&config_digest, config_bytes.len(), layers)?;
    let manifest_bytes = sorted_json(&manifest)?;
    let manifest_digest = blobs.put(&manifest_bytes)?;
    Ok((config_bytes, manifest_bytes, manifest_digest))
}

/// The history: each file-system step's entry, in order, takes the next
/// of `step_layers` and is an `empty_layer` when that is none.
fn resolve_history(pending: Vec<PendingHistory>, step_layers: &[Option<BlobRef>]) -> Vec<History> {
    let mut layers = step_layers.iter();
    pending
        .into_iter()
        .map(|p| {
            let mut entry = p.entry;
            if p.from_step && layers.next().is_none_or(Option::is_none) {
                entry.set_empty_layer(Some(true));
            }
            entry
        })
        .collect()
}

/// The OCI manifest of a config and gzip layers.
fn manifest(config_digest: &str, config_size: usize, layers: &[BlobRef]) -> Result<ImageManifest> {
    let descriptor = |media_type: MediaType, digest: &str, size: u64| {
        let parsed: Digest = digest
            .parse()
            .map_err(|e| Error::Plan(format!("blob digest {digest}: {e}")))?;
        DescriptorBuilder::default()
            .media_type(media_type)
            .digest(parsed)
            .size(size)
            .build()
            .map_err(|e| Error::Plan(format!("descriptor of {digest}: {e}")))
    };
    let config = descriptor(MediaType::ImageConfig, config_digest, config_size as u64)?;
    let layers = layers
        .iter()
        .map(|l| descriptor(MediaType::from(LAYER_MEDIA_TYPE), &l.digest, l.size))
        .collect::<Result<Vec<_>>>()?;
    ImageManifestBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageManifest)
        .config(config)
        .layers(layers)
        .build()
        .map_err(|e| Error::Plan(format!("cannot make the manifest: {e}")))
}

/// JSON with keys sorted at every level: equal manifests, equal bytes.
fn sorted_json(manifest: &ImageManifest) -> Result<Vec<u8>> {
    let encode = |e: serde_json::Error| Error::Plan(format!("cannot encode the manifest: {e}"));
    let value = serde_json::to_value(manifest).map_err(encode)?;
    serde_json::to_vec(&value).map_err(encode)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(n: u8) -> BlobRef {
        BlobRef {
            digest: format!("sha256:{}", format!("{n:02x}").repeat(32)),
            diff_id: format!("sha256:{}", format!("{:02x}", n + 1).repeat(32)),
            size: 10 + n as u64,
        }
    }

    /// The manifest is the JSON the untyped builder of earlier versions
    /// wrote, byte for byte (so its digest did not change).
    #[test]
    fn the_manifest_is_the_json_earlier_versions_wrote() {
        let config_digest = format!("sha256:{}", "c".repeat(64));
        let layers = [blob(1), blob(2)];
        let m = manifest(&config_digest, 123, &layers).unwrap();
        let old = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": 123},
            "layers": layers.iter().map(|l| serde_json::json!({"mediaType": LAYER_MEDIA_TYPE, "digest": l.digest, "size": l.size})).collect::<Vec<_>>(),
        });
        assert_eq!(sorted_json(&m).unwrap(), serde_json::to_vec(&old).unwrap());
    }

    #[test]
    fn steps_that_made_no_layer_are_empty_layers_in_the_history() {
        let pending = vec![
            PendingHistory::base_layer("debian"),
            PendingHistory::config_only("ENV A=1"),
            PendingHistory::step("RUN true"),
            PendingHistory::step("RUN touch /x"),
        ];
        let history = resolve_history(pending, &[None, Some(blob(3))]);
        let json = serde_json::to_value(&history).unwrap();
        assert_eq!(
            json,
            serde_json::json!([
                {"created_by": "berth build: FROM debian"},
                {"created_by": "ENV A=1", "empty_layer": true},
                {"created_by": "RUN true", "empty_layer": true},
                {"created_by": "RUN touch /x"},
            ])
        );
    }
}
