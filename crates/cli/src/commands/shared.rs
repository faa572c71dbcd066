//! `berth exec` and `berth ps`: the node's shared containers.

use std::process::ExitCode;

use anyhow::Result;
use berth_runtime::container::Process;
use berth_runtime::shared;

use crate::cli::{ExecArgs, PsArgs};

/// `berth exec NAME CMD...`: the command runs with the container's
/// environment (its creating task's), `-e` on top, in its working
/// directory unless `-w` names another.
pub fn exec(args: ExecArgs) -> Result<ExitCode> {
    let Some(info) = shared::lookup(&args.name)? else {
        eprintln!(
            "berth: error: no shared container {} on this node (berth ps lists them; they go away with their last task)",
            args.name
        );
        return Ok(ExitCode::from(crate::exit::Exit::Berth.code()));
    };
    let mut env = info.env.clone();
    for e in &args.env {
        let (k, v) = match e.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => match std::env::var(e) {
                Ok(v) => (e.clone(), v),
                Err(_) => continue,
            },
        };
        env.retain(|(n, _)| *n != k);
        env.push((k, v));
    }
    let job = Process {
        argv: args.command,
        env,
        workdir: args.workdir.unwrap_or(info.workdir),
        argv0_fallback: false,
        create_workdir: true,
        seccomp: berth_runtime::seccomp::Seccomp::Default,
        root_emulation: if info.mode == berth_runtime::IdMode::FakeRoot {
            berth_runtime::seccomp::RootEmulation::Auto
        } else {
            berth_runtime::seccomp::RootEmulation::None
        },
        entrypoint_first: None,
    };
    match shared::exec(&args.name, &job) {
        Ok(code) => Ok(ExitCode::from(code.clamp(0, 255) as u8)),
        Err(e) => {
            eprintln!("berth: error: {e}");
            Ok(ExitCode::from(crate::exit::Exit::Berth.code()))
        }
    }
}

/// `berth ps`: key, image, holder pid, processes, age; with `-a` the
/// named containers follow.
pub fn ps(ctx: &super::Context, args: PsArgs) -> Result<ExitCode> {
    let list = shared::list()?;
    let json = args.format == "json";
    if args.quiet {
        for c in &list {
            println!("{}", c.info.key);
        }
    } else if json && args.all {
        let named = super::named::list(ctx)?;
        let both = serde_json::json!({ "live": list, "named": named });
        println!("{}", serde_json::to_string_pretty(&both)?);
        return Ok(ExitCode::SUCCESS);
    } else if json {
        println!("{}", serde_json::to_string_pretty(&list)?);
    } else {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        println!(
            "{:<24} {:<36} {:>8} {:>9} {:>8}",
            "NAME", "IMAGE", "PID", "PROCESSES", "AGE"
        );
        for c in &list {
            // An image given by id (the Slurm plugin pins ids): its short form.
            let image = match c.info.image.strip_prefix("sha256:") {
                Some(hex) => hex.get(..12).unwrap_or(hex),
                None => c.info.image.as_str(),
            };
            println!(
                "{:<24} {:<36} {:>8} {:>9} {:>7}s",
                c.info.key,
                image,
                c.info.pid,
                c.processes,
                now.saturating_sub(c.info.created)
            );
        }
    }
    if args.all {
        super::named::print(ctx, args.quiet)?;
    }
    Ok(ExitCode::SUCCESS)
}
