//! Paths inside an image, resolved as the container would see them:
//! symlinks followed (an absolute target from the image's root, never the
//! host's), `..` stopping at the root, at most [`MAX_HOPS`] links. For
//! reading an image's own settings (an Apptainer image's
//! `/.singularity.d`, an enroot image's `/etc/environment`) without
//! mounting it.

use std::sync::Arc;

use super::error::{corrupt, Result};
use super::inode::{Body, Inode, InodeRef};
use super::Image;

/// Symlinks followed in one resolution (the kernel's limit).
pub const MAX_HOPS: usize = 40;

impl Image {
    /// The inode at `path` (absolute, inside the image), symlinks
    /// followed; `None` if a component is missing or not a directory.
    pub fn resolve(&self, path: &str) -> Result<Option<(InodeRef, Arc<Inode>)>> {
        let mut hops = 0;
        // Components still to walk, last first; and the directories walked.
        let mut todo: Vec<Vec<u8>> = split_rev(path.as_bytes());
        let root = self.root();
        let mut trail: Vec<(InodeRef, Arc<Inode>)> = vec![(root, self.inode(root)?)];
        while let Some(name) = todo.pop() {
            if name == b".." {
                if trail.len() > 1 {
                    trail.pop();
                }
                continue;
            }
            let Some((r, dir)) = trail.last().cloned() else {
                return Ok(None);
            };
            if !matches!(dir.body, Body::Dir(_)) {
                return Ok(None);
            }
            let Some(entry) = self.lookup(r, &dir, &name)? else {
                return Ok(None);
            };
            let inode = self.inode(entry.inode)?;
            if let Body::Symlink(target) = &inode.body {
                hops += 1;
                if hops > MAX_HOPS {
                    return Err(corrupt(format!(
                        "more than {MAX_HOPS} symlinks resolving {path}"
                    )));
                }
                if target.first() == Some(&b'/') {
                    trail.truncate(1);
                }
                todo.extend(split_rev(target));
                continue;
            }
            trail.push((entry.inode, inode));
        }
        Ok(trail.pop())
    }

    /// The content of the regular file at `path`, if it is one and holds
    /// at most `max` bytes; `Ok(None)` if it is missing, not a file or
    /// larger.
    pub fn read_path(&self, path: &str, max: u64) -> Result<Option<Vec<u8>>> {
        let Some((r, inode)) = self.resolve(path)? else {
            return Ok(None);
        };
        let Body::File(body) = &inode.body else {
            return Ok(None);
        };
        if inode.size > max {
            return Ok(None);
        }
        let mut out = Vec::with_capacity(inode.size as usize);
        self.read_file(r, body, inode.size, 0, inode.size as usize, &mut out)?;
        Ok(Some(out))
    }

    /// The names in the directory at `path`, sorted; `Ok(None)` if it is
    /// missing or not a directory.
    pub fn read_dir_names(&self, path: &str) -> Result<Option<Vec<Vec<u8>>>> {
        let Some((r, inode)) = self.resolve(path)? else {
            return Ok(None);
        };
        if !matches!(inode.body, Body::Dir(_)) {
            return Ok(None);
        }
        let listing = self.listing(r, &inode)?;
        Ok(Some(
            listing.entries.iter().map(|e| e.name.to_vec()).collect(),
        ))
    }
}

/// `path`'s components, last first, without empty ones and `.`.
fn split_rev(path: &[u8]) -> Vec<Vec<u8>> {
    path.split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .rev()
        .map(<[u8]>::to_vec)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_come_last_first_without_dots() {
        assert_eq!(
            split_rev(b"/a//./b/../c/"),
            vec![b"c".to_vec(), b"..".to_vec(), b"b".to_vec(), b"a".to_vec()]
        );
        assert!(split_rev(b"/").is_empty());
    }
}
