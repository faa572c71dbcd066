//! `berth push`: an image of the store to a registry: one berth built with
//! its manifest, config and layers (in the store's blob directory), one
//! pulled with its own config and layers (from the layer cache), any other
//! (imported, saved, or pulled without its layers cached) as one layer of
//! its tree. Blobs the repository has are not sent again, nor those a
//! pulled image's own repository on the same registry lends (mounted
//! across repositories); the manifest goes last, by tag.

use std::process::ExitCode;

use anyhow::Result;
use berth_image::reference::ImageRef;
use berth_image::registry::Registry;

use super::build::{local_manifest, manifest_blobs};
use super::Context;
use crate::cli::PushArgs;

/// Runs `berth push`.
pub fn push(ctx: &Context, args: PushArgs) -> Result<ExitCode> {
    let config = ctx.config()?;
    let store = ctx.store(&config)?;
    let img = store.find(&args.image)?;
    // Prune keeps its hands off the blobs while the push reads them.
    let _blobs = store.hold_blobs()?;
    let (blobs, manifest_bytes, manifest) = local_manifest(&store, &img)?;
    let dest = args
        .destination
        .clone()
        .or_else(|| img.names.first().cloned())
        .unwrap_or_else(|| args.image.clone());
    let reference = ImageRef::parse(&dest)?;
    let options = super::pull::registry_options(
        &reference,
        args.tls.tls_verify,
        args.creds.as_deref(),
        &config,
    )?;
    let registry = Registry::new(&reference, options)?;
    registry.authenticate_push(&reference)?;
    // A pulled image's repository on the same registry can lend its blobs.
    let source = ImageRef::parse(&img.record.source).ok();
    let t0 = std::time::Instant::now();
    let (mut sent, mut skipped, mut bytes) = (0, 0, 0u64);
    for digest in manifest_blobs(&manifest) {
        let path = blobs.path(&digest);
        let size = std::fs::metadata(&path)?.len();
        let mounted = || {
            source
                .as_ref()
                .is_some_and(|from| registry.mount_blob(&reference, from, &digest))
        };
        if registry.has_blob(&reference, &digest)? || mounted() {
            skipped += 1;
            continue;
        }
        registry.push_blob_file(&reference, &path, &digest, size)?;
        sent += 1;
        bytes += size;
    }
    let media_type = manifest["mediaType"]
        .as_str()
        .unwrap_or("application/vnd.oci.image.manifest.v1+json");
    registry.push_manifest(&reference, &manifest_bytes, media_type)?;
    eprintln!(
        "berth: pushed {reference} in {:.1} s: {sent} blobs sent ({:.1} MB), {skipped} already there",
        t0.elapsed().as_secs_f64(),
        bytes as f64 / 1e6
    );
    // The manifest sent: the stored one, or the one-layer image's.
    println!("{}", berth_image::layer::sha256_digest(&manifest_bytes));
    Ok(ExitCode::SUCCESS)
}
