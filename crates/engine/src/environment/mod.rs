//! Environment definition files (EDF): CSCS's Container Engine format, a
//! TOML file that names an image and how to run it, used as
//! `berth run --environment NAME|PATH` and `srun --environment=NAME`.
//!
//! - [`search`]: where a name is found (a path, `EDF_PATH`, `~/.edf`, the
//!   site's directory) and what `berth environments` lists.
//! - [`parse`]: one file's fields, `${VAR}` expanded from the caller's
//!   environment, errors naming the file and line.
//!
//! [`load`] follows `base_environment` (up to 10 levels): fields of later
//! files replace earlier ones, `mounts`, `env`, `devices` and
//! `annotations` append. [`Environment::apply`] lays the result under a
//! run request: the command line adds to or overrides the file.

use std::path::{Path, PathBuf};

use berth_config::Config;

use crate::caller::Caller;
use crate::error::{Error, Result};
use crate::request::RunRequest;

mod parse;
pub mod search;

pub use search::{Listed, SearchPath};

/// The deepest chain of `base_environment` followed.
pub const MAX_DEPTH: usize = 10;

/// An environment with its bases applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environment {
    /// The files read, bases first.
    pub files: Vec<PathBuf>,
    /// `image`: a reference or an image file's path.
    pub image: Option<String>,
    /// `mounts`: `SOURCE:DEST[:FLAGS]`, flags `+`-joined.
    pub mounts: Vec<String>,
    /// `workdir`.
    pub workdir: Option<String>,
    /// `writable`.
    pub writable: Option<bool>,
    /// `entrypoint`: `false` runs the command without the image's
    /// ENTRYPOINT.
    pub entrypoint: Option<bool>,
    /// `[env]` in order; `None` unsets the variable (an empty string).
    pub env: Vec<(String, Option<String>)>,
    /// `[annotations]`, dotted keys joined.
    pub annotations: Vec<(String, String)>,
    /// `devices`: CDI names.
    pub devices: Vec<String>,
}

/// The site's directory of environment files: `environments/` next to
/// the system configuration file (`/etc/berth/environments`).
pub fn site_dir(config: &Config) -> Option<PathBuf> {
    config
        .system_config
        .parent()
        .map(|d| d.join("environments"))
}

/// The caller's search path: `EDF_PATH` or `~/.edf`, then the site's.
pub fn search_path(config: &Config, caller: &Caller) -> SearchPath {
    let var = |k: &str| caller.var(k).map(str::to_string);
    SearchPath::new(&var, site_dir(config).as_deref())
}

/// `--environment NAME|PATH`: loads it for `caller` and lays it under
/// `req`; the environment, for messages.
pub fn apply_named(
    config: &Config,
    name: &str,
    caller: &Caller,
    req: &mut RunRequest,
) -> Result<Environment> {
    let var = |k: &str| caller.var(k).map(str::to_string);
    let env = load(name, &search_path(config, caller), &var)?;
    let wants_modules = env
        .annotations
        .iter()
        .any(|(k, v)| k.starts_with("com.hooks.") && k.ends_with(".enabled") && v == "true");
    let modules: Vec<String> = if wants_modules {
        crate::inject::site(config)?
            .modules
            .into_iter()
            .map(|m| m.name)
            .collect()
    } else {
        Vec::new()
    };
    env.apply(req, &modules)?;
    Ok(env)
}

