//! Finding images: by full id on the run path, by name, by id prefix.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use super::records::{ImageRecord, StoredImage};
use super::trust::{distrust, distrust_path, trusted_shared};
use super::{id_dir_name, is_full_id, Store};
use crate::error::{Error, Result};
use crate::reference::ImageRef;

impl Store {
    /// Loads image `id` (a full `sha256:` id) from `root` or the shared
    /// stores with as few file system requests as possible: one walk to the
    /// image's directory, the record and the squashfs file opened relative
    /// to it, no directory creation, no names. The run path of a node whose
    /// store sits on a parallel filesystem, where each path component is a
    /// metadata request; the open file goes to the keeper.
    pub fn open_id(root: &Path, shared: &[PathBuf], id: &str) -> Option<(StoredImage, File)> {
        if !is_full_id(id) {
            return None;
        }
        let shared = trusted_shared(shared);
        std::iter::once((root, false))
            .chain(shared.iter().map(|s| (s.as_path(), true)))
            .find_map(|(r, is_shared)| {
                if distrust_path(r, is_shared).is_some() {
                    return None;
                }
                let dir_path = r.join("images").join(id_dir_name(id));
                // O_PATH: no open request to the filesystem, only the walk.
                let dir = rustix::fs::open(
                    &dir_path,
                    rustix::fs::OFlags::PATH
                        | rustix::fs::OFlags::DIRECTORY
                        | rustix::fs::OFlags::CLOEXEC,
                    rustix::fs::Mode::empty(),
                )
                .ok()?;
                let open = |name: &str| {
                    rustix::fs::openat(
                        &dir,
                        name,
                        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
                        rustix::fs::Mode::empty(),
                    )
                    .ok()
                    .map(File::from)
                };
                let meta = open("meta.json")?;
                let mut bytes = Vec::new();
                // Through `take`: File's own read_to_end asks for the size
                // first (one more metadata request).
                std::io::Read::read_to_end(&mut std::io::Read::take(&meta, 16 << 20), &mut bytes)
                    .ok()?;
                let record: ImageRecord = serde_json::from_slice(&bytes).ok()?;
                if !record.squashfs.file_is_plain() || record.id != id {
                    return None;
                }
                let image = open(&record.squashfs.file)?;
                // The image's directory and files: nobody else writes them.
                let dir_meta = fs::metadata(format!(
                    "/proc/self/fd/{}",
                    std::os::fd::AsRawFd::as_raw_fd(&dir)
                ))
                .ok()?;
                let trusted = [Some(dir_meta), meta.metadata().ok(), image.metadata().ok()]
                    .into_iter()
                    .all(|m| m.is_some_and(|m| distrust(&m, is_shared).is_none()));
                if !trusted {
                    tracing::warn!(
                        "not using {}: it can be written by others",
                        dir_path.display()
                    );
                    return None;
                }
                Some((
                    StoredImage {
                        record,
                        dir: dir_path,
                        names: Vec::new(),
                        shared: is_shared,
                    },
                    image,
                ))
            })
    }

    /// Image `id` from the writable store, else the first shared store
    /// that has it, with the names the writable store and its own store
    /// give it. A name in the writable store may point to an image of a
    /// shared store: a pull of an image the site already keeps names it
    /// there without copying it.
    fn load_id(&self, id: &str) -> Option<StoredImage> {
        // An id from a names index becomes a path component: ids only.
        if !is_full_id(id) {
            return None;
        }
        let mine_all = Self::read_names(&self.root).unwrap_or_default();
        let mine: Vec<String> = mine_all
            .iter()
            .filter(|(_, v)| *v == id)
            .map(|(k, _)| k.clone())
            .collect();
        std::iter::once((&self.root, false))
            .chain(self.shared.iter().map(|s| (s, true)))
            .find_map(|(root, shared)| {
                let dir = root.join("images").join(id_dir_name(id));
                if !dir.join("meta.json").is_file() {
                    return None;
                }
                let mut names = mine.clone();
                if shared {
                    // A shared store's names, except those the user's own
                    // names take (as `list` shows them).
                    let theirs = Self::read_names(root).unwrap_or_default();
                    names.extend(
                        theirs
                            .into_iter()
                            .filter(|(k, v)| v == id && !mine_all.contains_key(k))
                            .map(|(k, _)| k),
                    );
                }
                Self::load(&dir, shared, names).filter(|img| img.record.id == id)
            })
    }

