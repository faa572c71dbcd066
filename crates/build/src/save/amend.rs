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
use std::collections::HashSet;
use std::fs::File;
use std::io::{Read, Seek};
use std::path::Path;
use std::sync::Arc;

use berth_image::whiteout::Whiteout;
use berth_squashfs::reader::Image;
use berth_squashfs::writer::{Appender, Attrs, BlockCompressor, Content, Node, NodeId, Tree};

use super::SavePlan;

/// Unused image data kept without a second thought.
const UNUSED_ALLOWED: u64 = 64 << 20;

/// Why a save takes the full rewrite instead.
pub(super) type Unsuitable = String;

/// Writes `plan.output` as the image (`file`) amended with the layer tar
/// at `changes`; `Ok(Err(why))` where the image is not one to amend
/// (nothing was written that matters: the caller rewrites the file whole).
pub(super) fn amend(
    plan: &SavePlan,
    file: &File,
    changes: &Path,
) -> Result<Result<(), Unsuitable>, String> {
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
    let mut appender = match Appender::start(&image, file, out, wanted.effective_level()) {
        Ok(a) => a,
        Err(berth_squashfs::Error::Unsupported(why)) => return Ok(Err(why)),
        Err(e) => return Err(written(e)),
    };
    let layer =
        File::open(changes).map_err(|e| format!("cannot read {}: {e}", changes.display()))?;
    let opaque = opaque_dirs(std::io::BufReader::new(&layer))?;
    (&layer)
        .seek(std::io::SeekFrom::Start(0))
        .map_err(|e| format!("cannot read {}: {e}", changes.display()))?;
    let mut changes = Changes {
        tree: &mut tree,
        opaque,
    };
    changes.apply(&mut appender, std::io::BufReader::new(&layer))?;
    let unused = tree.unused_image_data();
    if unused > UNUSED_ALLOWED && unused > sb.inode_table / 4 {
        return Ok(Err(format!(
            "the changes leave {} MiB of the image's {} MiB unused",
            unused >> 20,
            sb.inode_table >> 20
        )));
    }
    match appender.finish(&tree) {
        Ok(_) => Ok(Ok(())),
        // A limit of berth's writer (owners, nesting, table sizes).
        Err(berth_squashfs::Error::Unsupported(why)) => Ok(Err(why)),
        Err(e) => Err(written(e)),
    }
}

/// The directories the layer tar `r` marks opaque (`DIR/.wh..wh..opq`).
fn opaque_dirs(r: impl Read) -> Result<HashSet<Vec<Vec<u8>>>, String> {
    let mut archive = tar::Archive::new(r);
    let mut out = HashSet::new();
    for entry in archive.entries().map_err(unreadable)? {
        let entry = entry.map_err(unreadable)?;
        let mut parts = components(&entry.path_bytes())?;
        if parts
            .pop()
            .is_some_and(|n| Whiteout::of(&n) == Some(Whiteout::Opaque))
        {
            out.insert(parts);
        }
    }
    Ok(out)
}

/// A layer being applied to a tree.
struct Changes<'t> {
    tree: &'t mut Tree,
    /// Directories marked opaque whose image entries are not yet hidden
    /// (hidden the first time the layer reaches them, whatever the order
    /// of its entries).
    opaque: HashSet<Vec<Vec<u8>>>,
}

