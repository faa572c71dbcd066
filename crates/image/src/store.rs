//! The content-addressed image store.
//!
//! ```text
//! STORE/
//!   images/sha256-<id>/      one directory per image, named by its config digest
//!       image.sqfs           the flattened root filesystem
//!       config.json          the OCI image config, byte for byte (its sha256 is the id)
//!       meta.json            berth's record: names' sources, layers, squashfs facts
//!   names.json               name -> id
//!   locks/                   flock files: the store, one per image id
//!   tmp/                     work directories of running pulls
//! ```
//!
//! Publication is one `rename` of a finished work directory into `images/`, so
//! a crash at any point leaves no visible partial image; leftovers in `tmp/`
//! are reclaimed by the next pull or `berth prune`. Locks are `flock`s, which
//! Linux maps to POSIX locks on NFS and Lustre (mounted with `flock`): many
//! processes on many nodes pulling one image convert it once.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{flock, FlockOperation};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::reference::ImageRef;

/// Facts about one layer of an image.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LayerRecord {
    /// Digest of the blob as distributed (compressed), if known.
    pub digest: String,
    /// Digest of the uncompressed tar (the config's diff_id).
    pub diff_id: String,
    /// Media type of the blob.
    pub media_type: String,
    /// Size of the blob in bytes.
    pub size: u64,
}

/// Facts about the squashfs file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SquashfsRecord {
    /// File name inside the image directory.
    pub file: String,
    /// Size in bytes.
    pub size: u64,
    /// sha256 of the file, for `berth check`.
    pub sha256: String,
    /// Block compressor.
    pub compressor: String,
    /// Block size in bytes.
    pub block_size: u32,
}

impl SquashfsRecord {
    /// Whether `file` is one plain name (no `/`, `.` or `..`): a record,
    /// written by whoever can write its directory, never names a file
    /// outside its image's directory.
    pub fn file_is_plain(&self) -> bool {
        !self.file.is_empty() && !self.file.contains('/') && self.file != "." && self.file != ".."
    }
}

/// The image's run-time settings, lifted from the OCI config.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RunConfig {
    /// `Env` as `K=V` strings.
    pub env: Vec<String>,
    /// `Entrypoint`.
    pub entrypoint: Vec<String>,
    /// `Cmd`.
    pub cmd: Vec<String>,
    /// `WorkingDir`.
    pub workdir: String,
    /// `User`.
    pub user: String,
    /// `Labels`.
    pub labels: BTreeMap<String, String>,
    /// `StopSignal`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stop_signal: String,
}

/// berth's record of one image (`meta.json`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ImageRecord {
    /// Format version of this record.
    pub version: u32,
    /// The image id: the config's digest.
    pub id: String,
    /// Digest of the platform manifest it came from, when pulled.
    pub manifest_digest: Option<String>,
    /// Where it came from: a reference or an import source.
    pub source: String,
    /// `os/arch[/variant]`.
    pub platform: String,
    /// When it was stored (seconds since the epoch).
    pub stored_at: u64,
    /// Run-time settings from the config.
    pub run: RunConfig,
    /// The layers, bottom first.
    pub layers: Vec<LayerRecord>,
    /// The squashfs file.
    pub squashfs: SquashfsRecord,
    /// Device nodes dropped while flattening.
    pub dropped_devices: Vec<String>,
}

/// An image found in a store.
#[derive(Debug, Clone)]
pub struct StoredImage {
    /// Its record.
    pub record: ImageRecord,
    /// The image directory.
    pub dir: PathBuf,
    /// The names pointing to it in that store.
    pub names: Vec<String>,
    /// Whether it lies in a read-only shared store.
    pub shared: bool,
}

impl StoredImage {
    /// Path of the squashfs file.
    pub fn squashfs_path(&self) -> PathBuf {
        self.dir.join(&self.record.squashfs.file)
    }

