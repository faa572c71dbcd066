//! How rootless runs get an image's tree: the squashfs server, or the
//! image unpacked where FUSE cannot serve it, and what stacks the
//! container's layer on it (`[runtime]` settings handed to the keeper
//! through its environment).

use serde::{Deserialize, Serialize};

/// How rootless runs get an image's tree.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
pub enum ImageMount {
    /// FUSE, else unpacked (with a warning).
    #[default]
    #[serde(rename = "auto")]
    Auto,
    /// FUSE only: a run fails where it cannot mount.
    #[serde(rename = "fuse")]
    Fuse,
    /// Unpacked once per keeper into a node-local directory.
    #[serde(rename = "unpack")]
    Unpack,
}

impl ImageMount {
    /// The variable that hands the choice to the keeper.
    pub const ENV: &'static str = "BERTH_IMAGE_MOUNT";

    /// The setting's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ImageMount::Auto => "auto",
            ImageMount::Fuse => "fuse",
            ImageMount::Unpack => "unpack",
        }
    }

    /// The choice [`Self::ENV`] names; auto if unset or unknown.
    pub fn from_env() -> Self {
        match std::env::var(Self::ENV).as_deref() {
            Ok("fuse") => ImageMount::Fuse,
            Ok("unpack") => ImageMount::Unpack,
            _ => ImageMount::Auto,
        }
    }
}

/// What serves an image's squashfs file to rootless containers.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
pub enum SquashfsServer {
    /// berth's own reader and FUSE server (`berth __squashfs`).
    #[default]
    #[serde(rename = "berth")]
    Berth,
    /// squashfuse's `squashfuse_ll` (`BERTH_SQUASHFUSE` names another path).
    #[serde(rename = "squashfuse_ll")]
    SquashfuseLl,
}

impl SquashfsServer {
    /// The variable that hands the choice to the keeper and build worker.
    pub const ENV: &'static str = "BERTH_SQUASHFS_SERVER";

    /// The setting's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SquashfsServer::Berth => "berth",
            SquashfsServer::SquashfuseLl => "squashfuse_ll",
        }
    }

    /// The server [`Self::ENV`] names; berth's if unset or unknown.
    pub fn from_env() -> Self {
        match std::env::var(Self::ENV).as_deref() {
            Ok("squashfuse_ll") => SquashfsServer::SquashfuseLl,
            _ => SquashfsServer::Berth,
        }
    }
}

/// What stacks a container's layer on the read-only image (`[runtime]
/// overlay`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
pub enum RootOverlay {
    /// Kernel overlayfs; where the kernel refuses it in a user namespace
    /// (before 5.11), read-only runs get binds-only roots and writable
    /// runs fuse-overlayfs where it is installed, else fail with what to
    /// do.
    #[default]
    #[serde(rename = "auto")]
    Auto,
    /// Kernel overlayfs only: a run fails where it cannot mount.
    #[serde(rename = "kernel")]
    Kernel,
    /// fuse-overlayfs for every root that has an overlay (slower than the
    /// kernel's: each access crosses a FUSE server).
    #[serde(rename = "fuse")]
    Fuse,
    /// Binds-only roots: no writable layer (`--writable`, `--overlay`,
    /// `--save`, `--name` are refused).
    #[serde(rename = "none")]
    None,
}

impl RootOverlay {
    /// The variable that hands the choice to the keeper.
    pub const ENV: &'static str = "BERTH_ROOT_OVERLAY";

    /// The setting's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RootOverlay::Auto => "auto",
            RootOverlay::Kernel => "kernel",
            RootOverlay::Fuse => "fuse",
            RootOverlay::None => "none",
        }
    }

    /// The choice [`Self::ENV`] names; auto if unset or unknown.
    pub fn from_env() -> Self {
        match std::env::var(Self::ENV).as_deref() {
            Ok("kernel") => RootOverlay::Kernel,
            Ok("fuse") => RootOverlay::Fuse,
            Ok("none") => RootOverlay::None,
            _ => RootOverlay::Auto,
        }
    }
}
