//! `berth modules`: the site's modules and CDI devices.

use std::process::ExitCode;

use anyhow::Result;
use berth_engine::inject::site;
use berth_inject::cdi;

use super::Context;
use crate::cli::ModulesArgs;

/// `berth modules`: the modules and CDI devices this node offers.
pub fn list(ctx: &Context, args: ModulesArgs) -> Result<ExitCode> {
    let config = ctx.config()?;
    let site = site(&config)?;
    let registry = cdi::Registry::load(&site.host.cdi_spec_dirs);
    if args.format == "json" {
        let out = serde_json::json!({
            "modules": site.modules,
            "modules_dir": site.host.modules_dir,
            "cdi_spec_dirs": site.host.cdi_spec_dirs,
            "cdi_devices": registry.device_names(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    if site.modules.is_empty() {
        println!(
            "no modules (define them in {} or as [modules.NAME] in berth.toml)",
            site.host.modules_dir.display()
        );
    } else {
        println!("{:<20} {:<8} DESCRIPTION", "MODULE", "WHEN");
        for m in &site.modules {
            let when = serde_json::to_value(m.def.when)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            println!("{:<20} {:<8} {}", m.name, when, m.def.description);
        }
    }
    let devices = registry.device_names();
    if !devices.is_empty() {
        println!();
        println!("CDI devices (--device NAME; --gpus uses nvidia.com/gpu or amd.com/gpu):");
        for d in devices {
            println!("  {d}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
