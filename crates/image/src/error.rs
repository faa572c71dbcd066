//! The image pipeline's error type.
//!
//! Every error says what failed and, where the user can act, what to do. Each
//! variant belongs to an [`ErrorClass`] that maps to a distinct exit code.

use std::path::PathBuf;

use berth_config::exit::{Exit, ExitStatus};

/// Broad classes of failure, each with its own exit code (docs/reference/exit-codes.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The command line or a reference is malformed.
    Usage,
    /// The image, tag or blob does not exist.
    NotFound,
    /// The registry refused our credentials.
    Auth,
    /// The registry could not be reached, or kept failing after retries.
    Network,
    /// Content does not match its digest or size.
    Integrity,
    /// The image is malformed, unsupported, or unsafe to unpack.
    BadImage,
    /// The store could not be read or written (disk full, permissions).
    Store,
    /// A host tool berth needs is missing or failed.
    HostTool,
}

impl ErrorClass {
    /// The exit code of this class (berth-config's table).
    pub fn exit(self) -> Exit {
        match self {
            ErrorClass::Usage => Exit::Usage,
            ErrorClass::NotFound => Exit::NotFound,
            ErrorClass::Auth => Exit::Auth,
            ErrorClass::Network => Exit::Network,
            ErrorClass::Integrity => Exit::Integrity,
            ErrorClass::BadImage => Exit::BadImage,
            ErrorClass::Store => Exit::Store,
            ErrorClass::HostTool => Exit::HostTool,
        }
    }

    /// The process exit code for this class.
    pub fn exit_code(self) -> u8 {
        self.exit().code()
    }
}

impl ExitStatus for Error {
    fn exit(&self) -> Exit {
        self.class().exit()
    }
}

/// An error of the image pipeline.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A malformed image reference.
    #[error("invalid image reference {reference:?}: {reason}")]
    Reference {
        /// What the user typed.
        reference: String,
        /// Why it is invalid.
        reason: String,
    },
    /// A malformed import source.
    #[error("invalid import source {source_spec:?}: {reason}")]
    Source {
        /// What the user typed.
        source_spec: String,
        /// Why it is invalid.
        reason: String,
    },
    /// The image is not in the store.
    #[error("image {0:?} is not in the store: run `berth images` to list images, `berth pull` to fetch it")]
    ImageNotInStore(String),
    /// The registry does not have the image or tag.
    #[error("{reference}: not found in the registry ({detail}); check the name and tag")]
    RegistryNotFound {
        /// The reference.
        reference: String,
        /// The registry's message.
        detail: String,
    },
    /// No manifest for the wanted platform in an index.
    #[error("{reference}: no image for platform {wanted} (the index has: {available}); choose one with --platform")]
    NoPlatform {
        /// The reference.
        reference: String,
        /// The platform wanted.
        wanted: String,
        /// The platforms present.
        available: String,
    },
    /// Authentication failed.
    #[error("{registry}: authentication failed ({detail}); run `berth login {registry}` or check your credentials")]
    Auth {
        /// The registry host.
        registry: String,
        /// The registry's message.
        detail: String,
    },
    /// A network failure that persisted after retries.
    #[error("{registry}: {detail}")]
    Network {
        /// The registry host.
        registry: String,
        /// What happened and what to do.
        detail: String,
    },
    /// A blob's content or size differs from its descriptor.
    #[error("{what}: {detail}; the data is corrupt or was tampered with, nothing was stored")]
    Integrity {
        /// Which blob.
        what: String,
        /// Expected vs found.
        detail: String,
    },
    /// The image is malformed or unsupported.
    #[error("bad image: {0}")]
    BadImage(String),
    /// A layer holds an entry that would land outside the root filesystem.
    #[error("layer {layer} is unsafe: entry {entry:?} {reason}; the image was refused")]
    UnsafeEntry {
        /// The layer's digest.
        layer: String,
        /// The entry name as found in the tar stream.
        entry: String,
        /// What is wrong.
        reason: String,
    },
    /// A filesystem operation on the store failed.
    #[error("store: {what} {path}: {source}{hint}")]
    Store {
        /// What was being done.
        what: &'static str,
        /// On which path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
        /// Advice derived from the OS error (disk full, permissions).
        hint: String,
    },
    /// A host tool is missing or failed.
    #[error("{0}")]
    HostTool(String),
    /// A store that someone else could write.
    #[error("store {path} {why}: whoever can write it can change what your containers run; make it yours and not writable by others (chmod go-w), or use another store (--store)")]
    UntrustedStore {
        /// The store directory.
        path: PathBuf,
        /// Owner or mode.
        why: String,
    },
    /// No file to keep registry credentials in.
    #[error("no file to keep registry credentials in: set REGISTRY_AUTH_FILE, XDG_RUNTIME_DIR or HOME (berth never writes them into the current directory)")]
    NoAuthFile,
    /// A pipeline stage stopped because another one failed (internal).
    #[error("cancelled")]
    Cancelled,
    /// A file given by the user could not be read.
    #[error("cannot read {path}: {source}")]
    Input {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

impl Error {
    /// The class of this error, which fixes the exit code.
    pub fn class(&self) -> ErrorClass {
        match self {
            Error::Reference { .. } | Error::Source { .. } | Error::NoAuthFile => ErrorClass::Usage,
            Error::ImageNotInStore(_) | Error::RegistryNotFound { .. } => ErrorClass::NotFound,
            Error::NoPlatform { .. } => ErrorClass::NotFound,
            Error::Auth { .. } => ErrorClass::Auth,
            Error::Network { .. } => ErrorClass::Network,
            Error::Integrity { .. } => ErrorClass::Integrity,
            Error::BadImage(_) | Error::UnsafeEntry { .. } => ErrorClass::BadImage,
            Error::Store { .. } | Error::UntrustedStore { .. } => ErrorClass::Store,
            Error::HostTool(_) => ErrorClass::HostTool,
            Error::Input { .. } => ErrorClass::NotFound,
            Error::Cancelled => ErrorClass::BadImage,
        }
    }

    /// A file given by the user could not be read.
    pub fn input(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Input {
            path: path.into(),
            source,
        }
    }

    /// A store error with a hint chosen from the OS error.
    pub fn store(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        let hint = match source.raw_os_error() {
            Some(28) => "; the store's filesystem is full: free space, `berth prune`, or use --store elsewhere".to_string(),
            Some(122) => "; disk quota exceeded: free space or use --store elsewhere".to_string(),
            Some(13) | Some(1) => "; permission denied: is the store yours? use --store or BERTH_STORE".to_string(),
            Some(30) => "; read-only filesystem: use --store or BERTH_STORE to pick a writable store".to_string(),
            _ => String::new(),
        };
        Error::Store {
            what,
            path: path.into(),
            source,
            hint,
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
