//! Container Device Interface: device specs in `/etc/cdi` and
//! `/var/run/cdi` (JSON or YAML), resolved by fully-qualified name
//! (`vendor.com/class=name`) and applied to a [`Plan`].
//!
//! Read with serde rather than the `container-device-interface` crate:
//! that crate (1.1.1) validates with `jsonschema`, which pulls in reqwest,
//! tokio and aws-lc-sys (221 crates, a C build of minutes here) to check
//! local files, and it edits an OCI runtime `Spec`, which berth's runtime
//! is not driven by. The fields below are those of CDI 0.3 to 1.0;
//! unknown fields are ignored, as newer minor versions add them.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::InjectError;
use crate::plan::{EnvOp, Mount, MountKind, Plan};

/// A CDI spec file.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    /// Spec format version.
    pub cdi_version: String,
    /// `vendor.com/class`.
    pub kind: String,
    /// The devices.
    #[serde(default)]
    pub devices: Vec<Device>,
    /// Edits for every device of the spec.
    #[serde(default)]
    pub container_edits: ContainerEdits,
}

/// One device of a spec.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    /// Its name within the kind.
    pub name: String,
    /// What it needs.
    #[serde(default)]
    pub container_edits: ContainerEdits,
}

/// What a device (or a whole spec) adds to a container.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerEdits {
    /// `NAME=VALUE`.
    #[serde(default)]
    pub env: Vec<String>,
    /// Device nodes.
    #[serde(default)]
    pub device_nodes: Vec<DeviceNode>,
    /// Mounts.
    #[serde(default)]
    pub mounts: Vec<CdiMount>,
    /// OCI hooks.
    #[serde(default)]
    pub hooks: Vec<CdiHook>,
    /// Supplementary groups (cannot apply rootless).
    #[serde(default, rename = "additionalGIDs")]
    pub additional_gids: Vec<u32>,
    /// Intel RDT class (cannot apply rootless).
    #[serde(default)]
    pub intel_rdt: Option<serde_json::Value>,
    /// Network devices (berth uses the host network).
    #[serde(default)]
    pub net_devices: Vec<serde_json::Value>,
}

/// A device node edit.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceNode {
    /// Path inside the container.
    pub path: String,
    /// Host path, when different.
    #[serde(default)]
    pub host_path: Option<String>,
}

/// A mount edit.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiMount {
    /// Host path.
    pub host_path: String,
    /// Path inside the container.
    pub container_path: String,
    /// Mount type (`bind` when absent).
    #[serde(default, rename = "type")]
    pub mount_type: Option<String>,
    /// Mount options (`ro`, `rbind`, `nosuid`...).
    #[serde(default)]
    pub options: Vec<String>,
}

/// A hook edit, run at an OCI stage: the program part is the hooks.d
/// format's.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CdiHook {
    /// OCI stage (`createContainer`, ...).
    pub hook_name: String,
    /// Program, argv, environment, timeout.
    #[serde(flatten)]
    pub program: crate::hooks::HookProgram,
}

/// A parsed, validated device name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QualifiedName {
    /// `vendor.com/class`.
    pub kind: String,
    /// The device.
    pub name: String,
}

fn chars_ok(s: &str, extra: &[char]) -> bool {
    s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || extra.contains(&c))
}

/// Parses `vendor.com/class=name`.
pub fn parse_name(full: &str) -> Result<QualifiedName, InjectError> {
    let bad = |reason: &str| InjectError::DeviceName {
        name: full.to_string(),
        reason: reason.to_string(),
    };
    let (kind, name) = full.split_once('=').ok_or_else(|| bad("no `=NAME`"))?;
    let (vendor, class) = kind
        .split_once('/')
        .ok_or_else(|| bad("no `vendor.com/class` before `=`"))?;
    if !chars_ok(vendor, &['.', '-']) || !vendor.contains('.') {
        return Err(bad("the vendor must be a domain name (vendor.com)"));
    }
    if !chars_ok(class, &['_', '.', '-']) {
        return Err(bad(
            "the class has characters other than letters, digits, _ . -",
        ));
    }
    if !chars_ok(name, &['_', '.', ':', '-']) {
        return Err(bad(
            "the device name has characters other than letters, digits, _ . : -",
        ));
    }
    Ok(QualifiedName {
        kind: kind.to_string(),
        name: name.to_string(),
    })
}

