//! Site modules: named sets of host binds, devices, libraries and
//! environment that a site defines once (`/etc/berth/modules.d/NAME.toml`
//! or `[modules.NAME]` in berth.toml) and runs get always, on request
//! (`--module NAME`), with `--gpus` or with `--mpi`.
//!
//! ```toml
//! # /etc/berth/modules.d/cxi.toml
//! description = "Slingshot: libfabric's cxi provider"
//! when = "always"
//! devices = ["/dev/cxi*"]
//! libraries = ["/usr/lib64/libfabric.so.1", "/usr/lib64/libcxi.so.1*"]
//! binds = ["/etc/libfabric.d", "/opt/cray/libfabric/lib64/*.so:/opt/fabric"]
//! library_dirs = ["/opt/cray/pe/lib64"]
//! [env.set]
//! FI_PROVIDER = "cxi"
//! [env.prepend]
//! PATH = "/opt/cray/pe/bin"
//! ```

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::InjectError;
use crate::host::HostPaths;
use crate::plan::{EnvOp, Library, Lookup, Mount, MountKind, Plan};

/// When a module applies.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum When {
    /// Every run.
    Always,
    /// Only with `--module NAME`.
    #[default]
    Request,
    /// With `--gpus`.
    Gpus,
    /// With `--mpi`.
    Mpi,
}

/// Environment edits of a module.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct EnvDef {
    /// Variables to set.
    pub set: BTreeMap<String, String>,
    /// Path lists to put a value in front of.
    pub prepend: BTreeMap<String, String>,
    /// Path lists to put a value at the end of.
    pub append: BTreeMap<String, String>,
}

/// A module as a site writes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ModuleDef {
    /// One line for `berth modules`.
    pub description: String,
    /// When it applies.
    pub when: When,
    /// `SRC[:DST][:ro|rw]` binds (read-only unless `rw`); SRC may be a
    /// glob, whose matches land in DST (a directory) or at their own path.
    pub binds: Vec<String>,
    /// Device nodes, `SRC[:DST]`, SRC a path or glob.
    pub devices: Vec<String>,
    /// Library files or globs, bound into the container's library directory
    /// under their own file name.
    pub libraries: Vec<String>,
    /// Directories bound at their own path and put on `LD_LIBRARY_PATH`.
    pub library_dirs: Vec<String>,
    /// Environment edits.
    pub env: EnvDef,
    /// The host MPI this module provides (`[mpi]`), for the bind model.
    pub mpi: Option<crate::mpi::inject::MpiDef>,
    /// OCI hook files (hooks.d JSON) run whenever the module applies.
    pub hooks: Vec<String>,
}

/// A module and where it was defined.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Module {
    /// Its name.
    pub name: String,
    /// The file that defines it.
    pub source: PathBuf,
    /// The definition.
    #[serde(flatten)]
    pub def: ModuleDef,
}

/// Module names: what a flag or a file name can carry.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !name.starts_with('.')
}

/// Reads every `NAME.toml` in `dir`, sorted by name; a missing directory
/// holds no modules.
pub fn load_dir(dir: &Path) -> Result<Vec<Module>, InjectError> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(InjectError::ModuleFile {
                path: dir.to_path_buf(),
                reason: e.to_string(),
            })
        }
    };
    let mut paths: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    paths.sort();
    paths.iter().map(|p| load_file(p)).collect()
}

/// Reads one module file; the module is named after the file.
pub fn load_file(path: &Path) -> Result<Module, InjectError> {
    let bad = |reason: String| InjectError::ModuleFile {
        path: path.to_path_buf(),
        reason,
    };
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .filter(|n| valid_name(n))
        .ok_or_else(|| bad("the file name is not a module name (letters, digits, - _ .)".into()))?
        .to_string();
    crate::host::check_owner_for_root(path).map_err(bad)?;
    let text = fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let def: ModuleDef = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
    Ok(Module {
        name,
        source: path.to_path_buf(),
        def,
    })
}

