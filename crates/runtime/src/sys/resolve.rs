//! Opening a path inside a root without `openat2`: one component at a
//! time, each opened `O_PATH | O_NOFOLLOW` from the directory before it,
//! symlinks read and resolved by berth (an absolute target starts again at
//! the root, `..` never climbs above it), as `RESOLVE_IN_ROOT` does.
//! Magic links (`/proc/self/fd/N` of a procfs inside the root) are read as
//! text like any symlink, never followed, as `RESOLVE_NO_MAGICLINKS` asks.
//!
//! The last component is opened again with the caller's flags plus
//! `O_NOFOLLOW`, so a symlink swapped in after the walk fails with `ELOOP`
//! instead of being followed.

use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{FileType, Mode, OFlags};

use super::Errno;

/// Symlinks followed in one resolution before `ELOOP` (the kernel's limit).
const MAX_SYMLINKS: usize = 40;

/// See the module doc. `rel` is relative to `root` (a leading `/` means
/// the root too).
pub(super) fn open_in_root(
    root: BorrowedFd<'_>,
    rel: &str,
    flags: OFlags,
) -> Result<OwnedFd, Errno> {
    let path_only = OFlags::PATH | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    let root_dir = rustix::fs::openat(root, ".", OFlags::PATH | OFlags::CLOEXEC, Mode::empty())?;
    // The directories walked so far; the first is the root.
    let mut stack: Vec<OwnedFd> = vec![root_dir];
    let mut todo: VecDeque<String> = components(rel);
    let mut links = 0;
    // The last component opened, with its parent still on the stack.
    let mut last: Option<(OwnedFd, String)> = None;
    while let Some(comp) = todo.pop_front() {
        if let Some((fd, _)) = last.take() {
            // Not last after all (a symlink's target went on): a directory.
            stack.push(fd);
        }
        if comp == ".." {
            if stack.len() > 1 {
                stack.pop();
            }
            continue;
        }
        let parent = stack.last().ok_or(Errno::INVAL)?;
        let fd = rustix::fs::openat(parent, comp.as_str(), path_only, Mode::empty())?;
        let kind = FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode);
        let is_last = todo.is_empty();
        if kind == FileType::Symlink && !(is_last && flags.contains(OFlags::NOFOLLOW)) {
            links += 1;
            if links > MAX_SYMLINKS {
                return Err(Errno::LOOP);
            }
            let target = rustix::fs::readlinkat(&fd, "", Vec::new())?;
            let target = target.to_string_lossy().into_owned();
            if target.starts_with('/') {
                stack.truncate(1);
            }
            for c in components(&target).into_iter().rev() {
                todo.push_front(c);
            }
            continue;
        }
        if !is_last && kind != FileType::Directory {
            return Err(Errno::NOTDIR);
        }
        last = Some((fd, comp));
    }
    match last {
        // The path named the root itself (empty, `.`, or `..` above it).
        None => reopen(stack.last().ok_or(Errno::INVAL)?.as_fd(), ".", flags),
        Some((fd, name)) => {
            if flags.contains(OFlags::PATH) && !flags.contains(OFlags::DIRECTORY) {
                return Ok(fd);
            }
            let parent = stack.last().ok_or(Errno::INVAL)?;
            reopen(parent.as_fd(), &name, flags)
        }
    }
}

