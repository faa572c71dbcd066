//! Flattening a layer stack into one tar stream, top layer first.
//!
//! OCI layers are diffs: an upper layer's entries replace lower ones, and its
//! whiteouts (`.wh.NAME`, `.wh..wh..opq`: [`crate::whiteout`]) delete lower ones. Instead of
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
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;

use tar::{EntryType, Header};

use crate::error::{Error, Result};
use crate::whiteout::Whiteout;

mod emit;
mod hardlinks;
mod paths;
mod pending;
mod resolve;
mod stream;

pub use paths::normalize;

use paths::{ancestors, join, keep_topmost, split_parent, unsafe_entry};
use resolve::Defs;
use stream::{io_err, pax_records, PadLastBlock};

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
        if let Some(whiteout) = Whiteout::of(name) {
            self.stats.whiteouts += 1;
            match whiteout {
                Whiteout::Opaque => {
                    st.pending_opaque.insert(parent.to_vec());
                    self.defs.opaque(parent, self.layer);
                }
                Whiteout::Remove(target) => {
                    let gone = join(parent, target);
                    self.defs.whiteout(&gone, self.layer);
                    st.pending_hidden.insert(gone);
                }
                Whiteout::Reserved => {}
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

#[cfg(test)]
mod tests;