impl Changes<'_> {
    /// Applies the layer tar `r` (OCI whiteouts), the new files' data
    /// written by `out`.
    fn apply(&mut self, out: &mut Appender, r: impl Read) -> Result<(), String> {
        let mut archive = tar::Archive::new(r);
        for entry in archive.entries().map_err(unreadable)? {
            let mut entry = entry.map_err(unreadable)?;
            let path = entry.path_bytes().into_owned();
            let parts = components(&path)?;
            match parts.split_last() {
                None => self.root_entry(&entry)?,
                Some((name, parents)) => match Whiteout::of(name) {
                    // An opaque marker's directory hides the image's
                    // entries the first time the layer reaches it (here at
                    // the latest).
                    Some(Whiteout::Opaque) => {
                        self.directory(parents)?;
                    }
                    Some(Whiteout::Reserved) => {}
                    Some(Whiteout::Remove(gone)) => self.remove(parents, gone),
                    None => self.add(out, &mut entry, &path, parents, name)?,
                },
            }
        }
        Ok(())
    }

    /// The root's own entry (`./`): its attributes.
    fn root_entry(&mut self, entry: &tar::Entry<'_, impl Read>) -> Result<(), String> {
        if entry.header().entry_type() == tar::EntryType::Directory {
            let attrs = attrs_of(entry.header())?;
            let root = self.tree.root();
            restamp(self.tree.node_mut(root), attrs);
        }
        Ok(())
    }

    /// `.wh.NAME` in `parents`: the image's `NAME` there goes.
    fn remove(&mut self, parents: &[Vec<u8>], gone: &[u8]) {
        let Some(dir) = self.existing_dir(parents) else {
            return;
        };
        if self
            .tree
            .child(dir, gone)
            .is_some_and(|id| self.tree.node(id).layer == 0)
        {
            if let Some(e) = self.tree.entries_mut(dir) {
                e.remove(gone);
            }
        }
    }

    /// An entry that is not a whiteout: added, or replacing what is there.
    fn add(
        &mut self,
        out: &mut Appender,
        entry: &mut tar::Entry<'_, impl Read>,
        path: &[u8],
        parents: &[Vec<u8>],
        name: &[u8],
    ) -> Result<(), String> {
        let parent = self.directory(parents)?;
        let attrs = attrs_of(entry.header())?;
        let kind = entry.header().entry_type();
        let content = match kind {
            tar::EntryType::Directory => {
                let tree = &mut *self.tree;
                if let Some(id) = tree
                    .child(parent, name)
                    .filter(|&id| tree.node(id).is_dir())
                {
                    // A directory of the image, changed: its entries stay.
                    let node = tree.node_mut(id);
                    restamp(node, attrs);
                    node.layer = 1;
                    let mut at = parents.to_vec();
                    at.push(name.to_vec());
                    self.hide_if_opaque(&at, id);
                    return Ok(());
                }
                Content::Dir(BTreeMap::new())
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let size = entry.size();
                let data = out
                    .add_file(entry, size)
                    .map_err(|e| format!("writing a changed file: {e}"))?;
                Content::File(data)
            }
            tar::EntryType::Symlink => Content::Symlink(link_name(entry, path)?),
            tar::EntryType::Link => {
                let target = link_name(entry, path)?;
                let tree = &*self.tree;
                let id = resolve(tree, &components(&target)?)
                    .filter(|&id| !tree.node(id).is_dir())
                    .ok_or_else(|| {
                        format!(
                            "the changes hard-link {} to {}, which they do not hold",
                            String::from_utf8_lossy(path),
                            String::from_utf8_lossy(&target)
                        )
                    })?;
                entries_mut(self.tree, parent)?.insert(name.into(), id);
                return Ok(());
            }
            tar::EntryType::Fifo => Content::Fifo,
            tar::EntryType::Char | tar::EntryType::Block => {
                let h = entry.header();
                let major = h.device_major().ok().flatten().unwrap_or(0);
                let minor = h.device_minor().ok().flatten().unwrap_or(0);
                let rdev = (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12);
                if kind == tar::EntryType::Char {
                    Content::CharDev(rdev)
                } else {
                    Content::BlockDev(rdev)
                }
            }
            _ => return Ok(()),
        };
        let id = self.tree.add(Node {
            attrs,
            content,
            layer: 1,
        });
        entries_mut(self.tree, parent)?.insert(name.into(), id);
        Ok(())
    }

    /// Hides the image's entries of directory `id` (at `path`) if the
    /// layer marks it opaque and they are not hidden yet.
    fn hide_if_opaque(&mut self, path: &[Vec<u8>], id: NodeId) {
        if !self.opaque.remove(path) {
            return;
        }
        let tree = &mut *self.tree;
        let lower: Vec<Box<[u8]>> = tree
            .entries(id)
            .into_iter()
            .flatten()
            .filter(|(_, &c)| tree.node(c).layer == 0)
            .map(|(n, _)| n.clone())
            .collect();
        if let Some(e) = tree.entries_mut(id) {
            for n in lower {
                e.remove(&n);
            }
        }
    }

    /// The directory at `parts`, if there is one.
    fn existing_dir(&self, parts: &[Vec<u8>]) -> Option<NodeId> {
        resolve(self.tree, parts).filter(|&id| self.tree.node(id).is_dir())
    }

    /// The directory at `parts` for an entry of the layer, made where
    /// missing (or not a directory: a layer that puts entries under a
    /// path makes it one); opaque ones hidden as they are reached.
    fn directory(&mut self, parts: &[Vec<u8>]) -> Result<NodeId, String> {
        let mut dir = self.tree.root();
        self.hide_if_opaque(&[], dir);
        for (depth, name) in parts.iter().enumerate() {
            dir = match self.tree.child(dir, name) {
                Some(id) if self.tree.node(id).is_dir() => id,
                _ => {
                    let id = self.tree.add(Node {
                        attrs: Attrs {
                            perm: 0o755,
                            ..Attrs::default()
                        },
                        content: Content::Dir(BTreeMap::new()),
                        layer: 1,
                    });
                    entries_mut(self.tree, dir)?.insert(name.as_slice().into(), id);
                    id
                }
            };
            self.hide_if_opaque(&parts[..=depth], dir);
        }
        Ok(dir)
    }
}

