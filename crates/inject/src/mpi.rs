//! The MPI bind model: the host's MPI (tuned for its network) replaces the
//! image's, when their ABIs agree.
//!
//! On the host, at plan time: the module's MPI libraries and their whole
//! `DT_NEEDED` closure (libfabric, libpmi, libucx, ...; glibc's own
//! libraries excepted), read from the ELF files and resolved through their
//! RUNPATH and the host's loader cache, are injected; the newest glibc
//! they need is noted. In the container, before the command starts
//! ([`check_image`]): the image's libmpi (from its ld.so.cache, else the
//! standard directories) must have the host's soname major, and per the
//! module's `abi` mode (Sarus's rules):
//!
//! - `major`: equal majors (`libmpi.so.12` and `libmpi.so.12`);
//! - `full` (default): and the host's minor at least the image's
//!   (`12.1.x` on the host serves an image built against `12.0.y`);
//! - `strict`: equal `major.minor.patch`.
//!
//! and the image's glibc must be at least the one the host libraries need.
//! An Open MPI image (`libmpi.so.40`) against an MPICH-ABI host
//! (`libmpi.so.12`) is refused, naming both.

use std::collections::{BTreeSet, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::elf::{self, GlibcVersion};
use crate::error::InjectError;
use crate::host::HostPaths;
use crate::ldcache;
use crate::plan::{Library, Plan};

/// How strictly the image's and the host's MPI versions must agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AbiMode {
    /// Equal soname majors.
    Major,
    /// Equal majors and host minor >= image minor.
    #[default]
    Full,
    /// Equal major, minor and patch.
    Strict,
}

/// A module's `[mpi]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MpiDef {
    /// The host MPI's libraries (`.../libmpi.so.12`, `libmpicxx.so.12`,
    /// `libmpifort.so.12`): injected under their file name and soname.
    pub libraries: Vec<String>,
    /// The version rule.
    #[serde(default)]
    pub abi: AbiMode,
}

/// A library version from its file name: `libmpi.so.12.1.8` is 12.1.8.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SoVersion {
    /// Soname major.
    pub major: u32,
    /// Minor, when the file name has one.
    pub minor: Option<u32>,
    /// Patch, when the file name has one.
    pub patch: Option<u32>,
}

impl std::fmt::Display for SoVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.major)?;
        if let Some(m) = self.minor {
            write!(f, ".{m}")?;
        }
        if let Some(p) = self.patch {
            write!(f, ".{p}")?;
        }
        Ok(())
    }
}

/// The version in a library file name after `.so.`.
pub fn so_version(file_name: &str) -> Option<SoVersion> {
    let (_, v) = file_name.split_once(".so.")?;
    let mut it = v.split('.').map(|p| p.parse::<u32>().ok());
    let major = it.next()??;
    let minor = it.next().flatten();
    let patch = it.next().flatten();
    Some(SoVersion {
        major,
        minor,
        patch,
    })
}

/// Why two versions are not compatible under `mode`, or `None` when they are.
pub fn abi_mismatch(host: SoVersion, image: SoVersion, mode: AbiMode) -> Option<String> {
    if host.major != image.major {
        return Some(format!(
            "different ABI majors (host {}, image {})",
            host.major, image.major
        ));
    }
    match mode {
        AbiMode::Major => None,
        AbiMode::Full => match (host.minor, image.minor) {
            (Some(h), Some(i)) if h < i => Some(format!(
                "the host's minor version {h} is older than the image's {i} (abi = \"full\" needs host >= image)"
            )),
            _ => None,
        },
        AbiMode::Strict => (host != image).then(|| {
            format!("versions differ (host {host}, image {image}; abi = \"strict\" needs them equal)")
        }),
    }
}

/// What the container-side check needs, worked out on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MpiCheck {
    /// The module that provides the host MPI.
    pub module: String,
    /// The host's libmpi: soname and the real file.
    pub host_soname: String,
    /// Its version.
    pub host_version: SoVersion,
    /// Its real path on the host.
    pub host_path: PathBuf,
    /// The rule.
    pub abi: AbiMode,
    /// The newest glibc the injected libraries need.
    pub glibc_needed: Option<GlibcVersion>,
}

/// glibc's own libraries: never injected (they must match the image's
/// dynamic loader), checked by version instead.
const GLIBC: &[&str] = &[
    "libc.so.6",
    "libm.so.6",
    "libpthread.so.0",
    "libdl.so.2",
    "librt.so.1",
    "libresolv.so.2",
    "libutil.so.1",
    "libanl.so.1",
    "libnsl.so.1",
    "libmvec.so.1",
    "libBrokenLocale.so.1",
    "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
    "ld64.so.2",
];

/// File-name prefixes of an MPI library: `libmpi.so.12` (MPICH, Cray
/// MPICH, Intel MPI, Open MPI's `.40`) and `libmpich.so.12` (MPICH as
/// Debian and Ubuntu package it).
const MPI_PREFIXES: &[&str] = &["libmpi.so.", "libmpich.so."];