    /// Finds an image by name (as typed, or normalised), by id, or by a
    /// unique id prefix of at least 4 hex digits.
    pub fn find(&self, wanted: &str) -> Result<StoredImage> {
        // A full id: that image's directory, nothing else.
        if is_full_id(wanted) {
            if let Some(img) = self.load_id(wanted) {
                return Ok(img);
            }
        }
        // Fast path (every `berth run`): a name in a names index, then that
        // one image's record, without reading every record of the store.
        let quick = short_name_candidates(wanted);
        for root in std::iter::once(&self.root).chain(&self.shared) {
            let Ok(names) = Self::read_names(root) else {
                continue;
            };
            if let Some(id) = quick.iter().find_map(|c| names.get(c)) {
                if let Some(img) = self.load_id(id) {
                    return Ok(img);
                }
            }
        }
        let images = self.list()?;
        // Cheap string forms first: the full reference parser compiles a
        // large regular expression (tens of ms), too slow for `berth run`.
        let mut candidates = short_name_candidates(wanted);
        if !images
            .iter()
            .any(|i| i.names.iter().any(|n| candidates.contains(n)))
        {
            if let Ok(r) = ImageRef::parse(wanted) {
                candidates.push(r.store_name());
            }
            if let Ok(r) = ImageRef::parse_local_name(wanted) {
                candidates.push(r.store_name());
            }
        }
        for c in &candidates {
            if let Some(img) = images.iter().find(|i| i.names.iter().any(|n| n == c)) {
                return Ok(img.clone());
            }
        }
        let hex_part = wanted.strip_prefix("sha256:").unwrap_or(wanted);
        if hex_part.len() >= 4 && hex_part.chars().all(|c| c.is_ascii_hexdigit()) {
            let matches: Vec<&StoredImage> = images
                .iter()
                .filter(|i| {
                    i.record
                        .id
                        .trim_start_matches("sha256:")
                        .starts_with(hex_part)
                })
                .collect();
            match matches.len() {
                1 => return Ok(matches[0].clone()),
                0 => {}
                n => {
                    return Err(Error::Reference {
                        reference: wanted.to_string(),
                        reason: format!("the id prefix matches {n} images; give more digits"),
                    })
                }
            }
        }
        Err(Error::ImageNotInStore(wanted.to_string()))
    }
}

/// The names a short reference may stand for, in order: as typed, with
/// `:latest`, under `localhost/`, under `docker.io/` (and `library/`).
fn short_name_candidates(wanted: &str) -> Vec<String> {
    let last = wanted.rsplit('/').next().unwrap_or(wanted);
    let tagged = if last.contains(':') || last.contains('@') {
        wanted.to_string()
    } else {
        format!("{wanted}:latest")
    };
    let mut out = vec![wanted.to_string(), tagged.clone()];
    if !crate::reference::names_registry(wanted) {
        out.push(format!("localhost/{tagged}"));
        if wanted.contains('/') {
            out.push(format!("docker.io/{tagged}"));
        } else {
            out.push(format!("docker.io/library/{tagged}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::put;

    #[test]
    fn shared_store_is_searched_after() {
        let site = tempfile::tempdir().unwrap();
        let mine = tempfile::tempdir().unwrap();
        let site_store = Store::open(site.path(), &[]).unwrap();
        let id = format!("sha256:{}", "cd".repeat(32));
        put(&site_store, &id, "localhost/site:latest");
        let store = Store::open(mine.path(), &[site.path().to_path_buf()]).unwrap();
        let img = store.find("site").unwrap();
        assert!(img.shared);
        assert!(store.remove("site").is_err());
        assert!(store.prune().unwrap().images.is_empty());
    }
}
