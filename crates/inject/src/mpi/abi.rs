//! The ABI side of the MPI bind model: versions, the compatibility rule
//! and the container-side check ([`check_image`]). Data plus a check: it
//! reads ELF files and loader caches, and knows nothing of plans.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::elf::{self, GlibcVersion};
use crate::ldcache;

/// How strictly the image's and the host's MPI versions must agree.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, schemars::JsonSchema,
)]
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

/// File-name prefixes of an MPI library: `libmpi.so.12` (MPICH, Cray
/// MPICH, Intel MPI, Open MPI's `.40`) and `libmpich.so.12` (MPICH as
/// Debian and Ubuntu package it).
pub(super) const MPI_PREFIXES: &[&str] = &["libmpi.so.", "libmpich.so."];

pub(super) fn is_mpi_name(name: &str) -> bool {
    MPI_PREFIXES.iter().any(|p| name.starts_with(p))
}

pub(super) fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
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
        // Not the host's, which berth's own copy of the cache lists first.
        let injected = |p: &str| p.starts_with(&format!("{}/", crate::paths::LIB_DIR));
        if let Some(e) = entries
            .iter()
            .find(|e| is_mpi_name(&e.soname) && e.is_native() && !injected(&e.path))
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
