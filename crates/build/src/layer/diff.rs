//! A step's changes as a layer blob: [`Snapshot`] before, [`diff`] after.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use berth_image::store::blobs::{BlobRef, Blobs};
use berth_image::whiteout;

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
    let Some(names) = changes(root, before)? else {
        return Ok(None);
    };
    let writer = write_entries(blobs.layer_writer()?, root, &names, before, overlay_upper)?;
    Ok(Some(blobs.commit_layer(writer)?))
}

/// An overlay's upper directory as an uncompressed layer tar on `out`:
/// every entry, overlayfs's whiteouts as `.wh.` entries and its opaque
/// directories with `.wh..wh..opq` (a container's changes, for `--save`).
pub fn upper_layer<W: Write>(upper: &Path, out: W) -> Result<W> {
    let before = Snapshot::default();
    let names = changes(upper, &before)?.unwrap_or_default();
    write_entries(out, upper, &names, &before, true)
}

/// The entries to write for the changes of `root` since `before`, sorted:
/// each name with whether it is a whiteout of a removed entry; `None` if
/// nothing changed.
fn changes(root: &Path, before: &Snapshot) -> Result<Option<Vec<(String, bool)>>> {
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
    Ok(Some(names))
}

/// Writes `names` of `root` as a layer tar on `out`.
fn write_entries<W: Write>(
    out: W,
    root: &Path,
    names: &[(String, bool)],
    before: &Snapshot,
    overlay_upper: bool,
) -> Result<W> {
    let mut tar = tar::Builder::new(out);
    tar.mode(tar::HeaderMode::Complete);
    tar.follow_symlinks(false);
    let mut links: HashMap<u64, String> = HashMap::new();
    for (rel, whiteout) in names {
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
                    append_whiteout(&mut tar, &format!("{rel}/{}", whiteout::OPAQUE))?;
                    continue;
                }
            }
        }
        append(&mut tar, root, rel, &mut links)?;
    }
    tar.into_inner()
        .map_err(|e| Error::io("finish the layer", root, e))
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
    let removal = whiteout::removal_of(&name_of(p));
    match p.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => format!("{}/{removal}", dir.display()),
        None => removal,
    }
}

/// Whether overlayfs marked the directory opaque (`userxattr` mounts).
/// (`trusted.` where real root mounted it).
fn is_opaque(dir: &Path) -> bool {
    ["user.overlay.opaque", "trusted.overlay.opaque"]
        .iter()
        .any(|name| {
            let mut value = [0u8; 4];
            rustix::fs::lgetxattr(dir, *name, &mut value[..])
                .is_ok_and(|n| n >= 1 && value[0] == b'y')
        })
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
    // Gone since the walk (a live container's upper directory): nothing
    // to write.
    let meta = match fs::symlink_metadata(&path) {
        Err(e) if crate::context::gone(&e) => return Ok(()),
        meta => meta.map_err(|e| Error::io("inspect", &path, e))?,
    };
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
        let target = match fs::read_link(&path) {
            Err(e) if crate::context::gone(&e) || e.kind() == io::ErrorKind::InvalidInput => {
                return Ok(())
            }
            target => target.map_err(|e| Error::io("read", &path, e))?,
        };
        h.set_entry_type(tar::EntryType::Symlink);
        tar.append_link(&mut h, rel, &target).map_err(err)?;
    } else if ft.is_file() {
        if meta.nlink() > 1 {
            if let Some(first) = links.get(&meta.ino()) {
                h.set_entry_type(tar::EntryType::Link);
                tar.append_link(&mut h, rel, first).map_err(err)?;
                return Ok(());
            }
        }
        let f = match open_regular(&path) {
            Ok(Some(f)) => f,
            // Replaced meanwhile by something else, or gone.
            Ok(None) => return Ok(()),
            Err(e) => return Err(Error::io("read", &path, e)),
        };
        // The size, owner, mode and time of the file opened (it may not be
        // the one the path named when it was first looked at), and exactly
        // that many bytes: a file a live container shortens meanwhile is
        // padded with zeros, so the archive stays whole.
        let opened = f.metadata().map_err(|e| Error::io("inspect", &path, e))?;
        let len = opened.len();
        h.set_mode(opened.mode() & 0o7777);
        h.set_uid(opened.uid() as u64);
        h.set_gid(opened.gid() as u64);
        h.set_mtime(opened.mtime().max(0) as u64);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_size(len);
        tar.append_data(&mut h, rel, exactly(f, len)).map_err(err)?;
        // Later names of the file link to this one, now that it is written.
        if opened.nlink() > 1 {
            links.insert(opened.ino(), rel.to_string());
        }
    } else if ft.is_fifo() {
        h.set_entry_type(tar::EntryType::Fifo);
        tar.append_data(&mut h, rel, io::empty()).map_err(err)?;
    }
    // Device nodes cannot be made in a user namespace, sockets are not
    // content: neither goes into a layer.
    Ok(())
}

/// `len` bytes of `r`: cut where it has more, padded with zeros where it
/// has fewer.
fn exactly<R: Read>(r: R, len: u64) -> impl Read {
    r.take(len).chain(io::repeat(0)).take(len)
}

/// `path` opened for reading if it is a regular file (not following a
/// link); `None` if it is gone or is something else now.
fn open_regular(path: &Path) -> io::Result<Option<fs::File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = match fs::File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOENT | libc::ELOOP | libc::ENXIO)
            ) =>
        {
            return Ok(None)
        }
        Err(e) => return Err(e),
    };
    Ok(f.metadata()?.is_file().then_some(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_changed_size_is_written_at_its_stated_size() {
        let read = |data: &[u8], len| {
            let mut out = Vec::new();
            exactly(data, len).read_to_end(&mut out).unwrap();
            out
        };
        assert_eq!(read(b"abc", 5), b"abc\0\0");
        assert_eq!(read(b"abcdef", 4), b"abcd");
        assert_eq!(read(b"", 0), b"");
    }

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
        crate::layer::apply(&other, &blobs.path(&layer.digest)).unwrap();
        assert!(!other.join("gone").exists() && !other.join("etc/old").exists());
        assert_eq!(fs::read_to_string(other.join("etc/sub/link")).unwrap(), "n");
        assert_eq!(
            fs::read_link(other.join("ln")).unwrap(),
            Path::new("/etc/keep")
        );
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
}
