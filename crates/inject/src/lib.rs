//! berth's host-resource injection: what a run gets from the host for
//! GPUs, MPI and interconnects, worked out before the container starts.
//!
//! - [`module`]: site modules (`/etc/berth/modules.d/NAME.toml`).
//! - [`cdi`]: Container Device Interface specs (`--device vendor.com/class=NAME`).
//! - [`gpu`]: NVIDIA and AMD discovery when no CDI spec exists (`--gpus`).
//! - [`hooks`]: OCI hooks (hooks.d JSON), chosen by their `when`.
//! - [`mpi`]: the MPI bind model (host MPI in, ABI checked).
//! - [`elf`]: sonames, needed libraries and glibc versions of ELF files.
//! - [`ldcache`]: the host's `/etc/ld.so.cache`, read directly; an
//!   image's, written with the injected libraries added.
//! - [`paths`]: where injected libraries and programs land.
//! - [`plan`]: the result, applied by the runtime and shown by
//!   `berth run --dry-run`.
//!
//! Injected libraries are bound into one directory, [`plan::LIB_DIR`],
//! which goes first on `LD_LIBRARY_PATH` where a library must win over
//! the image's (a GPU driver goes there only where the run has no loader
//! cache of berth's: [`plan::Lookup`]), and are added to the image's
//! loader cache: [`ldcache::write`] writes a copy of the image's
//! `/etc/ld.so.cache` with their entries, which the run binds read-only
//! over it (for `ldconfig -p`, Python's `ctypes.util.find_library`, and
//! programs that clear `LD_LIBRARY_PATH`). berth writes the cache itself
//! rather than running the image's `ldconfig` at every start (which reads
//! every library directory of the image: 7 ms on the Debian + python3 test
//! image, against a whole start of 4 to 7 ms, and needs an image that has
//! `ldconfig` and a writable `/etc`); the copy is written once per image
//! and set of libraries.

#![forbid(unsafe_code)]

pub mod cdi;
pub mod elf;
pub mod error;
pub mod gpu;
pub mod hooks;
pub mod host;
pub mod ldcache;
pub mod module;
pub mod mpi;
pub mod paths;
pub mod plan;

pub use error::InjectError;
pub use host::{check_owner_for_root, HostPaths};
pub use plan::Plan;

use module::{Module, When};

/// What a run asks for.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// `--gpus`.
    pub gpus: Option<gpu::Selection>,
    /// The parts of an NVIDIA driver the GPUs come with, where berth finds
    /// the driver itself (a CDI spec says its own).
    pub gpu_capabilities: gpu::Asked,
    /// `--device`: CDI names or host device paths (`SRC[:DST]`).
    pub devices: Vec<String>,
    /// `--module`.
    pub modules: Vec<String>,
    /// `--mpi`.
    pub mpi: bool,
    /// `--annotation`s, for hooks' `when`.
    pub annotations: Vec<(String, String)>,
    /// The command's argv\[0\], for hooks' `when`.
    pub command: String,
    /// Whether the run has bind mounts of its own (`-v`), for hooks' `when`.
    pub has_bind_mounts: bool,
}

/// A host's injection settings: where to look, and its modules.
#[derive(Debug, Clone, Default)]
pub struct Site {
    /// Discovery paths.
    pub host: HostPaths,
    /// Every module defined.
    pub modules: Vec<Module>,
}

impl Site {
    /// The modules of `host.modules_dir` plus `inline` ones (from
    /// berth.toml's `[modules.NAME]`).
    pub fn load(host: HostPaths, inline: Vec<Module>) -> Result<Site, InjectError> {
        let modules = module::all(&host, inline)?;
        Ok(Site { host, modules })
    }

    /// Everything `req` gets on this host: [`Site::always`] then
    /// [`Site::requested`].
    pub fn plan(&self, req: &Request) -> Result<Plan, InjectError> {
        let mut plan = self.always()?;
        plan.extend(self.requested(req)?);
        Ok(plan)
    }

    /// What every run gets: the modules that apply always. The same for
    /// all of a user's runs, so the keeper can prepare its binds once.
    pub fn always(&self) -> Result<Plan, InjectError> {
        let mut plan = Plan::default();
        for m in self.modules.iter().filter(|m| m.def.when == When::Always) {
            m.apply(&mut plan, &self.host, false)?;
        }
        Ok(plan)
    }

    /// Whether an NVIDIA GPU can be given on this node (a CDI spec, or the
    /// driver's devices): GPUs an image asks for only by its
    /// `NVIDIA_VISIBLE_DEVICES` are given where there are some.
    pub fn has_nvidia(&self) -> bool {
        gpu::node_has_nvidia(&self.host, &cdi::Registry::load(&self.host.cdi_spec_dirs))
    }

