//! Unpacking an image into an empty directory, for nodes where FUSE cannot
//! serve it (the keeper's `unpack` mode). Everything is made relative to
//! directory descriptors this unpacker created and nothing is followed:
//! an entry named `..` or holding a `/` is refused, symlinks are made and
//! never entered, hard links point at files made here. Owners are the
//! image's where the user namespace maps them (else root's, as the server
//! reports them), modes are the image's (setuid bits too: the caller keeps
//! the tree where only its user can reach it, and berth's containers never
//! elevate), device nodes are left out (a user namespace cannot make
//! them), extended attributes are not copied.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Gid, Mode, OFlags, Timestamps, Uid};

use crate::fuse::owners::Owners;
use crate::reader::{Body, Image, Inode, InodeRef, Kind};

/// What an unpack made.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Unpacked {
    /// Entries made (directories, files, links, fifos, sockets).
    pub entries: u64,
    /// Bytes of file data written.
    pub bytes: u64,
    /// Device nodes left out.
    pub devices: u64,
}

/// Why an unpack stopped.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    /// The image could not be read.
    #[error("reading the image: {0}")]
    Image(#[from] crate::Error),
    /// Something could not be made.
    #[error("cannot {what} {path}: {source}")]
    Write {
        /// What was being done.
        what: &'static str,
        /// Where, relative to the destination.
        path: PathBuf,
        /// Why not.
        source: std::io::Error,
    },
    /// A directory that contains itself (a crafted image).
    #[error("the image's directory {0} contains itself")]
    Loop(PathBuf),
    /// A directory entry that is not a plain file name.
    #[error("the image has an entry named {0:?}, which is not a file name")]
    BadName(String),
}

/// Unpacks `image` into `dest`, an empty directory, with the owners
/// `owners` maps.
pub fn unpack(image: &Image, dest: &Path, owners: &Owners) -> Result<Unpacked, UnpackError> {
    let write = |what, path: &Path| {
        let path = path.to_path_buf();
        move |e: rustix::io::Errno| UnpackError::Write {
            what,
            path,
            source: e.into(),
        }
    };
    let top = rfs::open(
        dest,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(write("open", dest))?;
    let mut u = Unpacker {
        image,
        owners,
        top: top.try_clone().map_err(|e| UnpackError::Write {
            what: "open",
            path: dest.to_path_buf(),
            source: e,
        })?,
        links: HashMap::new(),
        dirs: HashSet::new(),
        done: Unpacked::default(),
        buf: Vec::with_capacity(CHUNK),
    };
    let root = image.inode(image.root())?;
    u.dir(&top, image.root(), &root, Path::new(""))?;
    u.attrs_fd(&top, &root, Path::new("."))?;
    Ok(u.done)
}

/// Bytes read and written at a time.
const CHUNK: usize = 1 << 20;

struct Unpacker<'a> {
    image: &'a Image,
    owners: &'a Owners,
    /// The destination, for hard links' first paths.
    top: OwnedFd,
    /// Inode number → path (from the destination) of its first link.
    links: HashMap<u32, PathBuf>,
    /// Directories entered, by inode number.
    dirs: HashSet<u32>,
    done: Unpacked,
    buf: Vec<u8>,
}

