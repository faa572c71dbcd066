//! OCI hooks in the hooks.d JSON format (1.0.0, as podman and CRI-O read
//! them): a hook program, the stages it runs at, and when it applies
//! (`always`, annotations, the command, bind mounts). Files come from the
//! standard directories (`/usr/share/containers/oci/hooks.d`,
//! `/etc/containers/oci/hooks.d`; a later directory's file of the same name
//! wins) and from modules.
//!
//! ```json
//! {
//!   "version": "1.0.0",
//!   "hook": { "path": "/usr/libexec/site/gpu-hook", "args": ["gpu-hook", "prestart"], "timeout": 10 },
//!   "when": { "annotations": { "^com\\.example\\.gpu$": "^true$" }, "commands": [".*/python3?$"] },
//!   "stages": ["createRuntime", "poststop"]
//! }
//! ```
//!
//! A hook gets the OCI state on stdin. A hook of a stage before the
//! command starts (createRuntime, createContainer, startContainer) may set
//! container environment variables by printing lines
//! `BERTH_SETENV NAME=VALUE` on stdout (podman-hpc's wish: hooks that can
//! set the environment). A failing hook of those stages stops the start,
//! with its stderr shown.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::InjectError;
use crate::plan::HookCall;

/// The OCI stages berth runs hooks at. `prestart` (deprecated in OCI 1.0.2)
/// runs as `createRuntime`.
pub const STAGES: &[&str] = &[
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
];

/// The standard hooks.d directories, lowest priority first (defined with
/// the other default host paths).
pub use crate::host::DEFAULT_HOOKS_DIRS as DEFAULT_DIRS;

/// The program part of a hook file.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
pub struct HookProgram {
    /// Absolute path.
    pub path: String,
    /// argv, with argv\[0\].
    #[serde(default)]
    pub args: Vec<String>,
    /// `NAME=VALUE`.
    #[serde(default)]
    pub env: Vec<String>,
    /// Seconds.
    #[serde(default)]
    pub timeout: Option<i64>,
}

/// When a hook applies; all given conditions must hold, or `always`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct When {
    /// Applies to every container.
    #[serde(default)]
    pub always: Option<bool>,
    /// Annotation key regex to value regex.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Regexes on the command's path (argv\[0\]).
    #[serde(default)]
    pub commands: Vec<String>,
    /// Applies when the container has bind mounts.
    #[serde(default)]
    pub has_bind_mounts: Option<bool>,
}

/// A hooks.d file.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
pub struct HookFile {
    /// `1.0.0`.
    pub version: String,
    /// The program.
    pub hook: HookProgram,
    /// Conditions.
    #[serde(default)]
    pub when: When,
    /// Stages.
    pub stages: Vec<String>,
}

/// What a container looks like to the `when` conditions.
#[derive(Debug, Clone, Default)]
pub struct Facts<'a> {
    /// Its annotations.
    pub annotations: &'a [(String, String)],
    /// argv\[0\].
    pub command: &'a str,
    /// Whether it has bind mounts beyond berth's defaults (`-v`).
    pub has_bind_mounts: bool,
}

fn regex(pattern: &str, file: &Path) -> Result<regex::Regex, InjectError> {
    regex::Regex::new(pattern).map_err(|e| InjectError::ModuleFile {
        path: file.to_path_buf(),
        reason: format!("bad regex {pattern:?}: {e}"),
    })
}

impl HookFile {
    /// Whether the hook applies to a container with these facts.
    pub fn applies(&self, facts: &Facts<'_>, file: &Path) -> Result<bool, InjectError> {
        let w = &self.when;
        if w.always == Some(true) {
            return Ok(true);
        }
        let mut any = false;
        if let Some(b) = w.has_bind_mounts {
            any = true;
            if b != facts.has_bind_mounts {
                return Ok(false);
            }
        }
        for (k, v) in &w.annotations {
            any = true;
            let (kr, vr) = (regex(k, file)?, regex(v, file)?);
            if !facts
                .annotations
                .iter()
                .any(|(ak, av)| kr.is_match(ak) && vr.is_match(av))
            {
                return Ok(false);
            }
        }
        if !w.commands.is_empty() {
            any = true;
            let mut hit = false;
            for c in &w.commands {
                hit |= regex(c, file)?.is_match(facts.command);
            }
            if !hit {
                return Ok(false);
            }
        }
        Ok(any)
    }

    /// The calls this file makes, one per stage.
    pub fn calls(&self, origin: &str) -> Vec<HookCall> {
        self.stages
            .iter()
            .map(|s| HookCall {
                stage: if s == "prestart" {
                    "createRuntime".into()
                } else {
                    s.clone()
                },
                path: self.hook.path.clone(),
                args: self.hook.args.clone(),
                env: self.hook.env.clone(),
                timeout: self.hook.timeout,
                origin: origin.to_string(),
            })
            .collect()
    }
}

