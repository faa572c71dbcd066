//! Layers from a build step: a snapshot of the root before the step, a
//! walk after it, and a gzip tar of what changed (new or changed entries,
//! with their parents, and `.wh.` whiteouts for what went), written into
//! the blob store with its digest and diff_id. Runs inside the build's user
//! namespace, so owners read are the image's own ids. And the reverse:
//! applying a layer blob to a root (for steps taken from the cache).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::blobs::{BlobRef, Blobs};
use crate::context::walk;
use crate::{Error, Result};

/// What identifies an entry's state: a change of content, owner, mode or
/// links changes its ctime; a replaced entry has another inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct State {
    ino: u64,
    ctime: i64,
    ctime_nsec: i64,
    mode: u32,
}

/// The state of every entry under a root.
#[derive(Debug, Default)]
pub struct Snapshot {
    entries: BTreeMap<String, State>,
}

impl Snapshot {
    /// Walks `root`.
    pub fn take(root: &Path) -> Result<Self> {
        let mut entries = BTreeMap::new();
        walk(root, "", &mut |rel, m| {
            entries.insert(
                rel.to_string(),
                State {
                    ino: m.ino(),
                    ctime: m.ctime(),
                    ctime_nsec: m.ctime_nsec(),
                    mode: m.mode(),
                },
            );
        })?;
        Ok(Self { entries })
    }
}

/// Writes the changes of `root` since `before` as a layer blob; `None` if
/// nothing changed.
///
/// With `overlay_upper`, `root` is the upper directory of an overlay build
/// root (only what the build changed is there, so the walks are short):
/// its whiteouts (character devices 0/0) become `.wh.` entries and a
/// directory made opaque in this step gets `.wh..wh..opq`.
pub fn diff(
    root: &Path,
    before: &Snapshot,
    blobs: &Blobs,
    overlay_upper: bool,
) -> Result<Option<BlobRef>> {
    let after = Snapshot::take(root)?;
    let mut changed: BTreeSet<String> = BTreeSet::new();
    for (rel, st) in &after.entries {
        if before.entries.get(rel) != Some(st) {
            changed.insert(rel.clone());
        }
    }
    // Entries that went: only the top-most of a removed tree, and nothing
    // below a path that is no longer a directory (an overlay whiteout, a
    // directory replaced by a file): a whiteout under it would make an
    // image tool recreate it as a directory.
    let not_dir = |rel: &str| {
        after
            .entries
            .get(rel)
            .is_some_and(|st| st.mode & libc::S_IFMT != libc::S_IFDIR)
    };
    let mut removed: Vec<String> = Vec::new();
    for rel in before.entries.keys() {
        if after.entries.contains_key(rel) {
            continue;
        }
        let under_gone = Path::new(rel)
            .ancestors()
            .skip(1)
            .filter(|a| !a.as_os_str().is_empty())
            .any(|a| {
                let a = a.to_string_lossy();
                not_dir(&a) || removed.last().is_some_and(|r| **r == *a)
            });
        if under_gone
            || removed
                .last()
                .is_some_and(|r| rel.starts_with(&format!("{r}/")))
        {
            continue;
        }
        removed.push(rel.clone());
    }
    // A directory whose only change is that an entry was added or removed
    // still goes in (its new mtime), and every changed entry's parents.
    let mut with_parents = changed.clone();
    for rel in changed.iter().chain(removed.iter()) {
        let mut p = Path::new(rel).parent();
        while let Some(dir) = p.filter(|d| !d.as_os_str().is_empty()) {
            with_parents.insert(dir.to_string_lossy().to_string());
            p = dir.parent();
        }
    }
    if with_parents.is_empty() && removed.is_empty() {
        return Ok(None);
    }
    let mut names: Vec<(String, bool)> = with_parents.into_iter().map(|n| (n, false)).collect();
    for r in &removed {
        names.push((whiteout_of(r), true));
    }
    names.sort();
    let mut tar = tar::Builder::new(blobs.layer_writer()?);
    tar.mode(tar::HeaderMode::Complete);
    tar.follow_symlinks(false);
    let mut links: HashMap<u64, String> = HashMap::new();
    for (rel, whiteout) in &names {
        if *whiteout {
            append_whiteout(&mut tar, rel)?;
            continue;
        }
        if overlay_upper {
            let path = root.join(rel);
            if let Ok(m) = fs::symlink_metadata(&path) {
                if m.file_type().is_char_device() && m.rdev() == 0 {
                    append_whiteout(&mut tar, &whiteout_of(rel))?;
                    continue;
                }
                let new_dir = before.entries.get(rel).is_none_or(|s| s.ino != m.ino());
                if m.is_dir() && new_dir && is_opaque(&path) {
                    append(&mut tar, root, rel, &mut links)?;
                    append_whiteout(&mut tar, &format!("{rel}/.wh..wh..opq"))?;
                    continue;
                }
            }
        }
        append(&mut tar, root, rel, &mut links)?;
    }
    let writer = tar
        .into_inner()
        .map_err(|e| Error::io("finish the layer", root, e))?;
    Ok(Some(blobs.commit_layer(writer)?))
}

