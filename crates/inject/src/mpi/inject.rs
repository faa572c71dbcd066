//! The host side of the MPI bind model: the module's MPI libraries and
//! their `DT_NEEDED` closure go into the plan, and what the container-side
//! check needs comes back ([`MpiCheck`]).

use std::collections::{BTreeSet, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::abi::{file_name, is_mpi_name, so_version, AbiMode, MpiCheck, SoVersion, MPI_PREFIXES};
use crate::elf::{self, GlibcVersion};
use crate::error::InjectError;
use crate::host::HostPaths;
use crate::ldcache;
use crate::plan::{Library, Lookup, Plan};

/// A module's `[mpi]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MpiDef {
    /// The host MPI's libraries (`.../libmpi.so.12`, `libmpicxx.so.12`,
    /// `libmpifort.so.12`): injected under their file name and soname.
    pub libraries: Vec<String>,
    /// The version rule.
    #[serde(default)]
    pub abi: AbiMode,
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

fn is_glibc(name: &str) -> bool {
    GLIBC.contains(&name) || name.starts_with("ld-linux")
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
                lookup: Lookup::Path,
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
                        lookup: Lookup::Path,
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