/// The specs of a host, loaded once per run.
#[derive(Debug, Default)]
pub struct Registry {
    dirs: Vec<PathBuf>,
    specs: Vec<(PathBuf, Spec)>,
    errors: Vec<(PathBuf, String)>,
}

impl Registry {
    /// Loads every `*.json`, `*.yaml` and `*.yml` of `dirs`, in order; a
    /// file that cannot be read is remembered (and named when a device is
    /// not found), not fatal: one broken vendor spec must not stop runs
    /// that do not use it.
    pub fn load(dirs: &[PathBuf]) -> Registry {
        let mut r = Registry {
            dirs: dirs.to_vec(),
            ..Registry::default()
        };
        for dir in dirs {
            let Ok(entries) = fs::read_dir(dir) else {
                continue;
            };
            let mut files: Vec<PathBuf> = entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.extension()
                        .is_some_and(|x| x == "json" || x == "yaml" || x == "yml")
                })
                .collect();
            files.sort();
            for f in files {
                match read_spec(&f) {
                    Ok(spec) => r.specs.push((f, spec)),
                    Err(e) => r.errors.push((f, e)),
                }
            }
        }
        r
    }

    /// The spec files that could not be read, and why.
    pub fn errors(&self) -> &[(PathBuf, String)] {
        &self.errors
    }

    /// How many spec files were read.
    pub fn spec_count(&self) -> usize {
        self.specs.len()
    }

    /// Whether any spec defines devices of `kind`.
    pub fn has_kind(&self, kind: &str) -> bool {
        self.specs.iter().any(|(_, s)| s.kind == kind)
    }

    /// Every fully-qualified device name, sorted.
    pub fn device_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .specs
            .iter()
            .flat_map(|(_, s)| {
                s.devices
                    .iter()
                    .map(move |d| format!("{}={}", s.kind, d.name))
            })
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// The spec and device for a name; a later directory wins.
    fn find(&self, q: &QualifiedName) -> Option<(usize, &Device)> {
        self.specs
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, (_, s))| s.kind == q.kind)
            .find_map(|(i, (_, s))| s.devices.iter().find(|d| d.name == q.name).map(|d| (i, d)))
    }

    /// Applies the devices `names` (and, once each, their specs' common
    /// edits) to `plan`.
    pub fn apply(&self, names: &[String], plan: &mut Plan) -> Result<(), InjectError> {
        let mut specs_done: Vec<usize> = Vec::new();
        for full in names {
            let q = parse_name(full)?;
            let Some((i, device)) = self.find(&q) else {
                return Err(self.not_found(full));
            };
            let (path, spec) = &self.specs[i];
            let origin = format!("cdi:{full}");
            if !specs_done.contains(&i) {
                if !supported_version(&spec.cdi_version) {
                    plan.warnings.push(format!(
                        "{}: cdiVersion {} is newer than berth knows (1.0); applied as 1.0",
                        path.display(),
                        spec.cdi_version
                    ));
                }
                apply_edits(&spec.container_edits, plan, &format!("cdi:{}", spec.kind))?;
                specs_done.push(i);
            }
            apply_edits(&device.container_edits, plan, &origin)?;
            plan.applied.push(origin);
        }
        Ok(())
    }

    /// Applies the common edits of the newest spec of `kind` (no device:
    /// `NVIDIA_VISIBLE_DEVICES=none`, the driver without a GPU).
    pub fn apply_common(&self, kind: &str, plan: &mut Plan) -> Result<(), InjectError> {
        if let Some((_, spec)) = self.specs.iter().rev().find(|(_, s)| s.kind == kind) {
            let origin = format!("cdi:{kind}");
            apply_edits(&spec.container_edits, plan, &origin)?;
            plan.applied.push(origin);
        }
        Ok(())
    }

    fn not_found(&self, full: &str) -> InjectError {
        let names = self.device_names();
        let known = if names.is_empty() {
            String::from(" (no CDI devices are defined on this node)")
        } else {
            format!(" (defined: {})", names.join(", "))
        };
        let broken = if self.errors.is_empty() {
            String::new()
        } else {
            format!(
                "; spec files that could not be read: {}",
                self.errors
                    .iter()
                    .map(|(p, e)| format!("{}: {e}", p.display()))
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        };
        InjectError::UnknownDevice {
            name: full.to_string(),
            dirs: self
                .dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(" and "),
            known,
            broken,
        }
    }
}

