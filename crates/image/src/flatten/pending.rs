//! Entries placed only once every layer is read: deferred ones (their
//! parents need the lower layers, [`super::resolve`]) and the entries held
//! back with them, their content spooled meanwhile.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;

use super::paths::{keep_topmost, split_parent, unsafe_entry};
use super::resolve::Unresolvable;
use super::{Flattener, Kind, LayerState, Parts, Pending};
use crate::error::{Error, Result};
use crate::flatten::stream::io_err;

/// Appends `data` to `spool` (made in `dir` on first use); returns where it
/// starts. `layer` names the stream in errors.
pub(super) fn append_to_spool(
    spool: &mut Option<File>,
    dir: &Path,
    data: &mut dyn Read,
    layer: &str,
) -> Result<u64> {
    let file = match spool {
        Some(f) => f,
        None => spool.insert(
            tempfile::tempfile_in(dir).map_err(|e| Error::store("create spool file in", dir, e))?,
        ),
    };
    let offset = file
        .seek(SeekFrom::End(0))
        .map_err(|e| Error::store("write spool", dir, e))?;
    io::copy(data, file).map_err(|e| io_err(layer, e))?;
    Ok(offset)
}

/// The `size` bytes at `offset` of the pending spool (nothing for none).
pub(super) fn spooled<'a>(
    spool: &'a mut Option<File>,
    offset: u64,
    size: u64,
    dir: &Path,
) -> Result<Box<dyn Read + 'a>> {
    match spool.as_mut() {
        Some(f) if size > 0 => {
            f.seek(SeekFrom::Start(offset))
                .map_err(|e| Error::store("read spool", dir, e))?;
            Ok(Box::new(f.take(size)))
        }
        _ => Ok(Box::new(io::empty())),
    }
}

impl<W: Write> Flattener<W> {
    /// Where an emitted non-directory that is not a symlink is, as
    /// (layer, seq): what [`Defs`](super::resolve::Defs) asks of the flattener.
    pub(super) fn emitted_other(&self, path: &[u8]) -> Option<(usize, u64)> {
        self.emitted
            .get(path)
            .filter(|e| !matches!(e.kind, Kind::Dir | Kind::Symlink))
            .map(|e| (e.layer, e.seq))
    }

    /// Records a directory or symlink for resolving later entries' parents.
    pub(super) fn define(&mut self, parts: &Parts, layer: usize, seq: u64) {
        match parts.kind {
            Kind::Dir => self.defs.dir(&parts.path, layer, seq),
            Kind::Symlink => self.defs.symlink(&parts.path, layer, seq, &parts.link),
            // Emitted ones are found in `emitted`, shadowed ones are
            // recorded by `place`, pending ones by `define_pending`.
            _ => {}
        }
    }

    /// As [`Flattener::define`], for an entry placed only at the end: a
    /// non-directory is recorded too (it is not in `emitted` yet).
    pub(super) fn define_pending(&mut self, parts: &Parts, layer: usize, seq: u64) {
        if matches!(parts.kind, Kind::Dir | Kind::Symlink) {
            self.define(parts, layer, seq);
        } else {
            self.defs.other(&parts.path, layer, seq);
        }
    }

    pub(super) fn resolve(
        &self,
        digest: &str,
        raw: &[u8],
        layer: usize,
        seq: u64,
        path: &[u8],
    ) -> Result<Vec<u8>> {
        let emitted = |p: &[u8]| self.emitted_other(p);
        self.defs
            .resolve(&emitted, layer, seq, path)
            .map_err(|why| match why {
                Unresolvable::AboveRoot { link } => unsafe_entry(
                    digest,
                    raw,
                    format!(
                        "lies below the symlink {:?}, whose target climbs above the root",
                        String::from_utf8_lossy(&link)
                    ),
                ),
                Unresolvable::Loop { link } => unsafe_entry(
                    digest,
                    raw,
                    format!(
                        "lies below the symlink {:?}, which loops",
                        String::from_utf8_lossy(&link)
                    ),
                ),
            })
    }

    /// Whether a deferred entry could land on `path` or above it.
    pub(super) fn may_be_replaced_by_pending(&self, path: &[u8]) -> bool {
        if self.pending_names.is_empty() {
            return false;
        }
        let (_, name) = split_parent(path);
        self.pending_names.contains(name)
            || path
                .split(|b| *b == b'/')
                .any(|c| self.pending_subtrees.contains(c))
    }

