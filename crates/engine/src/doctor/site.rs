//! The site's checks: the store, the squashfs server, CDI specs and
//! modules, the Slurm plugin.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use berth_config::{Config, SquashfsServer};
use berth_inject::cdi;

use super::Check;

/// The site's checks under `config`.
pub(super) fn checks(config: &Config, root: bool) -> Vec<Check> {
    let (plugin, plugin_in_use) = slurm_plugin();
    let mut out = vec![
        Check::ok(
            "configuration",
            if config.files.is_empty() {
                "no berth.toml read: defaults".to_string()
            } else {
                let files: Vec<String> = config
                    .files
                    .iter()
                    .map(|f| f.display().to_string())
                    .collect();
                format!("read {}", files.join(", "))
            },
        ),
        store(&config.store, plugin_in_use),
    ];
    out.extend(config.shared_stores.iter().map(|s| shared_store(s)));
    if !root {
        out.push(squashfs_server(config.runtime.squashfs_server));
    }
    out.extend(injection(config));
    out.push(plugin);
    out
}

/// The file system type of `path`'s, by its statfs magic, and whether
/// several nodes usually share it.
fn filesystem(path: &Path) -> (String, bool) {
    let Ok(fs) = rustix::fs::statfs(path) else {
        return ("unknown".into(), false);
    };
    // f_type is an i64 here, a u32 or i32 on other architectures.
    #[allow(clippy::unnecessary_cast)]
    let magic = fs.f_type as i64;
    let (name, shared) = match magic {
        0xEF53 => ("ext4", false),
        0x5846_5342 => ("xfs", false),
        0x9123_683E => ("btrfs", false),
        0x2FC1_2FC1 => ("zfs", false),
        0x0102_1994 => ("tmpfs", false),
        0x794C_7630 => ("overlay", false),
        0x6969 => ("nfs", true),
        0x0BD0_0BD0 => ("lustre", true),
        0x4750_4653 => ("gpfs", true),
        0x1983_0326 => ("beegfs", true),
        0x00C3_6400 => ("ceph", true),
        0xFF53_4D42 | 0xFE53_4D42 => ("cifs", true),
        0x6573_5546 => ("fuse", true),
        other => return (format!("type {other:#x}"), true),
    };
    (name.into(), shared)
}

/// The nearest existing directory at or above `path`.
fn existing(path: &Path) -> Option<&Path> {
    path.ancestors().find(|p| p.is_dir())
}

fn store(path: &Path, plugin_in_use: bool) -> Check {
    let name = "store";
    let Some(at) = existing(path) else {
        return Check::fail(
            name,
            format!("{}: no directory above it", path.display()),
            "set store = \"DIR\" in ~/.config/berth/berth.toml",
        );
    };
    let made = at == path;
    let writable = rustix::fs::access(at, rustix::fs::Access::WRITE_OK).is_ok();
    let (fs, shared) = filesystem(at);
    let free = rustix::fs::statvfs(at)
        .map(|v| format!(", {} GiB free", v.f_bavail.saturating_mul(v.f_frsize) >> 30))
        .unwrap_or_default();
    let where_ = if made {
        format!("{} ({fs}{free})", path.display())
    } else {
        format!(
            "{} (not made yet; {} is {fs}{free})",
            path.display(),
            at.display()
        )
    };
    if !writable {
        return Check::fail(
            name,
            format!("{where_}: you cannot write there"),
            "set store = \"DIR\" in ~/.config/berth/berth.toml to a directory of yours, or --store DIR",
        );
    }
    if made {
        if let Ok(m) = std::fs::metadata(path) {
            let uid = rustix::process::getuid().as_raw();
            let mode = m.permissions().mode() & 0o7777;
            if m.uid() != uid || mode & 0o022 != 0 {
                return Check::fail(
                    name,
                    format!(
                        "{where_}: owner uid {}, mode {mode:o}: others could change your images",
                        m.uid()
                    ),
                    format!(
                        "chmod go-w {} (it must be yours and writable by you only)",
                        path.display()
                    ),
                );
            }
        }
    }
    if plugin_in_use && !shared {
        return Check::warn(
            name,
            format!("{where_}: a node-local file system, and the Slurm plugin is installed"),
            "the plugin pulls at submission into this store and the tasks run that image \
             by its id, which nodes that do not see this file system cannot find: put the \
             store on the shared file system (store = \"/scratch/${USER}/berth\" in berth.toml)",
        );
    }
    Check::ok(name, where_)
}