impl Unpacker<'_> {
    fn dir(
        &mut self,
        fd: &OwnedFd,
        r: InodeRef,
        inode: &Inode,
        at: &Path,
    ) -> Result<(), UnpackError> {
        if !self.dirs.insert(inode.number) {
            return Err(UnpackError::Loop(at.to_path_buf()));
        }
        let listing = self.image.listing(r, inode)?;
        for entry in &listing.entries {
            let bytes: &[u8] = &entry.name;
            if bytes.is_empty()
                || bytes == b"."
                || bytes == b".."
                || bytes.contains(&b'/')
                || bytes.contains(&0)
            {
                return Err(UnpackError::BadName(String::from_utf8_lossy(bytes).into()));
            }
            let name = std::ffi::OsStr::from_bytes(bytes);
            let rel = at.join(name);
            let child = self.image.inode(entry.inode)?;
            self.entry(fd, name, entry.inode, &child, &rel)?;
        }
        Ok(())
    }

    fn entry(
        &mut self,
        dir: &OwnedFd,
        name: &std::ffi::OsStr,
        r: InodeRef,
        inode: &Inode,
        rel: &Path,
    ) -> Result<(), UnpackError> {
        let fail = |what: &'static str| {
            let path = rel.to_path_buf();
            move |e: rustix::io::Errno| UnpackError::Write {
                what,
                path,
                source: e.into(),
            }
        };
        if inode.kind != Kind::Dir && inode.nlink > 1 {
            if let Some(first) = self.links.get(&inode.number) {
                rfs::linkat(&self.top, first, dir, name, AtFlags::empty()).map_err(fail("link"))?;
                self.done.entries += 1;
                return Ok(());
            }
        }
        let perm = Mode::from_raw_mode(u32::from(inode.perm) & 0o7777);
        match &inode.body {
            Body::Dir(_) => {
                rfs::mkdirat(dir, name, Mode::from_raw_mode(0o700)).map_err(fail("create"))?;
                let child = rfs::openat(
                    dir,
                    name,
                    OFlags::DIRECTORY | OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(fail("open"))?;
                self.done.entries += 1;
                self.dir(&child, r, inode, rel)?;
                self.attrs_fd(&child, inode, rel)?;
            }
            Body::File(f) => {
                let file = rfs::openat(
                    dir,
                    name,
                    OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::WRONLY
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                )
                .map_err(fail("create"))?;
                let mut out = std::fs::File::from(file);
                let mut pos = 0;
                while pos < inode.size {
                    self.buf.clear();
                    self.image
                        .read_file(r, f, inode.size, pos, CHUNK, &mut self.buf)?;
                    if self.buf.is_empty() {
                        break;
                    }
                    out.write_all(&self.buf).map_err(|e| UnpackError::Write {
                        what: "write",
                        path: rel.to_path_buf(),
                        source: e,
                    })?;
                    pos += self.buf.len() as u64;
                }
                self.done.bytes += pos;
                self.done.entries += 1;
                self.attrs_fd(&OwnedFd::from(out), inode, rel)?;
            }
            Body::Symlink(target) => {
                let target = std::ffi::OsStr::from_bytes(target);
                rfs::symlinkat(target, dir, name).map_err(fail("create the link"))?;
                self.done.entries += 1;
                self.owner_and_times_at(dir, name, inode);
            }
            Body::Device(_) => {
                self.done.devices += 1;
                return Ok(());
            }
            Body::Plain => {
                let kind = if inode.kind == Kind::Socket {
                    FileType::Socket
                } else {
                    FileType::Fifo
                };
                rfs::mknodat(dir, name, kind, perm, 0).map_err(fail("create"))?;
                self.done.entries += 1;
                self.owner_and_times_at(dir, name, inode);
                rfs::chmodat(dir, name, perm, AtFlags::empty()).map_err(fail("chmod"))?;
            }
        }
        if inode.kind != Kind::Dir && inode.nlink > 1 {
            self.links.insert(inode.number, rel.to_path_buf());
        }
        Ok(())
    }

    /// Owner and times of `name` in `dir`, not following it (best effort:
    /// an owner the namespace cannot take stays the unpacker's).
    fn owner_and_times_at(&self, dir: &OwnedFd, name: &std::ffi::OsStr, inode: &Inode) {
        let nofollow = AtFlags::SYMLINK_NOFOLLOW;
        let _ = rfs::chownat(dir, name, self.uid(inode), self.gid(inode), nofollow);
        let _ = rfs::utimensat(dir, name, &times(inode), nofollow);
    }

    fn uid(&self, inode: &Inode) -> Option<Uid> {
        Some(Uid::from_raw(self.owners.uid(inode.uid)))
    }

    fn gid(&self, inode: &Inode) -> Option<Gid> {
        Some(Gid::from_raw(self.owners.gid(inode.gid)))
    }

    /// Owner (where it can be set), mode and times of what `fd` is open
    /// on (the mode after the owner: a chown clears setuid bits).
    fn attrs_fd(&self, fd: &impl AsFd, inode: &Inode, rel: &Path) -> Result<(), UnpackError> {
        // An owner the namespace cannot take stays the unpacker's.
        let _ = rfs::fchown(fd, self.uid(inode), self.gid(inode));
        rfs::fchmod(fd, Mode::from_raw_mode(u32::from(inode.perm) & 0o7777)).map_err(|e| {
            UnpackError::Write {
                what: "chmod",
                path: rel.to_path_buf(),
                source: e.into(),
            }
        })?;
        let _ = rfs::futimens(fd, &times(inode));
        Ok(())
    }
}