    /// The run-time settings from the image's own config.json, after
    /// checking that its sha256 is the image id: `meta.json` sits in the
    /// same directory and whoever can write that could change it, the
    /// content-addressed config they cannot change unseen.
    pub fn verified_run_config(&self) -> Result<RunConfig> {
        use sha2::Digest;
        let path = self.config_path();
        let mut bytes = Vec::new();
        File::open(&path)
            .and_then(|f| {
                std::io::Read::read_to_end(&mut std::io::Read::take(f, 16 << 20), &mut bytes)
            })
            .map_err(|e| Error::store("read", &path, e))?;
        let digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(&bytes)));
        if digest != self.record.id {
            return Err(Error::BadImage(format!(
                "{}: digest {digest}, but the image id is {}: the store was changed; remove the image (berth rmi) and pull it again",
                path.display(),
                self.record.id
            )));
        }
        let config = crate::pipeline::parse_config(&bytes, &self.record.id)?;
        Ok(crate::pipeline::run_config(&config))
    }

    /// Path of the exact config JSON.
    pub fn config_path(&self) -> PathBuf {
        self.dir.join("config.json")
    }
}

/// An exclusive `flock`, released on drop.
#[derive(Debug)]
pub struct LockGuard {
    _file: File,
}

fn lock_file(path: &Path) -> Result<LockGuard> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::store("open lock", path, e))?;
    flock(&file, FlockOperation::LockExclusive)
        .map_err(|e| Error::store("lock", path, e.into()))?;
    Ok(LockGuard { _file: file })
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

fn id_dir_name(id: &str) -> String {
    id.replace(':', "-")
}

/// A store: the user's writable one plus read-only shared ones.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
    shared: Vec<PathBuf>,
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let mut f = File::create(&tmp).map_err(|e| Error::store("write", &tmp, e))?;
    f.write_all(bytes).and_then(|_| f.sync_all()).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        Error::store("write", &tmp, e)
    })?;
    fs::rename(&tmp, path).map_err(|e| Error::store("rename", path, e))
}

/// Why a store path may not be trusted by the calling user: its metadata
/// `m` must show an owner that is the caller or root (root: root only; a
/// shared store may have any owner for other callers, as a site's service
/// account) and no write permission for group or others. Whoever can write
/// a store can change what the containers run from it.
fn distrust(m: &fs::Metadata, shared: bool) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    let owner_ok = m.uid() == 0 || m.uid() == me || (shared && me != 0);
    if !owner_ok {
        return Some(format!(
            "belongs to uid {}{}",
            m.uid(),
            if me == 0 {
                " (root uses only root's stores)"
            } else {
                ""
            }
        ));
    }
    if m.mode() & 0o022 != 0 {
        return Some(format!(
            "is writable by its group or others (mode {:o})",
            m.mode() & 0o7777
        ));
    }
    None
}

/// [`distrust`] of the path `p` (not following a last symlink).
fn distrust_path(p: &Path, shared: bool) -> Option<String> {
    match fs::symlink_metadata(p) {
        Ok(m) if m.file_type().is_symlink() => {
            // A store root may be a symlink (to scratch, say): its target.
            fs::metadata(p).ok().and_then(|m| distrust(&m, shared))
        }
        Ok(m) => distrust(&m, shared),
        Err(_) => None,
    }
}

/// The shared stores a run may use; the others are named in a warning.
fn trusted_shared(shared: &[PathBuf]) -> Vec<PathBuf> {
    shared
        .iter()
        .filter(|s| {
            match distrust_path(s, true).or_else(|| distrust_path(&s.join("images"), true)) {
                Some(why) => {
                    tracing::warn!("not using the shared store {}: it {why}", s.display());
                    false
                }
                None => true,
            }
        })
        .cloned()
        .collect()
}

