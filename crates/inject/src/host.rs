//! Where berth looks for host resources. Every path is configurable
//! (`[host]` in berth.toml), so a site with drivers in unusual places, and
//! the test suite's fake driver tree, use the same code as a standard node.
//! Also whether real root may trust a site file found there
//! ([`check_owner_for_root`]).

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The standard OCI hooks.d directories, lowest priority first.
pub const DEFAULT_HOOKS_DIRS: &[&str] = &[
    "/usr/share/containers/oci/hooks.d",
    "/etc/containers/oci/hooks.d",
];

/// Host locations for discovery.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct HostPaths {
    /// CDI spec directories, lowest priority first (a later directory's
    /// device of the same name wins, as in the CDI spec).
    pub cdi_spec_dirs: Vec<PathBuf>,
    /// The host loader's cache, read to find driver libraries.
    pub ld_cache: PathBuf,
    /// The host's device directory.
    pub dev_dir: PathBuf,
    /// Directories searched for host programs (`nvidia-smi`).
    pub bin_dirs: Vec<PathBuf>,
    /// The NVIDIA driver's proc directory (GPU UUIDs and minors).
    pub nvidia_proc: PathBuf,
    /// Site module directory (`NAME.toml` per module); unset: `modules.d`
    /// beside the site config (`/etc/berth/modules.d`, or beside the file
    /// `BERTH_SYSTEM_CONFIG` names).
    pub modules_dir: PathBuf,
    /// OCI hooks.d directories, lowest priority first.
    pub hooks_dirs: Vec<PathBuf>,
}

impl Default for HostPaths {
    fn default() -> Self {
        HostPaths {
            cdi_spec_dirs: vec![PathBuf::from("/etc/cdi"), PathBuf::from("/var/run/cdi")],
            ld_cache: PathBuf::from("/etc/ld.so.cache"),
            dev_dir: PathBuf::from("/dev"),
            bin_dirs: vec![
                PathBuf::from("/usr/bin"),
                PathBuf::from("/usr/local/bin"),
                PathBuf::from("/usr/sbin"),
                PathBuf::from("/bin"),
            ],
            nvidia_proc: PathBuf::from("/proc/driver/nvidia"),
            modules_dir: PathBuf::from("/etc/berth/modules.d"),
            hooks_dirs: DEFAULT_HOOKS_DIRS.iter().map(PathBuf::from).collect(),
        }
    }
}

impl HostPaths {
    /// A host path named `rel` under the device directory, and where it
    /// appears inside the container (`/dev/REL`).
    pub fn device(&self, rel: &str) -> (PathBuf, String) {
        (self.dev_dir.join(rel), format!("/dev/{rel}"))
    }

    /// The first `name` in the program directories.
    pub fn program(&self, name: &str) -> Option<PathBuf> {
        self.bin_dirs
            .iter()
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    }
}

/// As real root: refuses a site file (module, hooks.d file, CDI spec) that
/// is not root's alone ([`berth_config::root::root_may_trust`]); root would
/// otherwise bind or run what another user wrote. Rootless runs take the
/// user's own files.
pub fn check_owner_for_root(path: &Path) -> Result<(), String> {
    if !berth_config::root::is_real_root() {
        return Ok(());
    }
    berth_config::root::root_may_trust(path).map_err(|why| {
        format!("not trusted as root: {why}; make it root's and not writable by others")
    })
}
