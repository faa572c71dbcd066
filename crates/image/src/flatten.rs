//! Flattening a layer stack into one tar stream, top layer first.
//!
//! OCI layers are diffs: an upper layer's entries replace lower ones, and its
//! whiteouts (`.wh.NAME`, `.wh..wh..opq`) delete lower ones. Instead of
//! extracting every layer to disk, berth reads the layers from the top down and
//! emits each path the first time it is seen: an entry already emitted by an
//! upper layer, deleted by an upper whiteout, or under an upper opaque
//! directory is skipped. Every layer is read exactly once and nothing is
//! unpacked; the output goes straight to the squashfs writer, which accepts
//! entries in any order (parents after children, hard links before targets).
//!
//! Path safety (the classic container CVEs) is enforced here: names with `..`
//! or a leading `/`, entries below a symlink or file of the same or a lower
//! layer, and hard links with `..`, absolute targets, or targets reached
//! through a symlink are refused with an error naming the entry.
//!
//! One subtlety of top-down order: a lower layer may hold a hard link to a
//! file that an upper layer overwrote. The link must keep the *old* content, so
//! shadowed regular files are spooled to a temporary file while their layer is
//! read, and a later hard link to one becomes a regular file with that content.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use tar::{EntryType, Header};

use crate::error::{Error, Result};

/// What kind of entry a path holds in the flattened tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
    Symlink,
    /// A hard link; its target is a file.
    Link,
    Other,
    /// A device node that was dropped (a rootless runtime cannot use it).
    Dropped,
}

impl Kind {
    fn of(t: EntryType) -> Option<Kind> {
        Some(match t {
            EntryType::Directory => Kind::Dir,
            EntryType::Regular | EntryType::Continuous => Kind::File,
            EntryType::Symlink => Kind::Symlink,
            EntryType::Link => Kind::Link,
            EntryType::Fifo => Kind::Other,
            EntryType::Char | EntryType::Block => Kind::Dropped,
            _ => return None,
        })
    }
}

/// Where a path was emitted: its kind and the layer (0 = topmost).
#[derive(Debug, Clone, Copy)]
struct Emitted {
    kind: Kind,
    layer: usize,
}

/// A regular file of the current layer that an upper layer shadows, spooled
/// in case a later hard link of the same layer needs its content.
#[derive(Debug, Clone)]
struct Spooled {
    offset: u64,
    header: Header,
    pax: Vec<(String, Vec<u8>)>,
}

/// Counters reported after flattening.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FlattenStats {
    /// Entries written to the output.
    pub entries: u64,
    /// Entries skipped because an upper layer replaced or deleted them.
    pub shadowed: u64,
    /// Whiteout markers applied.
    pub whiteouts: u64,
    /// Device nodes dropped, with their paths.
    pub dropped_devices: Vec<String>,
    /// Bytes of file content written.
    pub bytes: u64,
}

/// Flattens layers into one tar stream. Feed layers with
/// [`Flattener::add_layer`] from the top layer down, then call
/// [`Flattener::finish`].
pub struct Flattener<W: Write> {
    out: tar::Builder<W>,
    emitted: HashMap<Vec<u8>, Emitted>,
    /// Ancestors of emitted paths (they must stay directories), with the
    /// entry and layer that first needed each.
    implied_dirs: HashMap<Vec<u8>, (Vec<u8>, String)>,
    /// Paths deleted by whiteouts of the layers above the current one.
    hidden: HashSet<Vec<u8>>,
    /// Directories whose lower contents are hidden (opaque).
    opaque: HashSet<Vec<u8>>,
    /// Hard link targets that must exist once every layer is read.
    link_targets: Vec<(Vec<u8>, Vec<u8>, String)>,
    spool_dir: std::path::PathBuf,
    layer: usize,
    stats: FlattenStats,
}

/// State of the layer being read.
struct LayerState {
    digest: String,
    pending_hidden: HashSet<Vec<u8>>,
    pending_opaque: HashSet<Vec<u8>>,
    /// Paths this layer listed so far (emitted or shadowed): hard links of
    /// this layer may only point to these, or to lower layers.
    seen: HashSet<Vec<u8>>,
    spooled: HashMap<Vec<u8>, Spooled>,
    /// Shadowed files already materialised under another name.
    materialised: HashMap<Vec<u8>, Vec<u8>>,
    spool: Option<File>,
}

