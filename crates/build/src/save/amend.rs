//! The fast save: the image's squashfs file amended with the container's
//! changes by berth's own writer ([`berth_squashfs::writer`]). The image's
//! data blocks are copied as they are (no decompression, no compression;
//! a reflink where the filesystem has them), the changed files are
//! compressed, and the tables are written anew. It costs the size of the
//! changes, where `sqfs2tar | tar2sqfs` costs the size of the image.
//!
//! It is taken when the image was written with the settings the save
//! would use (compressor and block size) by a compressor berth writes
//! (zstd, gzip, lz4), when berth's reader reads it, and when the changes
//! leave no more than a quarter of the image's data unused (or under
//! 64 MiB): a save that removes much of its image is rewritten whole,
//! so the file shrinks.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use berth_image::whiteout::Whiteout;
use berth_squashfs::reader::Image;
use berth_squashfs::writer::{Appender, Attrs, BlockCompressor, Content, Node, NodeId, Tree};

use super::SavePlan;

/// Unused image data kept without a second thought.
const UNUSED_ALLOWED: u64 = 64 << 20;

/// Why a save takes the full rewrite instead.
pub(super) type Unsuitable = String;

/// Writes `plan.output` as the image amended with the layer tar at
/// `changes`; `Ok(Err(why))` where the image is not one to amend (nothing
/// was written that matters: the caller rewrites the file whole).
pub(super) fn amend(plan: &SavePlan, changes: &Path) -> Result<Result<(), Unsuitable>, String> {
    let file = File::open(&plan.image)
        .map_err(|e| format!("cannot open the image {}: {e}", plan.image.display()))?;
    let image = match file
        .try_clone()
        .map_err(Into::into)
        .and_then(|f| Image::open(f, 0))
    {
        Ok(i) => i,
        Err(e) => return Ok(Err(format!("berth's reader: {e}"))),
    };
    let sb = image.superblock();
    let wanted = &plan.squashfs;
    if sb.compressor.name() != wanted.compressor || sb.block_size != wanted.block_size {
        return Ok(Err(format!(
            "the image has {} blocks of {} bytes, the save writes {} blocks of {}",
            sb.compressor.name(),
            sb.block_size,
            wanted.compressor,
            wanted.block_size
        )));
    }
    if !BlockCompressor::writes(sb.compressor) {
        return Ok(Err(format!(
            "berth writes no {} blocks itself",
            sb.compressor.name()
        )));
    }
    let mut tree = match Tree::from_image(&image) {
        Ok(t) => t,
        Err(e) => return Ok(Err(format!("berth's reader: {e}"))),
    };
    let out = File::create(&plan.output)
        .map_err(|e| format!("cannot create {}: {e}", plan.output.display()))?;
    let written = |e: berth_squashfs::Error| e.to_string();
    let mut appender = match Appender::start(&image, &file, out, wanted.effective_level()) {
        Ok(a) => a,
        Err(berth_squashfs::Error::Unsupported(why)) => return Ok(Err(why)),
        Err(e) => return Err(written(e)),
    };
    let layer =
        File::open(changes).map_err(|e| format!("cannot read {}: {e}", changes.display()))?;
    apply(&mut tree, &mut appender, std::io::BufReader::new(layer))?;
    let unused = tree.unused_image_data();
    if unused > UNUSED_ALLOWED && unused > sb.inode_table / 4 {
        return Ok(Err(format!(
            "the changes leave {} MiB of the image's {} MiB unused",
            unused >> 20,
            sb.inode_table >> 20
        )));
    }
    appender.finish(&tree).map_err(written)?;
    Ok(Ok(()))
}

