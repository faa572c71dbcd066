//! berth's rootless runtime, in one-job modules (each depends only on
//! those listed before it):
//!
//! - [`sys`]: the kernel boundary: the [`sys::Kernel`] trait (mount,
//!   unshare, setns, `pivot_root`, open-in-root, capabilities) with the
//!   real kernel and a recording fake, and the few raw system calls.
//! - [`state`]: records in the runtime directory (no symlink followed, no
//!   FIFO opened, bounded sizes).
//! - [`node`]: the per-user runtime directory and the lease protocol of
//!   long-lived processes that runs share (keepers, shared containers).
//! - [`idmap`]: the id mode and the user namespaces and maps behind it.
//! - [`semantics`]: Docker's ENTRYPOINT/CMD/ENV/WORKDIR rules (pure).
//! - [`seccomp`]: the filter every command runs under.
//! - [`process`]: supervision, signals, the command looked up and `exec`ed.
//! - [`hooks`]: OCI hooks at their stages.
//! - [`rootfs`]: a root file system for a container or a build step.
//! - [`image_mount`]: the image's squashfs file mounted (FUSE or kernel).
//! - [`keeper`]: one long-lived image mount per user, image and id mode on
//!   a node, shared by runs.
//! - [`container`]: one container: lease the keeper, build, `exec`.
//! - [`shared`]: per-node shared containers that tasks join (`--shared`,
//!   `berth exec`, `berth ps`).

#![deny(unsafe_code)]

pub mod container;
pub mod entrypoint_first;
pub mod error;
pub mod hooks;
pub mod idmap;
pub mod image_mount;
pub mod image_unpack;
pub mod keeper;
pub mod node;
pub mod probe;
pub mod process;
pub mod rootfs;
pub mod seccomp;
pub mod semantics;
pub mod shared;
pub mod state;
#[allow(unsafe_code)]
pub mod sys;

pub use container::{Preflight, RunSpec};
pub use error::{Error, Result};
pub use idmap::IdMode;
pub use keeper::keeper_main;
