//! `--overlay DIR[:ro]`: claims a persistent overlay directory for one
//! run. The directory is made if missing (with `upper/` and `work/`), and
//! locked for as long as the run lives: a writer alone (overlayfs cannot
//! share an upper layer, and a layer below a mount must not change under
//! it), or any number of read-only users.

use std::fs::File;
use std::path::{Path, PathBuf};

use berth_runtime::rootfs::PersistentOverlay;

use crate::error::{Error, Result};

/// An overlay directory claimed for a run: the lock goes with the value.
#[derive(Debug)]
pub struct Claimed {
    /// What the runtime mounts.
    pub overlay: PersistentOverlay,
    /// The directory's lock (exclusive for a writer, shared read-only);
    /// `None` where a shared container's anchor takes it.
    pub lock: Option<File>,
}

/// Parses `DIR[:ro|:rw]` (relative to `cwd`), makes the directory where
/// it is missing and locks it (unless `lock` is false: a shared container
/// locks it when it is made, for as long as its anchor lives).
/// `user_xattr`: the run mounts in a user namespace.
pub fn claim(spec: &str, cwd: &Path, user_xattr: bool, lock: bool) -> Result<Claimed> {
    let (dir, readonly) = parse(spec, cwd)?;
    let upper = dir.join("upper");
    if readonly {
        if !upper.is_dir() {
            return Err(Error::Overlay(format!(
                "--overlay {spec}: {} has no upper/ directory to stack read-only; make it with a writable run first (--overlay {})",
                dir.display(),
                dir.display()
            )));
        }
    } else {
        for d in [&upper, &dir.join("work")] {
            std::fs::create_dir_all(d).map_err(|e| {
                Error::Overlay(format!(
                    "--overlay {spec}: cannot make {}: {e}",
                    d.display()
                ))
            })?;
        }
    }
    let overlay = PersistentOverlay {
        dir,
        readonly,
        user_xattr,
    };
    if !lock {
        return Ok(Claimed {
            overlay,
            lock: None,
        });
    }
    match overlay.lock(std::time::Duration::ZERO) {
        Ok(Some(file)) => Ok(Claimed {
            overlay,
            lock: Some(file),
        }),
        Ok(None) => Err(Error::Overlay(format!(
            "--overlay {spec}: {} is in use by another container{}; overlayfs cannot share a writable layer: wait for that run to end, or use another directory",
            overlay.dir.display(),
            if readonly { " that writes to it" } else { "" }
        ))),
        Err(e) => Err(Error::Overlay(format!(
            "--overlay {spec}: cannot lock {}: {e}",
            overlay.dir.display()
        ))),
    }
}
/// `DIR[:ro|:rw]`: the absolute directory and whether it is read-only.
fn parse(spec: &str, cwd: &Path) -> Result<(PathBuf, bool)> {
    let (path, readonly) = match spec.rsplit_once(':') {
        Some((p, "ro")) => (p, true),
        Some((p, "rw")) => (p, false),
        _ => (spec, false),
    };
    if path.is_empty() {
        return Err(Error::Usage(
            "--overlay needs a directory: --overlay DIR[:ro]".into(),
        ));
    }
    // The overlay's mount options separate with , and : (and \ escapes).
    if let Some(c) = path.chars().find(|c| matches!(c, ',' | ':' | '\\')) {
        return Err(Error::Usage(format!(
            "--overlay {spec}: the directory's path holds {c:?}, which overlayfs's options cannot carry; use another path"
        )));
    }
    let dir = cwd.join(path);
    // Clean `.` and `..` lexically: the lock and the mount name one place.
    let mut clean = PathBuf::new();
    for c in dir.components() {
        match c {
            std::path::Component::ParentDir => {
                clean.pop();
            }
            std::path::Component::CurDir => {}
            other => clean.push(other),
        }
    }
    Ok((clean, readonly))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_are_absolute_and_read_only_on_request() {
        let cwd = Path::new("/home/u/job");
        assert_eq!(
            parse("ov", cwd).unwrap(),
            (PathBuf::from("/home/u/job/ov"), false)
        );
        assert_eq!(
            parse("../ov:ro", cwd).unwrap(),
            (PathBuf::from("/home/u/ov"), true)
        );
        assert_eq!(
            parse("/scratch/ov:rw", cwd).unwrap(),
            (PathBuf::from("/scratch/ov"), false)
        );
        assert!(parse("/a,b", cwd).is_err());
        assert!(parse("/a:b", cwd).is_err());
        assert!(parse(":ro", cwd).is_err());
    }

    #[test]
    fn one_writer_or_many_readers() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ov");
        let spec = dir.to_str().unwrap().to_string();
        let writer = claim(&spec, tmp.path(), true, true).unwrap();
        assert!(dir.join("upper").is_dir() && dir.join("work").is_dir());
        let busy = claim(&spec, tmp.path(), true, true)
            .unwrap_err()
            .to_string();
        assert!(busy.contains("is in use by another container"), "{busy}");
        let ro = format!("{spec}:ro");
        assert!(claim(&ro, tmp.path(), true, true).is_err());
        drop(writer);
        let r1 = claim(&ro, tmp.path(), true, true).unwrap();
        let r2 = claim(&ro, tmp.path(), true, true).unwrap();
        assert!(r1.overlay.readonly && r2.overlay.readonly);
        assert!(claim(&spec, tmp.path(), true, true).is_err());
    }

    #[test]
    fn read_only_needs_an_upper_layer() {
        let tmp = tempfile::tempdir().unwrap();
        let ro = format!("{}:ro", tmp.path().display());
        let e = claim(&ro, tmp.path(), true, true).unwrap_err().to_string();
        assert!(e.contains("has no upper/ directory"), "{e}");
    }
}
