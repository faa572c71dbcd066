//! The tables of a new image, built from its tree: inodes in the order a
//! directory's entries are needed (children first, the root last),
//! directory listings in runs of one inode block each (a run starts anew
//! where its listing crosses into a new metadata block, and the directory
//! inode indexes those runs by name for lookups in large directories),
//! and the fragment, id and xattr tables with their indexes.

use std::collections::HashMap;
use std::os::unix::fs::FileExt;

use super::compress::BlockCompressor;
use super::meta::{MetaWriter, META_SIZE};
use super::tree::{Content, FileData, NodeId, Tree, Xattrs, MAX_DEPTH};
use super::Appender;
use crate::reader::{superblock::NO_TABLE, Error, Result};
use std::sync::Arc;

/// No fragment, no xattrs.
const NONE: u32 = u32::MAX;
/// The longest name a directory entry holds.
const MAX_NAME: usize = 256;
/// Entries one directory header may announce.
const MAX_RUN: usize = 256;
/// The superblock flag that says the image has no xattrs.
const NO_XATTRS: u16 = 0x0200;
/// Superblock flags of the old image that may not hold for the new one
/// (uncompressed inodes, data, fragments, xattrs, ids; no fragments;
/// exportable; no xattrs): cleared.
const STALE_FLAGS: u16 = 0x0001 | 0x0002 | 0x0008 | 0x0010 | 0x0080 | 0x0100 | 0x0200 | 0x0800;

/// An entry of a directory listing being written.
struct Entry<'a> {
    name: &'a [u8],
    inode: u64,
    number: u32,
    kind: u16,
}

/// A directory index entry: a run's position in the listing, its
/// metadata block, its first name.
struct Index<'a> {
    at: u32,
    block: u32,
    name: &'a [u8],
}

/// The tables, built.
pub(super) struct Layout {
    inodes: Vec<u8>,
    dirs: Vec<u8>,
    root: u64,
    inode_count: u32,
    ids: Vec<u32>,
    xattr_sets: Vec<Xattrs>,
}

struct Builder<'t> {
    tree: &'t Tree,
    comp: &'t mut BlockCompressor,
    block_size: u32,
    inodes: MetaWriter,
    dirs: MetaWriter,
    numbers: Vec<u32>,
    links: Vec<u32>,
    written: Vec<Option<u64>>,
    ids: Vec<u32>,
    id_index: HashMap<u32, u16>,
    xattr_sets: Vec<Xattrs>,
    /// Sets already written, by their address (nodes share them).
    xattr_index: HashMap<*const Xattrs, u32>,
}

impl Layout {
    /// Builds the tables of `tree`.
    pub(super) fn build(tree: &Tree, comp: &mut BlockCompressor, block_size: u32) -> Result<Self> {
        let n = tree.len();
        let mut b = Builder {
            tree,
            comp,
            block_size,
            inodes: MetaWriter::default(),
            dirs: MetaWriter::default(),
            numbers: vec![0; n],
            links: vec![0; n],
            written: vec![None; n],
            ids: Vec::new(),
            id_index: HashMap::new(),
            xattr_sets: Vec::new(),
            xattr_index: HashMap::new(),
        };
        let mut next = 0u32;
        b.number(tree.root(), &mut next, 0)?;
        let root = b.write_dir(tree.root(), next + 1)?;
        let Builder {
            comp,
            inodes,
            dirs,
            ids,
            xattr_sets,
            ..
        } = b;
        Ok(Layout {
            inodes: inodes.finish(comp)?.0,
            dirs: dirs.finish(comp)?.0,
            root,
            inode_count: next,
            ids,
            xattr_sets,
        })
    }

