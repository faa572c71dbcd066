//! Mounting an image's squashfs file read-only: through FUSE (berth's own
//! server, `berth __squashfs`, or `squashfuse_ll`, serving a connection
//! berth mounted) in a user namespace, or the kernel's squashfs driver on a
//! loop device for real root. The file goes by descriptor: on a parallel
//! filesystem every path walk costs metadata requests, and the file is
//! already open.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use berth_config::SquashfsServer;

use crate::error::{Error, Result};
use crate::sys::{self, Kernel, MountFlags};

mod read_profile;

/// The flags of every image mount.
const IMAGE_FLAGS: MountFlags = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV;

/// The FUSE mount options for connection `fd`, owned by `uid`/`gid` of the
/// current namespace.
pub fn fuse_options(fd: i32, uid: u32, gid: u32) -> String {
    format!("fd={fd},rootmode=40000,user_id={uid},group_id={gid},allow_other")
}

/// The squashfs to serve: the open file, where the squashfs starts in it,
/// and the root of its verity table when it has one.
#[derive(Debug, Clone, Copy)]
pub struct ServedImage<'a> {
    /// The image file.
    pub file: &'a File,
    /// Where the squashfs starts.
    pub offset: u64,
    /// The verity table's root: berth's server then checks every read.
    pub verity: Option<&'a str>,
    /// The image's read profile on this node (berth's server): what the
    /// last start read, decompressed ahead, then what this start reads.
    pub profile: Option<&'a Path>,
}

/// Mounts the squashfs of `image` read-only on `target` through FUSE, for
/// the namespace's `uid`/`gid`, served by `server`; returns the server's
/// process. Needs `CAP_SYS_ADMIN` in the current user namespace (the
/// keeper's, or a build worker's).
pub fn mount_fuse(
    k: &dyn Kernel,
    image: ServedImage<'_>,
    target: &Path,
    (uid, gid): (u32, u32),
    server: SquashfsServer,
) -> Result<std::process::Child> {
    let fuse = File::options()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(|e| {
            let hint = match e.kind() {
                std::io::ErrorKind::PermissionDenied => {
                    "; /dev/fuse must be mode 0666 (as distributions ship it): ask your admin"
                }
                std::io::ErrorKind::NotFound => "; load the fuse kernel module (modprobe fuse)",
                _ => "",
            };
            Error::Mount(format!("cannot open /dev/fuse: {e}{hint}"))
        })?;
    let opts = fuse_options(fuse.as_raw_fd(), uid, gid);
    k.mount(
        Some(Path::new("berth-squashfs")),
        target,
        Some(match server {
            SquashfsServer::Berth => "fuse.berth-squashfs",
            SquashfsServer::SquashfuseLl => "fuse.squashfuse_ll",
        }),
        IMAGE_FLAGS,
        Some(&opts),
    )
    .map_err(|e| Error::sys("mount the image (FUSE) on", Some(target.into()), e))?;
    let (image_file, offset) = (image.file, image.offset);
    // The server takes the already mounted connection and the image as
    // inherited descriptors.
    for f in [&fuse, image_file] {
        rustix::io::fcntl_setfd(f, rustix::io::FdFlags::empty())
            .map_err(|e| Error::sys("hand on a descriptor to the squashfs server", None, e))?;
    }
    let (image_fd, fuse_fd) = (image_file.as_raw_fd(), fuse.as_raw_fd());
    let profile = match (server, image.profile) {
        (SquashfsServer::Berth, Some(path)) => read_profile::open(path),
        _ => None,
    };
    // berth itself, by descriptor: the server's own id (below) may not be
    // allowed to walk to it (a binary under a private home). Open until the
    // server has started.
    let mut berth = None;
    let (program, mut cmd) = match server {
        SquashfsServer::Berth => {
            let exe = File::open("/proc/self/exe")
                .map_err(|e| Error::Mount(format!("cannot open berth's own binary: {e}")))?;
            let exe = sys::fd_path(berth.insert(exe));
            let mut cmd = Command::new(&exe);
            std::os::unix::process::CommandExt::arg0(&mut cmd, "berth-squashfs");
            cmd.arg("__squashfs")
                .arg(format!("fd:{image_fd}"))
                .arg(format!("fd:{fuse_fd}"));
            cmd.arg(offset.to_string());
            if let Some(root) = image.verity {
                cmd.arg("--verity").arg(root);
            }
            if let Some(p) = &profile {
                read_profile::add_args(&mut cmd, p);
            }
            (exe, cmd)
        }
        SquashfsServer::SquashfuseLl => {
            let exe = squashfuse_path();
            let mut cmd = Command::new(&exe);
            cmd.arg("-f");
            if offset > 0 {
                cmd.arg("-o").arg(format!("offset={offset}"));
            }
            cmd.arg(format!("/dev/fd/{image_fd}"))
                .arg(format!("/dev/fd/{fuse_fd}"));
            (exe, cmd)
        }
    };
    // If the keeper dies, however, the server must go too: it lives in the
    // keeper's mount namespace and would otherwise keep it (and itself) alive.
    sys::process::kill_with_parent(&mut cmd, rustix::process::Signal::TERM);
    sys::process::exec_without_root_powers(&mut cmd);
    // With a subordinate id range, the server runs as ids of its own: the
    // user's containers (the user's id) can then neither trace it nor
    // signal it.
    if let Some((uid, gid)) = crate::idmap::spare_ids() {
        use std::os::unix::process::CommandExt;
        cmd.uid(uid).gid(gid);
    }
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| {
            let hint = match server {
                SquashfsServer::Berth => "",
                SquashfsServer::SquashfuseLl => ": install squashfuse (Debian/Ubuntu: apt-get install squashfuse), set BERTH_SQUASHFUSE, or use berth's own server ([runtime] squashfs_server = \"berth\")",
            };
            Error::Mount(format!("cannot start {} ({e}){hint}", program.display()))
        });
    drop(berth);
    drop(profile);
    // Never into anything else berth starts.
    let _ = rustix::io::fcntl_setfd(image_file, rustix::io::FdFlags::CLOEXEC);
    // Our copy of the connection goes, so a dead server aborts it instead
    // of hanging every request.
    drop(fuse);
    child
}

