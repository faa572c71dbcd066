//! The node's checks: kernel, namespaces, ids, FUSE, overlay, seccomp,
//! squashfs tools.

use std::path::{Path, PathBuf};

use berth_config::{ImageMount, RootOverlay};
use berth_runtime::probe;

use super::Check;

/// `uname -r`.
pub(super) fn kernel_release() -> String {
    rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned()
}

/// The node's checks, for real root (`root`) or a user whose runs get
/// images as `image_mount` says and roots as `overlay` says.
pub(super) fn checks(root: bool, image_mount: ImageMount, overlay: RootOverlay) -> Vec<Check> {
    let mut out = vec![kernel(&kernel_release())];
    if root {
        out.push(Check::ok(
            "user namespaces",
            "not needed: as root berth mounts images with the kernel and runs without one",
        ));
    } else {
        let userns = user_namespaces();
        let works = userns.status != super::Status::Fail;
        out.push(userns);
        out.push(subordinate_ids());
        let unpack = image_mount == ImageMount::Unpack;
        let fuse = [
            dev_fuse(),
            probed(
                "FUSE in a user namespace",
                if works {
                    probe::fuse_in_user_namespace()
                } else {
                    Err("no user namespace".into())
                },
                "images mount here as they will for your runs",
                "rootless runs mount images through FUSE: /dev/fuse must open (above) and \
                 the kernel must allow FUSE mounts in user namespaces (4.18 and later)",
            ),
        ];
        for mut c in fuse {
            if c.status == super::Status::Fail && image_mount == ImageMount::Auto {
                // Not needed: the keeper unpacks instead.
                c.status = super::Status::Warn;
                c.detail.push_str(
                    "; runs unpack images instead (image_mount = \"auto\"): a slower first start, \
                     and disk space in $TMPDIR or /var/tmp",
                );
            } else if unpack && c.status == super::Status::Fail {
                c = Check::ok(
                    c.name,
                    format!("not used (image_mount = \"unpack\"): {}", c.detail),
                );
            }
            out.push(c);
        }
        if works {
            let mut c = probed(
                "overlay in a user namespace",
                probe::overlay_in_user_namespace(),
                "--writable, --overlay, --save and builds can use overlayfs",
                "the kernel (before 5.11, or a distribution that turned it off) refuses \
                 overlayfs in user namespaces: with overlay = \"auto\" read-only runs get \
                 binds-only roots and writable ones (--writable, --overlay, --save, --name) \
                 fuse-overlayfs where it is installed (with \"kernel\" they fail), and builds \
                 unpack their base; ask for a 5.11 or later kernel",
            );
            let kernel_overlay = c.status != super::Status::Fail;
            if overlay == RootOverlay::None {
                c = Check::ok(
                    c.name,
                    "not used (overlay = \"none\"): read-only runs get binds-only roots, and \
                     --writable, --overlay, --save and --name are refused",
                );
            } else if overlay == RootOverlay::Fuse {
                c = Check::ok(
                    c.name,
                    "not used (overlay = \"fuse\"): fuse-overlayfs serves it",
                );
            } else if c.status == super::Status::Fail && overlay == RootOverlay::Auto {
                // Read-only runs do without it, writable ones use fuse-overlayfs.
                c.status = super::Status::Warn;
            }
            out.push(c);
            out.push(fuse_overlayfs(overlay, kernel_overlay));
        }
    }
    out.push(seccomp());
    out.push(squashfs_tools());
    out
}

/// `major.minor` of a release string.
fn version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(['.', '-']);
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

fn kernel(release: &str) -> Check {
    let cgroup = if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        "cgroup v2"
    } else {
        "cgroup v1"
    };
    let Some(v) = version(release) else {
        return Check::warn(
            "kernel",
            format!("{release}: version not understood; {cgroup}"),
            "berth is tested on Linux 5.12 and later",
        );
    };
    let missing: Vec<&str> = [
        (
            (5, 6),
            "openat2 (paths inside images are resolved a component at a time instead)",
        ),
        ((5, 11), "overlayfs in user namespaces (see below)"),
        (
            (5, 12),
            "mount_setattr (read-only binds are remounted one by one instead)",
        ),
    ]
    .iter()
    .filter(|(since, _)| v < *since)
    .map(|(_, what)| *what)
    .collect();
    if missing.is_empty() {
        Check::ok(
            "kernel",
            format!("{release}: openat2, mount_setattr, overlayfs in user namespaces; {cgroup}"),
        )
    } else {
        Check::warn(
            "kernel",
            format!("{release} ({cgroup}) lacks {}", missing.join("; ")),
            "berth works with these fallbacks; a 5.12 or later kernel needs none",
        )
    }
}