fn is_mpi_name(name: &str) -> bool {
    MPI_PREFIXES.iter().any(|p| name.starts_with(p))
}

fn is_glibc(name: &str) -> bool {
    GLIBC.contains(&name) || name.starts_with("ld-linux")
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Where the host loader would find `name` for a library in `dir` with
/// `runpath`: its RUNPATH/RPATH first (`$ORIGIN` expanded), then the cache.
fn resolve(
    name: &str,
    dir: &Path,
    runpath: &[String],
    cache: &[ldcache::Entry],
) -> Option<PathBuf> {
    for rp in runpath {
        let d = rp
            .replace("$ORIGIN", &dir.to_string_lossy())
            .replace("${ORIGIN}", &dir.to_string_lossy());
        let p = Path::new(&d).join(name);
        if p.is_file() {
            return Some(p);
        }
    }
    cache
        .iter()
        .find(|e| e.soname == name && e.is_native())
        .map(|e| PathBuf::from(&e.path))
}

/// Adds the module's MPI libraries and their closure to `plan`; returns
/// what the container-side check needs.
pub fn inject_host_mpi(
    module: &str,
    def: &MpiDef,
    host: &HostPaths,
    plan: &mut Plan,
) -> Result<MpiCheck, InjectError> {
    let origin = format!("module:{module}");
    let bad = |reason: String| InjectError::Mpi(format!("module {module}: {reason}"));
    let cache = ldcache::read(&host.ld_cache).unwrap_or_default();
    let mut queue: VecDeque<(PathBuf, Vec<String>)> = VecDeque::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut libmpi: Option<(String, SoVersion, PathBuf)> = None;
    let mut glibc: Option<GlibcVersion> = None;
    if def.libraries.is_empty() {
        return Err(bad(
            "[mpi] libraries is empty: name the host's libmpi.so.N".into()
        ));
    }
    for lib in &def.libraries {
        let path = PathBuf::from(lib);
        let real = fs::canonicalize(&path).map_err(|e| {
            bad(format!(
                "MPI library {lib}: {e} (is the MPI installed on this node?)"
            ))
        })?;
        let info = elf::read(&real).map_err(bad)?;
        let mut names = vec![file_name(&path)];
        if let Some(s) = &info.soname {
            if !names.contains(s) {
                names.push(s.clone());
            }
        }
        if libmpi.is_none() {
            if let Some(n) = names.iter().find(|n| is_mpi_name(n)).cloned() {
                let v = so_version(&file_name(&real))
                    .filter(|v| Some(v.major) == so_version(&n).map(|m| m.major))
                    .or_else(|| so_version(&n))
                    .ok_or_else(|| bad(format!("cannot read a version from {n}")))?;
                // Programs link one name or the other: the host library
                // answers to both (same ABI, same major).
                for prefix in MPI_PREFIXES {
                    let alias = format!("{prefix}{}", v.major);
                    if !names.contains(&alias) {
                        names.push(alias);
                    }
                }
                libmpi = Some((n, v, real.clone()));
            }
        }
        for n in names {
            seen.insert(n.clone());
            plan.library(Library {
                name: n,
                source: real.clone(),
                origin: origin.clone(),
            });
        }
        queue.push_back((real, Vec::new()));
    }
    // The closure of what the injected libraries need.
    while let Some((lib, _)) = queue.pop_front() {
        let info = elf::read(&lib).map_err(bad)?;
        glibc = glibc.max(info.glibc_needed);
        let dir = lib.parent().unwrap_or(Path::new("/")).to_path_buf();
        for need in &info.needed {
            if is_glibc(need) || !seen.insert(need.clone()) {
                continue;
            }
            match resolve(need, &dir, &info.runpath, &cache).and_then(|p| fs::canonicalize(p).ok())
            {
                Some(real) => {
                    plan.library(Library {
                        name: need.clone(),
                        source: real.clone(),
                        origin: origin.clone(),
                    });
                    queue.push_back((real, Vec::new()));
                }
                None => plan.warnings.push(format!(
                    "{origin}: {need}, needed by {}, is not on this host; not injected",
                    lib.display()
                )),
            }
        }
    }
    let (host_soname, host_version, host_path) = libmpi.ok_or_else(|| {
        bad("none of [mpi] libraries is a libmpi.so.N or libmpich.so.N (the library MPI programs link)".into())
    })?;
    Ok(MpiCheck {
        module: module.to_string(),
        host_soname,
        host_version,
        host_path,
        abi: def.abi,
        glibc_needed: glibc,
    })
}

/// Standard library directories searched when the image's cache lacks MPI.
const LIB_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/lib64",
    "/lib",
    "/usr/local/lib",
    "/usr/local/lib64",
    "/opt/mpich/lib",
];

