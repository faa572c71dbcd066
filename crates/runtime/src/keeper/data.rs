//! Squashfs data mounts (`-v FILE:DST:sqsh`): squashfs files that runs
//! see as read-only directory trees. The image's keeper mounts them beside
//! the image, so every run of the keeper shares one mount of each (one
//! server, one page cache), as it shares the image. A keeper serves one
//! image and one set of data files: its key covers both, and runs that
//! name other data files get a keeper of their own.

use std::borrow::Cow;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Child;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::idmap::IdMode;
use crate::image_mount::{self, ServedImage};
use crate::rootfs::Bind;
use crate::sys::Kernel;

/// The keeper's environment variable listing its data files (JSON).
pub(super) const DATA_ENV: &str = "BERTH_KEEPER_DATA";

/// One squashfs data file, as the run saw it when it chose its keeper.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataFile {
    /// The file, canonical.
    pub path: PathBuf,
    /// Where its squashfs starts in it.
    pub offset: u64,
    /// Its device: with the inode, the keeper checks that it opened this
    /// very file.
    pub dev: u64,
    /// Its inode.
    pub ino: u64,
    /// Its size: with the modification time, part of the keeper's key, so
    /// a file written anew is mounted anew.
    pub size: u64,
    /// Its modification time, in nanoseconds.
    pub mtime_ns: i64,
}

/// The data files that `binds` name, each once, in path order.
pub fn data_files(binds: &[Bind]) -> Result<Vec<DataFile>> {
    let mut files: Vec<DataFile> = Vec::new();
    for b in binds {
        let Some(offset) = b.options.squashfs else {
            continue;
        };
        if files.iter().any(|f| f.path == b.source) {
            continue;
        }
        let m = std::fs::metadata(&b.source).map_err(|e| Error::Bind {
            spec: b.spec.clone(),
            reason: format!(
                "the squashfs file {} is not usable: {e}",
                b.source.display()
            ),
        })?;
        files.push(DataFile {
            path: b.source.clone(),
            offset,
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: m.mtime().saturating_mul(1_000_000_000) + m.mtime_nsec(),
        });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}

/// The key of the keeper of image `image_hex` with `files`: the image's
/// own hex without data files (so such keepers stay as they were), else a
/// hash of the image and each file's path, offset and identity.
pub(super) fn keeper_key(image_hex: &str, files: &[DataFile]) -> String {
    if files.is_empty() {
        return image_hex.to_string();
    }
    let mut h = blake3::Hasher::new();
    h.update(b"berth keeper with squashfs data\0");
    h.update(image_hex.as_bytes());
    for f in files {
        h.update(b"\0");
        h.update(f.path.as_os_str().as_encoded_bytes());
        for n in [f.offset, f.dev, f.ino, f.size, f.mtime_ns as u64] {
            h.update(&n.to_le_bytes());
        }
    }
    h.finalize().to_hex().to_string()
}

/// Where the keeper of `keeper_dir` mounts the data file `source`.
pub fn mount_point(keeper_dir: &Path, source: &Path) -> PathBuf {
    let name = blake3::hash(source.as_os_str().as_encoded_bytes()).to_hex();
    keeper_dir.join("mnt/data").join(&name[..16])
}

/// `binds` with the source of each squashfs data bind replaced by the
/// keeper's read-only mount of it.
pub fn resolve<'a>(binds: &'a [Bind], keeper_dir: &Path) -> Cow<'a, [Bind]> {
    if binds.iter().all(|b| b.options.squashfs.is_none()) {
        return Cow::Borrowed(binds);
    }
    Cow::Owned(
        binds
            .iter()
            .map(|b| match b.options.squashfs {
                Some(_) => Bind {
                    source: mount_point(keeper_dir, &b.source),
                    readonly: true,
                    ..b.clone()
                },
                None => b.clone(),
            })
            .collect(),
    )
}

/// The keeper's data files, from its environment (none when unset).
pub(super) fn from_env() -> Result<Vec<DataFile>> {
    match std::env::var(DATA_ENV) {
        Ok(json) if !json.is_empty() => {
            serde_json::from_str(&json).map_err(|e| Error::Setup(format!("bad {DATA_ENV}: {e}")))
        }
        _ => Ok(Vec::new()),
    }
}

/// How the keeper mounts its data files: as it mounted the image.
#[derive(Debug, Clone, Copy)]
pub(super) enum How<'a> {
    /// Real root: the kernel's squashfs driver.
    Kernel,
    /// Through FUSE, for these ids of the keeper's namespace.
    Fuse((u32, u32), berth_config::SquashfsServer),
    /// The image was unpacked: FUSE cannot serve here, for this reason.
    NoFuse(&'a str),
}

