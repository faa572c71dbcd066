//! Entry names as byte paths: normalising them, their ancestors and parts.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::error::{Error, Result};

pub(super) fn unsafe_entry(layer: &str, entry: &[u8], reason: impl Into<String>) -> Error {
    Error::UnsafeEntry {
        layer: layer.to_string(),
        entry: String::from_utf8_lossy(entry).into_owned(),
        reason: reason.into(),
    }
}

/// Normalises an entry name as tar and container engines do: leading `/`
/// dropped, `.` components and trailing slashes removed, `..` folded
/// lexically. A `..` that climbs above the root is refused. The root itself
/// (`/`, `.`, `./`) normalises to an empty name.
pub fn normalize(layer: &str, raw: &[u8]) -> Result<Vec<u8>> {
    let mut out: Vec<u8> = Vec::with_capacity(raw.len());
    for comp in raw.split(|b| *b == b'/') {
        match comp {
            b"" | b"." => continue,
            b".." => match out.iter().rposition(|b| *b == b'/') {
                Some(i) => out.truncate(i),
                None if !out.is_empty() => out.clear(),
                None => return Err(unsafe_entry(layer, raw, "climbs above the root with `..`")),
            },
            c => {
                if !out.is_empty() {
                    out.push(b'/');
                }
                out.extend_from_slice(c);
            }
        }
    }
    Ok(out)
}

/// The strict ancestors of a normalised path, nearest last (`a`, `a/b` for
/// `a/b/c`).
pub(super) fn ancestors(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    path.iter()
        .enumerate()
        .filter(|(_, b)| **b == b'/')
        .map(move |(i, _)| &path[..i])
}

pub(super) fn split_parent(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|b| *b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (b"", path),
    }
}

pub(super) fn join(parent: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = parent.to_vec();
    if !p.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

pub(super) fn as_path(bytes: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(bytes))
}

/// Inserts `layer` for `path` unless a higher (smaller) layer is there.
pub(super) fn keep_topmost(map: &mut HashMap<Vec<u8>, usize>, path: Vec<u8>, layer: usize) {
    map.entry(path)
        .and_modify(|l| *l = (*l).min(layer))
        .or_insert(layer);
}