/// The image's libmpi under `root`: (soname, real path).
fn image_libmpi(root: &Path) -> Option<(String, PathBuf)> {
    let inside = |p: &str| root.join(p.trim_start_matches('/'));
    if let Ok(entries) = ldcache::read(&inside("/etc/ld.so.cache")) {
        if let Some(e) = entries
            .iter()
            .find(|e| is_mpi_name(&e.soname) && e.is_native())
        {
            return Some((e.soname.clone(), inside(&e.path)));
        }
    }
    for dir in LIB_DIRS {
        let Ok(rd) = fs::read_dir(inside(dir)) else {
            continue;
        };
        let mut names: Vec<String> = rd
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| is_mpi_name(n) && so_version(n).is_some())
            .collect();
        names.sort_by_key(|n| n.len());
        if let Some(n) = names.first() {
            return Some((n.clone(), inside(dir).join(n)));
        }
    }
    None
}

/// The image's glibc version under `root`.
fn image_glibc(root: &Path) -> Option<GlibcVersion> {
    let inside = |p: &str| root.join(p.trim_start_matches('/'));
    let entries = ldcache::read(&inside("/etc/ld.so.cache")).ok()?;
    let libc = entries
        .iter()
        .find(|e| e.soname == "libc.so.6" && e.is_native())?;
    elf::read(&inside(&libc.path)).ok()?.glibc_defined
}

/// The container-side check: the image's MPI and glibc against the host
/// MPI's, with the image's root at `root` (`/` inside the container).
/// Paths in messages are the image's.
pub fn check_image(check: &MpiCheck, root: &Path) -> Result<(), String> {
    let shown = |p: &Path| {
        Path::new("/")
            .join(p.strip_prefix(root).unwrap_or(p))
            .display()
            .to_string()
    };
    let (soname, path) = image_libmpi(root).ok_or_else(|| {
        format!(
            "--mpi: the image has no MPI library (libmpi.so.N or libmpich.so.N in its ld.so.cache or standard directories) for the host's {} to replace; run without --mpi, or build the image with an MPI of the host's ABI",
            check.host_soname
        )
    })?;
    let real = fs::canonicalize(&path).unwrap_or(path.clone());
    let image_version = so_version(&file_name(&real))
        .filter(|v| Some(v.major) == so_version(&soname).map(|s| s.major))
        .or_else(|| so_version(&soname))
        .ok_or_else(|| format!("--mpi: cannot read the version of the image's {soname}"))?;
    let family = |major: u32| match major {
        12 => " (MPICH ABI)",
        40 => " (Open MPI ABI)",
        _ => "",
    };
    if let Some(why) = abi_mismatch(check.host_version, image_version, check.abi) {
        return Err(format!(
            "--mpi: the image's MPI {soname} {image_version}{} at {} and the host's {} {}{} at {} (module {}) are not compatible: {why}. Run without --mpi to use the image's own MPI, or use an image built with an MPI of the host's ABI",
            family(image_version.major),
            shown(&real),
            check.host_soname,
            check.host_version,
            family(check.host_version.major),
            check.host_path.display(),
            check.module,
        ));
    }
    if let Some(needed) = check.glibc_needed {
        match image_glibc(root) {
            Some(have) if have < needed => {
                return Err(format!(
                    "--mpi: the host's MPI libraries (module {}) need glibc {}.{} but the image has glibc {}.{}; use an image with glibc {}.{} or newer, or run without --mpi",
                    check.module, needed.0, needed.1, have.0, have.1, needed.0, needed.1
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> SoVersion {
        so_version(s).unwrap()
    }

    #[test]
    fn versions_come_from_file_names() {
        assert_eq!(
            v("libmpi.so.12.1.8"),
            SoVersion {
                major: 12,
                minor: Some(1),
                patch: Some(8)
            }
        );
        assert_eq!(v("libmpi.so.40").minor, None);
        assert_eq!(so_version("libmpi.so"), None);
        assert_eq!(v("libmpich.so.12.3.0").to_string(), "12.3.0");
    }

    #[test]
    fn sarus_rules() {
        let host = v("libmpi.so.12.1.8");
        assert!(abi_mismatch(host, v("libmpi.so.12.0.5"), AbiMode::Full).is_none());
        assert!(abi_mismatch(host, v("libmpi.so.12.1.0"), AbiMode::Full).is_none());
        assert!(abi_mismatch(host, v("libmpi.so.12.2.0"), AbiMode::Full)
            .unwrap()
            .contains("older than the image's"));
        assert!(abi_mismatch(host, v("libmpi.so.12.2.0"), AbiMode::Major).is_none());
        assert!(abi_mismatch(host, v("libmpi.so.12.1.8"), AbiMode::Strict).is_none());
        assert!(abi_mismatch(host, v("libmpi.so.12.1.7"), AbiMode::Strict).is_some());
        for mode in [AbiMode::Major, AbiMode::Full, AbiMode::Strict] {
            assert!(abi_mismatch(host, v("libmpi.so.40.30.2"), mode)
                .unwrap()
                .contains("different ABI majors"));
        }
        // Unknown minors are not held against either side.
        assert!(abi_mismatch(v("libmpi.so.12"), v("libmpi.so.12.4.0"), AbiMode::Full).is_none());
    }
}
