//! `berth import`.

use std::process::ExitCode;

use anyhow::Result;
use berth_image::archive::ImportSource;
use berth_image::pipeline::{convert, ConvertOptions};
use berth_image::platform::Platform;
use berth_image::reference::ImageRef;

use super::Context;
use crate::cli::ImportArgs;
use crate::progress::Reporter;

/// Runs `berth import`.
pub fn run(ctx: &Context, args: ImportArgs) -> Result<ExitCode> {
    let source = ImportSource::parse(&args.source)?;
    let name = ImageRef::parse_local_name(&args.name)?;
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
