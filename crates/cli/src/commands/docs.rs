//! `berth completion SHELL` and `berth man --dir DIR`: shell completions
//! and manual pages, generated from the command line's own definition
//! (clap_complete, clap_mangen), so they cannot drift from it.

use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::CommandFactory;

use crate::cli::{Cli, CompletionArgs, ManArgs};

/// Prints the completion script for the shell asked for.
pub fn completion(args: CompletionArgs) -> Result<ExitCode> {
    use clap_complete::Shell;
    let shell = match args.shell.as_str() {
        "zsh" => Shell::Zsh,
        "fish" => Shell::Fish,
        _ => Shell::Bash,
    };
    let mut cmd = Cli::command();
    // Into memory first: clap_complete panics on a write error (a closed
    // pipe), berth does not.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "berth", &mut script);
    use std::io::Write;
    match std::io::stdout().write_all(&script) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(ExitCode::SUCCESS),
    }
}

/// Writes `berth.1` and `berth-COMMAND.1` for every visible command.
pub fn man(args: ManArgs) -> Result<ExitCode> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    let cmd = Cli::command();
    let write = |name: &str, page: clap::Command| -> Result<()> {
        let path = args.dir.join(format!("{name}.1"));
        let mut out = Vec::new();
        clap_mangen::Man::new(page).render(&mut out)?;
        std::fs::write(&path, out).with_context(|| format!("cannot write {}", path.display()))
    };
    write("berth", cmd.clone())?;
    let mut n = 1;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("berth-{}", sub.get_name());
        write(&name, sub.clone().display_name(name.clone()))?;
        n += 1;
    }
    eprintln!("berth: wrote {n} manual pages into {}", args.dir.display());
    Ok(ExitCode::SUCCESS)
}
