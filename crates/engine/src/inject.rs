//! Host resources for a run: the site's injection settings from the
//! configuration, what its modules add to every run and what this run
//! asks for (`--gpus`, `--device`, `--module`, `--mpi`, OCI hooks that
//! apply), as the runtime's binds, hooks and in-container check.

use std::path::Path;
use std::time::Duration;

use berth_config::Config;
use berth_inject::gpu::Capabilities;
use berth_inject::module::{self, Module};
use berth_inject::plan::MountKind;
use berth_inject::{HostPaths, Plan, Site};
use berth_runtime::hooks::Hook;
use berth_runtime::rootfs::Bind;
use berth_runtime::semantics::UserRequest;
use berth_runtime::Preflight;

use crate::error::{Error, Result};
use crate::request::RunRequest;

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
        let files = if config.files.is_empty() {
            "the configuration".to_string()
        } else {
            config
                .files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(" or ")
        };
        Error::HostConfig(format!("the [host] table of {files}: {e}"))
    })?;
    let mut inline: Vec<Module> = Vec::new();
    for (path, table) in &config.modules {
        inline.extend(module::from_table(table, path)?);
    }
    Ok(Site::load(host, inline)?)
}

/// `--annotation KEY=VALUE` values as pairs.
pub fn annotations(values: &[String]) -> Result<Vec<(String, String)>> {
    values
        .iter()
        .map(|a| {
            a.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| Error::Usage(format!("--annotation {a:?}: expected KEY=VALUE")))
        })
        .collect()
}

/// An environment, as ordered pairs.
type Env = [(String, String)];

/// What the site's modules add to every run, and what `req` adds for
/// `command` (the command's path, for hooks' `when`). `env`: the task's
/// environment and the image's ENV, where GPUs are asked for without
/// `--gpus` as enroot's hook reads them
/// ([`berth_inject::gpu::from_environment`]), and the parts of the driver
/// they come with ([`berth_inject::gpu::Asked::from_environment`]).
pub fn plans(
    config: &Config,
    req: &RunRequest,
    command: &str,
    annotations: &[(String, String)],
    env: (&Env, &Env),
) -> Result<(Plan, Plan)> {
    let site = site(config)?;
    // --gpus, else what NVIDIA_VISIBLE_DEVICES asks for where the node has
    // an NVIDIA GPU (elsewhere a CUDA image runs without one, as enroot's
    // hook lets it). The driver's parts: NVIDIA_DRIVER_CAPABILITIES, else
    // every part for --gpus and enroot's `utility` for the variable.
    let (gpus, unset) = match &req.gpus {
        Some(g) => (Some(g.clone()), Capabilities::ALL),
        None => (
            berth_inject::gpu::from_environment(env.0, env.1).filter(|_| site.has_nvidia()),
            Capabilities::ENROOT_DEFAULT,
        ),
    };
    let gpu_capabilities = berth_inject::gpu::Asked::from_environment(env.0, env.1, unset);
    let request = berth_inject::Request {
        gpus: gpus
            .as_deref()
            .map(berth_inject::gpu::Selection::parse)
            .transpose()?,
        gpu_capabilities,
        devices: req.devices.clone(),
        modules: req.modules.clone(),
        mpi: req.mpi,
        annotations: annotations.to_vec(),
        command: command.to_string(),
        has_bind_mounts: !req.volumes.is_empty(),
    };
    Ok((site.always()?, site.requested(&request)?))
}

/// The variables `-e` and `--env-file` name, with the values `container`
/// (the container's environment) gives them: where berth reads a variable
/// itself (the GPUs, the driver's parts), they win over the task's and
/// the image's, as in Docker.
pub fn set_by_user(user: &UserRequest, container: &Env) -> Vec<(String, String)> {
    let names: Vec<&str> = user
        .env
        .iter()
        .chain(&user.env_files)
        .map(|e| e.split_once('=').map_or(e.as_str(), |(k, _)| k))
        .collect();
    container
        .iter()
        .filter(|(k, _)| names.contains(&k.as_str()))
        .cloned()
        .collect()
}

/// A plan's binds as the runtime's.
pub fn binds(plan: &Plan) -> Vec<Bind> {
    plan.binds()
        .into_iter()
        .map(|m| Bind {
            device: m.kind == MountKind::Device,
            source: m.source,
            target: m.target,
            readonly: m.readonly,
            spec: m.origin,
            options: Default::default(),
        })
        .collect()
}

/// A plan's hooks as the runtime's.
pub fn hooks(plan: &Plan) -> Vec<Hook> {
    plan.hooks
        .iter()
        .map(|h| Hook {
            stage: h.stage.clone(),
            path: h.path.clone().into(),
            args: h.args.clone(),
            env: h.env.clone(),
            timeout: h
                .timeout
                .filter(|t| *t > 0)
                .map(|t| Duration::from_secs(t as u64)),
        })
        .collect()
}

/// The MPI bind model's ABI check, run inside the container, where the
/// image's libraries are.
pub fn preflight(plan: &Plan) -> Option<Preflight> {
    plan.mpi.clone().map(|check| {
        Preflight(std::sync::Arc::new(move || {
            berth_inject::mpi::check_image(&check, Path::new("/"))
        }))
    })
}
