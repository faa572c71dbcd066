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
use berth_runtime::rootfs::Bind;

/// Where the image's cache is.
pub const TARGET: &str = "/etc/ld.so.cache";

/// The largest image cache read.
const MAX_CACHE: u64 = 64 << 20;

/// Changes when what [`write::with_libraries`] writes changes, so that a
/// cache written by an older berth is not taken.
const FORMAT: u32 = 3;

/// Adds the bind of the image's cache with every injected library: to
/// the run's own binds where the run asks for libraries, else to every
/// run's (the site's modules), each given as its plan and its binds. For
/// read-only roots only (the caller's test): in a writable container the
/// image's `ldconfig` (run by apt and dnf) must be able to replace the
/// cache, which it cannot where the cache is a mount point.
///
/// Returns whether the bind was added: the run's loader cache then lists
/// every injected library.
pub fn add(
    image: &StoredImage,
    always: (&Plan, &mut Vec<Bind>),
    requested: (&Plan, &mut Vec<Bind>),
) -> bool {
    let libs: Vec<&Library> = always
        .0
        .libraries
        .iter()
        .chain(&requested.0.libraries)
        .collect();
    let Some(b) = bind(image, &libs) else {
        return false;
    };
    match requested.0.libraries.is_empty() {
        true => always.1.push(b),
        false => requested.1.push(b),
    }
    true
}

/// The bind of the image's cache with `libraries` added; `None` without
/// libraries, or where the image has no cache (musl images, whose loader
/// has none) or it cannot be read or written (the libraries then go on
/// `LD_LIBRARY_PATH`; said at debug level).
fn bind(image: &StoredImage, libraries: &[&Library]) -> Option<Bind> {
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
    let made = cached(image, &libs, host_driver)
        .inspect_err(|e| tracing::debug!("no loader cache with the injected libraries: {e}"))
        .ok()??;
    Some(Bind {
        source: made,
        target: TARGET.to_string(),
        readonly: true,
        spec: "the image's loader cache with the injected libraries".to_string(),
        device: false,
        options: Default::default(),
    })
}

/// The cache file for `image` and `libs` (beside a node's driver of
/// version `host_driver`), written if missing; `None` where the image has
/// none (remembered by an empty marker file).
fn cached(
    image: &StoredImage,
    libs: &[(String, String)],
    host_driver: Option<DriverVersion>,
) -> std::io::Result<Option<PathBuf>> {
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
    let (path, none) = (
        dir.join(format!("{name}.cache")),
        dir.join(format!("{name}.none")),
    );
    if path.is_file() {
        return Ok(Some(path));
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
    let libs = match host_driver {
        Some(host) => with_image_driver(&squashfs, libs, host)?,
        None => libs.to_vec(),
    };
    let out = write::with_libraries(&bytes, &libs).map_err(std::io::Error::other)?;
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
    written.map(|()| Some(path))
}

/// `libs`, with each library the image's forward-compatible CUDA driver
/// has taken from there instead, where that driver is of a later branch
/// than `host`'s.
fn with_image_driver(
    squashfs: &berth_squashfs::Image,
    libs: &[(String, String)],
    host: DriverVersion,
) -> std::io::Result<Vec<(String, String)>> {
    let names: Vec<String> = squashfs
        .read_dir_names(compat::COMPAT_DIR)
        .map_err(std::io::Error::other)?
        .unwrap_or_default()
        .into_iter()
        .filter_map(|n| String::from_utf8(n).ok())
        .collect();
    let Some(newer) = compat::newer_than(host, &names) else {
        return Ok(libs.to_vec());
    };
    tracing::debug!(
        "the image's CUDA driver {newer} in {} is newer than this node's {host}: its libraries are used",
        compat::COMPAT_DIR
    );
    Ok(libs
        .iter()
        .map(|(name, path)| match names.contains(name) {
            true => (name.clone(), format!("{}/{name}", compat::COMPAT_DIR)),
            false => (name.clone(), path.clone()),
        })
        .collect())
}