    /// What this run asks for: GPUs (CDI when a spec exists, else
    /// discovery) and the modules for GPUs, devices, the MPI modules, then
    /// the modules asked for by name (those that apply always are already
    /// in [`Site::always`]).
    pub fn requested(&self, req: &Request) -> Result<Plan, InjectError> {
        let mut plan = Plan::default();
        // CDI specs are read once, and only when something needs them.
        let dirs = &self.host.cdi_spec_dirs;
        let mut cdi: Option<cdi::Registry> = None;
        if let Some(sel) = &req.gpus {
            let r = cdi.get_or_insert_with(|| cdi::Registry::load(dirs));
            match gpu::CDI_KINDS.iter().find(|k| r.has_kind(k)) {
                // `none`: the spec's common edits (the driver), no device.
                Some(kind) if *sel == gpu::Selection::DriverOnly => {
                    r.apply_common(kind, &mut plan)?
                }
                Some(kind) => {
                    let names = gpu_cdi_names(r, kind, sel);
                    r.apply(&names, &mut plan)?;
                }
                None => gpu::discover(sel, &req.gpu_capabilities, &self.host, &mut plan)?,
            }
            for m in self.modules.iter().filter(|m| m.def.when == When::Gpus) {
                m.apply(&mut plan, &self.host, true)?;
            }
        }
        let (paths, names): (Vec<&String>, Vec<&String>) =
            req.devices.iter().partition(|d| d.starts_with('/'));
        for p in paths {
            host_device(p, &mut plan)?;
        }
        if !names.is_empty() {
            let r = cdi.get_or_insert_with(|| cdi::Registry::load(dirs));
            let names: Vec<String> = names.into_iter().cloned().collect();
            r.apply(&names, &mut plan)?;
        }
        if req.mpi {
            let mpi: Vec<&Module> = self
                .modules
                .iter()
                .filter(|m| m.def.when == When::Mpi)
                .collect();
            if mpi.is_empty() {
                return Err(InjectError::Mpi(format!(
                    "no MPI module is defined on this node (a module with when = \"mpi\" in {}); run without --mpi to use the image's own MPI, or ask your site's administrator",
                    self.host.modules_dir.display()
                )));
            }
            for m in mpi {
                m.apply(&mut plan, &self.host, true)?;
            }
        }
        for name in &req.modules {
            let m = self
                .modules
                .iter()
                .find(|m| &m.name == name)
                .ok_or_else(|| InjectError::UnknownModule {
                    name: name.clone(),
                    known: if self.modules.is_empty() {
                        "none".into()
                    } else {
                        self.modules
                            .iter()
                            .map(|m| m.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    },
                })?;
            if m.def.when != When::Always && !plan.applied.contains(&format!("module:{name}")) {
                m.apply(&mut plan, &self.host, true)?;
            }
        }
        let facts = hooks::Facts {
            annotations: &req.annotations,
            command: &req.command,
            has_bind_mounts: req.has_bind_mounts,
        };
        for (path, file) in hooks::load_dirs(&self.host.hooks_dirs)? {
            if file.applies(&facts, &path)? {
                plan.hooks
                    .extend(file.calls(&format!("hook:{}", path.display())));
            }
        }
        Ok(plan)
    }
}

/// `--gpus` as CDI names of `kind`: the spec's `all` device when it has
/// one, else every device of the kind; or the listed ones.
fn gpu_cdi_names(r: &cdi::Registry, kind: &str, sel: &gpu::Selection) -> Vec<String> {
    let of_kind: Vec<String> = r
        .device_names()
        .into_iter()
        .filter(|n| n.split_once('=').is_some_and(|(k, _)| k == kind))
        .collect();
    match sel {
        gpu::Selection::All => {
            let all = format!("{kind}=all");
            if of_kind.contains(&all) {
                vec![all]
            } else {
                of_kind
            }
        }
        gpu::Selection::List(items) => items.iter().map(|i| format!("{kind}={i}")).collect(),
        gpu::Selection::DriverOnly => Vec::new(),
    }
}

/// `--device /dev/PATH[:/dev/TARGET[:PERMS]]`: a host device node.
fn host_device(spec: &str, plan: &mut Plan) -> Result<(), InjectError> {
    let mut parts = spec.splitn(3, ':');
    let src = parts.next().unwrap_or_default();
    let dst = parts.next().filter(|d| !d.is_empty()).unwrap_or(src);
    if !dst.starts_with('/') || dst.split('/').any(|c| c == "..") {
        return Err(InjectError::DeviceName {
            name: spec.to_string(),
            reason: "the container path must be absolute, without `..`".into(),
        });
    }
    let source = std::path::PathBuf::from(src);
    if plan::MountKind::of(&source) != Some(plan::MountKind::Device) {
        return Err(InjectError::DeviceNode {
            origin: format!("--device {spec}"),
            path: source,
            reason: "not a character or block device on this node".into(),
        });
    }
    plan.mount(plan::Mount {
        source,
        target: dst.to_string(),
        kind: plan::MountKind::Device,
        readonly: false,
        origin: format!("device:{src}"),
    });
    plan.applied.push(format!("device:{src}"));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_devices_and_unknown_modules() {
        let mut plan = Plan::default();
        host_device("/dev/null:/dev/fake0", &mut plan).unwrap();
        assert_eq!(plan.mounts[0].target, "/dev/fake0");
        let err = host_device("/etc/passwd", &mut plan)
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a character or block device"), "{err}");
        let site = Site::default();
        let err = site
            .plan(&Request {
                modules: vec!["cray-mpich".into()],
                ..Request::default()
            })
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("cray-mpich") && err.contains("berth modules"),
            "{err}"
        );
        let err = site
            .plan(&Request {
                mpi: true,
                ..Request::default()
            })
            .unwrap_err()
            .to_string();
        assert!(err.contains("no MPI module"), "{err}");
    }
}
