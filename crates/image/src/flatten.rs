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
//! Names are taken as tar and container engines take them: `/`, `.` and `./`
//! are the root directory, a leading `/` is dropped, `.` and `..` components
//! are folded lexically, and a name whose `..` climbs above the root is
//! refused. A parent directory that a lower layer (or an earlier entry of the
//! same layer) made a symlink is followed inside the root, as an extractor
//! applying the layers in order would ([`resolve`]); only a symlink that
//! climbs above the root is refused.
//!
//! Following a lower layer's symlink needs the lower layers, which come later.
//! An entry is therefore emitted at once only when its layer lists each of its
//! parents as a directory before it (every layer docker, podman and buildah
//! write), or when its layer is the bottom one; any other entry is deferred
//! (its content spooled) and placed once every layer is read. While deferred
//! entries wait, lower entries that could land on the same path (same last
//! name, or below a deferred non-directory's name) are held back too, so
//! that upper entries still win.
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

mod resolve;

use resolve::{Defs, Unresolvable};

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

    fn describe(self) -> &'static str {
        if self == Kind::Symlink {
            "a symlink"
        } else {
            "not a directory"
        }
    }
}

/// Where a path was emitted: its kind, the layer (0 = topmost) and the
/// entry's place in the reading order.
#[derive(Debug, Clone, Copy)]
struct Emitted {
    kind: Kind,
    layer: usize,
    seq: u64,
}

/// A regular file of the current layer that an upper layer shadows, spooled
/// in case a later hard link of the same layer needs its content.
#[derive(Debug, Clone)]
struct Spooled {
    offset: u64,
    header: Header,
    pax: Vec<(String, Vec<u8>)>,
}

/// One entry on its way to the output: where it lands and what it is.
#[derive(Debug)]
struct Parts {
    /// The name as written, for messages.
    raw: Vec<u8>,
    /// The normalised name; for a deferred entry, resolved before placing.
    path: Vec<u8>,
    kind: Kind,
    header: Header,
    pax: Vec<(String, Vec<u8>)>,
    /// Symlink or hard link target, as written.
    link: Vec<u8>,
}

/// An entry placed only once every layer is read: deferred (its parents
/// need the lower layers) or held back (a deferred entry may land on it).
#[derive(Debug)]
struct Pending {
    layer: usize,
    seq: u64,
    digest: String,
    deferred: bool,
    /// Offset of the content in the pending spool.
    offset: u64,
    parts: Parts,
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
    /// Entries placed through a symlinked parent of a lower layer, or after
    /// the lower layers because their layer did not list their parents.
    pub deferred: u64,
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
    /// Paths deleted by whiteouts (or replaced by a non-directory), with the
    /// topmost layer that did it: hidden from every layer below that one.
    hidden: HashMap<Vec<u8>, usize>,
    /// Directories whose lower contents are hidden (opaque), likewise.
    opaque: HashMap<Vec<u8>, usize>,
    /// Hard link targets that must exist once every layer is read.
    link_targets: Vec<(Vec<u8>, Vec<u8>, String)>,
    /// Parents of shadowed entries that nothing emitted implies yet, with
    /// the entry's layer: an extractor made them before the entry was
    /// deleted, so they exist unless an upper layer removed them.
    shadowed_parents: HashMap<Vec<u8>, usize>,
    /// Directories and symlinks of every layer, for resolving parents.
    defs: Defs,
    /// Entries placed by [`Flattener::finish`], in reading order.
    pending: Vec<Pending>,
    /// Their content.
    pending_spool: Option<File>,
    /// Last names of deferred entries: a later entry of that name is held.
    pending_names: HashSet<Vec<u8>>,
    /// Last names of deferred non-directories: a later entry with a
    /// component of that name is held (it may lie below one).
    pending_subtrees: HashSet<Vec<u8>>,
    spool_dir: std::path::PathBuf,
    layer: usize,
    /// How many layers there are, when known: the bottom one defers nothing.
    layer_count: Option<usize>,
    seq: u64,
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
    /// Directories this layer listed whose parents it listed too: an entry
    /// below only these lands at its name whatever the lower layers hold.
    closed_dirs: HashSet<Vec<u8>>,
    spooled: HashMap<Vec<u8>, Spooled>,
    /// Shadowed files already materialised under another name.
    materialised: HashMap<Vec<u8>, Vec<u8>>,
    spool: Option<File>,
    /// Whether the entries come from the layer's stream (shadowed files are
    /// then spooled for its hard links, and its whiteouts wait for its
    /// end), or are placed at the end, when the layer is done.
    streaming: bool,
    /// Paths of this layer kept for the end: a hard link to one waits too.
    kept: HashSet<Vec<u8>>,
}

impl LayerState {
    fn new(digest: &str, streaming: bool) -> Self {
        Self {
            digest: digest.to_string(),
            pending_hidden: HashSet::new(),
            pending_opaque: HashSet::new(),
            seen: HashSet::new(),
            closed_dirs: HashSet::new(),
            spooled: HashMap::new(),
            materialised: HashMap::new(),
            spool: None,
            streaming,
            kept: HashSet::new(),
        }
    }
}