/// Modules defined inline in a config file's `[modules.NAME]` tables.
pub fn from_table(table: &toml::Table, source: &Path) -> Result<Vec<Module>, InjectError> {
    table
        .iter()
        .map(|(name, value)| {
            let bad = |reason: String| InjectError::ModuleFile {
                path: source.to_path_buf(),
                reason: format!("[modules.{name}]: {reason}"),
            };
            if !valid_name(name) {
                return Err(bad("not a module name (letters, digits, - _ .)".into()));
            }
            let def: ModuleDef = value.clone().try_into().map_err(|e| bad(format!("{e}")))?;
            Ok(Module {
                name: name.clone(),
                source: source.to_path_buf(),
                def,
            })
        })
        .collect()
}

/// `SRC[:DST][:ro|rw]`: source, target, read-only.
fn split_bind(spec: &str, default_ro: bool) -> Result<(String, Option<String>, bool), String> {
    let parts: Vec<&str> = spec.split(':').collect();
    let (src, dst, mode) = match parts.as_slice() {
        [s] => (*s, None, None),
        [s, m] if *m == "ro" || *m == "rw" => (*s, None, Some(*m)),
        [s, d] => (*s, Some(*d), None),
        [s, d, m] => (*s, Some(*d), Some(*m)),
        _ => return Err(format!("{spec:?}: expected SRC[:DST][:ro|rw]")),
    };
    let readonly = match mode {
        None => default_ro,
        Some("ro") => true,
        Some("rw") => false,
        Some(m) => return Err(format!("{spec:?}: unknown option {m:?} (ro or rw)")),
    };
    if !src.starts_with('/') || dst.is_some_and(|d| !d.starts_with('/')) {
        return Err(format!("{spec:?}: paths must be absolute"));
    }
    if src
        .split('/')
        .chain(dst.unwrap_or("").split('/'))
        .any(|c| c == "..")
    {
        return Err(format!("{spec:?}: paths must not contain `..`"));
    }
    Ok((src.to_string(), dst.map(str::to_string), readonly))
}

fn is_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// The host paths `src` names: its glob matches, or itself when it exists.
fn expand(src: &str) -> Result<Vec<PathBuf>, String> {
    if is_glob(src) {
        let matches = glob::glob(src).map_err(|e| format!("{src:?}: bad pattern: {e}"))?;
        Ok(matches.flatten().collect())
    } else if fs::symlink_metadata(src).is_ok() {
        Ok(vec![PathBuf::from(src)])
    } else {
        Ok(Vec::new())
    }
}

/// Where a match of `src` lands: DST/NAME for globs with a DST, DST for a
/// plain path with one, else its own path.
fn target_of(src: &str, dst: &Option<String>, path: &Path) -> String {
    match dst {
        Some(d) if is_glob(src) => format!(
            "{}/{}",
            d.trim_end_matches('/'),
            path.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default()
        ),
        Some(d) => d.clone(),
        None => path.to_string_lossy().into_owned(),
    }
}