/// Applies the layer tar `r` (OCI whiteouts) to `tree`, the new files'
/// data written by `out`.
fn apply(tree: &mut Tree, out: &mut Appender, r: impl Read) -> Result<(), String> {
    let bad = |e: std::io::Error| format!("reading the container's changes: {e}");
    let mut archive = tar::Archive::new(r);
    for entry in archive.entries().map_err(bad)? {
        let mut entry = entry.map_err(bad)?;
        let path = entry.path_bytes().into_owned();
        let parts = components(&path)?;
        let Some((name, parents)) = parts.split_last() else {
            continue;
        };
        let parent = directory(tree, parents)?;
        match Whiteout::of(name) {
            Some(Whiteout::Opaque) => {
                let lower: Vec<Box<[u8]>> = tree
                    .entries(parent)
                    .into_iter()
                    .flatten()
                    .filter(|(_, &id)| tree.node(id).layer == 0)
                    .map(|(n, _)| n.clone())
                    .collect();
                let e = entries_mut(tree, parent)?;
                for n in lower {
                    e.remove(&n);
                }
                continue;
            }
            Some(Whiteout::Remove(gone)) => {
                if tree
                    .child(parent, gone)
                    .is_some_and(|id| tree.node(id).layer == 0)
                {
                    entries_mut(tree, parent)?.remove(gone);
                }
                continue;
            }
            Some(Whiteout::Reserved) => continue,
            None => {}
        }
        let h = entry.header();
        let attrs = Attrs {
            perm: (h.mode().map_err(bad)? & 0o7777) as u16,
            uid: h.uid().map_err(bad)? as u32,
            gid: h.gid().map_err(bad)? as u32,
            mtime: h.mtime().map_err(bad)?.min(u64::from(u32::MAX)) as u32,
            xattrs: Vec::new(),
        };
        let kind = h.entry_type();
        let content = match kind {
            tar::EntryType::Directory => {
                if let Some(id) = tree
                    .child(parent, name)
                    .filter(|&id| tree.node(id).is_dir())
                {
                    let node = tree.node_mut(id);
                    node.attrs = attrs;
                    node.layer = 1;
                    continue;
                }
                Content::Dir(BTreeMap::new())
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let size = entry.size();
                let data = out
                    .add_file(&mut entry, size)
                    .map_err(|e| format!("writing a changed file: {e}"))?;
                Content::File(data)
            }
            tar::EntryType::Symlink => {
                let target = entry.link_name_bytes().unwrap_or_default().into_owned();
                Content::Symlink(target)
            }
            tar::EntryType::Link => {
                let target = entry.link_name_bytes().unwrap_or_default().into_owned();
                let id = resolve(tree, &components(&target)?)
                    .filter(|&id| !tree.node(id).is_dir())
                    .ok_or_else(|| {
                        format!(
                            "the changes hard-link {} to {}, which they do not hold",
                            String::from_utf8_lossy(&path),
                            String::from_utf8_lossy(&target)
                        )
                    })?;
                entries_mut(tree, parent)?.insert(name.as_slice().into(), id);
                continue;
            }
            tar::EntryType::Fifo => Content::Fifo,
            tar::EntryType::Char | tar::EntryType::Block => {
                let major = h.device_major().ok().flatten().unwrap_or(0);
                let minor = h.device_minor().ok().flatten().unwrap_or(0);
                let rdev = (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12);
                if kind == tar::EntryType::Char {
                    Content::CharDev(rdev)
                } else {
                    Content::BlockDev(rdev)
                }
            }
            _ => continue,
        };
        let id = tree.add(Node {
            attrs,
            content,
            layer: 1,
        });
        entries_mut(tree, parent)?.insert(name.as_slice().into(), id);
    }
    Ok(())
}

/// A tar path's components: no empty ones, no `.`; `..` refused.
fn components(path: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let mut out = Vec::new();
    for c in path.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                return Err(format!(
                    "the container's changes name {}, which climbs out",
                    String::from_utf8_lossy(path)
                ))
            }
            c => out.push(c.to_vec()),
        }
    }
    Ok(out)
}

/// The node at `parts`, not following symlinks.
fn resolve(tree: &Tree, parts: &[Vec<u8>]) -> Option<NodeId> {
    parts
        .iter()
        .try_fold(tree.root(), |dir, name| tree.child(dir, name))
}

/// The directory at `parts`, made where missing (or not a directory: a
/// layer that puts entries under a path makes it one).
fn directory(tree: &mut Tree, parts: &[Vec<u8>]) -> Result<NodeId, String> {
    let mut dir = tree.root();
    for name in parts {
        dir = match tree.child(dir, name) {
            Some(id) if tree.node(id).is_dir() => id,
            _ => {
                let id = tree.add(Node {
                    attrs: Attrs {
                        perm: 0o755,
                        ..Attrs::default()
                    },
                    content: Content::Dir(BTreeMap::new()),
                    layer: 1,
                });
                entries_mut(tree, dir)?.insert(name.as_slice().into(), id);
                id
            }
        };
    }
    Ok(dir)
}

fn entries_mut(tree: &mut Tree, dir: NodeId) -> Result<&mut BTreeMap<Box<[u8]>, NodeId>, String> {
    tree.entries_mut(dir)
        .ok_or_else(|| "the saved tree lost a directory".to_string())
}