fn read_spec(path: &Path) -> Result<Spec, String> {
    crate::host::check_owner_for_root(path)?;
    let text = fs::read_to_string(path).map_err(|e| e.to_string())?;
    parse_spec(&text)
}

fn parse_spec(text: &str) -> Result<Spec, String> {
    // YAML 1.2 is a superset of JSON: one parser reads both.
    let spec: Spec = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
    if spec.kind.split_once('/').is_none() {
        return Err(format!("kind {:?} is not vendor.com/class", spec.kind));
    }
    // A relative hook program would run relative to berth's cwd.
    let edits = std::iter::once(&spec.container_edits)
        .chain(spec.devices.iter().map(|d| &d.container_edits));
    for h in edits.flat_map(|e| &e.hooks) {
        if !h.program.path.starts_with('/') {
            return Err(format!("hook path {:?} is not absolute", h.program.path));
        }
    }
    Ok(spec)
}

/// Checks a CDI spec's text (JSON or YAML) as berth reads spec files, and
/// returns its qualified device names (`vendor.com/class=NAME`); the error
/// says what is wrong. (For tools and the fuzz targets.)
pub fn check_spec(text: &str) -> Result<Vec<String>, String> {
    let spec = parse_spec(text)?;
    Ok(spec
        .devices
        .iter()
        .map(|d| format!("{}={}", spec.kind, d.name))
        .collect())
}

fn supported_version(v: &str) -> bool {
    let mut it = v.split('.').map(|p| p.parse::<u32>().unwrap_or(u32::MAX));
    matches!((it.next(), it.next()), (Some(0), _) | (Some(1), Some(0)))
}

