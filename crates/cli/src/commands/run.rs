//! `berth run` and `berth shell`: the options as a [`RunRequest`], then one
//! call into berth-engine.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use berth_engine::{Caller, RunRequest, SharedRequest};
use berth_runtime::shared::Reuse;

use super::Context;
use crate::cli::{ContainerArgs, RunArgs, ShellArgs};

/// `berth run`: exits with the command's status. Every failure of berth's
/// own is exit code 125 (as podman), whatever its class.
pub fn run(ctx: &Context, args: RunArgs) -> Result<ExitCode> {
    let started = Instant::now();
    let reuse = match Reuse::parse(&args.reuse) {
        Some(r) => r,
        None => {
            return finish(Err(anyhow!(
                "--reuse {}: use same, any, existing, running or new",
                args.reuse
            )))
        }
    };
    // Joining a running container as it is: there is no IMAGE, the first
    // word is the command.
    let (image, command) = match (reuse, args.image) {
        // With an environment file the image is the file's (or --image).
        (_, first) if args.environment.is_some() => (
            args.environment_image.clone().unwrap_or_default(),
            first.into_iter().chain(args.command).collect(),
        ),
        (Reuse::Existing | Reuse::Running, first) => (
            String::new(),
            first.into_iter().chain(args.command).collect(),
        ),
        (_, Some(image)) => (image, args.command),
        (_, None) => {
            return finish(Err(anyhow!(
                "no IMAGE given (berth run IMAGE [COMMAND...])"
            )))
        }
    };
    let mut req = request(&image, &args.container);
    req.entrypoint = args.entrypoint;
    req.entrypoint_first = args.entrypoint_first;
    req.entrypoint_log = args.entrypoint_log;
    req.args = command;
    if reuse != Reuse::Same && args.shared.is_none() && args.name.is_none() {
        return finish(Err(anyhow!(
            "--reuse {} is for a shared (--shared) or named (--name) container",
            args.reuse
        )));
    }
    if reuse == Reuse::Running && args.shared.is_none() {
        return finish(Err(anyhow!(
            "--reuse running is for a shared (--shared) container"
        )));
    }
    req.name = args.name;
    req.rm = args.rm;
    req.name_reuse = reuse;
    req.name_readonly = args.name_readonly;
    req.shared = args.shared.map(|key| SharedRequest {
        key,
        linger: Duration::from_secs(args.linger),
        reuse,
        hand_over: args.hand_over,
    });
    req.argv0_fallback = args.argv0_fallback;
    req.workdir_must_exist = args.workdir_must_exist;
    req.env_below_image = args.env_below_image;
    req.workdir_image = args.workdir_image;
    if let Some(name) = &args.environment {
        let applied = ctx.config().and_then(|config| {
            let caller = Caller::current(started)?;
            berth_engine::environment::apply_named(&config, name, &caller, &mut req)?;
            Ok(())
        });
        if let Err(e) = applied {
            return finish(Err(e));
        }
    }
    finish(start(ctx, &req, &args.container, started, args.dry_run))
}

/// `berth shell`: the image's bash if it has one, else sh.
pub fn shell(ctx: &Context, args: ShellArgs) -> Result<ExitCode> {
    let started = Instant::now();
    let shell = RunRequest::shell(&args.image);
    let req = RunRequest {
        entrypoint: shell.entrypoint,
        args: shell.args,
        ..request(&args.image, &args.container)
    };
    finish(start(ctx, &req, &args.container, started, false))
}

/// The container options as a request for `image`.
fn request(image: &str, c: &ContainerArgs) -> RunRequest {
    RunRequest {
        image: image.to_string(),
        env: c.env.clone(),
        env_files: c.env_file.clone(),
        env_host: c.env_host,
        workdir: c.workdir.clone(),
        volumes: c.volumes.clone(),
        tmpfs: c.tmpfs.clone(),
        umount: c.umount.clone(),
        writable: c.writable,
        overlay: c.overlay.clone(),
        save: c.save.clone(),
        fakeroot: c.fakeroot,
        root_emulation: c.root_emulation.clone(),
        no_home: c.no_home,
        pid: c.pid,
        net_none: c.net == "none",
        unshare: c.unshare.clone(),
        timing: c.timing,
        gpus: c.gpus.clone(),
        devices: c.devices.clone(),
        modules: c.modules.clone(),
        mpi: c.mpi,
        annotations: c.annotations.clone(),
        security_opt: c.security_opt.clone(),
        ..RunRequest::default()
    }
}

/// Resolves and starts the run (or prints its plan); an image that is in
/// no store but names a registry is pulled first, as podman does.
fn start(
    ctx: &Context,
    req: &RunRequest,
    c: &ContainerArgs,
    started: Instant,
    dry_run: bool,
) -> Result<i32> {
    let config = ctx.config()?;
    let caller = Caller::current(started)?;
    let result = if dry_run {
        berth_engine::prepare(&config, req, &caller, true).map(|launch| {
            warn(launch.warnings());
            println!(
                "{}",
                serde_json::to_string_pretty(&launch).unwrap_or_default()
            );
            0
        })
    } else {
        berth_engine::start(&config, req, &caller, |launch| warn(launch.warnings()))
    };
    match result {
        Err(berth_engine::Error::NotInStore {
            image,
            pullable: Some(reference),
        }) => {
            eprintln!("berth: {image} is not in the store; pulling {reference}");
            let store = ctx.store(&config)?;
            let platform = berth_image::platform::Platform::host();
            let tls = c.tls.tls_verify;
            super::pull::pull_into(&config, &store, &reference, &platform, tls, None, false)
                .map_err(|e| {
                    anyhow!(
                        "image {image:?} is not in the store, and pulling it as {reference} failed: {}",
                        crate::exit::message(&e)
                    )
                })?;
            // The pull started threads; the run path forks and enters
            // namespaces, which wants a single-threaded process: start over.
            Err(reexec())
        }
        other => Ok(other?),
    }
}

/// Prints warnings of the run's plan.
fn warn(warnings: &[String]) {
    for w in warnings {
        eprintln!("berth: warning: {w}");
    }
}

/// Replaces berth with itself, same arguments; returns only on failure.
fn reexec() -> anyhow::Error {
    use std::os::unix::process::CommandExt;
    match std::env::current_exe() {
        Ok(exe) => {
            let err = std::process::Command::new(exe)
                .args(std::env::args_os().skip(1))
                .exec();
            anyhow!("cannot restart berth after the pull: {err}")
        }
        Err(e) => anyhow!("cannot restart berth after the pull: {e}"),
    }
}

/// The command's exit code, or 125 with berth's message.
fn finish(result: Result<i32>) -> Result<ExitCode> {
    match result {
        Ok(code) => Ok(ExitCode::from(code.clamp(0, 255) as u8)),
        Err(e) => {
            eprintln!("berth: error: {}", crate::exit::message(&e));
            Ok(ExitCode::from(crate::exit::Exit::Berth as u8))
        }
    }
}