fn unsafe_entry(layer: &str, entry: &[u8], reason: impl Into<String>) -> Error {
    Error::UnsafeEntry {
        layer: layer.to_string(),
        entry: String::from_utf8_lossy(entry).into_owned(),
        reason: reason.into(),
    }
}

/// Normalises an entry name: strips `./` prefixes, `.` components and
/// trailing slashes. `..` components and absolute names are refused.
/// The root itself normalises to an empty name.
pub fn normalize(layer: &str, raw: &[u8]) -> Result<Vec<u8>> {
    if raw.first() == Some(&b'/') {
        return Err(unsafe_entry(layer, raw, "is an absolute name"));
    }
    let mut out: Vec<u8> = Vec::with_capacity(raw.len());
    for comp in raw.split(|b| *b == b'/') {
        match comp {
            b"" | b"." => continue,
            b".." => return Err(unsafe_entry(layer, raw, "contains `..`")),
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
fn ancestors(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    path.iter()
        .enumerate()
        .filter(|(_, b)| **b == b'/')
        .map(move |(i, _)| &path[..i])
}

fn split_parent(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|b| *b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (b"", path),
    }
}

fn join(parent: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = parent.to_vec();
    if !p.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

fn as_path(bytes: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(bytes))
}

fn io_err(layer: &str, e: io::Error) -> Error {
    // Typed errors of the blob reader (network, integrity) travel inside the
    // io::Error; anything else is a malformed stream.
    crate::layer::from_io(e, |e| {
        Error::BadImage(format!("layer {layer}: cannot read the tar stream: {e}"))
    })
}

impl<W: Write> Flattener<W> {
    /// A flattener writing to `out`; shadowed files are spooled in `spool_dir`.
    pub fn new(out: W, spool_dir: &Path) -> Self {
        let mut builder = tar::Builder::new(out);
        builder.mode(tar::HeaderMode::Complete);
        Self {
            out: builder,
            emitted: HashMap::new(),
            implied_dirs: HashMap::new(),
            hidden: HashSet::new(),
            opaque: HashSet::new(),
            link_targets: Vec::new(),
            spool_dir: spool_dir.to_path_buf(),
            layer: 0,
            stats: FlattenStats::default(),
        }
    }

    /// Whether an upper layer hides `path` from the current layer.
    fn hidden_by_upper(&self, path: &[u8]) -> bool {
        if self.hidden.contains(path) {
            return true;
        }
        for anc in ancestors(path) {
            if self.hidden.contains(anc) || self.opaque.contains(anc) {
                return true;
            }
            if let Some(e) = self.emitted.get(anc) {
                if e.kind != Kind::Dir && e.layer < self.layer {
                    // An upper layer replaced this directory with a non-directory.
                    return true;
                }
            }
        }
        false
    }

    /// Refuses `path` if a parent is a non-directory of this or a lower layer
    /// (writing there would follow a symlink out of the root).
    fn check_parents(&self, st: &LayerState, raw: &[u8], path: &[u8]) -> Result<()> {
        for anc in ancestors(path) {
            if let Some(e) = self.emitted.get(anc) {
                if e.kind != Kind::Dir {
                    let what = if e.kind == Kind::Symlink {
                        "a symlink"
                    } else {
                        "not a directory"
                    };
                    return Err(unsafe_entry(
                        &st.digest,
                        raw,
                        format!(
                            "lies below {:?}, which is {what}",
                            String::from_utf8_lossy(anc)
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Reads one layer's (decompressed) tar stream. Layers must come from the
    /// top down. `digest` names the layer in errors.
    pub fn add_layer(&mut self, digest: &str, tar_stream: impl Read) -> Result<()> {
        let mut st = LayerState {
            digest: digest.to_string(),
            pending_hidden: HashSet::new(),
            pending_opaque: HashSet::new(),
            seen: HashSet::new(),
            spooled: HashMap::new(),
            materialised: HashMap::new(),
            spool: None,
        };
        let mut archive = tar::Archive::new(tar_stream);
        let entries = archive.entries().map_err(|e| io_err(digest, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io_err(digest, e))?;
            self.add_entry(&mut st, entry)?;
        }
        // Let the caller hash the whole stream: drain what follows the
        // end-of-archive marker.
        let mut rest = archive.into_inner();
        io::copy(&mut rest, &mut io::sink()).map_err(|e| io_err(digest, e))?;
        self.hidden.extend(st.pending_hidden);
        self.opaque.extend(st.pending_opaque);
        self.layer += 1;
        Ok(())
    }

    fn add_entry<R: Read>(
        &mut self,
        st: &mut LayerState,
        mut entry: tar::Entry<'_, R>,
    ) -> Result<()> {
        let raw = entry.path_bytes().into_owned();
        let path = normalize(&st.digest, &raw)?;
        let entry_type = entry.header().entry_type();
        let (parent, name) = split_parent(&path);

        // Whiteouts: apply to lower layers only, once this layer is done.
        if let Some(target) = name.strip_prefix(b".wh.") {
            self.stats.whiteouts += 1;
            if target == b".wh..opq" {
                st.pending_opaque.insert(parent.to_vec());
            } else if !target.starts_with(b".wh.") && !target.is_empty() {
                st.pending_hidden.insert(join(parent, target));
            }
            return Ok(());
        }

        if entry_type == EntryType::XGlobalHeader {
            return Ok(());
        }
        let Some(kind) = Kind::of(entry_type) else {
            // PAX/GNU metadata records are consumed by the reader; anything
            // else (sparse, volume labels) is not part of a container image.
            return Err(Error::BadImage(format!(
                "layer {}: entry {:?} has an unsupported tar type {:?}",
                st.digest,
                String::from_utf8_lossy(&raw),
                entry_type
            )));
        };

        let shadowed = self.hidden_by_upper(&path)
            || self
                .emitted
                .get(&path)
                .is_some_and(|e| e.layer < self.layer);
        if shadowed {
            self.stats.shadowed += 1;
            st.seen.insert(path.clone());
            if kind != Kind::Dir {
                // Though replaced itself, this non-directory replaced what
                // lower layers had at this path, subtree included.
                st.pending_hidden.insert(path.clone());
            }
            if kind == Kind::File {
                self.spool(st, &path, &mut entry)?;
            }
            return Ok(());
        }
        if let Some(e) = self.emitted.get(&path) {
            // Listed twice in one layer: tolerate repeated directories.
            if e.kind == Kind::Dir && kind == Kind::Dir {
                return Ok(());
            }
            return Err(Error::BadImage(format!(
                "layer {}: entry {:?} appears twice",
                st.digest,
                String::from_utf8_lossy(&raw)
            )));
        }
        self.check_parents(st, &raw, &path)?;
        if kind != Kind::Dir {
            if let Some((child, layer)) = self.implied_dirs.get(&path) {
                let what = if kind == Kind::Symlink {
                    "a symlink"
                } else {
                    "not a directory"
                };
                let where_ = if *layer == st.digest {
                    "in the same layer".to_string()
                } else {
                    format!("in lower layer {}", st.digest)
                };
                return Err(unsafe_entry(
                    layer,
                    child,
                    format!(
                        "lies below {:?}, which is {what} {where_} (writing there would follow it)",
                        String::from_utf8_lossy(&path)
                    ),
                ));
            }
        }
        st.seen.insert(path.clone());

        let pax = pax_records(&mut entry, &st.digest)?;
        match kind {
            Kind::Dropped => {
                self.stats
                    .dropped_devices
                    .push(String::from_utf8_lossy(&path).into_owned());
                tracing::warn!(
                    "dropping device node /{} (a rootless container cannot use it)",
                    String::from_utf8_lossy(&path)
                );
            }
            Kind::Link => {
                let target_raw = entry
                    .link_name_bytes()
                    .map(|c| c.into_owned())
                    .unwrap_or_default();
                if target_raw.first() == Some(&b'/') {
                    return Err(unsafe_entry(
                        &st.digest,
                        &raw,
                        "is a hard link to an absolute path",
                    ));
                }
                if target_raw.split(|b| *b == b'/').any(|c| c == b"..") {
                    return Err(unsafe_entry(
                        &st.digest,
                        &raw,
                        "is a hard link whose target contains `..`",
                    ));
                }
                let target = normalize(&st.digest, &target_raw)?;
                self.emit_link(st, &raw, &path, &target, entry.header(), &pax)?;
            }
            _ => {
                let mut header = entry.header().clone();
                // The PAX-aware link target (the header's field may hold an
                // ASCII fallback).
                let target = entry
                    .link_name_bytes()
                    .map(|c| c.into_owned())
                    .unwrap_or_default();
                self.write_entry(&mut header, &path, &target, &pax, kind, &mut entry)?;
            }
        }
        self.record(path, kind, &raw, &st.digest);
        Ok(())
    }

    fn record(&mut self, path: Vec<u8>, kind: Kind, raw: &[u8], layer: &str) {
        for anc in ancestors(&path) {
            if !self.implied_dirs.contains_key(anc) {
                self.implied_dirs
                    .insert(anc.to_vec(), (raw.to_vec(), layer.to_string()));
            }
        }
        self.emitted.insert(
            path,
            Emitted {
                kind,
                layer: self.layer,
            },
        );
    }

    fn emit_link(
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
                // A link to a file of a lower layer: checked once all layers are read.
                self.link_targets
                    .push((path.to_vec(), target.to_vec(), st.digest.clone()));
            }
        }
        self.write_hardlink(header, path, target, pax)
    }

    fn write_hardlink(
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

    fn spool<R: Read>(
        &mut self,
        st: &mut LayerState,
        path: &[u8],
        entry: &mut tar::Entry<'_, R>,
    ) -> Result<()> {
        if st.spool.is_none() {
            let f = tempfile::tempfile_in(&self.spool_dir)
                .map_err(|e| Error::store("create spool file in", &self.spool_dir, e))?;
            st.spool = Some(f);
        }
        let pax = pax_records(entry, &st.digest)?;
        let header = entry.header().clone();
        let Some(spool) = st.spool.as_mut() else {
            return Ok(());
        };
        let offset = spool
            .seek(SeekFrom::End(0))
            .map_err(|e| Error::store("write spool", &self.spool_dir, e))?;
        io::copy(entry, spool).map_err(|e| io_err(&st.digest, e))?;
        st.spooled.insert(
            path.to_vec(),
            Spooled {
                offset,
                header,
                pax,
            },
        );
        Ok(())
    }

    fn write_entry(
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
            write_with_pax(&mut self.out, header, path, pax, data)
        };
        res.map_err(|e| self.write_error(e))?;
        self.stats.entries += 1;
        self.stats.bytes += size;
        Ok(())
    }

    fn write_error(&self, e: io::Error) -> Error {
        if e.kind() == io::ErrorKind::BrokenPipe {
            Error::HostTool(
                "the squashfs writer (tar2sqfs) exited early; see its message above".to_string(),
            )
        } else {
            Error::BadImage(format!("cannot write the flattened stream: {e}"))
        }
    }

    /// Checks pending hard links, writes the end of the archive and returns
    /// the output and the counters.
    pub fn finish(mut self) -> Result<(W, FlattenStats)> {
        for (path, target, layer) in &self.link_targets {
            match self.emitted.get(target) {
                Some(e) if matches!(e.kind, Kind::File | Kind::Link | Kind::Symlink | Kind::Other) => {}
                _ => {
                    return Err(Error::BadImage(format!(
                        "layer {layer}: hard link {:?} points to {:?}, which no layer provides as a file",
                        String::from_utf8_lossy(path),
                        String::from_utf8_lossy(target)
                    )))
                }
            }
        }
        self.out.finish().map_err(|e| self.write_error(e))?;
        let stats = std::mem::take(&mut self.stats);
        let out = self
            .out
            .into_inner()
            .map_err(|e| Error::BadImage(format!("cannot finish the flattened stream: {e}")))?;
        Ok((out, stats))
    }
}

/// The PAX records worth keeping (extended attributes); the reader already
/// applied path, linkpath and size.
fn pax_records<R: Read>(
    entry: &mut tar::Entry<'_, R>,
    layer: &str,
) -> Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    if let Some(exts) = entry.pax_extensions().map_err(|e| io_err(layer, e))? {
        for ext in exts {
            let ext = ext.map_err(|e| io_err(layer, e))?;
            let Ok(key) = ext.key() else { continue };
            if key.starts_with("SCHILY.xattr.") || key.starts_with("LIBARCHIVE.xattr.") {
                out.push((key.to_string(), ext.value_bytes().to_vec()));
            }
        }
    }
    Ok(out)
}

fn write_with_pax<W: Write>(
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
fn append_pax<W: Write>(out: &mut tar::Builder<W>, pax: &[(String, Vec<u8>)]) -> io::Result<()> {
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

#[cfg(test)]
mod tests;