fn shared_store(path: &Path) -> Check {
    let name = "shared store";
    match std::fs::metadata(path) {
        Err(e) => Check::warn(
            name,
            format!("{}: {e}", path.display()),
            "remove it from shared_stores, or ask who keeps it",
        ),
        // The rule runs apply: such a store is skipped, with a warning.
        Ok(_) => match berth_image::store::distrust_shared(path) {
            Some(why) => Check::warn(
                name,
                format!(
                    "{}: it {why}: berth does not use it (whoever can write it could swap its images)",
                    path.display()
                ),
                match why.starts_with("belongs") {
                    // Root's rule: root uses only root's stores.
                    true => format!(
                        "as root, berth uses only stores root owns: make {} root's, or leave it out of root's shared_stores",
                        path.display()
                    ),
                    false => format!(
                        "chmod go-w {0} {0}/images, as the store's owner (a shared store is written by its keepers only)",
                        path.display()
                    ),
                },
            ),
            None => Check::ok(name, format!("{} ({})", path.display(), filesystem(path).0)),
        },
    }
}

fn squashfs_server(server: SquashfsServer) -> Check {
    let name = "squashfs server";
    match server {
        SquashfsServer::Berth => Check::ok(name, "berth's own (berth __squashfs)"),
        SquashfsServer::SquashfuseLl => {
            let program = std::env::var_os("BERTH_SQUASHFUSE")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("squashfuse_ll"));
            let found = if program.is_absolute() {
                program.is_file()
            } else {
                std::env::var_os("PATH")
                    .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(&program).is_file()))
            };
            if found {
                Check::ok(
                    name,
                    format!("{} (runtime.squashfs_server)", program.display()),
                )
            } else {
                Check::fail(
                    name,
                    format!("{} is not installed", program.display()),
                    "install squashfuse, or set runtime.squashfs_server = \"berth\"",
                )
            }
        }
    }
}

/// CDI specs and modules.
fn injection(config: &Config) -> Vec<Check> {
    let site = match crate::inject::site(config) {
        Ok(s) => s,
        Err(e) => {
            return vec![Check::fail(
                "modules",
                e.to_string(),
                "correct the module file named (berth modules lists what parses)",
            )]
        }
    };
    let registry = cdi::Registry::load(&site.host.cdi_spec_dirs);
    let dirs: Vec<String> = site
        .host
        .cdi_spec_dirs
        .iter()
        .map(|d| d.display().to_string())
        .collect();
    let mut out = vec![if registry.errors().is_empty() {
        Check::ok(
            "CDI specs",
            format!(
                "{} spec files, {} devices in {}",
                registry.spec_count(),
                registry.device_names().len(),
                dirs.join(", ")
            ),
        )
    } else {
        let broken: Vec<String> = registry
            .errors()
            .iter()
            .map(|(f, e)| format!("{}: {e}", f.display()))
            .collect();
        Check::warn(
            "CDI specs",
            broken.join("; "),
            "regenerate or remove the broken specs (nvidia-ctk cdi generate for NVIDIA's); runs that do not use them go on",
        )
    }];
    out.push(Check::ok(
        "modules",
        format!(
            "{} modules ({})",
            site.modules.len(),
            site.host.modules_dir.display()
        ),
    ));
    out
}

/// slurm.conf: SLURM_CONF, else /etc/slurm/slurm.conf.
fn slurm_conf() -> Option<PathBuf> {
    std::env::var_os("SLURM_CONF")
        .map(PathBuf::from)
        .or_else(|| Some(PathBuf::from("/etc/slurm/slurm.conf")))
        .filter(|p| p.is_file())
}