fn append_whiteout<W: Write>(tar: &mut tar::Builder<W>, name: &str) -> Result<()> {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_size(0);
    h.set_mode(0o644);
    h.set_mtime(0);
    tar.append_data(&mut h, name, io::empty())
        .map_err(|e| Error::io("write a layer entry", name, e))
}

/// `dir/name` as its whiteout, `dir/.wh.name`.
fn whiteout_of(rel: &str) -> String {
    let p = Path::new(rel);
    match p.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => format!("{}/.wh.{}", dir.display(), name_of(p)),
        None => format!(".wh.{}", name_of(p)),
    }
}

/// Whether overlayfs marked the directory opaque (`userxattr` mounts).
fn is_opaque(dir: &Path) -> bool {
    let mut value = [0u8; 4];
    rustix::fs::lgetxattr(dir, "user.overlay.opaque", &mut value[..])
        .is_ok_and(|n| n >= 1 && value[0] == b'y')
}

fn name_of(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default()
}

fn append<W: Write>(
    tar: &mut tar::Builder<W>,
    root: &Path,
    rel: &str,
    links: &mut HashMap<u64, String>,
) -> Result<()> {
    let path = root.join(rel);
    let meta = fs::symlink_metadata(&path).map_err(|e| Error::io("inspect", &path, e))?;
    let ft = meta.file_type();
    let mut h = tar::Header::new_gnu();
    h.set_mode(meta.mode() & 0o7777);
    h.set_uid(meta.uid() as u64);
    h.set_gid(meta.gid() as u64);
    h.set_mtime(meta.mtime().max(0) as u64);
    h.set_size(0);
    let err = |e| Error::io("write a layer entry", &path, e);
    if ft.is_dir() {
        h.set_entry_type(tar::EntryType::Directory);
        tar.append_data(&mut h, rel, io::empty()).map_err(err)?;
    } else if ft.is_symlink() {
        let target = fs::read_link(&path).map_err(|e| Error::io("read", &path, e))?;
        h.set_entry_type(tar::EntryType::Symlink);
        tar.append_link(&mut h, rel, &target).map_err(err)?;
    } else if ft.is_file() {
        if meta.nlink() > 1 {
            if let Some(first) = links.get(&meta.ino()) {
                h.set_entry_type(tar::EntryType::Link);
                tar.append_link(&mut h, rel, first).map_err(err)?;
                return Ok(());
            }
            links.insert(meta.ino(), rel.to_string());
        }
        h.set_entry_type(tar::EntryType::Regular);
        h.set_size(meta.len());
        let f = fs::File::open(&path).map_err(|e| Error::io("read", &path, e))?;
        tar.append_data(&mut h, rel, f.take(meta.len()))
            .map_err(err)?;
    } else if ft.is_fifo() {
        h.set_entry_type(tar::EntryType::Fifo);
        tar.append_data(&mut h, rel, io::empty()).map_err(err)?;
    }
    // Device nodes cannot be made in a user namespace, sockets are not
    // content: neither goes into a layer.
    Ok(())
}

