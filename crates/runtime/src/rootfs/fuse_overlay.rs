//! fuse-overlayfs: the container's overlay served from user space, where
//! the kernel refuses overlayfs in a user namespace (before Linux 5.11,
//! or turned off) and the run needs a writable layer, or where the site
//! chose it (`[runtime] overlay = "fuse"`).
//!
//! berth mounts the FUSE connection itself (as it mounts images), with the
//! root's flags and `default_permissions`, then starts fuse-overlayfs on
//! that connection (`/dev/fd/N`, which libfuse 3.3 and later take as an
//! already mounted one). So the mount exists, with berth's flags, before
//! the server runs, and fuse-overlayfs needs neither fusermount3 nor the
//! right to mount. The server runs in a mount namespace of its own (a copy
//! of the container's before `pivot_root`, without its own mount), in a
//! session of its own outside the container's PID namespace, a child of no
//! process of the container: it serves as long as a mount namespace holds
//! the mount (the container's, a shared container's joined ones, runs
//! copied from a keeper's prepared root) and leaves when the last goes
//! (the connection then reads ENODEV). No process of the container waits
//! for it or gets its exit.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::{Error, Result};
use crate::sys::{self, Kernel};

/// The variable that names the fuse-overlayfs program (else `PATH`'s).
pub const PROGRAM_ENV: &str = "BERTH_FUSE_OVERLAYFS";

/// The fuse-overlayfs program: [`PROGRAM_ENV`], else the first
/// `fuse-overlayfs` on `PATH`; `None` when there is none.
pub fn program() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(PROGRAM_ENV) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join("fuse-overlayfs"))
        .find(|p| p.is_file())
}

/// What to install where fuse-overlayfs is missing.
pub const INSTALL_HINT: &str = "install fuse-overlayfs (Debian/Ubuntu: apt-get install \
     fuse-overlayfs; RHEL: dnf install fuse-overlayfs) or name it in BERTH_FUSE_OVERLAYFS";

/// fuse-overlayfs's options from the kernel overlay's (`lowerdir`,
/// `upperdir`, `workdir`): the kernel's own (`userxattr`) dropped.
pub(super) fn server_options(kernel_options: &str) -> String {
    kernel_options
        .split(',')
        .filter(|o| {
            ["lowerdir=", "upperdir=", "workdir="]
                .iter()
                .any(|k| o.starts_with(k))
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Mounts the overlay `options` (the kernel overlay's) on `root` through
/// fuse-overlayfs, its messages kept in `log`, and waits until it answers.
pub(super) fn mount(
    k: &dyn Kernel,
    options: &str,
    root: &Path,
    flags: sys::MountFlags,
    log: &Path,
) -> Result<()> {
    let program = program().ok_or_else(|| {
        Error::Mount(format!(
            "fuse-overlayfs is not installed, and this run needs it: {INSTALL_HINT}"
        ))
    })?;
    let fuse = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open("/dev/fuse")
        .map_err(|e| Error::Mount(format!("cannot open /dev/fuse for fuse-overlayfs: {e}")))?;
    let (uid, gid) = (
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw(),
    );
    let opts = format!(
        "{},default_permissions",
        crate::image_mount::fuse_options(fuse.as_raw_fd(), uid, gid)
    );
    k.mount(
        Some(Path::new("fuse-overlayfs")),
        root,
        Some("fuse.fuse-overlayfs"),
        flags,
        Some(&opts),
    )
    .map_err(|e| Error::sys("mount fuse-overlayfs on", Some(root.into()), e))?;
    let log_file = File::create(log).map_err(|e| Error::io("create", log, e))?;
    let mounted = std::ffi::CString::new(root.as_os_str().as_encoded_bytes())
        .map_err(|_| Error::Mount(format!("{} holds a NUL byte", root.display())))?;
    // Without -f, fuse-overlayfs leaves its first process once it serves
    // (libfuse's fuse_daemonize): when that exits, the server runs, in a
    // session of its own and a child of no process of the container.
    let mut cmd = Command::new(&program);
    cmd.arg("-o")
        .arg(server_options(options))
        .arg(format!("/dev/fd/{}", fuse.as_raw_fd()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file);
    sys::process::serve_from_own_mount_namespace(&mut cmd, mounted, fuse.as_raw_fd());
    let status = cmd.status();
    // Our copy of the connection goes, so a dead server aborts it instead
    // of hanging every request.
    drop(fuse);
    let said = || {
        let said = std::fs::read_to_string(log).unwrap_or_default();
        let said: Vec<&str> = said
            .lines()
            .filter(|l| !l.contains("unknown argument ignored"))
            .collect();
        match said.is_empty() {
            true => String::new(),
            false => format!(": {}", said.join("; ")),
        }
    };
    let status = status.map_err(|e| {
        Error::Mount(format!(
            "cannot start {} ({e}): {INSTALL_HINT}",
            program.display()
        ))
    })?;
    if !status.success() {
        return Err(Error::Mount(format!(
            "{} could not serve the container's root ({status}){}",
            program.display(),
            said()
        )));
    }
    crate::image_mount::await_server(root, "fuse-overlayfs")
        .map_err(|e| Error::Mount(format!("{e}{}", said())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_gets_the_layers_without_the_kernels_options() {
        assert_eq!(
            server_options("lowerdir=/h:/i,upperdir=/s/upper,workdir=/s/work,userxattr"),
            "lowerdir=/h:/i,upperdir=/s/upper,workdir=/s/work"
        );
    }
}
