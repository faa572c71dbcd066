//! `berth import`.

use std::process::ExitCode;

use anyhow::Result;
use std::path::Path;

use berth_image::archive::ImportSource;
use berth_image::image_file::{self, Format, ImageFile};
use berth_image::pipeline::{convert, ConvertOptions};
use berth_image::platform::Platform;
use berth_image::reference::ImageRef;

use super::Context;
use crate::cli::ImportArgs;
use crate::progress::Reporter;

/// Runs `berth import`.
pub fn run(ctx: &Context, args: ImportArgs) -> Result<ExitCode> {
    let name = ImageRef::parse_local_name(&args.name)?;
    if let Some((format, path)) = image_file_source(&args.source) {
        let f = ImageFile::open_as(Path::new(path), Some(format))?;
        let config = ctx.config()?;
        let store = ctx.store(&config)?;
        let image = image_file::import(&store, &f, &[name.store_name()])?;
        if !args.quiet {
            eprintln!(
                "Imported {} ({} squashfs, {} bytes) as {}",
                f.source(),
                f.compressor,
                image.record.squashfs.size,
                name.store_name()
            );
        }
        println!("{}", image.record.id);
        return Ok(ExitCode::SUCCESS);
    }
    let source = ImportSource::parse(&args.source)?;
    let platform = match &args.platform {
        Some(p) => Platform::parse(p)?,
        None => Platform::host(),
    };
    let config = ctx.config()?;
    let store = ctx.store(&config)?;
    let (resolved, layers) = source.open(&platform, &args.source)?;
    let reporter = Reporter::new(args.quiet, &args.source);
    let opts = ConvertOptions {
        squashfs: &config.squashfs,
        jobs: super::jobs(),
        names: vec![name.store_name()],
        progress: &reporter,
    };
    let image = convert(&store, &resolved, layers.as_ref(), &opts)?;
    reporter.done(&image);
    println!("{}", image.record.id);
    Ok(ExitCode::SUCCESS)
}

/// `sif:FILE` or `squashfs:FILE`: an image file copied into the store as
/// it is.
fn image_file_source(spec: &str) -> Option<(Format, &str)> {
    let (transport, path) = spec.split_once(':')?;
    let format = match transport {
        "sif" => Format::Sif,
        "squashfs" | "sqsh" => Format::Squashfs,
        _ => return None,
    };
    (!path.is_empty()).then_some((format, path))
}
