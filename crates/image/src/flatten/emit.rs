//! Placing an entry at its final path, unless an upper layer shadows it,
//! and writing it to the output.

use std::collections::HashMap;
use std::io::{self, Read, Write};

use tar::{EntryType, Header};

use super::paths::{ancestors, as_path, keep_topmost, normalize, unsafe_entry};
use super::stream::Counted;
use super::{Emitted, Flattener, Kind, LayerState, Parts};
use crate::error::{Error, Result};

impl<W: Write> Flattener<W> {
    /// Whether an upper layer (one above `layer`) hides `path`.
    pub(super) fn hidden_by_upper(&self, path: &[u8], layer: usize) -> bool {
        let above = |m: &HashMap<Vec<u8>, usize>, p: &[u8]| m.get(p).is_some_and(|l| *l < layer);
        if above(&self.hidden, path) {
            return true;
        }
        for anc in ancestors(path) {
            if above(&self.hidden, anc) || above(&self.opaque, anc) {
                return true;
            }
            if let Some(e) = self.emitted.get(anc) {
                if e.kind != Kind::Dir && e.layer < layer {
                    // An upper layer replaced this directory with a non-directory.
                    return true;
                }
            }
        }
        false
    }

    /// Refuses `path` if a parent is a non-directory of this or a lower layer
    /// (writing there would follow a symlink out of the root).
    pub(super) fn check_parents(&self, digest: &str, raw: &[u8], path: &[u8]) -> Result<()> {
        for anc in ancestors(path) {
            if let Some(e) = self.emitted.get(anc) {
                if e.kind != Kind::Dir {
                    return Err(unsafe_entry(
                        digest,
                        raw,
                        format!(
                            "lies below {:?}, which is {}",
                            String::from_utf8_lossy(anc),
                            e.kind.describe()
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Emits an entry at its final path unless an upper layer shadows it.
    pub(super) fn place(
        &mut self,
        st: &mut LayerState,
        (layer, seq): (usize, u64),
        p: &Parts,
        data: &mut dyn Read,
    ) -> Result<()> {
        let path = &p.path[..];
        let shadowed = self.hidden_by_upper(path, layer)
            || self.emitted.get(path).is_some_and(|e| e.layer < layer);
        if shadowed {
            self.stats.shadowed += 1;
            if !matches!(p.kind, Kind::Dir | Kind::Symlink) {
                self.defs.other(path, layer, seq);
            }
            st.seen.insert(path.to_vec());
            for anc in ancestors(path) {
                if !self.emitted.contains_key(anc) && !self.implied_dirs.contains_key(anc) {
                    keep_topmost(&mut self.shadowed_parents, anc.to_vec(), layer);
                }
            }
            if p.kind != Kind::Dir {
                // Though replaced itself, this non-directory replaced what
                // lower layers had at this path, subtree included.
                if st.streaming {
                    st.pending_hidden.insert(path.to_vec());
                } else {
                    keep_topmost(&mut self.hidden, path.to_vec(), layer);
                }
            }
            if p.kind == Kind::File && st.streaming {
                self.spool(st, path, &p.header, &p.pax, data)?;
            }
            return Ok(());
        }
        if let Some(e) = self.emitted.get(path) {
            // Listed twice in one layer: tolerate repeated directories.
            if e.kind == Kind::Dir && p.kind == Kind::Dir {
                return Ok(());
            }
            if !st.streaming {
                // A deferred entry reached an earlier, already written
                // entry of its own layer through a symlink.
                return Err(Error::BadImage(format!(
                    "layer {}: entry {:?} lands on {:?} through a symlink, where an earlier entry of the same layer is; berth cannot replace an entry it has written",
                    st.digest,
                    String::from_utf8_lossy(&p.raw),
                    String::from_utf8_lossy(path)
                )));
            }
            return Err(Error::BadImage(format!(
                "layer {}: entry {:?} appears twice",
                st.digest,
                String::from_utf8_lossy(&p.raw)
            )));
        }
        self.check_parents(&st.digest, &p.raw, path)?;
        if p.kind != Kind::Dir {
            if let Some((child, layer)) = self.implied_dirs.get(path) {
                let where_ = if *layer == st.digest {
                    "in the same layer".to_string()
                } else {
                    format!("in lower layer {}", st.digest)
                };
                return Err(unsafe_entry(
                    layer,
                    child,
                    format!(
                        "lies below {:?}, which is {} {where_} (writing there would follow it)",
                        String::from_utf8_lossy(path),
                        p.kind.describe()
                    ),
                ));
            }
        }
        st.seen.insert(path.to_vec());

        match p.kind {
            Kind::Dropped => {
                self.stats
                    .dropped_devices
                    .push(String::from_utf8_lossy(path).into_owned());
                tracing::warn!(
                    "dropping device node /{} (a rootless container cannot use it)",
                    String::from_utf8_lossy(path)
                );
            }
            Kind::Link => {
                let target = normalize(&st.digest, &p.link).map_err(|_| {
                    unsafe_entry(
                        &st.digest,
                        &p.raw,
                        "is a hard link whose target climbs above the root",
                    )
                })?;
                self.emit_link(st, &p.raw, path, &target, &p.header, &p.pax)?;
            }
            _ => {
                let mut header = p.header.clone();
                self.write_entry(&mut header, path, &p.link, &p.pax, p.kind, data)?;
            }
        }
        self.record(path.to_vec(), p.kind, &p.raw, &st.digest, (layer, seq));
        Ok(())
    }

    pub(super) fn record(
        &mut self,
        path: Vec<u8>,
        kind: Kind,
        raw: &[u8],
        digest: &str,
        (layer, seq): (usize, u64),
    ) {
        for anc in ancestors(&path) {
            if !self.implied_dirs.contains_key(anc) {
                self.implied_dirs
                    .insert(anc.to_vec(), (raw.to_vec(), digest.to_string()));
            }
        }
        self.emitted.insert(path, Emitted { kind, layer, seq });
    }

    pub(super) fn write_entry(
        &mut self,
        header: &mut Header,
        path: &[u8],
        target: &[u8],
        pax: &[(String, Vec<u8>)],
        kind: Kind,
        data: &mut dyn Read,
    ) -> Result<()> {
        if path.is_empty() {
            // The root directory: tar2sqfs takes `./` as the root's attributes.
            append_pax(&mut self.out, pax).map_err(|e| self.write_error(e))?;
            let mut h = header.clone();
            set_raw_name(&mut h, b"./");
            h.set_size(0);
            h.set_cksum();
            self.out
                .append(&h, io::empty())
                .map_err(|e| self.write_error(e))?;
            self.stats.entries += 1;
            return Ok(());
        }
        let size = if kind == Kind::File {
            header.entry_size().unwrap_or(0)
        } else {
            0
        };
        header.set_size(size);
        let res = if kind == Kind::Symlink {
            append_pax(&mut self.out, pax).map_err(|e| self.write_error(e))?;
            self.out.append_link(header, as_path(path), as_path(target))
        } else {
            let mut counted = Counted {
                inner: data,
                count: 0,
            };
            let res = write_with_pax(&mut self.out, header, path, pax, &mut counted);
            if res.is_ok() && counted.count != size {
                return Err(Error::BadImage(format!(
                    "entry {:?} is truncated: {} of its {size} bytes are there",
                    String::from_utf8_lossy(path),
                    counted.count
                )));
            }
            res
        };
        res.map_err(|e| self.write_error(e))?;
        self.stats.entries += 1;
        self.stats.bytes += size;
        Ok(())
    }

    pub(super) fn write_error(&self, e: io::Error) -> Error {
        if e.kind() == io::ErrorKind::BrokenPipe {
            Error::HostTool(
                "the squashfs writer (tar2sqfs) exited early; see its message above".to_string(),
            )
        } else {
            Error::BadImage(format!("cannot write the flattened stream: {e}"))
        }
    }

    /// Emits the parents only shadowed entries had (see `shadowed_parents`)
    /// as plain directories (0755, root), as an extractor creates them.
    pub(super) fn emit_shadowed_parents(&mut self) -> Result<()> {
        let mut wanted: Vec<(Vec<u8>, usize)> = self.shadowed_parents.drain().collect();
        wanted.sort();
        for (dir, layer) in wanted {
            let below_non_dir =
                ancestors(&dir).any(|a| self.emitted.get(a).is_some_and(|e| e.kind != Kind::Dir));
            if self.emitted.contains_key(&dir)
                || self.implied_dirs.contains_key(&dir)
                || below_non_dir
                || self.hidden_by_upper(&dir, layer)
            {
                continue;
            }
            let mut h = Header::new_gnu();
            h.set_entry_type(EntryType::Directory);
            h.set_mode(0o755);
            h.set_size(0);
            self.write_entry(&mut h, &dir, b"", &[], Kind::Dir, &mut io::empty())?;
            self.record(dir, Kind::Dir, b"", "", (layer, 0));
        }
        Ok(())
    }
}

pub(super) fn write_with_pax<W: Write>(
    out: &mut tar::Builder<W>,
    header: &mut Header,
    path: &[u8],
    pax: &[(String, Vec<u8>)],
    data: &mut dyn Read,
) -> io::Result<()> {
    append_pax(out, pax)?;
    out.append_data(header, as_path(path), data)
}

/// Writes a PAX extended header with `pax` before the next entry (if any).
pub(super) fn append_pax<W: Write>(
    out: &mut tar::Builder<W>,
    pax: &[(String, Vec<u8>)],
) -> io::Result<()> {
    if pax.is_empty() {
        return Ok(());
    }
    let refs: Vec<(&str, &[u8])> = pax
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_slice()))
        .collect();
    out.append_pax_extensions(refs)
}

fn set_raw_name(h: &mut Header, name: &[u8]) {
    let old = h.as_old_mut();
    old.name.fill(0);
    old.name[..name.len()].copy_from_slice(name);
    if let Some(ustar) = h.as_ustar_mut() {
        ustar.prefix.fill(0);
    }
}
