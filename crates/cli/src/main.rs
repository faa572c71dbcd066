//! `berth`: a rootless container engine for HPC. This binary only parses the
//! command line and hands off to the library crates.

#![forbid(unsafe_code)]

mod cli;
mod commands;
mod exit;
mod progress;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // The image keeper, started by `berth run`: not a user command.
    let raw: Vec<String> = std::env::args().collect();
    if raw.get(1).map(String::as_str) == Some("__keeper") {
        let code = berth_runtime::keeper_main(&raw[2..]);
        return ExitCode::from(code.clamp(0, 255) as u8);
    }
    // The build worker, started by `berth build` (in a user namespace).
    if raw.get(1).map(String::as_str) == Some("__build-worker") {
        let code = berth_build::worker::main(&raw[2..]);
        return ExitCode::from(code.clamp(0, 255) as u8);
    }
    // The save worker, started by `berth run --save` (in a user namespace).
    if raw.get(1).map(String::as_str) == Some("__save") {
        let code = berth_build::save::main(&raw[2..]);
        return ExitCode::from(code.clamp(0, 255) as u8);
    }
    // The squashfs server, started by a keeper or a build worker.
    if raw.get(1).map(String::as_str) == Some("__squashfs") {
        let code = berth_squashfs::serve_main(&raw[2..]);
        return ExitCode::from(code.clamp(0, 255) as u8);
    }
    // `berth rm`'s helper for files of subordinate ids.
    if raw.get(1).map(String::as_str) == Some("__rm-tree") {
        let code = berth_engine::named::remove_tree_main(&raw[2..]);
        return ExitCode::from(code.clamp(0, 255) as u8);
    }
    // A shared container's holder, started by `berth run --shared`.
    if raw.get(1).map(String::as_str) == Some("__holder") {
        let code = berth_runtime::shared::anchor_main(&raw[2..]);
        return ExitCode::from(code.clamp(0, 255) as u8);
    }
    // As real root, nothing of the caller's environment chooses config,
    // state or programs (sudo -E, su without -). (berth's helpers above
    // inherit the environment of the berth that started them.)
    if berth_config::root::is_real_root() {
        let home = berth_runtime::sys::getpwuid(0).map(|p| std::path::PathBuf::from(p.home));
        for w in berth_config::root::scrub_environment(home.as_deref()) {
            eprintln!("berth: warning: {w}");
        }
    }
    let cli = cli::Cli::parse();
    init_logging(&cli.global, cli.command.is_quiet());
    match commands::run(cli) {
        Ok(code) => code,
        Err(e) => {
            let (code, msg) = exit::describe(&e);
            eprintln!("berth: error: {msg}");
            code.into()
        }
    }
}

fn init_logging(global: &cli::Global, cli_quiet: bool) {
    use tracing_subscriber::filter::LevelFilter;
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .without_time();
    match global.log_level.as_deref() {
        // A filter expression costs a parse at every start: only when asked.
        Some(spec) => {
            let filter = tracing_subscriber::EnvFilter::try_new(spec)
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
            builder.with_env_filter(filter).init();
        }
        None => {
            let level = if cli_quiet {
                LevelFilter::ERROR
            } else {
                LevelFilter::WARN
            };
            builder.with_max_level(level).init();
        }
    }
}
