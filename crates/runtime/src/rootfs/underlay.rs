//! Binds-only roots, for kernels that refuse overlayfs in a user namespace
//! (before 5.11, or a distribution that turned it off) or a site that
//! chose them (`[runtime] overlay = "none"`).
//!
//! The root is a tmpfs that holds a read-only bind of each of the image's
//! top-level entries, so a mount point missing at the top (`/scratch`)
//! is an empty directory in it. A mount point missing deeper, in a
//! read-only directory of the image (`/home/alice`), is made by the same
//! move one level down: the directory is covered by a tmpfs that binds
//! each of its entries back and holds the new mount point (Apptainer's
//! "underlay"). Covers are read-only once the root's mount points exist.
//!
//! Entries are opened with `O_NOFOLLOW` and bound through their
//! descriptors: a symlink is copied as a symlink, never followed. Other
//! entries (files, device nodes, fifos, sockets) are bound onto an empty
//! file, `nosuid` and `nodev` as the image's own mount. An entry that is
//! a mount of its own (a read-write bind made before the cover) is bound
//! back with its mounts as they are, not made read-only.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;

use rustix::fs::{Dir, FileType, Mode, OFlags};

use crate::error::{Error, Result};
use crate::sys::{fd_path, Errno, Kernel};

use super::mounts::locked_flags;

/// The most entries a directory may have to be rebuilt as binds (one
/// mount each).
pub const MAX_ENTRIES: usize = 8192;

/// The source name of a cover's tmpfs, as mountinfo shows it.
const SOURCE: &str = "berth-underlay";

/// Mounts a tmpfs on `target` (an empty directory) and fills it with
/// binds of the entries of the directory `image`: the root of a
/// binds-only container. The tmpfs stays writable (the caller remounts
/// the root read-only when its mount points exist).
pub fn root(k: &dyn Kernel, image: &Path, target: &Path) -> Result<()> {
    let below = open_dir(image).map_err(|e| Error::sys("open the image", Some(image.into()), e))?;
    let entries = names(&below).map_err(|e| Error::sys("list", Some(image.into()), e))?;
    mount_tmpfs_like(k, &below, target)
        .map_err(|e| Error::sys("mount the root's tmpfs on", Some(target.into()), e))?;
    let top = open_dir(target).map_err(|e| Error::sys("open", Some(target.into()), e))?;
    fill(k, &below, &entries, &top, "/")
}

/// Mounts a cover's tmpfs on `target` with the mode of the directory
/// `below` it covers.
fn mount_tmpfs_like(
    k: &dyn Kernel,
    below: &OwnedFd,
    target: &Path,
) -> std::result::Result<(), Errno> {
    let mode = rustix::fs::fstat(below)
        .map(|st| st.st_mode & 0o7777)
        .unwrap_or(0o755);
    k.mount(
        Some(Path::new(SOURCE)),
        target,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&format!("mode={mode:o}")),
    )
}

/// Covers the read-only directory `dir` (a path inside `root`, already
/// resolved there) with a writable tmpfs holding binds of its entries, so
/// that a mount point can be created in it. The cover stays writable
/// until [`seal_all`].
pub fn cover(k: &dyn Kernel, root: &OwnedFd, dir: &str) -> Result<()> {
    let shown = if dir.is_empty() { "/" } else { dir };
    let below = k
        .open_in_root(root.as_fd(), dir, OFlags::DIRECTORY | OFlags::RDONLY)
        .map_err(|e| Error::sys("open", Some(shown.into()), e))?;
    let entries = names(&below).map_err(|e| Error::sys("list", Some(shown.into()), e))?;
    if entries.len() > MAX_ENTRIES {
        return Err(Error::Mount(format!(
            "a mount point must be made in {shown}, which is read-only here (an image directory \
             on a root without overlay, or a read-only bind) and has {} entries, more than the \
             {MAX_ENTRIES} berth binds back one by one; mount on a path that exists there, or \
             under a directory with fewer entries",
            entries.len()
        )));
    }
    let at = k
        .open_in_root(root.as_fd(), dir, OFlags::PATH)
        .map_err(|e| Error::sys("open", Some(shown.into()), e))?;
    mount_tmpfs_like(k, &below, &fd_path(&at))
        .map_err(|e| Error::sys("mount a tmpfs on", Some(shown.into()), e))?;
    let top = k
        .open_in_root(root.as_fd(), dir, OFlags::DIRECTORY | OFlags::RDONLY)
        .map_err(|e| Error::sys("open the tmpfs on", Some(shown.into()), e))?;
    let dev = rustix::fs::fstat(&top)
        .map(|st| st.st_dev)
        .map_err(|e| Error::sys("stat the tmpfs on", Some(shown.into()), e))?;
    UNSEALED.with(|u| u.borrow_mut().push((dir.to_string(), dev)));
    fill(k, &below, &entries, &top, shown)
}

