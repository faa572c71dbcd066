//! Named containers (`berth run --name NAME`): `berth ps -a` lists them,
//! `berth commit NAME TARGET` saves one as an image (or a live shared
//! container, by its key), `berth rm NAME` removes one.

use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Result;
use berth_engine::caller::Caller;
use berth_engine::named;
use berth_engine::save::{self, SaveJob, Target};

use super::Context;
use crate::cli::{CommitArgs, RmArgs};

/// The named containers of the store.
pub fn list(ctx: &Context) -> Result<Vec<named::Listed>> {
    Ok(named::list(&ctx.config()?)?)
}

/// The named containers of the store, as `berth ps -a` prints them after
/// the live ones (`quiet`: their names only).
pub fn print(ctx: &Context, quiet: bool) -> Result<()> {
    let list = list(ctx)?;
    if quiet {
        for c in &list {
            println!("{}", c.record.name);
        }
        return Ok(());
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    println!();
    println!(
        "{:<24} {:<36} {:<9} {:<8} {:>8}",
        "NAMED CONTAINER", "IMAGE", "MODE", "STATUS", "CREATED"
    );
    for c in &list {
        println!(
            "{:<24} {:<36} {:<9} {:<8} {:>7}s",
            c.record.name,
            c.record.image,
            c.record.mode,
            if c.in_use { "in use" } else { "stopped" },
            now.saturating_sub(c.record.created)
        );
    }
    Ok(())
}

/// `berth rm NAME...`: each named container with its changes; one that a
/// run uses is refused.
pub fn rm(ctx: &Context, args: RmArgs) -> Result<ExitCode> {
    let config = ctx.config()?;
    let exe = std::env::current_exe()?;
    let mut failed = None;
    for name in &args.names {
        match named::remove(&config, name, &exe) {
            Ok(()) => println!("{name}"),
            Err(e) => {
                let (code, msg) = crate::exit::describe(&e.into());
                eprintln!("berth: error: {msg}");
                failed = Some(code);
            }
        }
    }
    Ok(failed.map_or(ExitCode::SUCCESS, ExitCode::from))
}

/// `berth commit NAME TARGET`: the named container's root (its image with
/// its changes) as a squashfs file or an image in the store, as `--save`
/// makes it; the container stays. A container a run uses is saved as its
/// changes stand at that moment.
pub fn commit(ctx: &Context, args: CommitArgs) -> Result<ExitCode> {
    let config = ctx.config()?;
    let caller = Caller::current(Instant::now())?;
    // Not a named container: a shared one of this node, by its key.
    let key_like = berth_runtime::shared::validate_key(&args.name).is_ok();
    if key_like && !named::containers_dir(&config).join(&args.name).exists() {
        if let Some((info, share)) = berth_runtime::shared::hold(&args.name)? {
            return commit_shared(&config, &caller, &args, &info, share);
        }
    }
    let (record, _dir, held) = named::take_or_snapshot(&config, &args.name)?;
    if matches!(held, named::Held::Live(_)) {
        eprintln!(
            "berth: container {} is running: saving its changes as they are now (a file being written at this moment may be saved part-written; let its writers finish first for a consistent image)",
            record.name
        );
    }
    let target = Target::parse(&args.target, &caller.cwd)?;
    // Run from a squashfs file: recorded by its path (relative ones, from
    // records made before berth kept them absolute, from here).
    let file = berth_image::image_file::names_a_file(&record.image)
        .then(|| caller.cwd.join(&record.image));
    let found = container_image(
        &config,
        &format!("container {}", record.name),
        &record.image,
        &record.image_id,
        file.as_deref(),
    )?;
    let img = &found.image;
    // The layer, opened inside the store (no symlink there leads out of
    // it) and handed down to the save's worker: a directory that another
    // container of the user's, with the store bound, replaced by a symlink
    // to the user's files is not what gets saved.
    let layer = named::open_upper(&config, &record.name).map_err(|e| {
        anyhow::anyhow!(
            "container {}: cannot open its changes {} in the store: {e}",
            record.name,
            named::containers_dir(&config)
                .join(&record.name)
                .join("upper")
                .display()
        )
    })?;
    let job = SaveJob {
        target,
        upper: hand_down(&layer)?,
        temporary: None,
        image: save_source(&found)?,
        base: img.record.id.clone(),
        run: img.record.run.clone(),
        mode: named::mode_of(&record),
        config: config.clone(),
    };
    let line = save::save(&job, &caller.berth_exe)?;
    drop(layer);
    eprintln!("berth: {line}");
    Ok(ExitCode::SUCCESS)
}

/// `berth commit KEY TARGET` of a live shared container (`berth run
/// --shared KEY --writable`, the plugin's containers): its writable layer,
/// taken from its anchor, saved while the share held keeps the container
/// alive.
fn commit_shared(
    config: &berth_config::Config,
    caller: &Caller,
    args: &CommitArgs,
    info: &berth_runtime::shared::SharedInfo,
    share: berth_runtime::node::Share,
) -> Result<ExitCode> {
    let key = &info.key;
    let Some(layer) = berth_runtime::shared::writable_layer(info)? else {
        return Err(berth_engine::Error::Usage(format!(
            "shared container {key} has no changes of its own to save: its root is read-only (start it with --writable, or --container-writable under Slurm); its image is {}",
            info.image
        ))
        .into());
    };
    eprintln!(
        "berth: shared container {key} is running: saving its changes as they are now (a file being written at this moment may be saved part-written; let its writers finish first for a consistent image)"
    );
    let target = Target::parse(&args.target, &caller.cwd)?;
    let found = container_image(
        config,
        &format!("shared container {key}"),
        &info.image,
        &info.image_id,
        info.squashfs.as_deref(),
    )?;
    let img = &found.image;
    let job = SaveJob {
        target,
        upper: hand_down(&layer)?,
        temporary: None,
        image: save_source(&found)?,
        base: img.record.id.clone(),
        run: img.record.run.clone(),
        mode: info.mode,
        config: config.clone(),
    };
    let line = save::save(&job, &caller.berth_exe)?;
    drop((layer, share));
    eprintln!("berth: {line}");
    Ok(ExitCode::SUCCESS)
}

/// The image file a save reads: the descriptor the lookup opened (the file
/// whose id was checked), handed down to the save's worker as
/// `/proc/self/fd/N`, so that a file replaced at its path meanwhile is
/// not read instead; else its path.
fn save_source(found: &berth_engine::image::Found) -> Result<std::path::PathBuf> {
    match &found.file {
        Some(f) => hand_down(f),
        None => Ok(found.image.squashfs_path()),
    }
}

/// `fd` made inheritable, for the save's worker, which inherits it (same
/// number) and reads it through its own `/proc/self/fd/N`.
fn hand_down(fd: impl std::os::fd::AsFd) -> Result<std::path::PathBuf> {
    let fd = fd.as_fd();
    rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?;
    Ok(format!("/proc/self/fd/{}", fd.as_raw_fd()).into())
}

/// The image a container (`who`) runs: from the store by its id, or the
/// squashfs file it was run from in place (a file's id stands for the
/// file as it was: a changed file is refused, and a SIF file, whose
/// squashfs lies inside it, cannot be saved with changes).
fn container_image(
    config: &berth_config::Config,
    who: &str,
    image: &str,
    image_id: &str,
    file: Option<&std::path::Path>,
) -> Result<berth_engine::image::Found> {
    // The store read now, not the node's copy of the record: the file is
    // opened, and handed to the save as the one whose id was checked.
    let in_store = match berth_engine::image::find(config, image_id, false) {
        Ok(found) => return Ok(found),
        Err(e) => e,
    };
    let Some(file) = file.and_then(|f| f.to_str()) else {
        anyhow::bail!(
            "{who}: its image {image} ({image_id}) is not in the store any more: {in_store}"
        );
    };
    match berth_engine::image::find(config, file, false) {
        Ok(found) if found.image.record.squashfs.offset != 0 => Err(berth_engine::Error::Usage(format!(
            "{who} runs the SIF file {file} in place, which a commit cannot save with its changes: import it first (berth import sif:FILE NAME), then run that"
        ))
        .into()),
        Ok(found) if found.image.record.id == image_id => Ok(found),
        Ok(_) => anyhow::bail!("{who}: its image file {file} changed since the container started"),
        Err(e) => anyhow::bail!(
            "{who}: its image file {file}: {e} (nor is its image {image_id} in the store: {in_store})"
        ),
    }
}