/// Opens `name` in `dir` with `flags`, never following a symlink there.
fn reopen(dir: BorrowedFd<'_>, name: &str, flags: OFlags) -> Result<OwnedFd, Errno> {
    let follow_none = if name == "." {
        OFlags::empty()
    } else {
        OFlags::NOFOLLOW
    };
    rustix::fs::openat(
        dir,
        name,
        flags | follow_none | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// The components of `path` that move (empty ones and `.` dropped).
fn components(path: &str) -> VecDeque<String> {
    path.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::sys::{Kernel, Linux};
    use std::os::unix::fs::symlink;
    use std::path::Path;

    /// A root with the classic escapes: an absolute symlink to the host, a
    /// relative one climbing above the root, a chain, a loop, a dangling
    /// link, a file used as a directory.
    pub(crate) fn tree() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("usr/lib")).unwrap();
        std::fs::write(r.join("usr/lib/libc.so"), "image's").unwrap();
        std::fs::create_dir_all(r.join("etc")).unwrap();
        std::fs::write(r.join("etc/passwd"), "root:x:0:0::/root:/bin/sh\n").unwrap();
        symlink("usr/lib", r.join("lib")).unwrap();
        symlink("/etc", r.join("abs-etc")).unwrap();
        symlink("../../../../etc", r.join("climb")).unwrap();
        symlink("lib", r.join("chain")).unwrap();
        symlink("loop2", r.join("loop1")).unwrap();
        symlink("loop1", r.join("loop2")).unwrap();
        symlink("nowhere", r.join("dangling")).unwrap();
        symlink("/proc/self/root", r.join("magic")).unwrap();
        d
    }

    /// What a path resolves to, as the file's contents or the error.
    pub(crate) fn read(k: &dyn Kernel, root: &Path, path: &str) -> Result<String, Errno> {
        let root = std::fs::File::open(root).unwrap();
        let fd = k.open_in_root(root.as_fd(), path, OFlags::RDONLY)?;
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::fs::File::from(fd), &mut s)
            .map_err(|_| Errno::IO)?;
        Ok(s)
    }

    const CASES: &[&str] = &[
        "usr/lib/libc.so",
        "/lib/libc.so",
        "chain/libc.so",
        "abs-etc/passwd",
        "climb/passwd",
        "../../etc/passwd",
        "usr/../../../etc/passwd",
        "loop1/x",
        "dangling",
        "etc/passwd/x",
        "magic/etc/passwd",
        "nothing/here",
    ];

    #[test]
    fn the_walk_resolves_as_openat2_does() {
        let d = tree();
        let with = Linux::new();
        let without = Linux::without_openat2();
        for case in CASES {
            let a = read(&with, d.path(), case);
            let b = read(&without, d.path(), case);
            assert_eq!(a, b, "{case}: openat2 {a:?}, walk {b:?}");
        }
        // And what they agree on is the root's, never the host's.
        assert_eq!(
            read(&without, d.path(), "climb/passwd").unwrap(),
            "root:x:0:0::/root:/bin/sh\n"
        );
        assert_eq!(read(&without, d.path(), "/lib/libc.so").unwrap(), "image's");
        assert_eq!(read(&without, d.path(), "loop1/x"), Err(Errno::LOOP));
        assert_eq!(read(&without, d.path(), "etc/passwd/x"), Err(Errno::NOTDIR));
    }

    #[test]
    fn the_walk_opens_directories_and_path_descriptors() {
        let d = tree();
        let k = Linux::without_openat2();
        let root = std::fs::File::open(d.path()).unwrap();
        let dir = k
            .open_in_root(root.as_fd(), "/abs-etc", OFlags::DIRECTORY | OFlags::RDONLY)
            .unwrap();
        let real = std::fs::read_link(crate::sys::fd_path(&dir)).unwrap();
        assert_eq!(real, d.path().join("etc").canonicalize().unwrap());
        let top = k.open_in_root(root.as_fd(), "/", OFlags::PATH).unwrap();
        let real = std::fs::read_link(crate::sys::fd_path(&top)).unwrap();
        assert_eq!(real, d.path().canonicalize().unwrap());
        // O_NOFOLLOW on the last component: the link itself.
        let link = k
            .open_in_root(root.as_fd(), "abs-etc", OFlags::PATH | OFlags::NOFOLLOW)
            .unwrap();
        let st = rustix::fs::fstat(&link).unwrap();
        assert_eq!(FileType::from_raw_mode(st.st_mode), FileType::Symlink);
    }
}