/// Mounts each of `files` read-only on its mount point under
/// `keeper_dir`; the FUSE servers started for them.
pub(super) fn mount_all(
    k: &dyn Kernel,
    keeper_dir: &Path,
    files: &[DataFile],
    how: How<'_>,
) -> Result<Vec<Child>> {
    let fuse = match how {
        How::Kernel => None,
        How::Fuse(ids, server) => Some((ids, server)),
        How::NoFuse(why) => match files.first() {
            Some(f) => {
                let shown = f.path.display();
                return Err(Error::Mount(format!(
                    "the squashfs data mount of {shown} needs FUSE, which this node cannot use ({why}); \
                     unpack the file (unsquashfs -d DIR {shown}) and bind DIR instead"
                )));
            }
            None => return Ok(Vec::new()),
        },
    };
    let mut servers = Vec::new();
    for f in files {
        let shown = f.path.display();
        let file = File::open(&f.path)
            .map_err(|e| Error::io("open the squashfs data file", &f.path, e))?;
        let m = file
            .metadata()
            .map_err(|e| Error::io("inspect", &f.path, e))?;
        if (m.dev(), m.ino()) != (f.dev, f.ino) {
            return Err(Error::Mount(format!(
                "the squashfs data file {shown} was replaced while its mount was being set up; run again"
            )));
        }
        let point = mount_point(keeper_dir, &f.path);
        std::fs::create_dir_all(&point).map_err(|e| Error::io("create", &point, e))?;
        match fuse {
            None => image_mount::mount_kernel_squashfs(k, &file, f.offset, &point)?,
            Some((ids, server)) => {
                let served = ServedImage {
                    file: &file,
                    offset: f.offset,
                    verity: None,
                    profile: None,
                };
                servers.push(image_mount::mount_fuse(k, served, &point, ids, server)?);
                image_mount::await_server(&point, &format!("the squashfs server of {shown}"))?;
            }
        }
    }
    Ok(servers)
}

/// How a keeper in `mode` mounts data files, given how it mounted the
/// image (`unpacked_because`: the image was unpacked, for this reason).
pub(super) fn how<'a>(
    mode: IdMode,
    ids: (u32, u32),
    server: berth_config::SquashfsServer,
    unpacked_because: Option<&'a str>,
) -> How<'a> {
    match (mode, unpacked_because) {
        (IdMode::HostRoot, _) => How::Kernel,
        (_, Some(why)) => How::NoFuse(why),
        _ => How::Fuse(ids, server),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rootfs::MountOptions;

    fn bind(source: &Path, target: &str, squashfs: Option<u64>) -> Bind {
        Bind {
            source: source.to_path_buf(),
            target: target.into(),
            readonly: false,
            spec: format!("{}:{target}", source.display()),
            device: false,
            options: MountOptions {
                squashfs,
                ..Default::default()
            },
        }
    }

    #[test]
    fn data_binds_are_served_from_the_keepers_mounts() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a.sqsh"), d.path().join("b.sqsh"));
        std::fs::write(&a, b"x").unwrap();
        std::fs::write(&b, b"y").unwrap();
        let binds = vec![
            bind(&b, "/b", Some(0)),
            bind(d.path(), "/plain", None),
            bind(&a, "/a", Some(4096)),
            bind(&a, "/a2", Some(4096)),
        ];
        let files = data_files(&binds).unwrap();
        let paths: Vec<&Path> = files.iter().map(|f| f.path.as_path()).collect();
        assert_eq!(paths, vec![a.as_path(), b.as_path()]);
        assert_eq!(files[0].offset, 4096);
        let keeper = Path::new("/run/berth/keepers/k");
        let resolved = resolve(&binds, keeper);
        assert_eq!(resolved[0].source, mount_point(keeper, &b));
        assert!(
            resolved[0].readonly
                && resolved[0]
                    .source
                    .starts_with("/run/berth/keepers/k/mnt/data/")
        );
        assert_eq!(resolved[1], binds[1]);
        assert_eq!(resolved[2].source, resolved[3].source);
        assert!(matches!(resolve(&binds[1..2], keeper), Cow::Borrowed(_)));
    }

    #[test]
    fn the_keeper_key_covers_the_data_files() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a.sqsh");
        std::fs::write(&a, b"x").unwrap();
        let none = keeper_key("ab12", &[]);
        assert_eq!(none, "ab12");
        let files = data_files(&[bind(&a, "/a", Some(0))]).unwrap();
        let with = keeper_key("ab12", &files);
        assert!(with.len() == 64 && with.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(with, keeper_key("ab13", &files));
        // The file written anew (another size) is another keeper's.
        std::fs::write(&a, b"xy").unwrap();
        let again = data_files(&[bind(&a, "/a", Some(0))]).unwrap();
        assert_ne!(with, keeper_key("ab12", &again));
        let err = data_files(&[bind(&d.path().join("gone.sqsh"), "/g", Some(0))]).unwrap_err();
        assert!(err.to_string().contains("not usable"), "{err}");
    }

    #[test]
    fn without_fuse_a_data_mount_says_what_to_do() {
        let d = tempfile::tempdir().unwrap();
        let files = vec![DataFile {
            path: d.path().join("ds.sqsh"),
            offset: 0,
            dev: 0,
            ino: 0,
            size: 0,
            mtime_ns: 0,
        }];
        let k = crate::sys::fake::Recording::new();
        let how = how(
            IdMode::Identity,
            (0, 0),
            Default::default(),
            Some("no /dev/fuse"),
        );
        let err = mount_all(&k, d.path(), &files, how)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("needs FUSE") && err.contains("unsquashfs"),
            "{err}"
        );
        assert!(matches!(
            super::how(IdMode::HostRoot, (0, 0), Default::default(), None),
            How::Kernel
        ));
    }
}