/// An error reading the layer tar.
fn unreadable(e: std::io::Error) -> String {
    format!("reading the container's changes: {e}")
}

/// Gives the image's `node` the attributes `attrs` of the layer's entry
/// for it, keeping its xattrs (the layer carries none).
fn restamp(node: &mut Node, attrs: Attrs) {
    node.attrs = Attrs {
        xattrs: node.attrs.xattrs.clone(),
        ..attrs
    };
}

/// The attributes in a layer entry's header.
fn attrs_of(h: &tar::Header) -> Result<Attrs, String> {
    Ok(Attrs {
        perm: (h.mode().map_err(unreadable)? & 0o7777) as u16,
        uid: h.uid().map_err(unreadable)? as u32,
        gid: h.gid().map_err(unreadable)? as u32,
        mtime: h.mtime().map_err(unreadable)?.min(u64::from(u32::MAX)) as u32,
        xattrs: Arc::default(),
    })
}

/// A link entry's target; an entry without one is refused.
fn link_name(entry: &tar::Entry<'_, impl Read>, path: &[u8]) -> Result<Vec<u8>, String> {
    match entry.link_name_bytes() {
        Some(t) if !t.is_empty() => Ok(t.into_owned()),
        _ => Err(format!(
            "the container's changes hold a link {} without a target",
            String::from_utf8_lossy(path)
        )),
    }
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

fn entries_mut(tree: &mut Tree, dir: NodeId) -> Result<&mut BTreeMap<Box<[u8]>, NodeId>, String> {
    tree.entries_mut(dir)
        .ok_or_else(|| "the saved tree lost a directory".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn dir_entry(b: &mut tar::Builder<Vec<u8>>, path: &str) {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_size(0);
        b.append_data(&mut h, path, std::io::empty()).unwrap();
    }

    fn file_entry(b: &mut tar::Builder<Vec<u8>>, path: &str, data: &[u8]) {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, path, data).unwrap();
    }

    /// Opaque markers hide the image's entries wherever they stand in the
    /// layer; a whiteout makes no directory.
    #[test]
    fn layers_apply_in_any_order() {
        if Command::new("mksquashfs").arg("-version").output().is_err() {
            assert!(
                std::env::var_os("CI").is_none(),
                "mksquashfs missing under CI"
            );
            eprintln!("skipped: mksquashfs not installed");
            return;
        }
        let work = tempfile::tempdir().unwrap();
        let src = work.path().join("src");
        std::fs::create_dir_all(src.join("a/sub")).unwrap();
        std::fs::write(src.join("a/sub/old"), "old").unwrap();
        std::fs::write(src.join("a/other"), "other").unwrap();
        std::fs::write(src.join("kept"), "kept").unwrap();
        let img = work.path().join("img.sqfs");
        let ok = Command::new("mksquashfs")
            .arg(&src)
            .arg(&img)
            .args(["-noappend", "-quiet", "-no-progress", "-comp", "zstd"])
            .status()
            .unwrap();
        assert!(ok.success());
        let mut b = tar::Builder::new(Vec::new());
        dir_entry(&mut b, "a/");
        dir_entry(&mut b, "a/sub/");
        file_entry(&mut b, "a/sub/new", b"new");
        file_entry(&mut b, "a/.wh..wh..opq", b"");
        file_entry(&mut b, "nope/.wh.x", b"");
        let layer = b.into_inner().unwrap();
        let file = File::open(&img).unwrap();
        let image = Image::open(file.try_clone().unwrap(), 0).unwrap();
        let mut tree = Tree::from_image(&image).unwrap();
        let out = work.path().join("out.sqfs");
        let mut a = Appender::start(&image, &file, File::create(&out).unwrap(), None).unwrap();
        let mut c = Changes {
            tree: &mut tree,
            opaque: opaque_dirs(&layer[..]).unwrap(),
        };
        c.apply(&mut a, &layer[..]).unwrap();
        a.finish(&tree).unwrap();
        let saved = Image::open(File::open(&out).unwrap(), 0).unwrap();
        let names = |p: &str| saved.read_dir_names(p).unwrap().unwrap_or_default();
        assert_eq!(names("/a"), vec![b"sub".to_vec()]);
        assert_eq!(names("/a/sub"), vec![b"new".to_vec()]);
        assert_eq!(names("/"), vec![b"a".to_vec(), b"kept".to_vec()]);
        assert_eq!(saved.read_path("/a/sub/new", 10).unwrap().unwrap(), b"new");
    }
}
