//! The engine's error: what went wrong between a request and a started
//! container, with the library error it came from.

/// An error while resolving or starting a run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The image is in no store. `pullable`: its name names a registry,
    /// so a front end may pull it and try again.
    #[error("image {image:?} is not in the store: pull it first (berth pull REF), or name its registry (e.g. docker.io/library/{image})")]
    NotInStore {
        /// The image as asked.
        image: String,
        /// The reference to pull, when the name names a registry.
        pullable: Option<Box<berth_image::reference::ImageRef>>,
    },
    /// The run's options are wrong or inconsistent.
    #[error("{0}")]
    Usage(String),
    /// `--environment`: the file is missing, malformed or names a missing
    /// base or variable.
    #[error("{0}")]
    Environment(String),
    /// `--save`: the container's root could not be saved.
    #[error("{0}")]
    Save(String),
    /// `--overlay`: the directory cannot be made, or another run holds it.
    #[error("{0}")]
    Overlay(String),
    /// The site's `[host]` table cannot be read.
    #[error("{0}")]
    HostConfig(String),
    /// From the image store.
    #[error(transparent)]
    Image(#[from] berth_image::Error),
    /// From host-resource injection.
    #[error(transparent)]
    Inject(#[from] berth_inject::InjectError),
    /// From Docker's run semantics.
    #[error(transparent)]
    Semantics(#[from] berth_runtime::semantics::SemanticsError),
    /// From the runtime.
    #[error(transparent)]
    Runtime(#[from] berth_runtime::Error),
    /// A file berth was asked to read.
    #[error("{what} {path}: {source}")]
    Read {
        /// The option that named it.
        what: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl berth_config::exit::ExitStatus for Error {
    fn exit(&self) -> berth_config::exit::Exit {
        use berth_config::exit::Exit;
        match self {
            Error::NotInStore { .. } | Error::Read { .. } => Exit::NotFound,
            Error::Usage(_) | Error::Semantics(_) => Exit::Usage,
            Error::HostConfig(_) | Error::Environment(_) => Exit::Config,
            Error::Overlay(_) | Error::Save(_) => Exit::Berth,
            Error::Image(e) => e.exit(),
            Error::Inject(e) => e.exit(),
            Error::Runtime(e) => e.exit(),
        }
    }
}
