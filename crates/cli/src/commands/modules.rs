//! `berth modules`, and the site's injection settings for `berth run`.

use std::process::ExitCode;

use anyhow::{anyhow, Result};
use berth_config::Config;
use berth_inject::module::{self, Module};
use berth_inject::{cdi, HostPaths, InjectError, Site};

use super::Context;
use crate::cli::ModulesArgs;

/// Exit code when host resources cannot be injected.
const EXIT_HOST_RESOURCE: u8 = 17;
/// Exit code for a broken module file (a configuration error).
const EXIT_CONFIG: u8 = 3;

/// The exit code for an injection error.
pub fn exit_code(e: &InjectError) -> u8 {
    match e {
        InjectError::ModuleFile { .. } => EXIT_CONFIG,
        _ => EXIT_HOST_RESOURCE,
    }
}

/// The host's injection settings: `[host]` of the config files (the module
/// directory defaults to `modules.d` next to the system config file) and
/// every module.
pub fn site(config: &Config) -> Result<Site> {
    let mut table = config.host.clone();
    if !table.contains_key("modules_dir") {
        if let Some(dir) = config.system_config.parent() {
            table.insert(
                "modules_dir".into(),
                toml::Value::String(dir.join("modules.d").to_string_lossy().into_owned()),
            );
        }
    }
    let host: HostPaths = toml::Value::Table(table).try_into().map_err(|e| {
        anyhow!(
            "the [host] table of {}: {e}",
            if config.files.is_empty() {
                "the configuration".to_string()
            } else {
                config
                    .files
                    .iter()
                    .map(|f| f.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" or ")
            }
        )
    })?;
    let mut inline: Vec<Module> = Vec::new();
    for (path, table) in &config.modules {
        inline.extend(module::from_table(table, path)?);
    }
    Ok(Site::load(host, inline)?)
}

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
