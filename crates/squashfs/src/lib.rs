//! berth's squashfs reader and FUSE server.
//!
//! [`reader`] reads a squashfs 4.0 image (every compressor the kernel
//! reads: gzip, xz, lzo, lz4, zstd) lazily and defensively: an image is
//! untrusted input, so a malformed one gives an error for the part that is
//! bad, never a panic, a loop without end, unbounded memory or a read
//! outside the image. The image may start at an offset inside its file (a
//! SIF file's partition). [`fuse`] serves it read-only over a FUSE
//! connection the caller mounted, with several threads, as an immutable
//! tree: the kernel caches entries, attributes, listings and pages for as
//! long as the mount lives.
//!
//! The server runs as `berth __squashfs` ([`serve_main`]), started by the
//! image keeper in place of `squashfuse_ll`.

#![deny(unsafe_code)]

pub mod fuse;
pub mod reader;
mod serve;
mod signals;
pub mod unpack;
pub mod verity;
pub mod writer;

pub use reader::{Error, Image};
pub use serve::serve_main;
