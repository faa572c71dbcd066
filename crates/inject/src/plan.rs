//! What a run gets from the host: mounts (files, directories, device
//! nodes), libraries for the loader, environment edits. Built by modules,
//! CDI specs and GPU discovery; applied by the runtime; printed by
//! `berth run --dry-run`.

use std::fs;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::mpi::abi::MpiCheck;

pub use crate::paths::{BIN_DIR, LIB_DIR};

/// What a mount's source is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MountKind {
    /// A regular file (or a symlink to one).
    File,
    /// A directory.
    Dir,
    /// A character or block device node, bound from the host (a rootless
    /// process cannot mknod).
    Device,
}

impl MountKind {
    /// What the host path `path` is, following symlinks; `None` when it
    /// does not exist.
    pub fn of(path: &Path) -> Option<MountKind> {
        let ft = fs::metadata(path).ok()?.file_type();
        if ft.is_dir() {
            Some(MountKind::Dir)
        } else if ft.is_char_device() || ft.is_block_device() {
            Some(MountKind::Device)
        } else {
            Some(MountKind::File)
        }
    }
}

/// One bind mount into the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mount {
    /// Host path.
    pub source: PathBuf,
    /// Path inside the container.
    pub target: String,
    /// What the source is.
    pub kind: MountKind,
    /// Read-only inside.
    pub readonly: bool,
    /// Who asked for it (a module, a CDI device, GPU discovery).
    pub origin: String,
}

/// How an environment edit combines with an existing value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EnvOp {
    /// Replace.
    Set,
    /// `VALUE:old`.
    Prepend,
    /// `old:VALUE`.
    Append,
}

/// One environment edit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EnvEdit {
    /// Variable.
    pub name: String,
    /// Value (a path list element for prepend and append).
    pub value: String,
    /// How it combines.
    pub op: EnvOp,
    /// Who asked for it.
    pub origin: String,
}

/// How the container's loader finds an injected library in [`LIB_DIR`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Lookup {
    /// On `LD_LIBRARY_PATH` (and in the loader cache): it must win over
    /// the image's library of the same name, even where a program's
    /// RUNPATH names the image's (the host MPI of the bind model, a
    /// module's fabric library, ROCm).
    Path,
    /// In the image's loader cache, as NVIDIA's container toolkit gives a
    /// GPU driver: `LD_LIBRARY_PATH` stays as the image and the task set
    /// it. On `LD_LIBRARY_PATH` only where the run has no such cache (a
    /// writable root, an image without `/etc/ld.so.cache`).
    Cache,
}

/// What the container's loader finds besides `LD_LIBRARY_PATH`, which
/// decides what goes there ([`Plan::apply_env`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Loader<'a> {
    /// The run's loader cache lists the injected libraries.
    pub in_cache: bool,
    /// A directory searched before [`LIB_DIR`] wherever that goes on
    /// `LD_LIBRARY_PATH` (the image's forward-compatible CUDA driver,
    /// which the cache names over the node's).
    pub before: Option<&'a str>,
}

/// One host library, bound into [`LIB_DIR`] under `name`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Library {
    /// File name inside [`LIB_DIR`] (the soname the loader looks for).
    pub name: String,
    /// The host file (symlinks resolved).
    pub source: PathBuf,
    /// Who asked for it.
    pub origin: String,
    /// How the loader finds it.
    pub lookup: Lookup,
}

/// A hook to run at an OCI stage (from a CDI spec).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HookCall {
    /// OCI stage: createRuntime, createContainer, startContainer,
    /// poststart, poststop.
    pub stage: String,
    /// Program.
    pub path: String,
    /// argv, with argv\[0\].
    pub args: Vec<String>,
    /// Environment, `NAME=VALUE`.
    pub env: Vec<String>,
    /// Seconds.
    pub timeout: Option<i64>,
    /// Who asked for it.
    pub origin: String,
}

/// Everything a run gets from the host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// What was applied, in order (`module:NAME`, `cdi:vendor/class=dev`,
    /// `gpu:nvidia`).
    pub applied: Vec<String>,
    /// Binds of files, directories and device nodes.
    pub mounts: Vec<Mount>,
    /// Libraries for [`LIB_DIR`].
    pub libraries: Vec<Library>,
    /// Host programs for [`BIN_DIR`].
    pub programs: Vec<Library>,
    /// Directories put on `LD_LIBRARY_PATH` after [`LIB_DIR`], at their
    /// own path (a module's `library_dirs`, bound as well).
    pub library_dirs: Vec<String>,
    /// Environment edits, in order.
    pub env: Vec<EnvEdit>,
    /// Hooks.
    pub hooks: Vec<HookCall>,
    /// The MPI bind model's check, when a module injects the host MPI.
    pub mpi: Option<MpiCheck>,
    /// Things that could not be applied and were skipped.
    pub warnings: Vec<String>,
}