    /// Keeps an entry for [`Flattener::finish`]: deferred (its parents wait
    /// for the lower layers) or held back (a deferred entry may replace it).
    /// Its content goes to the pending spool.
    pub(super) fn keep_pending(
        &mut self,
        st: &mut LayerState,
        seq: u64,
        deferred: bool,
        parts: Parts,
        data: &mut dyn Read,
    ) -> Result<()> {
        let data: &mut dyn Read = if parts.kind == Kind::File {
            data
        } else {
            &mut io::empty()
        };
        let offset = append_to_spool(&mut self.pending_spool, &self.spool_dir, data, &st.digest)?;
        st.kept.insert(parts.path.clone());
        self.pending.push(Pending {
            layer: self.layer,
            seq,
            digest: st.digest.clone(),
            deferred,
            offset,
            parts,
        });
        Ok(())
    }

    /// Defers an entry whose parents the lower layers decide; later entries
    /// it may replace are held back until it is placed.
    pub(super) fn defer(
        &mut self,
        st: &mut LayerState,
        seq: u64,
        parts: Parts,
        data: &mut dyn Read,
    ) -> Result<()> {
        let (_, name) = split_parent(&parts.path);
        self.pending_names.insert(name.to_vec());
        if parts.kind != Kind::Dir {
            self.pending_subtrees.insert(name.to_vec());
        }
        self.stats.deferred += 1;
        self.keep_pending(st, seq, true, parts, data)
    }

    /// Places the deferred and held entries: first every deferred entry's
    /// parents are resolved, from the bottom layer up (each layer sees the
    /// ones below it placed), then all are placed from the top down, so
    /// that upper entries win as everywhere else.
    pub(super) fn place_pending(&mut self) -> Result<()> {
        let mut pending = std::mem::take(&mut self.pending);
        pending.sort_by_key(|p| (std::cmp::Reverse(p.layer), p.seq));
        for p in pending.iter_mut().filter(|p| p.deferred) {
            p.parts.path = self.resolve(&p.digest, &p.parts.raw, p.layer, p.seq, &p.parts.path)?;
            self.define_pending(&p.parts, p.layer, p.seq);
        }
        pending.sort_by_key(|p| (p.layer, p.seq));
        // An entry of one layer that a later one of the same layer undoes
        // (the same path reached through symlinks, or a non-directory at a
        // parent) is gone, as on extraction.
        let emitted = |p: &[u8]| self.emitted_other(p);
        let undone: HashSet<usize> = pending
            .iter()
            .enumerate()
            .filter(|(_, p)| {
                self.defs.undone_later(
                    &emitted,
                    p.layer,
                    p.seq,
                    &p.parts.path,
                    p.parts.kind == Kind::Dir,
                )
            })
            .map(|(i, _)| i)
            .collect();
        let mut spool = self.pending_spool.take();
        let mut placed_files: HashSet<usize> = HashSet::new();
        for (i, p) in pending.iter().enumerate() {
            if undone.contains(&i) {
                self.stats.shadowed += 1;
                if p.parts.kind != Kind::Dir {
                    // Undone itself, it still replaced the lower subtree.
                    keep_topmost(&mut self.hidden, p.parts.path.clone(), p.layer);
                }
                continue;
            }
            let mut st = LayerState::new(&p.digest, false);
            if p.parts.kind == Kind::Link {
                if let Some(q) = self.shadowed_link_target(&pending, p, &placed_files) {
                    // Its target of the same layer was shadowed: this name
                    // keeps the old content, as a regular file.
                    let q = &pending[q];
                    let size = q.parts.header.entry_size().unwrap_or(0);
                    let mut content = spooled(&mut spool, q.offset, size, &self.spool_dir)?;
                    let parts = Parts {
                        raw: p.parts.raw.clone(),
                        path: p.parts.path.clone(),
                        kind: Kind::File,
                        header: q.parts.header.clone(),
                        pax: q.parts.pax.clone(),
                        link: Vec::new(),
                    };
                    self.place(&mut st, (p.layer, p.seq), &parts, &mut content)?;
                    continue;
                }
            }
            let size = if p.parts.kind == Kind::File {
                p.parts.header.entry_size().unwrap_or(0)
            } else {
                0
            };
            let mut data = spooled(&mut spool, p.offset, size, &self.spool_dir)?;
            self.place(&mut st, (p.layer, p.seq), &p.parts, &mut data)?;
            if self
                .emitted
                .get(&p.parts.path)
                .is_some_and(|e| e.layer == p.layer && e.seq == p.seq)
            {
                placed_files.insert(i);
            }
        }
        Ok(())
    }
}
