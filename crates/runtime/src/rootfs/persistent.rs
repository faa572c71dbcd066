//! `--overlay DIR[:ro]`: a host directory that keeps a container's
//! changes across runs (Apptainer's overlay directory, enroot's `--rw`
//! container). `DIR/upper` is the overlay's upper layer and `DIR/work` its
//! work directory; read-only, `DIR/upper` is a layer between the image and
//! the run's memory upper layer.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// A persistent overlay directory, claimed by the front end (which holds
/// its lock while the container lives).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PersistentOverlay {
    /// The directory (absolute, without `,` or `:`).
    pub dir: PathBuf,
    /// Stacked read-only: the run's changes go to memory.
    pub readonly: bool,
    /// Overlay metadata (whiteouts' opaque marks, redirects) in `user.`
    /// extended attributes, as a mount in a user namespace must keep it;
    /// real root's kernel mounts keep it in `trusted.`.
    pub user_xattr: bool,
}

impl PersistentOverlay {
    /// The upper layer.
    pub fn upper(&self) -> PathBuf {
        self.dir.join("upper")
    }

    /// The overlay's work directory.
    pub fn work(&self) -> PathBuf {
        self.dir.join("work")
    }

    /// Locks the directory for one container while the returned file is
    /// open: a writer alone (overlayfs cannot share an upper layer, and a
    /// layer below a mount must not change under it), or any number of
    /// read-only users. `Ok(None)`: another container holds it still after
    /// `wait` (a shared container's anchor may be on its way out).
    pub fn lock(&self, wait: std::time::Duration) -> std::io::Result<Option<std::fs::File>> {
        let file = std::fs::File::open(&self.dir)?;
        let until = std::time::Instant::now() + wait;
        loop {
            let locked = if self.readonly {
                file.try_lock_shared()
            } else {
                file.try_lock()
            };
            match locked {
                Ok(()) => return Ok(Some(file)),
                Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < until => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
                Err(std::fs::TryLockError::Error(e)) => return Err(e),
            }
        }
    }
}

/// Which overlay wrote a directory's upper layer: their marks differ
/// (kernel overlayfs keeps opaque directories in `user.overlay.opaque`,
/// fuse-overlayfs in `.wh..wh..opq` files and its own attribute), so a
/// directory stays with the one that wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Writer {
    /// Kernel overlayfs.
    Kernel,
    /// fuse-overlayfs.
    Fuse,
}

/// The file in an overlay directory that names its writer.
const WRITER_FILE: &str = "berth-overlay";

impl Writer {
    fn name(self) -> &'static str {
        match self {
            Writer::Kernel => "kernel overlayfs",
            Writer::Fuse => "fuse-overlayfs",
        }
    }

    /// Who wrote `p`'s upper layer: its record, else the kernel where the
    /// layer holds anything (directories from before the record), else
    /// no one yet.
    pub(super) fn of(p: &PersistentOverlay) -> Option<Writer> {
        match std::fs::read_to_string(p.dir.join(WRITER_FILE)) {
            Ok(text) if text.trim() == Writer::Fuse.name() => Some(Writer::Fuse),
            Ok(_) => Some(Writer::Kernel),
            Err(_) => {
                let used = std::fs::read_dir(p.upper()).is_ok_and(|mut d| d.next().is_some());
                used.then_some(Writer::Kernel)
            }
        }
    }

    /// Records that `self` writes `p` (a writable directory without a
    /// record).
    pub(super) fn record(self, p: &PersistentOverlay) {
        let path = p.dir.join(WRITER_FILE);
        if p.readonly || path.exists() {
            return;
        }
        if let Err(e) = std::fs::write(&path, format!("{}\n", self.name())) {
            tracing::warn!("cannot record who writes {}: {e}", p.dir.display());
        }
    }

    /// The refusal to mount `p`, written by `self`, with `other`.
    pub(super) fn refuse(
        self,
        p: &PersistentOverlay,
        other: Writer,
        why: &str,
    ) -> crate::error::Error {
        crate::error::Error::Mount(format!(
            "--overlay {}: it was written through {}, and {} would misread its marks \
             (deleted files, opaque directories){why}; use it where {} serves it, or start a new \
             directory",
            p.dir.display(),
            self.name(),
            other.name(),
            self.name()
        ))
    }
}

/// The overlay mount's options: `image` below the run's tmpfs at `stage`,
/// or below (or with) a persistent directory.
pub(super) fn overlay_options(
    image: &Path,
    stage: &Path,
    persistent: Option<&PersistentOverlay>,
    user_xattr: bool,
    hints: Option<&Path>,
) -> String {
    let (tmp_upper, tmp_work) = (stage.join("upper"), stage.join("work"));
    // A layer of berth's own (apt's hint) above everything read-only.
    let image = match hints {
        Some(h) => PathBuf::from(format!("{}:{}", h.display(), image.display())),
        None => image.to_path_buf(),
    };
    let image = image.as_path();
    let Some(p) = persistent else {
        let mut opts = format!(
            "lowerdir={},upperdir={},workdir={}",
            image.display(),
            tmp_upper.display(),
            tmp_work.display()
        );
        if user_xattr {
            opts.push_str(",userxattr");
        }
        return opts;
    };
    let mut opts = if p.readonly {
        format!(
            "lowerdir={}:{},upperdir={},workdir={}",
            p.upper().display(),
            image.display(),
            tmp_upper.display(),
            tmp_work.display()
        )
    } else {
        format!(
            "lowerdir={},upperdir={},workdir={}",
            image.display(),
            p.upper().display(),
            p.work().display()
        )
    };
    if p.user_xattr || user_xattr {
        opts.push_str(",userxattr");
    }
    opts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overlay(readonly: bool) -> PersistentOverlay {
        PersistentOverlay {
            dir: "/scratch/ov".into(),
            readonly,
            user_xattr: true,
        }
    }

    #[test]
    fn the_tmpfs_is_the_upper_layer_without_a_directory() {
        assert_eq!(
            overlay_options(
                Path::new("/k/image"),
                Path::new("/k/stage"),
                None,
                false,
                None
            ),
            "lowerdir=/k/image,upperdir=/k/stage/upper,workdir=/k/stage/work"
        );
    }

    #[test]
    fn a_writable_directory_is_the_upper_layer() {
        let p = overlay(false);
        assert_eq!(
            overlay_options(
                Path::new("/k/image"),
                Path::new("/k/stage"),
                Some(&p),
                false,
                None
            ),
            "lowerdir=/k/image,upperdir=/scratch/ov/upper,workdir=/scratch/ov/work,userxattr"
        );
    }

    #[test]
    fn a_read_only_directory_lies_above_the_image() {
        let p = PersistentOverlay {
            user_xattr: false,
            ..overlay(true)
        };
        assert_eq!(
            overlay_options(
                Path::new("/k/image"),
                Path::new("/k/stage"),
                Some(&p),
                false,
                None
            ),
            "lowerdir=/scratch/ov/upper:/k/image,upperdir=/k/stage/upper,workdir=/k/stage/work"
        );
    }

    #[test]
    fn apt_hints_lie_above_the_image() {
        assert_eq!(
            overlay_options(
                Path::new("/k/image"),
                Path::new("/k/stage"),
                None,
                true,
                Some(Path::new("/k/stage/hints"))
            ),
            "lowerdir=/k/stage/hints:/k/image,upperdir=/k/stage/upper,workdir=/k/stage/work,userxattr"
        );
    }
}
