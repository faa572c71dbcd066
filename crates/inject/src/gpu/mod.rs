//! GPU discovery without a CDI spec, as Shifter's GPU support and
//! Apptainer's `--nv`/`--rocm` do it: the driver's user-space libraries
//! from the host's loader cache (read directly, see [`crate::ldcache`]),
//! its tools from the program directories, its device nodes from `/dev`.

use std::fs;

use crate::error::InjectError;
use crate::host::HostPaths;
use crate::ldcache;
use crate::plan::{EnvOp, Library, Lookup, Mount, MountKind, Plan};

mod capabilities;
pub mod compat;

pub use capabilities::{Asked, Capabilities};

/// Which GPUs a run gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// Every GPU of the node.
    All,
    /// Indices (`0`) or UUIDs (`GPU-...`, `MIG-...`), in the order given.
    List(Vec<String>),
    /// No GPU, but the driver (`none`, as NVIDIA's toolkit reads it: its
    /// libraries and tools, and the control devices).
    DriverOnly,
}

impl Selection {
    /// Parses `all`, `none` or a comma-separated list.
    pub fn parse(s: &str) -> Result<Selection, InjectError> {
        let s = s.trim();
        match s {
            "all" => return Ok(Selection::All),
            "none" => return Ok(Selection::DriverOnly),
            _ => {}
        }
        let items: Vec<String> = s.split(',').map(|i| i.trim().to_string()).collect();
        for i in &items {
            let ok = i.chars().all(|c| c.is_ascii_digit()) && !i.is_empty()
                || i.starts_with("GPU-")
                || i.starts_with("MIG-");
            if !ok {
                return Err(InjectError::Gpu {
                    selection: s.to_string(),
                    reason: format!(
                        "{i:?} is neither an index (0) nor a UUID (GPU-..., as nvidia-smi -L shows); use all, none, 0,1 or UUIDs"
                    ),
                });
            }
        }
        Ok(Selection::List(items))
    }

    /// As the user wrote it (for `NVIDIA_VISIBLE_DEVICES`).
    pub fn as_env(&self) -> String {
        match self {
            Selection::All => "all".into(),
            Selection::List(l) => l.join(","),
            Selection::DriverOnly => "none".into(),
        }
    }
}

/// ROCm's driver-facing libraries.
const AMD_LIBS: &[&str] = &[
    "libamdhip64.so",
    "libhsa-runtime64.so",
    "libhsakmt.so",
    "librocm_smi64.so",
    "libamd_smi.so",
    "libamdocl64.so",
];

/// ROCm's host tools.
const AMD_PROGRAMS: &[&str] = &["rocm-smi", "amd-smi", "rocminfo"];

/// Whether the node has an NVIDIA GPU to give: a CDI spec of
/// `nvidia.com/gpu` in `cdi`, or the driver's control device.
pub fn node_has_nvidia(host: &HostPaths, cdi: &crate::cdi::Registry) -> bool {
    cdi.has_kind("nvidia.com/gpu")
        || MountKind::of(&host.device("nvidiactl").0) == Some(MountKind::Device)
}

/// The value of `name` in `env`, as it is.
fn var<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

/// The GPUs an environment asks for as enroot's NVIDIA hook reads it:
/// `NVIDIA_VISIBLE_DEVICES` from `caller` (the task's environment), else
/// from `image` (its ENV: every CUDA image sets `all`). `void` or empty ask
/// for nothing, `none` for the driver without a GPU. Under Slurm the selection is taken among the GPUs
/// of the step (`SLURM_STEP_GPUS`, else `SLURM_JOB_GPUS`: the node's
/// indices): `all` is those, index `i` the i-th of them.
pub fn from_environment(caller: &[(String, String)], image: &[(String, String)]) -> Option<String> {
    let get = |env: &[(String, String)], k: &str| var(env, k).map(|v| v.trim().to_string());
    let wanted =
        get(caller, "NVIDIA_VISIBLE_DEVICES").or_else(|| get(image, "NVIDIA_VISIBLE_DEVICES"))?;
    match wanted.as_str() {
        "" | "void" => return None,
        "none" => return Some(wanted),
        _ => {}
    }
    let given: Option<Vec<String>> = get(caller, "SLURM_STEP_GPUS")
        .or_else(|| get(caller, "SLURM_JOB_GPUS"))
        .filter(|g| !g.is_empty())
        .map(|g| g.split(',').map(|i| i.trim().to_string()).collect());
    let Some(given) = given else {
        return Some(wanted);
    };
    if wanted == "all" {
        return Some(given.join(","));
    }
    let picked: Vec<String> = wanted
        .split(',')
        .map(str::trim)
        .map(|w| match w.parse::<usize>() {
            Ok(i) => given
                .get(i)
                .cloned()
                .unwrap_or_else(|| format!("{w}-not-in-step")),
            Err(_) => w.to_string(),
        })
        .collect();
    Some(picked.join(","))
}

