//! Image files run as they are or imported into the store: Apptainer and
//! Singularity SIF files (their primary system partition, a squashfs at an
//! offset) and plain squashfs files (enroot's `.sqsh`, `mksquashfs`
//! output).
//!
//! Such files carry no OCI config: the run settings are read from the
//! image itself (see [`settings`]). `berth run ./app.sif` serves the
//! file in place (nothing is copied: the keeper mounts the squashfs at its
//! offset); `berth import sif:FILE NAME` copies the squashfs into the
//! store under an id derived from its content.

pub mod settings;
pub mod sif;

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::image_config::RunConfig;
use crate::pipeline::name_image;
use crate::seal::{Sealed, Sealer};
use crate::store::{timestamp, ImageRecord, SquashfsRecord, Store, StoredImage};

/// What kind of image file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A SIF file: its primary system partition.
    Sif,
    /// A squashfs file from its first byte.
    Squashfs,
}

impl Format {
    /// The import transport naming it (`sif`, `squashfs`).
    pub fn transport(self) -> &'static str {
        match self {
            Format::Sif => "sif",
            Format::Squashfs => "squashfs",
        }
    }
}

/// File name endings that mark an image file even without `./`.
const ENDINGS: [&str; 5] = [".sif", ".sqsh", ".sqfs", ".squashfs", ".simg"];

/// Whether `image`, as a run's image argument, names a file rather than a
/// reference: it starts with `/` or `.` (as Pyxis decides: `./x.sqsh`,
/// `../x.sif`, `/scratch/x.sif`), or it is an existing file whose name ends
/// in `.sif`, `.sqsh`, `.sqfs`, `.squashfs` or `.simg`.
pub fn names_a_file(image: &str) -> bool {
    image.starts_with('/')
        || image.starts_with('.')
        || (ENDINGS.iter().any(|e| image.ends_with(e)) && Path::new(image).is_file())
}

/// An open image file and where its squashfs lies in it.
#[derive(Debug)]
pub struct ImageFile {
    /// The path as given, made absolute.
    pub path: PathBuf,
    /// The open file.
    pub file: File,
    /// Its format.
    pub format: Format,
    /// Where the squashfs starts.
    pub offset: u64,
    /// Bytes of the squashfs (its `bytes_used`).
    pub size: u64,
    /// The squashfs compressor, as mksquashfs names it.
    pub compressor: String,
    /// The squashfs block size.
    pub block_size: u32,
    /// The squashfs, open for reading the image's own settings.
    image: berth_squashfs::Image,
}

impl ImageFile {
    /// Opens `path`, a SIF or squashfs file (told apart by their magic).
    pub fn open(path: &Path) -> Result<Self> {
        Self::open_as(path, None)
    }

    /// Opens `path` as `format` (or whichever its magic says); an error
    /// says what the file is instead and what to do.
    pub fn open_as(path: &Path, format: Option<Format>) -> Result<Self> {
        let abs = std::path::absolute(path).map_err(|e| Error::input(path, e))?;
        let file = File::open(&abs).map_err(|e| Error::input(path, e))?;
        let meta = file.metadata().map_err(|e| Error::input(path, e))?;
        if !meta.is_file() {
            return Err(bad_file(path, "is not a regular file"));
        }
        let len = meta.len();
        let mut head = [0u8; 64];
        let n = file
            .read_at(&mut head, 0)
            .map_err(|e| Error::input(path, e))?;
        let head = &head[..n];
        let found = if sif::is_sif(head) {
            Some(Format::Sif)
        } else if head.starts_with(b"hsqs") {
            Some(Format::Squashfs)
        } else {
            None
        };
        let format = match (format, found) {
            (_, None) => {
                return Err(bad_file(
                    path,
                    &format!(
                        "is neither a SIF nor a squashfs file ({}); an OCI or Docker archive is imported with `berth import oci-archive:FILE` or `docker-archive:FILE`",
                        what_it_is(head)
                    ),
                ))
            }
            (Some(want), Some(got)) if want != got => {
                return Err(bad_file(
                    path,
                    &format!(
                        "is a {} file, not a {} file: use {}:{}",
                        got.transport(),
                        want.transport(),
                        got.transport(),
                        path.display()
                    ),
                ))
            }
            (_, Some(got)) => got,
        };
        let (offset, room) = match format {
            Format::Squashfs => (0, len),
            Format::Sif => {
                let p = sif::primary_squashfs(&file, len)
                    .map_err(|e| bad_file(path, &e.to_string()))?;
                (p.offset, p.size)
            }
        };
        let image = berth_squashfs::Image::open(
            file.try_clone().map_err(|e| Error::input(path, e))?,
            offset,
        )
        .map_err(|e| bad_file(path, &format!("its squashfs cannot be read: {e}")))?;
        let sb = image.superblock();
        if sb.bytes_used > room {
            return Err(bad_file(
                path,
                &format!(
                    "its squashfs says it holds {} bytes, but {} are there: the file is cut short",
                    sb.bytes_used, room
                ),
            ));
        }
        let (size, compressor, block_size) = (
            sb.bytes_used,
            sb.compressor.name().to_string(),
            sb.block_size,
        );
        Ok(ImageFile {
            path: abs,
            file,
            format,
            offset,
            size,
            compressor,
            block_size,
            image,
        })
    }