/// Waits until the FUSE server of the mount at `point` answers (the first
/// request blocks until it does, or fails at once if it died): the mount
/// is usable when this returns. `what` names the server in the error.
pub fn await_server(point: &Path, what: &str) -> Result<()> {
    std::fs::metadata(point.join("."))
        .map(drop)
        .map_err(|e| Error::Mount(format!("{what} did not come up: {e}")))
}

/// The squashfs server: `BERTH_SQUASHFUSE`, else `squashfuse_ll` on PATH.
fn squashfuse_path() -> PathBuf {
    std::env::var_os("BERTH_SQUASHFUSE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("squashfuse_ll"))
}

/// Real root: the kernel's squashfs driver mounts the open image (its
/// squashfs starting at byte `offset`) through a loop device configured
/// from its descriptor. No path is walked again and no program is looked
/// up, so neither the caller's cwd (a planted `fd:3`) nor its `PATH`
/// chooses what is mounted.
pub fn mount_kernel_squashfs(
    k: &dyn Kernel,
    image: &File,
    offset: u64,
    target: &Path,
) -> Result<()> {
    let (dev, _attached) = sys::loopdev::attach_loop_readonly(image, offset)
        .map_err(|e| Error::Mount(format!("cannot attach the image to a loop device: {e}")))?;
    k.mount(Some(&dev), target, Some("squashfs"), IMAGE_FLAGS, None)
        .map_err(|e| {
            Error::Mount(format!(
                "mounting the image from {} failed: {e}",
                dev.display()
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuse_options_name_the_connection_and_its_owner() {
        assert_eq!(
            fuse_options(7, 0, 0),
            "fd=7,rootmode=40000,user_id=0,group_id=0,allow_other"
        );
    }
}