/// Applies the layer blob `blob` to `root`: whiteouts remove, opaque
/// markers empty a directory, entries are unpacked with their owners.
/// Names are taken as the flattener takes them (a leading `/` dropped, `..`
/// folded, refused above the root), and every parent is resolved inside
/// `root` ([`resolve_parent`]): a symlinked directory of a lower layer is
/// followed there, never on the host. The resolved parent is then opened
/// component by component without following symlinks, and every removal,
/// link and unpack happens through that descriptor: nothing outside
/// `root` is written or deleted, even if a directory on the way were
/// swapped for a symlink meanwhile (that is refused).
pub fn apply(root: &Path, blob: &Path) -> Result<()> {
    let f = fs::File::open(blob).map_err(|e| Error::io("open", blob, e))?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(f));
    archive.set_preserve_permissions(true);
    archive.set_preserve_ownerships(true);
    archive.set_preserve_mtime(true);
    archive.set_overwrite(true);
    archive.set_unpack_xattrs(false);
    let root_fd: OwnedFd = fs::File::open(root)
        .map_err(|e| Error::io("open the stage root", root, e))?
        .into();
    let refused = |rel: &str, why: String| {
        Error::Plan(format!(
            "layer {}: entry {rel:?} {why}; the layer was not applied",
            blob.display()
        ))
    };
    for entry in archive
        .entries()
        .map_err(|e| Error::io("read the layer", blob, e))?
    {
        let mut entry = entry.map_err(|e| Error::io("read the layer", blob, e))?;
        let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let rel = normalize(&raw).ok_or_else(|| refused(&raw, "climbs above the root".into()))?;
        let (parent_rel, name) = match rel.rsplit_once('/') {
            Some((p, n)) => (p, n),
            None => ("", rel.as_str()),
        };
        let parent = resolved(root, parent_rel).map_err(|why| refused(&raw, why))?;
        if name == ".wh..wh..opq" {
            if let Ok(dir) = open_dir(&root_fd, &parent, false) {
                empty_dir(&dir);
            }
            continue;
        }
        if let Some(gone) = name.strip_prefix(".wh.") {
            if let Ok(dir) = open_dir(&root_fd, &parent, false) {
                remove_at(&dir, gone);
            }
            continue;
        }
        if rel.is_empty() {
            // The root itself: only a directory, whose attributes stay.
            if !entry.header().entry_type().is_dir() {
                return Err(refused(
                    &raw,
                    "names the root but is not a directory".into(),
                ));
            }
            continue;
        }
        let dir = open_dir(&root_fd, &parent, true)
            .map_err(|e| Error::io("open a layer entry's directory", root.join(&parent), e))?;
        let is_dir = entry.header().entry_type().is_dir();
        match rustix::fs::statat(&dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if is_dir && rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir() => {}
            Ok(_) => remove_at(&dir, name),
            Err(_) => {}
        }
        if entry.header().entry_type() == tar::EntryType::Link {
            // The link's target, resolved in the root as well.
            let link = entry
                .link_name_bytes()
                .map(|l| String::from_utf8_lossy(&l).into_owned())
                .unwrap_or_default();
            let link_rel = normalize(&link)
                .ok_or_else(|| refused(&raw, "is a hard link that climbs above the root".into()))?;
            let (lp, ln) = link_rel.rsplit_once('/').unwrap_or(("", link_rel.as_str()));
            let src_parent = resolved(root, lp).map_err(|why| refused(&raw, why))?;
            let src = open_dir(&root_fd, &src_parent, false).map_err(|e| {
                Error::io("open a hard link's directory", root.join(&src_parent), e)
            })?;
            rustix::fs::linkat(&src, ln, &dir, name, rustix::fs::AtFlags::empty())
                .map_err(|e| Error::io("hard-link", root.join(&rel), e.into()))?;
            continue;
        }
        // The directory is pinned: /proc/self/fd/N names it, not a path
        // walked again.
        let target = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())).join(name);
        entry
            .unpack(&target)
            .map_err(|e| Error::io("unpack a layer entry", root.join(&rel), e))?;
    }
    Ok(())
}

/// [`resolve_parent`], relative to the root.
fn resolved(root: &Path, rel: &str) -> std::result::Result<String, String> {
    crate::context::follow_in_root(root, rel, crate::context::AtRoot::Refuse)
        .map_err(|e| e.to_string())
}

/// Opens the symlink-free `rel` below `root`, one component at a time and
/// following none (a symlink on the way is refused), creating missing
/// directories when `create`.
fn open_dir(root: &OwnedFd, rel: &str, create: bool) -> io::Result<OwnedFd> {
    use rustix::fs::{openat, Mode, OFlags};
    let flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC;
    let mut cur = openat(root, ".", flags, Mode::empty())?;
    for c in rel.split('/').filter(|c| !c.is_empty()) {
        if create {
            match rustix::fs::mkdirat(&cur, c, Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
        }
        cur = openat(&cur, c, flags, Mode::empty())?;
    }
    Ok(cur)
}

/// Removes `name` in `dir` (a directory with everything in it), following
/// no symlink.
fn remove_at(dir: &OwnedFd, name: &str) {
    use rustix::fs::{AtFlags, FileType};
    let Ok(st) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
        return;
    };
    if FileType::from_raw_mode(st.st_mode).is_dir() {
        if let Ok(sub) = open_dir(dir, name, false) {
            empty_dir(&sub);
        }
        let _ = rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR);
    } else {
        let _ = rustix::fs::unlinkat(dir, name, AtFlags::empty());
    }
}

