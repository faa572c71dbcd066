//! `berth run --save TARGET`: a container's root, its image with the
//! changes of its upper layer applied, as a new squashfs file. Nothing is
//! unpacked: the upper directory becomes a layer tar (overlayfs's
//! whiteouts and opaque directories as OCI's), the image's squashfs a tar
//! stream (`sqfs2tar`), and the flattener writes both, top layer first,
//! into `tar2sqfs`, as a pull does.
//!
//! Where the image allows, berth's own writer amends the image's file
//! instead ([`amend`]): the image's blocks copied as they are, only the
//! changes compressed.
//!
//! The work runs in `berth __save PLAN`, a fresh process in a user
//! namespace of its own (the caller as root, the subordinate range as
//! 1..N, the same host ids a keeper maps): files of the image's other owners in the
//! upper layer (apt's `_apt` directories) are readable there and keep
//! their owners in the saved image. A temporary upper directory is removed
//! there too.

use std::fs;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use berth_config::SquashfsSettings;
use berth_image::flatten::Flattener;
use berth_image::squash::SquashWriter;
use berth_runtime::IdMode;
use serde::{Deserialize, Serialize};

mod amend;

/// What one save does.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SavePlan {
    /// The overlay's upper directory (the container's changes).
    pub upper: PathBuf,
    /// Remove this directory (the run's temporary overlay) when done.
    pub remove: Option<PathBuf>,
    /// The image's squashfs file (from its first byte).
    pub image: PathBuf,
    /// The squashfs file to write.
    pub output: PathBuf,
    /// A directory for spooled entries and the plan.
    pub spool: PathBuf,
    /// How to write the squashfs.
    pub squashfs: SquashfsSettings,
    /// Compressor threads.
    pub jobs: usize,
    /// The run's id mode (real root needs no user namespace).
    pub mode: IdMode,
}

/// The tool that reads a squashfs as a tar stream; `BERTH_SQFS2TAR` may
/// name another path.
fn sqfs2tar() -> PathBuf {
    std::env::var_os("BERTH_SQFS2TAR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("sqfs2tar"))
}

/// Runs `berth_exe __save` for `plan` and waits; the error is the worker's
/// own message.
pub fn save(berth_exe: &Path, plan: &SavePlan) -> Result<(), String> {
    let path = plan.spool.join("save-plan.json");
    let text = serde_json::to_vec(plan).map_err(|e| e.to_string())?;
    fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    let out = Command::new(berth_exe)
        .arg("__save")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot start {}: {e}", berth_exe.display()))?;
    let _ = fs::remove_file(&path);
    if out.status.success() {
        return Ok(());
    }
    let msg = String::from_utf8_lossy(&out.stderr);
    let msg = msg.trim().trim_start_matches("berth: error: ");
    Err(if msg.is_empty() {
        format!("the save worker failed ({})", out.status)
    } else {
        msg.to_string()
    })
}

/// Entry point of `berth __save PLAN`.
pub fn main(args: &[String]) -> i32 {
    let [plan] = args else {
        eprintln!("berth: error: usage: berth __save PLAN");
        return 2;
    };
    let plan: SavePlan = match fs::read(plan)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_slice(&t).map_err(|e| e.to_string()))
    {
        Ok(p) => p,
        Err(e) => {
            eprintln!("berth: error: the save plan {plan}: {e}");
            return 2;
        }
    };
    let mode = match plan.mode {
        IdMode::HostRoot => IdMode::HostRoot,
        _ => IdMode::FakeRoot,
    };
    // The changes, opened as the caller, before entering the namespace:
    // a live shared container's layer comes as a descriptor berth commit
    // took from the container's anchor and handed down (`/proc/self/fd/N`).
    let upper = match upper_dir(&plan.upper) {
        Ok(fd) => fd,
        Err(e) => {
            eprintln!(
                "berth: error: cannot open the container's changes {}: {e}",
                plan.upper.display()
            );
            return 1;
        }
    };
    if let Err(e) = berth_runtime::idmap::enter_namespaces(&berth_runtime::sys::LINUX, mode) {
        eprintln!(
            "berth: error: cannot enter the user namespace to read the container's changes: {e}"
        );
        return 1;
    }
    let result = write(&plan, &upper);
    if let Some(dir) = &plan.remove {
        let _ = fs::remove_dir_all(dir);
    }
    match result {
        Ok(()) => 0,
        Err(e) => {
            let _ = fs::remove_file(&plan.output);
            eprintln!("berth: error: {e}");
            1
        }
    }
}