impl Plan {
    /// Whether nothing is injected.
    pub fn is_empty(&self) -> bool {
        self.mounts.is_empty()
            && self.libraries.is_empty()
            && self.programs.is_empty()
            && self.env.is_empty()
    }

    /// Appends `other` (applied after `self`).
    pub fn extend(&mut self, other: Plan) {
        self.applied.extend(other.applied);
        for m in other.mounts {
            self.mount(m);
        }
        for l in other.libraries {
            self.library(l);
        }
        for p in other.programs {
            self.program(p);
        }
        for d in other.library_dirs {
            if !self.library_dirs.contains(&d) {
                self.library_dirs.push(d);
            }
        }
        self.env.extend(other.env);
        self.hooks.extend(other.hooks);
        self.warnings.extend(other.warnings);
        if other.mpi.is_some() {
            self.mpi = other.mpi;
        }
    }

    /// Adds a mount; a later mount on the same target replaces the earlier.
    pub fn mount(&mut self, m: Mount) {
        self.mounts.retain(|old| old.target != m.target);
        self.mounts.push(m);
    }

    /// Adds a library; the first one of a name wins, and a different file
    /// under the same name is reported.
    pub fn library(&mut self, lib: Library) {
        Self::add_unique(&mut self.libraries, &mut self.warnings, lib, LIB_DIR);
    }

    /// Adds a host program (first of a name wins).
    pub fn program(&mut self, prog: Library) {
        Self::add_unique(&mut self.programs, &mut self.warnings, prog, BIN_DIR);
    }

    fn add_unique(list: &mut Vec<Library>, warnings: &mut Vec<String>, lib: Library, dir: &str) {
        if let Some(old) = list.iter().find(|l| l.name == lib.name) {
            if old.source != lib.source {
                warnings.push(format!(
                    "{}: {dir}/{} is already {} (from {}); {} not injected",
                    lib.origin,
                    lib.name,
                    old.source.display(),
                    old.origin,
                    lib.source.display()
                ));
            }
            return;
        }
        list.push(lib);
    }

    /// Adds an environment edit.
    pub fn env(&mut self, name: &str, value: &str, op: EnvOp, origin: &str) {
        self.env.push(EnvEdit {
            name: name.to_string(),
            value: value.to_string(),
            op,
            origin: origin.to_string(),
        });
    }

    /// Every bind the runtime makes: the mounts, then each library at
    /// `LIB_DIR/NAME`, each program at `BIN_DIR/NAME`, each library
    /// directory at its own path.
    pub fn binds(&self) -> Vec<Mount> {
        let mut out = self.mounts.clone();
        for (dir, list) in [(LIB_DIR, &self.libraries), (BIN_DIR, &self.programs)] {
            out.extend(list.iter().map(|l| Mount {
                source: l.source.clone(),
                target: format!("{dir}/{}", l.name),
                kind: MountKind::File,
                readonly: true,
                origin: l.origin.clone(),
            }));
        }
        out
    }

    /// Applies the environment edits to `env` (the container's final
    /// environment), then puts [`LIB_DIR`] and the library directories
    /// first on `LD_LIBRARY_PATH` and [`BIN_DIR`] first on `PATH` when
    /// anything landed there. [`LIB_DIR`] goes on `LD_LIBRARY_PATH` for
    /// a library of [`Lookup::Path`], and for one of [`Lookup::Cache`]
    /// unless the run's loader cache lists the libraries; `loader.before`
    /// goes before it.
    pub fn apply_env(&self, env: &mut Vec<(String, String)>, loader: Loader) {
        for e in &self.env {
            edit(env, &e.name, &e.value, e.op);
        }
        let mut lib_path: Vec<&str> = Vec::new();
        if self
            .libraries
            .iter()
            .any(|l| l.lookup == Lookup::Path || !loader.in_cache)
        {
            lib_path.extend(loader.before);
            lib_path.push(LIB_DIR);
        }
        lib_path.extend(self.library_dirs.iter().map(String::as_str));
        if !lib_path.is_empty() {
            edit(env, "LD_LIBRARY_PATH", &lib_path.join(":"), EnvOp::Prepend);
        }
        if !self.programs.is_empty() {
            edit(env, "PATH", BIN_DIR, EnvOp::Prepend);
        }
    }
}