/// Removes everything in `dir`.
fn empty_dir(dir: &OwnedFd) {
    let Ok(mut entries) = rustix::fs::Dir::read_from(dir) else {
        return;
    };
    let mut names = Vec::new();
    while let Some(Ok(e)) = entries.next() {
        let n = e.file_name().to_string_lossy().into_owned();
        if n != "." && n != ".." {
            names.push(n);
        }
    }
    for n in names {
        remove_at(dir, &n);
    }
}

/// A layer entry name as tar takes it: leading `/` dropped, `.` removed,
/// `..` folded; `None` when it climbs above the root.
fn normalize(raw: &str) -> Option<String> {
    let mut out: Vec<&str> = Vec::new();
    for c in raw.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                out.pop()?;
            }
            c => out.push(c),
        }
    }
    Some(out.join("/"))
}

/// The directory `rel` (normalised, relative) inside `root`, with every
/// symlink on the way followed inside `root`: an absolute target starts
/// again at `root`, a target that climbs above it is refused, as is a loop.
/// The result has no symlink below `root`, so writing there stays inside.
pub fn resolve_parent(root: &Path, rel: &str) -> std::result::Result<PathBuf, String> {
    resolved(root, rel).map(|p| root.join(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(blob: &Path) -> Vec<String> {
        let f = fs::File::open(blob).unwrap();
        let mut a = tar::Archive::new(flate2::read::GzDecoder::new(f));
        a.entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().to_string_lossy().to_string())
            .collect()
    }

    #[test]
    fn a_diff_has_changes_parents_and_whiteouts_and_applies_back() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        let blobs = Blobs::new(&t.path().join("blobs")).unwrap();
        fs::create_dir_all(root.join("etc/sub")).unwrap();
        fs::create_dir_all(root.join("gone/deep")).unwrap();
        fs::write(root.join("etc/keep"), "k").unwrap();
        fs::write(root.join("etc/old"), "o").unwrap();
        fs::write(root.join("gone/deep/x"), "x").unwrap();
        let before = Snapshot::take(&root).unwrap();
        assert!(diff(&root, &before, &blobs, false).unwrap().is_none());
        fs::write(root.join("etc/sub/new"), "n").unwrap();
        fs::hard_link(root.join("etc/sub/new"), root.join("etc/sub/link")).unwrap();
        fs::remove_file(root.join("etc/old")).unwrap();
        fs::remove_dir_all(root.join("gone")).unwrap();
        std::os::unix::fs::symlink("/etc/keep", root.join("ln")).unwrap();
        let layer = diff(&root, &before, &blobs, false).unwrap().unwrap();
        let names = entries(&blobs.path(&layer.digest));
        assert_eq!(
            names,
            vec![
                ".wh.gone",
                "etc",
                "etc/.wh.old",
                "etc/sub",
                "etc/sub/link",
                "etc/sub/new",
                "ln"
            ]
        );
        assert!(!names.contains(&"etc/keep".to_string()));
        // Applied to the old tree, the layer gives the new one.
        let other = t.path().join("other");
        fs::create_dir_all(other.join("etc/sub")).unwrap();
        fs::create_dir_all(other.join("gone/deep")).unwrap();
        fs::write(other.join("etc/keep"), "k").unwrap();
        fs::write(other.join("etc/old"), "o").unwrap();
        apply(&other, &blobs.path(&layer.digest)).unwrap();
        assert!(!other.join("gone").exists() && !other.join("etc/old").exists());
        assert_eq!(fs::read_to_string(other.join("etc/sub/link")).unwrap(), "n");
        assert_eq!(
            fs::read_link(other.join("ln")).unwrap(),
            Path::new("/etc/keep")
        );
    }

    /// A gzip layer of (name, kind, content-or-target) entries, raw names.
    fn raw_layer(dir: &Path, entries: &[(&str, tar::EntryType, &str)]) -> std::path::PathBuf {
        let mut b = tar::Builder::new(Vec::new());
        for (name, kind, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_mode(if kind.is_dir() { 0o755 } else { 0o644 });
            h.set_uid(0);
            h.set_gid(0);
            h.set_mtime(1_600_000_000);
            let body: &[u8] = if *kind == tar::EntryType::Regular {
                data.as_bytes()
            } else {
                b""
            };
            h.set_size(body.len() as u64);
            h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
            if matches!(kind, tar::EntryType::Symlink | tar::EntryType::Link) {
                h.as_old_mut().linkname[..data.len()].copy_from_slice(data.as_bytes());
            }
            h.set_cksum();
            b.append(&h, body).unwrap();
        }
        let path = dir.join("layer.tar.gz");
        let mut gz = flate2::write::GzEncoder::new(
            fs::File::create(&path).unwrap(),
            flate2::Compression::fast(),
        );
        gz.write_all(&b.into_inner().unwrap()).unwrap();
        gz.finish().unwrap();
        path
    }

    #[test]
    fn parents_are_resolved_inside_the_root_and_escapes_are_refused() {
        use tar::EntryType::{Directory, Link, Regular, Symlink};
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        let outside = t.path().join("outside");
        fs::create_dir_all(root.join("usr/lib")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join("victim"), "keep").unwrap();
        std::os::unix::fs::symlink("usr/lib", root.join("lib")).unwrap();
        // An absolute symlink to a host directory: followed inside the root.
        std::os::unix::fs::symlink(&outside, root.join("abs")).unwrap();
        let blob = raw_layer(
            t.path(),
            &[
                ("/", Directory, ""),
                ("lib/newfile", Regular, "through lib"),
                ("/etc/x", Regular, "abs name"),
                ("lib/hard", Link, "/lib/newfile"),
                ("abs/victim", Regular, "inside"),
                ("abs/.wh.victim", Regular, ""),
            ],
        );
        apply(&root, &blob).unwrap();
        assert_eq!(
            fs::read_to_string(root.join("usr/lib/newfile")).unwrap(),
            "through lib"
        );
        assert_eq!(
            fs::read_to_string(root.join("usr/lib/hard")).unwrap(),
            "through lib"
        );
        assert_eq!(fs::read_to_string(root.join("etc/x")).unwrap(), "abs name");
        assert!(fs::symlink_metadata(root.join("lib"))
            .unwrap()
            .file_type()
            .is_symlink());
        // Nothing outside was written or deleted.
        assert_eq!(fs::read_to_string(outside.join("victim")).unwrap(), "keep");
        for bad in [
            vec![("../escape", Regular, "x")],
            vec![("up", Symlink, "../../.."), ("up/escape", Regular, "x")],
            vec![("h", Link, "/../etc/passwd")],
        ] {
            let blob = raw_layer(t.path(), &bad);
            let err = apply(&root, &blob).unwrap_err().to_string();
            assert!(err.contains("climbs above the root"), "{err}");
        }
        assert!(!t.path().join("escape").exists());
    }

    #[test]
    fn nothing_is_whited_out_below_a_path_that_is_no_longer_a_directory() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        let blobs = Blobs::new(&t.path().join("blobs")).unwrap();
        fs::create_dir_all(root.join("d/sub")).unwrap();
        fs::write(root.join("d/sub/f"), "f").unwrap();
        let before = Snapshot::take(&root).unwrap();
        fs::remove_dir_all(root.join("d")).unwrap();
        fs::write(root.join("d"), "now a file").unwrap();
        let layer = diff(&root, &before, &blobs, false).unwrap().unwrap();
        assert_eq!(entries(&blobs.path(&layer.digest)), vec!["d"]);
    }

    /// The descriptor walk follows no symlink: a directory swapped for a
    /// symlink to the host between resolving and writing is refused, not
    /// written through; removing a symlink to a host directory removes the
    /// link, not what it points at.
    #[test]
    fn writes_and_removals_go_through_descriptors_that_follow_no_symlink() {
        let t = tempfile::tempdir().unwrap();
        let (root, host) = (t.path().join("root"), t.path().join("host"));
        fs::create_dir_all(&root).unwrap();
        fs::create_dir_all(host.join("keep")).unwrap();
        fs::write(host.join("keep/file"), "host").unwrap();
        std::os::unix::fs::symlink(&host, root.join("swapped")).unwrap();
        let root_fd: OwnedFd = fs::File::open(&root).unwrap().into();
        assert!(open_dir(&root_fd, "swapped/new", true).is_err());
        assert!(!host.join("new").exists());
        remove_at(&root_fd, "swapped");
        assert!(!root.join("swapped").exists());
        assert!(host.join("keep/file").exists());
        // A real tree goes whole.
        fs::create_dir_all(root.join("d/e/f")).unwrap();
        fs::write(root.join("d/e/f/g"), "x").unwrap();
        std::os::unix::fs::symlink(&host, root.join("d/e/link")).unwrap();
        remove_at(&root_fd, "d");
        assert!(!root.join("d").exists());
        assert!(host.join("keep/file").exists());
    }
}
