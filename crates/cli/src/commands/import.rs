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
    let platform = match &args.platform {
        Some(p) => Platform::parse(p)?,
        None => Platform::host(),
    };
    let config = ctx.config()?;
    let store = ctx.store(&config)?;
    // An image of podman's or docker's storage: exported by them into the
    // store's work directory first.
    let work = store.work_dir()?;
    let spec = match engine_source(&args.source) {
        Some((engine, image)) => export(engine, image, work.path())?,
        None => args.source.clone(),
    };
    let source = ImportSource::parse(&spec)?;
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

/// `containers-storage:NAME` (the user's podman images) or
/// `docker-daemon:NAME` (the docker daemon's): the program that exports it
/// and the image.
fn engine_source(spec: &str) -> Option<(&'static str, &str)> {
    let (transport, image) = spec.split_once(':')?;
    let engine = match transport {
        "containers-storage" => "podman",
        "docker-daemon" => "docker",
        _ => return None,
    };
    (!image.is_empty()).then_some((engine, image))
}

/// Has `engine` save `image` into `dir`; the import source for the file.
fn export(engine: &str, image: &str, dir: &Path) -> Result<String> {
    let (file, args, transport): (_, &[&str], _) = match engine {
        "podman" => (
            "image.oci.tar",
            &["image", "save", "--format", "oci-archive", "-o"],
            "oci-archive",
        ),
        _ => ("image.docker.tar", &["save", "-o"], "docker-archive"),
    };
    let path = dir.join(file);
    let out = std::process::Command::new(engine)
        .args(args)
        .arg(&path)
        .arg(image)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            berth_image::Error::HostTool(format!(
                "cannot run {engine} to export {image} ({e}); is {engine} installed?"
            ))
        })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(berth_image::Error::HostTool(format!(
            "{engine} could not export {image}: {}",
            err.lines().last().unwrap_or("no message").trim()
        ))
        .into());
    }
    Ok(format!("{transport}:{}", path.display()))
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