thread_local! {
    /// The covers this thread made and has not sealed yet (paths inside
    /// the root): a root is assembled on one thread, and its covers are
    /// sealed by path, not found in mountinfo (a recursive bind of a host
    /// directory can show copies of the root's own mounts there).
    /// Each with its tmpfs's device: a path that a later bind covered
    /// shows another device and is left alone.
    static UNSEALED: std::cell::RefCell<Vec<(String, u64)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Makes the covers made since the last call read-only, once the mount
/// points exist: the last step before the root itself is.
pub fn seal_all(k: &dyn Kernel, root: &OwnedFd) -> Result<()> {
    for (dir, dev) in UNSEALED.with(|u| std::mem::take(&mut *u.borrow_mut())) {
        let at = k
            .open_in_root(root.as_fd(), &dir, OFlags::PATH)
            .map_err(|e| Error::sys("open", Some(dir.clone().into()), e))?;
        if rustix::fs::fstat(&at).map(|st| st.st_dev) != Ok(dev) {
            // A bind made since covers the cover (a user's `-v` on the
            // same path): that mount keeps its own flags.
            continue;
        }
        k.mount(None, &fd_path(&at), None, super::ROOT_READ_ONLY, None)
            .map_err(|e| Error::sys("remount read-only", Some(dir.into()), e))?;
    }
    Ok(())
}

/// Opens a directory for listing.
fn open_dir(path: &Path) -> std::result::Result<OwnedFd, Errno> {
    rustix::fs::open(
        path,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// The names in a directory, without `.` and `..`.
fn names(dir: &OwnedFd) -> std::result::Result<Vec<std::ffi::CString>, Errno> {
    let mut out = Vec::new();
    for entry in Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_bytes() != b"." && name.to_bytes() != b".." {
            out.push(name.to_owned());
        }
    }
    Ok(out)
}

/// The entry `name` of `dir` itself (a symlink is not followed), as an
/// `O_PATH` descriptor.
fn entry(dir: &OwnedFd, name: &std::ffi::CStr) -> std::result::Result<OwnedFd, Errno> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Rebuilds each entry of `below` in `top`: symlinks copied, everything
/// else bound onto a placeholder of its kind, read-only where it is on
/// `below`'s own mount. `shown` names the directory in messages.
fn fill(
    k: &dyn Kernel,
    below: &OwnedFd,
    entries: &[std::ffi::CString],
    top: &OwnedFd,
    shown: &str,
) -> Result<()> {
    let path_of = |name: &std::ffi::CStr| {
        Path::new(shown).join(String::from_utf8_lossy(name.to_bytes()).as_ref())
    };
    let below_mount = mount_of(below);
    for name in entries {
        let here = path_of(name);
        let source = entry(below, name).map_err(|e| Error::sys("open", Some(here.clone()), e))?;
        let kind = rustix::fs::fstat(&source)
            .map(|st| FileType::from_raw_mode(st.st_mode))
            .map_err(|e| Error::sys("stat", Some(here.clone()), e))?;
        let made = match kind {
            FileType::Symlink => {
                let to = rustix::fs::readlinkat(below, name.as_c_str(), Vec::new())
                    .map_err(|e| Error::sys("read the symlink", Some(here.clone()), e))?;
                rustix::fs::symlinkat(to.as_c_str(), top, name.as_c_str())
                    .map_err(|e| Error::sys("copy the symlink", Some(here.clone()), e))?;
                continue;
            }
            FileType::Directory => {
                rustix::fs::mkdirat(top, name.as_c_str(), Mode::from_raw_mode(0o755))
            }
            _ => rustix::fs::openat(
                top,
                name.as_c_str(),
                OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o644),
            )
            .map(drop),
        };
        made.map_err(|e| Error::sys("make a mount point for", Some(here.clone()), e))?;
        let at = entry(top, name)
            .map_err(|e| Error::sys("open the mount point", Some(here.clone()), e))?;
        k.mount(
            Some(&fd_path(&source)),
            &fd_path(&at),
            None,
            libc::MS_BIND | libc::MS_REC,
            None,
        )
        .map_err(|e| Error::sys("bind", Some(here.clone()), e))?;
        drop(at);
        let on_top =
            entry(top, name).map_err(|e| Error::sys("open the bind", Some(here.clone()), e))?;
        if mount_of(&source) != below_mount {
            // A mount of its own (a bind made earlier, a read-write one
            // say): the copy keeps its flags.
            continue;
        }
        let flags =
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | locked_flags(&fd_path(&source));
        k.mount(None, &fd_path(&on_top), None, flags, None)
            .map_err(|e| Error::sys("remount read-only", Some(here), e))?;
    }
    Ok(())
}

/// Which mount `fd` lies on: the `mnt_id` of its /proc/self/fdinfo entry
/// (Linux 3.15 and later, so RHEL 8's kernel too).
fn mount_of(fd: &OwnedFd) -> Option<u64> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).ok()?;
    mnt_id(&info)
}