/// The plugin lines (`required|optional PATH ...`) of a plugstack file and
/// the files it includes.
fn plugstack_plugins(file: &Path, depth: u32) -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string(file) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.starts_with('#')) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["include", glob, ..] if depth < 4 => {
                let (dir, pattern) = match glob.rsplit_once('/') {
                    Some((d, p)) => (PathBuf::from(d), p.to_string()),
                    None => (
                        file.parent().unwrap_or(Path::new("/")).to_path_buf(),
                        glob.to_string(),
                    ),
                };
                let (prefix, suffix) = pattern.split_once('*').unwrap_or((&pattern, ""));
                let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| {
                        p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                            n.starts_with(prefix)
                                && n.ends_with(suffix)
                                && (pattern.contains('*') || n == pattern)
                        })
                    })
                    .collect();
                files.sort();
                for f in files {
                    out.extend(plugstack_plugins(&f, depth + 1));
                }
            }
            ["required" | "optional", path, ..] => out.push(PathBuf::from(path)),
            _ => {}
        }
    }
    out
}

/// The plugin's check, and whether berth's plugin is set up here.
fn slurm_plugin() -> (Check, bool) {
    let name = "Slurm plugin";
    let Some(conf) = slurm_conf() else {
        let none = Check::ok(
            name,
            "no Slurm configuration here (SLURM_CONF, /etc/slurm/slurm.conf)",
        );
        return (none, false);
    };
    let text = std::fs::read_to_string(&conf).unwrap_or_default();
    let plugstack = text
        .lines()
        .filter_map(|l| l.trim().split_once('='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("PlugStackConfig"))
        .map(|(_, v)| PathBuf::from(v.trim()))
        .unwrap_or_else(|| conf.with_file_name("plugstack.conf"));
    let ours = plugstack_plugins(&plugstack, 0).into_iter().find(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.contains("berth"))
    });
    let slurm = std::process::Command::new("srun")
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "srun not found".into());
    let check = match &ours {
        None => Check::ok(name, format!("not in {} ({slurm})", plugstack.display())),
        Some(p) if p.is_absolute() && !p.is_file() => Check::fail(
            name,
            format!(
                "{} names {}, which is missing ({slurm})",
                plugstack.display(),
                p.display()
            ),
            "install berth's plugin there (libberth_spank.so) or correct plugstack.conf; \
             slurmd reads it when it starts",
        ),
        Some(p) => Check::ok(
            name,
            format!(
                "berth's, {} in {} ({slurm})",
                p.display(),
                plugstack.display()
            ),
        ),
    };
    (check, ours.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugstack_lines_and_includes() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("plugstack.conf.d")).unwrap();
        std::fs::write(
            d.path().join("plugstack.conf"),
            format!(
                "# comment\noptional /usr/lib/slurm/other.so\ninclude {}/plugstack.conf.d/*.conf\n",
                d.path().display()
            ),
        )
        .unwrap();
        std::fs::write(
            d.path().join("plugstack.conf.d/berth.conf"),
            "required /usr/lib/slurm/libberth_spank.so berth=/usr/bin/berth\n",
        )
        .unwrap();
        std::fs::write(
            d.path().join("plugstack.conf.d/x.txt"),
            "required /nope.so\n",
        )
        .unwrap();
        let found = plugstack_plugins(&d.path().join("plugstack.conf"), 0);
        assert_eq!(
            found,
            vec![
                PathBuf::from("/usr/lib/slurm/other.so"),
                PathBuf::from("/usr/lib/slurm/libberth_spank.so")
            ]
        );
    }

    #[test]
    fn a_store_others_can_write_fails() {
        let d = tempfile::tempdir().unwrap();
        let s = d.path().join("store");
        std::fs::create_dir(&s).unwrap();
        assert_eq!(store(&s, false).status, super::super::Status::Ok);
        std::fs::set_permissions(&s, std::fs::Permissions::from_mode(0o777)).unwrap();
        let c = store(&s, false);
        assert_eq!(c.status, super::super::Status::Fail, "{c:?}");
        assert!(c.detail.contains("others could change"), "{c:?}");
        // Not made yet: the directory above is what counts.
        assert_eq!(
            store(&d.path().join("new/store"), false).status,
            super::super::Status::Ok
        );
    }
}