impl Module {
    /// Adds the module's resources to `plan`. A plain path that does not
    /// exist is an error when the module was asked for (`required`) and a
    /// warning for modules that apply to every run; a glob without matches
    /// is a warning.
    pub fn apply(
        &self,
        plan: &mut Plan,
        host: &HostPaths,
        required: bool,
    ) -> Result<(), InjectError> {
        let origin = format!("module:{}", self.name);
        let entry_err = |reason: String| InjectError::ModuleEntry {
            module: self.name.clone(),
            reason,
        };
        let missing = |plan: &mut Plan, what: &'static str, src: &str| {
            if required && !is_glob(src) {
                return Err(InjectError::ModulePath {
                    module: self.name.clone(),
                    what,
                    path: src.to_string(),
                });
            }
            plan.warnings.push(format!(
                "{origin}: {what} {src} {}; skipped",
                if is_glob(src) {
                    "matches nothing on this node"
                } else {
                    "does not exist on this node"
                }
            ));
            Ok(())
        };
        for spec in &self.def.binds {
            let (src, dst, readonly) = split_bind(spec, true).map_err(entry_err)?;
            let paths = expand(&src).map_err(entry_err)?;
            if paths.is_empty() {
                missing(plan, "bind", &src)?;
            }
            for p in paths {
                let Some(kind) = MountKind::of(&p) else {
                    continue;
                };
                plan.mount(Mount {
                    target: target_of(&src, &dst, &p),
                    source: p,
                    kind,
                    readonly,
                    origin: origin.clone(),
                });
            }
        }
        for spec in &self.def.devices {
            let (src, dst, _) = split_bind(spec, false).map_err(entry_err)?;
            let paths = expand(&src).map_err(entry_err)?;
            if paths.is_empty() {
                missing(plan, "device", &src)?;
            }
            for p in paths {
                if MountKind::of(&p) != Some(MountKind::Device) {
                    return Err(InjectError::DeviceNode {
                        origin: origin.clone(),
                        path: p,
                        reason: "not a character or block device".into(),
                    });
                }
                plan.mount(Mount {
                    target: target_of(&src, &dst, &p),
                    source: p,
                    kind: MountKind::Device,
                    readonly: false,
                    origin: origin.clone(),
                });
            }
        }
        for src in &self.def.libraries {
            if !src.starts_with('/') {
                return Err(entry_err(format!(
                    "library {src:?}: the path must be absolute"
                )));
            }
            let paths = expand(src).map_err(entry_err)?;
            if paths.is_empty() {
                missing(plan, "library", src)?;
            }
            for p in paths {
                let Ok(real) = fs::canonicalize(&p) else {
                    continue;
                };
                if !real.is_file() {
                    continue;
                }
                plan.library(Library {
                    name: p
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    source: real,
                    origin: origin.clone(),
                    lookup: Lookup::Path,
                });
            }
        }
        for dir in &self.def.library_dirs {
            let (src, _, _) = split_bind(dir, true).map_err(entry_err)?;
            if !Path::new(&src).is_dir() {
                missing(plan, "library directory", &src)?;
                continue;
            }
            plan.mount(Mount {
                source: PathBuf::from(&src),
                target: src.clone(),
                kind: MountKind::Dir,
                readonly: true,
                origin: origin.clone(),
            });
            if !plan.library_dirs.contains(&src) {
                plan.library_dirs.push(src);
            }
        }
        for h in &self.def.hooks {
            let file = crate::hooks::read(Path::new(h))?;
            plan.hooks.extend(file.calls(&origin));
        }
        if let Some(mpi) = &self.def.mpi {
            plan.mpi = Some(crate::mpi::inject::inject_host_mpi(
                &self.name, mpi, host, plan,
            )?);
        }
        for (op, map) in [
            (EnvOp::Set, &self.def.env.set),
            (EnvOp::Prepend, &self.def.env.prepend),
            (EnvOp::Append, &self.def.env.append),
        ] {
            for (k, v) in map {
                plan.env(k, v, op, &origin);
            }
        }
        plan.applied.push(origin);
        Ok(())
    }
}

