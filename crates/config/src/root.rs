//! What berth takes from its environment when it runs as real root.
//!
//! Under `sudo -E` or `su` without `-`, root's environment is a user's:
//! `XDG_CONFIG_HOME` or `BERTH_SYSTEM_CONFIG` would make root load that
//! user's hooks and modules (and run them as root), `XDG_RUNTIME_DIR` or
//! `TMPDIR` would put root's state in a directory the user can swap, and
//! `PATH` would choose root's programs. As root berth therefore drops
//! those variables, takes `HOME` from the user database and a fixed
//! `PATH`, and keeps `BERTH_SYSTEM_CONFIG` only for a file that
//! [`root_may_trust`] (an admin's own test config).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Variables a root berth never takes from its caller.
pub const IGNORED_AS_ROOT: &[&str] = &[
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_RUNTIME_DIR",
    "XDG_CACHE_HOME",
    "TMPDIR",
    "BERTH_SQUASHFUSE",
    "BERTH_TAR2SQFS",
    "BERTH_NO_SUBIDS",
    "BERTH_FUSE_OVERLAYFS",
    "BERTH_FAULT_REFUSE_OVERLAY",
];

/// Whether this process is real root: effective uid 0 in the initial user
/// namespace (not root of a user namespace, as berth's own keeper and
/// holders are in theirs). Read once from /proc.
pub fn is_real_root() -> bool {
    static REAL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *REAL.get_or_init(|| {
        let euid0 = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Uid:"))
                    .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
            })
            .unwrap_or(false);
        let initial_ns = std::fs::read_to_string("/proc/self/uid_map")
            .is_ok_and(|m| m.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"]);
        euid0 && initial_ns
    })
}

/// The `PATH` a root berth uses.
pub const ROOT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Whether root may act on `path`: it and every directory above it belong
/// to root and nobody else can write them (a root-owned sticky directory
/// such as /tmp excepted, where others cannot rename root's entries).
/// Symlinks are followed first; the checked path is the real one.
pub fn root_may_trust(path: &Path) -> Result<(), String> {
    let real = path
        .canonicalize()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut at = PathBuf::from("/");
    let check = |p: &Path, last: bool| -> Result<(), String> {
        let m = std::fs::symlink_metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
        let sticky_dir = m.is_dir() && m.mode() & 0o1000 != 0 && !last;
        if m.uid() != 0 {
            return Err(format!(
                "{} belongs to uid {}, not root",
                p.display(),
                m.uid()
            ));
        }
        if m.mode() & 0o022 != 0 && !sticky_dir {
            return Err(format!(
                "{} is writable by others (mode {:o})",
                p.display(),
                m.mode() & 0o7777
            ));
        }
        Ok(())
    };
    check(&at, false)?;
    let parts: Vec<_> = real.components().skip(1).collect();
    for (i, c) in parts.iter().enumerate() {
        at.push(c);
        check(&at, i + 1 == parts.len())?;
    }
    Ok(())
}

/// Makes the process environment one root can trust (see the module
/// text): drops [`IGNORED_AS_ROOT`], sets `PATH` and `HOME`, and drops a
/// `BERTH_SYSTEM_CONFIG` that root may not trust. Returns a warning for
/// each dropped setting the caller gave. Call it first in `main`, before
/// any thread starts.
pub fn scrub_environment(root_home: Option<&Path>) -> Vec<String> {
    let mut warnings = Vec::new();
    for var in IGNORED_AS_ROOT {
        if std::env::var_os(var).is_some_and(|v| !v.is_empty()) {
            warnings.push(format!(
                "running as root: ignoring {var} from the environment"
            ));
        }
        std::env::remove_var(var);
    }
    if let Some(conf) = std::env::var_os("BERTH_SYSTEM_CONFIG").map(PathBuf::from) {
        // Its directory holds modules.d: that must be root's too; a file
        // that does not exist reads as an empty config.
        let dir = conf.parent().filter(|d| !d.as_os_str().is_empty());
        let checked = dir
            .map_or(Err("not an absolute path".to_string()), root_may_trust)
            .and_then(|()| match conf.exists() {
                true => root_may_trust(&conf),
                false => Ok(()),
            });
        if let Err(why) = checked {
            warnings.push(format!(
                "running as root: ignoring BERTH_SYSTEM_CONFIG={} ({why}); root reads only root-owned configs that nobody else can write",
                conf.display()
            ));
            std::env::remove_var("BERTH_SYSTEM_CONFIG");
        }
    }
    std::env::set_var("PATH", ROOT_PATH);
    match root_home {
        Some(h) => std::env::set_var("HOME", h),
        None => std::env::remove_var("HOME"),
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_own_system_paths_are_trusted() {
        // Running as root or not, /etc and /usr/bin belong to root here.
        assert!(root_may_trust(Path::new("/usr/bin")).is_ok());
    }

    #[test]
    fn a_path_below_a_writable_directory_is_not() {
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(
            d.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .unwrap();
        let f = d.path().join("berth.toml");
        std::fs::write(&f, "").unwrap();
        assert!(root_may_trust(&f).is_err());
    }
}
