//! `berth build`, `berth tag`, `berth save`.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{anyhow, Context as _, Result};
use berth_build::builder::{self, BaseImage, Request, StorePaths};
use berth_build::image_config::ImageConfig;
use berth_image::archive::write_oci_archive;
use berth_image::pipeline::{
    convert, parse_config, ConvertOptions, LayerDesc, LayerSource, ResolvedImage,
};
use berth_image::reference::ImageRef;
use berth_image::store::blobs::{BlobRef, Blobs, LAYER_MEDIA_TYPE};
use berth_image::store::{Store, StoredImage};

use super::Context;
use crate::cli::{BuildArgs, SaveArgs, TagArgs};
use crate::exit::ExitStatus;
use crate::progress::Reporter;

/// The store's blob directory (built images keep their layers there).
pub fn blobs_of(store: &Store) -> Result<Blobs> {
    // As a plain message, so that a failure exits with 1 as it always did
    // rather than with the store class's code.
    store.blobs().map_err(|e| anyhow!("{e}"))
}

/// Layer blobs from the store's blob directory.
struct StoredBlobs(Blobs);

impl LayerSource for StoredBlobs {
    fn open_layer(&self, layer: &LayerDesc) -> berth_image::Result<Box<dyn Read + Send + '_>> {
        let path = self.0.path(&layer.digest);
        let f =
            std::fs::File::open(&path).map_err(|e| berth_image::Error::store("open", path, e))?;
        Ok(Box::new(f))
    }
}

/// Runs `berth build`.
pub fn build(ctx: &Context, args: BuildArgs) -> Result<ExitCode> {
    let config = ctx.config()?;
    let store = ctx.store(&config)?;
    let context = args
        .context
        .canonicalize()
        .with_context(|| format!("build context {}", args.context.display()))?;
    let file = args
        .file
        .clone()
        .unwrap_or_else(|| context.join("Dockerfile"));
    let dockerfile = std::fs::read_to_string(&file).with_context(|| {
        format!(
            "cannot read the Dockerfile {} (give another with -f FILE)",
            file.display()
        )
    })?;
    let mut build_args = BTreeMap::new();
    for a in &args.build_args {
        match a.split_once('=') {
            Some((k, v)) => build_args.insert(k.to_string(), v.to_string()),
            None => build_args.insert(a.clone(), std::env::var(a).unwrap_or_default()),
        };
    }
    let names = args
        .tags
        .iter()
        .map(|t| Ok(ImageRef::parse_local_name(t)?.store_name()))
        .collect::<Result<Vec<_>>>()?;
    // Until the image is published and named: prune leaves the blobs and
    // the build cache alone.
    let _blobs_in_use = store.hold_blobs()?;
    let work = store.work_dir()?;
    let paths = StorePaths {
        blobs: store.blobs_dir(),
        cache: store.build_cache_dir(),
        work: work.path().join("build"),
    };
    let blobs = blobs_of(&store)?;
    let tls = args.tls.tls_verify;
    let platform = match &args.platform {
        Some(p) => berth_image::platform::Platform::parse(p)?,
        None => berth_image::platform::Platform::host(),
    };
    let base = |name: &str, line: usize| -> berth_build::Result<BaseImage> {
        base_image(&config, &store, &blobs, name, &platform, tls).map_err(|e| {
            berth_build::Error::Step {
                line,
                msg: format!("FROM {name}: {e:#}"),
            }
        })
    };
    let exe = std::env::current_exe()?;
    let worker = |plan: &Path| -> berth_build::Result<i32> {
        let st = std::process::Command::new(&exe)
            .arg("__build-worker")
            .arg(plan)
            .status()
            .map_err(|e| berth_build::Error::io("start the build worker", &exe, e))?;
        Ok(st.code().unwrap_or(berth_build::worker::EXIT_WORKER))
    };
    let req = Request {
        dockerfile,
        context: context.clone(),
        build_args,
        target: args.target.clone(),
        no_cache: args.no_cache,
        // clap allows only the four words.
        root_emulation: berth_runtime::seccomp::RootEmulation::parse(&args.root_emulation)
            .unwrap_or_default(),
    };
    let t0 = std::time::Instant::now();
    let built = match builder::build(&req, &paths, &base, &worker) {
        Ok(b) => b,
        Err(e @ (berth_build::Error::Dockerfile { .. } | berth_build::Error::Step { .. })) => {
            eprintln!("berth: error: {}: {e}", file.display());
            return Ok(e.exit().into());
        }
        // The worker said which step and why.
        Err(e @ berth_build::Error::WorkerFailed(_)) => return Ok(e.exit().into()),
        Err(e) => return Err(e.into()),
    };
    drop(work);
    let resolved = ResolvedImage {
        manifest_digest: Some(built.manifest_digest.clone()),
        config: parse_config(&built.config, "the built image")?,
        config_bytes: built.config.clone(),
        layers: built
            .layers
            .iter()
            .map(|l| LayerDesc {
                digest: l.digest.clone(),
                size: l.size,
                media_type: LAYER_MEDIA_TYPE.to_string(),
            })
            .collect(),
        source: format!("build:{}", context.display()),
    };
    let reporter = Reporter::new(true, "build");
    let opts = ConvertOptions {
        squashfs: &config.squashfs,
        jobs: super::jobs(),
        names,
        progress: &reporter,
    };
    let image = convert(&store, &resolved, &StoredBlobs(blobs), &opts)?;
    if !args.quiet {
        eprintln!(
            "berth: built {} in {:.1} s ({} steps run, {} from the cache, {} layers)",
            image
                .names
                .first()
                .map(String::as_str)
                .unwrap_or("the image"),
            t0.elapsed().as_secs_f64(),
            built.ran,
            built.cached,
            built.layers.len()
        );
    }
    println!("{}", image.record.id);
    Ok(ExitCode::SUCCESS)
}

