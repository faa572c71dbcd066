//! The image's loader cache with the run's injected libraries added
//! ([`berth_inject::ldcache::write`]), bound read-only over the image's
//! `/etc/ld.so.cache`: `ldconfig -p` and `ctypes.util.find_library` then
//! find a GPU driver's libraries as with NVIDIA's container toolkit, and a
//! program that clears `LD_LIBRARY_PATH` still loads them. The cache is
//! written once per image and set of libraries under berth's runtime
//! directory, named by what it is made of.
//!
//! Where the image ships a CUDA driver of a later branch than the node's
//! ([`berth_inject::gpu::compat`]), the cache names the image's copies of
//! the driver's libraries instead of the node's.

use std::hash::{Hash, Hasher};
use std::path::PathBuf;

use berth_image::store::StoredImage;
use berth_inject::gpu::compat::{self, DriverVersion};
use berth_inject::ldcache::write;
use berth_inject::plan::{Library, LIB_DIR};
use berth_inject::Plan;
use berth_runtime::rootfs::{Bind, LoaderCache};

/// Where the image's cache is.
const TARGET: &str = "/etc/ld.so.cache";

/// The largest image cache read.
const MAX_CACHE: u64 = 64 << 20;

/// Changes when what [`write::with_libraries`] writes changes, so that a
/// cache written by an older berth is not taken.
const FORMAT: u32 = 4;

/// Where a run's root stands, which decides how its loader cache reaches
/// it.
#[derive(Debug, Clone, Copy)]
pub struct Root {
    /// An overlay with an upper layer: writable, `--overlay`, `--name`.
    pub layered: bool,
    /// The upper layer is in memory, new with the run (not `--overlay`
    /// or `--name`, whose layer an earlier run's `ldconfig` wrote to).
    pub fresh_upper: bool,
    /// The run joins a running container, whose root it cannot change.
    pub joins: bool,
    /// `--save` (the saved image must not keep berth's files).
    pub saves: bool,
    /// `--umount /etc/ld.so.cache`.
    pub leaves_out: bool,
}

impl Root {
    /// The root `req` asks for; `joins` where it joins a running
    /// container.
    pub fn of(req: &crate::request::RunRequest, joins: bool) -> Root {
        let persistent_upper = req.overlay.is_some() || req.kept_name().is_some();
        Root {
            layered: req.writable || persistent_upper,
            fresh_upper: !persistent_upper,
            joins,
            saves: req.save.is_some(),
            leaves_out: req.umount.iter().any(|u| u.trim_end_matches('/') == TARGET),
        }
    }
}

/// How the run's loader cache reaches the container.
#[derive(Debug, Clone, Default)]
pub struct Placed {
    /// The container's cache lists every injected library, so that
    /// `LD_LIBRARY_PATH` need not name them ([`berth_inject::plan::Lookup`]).
    pub in_cache: bool,
    /// For a layered root: the cache, to lie in a layer above the image.
    pub layer: Option<LoaderCache>,
    /// The image's forward-compatible CUDA driver is to be loaded: its
    /// directory, to go before the injected libraries wherever they go
    /// on `LD_LIBRARY_PATH`.
    pub compat_dir: Option<&'static str>,
}

impl Placed {
    /// What decides the injected libraries' place on `LD_LIBRARY_PATH`.
    pub fn loader(&self) -> berth_inject::plan::Loader<'static> {
        berth_inject::plan::Loader {
            in_cache: self.in_cache,
            before: self.compat_dir,
        }
    }
}

