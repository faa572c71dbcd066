//! Why host resources could not be injected.

use std::path::PathBuf;

/// An injection error: what was asked, why it cannot be done, what to do.
#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    /// `--module NAME` names no module.
    #[error(
        "no module {name:?} is defined on this host (defined: {known}); `berth modules` lists them"
    )]
    UnknownModule {
        /// The name asked for.
        name: String,
        /// The names there are.
        known: String,
    },
    /// A module file cannot be read or parsed.
    #[error("module file {path}: {reason}; fix or remove it (ask your site's administrator)")]
    ModuleFile {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A module names a host path that is not there.
    #[error("module {module}: {what} {path} does not exist on this node; the module does not fit this node (ask your site's administrator)")]
    ModulePath {
        /// The module.
        module: String,
        /// What the path was for.
        what: &'static str,
        /// The path.
        path: String,
    },
    /// A module entry is malformed.
    #[error("module {module}: {reason}")]
    ModuleEntry {
        /// The module.
        module: String,
        /// Why.
        reason: String,
    },
    /// A CDI device name is malformed.
    #[error("--device {name:?}: {reason} (a CDI device is vendor.com/class=NAME, a host device /dev/PATH)")]
    DeviceName {
        /// The name.
        name: String,
        /// Why.
        reason: String,
    },
    /// No CDI spec defines the device.
    #[error("CDI device {name:?} is not defined in {dirs}{known}{broken}")]
    UnknownDevice {
        /// The device asked for.
        name: String,
        /// The spec directories searched.
        dirs: String,
        /// The devices there are, as a sentence part.
        known: String,
        /// Spec files that could not be read, as a sentence part.
        broken: String,
    },
    /// A device node (CDI or discovered) is missing or not a device.
    #[error("{origin}: device {path}: {reason}")]
    DeviceNode {
        /// Who asked for it.
        origin: String,
        /// The host path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// `--gpus` on a node without a usable GPU driver.
    #[error("--gpus {selection}: {reason}")]
    Gpu {
        /// What was asked.
        selection: String,
        /// Why it cannot be given.
        reason: String,
    },
    /// `--mpi` on a host with no MPI module.
    #[error("--mpi: {0}")]
    Mpi(String),
    /// `NVIDIA_DRIVER_CAPABILITIES` names no capability berth knows.
    #[error("NVIDIA_DRIVER_CAPABILITIES={value}: {reason}; fix or unset the variable (in the job's environment or the image's ENV)")]
    DriverCapabilities {
        /// The variable's value.
        value: String,
        /// Why it is refused.
        reason: String,
    },
}

impl berth_config::exit::ExitStatus for InjectError {
    /// A broken module file is a configuration error; anything else is a
    /// host resource this node cannot give.
    fn exit(&self) -> berth_config::exit::Exit {
        match self {
            InjectError::ModuleFile { .. } => berth_config::exit::Exit::Config,
            InjectError::DriverCapabilities { .. } => berth_config::exit::Exit::Usage,
            _ => berth_config::exit::Exit::HostResource,
        }
    }
}
