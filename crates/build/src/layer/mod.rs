//! Layers from a build step: a snapshot of the root before the step, a
//! walk after it, and a gzip tar of what changed (new or changed entries,
//! with their parents, and `.wh.` whiteouts for what went), written into
//! the blob store with its digest and diff_id ([`diff`]). Runs inside the
//! build's user namespace, so owners read are the image's own ids. And the
//! reverse: applying a layer blob to a root, for steps taken from the cache
//! ([`apply`]). Whiteout names follow [`berth_image::whiteout`] both ways.

mod apply;
mod diff;

pub use apply::{apply, resolve_parent};
pub use diff::{diff, upper_layer, Snapshot};