    /// Writes the tables after the data of `a`, then the superblock; the
    /// image's length.
    pub(super) fn write(self, a: Appender) -> Result<u64> {
        let Appender {
            out,
            mut pos,
            sb_bytes,
            mut comp,
            fragments,
            ..
        } = a;
        let mut put = |bytes: &[u8], pos: &mut u64| -> Result<u64> {
            let at = *pos;
            out.write_all_at(bytes, at).map_err(Error::Write)?;
            *pos += bytes.len() as u64;
            Ok(at)
        };
        let inode_table = put(&self.inodes, &mut pos)?;
        let dir_table = put(&self.dirs, &mut pos)?;
        let frag_table = if fragments.is_empty() {
            NO_TABLE
        } else {
            let entries: Vec<u8> = fragments
                .iter()
                .flat_map(|&(start, word)| {
                    let mut e = start.to_le_bytes().to_vec();
                    e.extend(word.to_le_bytes());
                    e.extend([0; 4]);
                    e
                })
                .collect();
            table(&entries, &[], &mut comp, &mut pos, &mut put)?
        };
        let id_bytes: Vec<u8> = self.ids.iter().flat_map(|i| i.to_le_bytes()).collect();
        let id_table = table(&id_bytes, &[], &mut comp, &mut pos, &mut put)?;
        let xattr_table = if self.xattr_sets.is_empty() {
            NO_TABLE
        } else {
            let mut kv = MetaWriter::default();
            let mut ids = Vec::new();
            for set in &self.xattr_sets {
                let (block, offset) = kv.position();
                let mut size = 0u32;
                for (name, value) in set {
                    let (kind, rest) = split_prefix(name).ok_or_else(|| {
                        Error::Unsupported("an xattr squashfs cannot store".into())
                    })?;
                    let mut e = kind.to_le_bytes().to_vec();
                    e.extend((rest.len() as u16).to_le_bytes());
                    e.extend(rest);
                    e.extend((value.len() as u32).to_le_bytes());
                    e.extend(value);
                    kv.write(&mut comp, &e)?;
                    size += (name.len() + value.len()) as u32;
                }
                ids.extend(((block << 16) | u64::from(offset)).to_le_bytes());
                ids.extend((set.len() as u32).to_le_bytes());
                ids.extend(size.to_le_bytes());
            }
            let kv_start = put(&kv.finish(&mut comp)?.0, &mut pos)?;
            // The xattr id table's index follows a header: where the pairs
            // start, and how many ids.
            let mut header = kv_start.to_le_bytes().to_vec();
            header.extend((self.xattr_sets.len() as u32).to_le_bytes());
            header.extend([0; 4]);
            table(&ids, &header, &mut comp, &mut pos, &mut put)?
        };
        let bytes_used = pos;
        let mut sb = sb_bytes;
        let set = |sb: &mut [u8], at: usize, v: &[u8]| sb[at..at + v.len()].copy_from_slice(v);
        set(&mut sb, 4, &self.inode_count.to_le_bytes());
        set(&mut sb, 16, &(fragments.len() as u32).to_le_bytes());
        let mut flags = u16::from_le_bytes([sb[24], sb[25]]) & !STALE_FLAGS;
        if self.xattr_sets.is_empty() {
            flags |= NO_XATTRS;
        }
        set(&mut sb, 24, &flags.to_le_bytes());
        set(&mut sb, 26, &(self.ids.len() as u16).to_le_bytes());
        set(&mut sb, 32, &self.root.to_le_bytes());
        set(&mut sb, 40, &bytes_used.to_le_bytes());
        set(&mut sb, 48, &id_table.to_le_bytes());
        set(&mut sb, 56, &xattr_table.to_le_bytes());
        set(&mut sb, 64, &inode_table.to_le_bytes());
        set(&mut sb, 72, &dir_table.to_le_bytes());
        set(&mut sb, 80, &frag_table.to_le_bytes());
        set(&mut sb, 88, &NO_TABLE.to_le_bytes());
        out.write_all_at(&sb, 0).map_err(Error::Write)?;
        // Padded to 4 KiB, as mksquashfs pads, for loop devices.
        out.set_len(bytes_used.div_ceil(4096) * 4096)
            .map_err(Error::Write)?;
        Ok(bytes_used)
    }
}