/// A sysctl's value, where the file exists.
fn sysctl(path: &str) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn user_namespaces() -> Check {
    let name = "user namespaces";
    let max = sysctl("/proc/sys/user/max_user_namespaces");
    let limits = max
        .map(|m| format!(" (user.max_user_namespaces {m})"))
        .unwrap_or_default();
    match probe::user_namespace() {
        Ok(()) => Check::ok(name, format!("you can create them{limits}")),
        Err(e) => {
            let why = if max == Some(0) {
                "user.max_user_namespaces is 0".to_string()
            } else if sysctl("/proc/sys/kernel/unprivileged_userns_clone") == Some(0) {
                "kernel.unprivileged_userns_clone is 0".to_string()
            } else if sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == Some(1) {
                "AppArmor restricts unprivileged user namespaces".to_string()
            } else {
                e
            };
            Check::fail(
                name,
                format!("{why}: rootless runs and builds cannot start"),
                "ask your admin to allow unprivileged user namespaces \
                 (sysctl user.max_user_namespaces=15000, kernel.unprivileged_userns_clone=1, \
                 or an AppArmor profile for berth)",
            )
        }
    }
}

fn subordinate_ids() -> Check {
    let name = "subordinate ids";
    if berth_runtime::idmap::has_subordinate_ranges() {
        Check::ok(
            name,
            "a range in /etc/subuid and /etc/subgid, and newuidmap/newgidmap: --fakeroot and \
             builds keep files' owners",
        )
    } else {
        Check::warn(
            name,
            "no range for you in /etc/subuid and /etc/subgid (or no newuidmap/newgidmap): \
             --fakeroot and builds emulate root (chown and setuid succeed without effect; \
             installed files are root's)",
            "for real owners, ask your admin for a range (usermod --add-subuids \
             START-END --add-subgids START-END USER) and the uidmap package",
        )
    }
}

fn dev_fuse() -> Check {
    let name = "/dev/fuse";
    match std::fs::File::options()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        Ok(_) => Check::ok(name, "opens read-write"),
        Err(e) => {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata("/dev/fuse")
                .map(|m| format!("mode {:o}", m.permissions().mode() & 0o7777))
                .unwrap_or_else(|_| "missing".into());
            Check::fail(
                name,
                format!("{mode}, cannot open it ({e}): rootless runs cannot mount images"),
                "ask your admin: modprobe fuse and chmod 0666 /dev/fuse (as distributions \
                 ship it; on nodes without udev, at boot)",
            )
        }
    }
}

fn probed(name: &'static str, outcome: probe::Outcome, good: &str, fix: &str) -> Check {
    match outcome {
        Ok(()) => Check::ok(name, good),
        Err(e) => Check::fail(name, e, fix),
    }
}

fn seccomp() -> Check {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if status.lines().any(|l| l.starts_with("Seccomp_filters:")) {
        Check::ok(
            "seccomp",
            "filters load: containers are confined and root can be emulated",
        )
    } else {
        Check::fail(
            "seccomp",
            "the kernel has no seccomp filters (CONFIG_SECCOMP_FILTER)",
            "berth confines every container with a seccomp filter: use a kernel built with it",
        )
    }
}