/// Reads and checks one hooks.d file.
pub fn read(path: &Path) -> Result<HookFile, InjectError> {
    let bad = |reason: String| InjectError::ModuleFile {
        path: path.to_path_buf(),
        reason,
    };
    crate::host::check_owner_for_root(path).map_err(bad)?;
    let text = fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let h: HookFile = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    if h.version != "1.0.0" {
        return Err(bad(format!(
            "hook version {:?}: berth reads 1.0.0",
            h.version
        )));
    }
    if !h.hook.path.starts_with('/') {
        return Err(bad(format!("hook path {:?} is not absolute", h.hook.path)));
    }
    for s in &h.stages {
        if s != "prestart" && !STAGES.contains(&s.as_str()) {
            return Err(bad(format!(
                "unknown stage {s:?} (one of {})",
                STAGES.join(", ")
            )));
        }
    }
    Ok(h)
}

/// Every `*.json` of `dirs`; a later directory's file of the same name
/// replaces an earlier one. Sorted by file name.
pub fn load_dirs(dirs: &[PathBuf]) -> Result<Vec<(PathBuf, HookFile)>, InjectError> {
    let mut by_name: BTreeMap<String, PathBuf> = BTreeMap::new();
    for d in dirs {
        let Ok(rd) = fs::read_dir(d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "json") {
                by_name.insert(e.file_name().to_string_lossy().into_owned(), p);
            }
        }
    }
    by_name
        .into_values()
        .map(|p| read(&p).map(|h| (p, h)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(json: &str) -> HookFile {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn when_conditions() {
        let p = Path::new("x.json");
        let ann = vec![("com.example.gpu".to_string(), "true".to_string())];
        let facts = Facts {
            annotations: &ann,
            command: "/usr/bin/python3",
            has_bind_mounts: false,
        };
        let h = hook(
            r#"{"version":"1.0.0","hook":{"path":"/h"},"when":{"always":true},"stages":["poststop"]}"#,
        );
        assert!(h.applies(&facts, p).unwrap());
        let h = hook(
            r#"{"version":"1.0.0","hook":{"path":"/h"},"when":{"annotations":{"^com\\.example\\.gpu$":"^true$"},"commands":[".*/python3?$"]},"stages":["createRuntime"]}"#,
        );
        assert!(h.applies(&facts, p).unwrap());
        let other = Facts {
            command: "/bin/sh",
            ..facts.clone()
        };
        assert!(!h.applies(&other, p).unwrap());
        let h = hook(
            r#"{"version":"1.0.0","hook":{"path":"/h"},"when":{"hasBindMounts":true},"stages":["prestart"]}"#,
        );
        assert!(!h.applies(&facts, p).unwrap());
        assert_eq!(h.calls("t")[0].stage, "createRuntime");
        // No condition at all: never (as podman).
        let h = hook(r#"{"version":"1.0.0","hook":{"path":"/h"},"stages":["poststop"]}"#);
        assert!(!h.applies(&facts, p).unwrap());
        let h = hook(
            r#"{"version":"1.0.0","hook":{"path":"/h"},"when":{"commands":["("]},"stages":["poststop"]}"#,
        );
        assert!(h
            .applies(&facts, p)
            .unwrap_err()
            .to_string()
            .contains("bad regex"));
    }

    #[test]
    fn files_are_checked_and_later_dirs_win() {
        let base = std::env::temp_dir().join(format!("berth-hooks-{}", std::process::id()));
        let (a, b) = (base.join("a"), base.join("b"));
        fs::create_dir_all(&a).unwrap();
        fs::create_dir_all(&b).unwrap();
        let ok = |path: &str| {
            format!(
                r#"{{"version":"1.0.0","hook":{{"path":"{path}"}},"when":{{"always":true}},"stages":["poststop"]}}"#
            )
        };
        fs::write(a.join("gpu.json"), ok("/a")).unwrap();
        fs::write(b.join("gpu.json"), ok("/b")).unwrap();
        fs::write(a.join("other.txt"), "x").unwrap();
        let all = load_dirs(&[a.clone(), b.clone()]).unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].1.hook.path, "/b");
        fs::write(b.join("bad.json"), ok("/x").replace("poststop", "later")).unwrap();
        let err = load_dirs(&[a.clone(), b.clone()]).unwrap_err().to_string();
        assert!(
            err.contains("bad.json") && err.contains("unknown stage"),
            "{err}"
        );
        fs::write(b.join("bad.json"), ok("relative")).unwrap();
        assert!(load_dirs(std::slice::from_ref(&b))
            .unwrap_err()
            .to_string()
            .contains("not absolute"));
        fs::remove_dir_all(&base).unwrap();
    }
}
