//! Hard links: a link to a file an upper layer overwrote keeps the old
//! content (the file is spooled while its layer is read, and the link
//! becomes a regular file); a link never reaches through a symlink.

use std::collections::HashSet;
use std::io::{Read, Seek, SeekFrom, Write};

use tar::Header;

use super::emit::{append_pax, write_with_pax};
use super::paths::{ancestors, as_path, normalize, unsafe_entry};
use super::pending::append_to_spool;
use super::{Flattener, Kind, LayerState, Pending, Spooled};
use crate::error::{Error, Result};

impl<W: Write> Flattener<W> {
    pub(super) fn emit_link(
        &mut self,
        st: &mut LayerState,
        raw: &[u8],
        path: &[u8],
        target: &[u8],
        header: &Header,
        pax: &[(String, Vec<u8>)],
    ) -> Result<()> {
        if target.is_empty() {
            return Err(unsafe_entry(
                &st.digest,
                raw,
                "is a hard link to the root directory",
            ));
        }
        // The target must not be reached through a symlink of this or a
        // lower layer: the link would alias a file outside the root.
        for anc in ancestors(target) {
            if let Some(e) = self.emitted.get(anc) {
                if e.kind == Kind::Symlink {
                    return Err(unsafe_entry(
                        &st.digest,
                        raw,
                        format!(
                            "is a hard link through the symlink {:?}",
                            String::from_utf8_lossy(anc)
                        ),
                    ));
                }
            }
        }
        if let Some(alias) = st.materialised.get(target).cloned() {
            return self.write_hardlink(header, path, &alias, pax);
        }
        if let Some(sp) = st.spooled.get(target).cloned() {
            // The target of this layer was replaced by an upper layer: this
            // name keeps the old content, as a regular file.
            let spool = st
                .spool
                .as_mut()
                .ok_or_else(|| Error::BadImage("internal: spool missing".to_string()))?;
            spool
                .seek(SeekFrom::Start(sp.offset))
                .map_err(|e| Error::store("read spool", &self.spool_dir, e))?;
            let size = sp.header.entry_size().unwrap_or(0);
            let mut h = sp.header.clone();
            let mut reader = spool.take(size);
            write_with_pax(&mut self.out, &mut h, path, &sp.pax, &mut reader)
                .map_err(|e| self.write_error(e))?;
            self.stats.entries += 1;
            self.stats.bytes += size;
            st.materialised.insert(target.to_vec(), path.to_vec());
            return Ok(());
        }
        match self.emitted.get(target) {
            Some(e) if e.kind == Kind::Dir => {
                return Err(unsafe_entry(
                    &st.digest,
                    raw,
                    "is a hard link to a directory",
                ));
            }
            Some(e) if e.kind == Kind::Dropped => {
                self.stats
                    .dropped_devices
                    .push(String::from_utf8_lossy(path).into_owned());
                return Ok(());
            }
            Some(_) => {}
            None if st.seen.contains(target) => {}
            None => {
                // A link to a file of a lower layer, or to one placed at the
                // end: checked once all layers are read.
                self.link_targets
                    .push((path.to_vec(), target.to_vec(), st.digest.clone()));
            }
        }
        self.write_hardlink(header, path, target, pax)
    }

    pub(super) fn write_hardlink(
        &mut self,
        header: &Header,
        path: &[u8],
        target: &[u8],
        pax: &[(String, Vec<u8>)],
    ) -> Result<()> {
        let mut h = header.clone();
        h.set_size(0);
        append_pax(&mut self.out, pax).map_err(|e| self.write_error(e))?;
        self.out
            .append_link(&mut h, as_path(path), as_path(target))
            .map_err(|e| self.write_error(e))?;
        self.stats.entries += 1;
        Ok(())
    }

    pub(super) fn spool(
        &mut self,
        st: &mut LayerState,
        path: &[u8],
        header: &Header,
        pax: &[(String, Vec<u8>)],
        data: &mut dyn Read,
    ) -> Result<()> {
        let offset = append_to_spool(&mut st.spool, &self.spool_dir, data, &st.digest)?;
        st.spooled.insert(
            path.to_vec(),
            Spooled {
                offset,
                header: header.clone(),
                pax: pax.to_vec(),
            },
        );
        Ok(())
    }

    /// For a pending hard link: the pending file of its layer it points to,
    /// when that file was not written (an upper layer shadowed it).
    pub(super) fn shadowed_link_target(
        &self,
        pending: &[Pending],
        link: &Pending,
        placed: &HashSet<usize>,
    ) -> Option<usize> {
        let target = normalize(&link.digest, &link.parts.link).ok()?;
        let q = pending.iter().position(|q| {
            q.layer == link.layer
                && q.seq < link.seq
                && q.parts.kind == Kind::File
                && q.parts.path == target
        })?;
        (!placed.contains(&q)).then_some(q)
    }
}
