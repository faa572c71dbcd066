//! commands.md: every visible command, its usage, arguments and options,
//! from the clap definition `--help` and the manual pages also come from.

use std::fmt::Write as _;

use clap::{Arg, ArgAction, Command, CommandFactory};

use super::{generated_from, one_paragraph};
use crate::cli::Cli;

/// The page.
pub fn page() -> String {
    // clap's own `help` subcommand is not one of berth's commands.
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut out = String::from("# Commands\n\n");
    out += &generated_from("the command line's definition (`crates/cli/src/cli.rs`)");
    out += "\nThe same text as `berth COMMAND --help` and `man berth-COMMAND`. \
            Exit codes: [Exit codes](exit-codes.md).\n\n";
    out += "## Options of every command\n\n";
    for arg in cmd.get_arguments().filter(|a| shown(a)) {
        out += &arg_line(arg);
    }
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        command_section(sub, &mut out);
    }
    out
}

/// A command's section, and its own subcommands' after it.
fn command_section(cmd: &Command, out: &mut String) {
    let name = cmd.get_bin_name().unwrap_or(cmd.get_name());
    let _ = write!(out, "\n## `{name}`\n\n");
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        let _ = writeln!(out, "{}\n", one_paragraph(&about.to_string()));
    }
    let usage = cmd.clone().render_usage().to_string();
    let _ = writeln!(out, "```text\n{}\n```", usage.trim());
    let args: Vec<&Arg> = cmd
        .get_arguments()
        .filter(|a| shown(a) && !a.is_global_set())
        .collect();
    let (positional, options): (Vec<&Arg>, Vec<&Arg>) =
        args.into_iter().partition(|a| a.is_positional());
    for (title, list) in [("Arguments", positional), ("Options", options)] {
        if list.is_empty() {
            continue;
        }
        let _ = write!(out, "\n{title}:\n\n");
        for arg in list {
            *out += &arg_line(arg);
        }
    }
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        command_section(sub, out);
    }
}

/// Whether the reference lists `arg`: not hidden, not clap's own help and
/// version flags.
fn shown(arg: &Arg) -> bool {
    !arg.is_hide_set()
        && !matches!(
            arg.get_action(),
            ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong | ArgAction::Version
        )
}

/// One bullet: the spelling, the help, then its default, values and
/// variable.
fn arg_line(arg: &Arg) -> String {
    let mut line = format!("- `{}`", spelling(arg));
    let help = arg.get_long_help().or(arg.get_help());
    if let Some(help) = help {
        let _ = write!(line, ": {}", one_paragraph(&help.to_string()));
    }
    let mut notes = Vec::new();
    if takes_values(arg) {
        let values: Vec<String> = arg
            .get_possible_values()
            .iter()
            .filter(|v| !v.is_hide_set())
            .map(|v| format!("`{}`", v.get_name()))
            .collect();
        if !values.is_empty() {
            notes.push(format!("one of {}", values.join(", ")));
        }
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| format!("`{}`", v.to_string_lossy()))
            .collect();
        if !defaults.is_empty() {
            notes.push(format!("default {}", defaults.join(" ")));
        }
    }
    if let Some(env) = arg.get_env() {
        notes.push(format!("environment `{}`", env.to_string_lossy()));
    }
    if !notes.is_empty() {
        let _ = write!(line, " ({})", notes.join("; "));
    }
    line.push('\n');
    line
}

/// Whether `arg` may be given a value (also `--tls-verify[=BOOL]`, a
/// flag with an optional one).
fn takes_values(arg: &Arg) -> bool {
    arg.get_num_args().is_some_and(|r| r.takes_values())
}

/// `-e, --env <NAME[=VALUE]>` or `<IMAGE>` as --help writes it.
fn spelling(arg: &Arg) -> String {
    let value = || {
        let names: Vec<String> = match arg.get_value_names() {
            Some(names) => names.iter().map(|n| n.to_string()).collect(),
            None => vec![arg.get_id().as_str().to_uppercase()],
        };
        let mut text = names
            .iter()
            .map(|n| format!("<{n}>"))
            .collect::<Vec<_>>()
            .join(" ");
        let range = arg.get_num_args();
        if range.is_some_and(|r| r.max_values() > 1 && names.len() == 1) {
            text.push_str("...");
        }
        if range.is_some_and(|r| r.min_values() == 0) && !arg.is_positional() {
            text = format!("[{text}]");
        }
        text
    };
    if arg.is_positional() {
        return value();
    }
    let mut forms = Vec::new();
    if let Some(short) = arg.get_short() {
        forms.push(format!("-{short}"));
    }
    if let Some(long) = arg.get_long() {
        forms.push(format!("--{long}"));
    }
    for alias in arg.get_visible_aliases().into_iter().flatten() {
        forms.push(format!("--{alias}"));
    }
    let mut text = forms.join(", ");
    if takes_values(arg) {
        text.push(' ');
        text.push_str(&value());
    }
    text
}