fn apply_edits(e: &ContainerEdits, plan: &mut Plan, origin: &str) -> Result<(), InjectError> {
    for kv in &e.env {
        match kv.split_once('=') {
            Some((k, v)) if !k.is_empty() => plan.env(k, v, EnvOp::Set, origin),
            _ => plan.warnings.push(format!(
                "{origin}: env entry {kv:?} is not NAME=VALUE; skipped"
            )),
        }
    }
    for node in &e.device_nodes {
        let host = PathBuf::from(node.host_path.as_deref().unwrap_or(&node.path));
        match MountKind::of(&host) {
            Some(MountKind::Device) => {}
            Some(_) => {
                return Err(InjectError::DeviceNode {
                    origin: origin.to_string(),
                    path: host,
                    reason: "not a character or block device".into(),
                })
            }
            None => return Err(InjectError::DeviceNode {
                origin: origin.to_string(),
                path: host,
                reason:
                    "does not exist on this node (is the driver loaded? is the CDI spec current?)"
                        .into(),
            }),
        }
        plan.mount(Mount {
            source: host,
            target: node.path.clone(),
            kind: MountKind::Device,
            readonly: false,
            origin: origin.to_string(),
        });
    }
    for m in &e.mounts {
        let is_bind = m
            .mount_type
            .as_deref()
            .is_none_or(|t| t == "bind" || t == "none")
            || m.options.iter().any(|o| o == "bind" || o == "rbind");
        if !is_bind {
            plan.warnings.push(format!(
                "{origin}: mount of type {} at {} is not supported (berth binds host paths); skipped",
                m.mount_type.as_deref().unwrap_or("?"),
                m.container_path
            ));
            continue;
        }
        let source = PathBuf::from(&m.host_path);
        let Some(kind) = MountKind::of(&source) else {
            return Err(InjectError::DeviceNode {
                origin: origin.to_string(),
                path: source,
                reason:
                    "a mount source that does not exist on this node (is the CDI spec current?)"
                        .into(),
            });
        };
        plan.mount(Mount {
            source,
            target: m.container_path.clone(),
            kind,
            readonly: m.options.iter().any(|o| o == "ro"),
            origin: origin.to_string(),
        });
    }
    for h in &e.hooks {
        plan.hooks.push(crate::plan::HookCall {
            stage: h.hook_name.clone(),
            path: h.program.path.clone(),
            args: h.program.args.clone(),
            env: h.program.env.clone(),
            timeout: h.program.timeout,
            origin: origin.to_string(),
        });
    }
    if !e.additional_gids.is_empty() {
        plan.warnings.push(format!(
            "{origin}: additionalGIDs {:?} cannot be added by an unprivileged run (the groups you have on the host apply)",
            e.additional_gids
        ));
    }
    if e.intel_rdt.is_some() {
        plan.warnings.push(format!(
            "{origin}: intelRdt cannot be applied by an unprivileged run; skipped"
        ));
    }
    if !e.net_devices.is_empty() {
        plan.warnings.push(format!(
            "{origin}: netDevices skipped (berth containers use the host network)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("berth-cdi-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn names_parse_and_bad_ones_say_why() {
        let q = parse_name("nvidia.com/gpu=GPU-8a1b:0").unwrap();
        assert_eq!(
            (q.kind.as_str(), q.name.as_str()),
            ("nvidia.com/gpu", "GPU-8a1b:0")
        );
        for bad in [
            "nvidia.com/gpu",
            "gpu=0",
            "nvidia/gpu=0",
            "nvidia.com/gpu=",
            "x.com/c=a b",
        ] {
            assert!(parse_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn yaml_and_json_specs_resolve_with_later_dirs_winning() {
        let a = tmp("a");
        let b = tmp("b");
        let file = a.join("lib.so");
        fs::write(&file, b"x").unwrap();
        fs::write(
            a.join("vendor.yaml"),
            format!(
                "cdiVersion: \"0.6.0\"\nkind: example.com/gpu\ncontainerEdits:\n  env: [\"COMMON=1\"]\n  additionalGIDs: [44]\ndevices:\n  - name: \"0\"\n    containerEdits:\n      env: [\"WHICH=a\"]\n      mounts:\n        - hostPath: {f}\n          containerPath: /usr/lib/lib.so\n          options: [ro, nosuid, bind]\n      hooks:\n        - hookName: createContainer\n          path: /bin/true\n",
                f = file.display()
            ),
        )
        .unwrap();
        fs::write(
            b.join("override.json"),
            r#"{"cdiVersion":"0.5.0","kind":"example.com/gpu","devices":[{"name":"1","containerEdits":{"env":["WHICH=b"]}}]}"#,
        )
        .unwrap();
        fs::write(b.join("broken.json"), "{not json").unwrap();
        let r = Registry::load(&[a.clone(), b.clone()]);
        assert_eq!(r.device_names(), ["example.com/gpu=0", "example.com/gpu=1"]);
        assert!(r.has_kind("example.com/gpu"));
        let mut plan = Plan::default();
        r.apply(
            &["example.com/gpu=0".into(), "example.com/gpu=1".into()],
            &mut plan,
        )
        .unwrap();
        let env: Vec<(&str, &str)> = plan
            .env
            .iter()
            .map(|e| (e.name.as_str(), e.value.as_str()))
            .collect();
        assert_eq!(env, [("COMMON", "1"), ("WHICH", "a"), ("WHICH", "b")]);
        assert_eq!(plan.mounts.len(), 1);
        assert!(plan.mounts[0].readonly);
        assert_eq!(plan.hooks.len(), 1);
        assert!(plan.warnings.iter().any(|w| w.contains("additionalGIDs")));
        let err = r
            .apply(&["example.com/gpu=7".into()], &mut Plan::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("example.com/gpu=0, example.com/gpu=1") && err.contains("broken.json"),
            "{err}"
        );
        fs::remove_dir_all(&a).unwrap();
        fs::remove_dir_all(&b).unwrap();
    }

    #[test]
    fn a_device_node_that_is_not_one_is_refused() {
        let d = tmp("node");
        fs::write(
            d.join("x.json"),
            format!(
                r#"{{"cdiVersion":"0.6.0","kind":"example.com/x","devices":[{{"name":"a","containerEdits":{{"deviceNodes":[{{"path":"/dev/x","hostPath":"{}"}}]}}}}]}}"#,
                d.join("x.json").display()
            ),
        )
        .unwrap();
        let r = Registry::load(std::slice::from_ref(&d));
        let err = r
            .apply(&["example.com/x=a".into()], &mut Plan::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a character or block device"), "{err}");
        fs::remove_dir_all(&d).unwrap();
    }
}