/// The `mnt_id:` line of an fdinfo text.
fn mnt_id(fdinfo: &str) -> Option<u64> {
    fdinfo
        .lines()
        .find_map(|l| l.strip_prefix("mnt_id:"))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::fake::{Call, Recording};

    #[test]
    fn a_binds_only_root_binds_each_entry_read_only_and_copies_symlinks() {
        let d = tempfile::tempdir().unwrap();
        let (image, target) = (d.path().join("image"), d.path().join("root"));
        std::fs::create_dir_all(image.join("etc")).unwrap();
        std::fs::write(image.join("file"), "x").unwrap();
        std::os::unix::fs::symlink("/etc", image.join("hostetc")).unwrap();
        std::fs::create_dir(&target).unwrap();
        let k = Recording::new();
        root(&k, &image, &target).unwrap();

        // Placeholders of each kind; the symlink copied, not followed.
        assert!(target.join("etc").is_dir());
        assert_eq!(std::fs::read(target.join("file")).unwrap(), b"");
        assert_eq!(
            std::fs::read_link(target.join("hostetc")).unwrap(),
            Path::new("/etc")
        );
        let mounts: Vec<_> = k
            .mounts()
            .into_iter()
            .filter_map(|c| match c {
                Call::Mount {
                    source,
                    target,
                    fstype,
                    flags,
                    ..
                } => Some((source, target, fstype, flags)),
                _ => None,
            })
            .collect();
        assert_eq!(mounts[0].0.as_deref(), Some(Path::new(SOURCE)));
        assert_eq!(mounts[0].2.as_deref(), Some("tmpfs"));
        // Each directory and file: a recursive bind, then a read-only,
        // nosuid, nodev remount of it; the symlink: nothing.
        let rest = &mounts[1..];
        assert_eq!(rest.len(), 4, "{rest:?}");
        for pair in rest.chunks(2) {
            let (bind, remount) = (&pair[0], &pair[1]);
            assert_eq!(bind.3, libc::MS_BIND | libc::MS_REC);
            assert_eq!(bind.1, remount.1);
            let ro = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY;
            assert_eq!(remount.3 & ro, ro);
            assert_ne!(remount.3 & libc::MS_NOSUID, 0);
            assert_ne!(remount.3 & libc::MS_NODEV, 0);
            assert!(!bind.1.contains("hostetc"), "{bind:?}");
        }
    }

    #[test]
    fn the_mount_id_is_read_from_fdinfo() {
        assert_eq!(
            mnt_id("pos:\t0\nflags:\t02000000\nmnt_id:\t29\nino:\t5\n"),
            Some(29)
        );
        assert_eq!(mnt_id("pos:\t0\n"), None);
        let f: OwnedFd = std::fs::File::open("/").unwrap().into();
        assert!(mount_of(&f).is_some());
    }

    #[test]
    fn a_directory_with_too_many_entries_is_not_covered() {
        let d = tempfile::tempdir().unwrap();
        let big = d.path().join("big");
        std::fs::create_dir(&big).unwrap();
        for i in 0..=MAX_ENTRIES {
            std::fs::write(big.join(i.to_string()), "").unwrap();
        }
        let k = Recording::new().with_root(d.path());
        let root_fd: OwnedFd = std::fs::File::open(d.path()).unwrap().into();
        let err = cover(&k, &root_fd, "big").unwrap_err().to_string();
        assert!(err.contains("more than the 8192"), "{err}");
        assert!(k.mounts().is_empty(), "nothing mounted");
    }
}