fn unsafe_entry(layer: &str, entry: &[u8], reason: impl Into<String>) -> Error {
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
        if e.to_string().contains("unexpected EOF") || e.kind() == io::ErrorKind::UnexpectedEof {
            Error::BadImage(format!(
                "layer {layer} is truncated: its last entry's content ends early ({e})"
            ))
        } else {
            Error::BadImage(format!("layer {layer}: cannot read the tar stream: {e}"))
        }
    })
}

/// Inserts `layer` for `path` unless a higher (smaller) layer is there.
fn keep_topmost(map: &mut HashMap<Vec<u8>, usize>, path: Vec<u8>, layer: usize) {
    map.entry(path)
        .and_modify(|l| *l = (*l).min(layer))
        .or_insert(layer);
}

/// Appends `data` to `spool` (made in `dir` on first use); returns where it
/// starts. `layer` names the stream in errors.
fn append_to_spool(
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
fn spooled<'a>(
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

/// A tar stream whose end, when it falls inside a 512-byte block, is padded
/// with zeros to the block's end, so the tar reader sees the missing
/// padding of a last entry as present; [`PadLastBlock::padded_from`] tells
/// whether that happened and where the real stream ended.
struct PadLastBlock<R> {
    inner: R,
    pos: u64,
    /// Where the real stream ended, once padding was supplied.
    real_end: Option<u64>,
    pad_left: usize,
}

impl<R: Read> PadLastBlock<R> {
    fn new(inner: R) -> Self {
        Self {
            inner,
            pos: 0,
            real_end: None,
            pad_left: 0,
        }
    }

    fn padded_from(&self) -> Option<u64> {
        self.real_end
    }
}

impl<R: Read> Read for PadLastBlock<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.real_end.is_none() {
            let n = self.inner.read(buf)?;
            if n > 0 {
                self.pos += n as u64;
                return Ok(n);
            }
            let partial = (self.pos % 512) as usize;
            if partial == 0 {
                return Ok(0);
            }
            self.real_end = Some(self.pos);
            self.pad_left = 512 - partial;
        }
        let n = self.pad_left.min(buf.len());
        buf[..n].fill(0);
        self.pad_left -= n;
        Ok(n)
    }
}

/// Counts what is read through it, to tell a short entry from a whole one.
struct Counted<'a> {
    inner: &'a mut dyn Read,
    count: u64,
}