/// Writes `entries` as metadata blocks, then `header` and the blocks'
/// index (their positions); where the header (or the index) is.
fn table(
    entries: &[u8],
    header: &[u8],
    comp: &mut BlockCompressor,
    pos: &mut u64,
    put: &mut impl FnMut(&[u8], &mut u64) -> Result<u64>,
) -> Result<u64> {
    let mut m = MetaWriter::default();
    m.write(comp, entries)?;
    let (blocks, starts) = m.finish(comp)?;
    let at = put(&blocks, pos)?;
    let mut index = header.to_vec();
    index.extend(starts.iter().flat_map(|s| (at + s).to_le_bytes()));
    put(&index, pos)
}

/// An xattr name's squashfs type and the name without its prefix.
fn split_prefix(name: &[u8]) -> Option<(u16, &[u8])> {
    [(0u16, &b"user."[..]), (1, b"trusted."), (2, b"security.")]
        .into_iter()
        .find_map(|(t, p)| name.strip_prefix(p).map(|rest| (t, rest)))
}

impl Builder<'_> {
    /// Numbers the inodes under `id` in the order they are written
    /// (children first, each node once) and counts each node's links.
    fn number(&mut self, id: NodeId, next: &mut u32, depth: usize) -> Result<()> {
        if depth > MAX_DEPTH {
            return Err(Error::Unsupported(format!(
                "directories nested deeper than {MAX_DEPTH}"
            )));
        }
        if let Content::Dir(entries) = &self.tree.node(id).content {
            for &c in entries.values() {
                self.links[c] += 1;
                if self.numbers[c] != 0 {
                    if self.tree.node(c).is_dir() {
                        return Err(Error::Unsupported("a directory in two places".into()));
                    }
                    continue;
                }
                if self.tree.node(c).is_dir() {
                    self.number(c, next, depth + 1)?;
                } else {
                    *next += 1;
                    self.numbers[c] = *next;
                }
            }
        }
        *next += 1;
        self.numbers[id] = *next;
        Ok(())
    }

    fn id(&mut self, id: u32) -> Result<u16> {
        if let Some(&i) = self.id_index.get(&id) {
            return Ok(i);
        }
        // The superblock counts ids in 16 bits.
        let i = u16::try_from(self.ids.len())
            .ok()
            .filter(|&i| i < u16::MAX)
            .ok_or_else(|| Error::Unsupported("more than 65535 owners".into()))?;
        self.ids.push(id);
        self.id_index.insert(id, i);
        Ok(i)
    }

    fn xattr(&mut self, id: NodeId) -> u32 {
        let x = &self.tree.node(id).attrs.xattrs;
        if !x.iter().any(|(n, _)| split_prefix(n).is_some()) {
            return NONE;
        }
        if let Some(&i) = self.xattr_index.get(&Arc::as_ptr(x)) {
            return i;
        }
        let i = self.xattr_sets.len() as u32;
        let kept = x
            .iter()
            .filter(|(n, _)| split_prefix(n).is_some())
            .cloned()
            .collect();
        self.xattr_sets.push(kept);
        self.xattr_index.insert(Arc::as_ptr(x), i);
        i
    }

    /// The 16 bytes every inode starts with.
    fn header(&mut self, id: NodeId, kind: u16) -> Result<Vec<u8>> {
        let a = &self.tree.node(id).attrs;
        let (perm, uid, gid, mtime) = (a.perm, a.uid, a.gid, a.mtime);
        let mut h = kind.to_le_bytes().to_vec();
        h.extend((perm & 0o7777).to_le_bytes());
        h.extend(self.id(uid)?.to_le_bytes());
        h.extend(self.id(gid)?.to_le_bytes());
        h.extend(mtime.to_le_bytes());
        h.extend(self.numbers[id].to_le_bytes());
        Ok(h)
    }

    /// Appends an inode to the inode table; its reference.
    fn put_inode(&mut self, bytes: &[u8]) -> Result<u64> {
        let (block, offset) = self.inodes.position();
        if block > u64::from(u32::MAX) {
            return Err(Error::Unsupported("an inode table over 4 GiB".into()));
        }
        self.inodes.write(self.comp, bytes)?;
        Ok((block << 16) | u64::from(offset))
    }

    /// The basic type of node `id` (as directory entries give it).
    fn kind(&self, id: NodeId) -> u16 {
        match self.tree.node(id).content {
            Content::Dir(_) => 1,
            Content::File(_) => 2,
            Content::Symlink(_) => 3,
            Content::BlockDev(_) => 4,
            Content::CharDev(_) => 5,
            Content::Fifo => 6,
            Content::Socket => 7,
        }
    }

    /// Writes the inode of a node that is not a directory.
    fn write_leaf(&mut self, id: NodeId) -> Result<u64> {
        let xattr = self.xattr(id);
        let nlink = self.links[id];
        let basic = self.kind(id);
        let extended = xattr != NONE;
        let tree = self.tree;
        let mut b;
        match &tree.node(id).content {
            Content::File(f) => return self.write_file(id, f, nlink, xattr),
            Content::Symlink(target) => {
                b = self.header(id, if extended { 10 } else { 3 })?;
                b.extend(nlink.to_le_bytes());
                b.extend((target.len() as u32).to_le_bytes());
                b.extend(target);
            }
            Content::BlockDev(rdev) | Content::CharDev(rdev) => {
                let rdev = *rdev;
                b = self.header(id, if extended { basic + 7 } else { basic })?;
                b.extend(nlink.to_le_bytes());
                b.extend(rdev.to_le_bytes());
            }
            Content::Fifo | Content::Socket => {
                b = self.header(id, if extended { basic + 7 } else { basic })?;
                b.extend(nlink.to_le_bytes());
            }
            Content::Dir(_) => return Err(Error::Unsupported("a directory as a leaf".into())),
        }
        if extended {
            b.extend(xattr.to_le_bytes());
        }
        self.put_inode(&b)
    }

    fn write_file(&mut self, id: NodeId, f: &FileData, nlink: u32, xattr: u32) -> Result<u64> {
        let bs = u64::from(self.block_size);
        let blocks = if f.fragment.is_some() {
            f.size / bs
        } else {
            f.size.div_ceil(bs)
        };
        if blocks != f.words.len() as u64 {
            return Err(Error::Corrupt(format!(
                "a file of {} bytes with {} blocks",
                f.size,
                f.words.len()
            )));
        }
        let (frag, offset) = f.fragment.unwrap_or((NONE, 0));
        let basic = nlink == 1
            && xattr == NONE
            && f.sparse == 0
            && f.start <= u64::from(u32::MAX)
            && f.size <= u64::from(u32::MAX);
        let mut b = self.header(id, if basic { 2 } else { 9 })?;
        if basic {
            b.extend((f.start as u32).to_le_bytes());
            b.extend(frag.to_le_bytes());
            b.extend(offset.to_le_bytes());
            b.extend((f.size as u32).to_le_bytes());
        } else {
            b.extend(f.start.to_le_bytes());
            b.extend(f.size.to_le_bytes());
            b.extend(f.sparse.to_le_bytes());
            b.extend(nlink.to_le_bytes());
            b.extend(frag.to_le_bytes());
            b.extend(offset.to_le_bytes());
            b.extend(xattr.to_le_bytes());
        }
        for w in &f.words {
            b.extend(w.to_le_bytes());
        }
        self.put_inode(&b)
    }

    /// Writes directory `id`'s subtree, its listing and its inode (with
    /// `parent`, the parent's inode number); its reference.
    fn write_dir(&mut self, id: NodeId, parent: u32) -> Result<u64> {
        let tree = self.tree;
        let Content::Dir(children) = &tree.node(id).content else {
            return Err(Error::Unsupported("a leaf as a directory".into()));
        };
        let mut entries = Vec::with_capacity(children.len());
        let mut subdirs = 0u32;
        for (name, &c) in children {
            if name.is_empty() || name.len() > MAX_NAME {
                return Err(Error::Unsupported(format!(
                    "an entry name of {} bytes",
                    name.len()
                )));
            }
            let inode = if tree.node(c).is_dir() {
                subdirs += 1;
                self.write_dir(c, self.numbers[id])?
            } else if let Some(r) = self.written[c] {
                r
            } else {
                let r = self.write_leaf(c)?;
                self.written[c] = Some(r);
                r
            };
            entries.push(Entry {
                name,
                inode,
                number: self.numbers[c],
                kind: self.kind(c),
            });
        }
        let (start, offset) = self.dirs.position();
        let (len, index) = self.write_listing(&entries)?;
        let size = len
            .checked_add(3)
            .ok_or_else(|| Error::Unsupported("a directory listing over 4 GiB".into()))?;
        let xattr = self.xattr(id);
        let nlink = 2 + subdirs;
        let basic = size <= 0xffff && index.is_empty() && xattr == NONE;
        let mut b = self.header(id, if basic { 1 } else { 8 })?;
        let start = u32::try_from(start)
            .map_err(|_| Error::Unsupported("a directory table over 4 GiB".into()))?;
        if basic {
            b.extend(start.to_le_bytes());
            b.extend(nlink.to_le_bytes());
            b.extend((size as u16).to_le_bytes());
            b.extend(offset.to_le_bytes());
            b.extend(parent.to_le_bytes());
        } else {
            b.extend(nlink.to_le_bytes());
            b.extend(size.to_le_bytes());
            b.extend(start.to_le_bytes());
            b.extend(parent.to_le_bytes());
            b.extend((index.len() as u16).to_le_bytes());
            b.extend(offset.to_le_bytes());
            b.extend(xattr.to_le_bytes());
            for i in &index {
                b.extend(i.at.to_le_bytes());
                b.extend(i.block.to_le_bytes());
                b.extend((i.name.len() as u32 - 1).to_le_bytes());
                b.extend(i.name);
            }
        }
        self.put_inode(&b)
    }

    /// Writes a listing: runs of entries under a header each (one inode
    /// block, inode numbers within reach of the header's, at most 256,
    /// and a new run where the listing crosses into a new metadata
    /// block, which the index then points at). Its length, and its index.
    fn write_listing<'e>(&mut self, entries: &[Entry<'e>]) -> Result<(u32, Vec<Index<'e>>)> {
        let origin = self.dirs.total();
        let mut index = Vec::new();
        let mut indexed_block = origin / META_SIZE as u64;
        let mut i = 0;
        while i < entries.len() {
            let at = self.dirs.total();
            let block = at / META_SIZE as u64;
            if at > origin && block != indexed_block {
                let too_big = || Error::Unsupported("a directory table over 4 GiB".into());
                index.push(Index {
                    at: u32::try_from(at - origin).map_err(|_| too_big())?,
                    block: u32::try_from(self.dirs.position().0).map_err(|_| too_big())?,
                    name: entries[i].name,
                });
                indexed_block = block;
            }
            let first = &entries[i];
            let mut j = i;
            let mut end = at + 12;
            while j < entries.len() && j - i < MAX_RUN {
                let e = &entries[j];
                let delta = i64::from(e.number) - i64::from(first.number);
                if e.inode >> 16 != first.inode >> 16
                    || !(-32768..=32767).contains(&delta)
                    || (j > i && end / META_SIZE as u64 != block)
                {
                    break;
                }
                end += 8 + e.name.len() as u64;
                j += 1;
            }
            let mut run = Vec::with_capacity((end - at) as usize);
            run.extend(((j - i - 1) as u32).to_le_bytes());
            run.extend(((first.inode >> 16) as u32).to_le_bytes());
            run.extend(first.number.to_le_bytes());
            for e in &entries[i..j] {
                run.extend(((e.inode & 0xffff) as u16).to_le_bytes());
                run.extend(((i64::from(e.number) - i64::from(first.number)) as i16).to_le_bytes());
                run.extend(e.kind.to_le_bytes());
                run.extend(((e.name.len() - 1) as u16).to_le_bytes());
                run.extend(e.name);
            }
            self.dirs.write(self.comp, &run)?;
            i = j;
        }
        let len = u32::try_from(self.dirs.total() - origin)
            .map_err(|_| Error::Unsupported("a directory listing over 4 GiB".into()))?;
        Ok((len, index))
    }
}
