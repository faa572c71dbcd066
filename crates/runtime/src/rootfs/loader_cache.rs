//! A writable root's loader cache. A read-only root gets the run's copy
//! of the image's `/etc/ld.so.cache` (with the injected libraries) bound
//! over the image's; a writable root cannot, since the image's `ldconfig`
//! (apt's and dnf's triggers run it) replaces the cache by renaming a new
//! file onto it, which a mount point refuses. There the copy lies in the
//! hint layer above the image instead, with a file in
//! `/etc/ld.so.conf.d` that names the injected libraries' directory (and
//! the image's newer CUDA driver's before it, where that one is used), so
//! that a cache the image's `ldconfig` writes keeps them.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The loader configuration file that names [`LoaderCache::dirs`], relative
/// to a root (read early: its name sorts first).
pub const CONF_PATH: &str = "etc/ld.so.conf.d/000-berth-libraries.conf";

/// The run's loader cache, for a writable root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoaderCache {
    /// The cache file on the host (written by the engine).
    pub file: PathBuf,
    /// The directories the image's `ldconfig` is to search first, inside
    /// the container: the injected libraries', after the image's newer
    /// CUDA driver's where that one is used (the first of a name wins).
    pub dirs: Vec<String>,
}

/// Writes `cache`'s file at `etc/ld.so.cache` and [`CONF_PATH`] under
/// `dest` (the hint layer), where `image`'s `etc` and
/// `etc/ld.so.conf.d` are directories, not links: nothing outside the
/// root is looked at. Each directory made in `dest` takes the image's
/// mode. Whether it wrote them.
pub fn write(image: &Path, dest: &Path, cache: &LoaderCache) -> io::Result<bool> {
    let dirs = ["etc", "etc/ld.so.conf.d"];
    let mut modes = Vec::new();
    for d in dirs {
        match fs::symlink_metadata(image.join(d)) {
            Ok(m) if m.is_dir() => modes.push(m.permissions().mode() & 0o7777),
            _ => return Ok(false),
        }
    }
    for (d, mode) in dirs.iter().zip(modes) {
        let path = dest.join(d);
        match fs::create_dir(&path) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        fs::set_permissions(&path, fs::Permissions::from_mode(mode))?;
    }
    let bytes = fs::read(&cache.file)?;
    file(&dest.join("etc/ld.so.cache"), &bytes)?;
    let conf: String = cache.dirs.iter().map(|d| format!("{d}\n")).collect();
    file(&dest.join(CONF_PATH), conf.as_bytes())?;
    Ok(true)
}

/// A new file of `bytes`, readable by every id of the container.
fn file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)?;
    f.write_all(bytes)?;
    f.set_permissions(fs::Permissions::from_mode(0o644))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_and_its_directory_lie_in_the_layer() {
        let image = tempfile::tempdir().unwrap();
        let dest = tempfile::tempdir().unwrap();
        let host = tempfile::tempdir().unwrap();
        let cache = LoaderCache {
            file: host.path().join("made.cache"),
            dirs: vec!["/usr/local/cuda/compat".into(), "/.berth/lib".into()],
        };
        fs::write(&cache.file, b"ld.so-1.7.0").unwrap();
        // No /etc/ld.so.conf.d: nothing.
        fs::create_dir(image.path().join("etc")).unwrap();
        fs::set_permissions(image.path().join("etc"), fs::Permissions::from_mode(0o751)).unwrap();
        assert!(!write(image.path(), dest.path(), &cache).unwrap());
        fs::create_dir(image.path().join("etc/ld.so.conf.d")).unwrap();
        assert!(write(image.path(), dest.path(), &cache).unwrap());
        assert_eq!(
            fs::read(dest.path().join("etc/ld.so.cache")).unwrap(),
            b"ld.so-1.7.0"
        );
        assert_eq!(
            fs::read_to_string(dest.path().join(CONF_PATH)).unwrap(),
            "/usr/local/cuda/compat\n/.berth/lib\n"
        );
        let mode = |p: &str| {
            fs::metadata(dest.path().join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777
        };
        assert_eq!(mode("etc"), 0o751);
        assert_eq!(mode("etc/ld.so.cache"), 0o644);
        // etc/ld.so.conf.d a link out of the root: not followed.
        let linked = tempfile::tempdir().unwrap();
        fs::create_dir(linked.path().join("etc")).unwrap();
        std::os::unix::fs::symlink(host.path(), linked.path().join("etc/ld.so.conf.d")).unwrap();
        let dest2 = tempfile::tempdir().unwrap();
        assert!(!write(linked.path(), dest2.path(), &cache).unwrap());
        assert!(!dest2.path().join("etc").exists());
    }
}