/// The image's cache with every injected library, for a run with `root`.
/// A read-only root gets it bound read-only over the image's: added to
/// the run's own binds where the run asks for libraries, else to every
/// run's (the site's modules), each given as its plan and its binds. A
/// layered root gets it in a layer above the image, with the directory
/// in `/etc/ld.so.conf.d`, where the image has that directory: the
/// image's `ldconfig` (run by apt and dnf) must be able to replace the
/// cache, which it cannot where the cache is a mount point.
pub fn place(
    image: &StoredImage,
    root: Root,
    always: (&Plan, &mut Vec<Bind>),
    requested: (&Plan, &mut Vec<Bind>),
) -> Placed {
    let libs: Vec<&Library> = always
        .0
        .libraries
        .iter()
        .chain(&requested.0.libraries)
        .collect();
    let Some(made) = made(image, &libs) else {
        return Placed::default();
    };
    let compat_dir = made.compat.then_some(compat::COMPAT_DIR);
    if root.saves {
        return Placed {
            compat_dir,
            ..Placed::default()
        };
    }
    if root.layered {
        // Only a fresh upper layer: a persistent one may hold a cache an
        // earlier run's ldconfig wrote, which would hide this one (and
        // which berth commit would keep).
        let layer = (made.conf_dir && root.fresh_upper && !root.joins).then(|| LoaderCache {
            file: made.file,
            dirs: compat_dir
                .into_iter()
                .chain([LIB_DIR])
                .map(str::to_string)
                .collect(),
        });
        return Placed {
            in_cache: layer.is_some(),
            layer,
            compat_dir,
        };
    }
    let b = Bind {
        source: made.file,
        target: TARGET.to_string(),
        readonly: true,
        spec: "the image's loader cache with the injected libraries".to_string(),
        device: false,
        options: Default::default(),
    };
    match requested.0.libraries.is_empty() {
        true => always.1.push(b),
        false => requested.1.push(b),
    }
    Placed {
        in_cache: !root.joins && !root.leaves_out,
        layer: None,
        compat_dir,
    }
}

/// A cache file written for an image.
struct Made {
    /// The file.
    file: PathBuf,
    /// The image's `/etc` and `/etc/ld.so.conf.d` are directories.
    conf_dir: bool,
    /// It names the image's forward-compatible CUDA driver.
    compat: bool,
}

/// The image's cache with `libraries` added; `None` without libraries, or
/// where the image has no cache (musl images, whose loader has none) or
/// it cannot be read or written (the libraries then go on
/// `LD_LIBRARY_PATH`; said at debug level).
fn made(image: &StoredImage, libraries: &[&Library]) -> Option<Made> {
    if libraries.is_empty() {
        return None;
    }
    let mut libs: Vec<(String, String)> = libraries
        .iter()
        .map(|l| (l.name.clone(), format!("{LIB_DIR}/{}", l.name)))
        .collect();
    libs.sort();
    libs.dedup();
    let host_driver = DriverVersion::of_host(libraries);
    cached(image, &libs, host_driver)
        .inspect_err(|e| tracing::debug!("no loader cache with the injected libraries: {e}"))
        .ok()?
}

/// The cache file for `image` and `libs` (beside a node's driver of
/// version `host_driver`), written if missing; `None` where the image has
/// none. Empty marker files beside it remember that, and whether the
/// image has `/etc/ld.so.conf.d`.
fn cached(
    image: &StoredImage,
    libs: &[(String, String)],
    host_driver: Option<DriverVersion>,
) -> std::io::Result<Option<Made>> {
    let mut h = std::hash::DefaultHasher::new();
    let made_by = (FORMAT, env!("CARGO_PKG_VERSION"));
    (
        made_by,
        &image.record.id,
        libs,
        host_driver,
        write::native_flags(),
    )
        .hash(&mut h);
    let dir = berth_runtime::node::state_dir()
        .map_err(std::io::Error::other)?
        .join("ldcache");
    let name = format!("{:016x}", h.finish());
    let marker = |what: &str| dir.join(format!("{name}.{what}"));
    let (path, none, conf_d, compat_d) = (
        marker("cache"),
        marker("none"),
        marker("conf-d"),
        marker("compat"),
    );
    if path.is_file() {
        return Ok(Some(Made {
            file: path,
            conf_dir: conf_d.is_file(),
            compat: compat_d.is_file(),
        }));
    }
    if none.is_file() {
        return Ok(None);
    }
    let file = std::fs::File::open(image.squashfs_path())?;
    let squashfs = berth_squashfs::Image::open(file, image.record.squashfs.offset)
        .map_err(std::io::Error::other)?;
    let read = squashfs
        .read_path(TARGET, MAX_CACHE)
        .map_err(std::io::Error::other)?;
    std::fs::create_dir_all(&dir)?;
    let Some(bytes) = read else {
        std::fs::write(&none, b"")?;
        return Ok(None);
    };
    let image_driver = match host_driver {
        Some(host) => with_image_driver(&squashfs, libs, host).map_err(std::io::Error::other)?,
        None => None,
    };
    let compat = image_driver.is_some();
    let libs = image_driver.unwrap_or_else(|| libs.to_vec());
    let out = write::with_libraries(&bytes, &libs).map_err(std::io::Error::other)?;
    let conf_dir = has_conf_dir(&squashfs).map_err(std::io::Error::other)?;
    for (yes, marker) in [(conf_dir, &conf_d), (compat, &compat_d)] {
        if yes {
            std::fs::write(marker, b"")?;
        }
    }
    // Readable by every id of the container (a service's own user, the
    // subordinate ids of --fakeroot), whatever the umask.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let tmp = dir.join(format!(".{name}.{}.{nanos}", std::process::id()));
    let written = (|| {
        use std::io::Write;
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&tmp)?;
        f.write_all(&out)?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644))?;
        std::fs::rename(&tmp, &path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map(|()| {
        Some(Made {
            file: path,
            conf_dir,
            compat,
        })
    })
}

