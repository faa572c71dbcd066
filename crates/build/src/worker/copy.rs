//! COPY and ADD: in a child chrooted into the stage root, so destinations
//! resolve inside the image; `--chown`, `--chmod`, `.dockerignore`, and
//! ADD's unpacking of local tar archives.

use std::fs;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::chroot::in_root;
use super::user::resolve_user;
use super::InImageError;
use crate::context::{self, Ignore};
use crate::{Error, Result};

/// COPY/ADD: in a child chrooted into `root` whose working directory is
/// `src_root`, so sources are relative paths and the destination an
/// absolute one resolved inside the image.
#[allow(clippy::too_many_arguments)]
pub(super) fn copy_step(
    root: &Path,
    src_root: &Path,
    ignore: &Ignore,
    sources: &[String],
    dest: &str,
    chown: Option<&str>,
    chmod: Option<u32>,
    add: bool,
) -> Result<()> {
    let mut matches = Vec::new();
    for s in sources {
        matches.extend(context::expand_source(src_root, s, ignore)?);
    }
    let into_dir = dest.ends_with('/') || matches.len() > 1;
    let src = fs::File::open(src_root).map_err(|e| Error::io("open", src_root, e))?;
    in_root(root, &mut || {
        let owner = match chown {
            Some(spec) => {
                let (u, g, _) = resolve_user(spec)?;
                Some((u, g))
            }
            None => None,
        };
        rustix::process::fchdir(&src)
            .map_err(|e| InImageError::file("enter the sources in", src_root, e.into()))?;
        let dest_is_dir = into_dir || Path::new(dest).is_dir();
        for m in &matches {
            // Read from the source resolved inside its root (the context or
            // the stage), named as written.
            let rel = if m.src.is_empty() {
                ".".to_string()
            } else {
                m.src.clone()
            };
            let name = Path::new(&m.rel).file_name().unwrap_or_default();
            let meta = fs::symlink_metadata(&rel)
                .map_err(|e| InImageError::file("read the source", &rel, e))?;
            if meta.is_dir() {
                // A destination directory the copy creates belongs to the
                // --chown owner too (BuildKit's rule), so a later USER can
                // write in it.
                let created = !Path::new(dest).exists();
                fs::create_dir_all(dest).map_err(|e| InImageError::file("create", dest, e))?;
                if let (true, Some((u, g))) = (created, owner) {
                    std::os::unix::fs::lchown(dest, Some(u), Some(g))
                        .map_err(|e| InImageError::file("chown", dest, e))?;
                }
                copy_children(
                    Path::new(&rel),
                    Path::new(dest),
                    owner,
                    chmod,
                    ignore,
                    &m.src,
                )?;
            } else if add && meta.is_file() && is_tar(Path::new(&rel)) {
                fs::create_dir_all(dest).map_err(|e| InImageError::file("create", dest, e))?;
                unpack_tar(Path::new(&rel), Path::new(dest))?;
            } else {
                let target = if dest_is_dir {
                    fs::create_dir_all(dest).map_err(|e| InImageError::file("create", dest, e))?;
                    Path::new(dest).join(name)
                } else {
                    if let Some(p) = Path::new(dest).parent() {
                        fs::create_dir_all(p).map_err(|e| InImageError::file("create", p, e))?;
                    }
                    PathBuf::from(dest)
                };
                copy_one(Path::new(&rel), &target, &meta, owner, chmod)?;
            }
        }
        Ok(())
    })?;
    Ok(())
}

/// Copies what is in the directory `src` into `dst`, recursively; `rel`
/// is `src`'s path as .dockerignore patterns see it.
fn copy_children(
    src: &Path,
    dst: &Path,
    owner: Option<(u32, u32)>,
    chmod: Option<u32>,
    ignore: &Ignore,
    rel: &str,
) -> Result<(), InImageError> {
    let mut names: Vec<_> = fs::read_dir(src)
        .map_err(|e| InImageError::file("list", src, e))?
        .flatten()
        .map(|e| e.file_name())
        .collect();
    names.sort();
    for name in names {
        let child_rel = if rel.is_empty() {
            name.to_string_lossy().to_string()
        } else {
            format!("{rel}/{}", name.to_string_lossy())
        };
        if ignore.excludes(&child_rel) {
            continue;
        }
        let s = src.join(&name);
        let d = dst.join(&name);
        let meta = fs::symlink_metadata(&s).map_err(|e| InImageError::file("read", &s, e))?;
        if meta.is_dir() {
            if !d.is_dir() {
                fs::create_dir(&d).map_err(|e| InImageError::file("create", &d, e))?;
            }
            copy_children(&s, &d, owner, chmod, ignore, &child_rel)?;
            finish(&d, &meta, owner, chmod)?;
        } else {
            copy_one(&s, &d, &meta, owner, chmod)?;
        }
    }
    Ok(())
}

