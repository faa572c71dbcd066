//! What the build driver hands the worker in the user namespace: every
//! stage's base and its file-system steps, fully resolved (variables
//! expanded, cache keys computed, hits looked up). Serialized as JSON.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use berth_image::store::build_cache::CacheEntry;

/// The worker's whole job.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    /// Scratch directory of this build (stage roots live here).
    pub work: PathBuf,
    /// The store's blob directory.
    pub blobs: PathBuf,
    /// The build cache directory.
    pub cache: PathBuf,
    /// The build context.
    pub context: PathBuf,
    /// Stages, in Dockerfile order.
    pub stages: Vec<PlanStage>,
    /// RUN steps run under root emulation (owner and identity calls
    /// faked); COPY --chown leaves files root's as well.
    #[serde(default)]
    pub root_emulation: bool,
}

/// A stage.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlanStage {
    /// For messages: `FROM ...` (and its name).
    pub title: String,
    /// Whether the target needs it (others are skipped).
    pub needed: bool,
    /// What its root starts from.
    pub base: Base,
    /// Its steps that touch the file system.
    pub steps: Vec<PlanStep>,
}

/// A stage's starting root.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Base {
    /// `FROM scratch`: empty.
    Scratch,
    /// An image of the store: its squashfs file.
    Image(PathBuf),
    /// An earlier stage's final root.
    Stage(usize),
}

/// A step that changes the file system.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlanStep {
    /// Dockerfile line.
    pub line: usize,
    /// The instruction, for messages.
    pub text: String,
    /// Cache key (hex).
    pub key: String,
    /// The cached result, when the cache has one and may be used.
    pub cached: Option<CacheEntry>,
    /// What to do.
    pub action: Action,
}

/// Where COPY reads from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum CopyFrom {
    /// The build context (with .dockerignore).
    Context,
    /// An earlier stage's root.
    Stage(usize),
}

/// A file-system step.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Action {
    /// RUN: `argv` with `env` in `workdir` as `user`.
    Run {
        /// Command line (the SHELL prepended for the shell form).
        argv: Vec<String>,
        /// Environment.
        env: Vec<(String, String)>,
        /// Working directory.
        workdir: String,
        /// `USER` (empty: root).
        user: String,
    },
    /// COPY or ADD.
    Copy {
        /// Where from.
        from: CopyFrom,
        /// Sources (globs), relative to `from`.
        sources: Vec<String>,
        /// Absolute destination (a trailing `/`: a directory).
        dest: String,
        /// `--chown` (names resolved in the image).
        chown: Option<String>,
        /// `--chmod`.
        chmod: Option<u32>,
        /// ADD: unpack local tar archives.
        add: bool,
    },
    /// WORKDIR: create the directory if missing.
    Mkdir {
        /// Absolute path.
        path: String,
    },
}