/// The upper directory `dir` (`O_PATH`): the descriptor handed down as
/// `/proc/self/fd/N`, taken over (and kept from the programs the save
/// starts), or the directory opened.
fn upper_dir(dir: &Path) -> std::io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    let handed = dir
        .to_str()
        .and_then(|d| d.strip_prefix("/proc/self/fd/"))
        .and_then(|n| n.parse().ok())
        .and_then(berth_runtime::sys::take_inherited_fd);
    if let Some(file) = handed {
        return Ok(file.into());
    }
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    Ok(rustix::fs::open(dir, flags, Mode::empty())?)
}

/// The changes in `upper` as a layer tar in `out` (synced), read by a
/// forked child confined to the directory (`chroot`). The walk follows a
/// path's middle parts, and this worker sees the host's files with the
/// user's ids: a running container that swaps a directory of its layer
/// for a symlink while the walk goes (a live commit) then reaches only
/// its own layer, never the user's files.
///
/// A chroot alone can be left by a walk that stands in a directory
/// someone moved out of the layer meanwhile and then meets a `..` (a
/// symlink's): a container that reaches the layer's directory from
/// outside could do that (another container of the user's with the store
/// bound, for a named container's layer). So where the layer is a
/// directory at `path` (not a running shared container's, which lives in
/// that container's own mount namespace), the root is a bind mount of
/// it, in a mount namespace of the child's own: the kernel refuses a `..`
/// out of a directory that is no longer below the mount's root.
fn upper_layer_confined(upper: &OwnedFd, path: Option<&Path>, out: fs::File) -> Result<(), String> {
    use berth_runtime::sys::process::{exit_now, fork, wait, Exit, Fork};
    use std::io::Read;
    let (said_read, said_write) = rustix::pipe::pipe().map_err(|e| format!("pipe: {e}"))?;
    // The worker has started no thread: the child may run ordinary code.
    match fork().map_err(|e| format!("fork: {e}"))? {
        Fork::Child => {
            drop(said_read);
            let result = (|| -> Result<(), String> {
                match path {
                    Some(path) => enter_bound(upper, path)?,
                    None => rustix::process::fchdir(upper).map_err(|e| format!("enter it: {e}"))?,
                }
                use berth_runtime::sys::Kernel;
                berth_runtime::sys::LINUX
                    .chroot(Path::new("."))
                    .map_err(|e| format!("confine the walk to it: {e}"))?;
                let out = crate::layer::upper_layer(Path::new("/"), std::io::BufWriter::new(out))
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

/// Enters a bind mount of the directory `upper` (opened earlier, at
/// `path`) in a new mount namespace of this process's own, whose `/tmp`
/// is a fresh tmpfs that holds the bind (nobody else can reach it).
fn enter_bound(upper: &OwnedFd, path: &Path) -> Result<(), String> {
    use berth_runtime::sys::{Kernel, UnshareFlags, LINUX};
    use rustix::fs::{Mode, OFlags};
    let same = |fd: &OwnedFd| -> Result<bool, String> {
        let (a, b) = (rustix::fs::fstat(fd), rustix::fs::fstat(upper));
        match (a, b) {
            (Ok(a), Ok(b)) => Ok((a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)),
            (Err(e), _) | (_, Err(e)) => Err(format!("inspect it: {e}")),
        }
    };
    // The directory again, in this (the worker's) mount namespace: the
    // descriptor from before it was entered names a mount of the host's.
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let here =
        rustix::fs::open(path, flags, Mode::empty()).map_err(|e| format!("open it again: {e}"))?;
    if !same(&here)? {
        return Err("it was replaced while the save started".into());
    }
    rustix::process::fchdir(&here).map_err(|e| format!("enter it: {e}"))?;
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
    let tmp = Path::new("/tmp");
    k.mount(
        Some(Path::new("tmpfs")),
        tmp,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        Some("size=64k,mode=0700"),
    )
    .map_err(fail("cannot mount a tmpfs on /tmp"))?;
    let at = tmp.join("layer");
    rustix::fs::mkdir(&at, Mode::from_raw_mode(0o700)).map_err(fail("cannot make /tmp/layer"))?;
    k.mount(Some(Path::new(".")), &at, None, libc::MS_BIND, None)
        .map_err(fail("cannot bind it"))?;
    let bound =
        rustix::fs::open(&at, flags, Mode::empty()).map_err(fail("cannot open the bind"))?;
    if !same(&bound)? {
        return Err("its bind shows another directory".into());
    }
    rustix::process::fchdir(&bound).map_err(|e| format!("enter it: {e}"))
}

/// Writes the image with the upper layer `upper` applied as `plan.output`.
fn write(plan: &SavePlan, upper: &OwnedFd) -> Result<(), String> {
    // The changes, as a layer (small next to the image: spooled).
    let upper_tar = plan.spool.join("upper.tar");
    let file = fs::File::create(&upper_tar)
        .map_err(|e| format!("cannot create {}: {e}", upper_tar.display()))?;
    // A descriptor handed down (a running shared container's layer) is
    // read where it is; a directory, through a bind of it.
    let path = (!plan.upper.starts_with("/proc/self/fd")).then_some(plan.upper.as_path());
    upper_layer_confined(upper, path, file).map_err(|e| {
        format!(
            "reading the container's changes in {}: {e}",
            plan.upper.display()
        )
    })?;
    match amend::amend(plan, &upper_tar) {
        Ok(Ok(())) => {
            let _ = fs::remove_file(&upper_tar);
            return Ok(());
        }
        Ok(Err(why)) => tracing::info!("the image is written whole, not amended: {why}"),
        Err(e) => {
            let _ = fs::remove_file(&upper_tar);
            return Err(e);
        }
    }
    let mut image = Command::new(sqfs2tar())
        .arg("--no-skip")
        .arg(&plan.image)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!(
                "cannot start {} (squashfs-tools-ng, as tar2sqfs): {e}",
                sqfs2tar().display()
            )
        })?;
    let stream = image
        .stdout
        .take()
        .ok_or_else(|| "sqfs2tar gave no output pipe".to_string())?;
    let mut writer =
        SquashWriter::start(&plan.output, &plan.squashfs, plan.jobs).map_err(|e| e.to_string())?;
    let flattened = (|| -> Result<(), String> {
        let input = writer.input().map_err(|e| e.to_string())?;
        let mut flat = Flattener::new(input, &plan.spool);
        flat.expect_layers(2);
        let upper = fs::File::open(&upper_tar)
            .map_err(|e| format!("cannot read {}: {e}", upper_tar.display()))?;
        flat.add_layer("the container's changes", std::io::BufReader::new(upper))
            .map_err(|e| e.to_string())?;
        flat.add_layer(
            "the image",
            std::io::BufReader::with_capacity(1 << 20, stream),
        )
        .map_err(|e| e.to_string())?;
        let (mut out, _stats) = flat.finish().map_err(|e| e.to_string())?;
        out.flush()
            .map_err(|e| format!("writing to tar2sqfs: {e}"))?;
        Ok(())
    })();
    let _ = fs::remove_file(&upper_tar);
    let status = image.wait().map_err(|e| e.to_string())?;
    if let Err(e) = flattened {
        writer.abort();
        return Err(e);
    }
    if !status.success() {
        writer.abort();
        let mut msg = String::new();
        if let Some(mut err) = image.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut err, &mut msg);
        }
        return Err(format!(
            "sqfs2tar could not read the image {} ({status}): {}",
            plan.image.display(),
            msg.trim()
        ));
    }
    writer.finish().map_err(|e| e.to_string())
}