/// One edit of a variable in an ordered environment.
fn edit(env: &mut Vec<(String, String)>, name: &str, value: &str, op: EnvOp) {
    let pos = env.iter().position(|(k, _)| k == name);
    let new = match (op, pos.map(|i| env[i].1.as_str())) {
        (EnvOp::Set, _) | (_, None) | (_, Some("")) => value.to_string(),
        (EnvOp::Prepend, Some(old)) => format!("{value}:{old}"),
        (EnvOp::Append, Some(old)) => format!("{old}:{value}"),
    };
    match pos {
        Some(i) => env[i].1 = new,
        None => env.push((name.to_string(), new)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lib(name: &str, src: &str) -> Library {
        Library {
            name: name.into(),
            source: src.into(),
            origin: "t".into(),
            lookup: Lookup::Path,
        }
    }

    #[test]
    fn env_edits_combine_in_order() {
        let mut env = vec![("PATH".to_string(), "/usr/bin".to_string())];
        let mut p = Plan::default();
        p.env("FI_PROVIDER", "cxi", EnvOp::Set, "m");
        p.env("PATH", "/opt/x/bin", EnvOp::Prepend, "m");
        p.env("PATH", "/opt/y/bin", EnvOp::Append, "m");
        p.env("NEW", "/a", EnvOp::Append, "m");
        p.library(lib("libcuda.so.1", "/usr/lib/libcuda.so.550"));
        p.program(lib("nvidia-smi", "/usr/bin/nvidia-smi"));
        p.apply_env(
            &mut env,
            Loader {
                in_cache: true,
                before: None,
            },
        );
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("FI_PROVIDER"), Some("cxi"));
        assert_eq!(
            get("PATH"),
            Some("/.berth/bin:/opt/x/bin:/usr/bin:/opt/y/bin")
        );
        assert_eq!(get("NEW"), Some("/a"));
        assert_eq!(get("LD_LIBRARY_PATH"), Some("/.berth/lib"));
    }

    #[test]
    fn a_driver_in_the_loader_cache_leaves_ld_library_path_alone() {
        let image = vec![(
            "LD_LIBRARY_PATH".to_string(),
            "/usr/local/nvidia/lib".to_string(),
        )];
        let mut p = Plan::default();
        p.library(Library {
            lookup: Lookup::Cache,
            ..lib("libcuda.so.1", "/usr/lib/libcuda.so.550")
        });
        let ld_path = |p: &Plan, in_cache, before| {
            let mut env = image.clone();
            p.apply_env(&mut env, Loader { in_cache, before });
            env[0].1.clone()
        };
        let compat = Some("/usr/local/cuda/compat");
        assert_eq!(ld_path(&p, true, None), "/usr/local/nvidia/lib");
        assert_eq!(ld_path(&p, true, compat), "/usr/local/nvidia/lib");
        // Without a cache of the run's (a joined container) it must be on
        // the path, after the image's newer driver where there is one.
        assert_eq!(
            ld_path(&p, false, None),
            "/.berth/lib:/usr/local/nvidia/lib"
        );
        assert_eq!(
            ld_path(&p, false, compat),
            "/usr/local/cuda/compat:/.berth/lib:/usr/local/nvidia/lib"
        );
        // A library that must win over the image's puts it there anyway.
        p.library(lib("libmpi.so.12", "/opt/mpich/lib/libmpi.so.12"));
        assert_eq!(ld_path(&p, true, None), "/.berth/lib:/usr/local/nvidia/lib");
    }

    #[test]
    fn first_library_of_a_name_wins_and_conflicts_are_reported() {
        let mut p = Plan::default();
        p.library(lib("libmpi.so.12", "/a/libmpi.so.12"));
        p.library(lib("libmpi.so.12", "/a/libmpi.so.12"));
        p.library(lib("libmpi.so.12", "/b/libmpi.so.12"));
        assert_eq!(p.libraries.len(), 1);
        assert_eq!(p.warnings.len(), 1);
        let binds = p.binds();
        assert_eq!(binds[0].target, "/.berth/lib/libmpi.so.12");
        assert!(binds[0].readonly);
    }

    #[test]
    fn later_mount_on_a_target_replaces() {
        let mut p = Plan::default();
        for src in ["/x", "/y"] {
            p.mount(Mount {
                source: src.into(),
                target: "/opt/t".into(),
                kind: MountKind::Dir,
                readonly: true,
                origin: "t".into(),
            });
        }
        assert_eq!(p.mounts.len(), 1);
        assert_eq!(p.mounts[0].source, PathBuf::from("/y"));
    }
}
