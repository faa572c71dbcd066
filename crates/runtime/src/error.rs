//! The runtime's error type. Every variant maps to exit code 125 (berth's
//! own failure, as podman), except those that concern the command.

use std::path::PathBuf;

use berth_config::exit::{Exit, ExitStatus};

/// An error while preparing or starting a container.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file operation failed.
    #[error("cannot {what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// On which path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A kernel call failed: what berth was doing, on which path, and the
    /// errno (callers can match `EPERM` or `ENOSPC`).
    #[error("cannot {call}{}: {errno}", path.as_ref().map(|p| format!(" {}", p.display())).unwrap_or_default())]
    Sys {
        /// What was being done (`mount a tmpfs on`, `unshare`, ...).
        call: &'static str,
        /// On which path, if one.
        path: Option<PathBuf>,
        /// The kernel's answer.
        errno: rustix::io::Errno,
    },
    /// Namespaces could not be created or joined.
    #[error("{0}")]
    Namespace(String),
    /// The image or a bind could not be mounted.
    #[error("{0}")]
    Mount(String),
    /// A bind mount's source is unusable.
    #[error("bind {spec:?}: {reason}")]
    Bind {
        /// The bind as given.
        spec: String,
        /// Why.
        reason: String,
    },
    /// The image's squashfs file is not where its record says (removed or
    /// moved since the record was read).
    #[error("the image file {0} is gone (removed from the store or moved); pull or import the image again")]
    ImageMissing(PathBuf),
    /// A named container kept on the node changed between the run's
    /// preparation and its placement (a step's tasks came or went): the
    /// run is prepared again.
    #[error("shared container {0} changed while the run was prepared (a task joined or left it); run again")]
    Replan(String),
    /// Anything else in the set-up.
    #[error("{0}")]
    Setup(String),
    /// The user's run options are inconsistent.
    #[error("{0}")]
    Usage(String),
}

impl Error {
    /// A failed kernel call.
    pub fn sys(call: &'static str, path: Option<PathBuf>, errno: rustix::io::Errno) -> Self {
        Error::Sys { call, path, errno }
    }

    /// The errno behind this error, when a kernel call failed.
    pub fn errno(&self) -> Option<rustix::io::Errno> {
        match self {
            Error::Sys { errno, .. } => Some(*errno),
            Error::Io { source, .. } => rustix::io::Errno::from_io_error(source),
            _ => None,
        }
    }

    /// An I/O error on `path`.
    pub fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            what,
            path: path.into(),
            source,
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Exit code for berth's own failures (podman's).
pub const EXIT_BERTH: i32 = Exit::Berth.code() as i32;
/// Exit code when the command exists but cannot be executed.
pub const EXIT_NOT_EXECUTABLE: i32 = Exit::NotExecutable.code() as i32;
/// Exit code when the command is not found in the image.
pub const EXIT_NOT_FOUND: i32 = Exit::CommandNotFound.code() as i32;

impl ExitStatus for Error {
    /// Every runtime error is berth's own failure.
    fn exit(&self) -> Exit {
        Exit::Berth
    }
}
