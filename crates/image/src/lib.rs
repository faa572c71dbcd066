//! berth's image pipeline.
//!
//! From a reference or an archive to one squashfs file per image in a
//! content-addressed store:
//!
//! - [`reference`]: Docker-grammar image references.
//! - [`registry`]: the OCI distribution client (auth, retries, resume).
//! - [`downloads`]: parallel layer downloads through the store's layer cache.
//! - [`archive`]: docker-archive, oci-archive and OCI layout sources.
//! - [`image_config`]: an image's OCI config and its run-time settings.
//! - [`layer`]: layer decompression and diff-ID verification.
//! - [`flatten`]: applying the layer stack (whiteouts, links, path safety).
//! - [`whiteout`]: the one rule for whiteout names (`.wh.NAME`, `.wh..wh..opq`).
//! - [`squash`]: the squashfs writer.
//! - [`store`]: the content-addressed store, its locks and atomic publication.
//! - [`pull`]: the pipeline tying them together.

#![forbid(unsafe_code)]

pub mod archive;
pub mod auth;
pub mod downloads;
pub mod error;
pub mod flatten;
pub mod image_config;
pub mod image_file;
pub mod layer;
pub mod pipeline;
pub mod platform;
pub mod pull;
pub mod reference;
pub mod registry;
mod seal;
pub mod squash;
pub mod store;
pub mod whiteout;

pub use error::{Error, ErrorClass, Result};