impl Read for Counted<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count += n as u64;
        Ok(n)
    }
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
            hidden: HashMap::new(),
            opaque: HashMap::new(),
            link_targets: Vec::new(),
            shadowed_parents: HashMap::new(),
            defs: Defs::default(),
            pending: Vec::new(),
            pending_spool: None,
            pending_names: HashSet::new(),
            pending_subtrees: HashSet::new(),
            spool_dir: spool_dir.to_path_buf(),
            layer: 0,
            layer_count: None,
            seq: 0,
            stats: FlattenStats::default(),
        }
    }

    /// Says how many layers will be added: entries of the bottom one never
    /// wait for lower layers (there are none), so none is deferred.
    pub fn expect_layers(&mut self, count: usize) {
        self.layer_count = Some(count);
    }

    fn is_bottom_layer(&self) -> bool {
        self.layer_count == Some(self.layer + 1)
    }

    /// Whether an upper layer (one above `layer`) hides `path`.
    fn hidden_by_upper(&self, path: &[u8], layer: usize) -> bool {
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
    fn check_parents(&self, digest: &str, raw: &[u8], path: &[u8]) -> Result<()> {
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

    /// Reads one layer's (decompressed) tar stream. Layers must come from the
    /// top down. `digest` names the layer in errors.
    pub fn add_layer(&mut self, digest: &str, tar_stream: impl Read) -> Result<()> {
        let mut st = LayerState::new(digest, true);
        let mut archive = tar::Archive::new(PadLastBlock::new(tar_stream));
        let entries = archive.entries().map_err(|e| io_err(digest, e))?;
        // Where the last entry's content ends in the stream.
        let mut data_end = 0;
        for entry in entries {
            let entry = entry.map_err(|e| io_err(digest, e))?;
            data_end = entry.raw_file_position() + entry.header().entry_size().unwrap_or(0);
            self.add_entry(&mut st, entry)?;
        }
        // Let the caller hash the whole stream: drain what follows the
        // end-of-archive marker.
        let mut rest = archive.into_inner();
        io::copy(&mut rest, &mut io::sink()).map_err(|e| io_err(digest, e))?;
        // A stream may end without the end-of-archive marker, and even
        // without the last entry's padding (umoci 0.4.7's `insert` writes
        // such layers): it has ended, as Go's archive/tar and GNU tar read
        // it. Padding supplied for anything else (an entry's content or a
        // header cut short) is a truncated layer, as they say too.
        if let Some(real) = rest.padded_from() {
            if real != data_end {
                return Err(Error::BadImage(format!(
                    "layer {digest} is truncated: it ends at byte {real}, inside a tar block"
                )));
            }
        }
        for p in st.pending_hidden {
            keep_topmost(&mut self.hidden, p, self.layer);
        }
        for p in st.pending_opaque {
            keep_topmost(&mut self.opaque, p, self.layer);
        }
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
        self.seq += 1;
        let seq = self.seq;

        // Whiteouts: apply to lower layers only, once this layer is done.
        // They take effect at the name they are written under.
        if let Some(target) = name.strip_prefix(b".wh.") {
            self.stats.whiteouts += 1;
            if target == b".wh..opq" {
                st.pending_opaque.insert(parent.to_vec());
                self.defs.opaque(parent, self.layer);
            } else if !target.starts_with(b".wh.") && !target.is_empty() {
                let gone = join(parent, target);
                self.defs.whiteout(&gone, self.layer);
                st.pending_hidden.insert(gone);
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
        if path.is_empty() && kind != Kind::Dir {
            return Err(unsafe_entry(
                &st.digest,
                &raw,
                "names the root directory but is not a directory",
            ));
        }

        let pax = pax_records(&mut entry, &st.digest)?;
        let header = entry.header().clone();
        // The PAX-aware link target (the header's field may hold an ASCII
        // fallback).
        let link = entry
            .link_name_bytes()
            .map(|c| c.into_owned())
            .unwrap_or_default();

        // Where the entry lands: at its name when this layer listed every
        // parent before it; else through what the layers below hold.
        let closed = ancestors(&path).all(|a| st.closed_dirs.contains(a));
        let mut parts = Parts {
            raw,
            path,
            kind,
            header,
            pax,
            link,
        };
        if !closed {
            if !self.is_bottom_layer() {
                return self.defer(st, seq, parts, &mut entry);
            }
            parts.path = self.resolve(&st.digest, &parts.raw, self.layer, seq, &parts.path)?;
        } else if kind == Kind::Dir {
            st.closed_dirs.insert(parts.path.clone());
        }
        self.define(&parts, self.layer, seq);

        let link_waits = kind == Kind::Link
            && normalize(&st.digest, &parts.link).is_ok_and(|t| st.kept.contains(&t));
        if link_waits || self.may_be_replaced_by_pending(&parts.path) {
            if !matches!(kind, Kind::Dir | Kind::Symlink) {
                self.defs.other(&parts.path, self.layer, seq);
            }
            if kind != Kind::Dir {
                // Whether or not it is placed, it replaced the lower subtree.
                st.pending_hidden.insert(parts.path.clone());
            }
            return self.keep_pending(st, seq, false, parts, &mut entry);
        }
        self.place(st, (self.layer, seq), &parts, &mut entry)
    }

    /// Where an emitted non-directory that is not a symlink is, as
    /// (layer, seq): what [`Defs`] asks of the flattener.
    fn emitted_other(&self, path: &[u8]) -> Option<(usize, u64)> {
        self.emitted
            .get(path)
            .filter(|e| !matches!(e.kind, Kind::Dir | Kind::Symlink))
            .map(|e| (e.layer, e.seq))
    }

    /// Records a directory or symlink for resolving later entries' parents.
    fn define(&mut self, parts: &Parts, layer: usize, seq: u64) {
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
    fn define_pending(&mut self, parts: &Parts, layer: usize, seq: u64) {
        if matches!(parts.kind, Kind::Dir | Kind::Symlink) {
            self.define(parts, layer, seq);
        } else {
            self.defs.other(&parts.path, layer, seq);
        }
    }

    fn resolve(
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
    fn may_be_replaced_by_pending(&self, path: &[u8]) -> bool {
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
    fn keep_pending(
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
    fn defer(
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

    /// Emits an entry at its final path unless an upper layer shadows it.
    fn place(
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

    fn record(
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
                // A link to a file of a lower layer, or to one placed at the
                // end: checked once all layers are read.
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

    fn spool(
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

    fn write_error(&self, e: io::Error) -> Error {
        if e.kind() == io::ErrorKind::BrokenPipe {
            Error::HostTool(
                "the squashfs writer (tar2sqfs) exited early; see its message above".to_string(),
            )
        } else {
            Error::BadImage(format!("cannot write the flattened stream: {e}"))
        }
    }

    /// Places the deferred and held entries: first every deferred entry's
    /// parents are resolved, from the bottom layer up (each layer sees the
    /// ones below it placed), then all are placed from the top down, so
    /// that upper entries win as everywhere else.
    fn place_pending(&mut self) -> Result<()> {
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

    /// Emits the parents only shadowed entries had (see `shadowed_parents`)
    /// as plain directories (0755, root), as an extractor creates them.
    fn emit_shadowed_parents(&mut self) -> Result<()> {
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

    /// For a pending hard link: the pending file of its layer it points to,
    /// when that file was not written (an upper layer shadowed it).
    fn shadowed_link_target(
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

    /// Places what waited for the lower layers, checks pending hard links,
    /// writes the end of the archive and returns the output and the counters.
    pub fn finish(mut self) -> Result<(W, FlattenStats)> {
        self.place_pending()?;
        self.emit_shadowed_parents()?;
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