/// Every module a host defines: those of `modules_dir`, then inline ones
/// (an inline module replaces a file's of the same name).
pub fn all(host: &HostPaths, inline: Vec<Module>) -> Result<Vec<Module>, InjectError> {
    let mut modules = load_dir(&host.modules_dir)?;
    for m in inline {
        modules.retain(|old| old.name != m.name);
        modules.push(m);
    }
    Ok(modules)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("berth-module-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn bind_specs_parse() {
        assert_eq!(split_bind("/a", true).unwrap(), ("/a".into(), None, true));
        assert_eq!(
            split_bind("/a:rw", true).unwrap(),
            ("/a".into(), None, false)
        );
        assert_eq!(
            split_bind("/a/*.so:/b:ro", false).unwrap(),
            ("/a/*.so".into(), Some("/b".into()), true)
        );
        assert!(split_bind("a:/b", true).is_err());
        assert!(split_bind("/a/../etc:/b", true).is_err());
        assert!(split_bind("/a:/b:rx", true).is_err());
    }

    #[test]
    fn module_files_load_and_apply() {
        let d = tmp("apply");
        let lib = d.join("lib");
        fs::create_dir_all(&lib).unwrap();
        fs::write(lib.join("libfabric.so.1.20.0"), b"elf").unwrap();
        std::os::unix::fs::symlink("libfabric.so.1.20.0", lib.join("libfabric.so.1")).unwrap();
        fs::write(lib.join("libcxi.so.1"), b"elf").unwrap();
        let mods = d.join("modules.d");
        fs::create_dir_all(&mods).unwrap();
        fs::write(
            mods.join("fabric.toml"),
            format!(
                r#"description = "test fabric"
when = "always"
libraries = ["{l}/libfabric.so.1", "{l}/libcxi*"]
binds = ["{l}:/opt/fabric", "{l}/*.so.1:/opt/sonames:rw", "{d}/nothing-*"]
library_dirs = ["{l}"]
[env.set]
FI_PROVIDER = "cxi"
"#,
                l = lib.display(),
                d = d.display()
            ),
        )
        .unwrap();
        let host = HostPaths {
            modules_dir: mods.clone(),
            ..HostPaths::default()
        };
        let all = all(&host, Vec::new()).unwrap();
        assert_eq!(all.len(), 1);
        let m = &all[0];
        assert_eq!((m.name.as_str(), m.def.when), ("fabric", When::Always));
        let mut plan = Plan::default();
        m.apply(&mut plan, &host, false).unwrap();
        let names: Vec<&str> = plan.libraries.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["libfabric.so.1", "libcxi.so.1"]);
        assert_eq!(plan.libraries[0].source, lib.join("libfabric.so.1.20.0"));
        let targets: Vec<(&str, bool)> = plan
            .mounts
            .iter()
            .map(|m| (m.target.as_str(), m.readonly))
            .collect();
        assert!(targets.contains(&("/opt/fabric", true)));
        assert!(targets.contains(&("/opt/sonames/libfabric.so.1", false)));
        assert!(targets.contains(&("/opt/sonames/libcxi.so.1", false)));
        assert_eq!(plan.warnings.len(), 1, "{:?}", plan.warnings);
        assert_eq!(plan.library_dirs, [lib.to_string_lossy().into_owned()]);
        assert_eq!(plan.applied, ["module:fabric"]);

        // Asked for by name, a missing plain path is an error.
        let broken = Module {
            name: "broken".into(),
            source: PathBuf::from("x"),
            def: ModuleDef {
                libraries: vec![format!("{}/libmissing.so.1", lib.display())],
                ..ModuleDef::default()
            },
        };
        let host = HostPaths::default();
        let err = broken.apply(&mut Plan::default(), &host, true).unwrap_err();
        assert!(
            err.to_string().contains("libmissing.so.1 does not exist"),
            "{err}"
        );
        assert!(broken.apply(&mut Plan::default(), &host, false).is_ok());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn bad_module_files_are_named() {
        let d = tmp("bad");
        fs::write(d.join("x.toml"), "when = \"sometimes\"\n").unwrap();
        let err = load_dir(&d).unwrap_err().to_string();
        assert!(err.contains("x.toml") && err.contains("sometimes"), "{err}");
        fs::write(d.join("x.toml"), "colour = 1\n").unwrap();
        let err = load_dir(&d).unwrap_err().to_string();
        assert!(err.contains("colour"), "{err}");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn inline_modules_parse() {
        let t: toml::Table =
            toml::from_str("[gpu-extra]\nwhen = \"gpus\"\n[gpu-extra.env.set]\nX = \"1\"\n")
                .unwrap();
        let m = from_table(&t, Path::new("/etc/berth/berth.toml")).unwrap();
        assert_eq!(m[0].name, "gpu-extra");
        assert_eq!(m[0].def.when, When::Gpus);
    }
}