/// Adds the node's GPUs (NVIDIA first, else AMD) to `plan`, with the
/// parts of an NVIDIA driver that `caps` ask for.
pub fn discover(
    sel: &Selection,
    caps: &Asked,
    host: &HostPaths,
    plan: &mut Plan,
) -> Result<(), InjectError> {
    let (nvidiactl, _) = host.device("nvidiactl");
    let (kfd, _) = host.device("kfd");
    if MountKind::of(&nvidiactl) == Some(MountKind::Device) {
        nvidia(sel, caps.resolve()?, host, plan)
    } else if MountKind::of(&kfd) == Some(MountKind::Device) {
        amd(sel, host, plan)
    } else {
        Err(InjectError::Gpu {
            selection: sel.as_env(),
            reason: format!(
                "no GPU driver on this node: no {} (NVIDIA) and no {} (AMD ROCm), and no CDI spec for nvidia.com/gpu or amd.com/gpu in {}. Run on a GPU node, or ask your site to generate CDI specs (nvidia-ctk cdi generate)",
                nvidiactl.display(),
                kfd.display(),
                host.cdi_spec_dirs
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
        })
    }
}

/// Numbered device nodes `PREFIX<N>` in the device directory, by N.
fn numbered(host: &HostPaths, sub: &str, prefix: &str) -> Vec<(u32, String)> {
    let dir = host.dev_dir.join(sub);
    let mut out: Vec<(u32, String)> = fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let n: u32 = name.strip_prefix(prefix)?.parse().ok()?;
            let rel = if sub.is_empty() {
                name
            } else {
                format!("{sub}/{name}")
            };
            Some((n, rel))
        })
        .collect();
    out.sort();
    out
}

fn device(host: &HostPaths, rel: &str, origin: &str, plan: &mut Plan) -> bool {
    let (src, target) = host.device(rel);
    if MountKind::of(&src) != Some(MountKind::Device) {
        return false;
    }
    plan.mount(Mount {
        source: src,
        target,
        kind: MountKind::Device,
        readonly: false,
        origin: origin.to_string(),
    });
    true
}

/// NVIDIA GPU UUIDs to device minors, from the driver's proc files.
fn nvidia_uuids(host: &HostPaths) -> Vec<(String, u32)> {
    let dir = host.nvidia_proc.join("gpus");
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let text = fs::read_to_string(e.path().join("information")).ok()?;
            let field = |name: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(name)?.trim_start().strip_prefix(':'))
                    .map(|v| v.trim().to_string())
            };
            Some((field("GPU UUID")?, field("Device Minor")?.parse().ok()?))
        })
        .collect()
}

/// The host's native libraries whose sonames start with one of
/// `prefixes`, from its loader cache, found by the container's loader as
/// `lookup` says.
fn libraries(
    host: &HostPaths,
    prefixes: &[&str],
    (origin, lookup): (&str, Lookup),
    plan: &mut Plan,
) -> Result<(), InjectError> {
    let entries = ldcache::read(&host.ld_cache).map_err(|e| InjectError::Gpu {
        selection: origin.to_string(),
        reason: format!(
            "cannot read the host's loader cache {}: {e} (set [host] ld_cache in berth.toml)",
            host.ld_cache.display()
        ),
    })?;
    for e in entries.iter().filter(|e| e.is_native()) {
        if !prefixes.iter().any(|p| e.soname.starts_with(p)) {
            continue;
        }
        let Ok(real) = fs::canonicalize(&e.path) else {
            continue;
        };
        plan.library(Library {
            name: e.soname.clone(),
            source: real,
            origin: origin.to_string(),
            lookup,
        });
    }
    Ok(())
}

