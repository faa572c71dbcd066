//! Applying a layer blob to a stage root, inside the root only.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use berth_image::whiteout::Whiteout;

use crate::{Error, Result};

/// Applies the layer blob `blob` to `root`: whiteouts remove, opaque
/// markers empty a directory (names read by [`Whiteout::of`], the rule the
/// flattener follows too), entries are unpacked with their owners.
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
        if let Some(whiteout) = Whiteout::of(name.as_bytes()) {
            let dir = open_dir(&root_fd, &parent, false);
            match (whiteout, dir) {
                (Whiteout::Opaque, Ok(dir)) => empty_dir(&dir),
                (Whiteout::Remove(gone), Ok(dir)) => {
                    remove_at(&dir, &String::from_utf8_lossy(gone));
                }
                // Nothing to remove, or nothing there to remove it from.
                (Whiteout::Reserved, _) | (_, Err(_)) => {}
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
    use std::io::Write;

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

    /// Whiteout names that name no sibling (`.wh..` would be the parent)
    /// and AUFS's own entries remove nothing.
    #[test]
    fn reserved_whiteout_names_remove_nothing() {
        use tar::EntryType::{Directory, Regular};
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        fs::create_dir_all(root.join("d")).unwrap();
        fs::write(root.join("d/keep"), "k").unwrap();
        fs::write(t.path().join("beside"), "b").unwrap();
        let blob = raw_layer(
            t.path(),
            &[
                (".wh..", Regular, ""),
                ("d/.wh...", Regular, ""),
                ("d/.wh..wh.plnk", Directory, ""),
                ("d/.wh.", Regular, ""),
            ],
        );
        apply(&root, &blob).unwrap();
        assert_eq!(fs::read_to_string(root.join("d/keep")).unwrap(), "k");
        assert_eq!(fs::read_to_string(t.path().join("beside")).unwrap(), "b");
        assert!(!root.join("d/.wh..wh.plnk").exists());
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
