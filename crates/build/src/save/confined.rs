//! Reading a container's changes (its overlay's upper directory) while the
//! container, or another of the user's, may still change them: a live
//! commit. The save's worker sees the host's files with the user's ids and
//! the walk follows a path's middle parts, so the walk runs in a forked
//! child confined to the layer: a container that swaps a directory of its
//! layer for a symlink meanwhile reaches only its own layer.
//!
//! A `chroot` alone can be left by a walk that stands in a directory
//! someone moved out of the layer meanwhile and then meets a symlink's
//! `..`: another container of the user's that has the store bound could do
//! that to a named container's layer. So the child's root is a bind mount
//! of the layer, in a mount namespace of its own: the kernel refuses a
//! `..` out of a directory that is no longer below a bind mount's root
//! (`path_connected`, Linux 4.3). The layer is never looked up by path
//! again: the worker makes it its working directory before it enters its
//! namespaces (`unshare` carries the working directory over to the new
//! namespace's copy of its mount), and the child binds `.`. A running
//! shared container's layer, handed down from its anchor, lies in that
//! container's own mount namespace, which no other container reaches and
//! which cannot be bound from here: it is read with the chroot alone.

use std::fs;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::Path;

use berth_runtime::sys::{Kernel, UnshareFlags, LINUX};
use rustix::fs::{Mode, OFlags};

/// A container's layer, opened.
#[derive(Debug)]
pub(super) struct Layer {
    fd: OwnedFd,
    /// Handed down as a descriptor (`/proc/self/fd/N`) by `berth commit`.
    handed: bool,
}

/// Where the child mounts a tmpfs to hold its bind: the first that is a
/// directory.
const BIND_HOLDERS: [&str; 4] = ["/tmp", "/mnt", "/var/tmp", "/dev"];

impl Layer {
    /// The upper directory `dir`: the descriptor handed down
    /// ([`super::taken_over`]), or the directory opened.
    pub(super) fn open(dir: &Path) -> std::io::Result<Self> {
        if let Some(file) = super::taken_over(dir) {
            return Ok(Layer {
                fd: file.into(),
                handed: true,
            });
        }
        // The layer's own directory, never a symlink (berth made it).
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        Ok(Layer {
            fd: rustix::fs::open(dir, flags, Mode::empty())?,
            handed: false,
        })
    }

    /// Makes the layer the working directory, before the worker enters its
    /// namespaces.
    pub(super) fn enter(&self) -> std::io::Result<()> {
        Ok(rustix::process::fchdir(&self.fd)?)
    }

    /// After the namespaces: the layer as the working directory shows it
    /// now (the new mount namespace's copy of its mount); the working
    /// directory back at `/`.
    pub(super) fn here(self) -> std::io::Result<Self> {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = rustix::fs::open(".", flags, Mode::empty())?;
        rustix::process::chdir("/")?;
        Ok(Layer {
            fd,
            handed: self.handed,
        })
    }

    /// The changes as a layer tar in `out` (synced), read by a forked
    /// child confined to the layer.
    pub(super) fn read_confined(&self, out: fs::File) -> Result<(), String> {
        use berth_runtime::sys::process::{exit_now, fork, wait, Exit, Fork};
        let (said_read, said_write) = rustix::pipe::pipe().map_err(|e| format!("pipe: {e}"))?;
        // The worker has started no thread: the child may run ordinary code.
        match fork().map_err(|e| format!("fork: {e}"))? {
            Fork::Child => {
                drop(said_read);
                let result = (|| -> Result<(), String> {
                    rustix::process::fchdir(&self.fd).map_err(|e| format!("enter it: {e}"))?;
                    // Unbound, the working directory is still the layer.
                    match enter_bound(&self.fd)? {
                        Bound::Entered => {}
                        Bound::OtherNamespace if self.handed => {}
                        Bound::OtherNamespace => {
                            return Err("cannot bind it to confine the walk: it lies in another mount namespace".into())
                        }
                    }
                    LINUX
                        .chroot(Path::new("."))
                        .map_err(|e| format!("confine the walk to it: {e}"))?;
                    let out =
                        crate::layer::upper_layer(Path::new("/"), std::io::BufWriter::new(out))
                            .map_err(|e| e.to_string())?;
                    out.into_inner()
                        .map_err(|e| e.to_string())?
                        .sync_all()
                        .map_err(|e| e.to_string())
                })();
                if let Err(e) = &result {
                    let _ = rustix::io::write(&said_write, e.as_bytes());
                }
                exit_now(i32::from(result.is_err()))
            }
            Fork::Parent(pid) => {
                drop(said_write);
                let mut said = String::new();
                let _ = fs::File::from(said_read).read_to_string(&mut said);
                match wait(pid, false) {
                    Ok(Some((_, Exit::Code(0)))) => Ok(()),
                    _ if !said.is_empty() => Err(said),
                    other => Err(format!("its reader ended: {other:?}")),
                }
            }
        }
    }
}

/// What [`enter_bound`] did.
enum Bound {
    /// The working directory is the bind's root.
    Entered,
    /// The layer's mount is another mount namespace's (EINVAL): not
    /// bound.
    OtherNamespace,
}

/// From the layer `layer` as the working directory: a mount namespace of
/// this process's own, a fresh tmpfs that nobody else reaches, a bind of
/// `.` on it, entered (checked to be the layer).
fn enter_bound(layer: &OwnedFd) -> Result<Bound, String> {
    let same = |fd: &OwnedFd| -> Result<bool, String> {
        match (rustix::fs::fstat(fd), rustix::fs::fstat(layer)) {
            (Ok(a), Ok(b)) => Ok((a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)),
            (Err(e), _) | (_, Err(e)) => Err(format!("inspect it: {e}")),
        }
    };
    let k = &LINUX;
    let fail = |what: &str| {
        let what = what.to_string();
        move |e| format!("{what} to confine the walk: {e}")
    };
    k.unshare(UnshareFlags::NEWNS)
        .map_err(fail("cannot make a mount namespace"))?;
    k.mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )
    .map_err(fail("cannot make / private"))?;
    let holder = BIND_HOLDERS
        .iter()
        .map(Path::new)
        .find(|p| p.is_dir())
        .ok_or_else(|| {
            format!(
                "none of {} is a directory to hold the walk's bind",
                BIND_HOLDERS.join(", ")
            )
        })?;
    k.mount(
        Some(Path::new("tmpfs")),
        holder,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        Some("size=64k,mode=0700"),
    )
    .map_err(fail(&format!(
        "cannot mount a tmpfs on {}",
        holder.display()
    )))?;
    let at = holder.join("layer");
    rustix::fs::mkdir(&at, Mode::from_raw_mode(0o700))
        .map_err(fail(&format!("cannot make {}", at.display())))?;
    match k.mount(Some(Path::new(".")), &at, None, libc::MS_BIND, None) {
        Ok(()) => {}
        Err(rustix::io::Errno::INVAL) => return Ok(Bound::OtherNamespace),
        Err(e) => return Err(fail("cannot bind it")(e)),
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let bound =
        rustix::fs::open(&at, flags, Mode::empty()).map_err(fail("cannot open the bind"))?;
    if !same(&bound)? {
        return Err("its bind shows another directory".into());
    }
    rustix::process::fchdir(&bound).map_err(|e| format!("enter it: {e}"))?;
    Ok(Bound::Entered)
}