/// `img` as the builder takes a base image: its tree, config and (where
/// the store keeps all of them) layers.
pub fn as_base(store: &Store, img: &StoredImage, blobs: &Blobs, name: &str) -> Result<BaseImage> {
    let cfg = ImageConfig::parse(&std::fs::read(img.config_path())?, name)?;
    // A pulled base whose gzip layers the layer cache keeps: its own
    // layers (linked into the blobs) under the build's, so the built image
    // shares them with the registry it came from. (Built manifests name
    // every layer gzip: other compressions go as one layer.)
    let gzip = |t: &str| t.ends_with("tar.gzip") || t.ends_with("tar+gzip");
    if !img.record.layers.is_empty() && img.record.layers.iter().all(|l| gzip(&l.media_type)) {
        berth_image::store::original::original_manifest(store, img, blobs)?;
    }
    let layers = img
        .record
        .layers
        .iter()
        .map(|l| {
            blobs.has(&l.digest).then(|| BlobRef {
                digest: l.digest.clone(),
                diff_id: l.diff_id.clone(),
                size: l.size,
            })
        })
        .collect::<Option<Vec<_>>>();
    Ok(BaseImage {
        id: img.record.id.clone(),
        squashfs: img.squashfs_path(),
        config: cfg,
        layers,
    })
}

/// A FROM image: from the store, else pulled when it names a registry.
fn base_image(
    config: &berth_config::Config,
    store: &Store,
    blobs: &Blobs,
    name: &str,
    platform: &berth_image::platform::Platform,
    tls: bool,
) -> Result<BaseImage> {
    let img = match store.find(name) {
        Ok(img) => img,
        Err(berth_image::Error::ImageNotInStore(_)) => {
            let reference = ImageRef::parse(name)?;
            super::pull::pull_into(config, store, &reference, platform, tls, None, false)?
        }
        Err(e) => return Err(e.into()),
    };
    as_base(store, &img, blobs, name)
}

/// Runs `berth tag`.
pub fn tag(ctx: &Context, args: TagArgs) -> Result<ExitCode> {
    let config = ctx.config()?;
    let store = ctx.store(&config)?;
    let img = store.find(&args.image)?;
    let name = ImageRef::parse_local_name(&args.name)?.store_name();
    store.set_name(&name, &img.record.id)?;
    Ok(ExitCode::SUCCESS)
}

/// The manifest of an image: the one berth built, a pulled image's own
/// (its layers from the layer cache), or one layer of its tree; its blobs
/// are in the store's blob directory.
pub fn local_manifest(
    store: &Store,
    img: &StoredImage,
) -> Result<(Blobs, Vec<u8>, serde_json::Value)> {
    let blobs = blobs_of(store)?;
    let kept = img
        .record
        .manifest_digest
        .as_deref()
        .filter(|d| blobs.has(d))
        .map(|d| std::fs::read(blobs.path(d)))
        .transpose()?;
    let original = match kept {
        Some(_) => None,
        None => berth_image::store::original::original_manifest(store, img, &blobs)?,
    };
    let bytes = match kept.or(original) {
        Some(bytes) => bytes,
        // Imported or saved, or pulled without its layers in the layer
        // cache: only the squashfs file is kept. Its tree becomes one
        // layer (made once per image).
        None => {
            let name = img
                .names
                .first()
                .cloned()
                .unwrap_or_else(|| img.record.id.clone());
            let base = as_base(store, img, &blobs, &name)?;
            eprintln!(
                "berth: {name} keeps only its squashfs file: it goes as one layer of its tree"
            );
            berth_build::manifest::one_layer_image(&base, &blobs, &store.build_cache_dir())?.0
        }
    };
    let manifest: serde_json::Value = serde_json::from_slice(&bytes)?;
    for d in manifest_blobs(&manifest) {
        if !blobs.has(&d) {
            return Err(anyhow!(
                "blob {d} of {} is missing from the store",
                img.record.id
            ));
        }
    }
    Ok((blobs, bytes, manifest))
}

/// The config and layer digests a manifest names.
pub fn manifest_blobs(manifest: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(d) = manifest["config"]["digest"].as_str() {
        out.push(d.to_string());
    }
    if let Some(layers) = manifest["layers"].as_array() {
        out.extend(
            layers
                .iter()
                .filter_map(|l| l["digest"].as_str().map(str::to_string)),
        );
    }
    out
}

/// Runs `berth save`: an oci-archive (OCI layout in a tar) with the image's
/// manifest, config and layers, its name as the reference.
pub fn save(ctx: &Context, args: SaveArgs) -> Result<ExitCode> {
    let config = ctx.config()?;
    let store = ctx.store(&config)?;
    let _blobs_in_use = store.hold_blobs()?;
    let img = store.find(&args.image)?;
    let (blobs, manifest_bytes, _) = local_manifest(&store, &img)?;
    let digest = berth_image::layer::sha256_digest(&manifest_bytes);
    let name = img.names.first().map(String::as_str);
    write_oci_archive(&args.output, &blobs, &digest, name)?;
    Ok(ExitCode::SUCCESS)
}
