//! `berth doctor`: the engine's checks, printed.

use std::process::ExitCode;

use anyhow::Result;
use berth_engine::doctor::{self, Status};

use super::Context;
use crate::cli::DoctorArgs;
use crate::exit::Exit;

/// `berth doctor`: every check; exit 17 (a host resource) where one fails.
pub fn run(ctx: &Context, args: DoctorArgs) -> Result<ExitCode> {
    let config = ctx.config().map_err(|e| format!("{e:#}"));
    let report = doctor::run(config.as_ref().map_err(Clone::clone));
    if args.format == "json" {
        let mut value = serde_json::to_value(&report)?;
        value["passed"] = report.passed().into();
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        println!(
            "berth {} on Linux {}, as {}{}",
            env!("CARGO_PKG_VERSION"),
            report.kernel,
            report.user,
            if report.root {
                ": real root, kernel mounts"
            } else {
                ""
            }
        );
        for c in &report.checks {
            println!("  {:<5} {:<28} {}", c.status.word(), c.name, c.detail);
            if let Some(fix) = &c.fix {
                println!("  {:<5} {:<28} fix: {fix}", "", "");
            }
        }
        let count = |s: Status| report.checks.iter().filter(|c| c.status == s).count();
        let (fails, warns) = (count(Status::Fail), count(Status::Warn));
        println!(
            "{}",
            match (fails, warns) {
                (0, 0) => "berth has everything it needs here".to_string(),
                (0, w) =>
                    format!("berth works here; {w} warning(s) above say what it does instead"),
                (f, _) => format!("{f} problem(s) above stop berth here"),
            }
        );
    }
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        Exit::HostResource.into()
    })
}