    /// The run settings, read from the image (see [`settings`]).
    pub fn run_config(&self) -> Result<RunConfig> {
        settings::run_config(&self.image)
            .map_err(|e| bad_file(&self.path, &format!("reading its settings: {e}")))
    }

    /// The source string records keep (`sif:/abs/path`).
    pub fn source(&self) -> String {
        format!("{}:{}", self.format.transport(), self.path.display())
    }

    /// The image as it lies, for a run in place: its id stands for this
    /// file as it is now (device, inode, size, modification time, offset),
    /// so a changed or replaced file gets a keeper of its own.
    pub fn in_place(&self) -> Result<StoredImage> {
        let meta = self
            .file
            .metadata()
            .map_err(|e| Error::input(&self.path, e))?;
        let mut h = Sha256::new();
        h.update(b"berth image file\0");
        h.update(self.path.as_os_str().as_encoded_bytes());
        for n in [
            meta.dev(),
            meta.ino(),
            meta.size(),
            meta.mtime() as u64,
            meta.mtime_nsec() as u64,
            meta.ctime() as u64,
            meta.ctime_nsec() as u64,
            self.offset,
        ] {
            h.update(n.to_le_bytes());
        }
        let id = format!("sha256:{}", hex::encode(h.finalize()));
        let dir = self
            .path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/"));
        let file = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(StoredImage {
            record: ImageRecord {
                version: 1,
                id,
                manifest_digest: None,
                source: self.source(),
                platform: host_platform(),
                stored_at: 0,
                run: self.run_config()?,
                layers: Vec::new(),
                squashfs: SquashfsRecord {
                    file,
                    size: self.size,
                    sha256: String::new(),
                    compressor: self.compressor.clone(),
                    block_size: self.block_size,
                    offset: self.offset,
                    verity: None,
                },
                dropped_devices: Vec::new(),
            },
            dir,
            names: Vec::new(),
            shared: false,
        })
    }
}

fn bad_file(path: &Path, why: &str) -> Error {
    Error::BadImage(format!("{}: {why}", path.display()))
}

/// A few words on what `head` looks like, for an error.
fn what_it_is(head: &[u8]) -> &'static str {
    match head {
        [0x1f, 0x8b, ..] => "it is gzip-compressed",
        [0x28, 0xb5, 0x2f, 0xfd, ..] => "it is zstd-compressed",
        _ if head.len() > 262 && &head[257..262] == b"ustar" => "it is a tar archive",
        [b'{', ..] => "it looks like JSON",
        [] => "it is empty",
        _ => "its first bytes are neither",
    }
}

/// `linux/ARCH` of this machine, in OCI's words.
fn host_platform() -> String {
    crate::platform::Platform::host().to_string()
}

/// The OCI config berth writes for an imported image file: its settings,
/// and the squashfs's digest as the one diff id, so that the image id
/// (this config's digest) is bound to the file's content.
fn synthetic_config(run: &RunConfig, squashfs_digest: &str, source: &str) -> Vec<u8> {
    let platform = crate::platform::Platform::host();
    let mut config = serde_json::json!({
        "architecture": platform.arch,
        "os": "linux",
        "config": {
            "Env": run.env,
            "Cmd": run.cmd,
            "Labels": run.labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [squashfs_digest]},
        "history": [{"created_by": format!("berth import {source}"), "comment": "a squashfs imported as it is: the diff id is the squashfs file's digest, not a tar's"}],
    });
    if !run.entrypoint.is_empty() {
        config["config"]["Entrypoint"] = serde_json::json!(run.entrypoint);
    }
    if !run.workdir.is_empty() {
        config["config"]["WorkingDir"] = serde_json::json!(run.workdir);
    }
    serde_json::to_vec_pretty(&config).unwrap_or_default()
}