/// The inode's modification time, as access time too.
fn times(inode: &Inode) -> Timestamps {
    let t = rustix::fs::Timespec {
        tv_sec: i64::from(inode.mtime),
        tv_nsec: 0,
    };
    Timestamps {
        last_access: t,
        last_modification: t,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};

    /// mksquashfs of a tree with a setuid file, a hard link, a link out
    /// of the tree, a fifo and another owner, unpacked.
    #[test]
    fn unpacks_kinds_owners_and_modes_without_following_links() {
        let Ok(mksquashfs) = which("mksquashfs") else {
            assert!(
                std::env::var_os("CI").is_none(),
                "mksquashfs is missing under CI"
            );
            eprintln!("SKIPPED: no mksquashfs (apt-get install squashfs-tools)");
            return;
        };
        let d = tempfile::tempdir().unwrap();
        let tree = d.path().join("tree");
        std::fs::create_dir_all(tree.join("a/b")).unwrap();
        std::fs::write(tree.join("a/f"), "hello").unwrap();
        std::fs::set_permissions(tree.join("a/f"), std::fs::Permissions::from_mode(0o4755))
            .unwrap();
        std::fs::hard_link(tree.join("a/f"), tree.join("a/h")).unwrap();
        std::os::unix::fs::symlink("../../../escape", tree.join("a/b/out")).unwrap();
        rfs::mknodat(
            rfs::CWD,
            tree.join("p"),
            FileType::Fifo,
            Mode::from_raw_mode(0o640),
            0,
        )
        .unwrap();
        std::fs::write(tree.join("owned"), vec![7u8; 3 * CHUNK + 5]).unwrap();
        let mine = rustix::process::getuid().as_raw() == 0;
        if mine {
            std::os::unix::fs::chown(tree.join("owned"), Some(1234), Some(4321)).unwrap();
        }
        let img = d.path().join("img.sqfs");
        let st = std::process::Command::new(mksquashfs)
            .arg(&tree)
            .arg(&img)
            .args(["-noappend", "-quiet", "-no-progress"])
            .output()
            .unwrap();
        assert!(st.status.success(), "{st:?}");
        let image = Image::open(std::fs::File::open(&img).unwrap(), 0).unwrap();
        let out = d.path().join("out");
        std::fs::create_dir(&out).unwrap();
        let done = unpack(&image, &out, &Owners::default()).unwrap();
        assert_eq!(done.devices, 0);
        assert_eq!(done.bytes, 5 + 3 * CHUNK as u64 + 5);
        assert_eq!(std::fs::read_to_string(out.join("a/h")).unwrap(), "hello");
        let f = std::fs::metadata(out.join("a/f")).unwrap();
        assert_eq!(f.permissions().mode() & 0o7777, 0o4755, "the image's mode");
        assert_eq!(f.ino(), std::fs::metadata(out.join("a/h")).unwrap().ino());
        assert_eq!(
            std::fs::read_link(out.join("a/b/out")).unwrap(),
            Path::new("../../../escape")
        );
        assert!(!d.path().join("escape").exists());
        let p = std::fs::symlink_metadata(out.join("p")).unwrap();
        assert!(p.file_type().is_fifo());
        assert_eq!(p.permissions().mode() & 0o777, 0o640);
        let owned = std::fs::metadata(out.join("owned")).unwrap();
        assert_eq!(owned.len(), 3 * CHUNK as u64 + 5);
        if mine {
            assert_eq!((owned.uid(), owned.gid()), (1234, 4321));
        }
        assert_eq!(
            owned.mtime(),
            std::fs::metadata(tree.join("owned")).unwrap().mtime()
        );
    }

    fn which(program: &str) -> Result<PathBuf, ()> {
        ["/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/bin"]
            .iter()
            .map(|d| Path::new(d).join(program))
            .find(|p| p.is_file())
            .ok_or(())
    }
}