fn programs(host: &HostPaths, names: &[&str], origin: &str, plan: &mut Plan) {
    for name in names {
        if let Some(p) = host.program(name) {
            plan.program(Library {
                name: name.to_string(),
                source: fs::canonicalize(&p).unwrap_or(p),
                origin: origin.to_string(),
                lookup: Lookup::Path,
            });
        }
    }
}

fn nvidia(
    sel: &Selection,
    caps: Capabilities,
    host: &HostPaths,
    plan: &mut Plan,
) -> Result<(), InjectError> {
    let origin = "gpu:nvidia";
    let gpus = numbered(host, "", "nvidia");
    let chosen: Vec<String> = match sel {
        Selection::All => gpus.iter().map(|(_, rel)| rel.clone()).collect(),
        Selection::List(items) => {
            let uuids = nvidia_uuids(host);
            let mut out = Vec::new();
            for item in items {
                let minor = if let Ok(n) = item.parse::<u32>() {
                    Some(n)
                } else {
                    uuids.iter().find(|(u, _)| u == item).map(|(_, m)| *m)
                };
                let found = minor.and_then(|m| gpus.iter().find(|(n, _)| *n == m));
                match found {
                    Some((_, rel)) => out.push(rel.clone()),
                    None => {
                        return Err(InjectError::Gpu {
                            selection: sel.as_env(),
                            reason: format!(
                                "GPU {item} is not on this node (it has {}{})",
                                if gpus.is_empty() {
                                    "no /dev/nvidiaN".to_string()
                                } else {
                                    gpus.iter()
                                        .map(|(_, r)| format!("/dev/{r}"))
                                        .collect::<Vec<_>>()
                                        .join(", ")
                                },
                                if item.parse::<u32>().is_err() {
                                    format!(
                                        "; UUIDs known from {}: {}",
                                        host.nvidia_proc.display(),
                                        uuids
                                            .iter()
                                            .map(|(u, _)| u.as_str())
                                            .collect::<Vec<_>>()
                                            .join(", ")
                                    )
                                } else {
                                    String::new()
                                }
                            ),
                        })
                    }
                }
            }
            out
        }
        Selection::DriverOnly => Vec::new(),
    };
    if chosen.is_empty() && *sel != Selection::DriverOnly {
        return Err(InjectError::Gpu {
            selection: sel.as_env(),
            reason: format!(
                "{} exists but there is no {}/nvidiaN: is the GPU visible to this job?",
                host.device("nvidiactl").0.display(),
                host.dev_dir.display()
            ),
        });
    }
    for rel in [
        "nvidiactl",
        "nvidia-uvm",
        "nvidia-uvm-tools",
        "nvidia-modeset",
    ] {
        device(host, rel, origin, plan);
    }
    for rel in &chosen {
        device(host, rel, origin, plan);
    }
    for (_, rel) in numbered(host, "nvidia-caps", "nvidia-cap") {
        device(host, &rel, origin, plan);
    }
    // The driver goes into the loader cache, as NVIDIA's toolkit puts it:
    // no image ships it, and LD_LIBRARY_PATH stays the image's and the
    // task's.
    libraries(host, &caps.libraries(), (origin, Lookup::Cache), plan)?;
    if caps.compute()
        && !plan
            .libraries
            .iter()
            .any(|l| l.name.starts_with("libcuda.so"))
    {
        plan.warnings.push(format!(
            "{origin}: no libcuda in the host's loader cache {}: CUDA programs will not find the driver",
            host.ld_cache.display()
        ));
    }
    programs(host, &caps.programs(), origin, plan);
    plan.env("NVIDIA_VISIBLE_DEVICES", &sel.as_env(), EnvOp::Set, origin);
    plan.applied.push(origin.to_string());
    Ok(())
}

