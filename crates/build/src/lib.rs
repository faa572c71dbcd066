//! berth's rootless image builder (`berth build`).
//!
//! - [`dockerfile`]: Dockerfile to stages and steps (the `parse-dockerfile`
//!   crate tokenizes; word splitting and variable substitution are here).
//! - [`context`]: `.dockerignore`, COPY source globs, the sources' hash.
//! - [`builder`]: the driver outside the user namespace: each stage's
//!   base, the walk over its instructions, the plan, the worker's run.
//! - [`instructions`]: what each instruction does to a stage's state and
//!   config, and the worker's action for those that touch files.
//! - [`cache_key`]: the build cache's keys.
//! - [`image_config`]: the image config, typed.
//! - [`manifest`]: the built image's layers, config and OCI manifest.
//! - [`base_layer`]: one layer of a base image whose layers are not kept.
//! - [`plan`]: what the driver hands the worker.
//! - [`worker`]: `berth __build-worker`, in a user namespace where the user
//!   is root: stage roots, RUN, COPY/ADD, layers.
//! - [`layer`]: a step's changes as a layer blob, and applying one.
//! - [`save`]: `berth run --save`: a container's root as a squashfs file.
//!
//! The blob directory and the build cache belong to the store
//! ([`berth_image::store::blobs`], [`berth_image::store::build_cache`]).

#![forbid(unsafe_code)]

pub mod base_layer;
pub mod builder;
pub mod cache_key;
pub mod context;
pub mod dockerfile;
pub mod image_config;
pub mod instructions;
pub mod layer;
pub mod manifest;
pub mod plan;
pub mod save;
pub mod worker;

use std::path::PathBuf;

/// A build error. Messages name the Dockerfile line where there is one.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Dockerfile is malformed or uses something not supported.
    #[error("Dockerfile line {line}: {msg}")]
    Dockerfile {
        /// 1-based line.
        line: usize,
        /// What is wrong.
        msg: String,
    },
    /// A step could not be carried out.
    #[error("Dockerfile line {line}: {msg}")]
    Step {
        /// 1-based line.
        line: usize,
        /// What went wrong.
        msg: String,
    },
    /// A RUN step exited non-zero (the worker printed which).
    #[error("Dockerfile line {line}: the command failed with exit code {code}")]
    StepFailed {
        /// 1-based line.
        line: usize,
        /// Its exit code.
        code: i32,
    },
    /// The worker failed (it printed why).
    #[error("the build failed (the reason is above; worker exit code {0})")]
    WorkerFailed(i32),
    /// A COPY source problem.
    #[error("{0}")]
    Source(String),
    /// Bad options.
    #[error("{0}")]
    Usage(String),
    /// Anything else in the build's set-up.
    #[error("{0}")]
    Plan(String),
    /// A base image's config.json cannot be read as an image config.
    #[error("the config of the base image {image} is malformed: {reason}; pull it again, or build from another image")]
    BaseConfig {
        /// The image.
        image: String,
        /// What is wrong.
        reason: String,
    },
    /// A COPY, ADD or WORKDIR step's file operation in the image failed.
    #[error(transparent)]
    InImage(#[from] worker::InImageError),
    /// The store's blob directory or build cache failed.
    #[error(transparent)]
    Store(#[from] berth_image::Error),
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

impl berth_config::exit::ExitStatus for Error {
    /// A Dockerfile error or a failing step is the build's failure; the
    /// worker's own failure is berth's; anything else is another failure.
    fn exit(&self) -> berth_config::exit::Exit {
        use berth_config::exit::Exit;
        match self {
            Error::Dockerfile { .. } | Error::Step { .. } | Error::StepFailed { .. } => Exit::Build,
            Error::WorkerFailed(code) if *code == worker::EXIT_STEP_FAILED => Exit::Build,
            Error::WorkerFailed(_) => Exit::Berth,
            Error::Usage(_) => Exit::Usage,
            // The store's own class: a full disk is 15 in a build too.
            Error::Store(e) => e.exit(),
            _ => Exit::Other,
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
