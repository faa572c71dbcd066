//! `berth run`: exit codes, signals, Docker semantics (checked against
//! podman), identity, binds, read-only image, concurrency.
//!
//! - [`command`]: what runs and what it gets: exit codes, signals,
//!   entrypoint and command as podman runs them, environment, `shell`.
//! - [`isolation`]: who it runs as, what it sees of the host (binds, the
//!   read-only image, namespaces) and what it may do (privileges).
//! - [`node`]: many runs on one node, and runs by id from the node's
//!   records.
//! - [`environment`]: `--environment`: CSCS's environment definition files.
//! - [`persistent`]: `--overlay`: changes kept across runs.
//! - [`root_emulation`]: `--fakeroot` without a subordinate id range.
//! - [`data_mounts`]: `-v FILE:DST:sqsh`: squashfs files as read-only trees.
//! - [`named`]: `--name`: changes kept under a name; `ps -a`, `commit`, `rm`.
//! - [`binds_only`]: roots without overlayfs, and mount points made in
//!   read-only directories.
//! - [`fuse_overlay`]: writable roots through fuse-overlayfs where the
//!   kernel refuses overlayfs, or where the site chose it.
//! - [`entrypoint_first`]: `--entrypoint-first`: Pyxis's entrypoint, run
//!   on its own before the command.

use crate::harness::{fallbacks, Sandbox};

/// The site config with `[runtime] overlay = OVERLAY` (and the fallback
/// pass's unpacked images where that pass runs), whatever pass this is.
fn overlay_setting(sb: &Sandbox, overlay: &str) {
    let unpack = if fallbacks() {
        "image_mount = \"unpack\"\n"
    } else {
        ""
    };
    sb.site_config(&format!("[runtime]\noverlay = \"{overlay}\"\n{unpack}"));
}

mod binds_only;
mod command;
pub(crate) mod data_mounts;
mod entrypoint_first;
mod environment;
mod fuse_overlay;
mod isolation;
mod named;
mod node;
mod persistent;
pub(crate) mod root_emulation;
mod unpacked;
