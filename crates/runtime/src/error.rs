//! The runtime's error type. Every variant maps to exit code 125 (berth's
//! own failure, as podman), except those that concern the command.

use std::path::PathBuf;

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
    /// Anything else in the set-up.
    #[error("{0}")]
    Setup(String),
    /// The user's run options are inconsistent.
    #[error("{0}")]
    Usage(String),
}

impl Error {
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
pub const EXIT_BERTH: i32 = 125;
/// Exit code when the command exists but cannot be executed.
pub const EXIT_NOT_EXECUTABLE: i32 = 126;
/// Exit code when the command is not found in the image.
pub const EXIT_NOT_FOUND: i32 = 127;