/// Whether the image's `/etc` and `/etc/ld.so.conf.d` are directories,
/// not links, and its `/etc/ld.so.conf` includes the latter (where a
/// writable root's cache and its configuration file go, for its own
/// `ldconfig` to read: [`berth_runtime::rootfs::LoaderCache`]).
fn has_conf_dir(squashfs: &berth_squashfs::Image) -> berth_squashfs::reader::Result<bool> {
    let conf = squashfs
        .read_path("/etc/ld.so.conf", 1 << 16)?
        .unwrap_or_default();
    let includes = String::from_utf8_lossy(&conf).lines().any(|l| {
        let l = l.trim_start();
        l.starts_with("include") && l.contains("/etc/ld.so.conf.d/")
    });
    if !includes {
        return Ok(false);
    }
    use berth_squashfs::reader::Body;
    let (mut r, mut dir) = (squashfs.root(), None);
    for name in [&b"etc"[..], b"ld.so.conf.d"] {
        let inode = match dir {
            Some(i) => i,
            None => squashfs.inode(r)?,
        };
        let Some(entry) = squashfs.lookup(r, &inode, name)? else {
            return Ok(false);
        };
        let next = squashfs.inode(entry.inode)?;
        if !matches!(next.body, Body::Dir(_)) {
            return Ok(false);
        }
        (r, dir) = (entry.inode, Some(next));
    }
    Ok(true)
}

/// `libs`, with each library the image's forward-compatible CUDA driver
/// has taken from there instead, where that driver is of a later branch
/// than `host`'s.
fn with_image_driver(
    squashfs: &berth_squashfs::Image,
    libs: &[(String, String)],
    host: DriverVersion,
) -> berth_squashfs::reader::Result<Option<Vec<(String, String)>>> {
    let names: Vec<String> = squashfs
        .read_dir_names(compat::COMPAT_DIR)?
        .unwrap_or_default()
        .into_iter()
        .filter_map(|n| String::from_utf8(n).ok())
        .collect();
    let Some(newer) = compat::newer_than(host, &names) else {
        return Ok(None);
    };
    // Only what the loader can open: a name that is no file (a dangling
    // link, a directory) keeps the node's library.
    let is_file = |name: &str| -> berth_squashfs::reader::Result<bool> {
        let found = squashfs.resolve(&format!("{}/{name}", compat::COMPAT_DIR))?;
        Ok(found.is_some_and(|(_, i)| matches!(i.body, berth_squashfs::reader::Body::File(_))))
    };
    if !is_file("libcuda.so.1")? {
        return Ok(None);
    }
    tracing::debug!(
        "the image's CUDA driver {newer} in {} is newer than this node's {host}: its libraries are used",
        compat::COMPAT_DIR
    );
    let mut out = Vec::with_capacity(libs.len());
    for (name, path) in libs {
        let path = match names.contains(name) && is_file(name)? {
            true => format!("{}/{name}", compat::COMPAT_DIR),
            false => path.clone(),
        };
        out.push((name.clone(), path));
    }
    Ok(Some(out))
}