fn amd(sel: &Selection, host: &HostPaths, plan: &mut Plan) -> Result<(), InjectError> {
    let origin = "gpu:amd";
    let renders = numbered(host, "dri", "renderD");
    let chosen: Vec<String> = match sel {
        Selection::All => renders.iter().map(|(_, r)| r.clone()).collect(),
        Selection::List(items) => {
            let mut out = Vec::new();
            for item in items {
                let idx: u32 = item.parse().map_err(|_| InjectError::Gpu {
                    selection: sel.as_env(),
                    reason: format!("AMD GPUs are selected by index; {item:?} is not one"),
                })?;
                match renders.get(idx as usize) {
                    Some((_, r)) => out.push(r.clone()),
                    None => {
                        return Err(InjectError::Gpu {
                            selection: sel.as_env(),
                            reason: format!(
                                "GPU {idx} is not on this node ({} render nodes in {}/dri)",
                                renders.len(),
                                host.dev_dir.display()
                            ),
                        })
                    }
                }
            }
            out
        }
        Selection::DriverOnly => Vec::new(),
    };
    device(host, "kfd", origin, plan);
    for rel in &chosen {
        device(host, rel, origin, plan);
    }
    // ROCm's runtime is in ROCm images too, under /opt/rocm: the host's
    // must come first.
    libraries(host, AMD_LIBS, (origin, Lookup::Path), plan)?;
    programs(host, AMD_PROGRAMS, origin, plan);
    match sel {
        Selection::List(_) => plan.env("ROCR_VISIBLE_DEVICES", &sel.as_env(), EnvOp::Set, origin),
        // ROCm's way of showing no GPU.
        Selection::DriverOnly => plan.env("ROCR_VISIBLE_DEVICES", "-1", EnvOp::Set, origin),
        Selection::All => {}
    }
    plan.applied.push(origin.to_string());
    Ok(())
}

/// The CDI kind of the node's GPU vendor, for `--gpus` when a spec exists.
pub const CDI_KINDS: &[&str] = &["nvidia.com/gpu", "amd.com/gpu"];

#[cfg(test)]
mod environment_tests {
    use super::from_environment;

    /// An environment of `pairs` (for this module's tests, and its
    /// children's).
    pub(super) fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn nvidia_visible_devices_as_enroots_hook_reads_it() {
        let cuda_image = env(&[("NVIDIA_VISIBLE_DEVICES", "all")]);
        assert_eq!(from_environment(&[], &cuda_image).as_deref(), Some("all"));
        assert_eq!(from_environment(&[], &[]), None);
        let void = env(&[("NVIDIA_VISIBLE_DEVICES", "void")]);
        assert_eq!(from_environment(&void, &cuda_image), None);
        let one = env(&[("NVIDIA_VISIBLE_DEVICES", "1")]);
        assert_eq!(from_environment(&one, &cuda_image).as_deref(), Some("1"));
        // Under Slurm: among the step's GPUs.
        let step = env(&[("SLURM_STEP_GPUS", "2,3")]);
        assert_eq!(from_environment(&step, &cuda_image).as_deref(), Some("2,3"));
        let mut first = step.clone();
        first.extend(env(&[("NVIDIA_VISIBLE_DEVICES", "0")]));
        assert_eq!(from_environment(&first, &[]).as_deref(), Some("2"));
        // `none` is the driver without a GPU, under Slurm too.
        let mut none = step.clone();
        none.extend(env(&[("NVIDIA_VISIBLE_DEVICES", "none")]));
        assert_eq!(
            from_environment(&none, &cuda_image).as_deref(),
            Some("none")
        );
        assert_eq!(
            super::Selection::parse("none").unwrap(),
            super::Selection::DriverOnly
        );
        assert_eq!(super::Selection::DriverOnly.as_env(), "none");
        let mut uuid = step;
        uuid.extend(env(&[("NVIDIA_VISIBLE_DEVICES", "GPU-ab,5")]));
        assert_eq!(
            from_environment(&uuid, &[]).as_deref(),
            Some("GPU-ab,5-not-in-step")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn selections_parse() {
        assert_eq!(Selection::parse("all").unwrap(), Selection::All);
        assert_eq!(
            Selection::parse("0, 2").unwrap(),
            Selection::List(vec!["0".into(), "2".into()])
        );
        assert!(Selection::parse("GPU-1234-abcd").is_ok());
        let err = Selection::parse("first").unwrap_err().to_string();
        assert!(err.contains("neither an index"), "{err}");
    }

    #[test]
    fn no_driver_says_what_was_looked_for() {
        let host = HostPaths {
            dev_dir: PathBuf::from("/nonexistent-dev"),
            ..HostPaths::default()
        };
        let err = discover(
            &Selection::All,
            &Asked::default(),
            &host,
            &mut Plan::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("/nonexistent-dev/nvidiactl") && err.contains("nvidia-ctk"),
            "{err}"
        );
    }
}
