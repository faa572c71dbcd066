//! berth's rootless runtime.
//!
//! - [`semantics`]: Docker's ENTRYPOINT/CMD/ENV/WORKDIR rules (pure).
//! - [`keeper`]: one long-lived image mount per user, image and id mapping
//!   on a node, shared by runs (namespaces joined with `setns`).
//! - [`rootfs`]: a container's root file system: overlay, /proc, /sys, /dev,
//!   identity files, binds, `pivot_root`.
//! - [`container`]: fork, namespaces, exec, exit codes and signals.
//! - [`shared`]: per-node shared containers that tasks join (`--shared`,
//!   `berth exec`, `berth ps`).
//! - [`state`]: reading and writing records in the runtime directory
//!   (no symlink followed, no FIFO opened, bounded sizes).
//! - [`sys`]: the few raw system calls, each `unsafe` block explained.

pub mod container;
pub mod error;
pub mod hooks;
pub mod keeper;
pub mod rootfs;
pub mod seccomp;
pub mod semantics;
pub mod shared;
pub mod state;
pub mod sys;

pub use container::{run, Preflight, RunSpec};
pub use error::{Error, Result};
pub use keeper::{keeper_main, IdMode};