impl Store {
    /// Opens (creating if needed) the store at `root`, with `shared` stores
    /// searched after it. A store that someone other than the caller (or
    /// root) could write is refused; such shared stores are skipped.
    pub fn open(root: &Path, shared: &[PathBuf]) -> Result<Self> {
        for sub in ["", "images", "locks", "tmp"] {
            let dir = root.join(sub);
            if !dir.is_dir() {
                fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(&dir)
                    .map_err(|e| Error::store("create", &dir, e))?;
            }
        }
        for p in [root.to_path_buf(), root.join("images")] {
            if let Some(why) = distrust_path(&p, false) {
                return Err(Error::UntrustedStore { path: p, why });
            }
        }
        Ok(Self {
            root: root.to_path_buf(),
            shared: trusted_shared(shared),
        })
    }

    /// The store's root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Locks the whole store (names index updates, prune).
    pub fn lock(&self) -> Result<LockGuard> {
        lock_file(&self.root.join("locks/store.lock"))
    }

    /// Locks one image id while it is converted.
    pub fn lock_image(&self, id: &str) -> Result<LockGuard> {
        lock_file(
            &self
                .root
                .join("locks")
                .join(format!("{}.lock", id_dir_name(id))),
        )
    }

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

    fn image_dir(&self, id: &str) -> PathBuf {
        self.root.join("images").join(id_dir_name(id))
    }

    /// Whether the writable store has image `id`.
    pub fn has_image(&self, id: &str) -> bool {
        self.image_dir(id).join("meta.json").is_file()
    }

    /// Publishes a finished work directory (holding `image.sqfs` and
    /// `config.json`) as image `record.id`, atomically. The caller holds the
    /// image lock.
    pub fn publish(&self, work: WorkDir, record: &ImageRecord) -> Result<()> {
        let meta = serde_json::to_vec_pretty(record)
            .map_err(|e| Error::BadImage(format!("cannot encode the image record: {e}")))?;
        write_atomic(&work.path().join("meta.json"), &meta)?;
        // Image files are read-only once published.
        for f in ["image.sqfs", "config.json", "meta.json"] {
            let p = work.path().join(f);
            let _ = fs::set_permissions(&p, fs::Permissions::from_mode(0o444));
        }
        // A site store made readable for everyone (0755) shares its images;
        // a private one (0700) keeps them private.
        let shared_mode = fs::metadata(self.root.join("images"))
            .map(|m| m.permissions().mode() & 0o755)
            .unwrap_or(0o700);
        let _ = fs::set_permissions(work.path(), fs::Permissions::from_mode(shared_mode | 0o700));
        let dest = self.image_dir(&record.id);
        if dest.exists() {
            // Someone published it meanwhile without our lock (should not
            // happen); keep theirs.
            return Ok(());
        }
        fs::rename(work.path(), &dest).map_err(|e| Error::store("publish", &dest, e))?;
        if let Ok(d) = File::open(self.root.join("images")) {
            let _ = d.sync_all();
        }
        Ok(())
    }