/// Copies one file or symlink, replacing what is at `dst`.
fn copy_one(
    src: &Path,
    dst: &Path,
    meta: &fs::Metadata,
    owner: Option<(u32, u32)>,
    chmod: Option<u32>,
) -> Result<(), InImageError> {
    if let Ok(m) = fs::symlink_metadata(dst) {
        if !m.is_dir() {
            let _ = fs::remove_file(dst);
        }
    }
    if meta.file_type().is_symlink() {
        let t = fs::read_link(src).map_err(|e| InImageError::file("read the link", src, e))?;
        std::os::unix::fs::symlink(t, dst)
            .map_err(|e| InImageError::file("create the link", dst, e))?;
    } else {
        fs::copy(src, dst).map_err(|source| InImageError::Copy {
            from: src.to_path_buf(),
            to: dst.to_path_buf(),
            source,
        })?;
    }
    finish(dst, meta, owner, chmod)
}

/// Owner (the `--chown` ids, else root), mode and modification time.
fn finish(
    dst: &Path,
    meta: &fs::Metadata,
    owner: Option<(u32, u32)>,
    chmod: Option<u32>,
) -> Result<(), InImageError> {
    // Under root emulation files are root's, as RUN's faked chowns leave
    // them, whatever the map could give.
    let (u, g) = owner.filter(|_| !super::emulating()).unwrap_or((0, 0));
    std::os::unix::fs::lchown(dst, Some(u), Some(g))
        .map_err(|e| InImageError::file("chown", dst, e))?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    let mode = chmod.unwrap_or(meta.mode() & 0o7777);
    fs::set_permissions(dst, fs::Permissions::from_mode(mode))
        .map_err(|e| InImageError::file("chmod", dst, e))?;
    let mtime = std::time::UNIX_EPOCH + std::time::Duration::from_secs(meta.mtime().max(0) as u64);
    if let Ok(f) = fs::File::options()
        .write(!meta.is_dir())
        .read(meta.is_dir())
        .open(dst)
    {
        let _ = f.set_modified(mtime);
    }
    Ok(())
}

/// A local tar archive (plain or gzip) that ADD unpacks.
fn is_tar(p: &Path) -> bool {
    let mut head = [0u8; 512];
    let Ok(mut f) = fs::File::open(p) else {
        return false;
    };
    let n = f.read(&mut head).unwrap_or(0);
    (n >= 2 && head[..2] == [0x1f, 0x8b]) || (n >= 262 && &head[257..262] == b"ustar")
}

/// Unpacks the tar archive `src` (plain or gzip) into `dest`.
fn unpack_tar(src: &Path, dest: &Path) -> Result<(), InImageError> {
    let open = || fs::File::open(src).map_err(|e| InImageError::file("open", src, e));
    let mut f = open()?;
    let mut magic = [0u8; 2];
    let gz = f
        .read(&mut magic)
        .is_ok_and(|n| n == 2 && magic == [0x1f, 0x8b]);
    let f = open()?;
    let reader: Box<dyn Read> = if gz {
        Box::new(flate2::read::GzDecoder::new(f))
    } else {
        Box::new(f)
    };
    let mut a = tar::Archive::new(reader);
    a.set_preserve_permissions(true);
    a.set_preserve_ownerships(true);
    a.set_overwrite(true);
    a.unpack(dest)
        .map_err(|e| InImageError::file("unpack", src, e))
}

/// The mode an `--chmod` value gives (octal).
pub fn parse_chmod(s: &str) -> Option<u32> {
    u32::from_str_radix(s, 8).ok().filter(|m| *m <= 0o7777)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chmod_values_are_octal_modes() {
        assert_eq!(parse_chmod("0755"), Some(0o755));
        assert_eq!(parse_chmod("4755"), Some(0o4755));
        assert_eq!(parse_chmod("755"), Some(0o755));
        assert_eq!(parse_chmod("9"), None);
        assert_eq!(parse_chmod("17777"), None);
        assert_eq!(parse_chmod("u+x"), None);
    }

    #[test]
    fn plain_and_gzip_tars_are_recognised_and_unpack() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_ustar();
        h.set_size(3);
        h.set_mode(0o640);
        h.set_uid(rustix::process::geteuid().as_raw().into());
        h.set_gid(rustix::process::getegid().as_raw().into());
        b.append_data(&mut h, "f.txt", &b"hi\n"[..]).unwrap();
        let plain = b.into_inner().unwrap();
        let plain_path = dir.path().join("a.tar");
        fs::write(&plain_path, &plain).unwrap();
        let gz_path = dir.path().join("a.tar.gz");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &plain).unwrap();
        fs::write(&gz_path, gz.finish().unwrap()).unwrap();
        let text = dir.path().join("notes.txt");
        fs::write(&text, "not a tar").unwrap();
        assert!(is_tar(&plain_path) && is_tar(&gz_path) && !is_tar(&text));
        for (i, archive) in [plain_path, gz_path].iter().enumerate() {
            let dest = dir.path().join(format!("out{i}"));
            fs::create_dir(&dest).unwrap();
            unpack_tar(archive, &dest).unwrap();
            assert_eq!(fs::read_to_string(dest.join("f.txt")).unwrap(), "hi\n");
        }
        let err = unpack_tar(&dir.path().join("missing.tar"), dir.path()).unwrap_err();
        assert!(err.to_string().starts_with("cannot open "), "{err}");
    }
}