/// Loads the environment `name` (a path or a name on `search`), with its
/// bases; `var` reads the caller's environment.
pub fn load(
    name: &str,
    search: &SearchPath,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Environment> {
    let mut env = Environment::default();
    let path = search.find(name)?;
    load_into(&mut env, &path, search, var, &mut Vec::new())?;
    Ok(env)
}

/// Applies `path` (its bases first) onto `env`; `chain` holds the files
/// being read, for loops and depth.
fn load_into(
    env: &mut Environment,
    path: &Path,
    search: &SearchPath,
    var: &dyn Fn(&str) -> Option<String>,
    chain: &mut Vec<PathBuf>,
) -> Result<()> {
    if chain.iter().any(|p| p == path) {
        return Err(Error::Environment(format!(
            "{}: base_environment loops back to it ({})",
            path.display(),
            chain
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(" -> ")
        )));
    }
    if chain.len() > MAX_DEPTH {
        return Err(Error::Environment(format!(
            "{}: base_environment goes deeper than {MAX_DEPTH} levels",
            path.display()
        )));
    }
    let file = parse::read(path, var)?;
    chain.push(path.to_path_buf());
    for base in &file.bases {
        let base_path = search.find(base).map_err(|e| {
            Error::Environment(format!(
                "{}: base_environment {base:?}: {e}",
                path.display()
            ))
        })?;
        load_into(env, &base_path, search, var, chain)?;
    }
    chain.pop();
    env.files.push(path.to_path_buf());
    let f = file.fields;
    if f.image.is_some() {
        env.image = f.image;
    }
    if f.workdir.is_some() {
        env.workdir = f.workdir;
    }
    if f.writable.is_some() {
        env.writable = f.writable;
    }
    if f.entrypoint.is_some() {
        env.entrypoint = f.entrypoint;
    }
    env.mounts.extend(f.mounts);
    env.devices.extend(f.devices);
    for (k, v) in f.env {
        env.env.retain(|(n, _)| *n != k);
        env.env.push((k, v));
    }
    for (k, v) in f.annotations {
        env.annotations.retain(|(n, _)| *n != k);
        env.annotations.push((k, v));
    }
    Ok(())
}

/// The annotation that shows the entrypoint's output (the Container
/// Engine's Pyxis).
pub const ENTRYPOINT_LOG: &str = "com.pyxis.entrypoint_log";

impl Environment {
    /// Lays the environment under `req`: the request's own options add
    /// to the file's (mounts, `-e`, devices, annotations) or override it
    /// (image, `-w`, `--entrypoint`, `--writable`). `modules` are the
    /// site's module names: an annotation `com.hooks.NAME.enabled = "true"`
    /// also applies the module NAME where there is one.
    pub fn apply(&self, req: &mut RunRequest, modules: &[String]) -> Result<()> {
        if req.image.is_empty() {
            req.image = self.image.clone().ok_or_else(|| {
                Error::Environment(format!(
                    "{}: no image: give the file an image = \"REF\" (or a squashfs file's path), or the run --image REF",
                    self.last_file()
                ))
            })?;
        }
        // `:sqsh` mounts are squashfs data mounts, as berth's `-v` takes them.
        let mut volumes = self.mounts.clone();
        volumes.append(&mut req.volumes);
        req.volumes = volumes;
        if req.workdir.is_none() {
            match &self.workdir {
                Some(w) => req.workdir = Some(w.clone()),
                // The image's working directory, as the Container Engine.
                None => req.workdir_image = true,
            }
        }
        req.writable |= self.writable.unwrap_or(false);
        if req.entrypoint.is_none() && self.entrypoint == Some(false) {
            req.entrypoint = Some(String::new());
        } else if req.entrypoint.is_none() {
            // As the Container Engine's Pyxis runs it: on its own before
            // the command, its output hidden unless the file asks for it.
            req.entrypoint_first = true;
            req.entrypoint_log |= self
                .annotations
                .iter()
                .any(|(k, v)| k == ENTRYPOINT_LOG && v == "true");
        }
        // The file's [env] over the image's, the image's over the caller's.
        req.env_below_image = true;
        let mut env: Vec<String> = Vec::new();
        for (k, v) in &self.env {
            match v {
                Some(v) => env.push(format!("{k}={v}")),
                None => req.unset_env.push(k.clone()),
            }
        }
        env.append(&mut req.env);
        req.env = env;
        let mut devices = self.devices.clone();
        devices.append(&mut req.devices);
        req.devices = devices;
        let mut annotations: Vec<String> = self
            .annotations
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        annotations.append(&mut req.annotations);
        req.annotations = annotations;
        for (k, v) in &self.annotations {
            let module = k
                .strip_prefix("com.hooks.")
                .and_then(|r| r.strip_suffix(".enabled"));
            if let Some(m) = module {
                if v == "true"
                    && modules.iter().any(|n| n == m)
                    && !req.modules.iter().any(|n| n == m)
                {
                    req.modules.push(m.to_string());
                }
            }
        }
        Ok(())
    }

    /// The file the environment was asked as (the last read).
    pub fn last_file(&self) -> String {
        self.files
            .last()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests;
