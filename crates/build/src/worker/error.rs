//! The worker's errors below the build's own [`crate::Error`]: file
//! operations inside a stage root, users and groups of the image, the
//! overlay build root.

use std::io;
use std::path::PathBuf;

/// A file operation of a step, inside the image (in a child chrooted into
/// the stage root: paths are the image's).
#[derive(Debug, thiserror::Error)]
pub enum InImageError {
    /// A file operation failed.
    #[error("cannot {what} {path}: {source}")]
    File {
        /// What was being done.
        what: &'static str,
        /// On which path, in the image.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// A file could not be copied.
    #[error("cannot copy {from} to {to}: {source}")]
    Copy {
        /// The source.
        from: PathBuf,
        /// The destination, in the image.
        to: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// `--chown` names a user or group the image lacks.
    #[error(transparent)]
    User(#[from] UserError),
    /// The helper child could not be set up (pipe, fork, chroot).
    #[error("cannot {what} for the step's helper: {source}")]
    Helper {
        /// What was being done.
        what: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The helper child failed and said why (its error, as text: it came
    /// through a pipe).
    #[error("{0}")]
    Reported(String),
    /// The helper child ended without saying why.
    #[error("the step's helper ended with {0} (it printed nothing; look above for a crash)")]
    HelperEnded(String),
}

impl InImageError {
    /// A failed file operation on `path`.
    pub fn file(what: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self::File {
            what,
            path: path.into(),
            source,
        }
    }
}

/// A `USER` or `--chown` the image cannot resolve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UserError {
    /// No such user name.
    #[error("user {0:?} is not in the image's /etc/passwd (create it in an earlier RUN step, or give a numeric uid)")]
    UnknownUser(String),
    /// No such group name.
    #[error("group {0:?} is not in the image's /etc/group (create it in an earlier RUN step, or give a numeric gid)")]
    UnknownGroup(String),
    /// The user's /etc/passwd line has no number for a uid.
    #[error("bad /etc/passwd entry for {0}: its uid is not a number")]
    BadPasswdEntry(String),
}

/// Why a stage root could not be an overlay (the worker then unpacks the
/// base instead).
#[derive(Debug, thiserror::Error)]
pub enum OverlayError {
    /// A directory or the image file failed.
    #[error("cannot {what} {path}: {source}")]
    File {
        /// What was being done.
        what: &'static str,
        /// On which path.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The base image's squashfs could not be mounted through FUSE.
    #[error("cannot mount the base image through FUSE: {0}")]
    Fuse(String),
    /// The overlay could not be mounted (no unprivileged overlay here).
    #[error("cannot mount an overlay on {path}: {source}")]
    Mount {
        /// The stage root.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}
