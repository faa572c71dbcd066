//! One module per command: each turns its arguments into the library's
//! options and makes one library call.

mod build;
mod docs;
mod doctor;
mod environments;
mod images;
mod import;
mod login;
mod modules;
mod named;
mod pull;
mod push;
mod reference;
mod run;
mod shared;

use std::process::ExitCode;

use anyhow::Result;
use berth_config::{Config, Env};
use berth_image::store::Store;

use crate::cli::{Cli, Command};

/// Runs the parsed command line.
pub fn run(cli: Cli) -> Result<ExitCode> {
    let ctx = Context {
        cli_store: cli.global.store.clone(),
    };
    match cli.command {
        Command::Run(a) => run::run(&ctx, a),
        Command::Shell(a) => run::shell(&ctx, a),
        Command::Pull(a) => pull::run(&ctx, a),
        Command::Import(a) => import::run(&ctx, a),
        Command::Images(a) => images::list(&ctx, a),
        Command::Inspect(a) => images::inspect(&ctx, a),
        Command::Rmi(a) => images::remove(&ctx, a),
        Command::Prune => images::prune(&ctx),
        Command::Check => images::check(&ctx),
        Command::Login(a) => login::login(&ctx, a),
        Command::Logout(a) => login::logout(a),
        Command::Modules(a) => modules::list(&ctx, a),
        Command::Environments(a) => environments::list(&ctx, a),
        Command::Doctor(a) => doctor::run(&ctx, a),
        Command::Exec(a) => shared::exec(a),
        Command::Ps(a) => shared::ps(&ctx, a),
        Command::Rm(a) => named::rm(&ctx, a),
        Command::Commit(a) => named::commit(&ctx, a),
        Command::Build(a) => build::build(&ctx, a),
        Command::Tag(a) => build::tag(&ctx, a),
        Command::Save(a) => build::save(&ctx, a),
        Command::Push(a) => push::push(&ctx, a),
        Command::Completion(a) => docs::completion(a),
        Command::Man(a) => docs::man(a),
        Command::Reference(a) => reference::write(a),
    }
}

/// What every command may need, resolved lazily.
pub struct Context {
    cli_store: Option<std::path::PathBuf>,
}

impl Context {
    /// The resolved configuration.
    pub fn config(&self) -> Result<Config> {
        Ok(Config::resolve(
            self.cli_store.as_deref(),
            &Env::from_process(),
        )?)
    }

    /// The store named by the configuration.
    pub fn store(&self, config: &Config) -> Result<Store> {
        Ok(Store::open(&config.store, &config.shared_stores)?)
    }
}

/// Number of compressor threads for the squashfs writer.
pub fn jobs() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}