/// Copies the squashfs of `f` into the store as an image named `names`
/// (`berth import sif:FILE NAME`, `squashfs:FILE NAME`). The id is the
/// digest of a config berth writes, which holds the squashfs's digest:
/// importing the same file twice gives the same id.
pub fn import(store: &Store, f: &ImageFile, names: &[String]) -> Result<StoredImage> {
    let run = f.run_config()?;
    let work = store.work_dir()?;
    let sqfs_path = work.path().join("image.sqfs");
    let sealed = copy_squashfs(f, &sqfs_path)?;
    // The command line's own form of the path: an import from another
    // directory of the same file gives the same id.
    let source = format!("{}:{}", f.format.transport(), f.path.display());
    let squashfs = (f.compressor.as_str(), f.block_size);
    publish_sealed(store, work, sealed, run, &source, squashfs, names)
}

/// Publishes the squashfs written as `image.sqfs` in `work` (a container
/// saved with `berth run --save NAME`) as an image whose settings are
/// `run`, named `names`; `squashfs` is its compressor and block size.
pub fn publish_written(
    store: &Store,
    work: crate::store::WorkDir,
    run: RunConfig,
    source: &str,
    squashfs: (&str, u32),
    names: &[String],
) -> Result<StoredImage> {
    let sealed = crate::seal::seal_file(&work.path().join("image.sqfs"))?;
    publish_sealed(store, work, sealed, run, source, squashfs, names)
}

/// Publishes the sealed `image.sqfs` of `work` under the id of a config
/// berth writes (which holds the squashfs's digest).
fn publish_sealed(
    store: &Store,
    work: crate::store::WorkDir,
    sealed: Sealed,
    run: RunConfig,
    source: &str,
    (compressor, block_size): (&str, u32),
    names: &[String],
) -> Result<StoredImage> {
    let config = synthetic_config(&run, &sealed.sha256, source);
    let id = crate::layer::sha256_digest(&config);
    let _lock = store.lock_image(&id)?;
    if let Ok(existing) = store.find(&id) {
        drop(work);
        return name_image(store, existing, names);
    }
    std::fs::write(work.path().join("config.json"), &config)
        .map_err(|e| Error::store("write", work.path().join("config.json"), e))?;
    let record = ImageRecord {
        version: 1,
        id: id.clone(),
        manifest_digest: None,
        source: source.to_string(),
        platform: host_platform(),
        stored_at: timestamp(),
        run,
        layers: Vec::new(),
        squashfs: SquashfsRecord {
            file: "image.sqfs".into(),
            size: sealed.size,
            sha256: sealed.sha256,
            compressor: compressor.to_string(),
            block_size,
            offset: 0,
            verity: Some(sealed.verity),
        },
        dropped_devices: Vec::new(),
    };
    store.publish(work, &record)?;
    let stored = store.find(&id)?;
    name_image(store, stored, names)
}

/// Copies the squashfs bytes of `f` to `dest`, padded to 4 KiB as
/// mksquashfs pads its files, and seals the copy as it is written.
fn copy_squashfs(f: &ImageFile, dest: &Path) -> Result<Sealed> {
    let mut out = File::create(dest).map_err(|e| Error::store("create", dest, e))?;
    let mut sealer = Sealer::default();
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0u64;
    while done < f.size {
        let n = buf.len().min((f.size - done) as usize);
        f.file
            .read_exact_at(&mut buf[..n], f.offset + done)
            .map_err(|e| Error::input(&f.path, e))?;
        sealer.update(&buf[..n]);
        out.write_all(&buf[..n])
            .map_err(|e| Error::store("write", dest, e))?;
        done += n as u64;
    }
    let zeros = vec![0u8; ((4096 - f.size % 4096) % 4096) as usize];
    sealer.update(&zeros);
    out.write_all(&zeros)
        .map_err(|e| Error::store("write", dest, e))?;
    let sealed = sealer
        .finish(&mut out)
        .map_err(|e| Error::store("write", dest, e))?;
    out.sync_all().map_err(|e| Error::store("sync", dest, e))?;
    Ok(sealed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_references_are_told_apart() {
        for p in ["./x.sqsh", "../a/b.sif", "/scratch/x.sif", ".hidden"] {
            assert!(names_a_file(p), "{p}");
        }
        for r in [
            "ubuntu:24.04",
            "nvcr.io#nvidia/pytorch:24.01-py3",
            "x.sif",
            "localhost/x",
        ] {
            assert!(!names_a_file(r), "{r}");
        }
    }

    #[test]
    fn what_is_not_an_image_file_is_named() {
        assert_eq!(what_it_is(&[0x1f, 0x8b, 8]), "it is gzip-compressed");
        assert_eq!(what_it_is(b""), "it is empty");
    }
}