/// Where `program` is on PATH (or in /usr/bin, /usr/sbin).
fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")])
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// fuse-overlayfs: needed under overlay = "fuse", and for writable runs
/// where the kernel refuses overlayfs.
fn fuse_overlayfs(overlay: RootOverlay, kernel_overlay: bool) -> Check {
    use berth_runtime::rootfs::fuse_overlay;
    let name = "fuse-overlayfs";
    let needed = overlay == RootOverlay::Fuse || (overlay == RootOverlay::Auto && !kernel_overlay);
    let unused = match overlay {
        RootOverlay::Kernel => "not used (overlay = \"kernel\")",
        RootOverlay::None => "not used (overlay = \"none\")",
        _ => "not needed here (the kernel's overlayfs works)",
    };
    let Some(p) = fuse_overlay::program() else {
        return match overlay {
            RootOverlay::Fuse => Check::fail(
                name,
                "not found, and overlay = \"fuse\" needs it for every container",
                fuse_overlay::INSTALL_HINT,
            ),
            _ if needed => Check::warn(
                name,
                "not found: writable runs (--writable, --overlay, --save, --name) are refused",
                fuse_overlay::INSTALL_HINT,
            ),
            _ => Check::ok(name, format!("not installed; {unused}")),
        };
    };
    if !needed {
        return Check::ok(name, format!("{}: {unused}", p.display()));
    }
    // berth hands it a mounted connection (/dev/fd/N): libfuse 3.3 or later.
    let version = std::process::Command::new(&p)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output()
        .ok()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
        })
        .and_then(|text| libfuse_version(&text));
    match version {
        Some(v) if v >= (3, 3) => Check::ok(
            name,
            format!(
                "{} (libfuse {}.{}): serves the writable layer of containers",
                p.display(),
                v.0,
                v.1
            ),
        ),
        Some(v) => Check::fail(
            name,
            format!(
                "{} is built with libfuse {}.{}: berth hands it a mounted connection, which \
                 needs libfuse 3.3 or later",
                p.display(),
                v.0,
                v.1
            ),
            "install a fuse-overlayfs built with libfuse 3.3 or later, or name one in BERTH_FUSE_OVERLAYFS",
        ),
        None => Check::warn(
            name,
            format!("{}: --version does not say its libfuse", p.display()),
            "check that it runs (it needs libfuse 3.3 or later)",
        ),
    }
}

/// `(major, minor)` of the "FUSE library version X.Y.Z" line of
/// fuse-overlayfs's `--version`.
fn libfuse_version(text: &str) -> Option<(u32, u32)> {
    let v = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("FUSE library version "))?;
    version(v.trim())
}

fn squashfs_tools() -> Check {
    let name = "squashfs tools";
    let missing: Vec<&str> = ["tar2sqfs", "sqfs2tar", "rdsquashfs"]
        .into_iter()
        .filter(|p| on_path(p).is_none())
        .collect();
    if missing.is_empty() {
        Check::ok(
            name,
            "tar2sqfs, sqfs2tar and rdsquashfs (squashfs-tools-ng) are on PATH",
        )
    } else {
        Check::fail(
            name,
            format!(
                "{} not found: pulls, imports, builds and --save use them",
                missing.join(", ")
            ),
            "install squashfs-tools-ng (apt-get install squashfs-tools-ng; dnf install squashfs-tools-ng)",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuse_overlayfs_says_its_libfuse() {
        let text = "fusermount3 version: 3.14.0\nfuse-overlayfs: version 1.10\n\
                    FUSE library version 3.14.0\nusing FUSE kernel interface version 7.31\n";
        assert_eq!(libfuse_version(text), Some((3, 14)));
        assert_eq!(libfuse_version("FUSE library version 3.2.1"), Some((3, 2)));
        assert_eq!(libfuse_version("fuse-overlayfs: version 1.10"), None);
    }

    #[test]
    fn kernel_versions_and_their_fallbacks() {
        assert_eq!(version("6.8.0-45-generic"), Some((6, 8)));
        assert_eq!(version("4.18.0-553.el8_10.x86_64"), Some((4, 18)));
        assert_eq!(kernel("6.1.0").status, super::super::Status::Ok);
        let old = kernel("4.18.0-553.el8_10.x86_64");
        assert_eq!(old.status, super::super::Status::Warn);
        assert!(old.detail.contains("openat2") && old.detail.contains("mount_setattr"));
        let mid = kernel("5.11.0");
        assert!(!mid.detail.contains("openat2") && mid.detail.contains("mount_setattr"));
    }
}