    fn read_names(root: &Path) -> Result<BTreeMap<String, String>> {
        let path = root.join("names.json");
        if let Some(why) = distrust_path(&path, true) {
            tracing::warn!("ignoring the names in {}: it {why}", path.display());
            return Ok(BTreeMap::new());
        }
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                Error::store(
                    "parse",
                    &path,
                    std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()),
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
            Err(e) => Err(Error::store("read", &path, e)),
        }
    }

    /// Points `name` at image `id` (replacing what it pointed to).
    pub fn set_name(&self, name: &str, id: &str) -> Result<()> {
        let _lock = self.lock()?;
        let mut names = Self::read_names(&self.root)?;
        names.insert(name.to_string(), id.to_string());
        let bytes = serde_json::to_vec_pretty(&names)
            .map_err(|e| Error::BadImage(format!("cannot encode names: {e}")))?;
        write_atomic(&self.root.join("names.json"), &bytes)
    }

    fn load(dir: &Path, shared: bool, names: Vec<String>) -> Option<StoredImage> {
        for p in [dir.to_path_buf(), dir.join("meta.json")] {
            if let Some(why) = distrust_path(&p, shared) {
                tracing::warn!("ignoring {}: it {why}", p.display());
                return None;
            }
        }
        let bytes = fs::read(dir.join("meta.json")).ok()?;
        let record: ImageRecord = serde_json::from_slice(&bytes).ok()?;
        if !record.squashfs.file_is_plain() {
            tracing::warn!(
                "ignoring {}: its squashfs file {:?} is not a plain name",
                dir.display(),
                record.squashfs.file
            );
            return None;
        }
        if let Some(why) = distrust_path(&dir.join(&record.squashfs.file), shared) {
            tracing::warn!("ignoring {}: its squashfs file {why}", dir.display());
            return None;
        }
        Some(StoredImage {
            record,
            dir: dir.to_path_buf(),
            names,
            shared,
        })
    }

    /// Every image of every store (the writable one first).
    pub fn list(&self) -> Result<Vec<StoredImage>> {
        let mut out = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (root, shared) in
            std::iter::once((&self.root, false)).chain(self.shared.iter().map(|s| (s, true)))
        {
            let names = match Self::read_names(root) {
                Ok(n) => n,
                Err(e) if !shared => return Err(e),
                Err(_) => continue,
            };
            let Ok(entries) = fs::read_dir(root.join("images")) else {
                continue;
            };
            let mut dirs: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
            dirs.sort();
            for dir in dirs {
                let id = dir
                    .file_name()
                    .map(|n| n.to_string_lossy().replacen('-', ":", 1))
                    .unwrap_or_default();
                if !seen.insert(id.clone()) {
                    continue;
                }
                let image_names: Vec<String> = names
                    .iter()
                    .filter(|(_, v)| **v == id)
                    .map(|(k, _)| k.clone())
                    .collect();
                if let Some(img) = Self::load(&dir, shared, image_names) {
                    out.push(img);
                }
            }
        }
        Ok(out)
    }

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

    /// Finds an image by name (as typed, or normalised), by id, or by a
    /// unique id prefix of at least 4 hex digits.
    pub fn find(&self, wanted: &str) -> Result<StoredImage> {
        // A full id: that image's directory, nothing else.
        if is_full_id(wanted) {
            for (root, shared) in
                std::iter::once((&self.root, false)).chain(self.shared.iter().map(|s| (s, true)))
            {
                let dir = root.join("images").join(id_dir_name(wanted));
                if dir.join("meta.json").is_file() {
                    let names = Self::read_names(root)
                        .map(|n| {
                            n.into_iter()
                                .filter(|(_, v)| v == wanted)
                                .map(|(k, _)| k)
                                .collect()
                        })
                        .unwrap_or_default();
                    if let Some(img) = Self::load(&dir, shared, names) {
                        return Ok(img);
                    }
                }
            }
        }
        // Fast path (every `berth run`): a name in a names index, then that
        // one image's record, without reading every record of the store.
        let quick = short_name_candidates(wanted);
        for (root, shared) in
            std::iter::once((&self.root, false)).chain(self.shared.iter().map(|s| (s, true)))
        {
            let Ok(names) = Self::read_names(root) else {
                continue;
            };
            if let Some(id) = quick.iter().find_map(|c| names.get(c)) {
                let dir = root.join("images").join(id_dir_name(id));
                let image_names = names
                    .iter()
                    .filter(|(_, v)| *v == id)
                    .map(|(k, _)| k.clone())
                    .collect();
                if let Some(img) = Self::load(&dir, shared, image_names) {
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

    /// Removes `wanted`'s name, and the image itself once no name points to
    /// it (or at once for an id). Returns the ids removed.
    pub fn remove(&self, wanted: &str) -> Result<Vec<String>> {
        let img = self.find(wanted)?;
        if img.shared {
            return Err(Error::Store {
                what: "cannot remove an image of a shared store",
                path: img.dir.clone(),
                source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
                hint: "; shared stores are read-only for berth: their owner manages them"
                    .to_string(),
            });
        }
        let _lock = self.lock()?;
        let mut names = Self::read_names(&self.root)?;
        let by_name: Vec<String> = img
            .names
            .iter()
            .filter(|n| {
                **n == wanted
                    || ImageRef::parse(wanted).is_ok_and(|r| r.store_name() == **n)
                    || ImageRef::parse_local_name(wanted).is_ok_and(|r| r.store_name() == **n)
            })
            .cloned()
            .collect();
        if by_name.is_empty() {
            names.retain(|_, v| *v != img.record.id);
        } else {
            for n in &by_name {
                names.remove(n);
            }
        }
        let bytes = serde_json::to_vec_pretty(&names)
            .map_err(|e| Error::BadImage(format!("cannot encode names: {e}")))?;
        write_atomic(&self.root.join("names.json"), &bytes)?;
        let mut removed = Vec::new();
        if !names.values().any(|v| *v == img.record.id) {
            self.delete_image_dir(&img.dir)?;
            removed.push(img.record.id.clone());
        }
        Ok(removed)
    }

    fn delete_image_dir(&self, dir: &Path) -> Result<()> {
        // Move it out of images/ first: readers never see half an image.
        let grave =
            self.root
                .join("tmp")
                .join(format!("removed-{}-{}", std::process::id(), now_nanos()));
        fs::rename(dir, &grave).map_err(|e| Error::store("remove", dir, e))?;
        let _ = fs::set_permissions(&grave, fs::Permissions::from_mode(0o700));
        fs::remove_dir_all(&grave).map_err(|e| Error::store("remove", &grave, e))
    }

    /// Removes images no name points to and leftovers of crashed pulls.
    /// Returns the ids removed.
    pub fn prune(&self) -> Result<Vec<String>> {
        self.reclaim_tmp();
        let _lock = self.lock()?;
        let names = Self::read_names(&self.root)?;
        let mut removed = Vec::new();
        for img in self.list()? {
            if img.shared || names.values().any(|v| *v == img.record.id) {
                continue;
            }
            self.delete_image_dir(&img.dir)?;
            removed.push(img.record.id);
        }
        Ok(removed)
    }
}

/// Whether `id` is a full image id, `sha256:` and 64 hex digits.
pub fn is_full_id(id: &str) -> bool {
    id.strip_prefix("sha256:")
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
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

fn now_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn now_secs_since(path: &Path) -> u64 {
    let modified = fs::metadata(path).and_then(|m| m.modified()).ok();
    modified
        .and_then(|m| m.elapsed().ok())
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Seconds since the epoch, for records.
pub fn timestamp() -> u64 {
    now_secs()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str) -> ImageRecord {
        ImageRecord {
            version: 1,
            id: id.to_string(),
            manifest_digest: None,
            source: "test".into(),
            platform: "linux/amd64".into(),
            stored_at: 0,
            run: RunConfig::default(),
            layers: vec![],
            squashfs: SquashfsRecord {
                file: "image.sqfs".into(),
                size: 0,
                sha256: String::new(),
                compressor: "zstd".into(),
                block_size: 131072,
            },
            dropped_devices: vec![],
        }
    }

    fn put(store: &Store, id: &str, name: &str) {
        let w = store.work_dir().unwrap();
        fs::write(w.path().join("image.sqfs"), b"x").unwrap();
        fs::write(w.path().join("config.json"), b"{}").unwrap();
        store.publish(w, &record(id)).unwrap();
        store.set_name(name, id).unwrap();
    }

    #[test]
    fn publish_find_remove() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &[]).unwrap();
        let id = format!("sha256:{}", "ab".repeat(32));
        put(&store, &id, "localhost/a:latest");
        store.set_name("localhost/b:latest", &id).unwrap();
        assert_eq!(store.find("a").unwrap().record.id, id);
        assert_eq!(store.find("abab").unwrap().record.id, id);
        assert_eq!(store.find(&id).unwrap().names.len(), 2);
        assert!(matches!(store.find("nope"), Err(Error::ImageNotInStore(_))));
        assert!(store.remove("a").unwrap().is_empty());
        assert_eq!(store.remove("localhost/b").unwrap(), vec![id.clone()]);
        assert!(!store.has_image(&id));
        assert_eq!(fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0);
    }

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
        assert!(store.prune().unwrap().is_empty());
    }
}
