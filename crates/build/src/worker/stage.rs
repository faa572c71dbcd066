//! Making a stage's root real: its base (an overlay on the base image's
//! squashfs, else the squashfs unpacked; an earlier stage's root copied;
//! nothing for scratch), then the layers of the steps taken from the cache.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use berth_image::store::blobs::{BlobRef, Blobs};
use berth_runtime::sys::{Kernel, LINUX};

use super::OverlayError;
use crate::layer;
use crate::plan::{Base, Plan};
use crate::{Error, Result};

/// A stage's root, as the worker builds it.
pub(super) struct StageRoot {
    /// The root directory.
    pub root: PathBuf,
    /// The overlay's upper directory, when the root is an overlay.
    pub upper: Option<PathBuf>,
    /// Whether the root has its base and the layers of `pending`.
    pub ready: bool,
    /// The layers the root has (once ready) or needs: the cached steps'
    /// (and, for FROM stage, the earlier stage's).
    pub pending: Vec<BlobRef>,
}

/// Makes stage `i`'s root real: its base, then the layers of cached steps.
pub(super) fn ensure(
    plan: &Plan,
    states: &mut [StageRoot],
    i: usize,
    full_map: bool,
) -> Result<()> {
    if states[i].ready {
        return Ok(());
    }
    let root = states[i].root.clone();
    let base_layers_from_stage = match plan.stages[i].base {
        Base::Stage(j) => {
            ensure(plan, states, j, full_map)?;
            let src = states[j].root.clone();
            let st = Command::new("cp")
                .args(["-a", "--reflink=auto"])
                .arg(&src)
                .arg(&root)
                .status()
                .map_err(|e| Error::io("run cp for", &root, e))?;
            if !st.success() {
                return Err(Error::Plan(format!("cannot copy stage {j}'s root")));
            }
            // The earlier stage's layers are in its root already.
            states[j].pending.len()
        }
        Base::Scratch => {
            fs::create_dir_all(&root).map_err(|e| Error::io("create", &root, e))?;
            0
        }
        Base::Image(ref sqfs) => {
            match overlay_root(sqfs, &root) {
                Ok(upper) => states[i].upper = Some(upper),
                Err(why) => {
                    // No FUSE or no unprivileged overlay here: a plain copy.
                    if std::env::var_os("BERTH_TIMING").is_some() {
                        eprintln!(
                            "berth: timing: no overlay build root ({why}); unpacking the base"
                        );
                    }
                    unpack_base(sqfs, &root, full_map)?;
                }
            }
            0
        }
    };
    let pending: Vec<BlobRef> = states[i]
        .pending
        .iter()
        .skip(base_layers_from_stage)
        .cloned()
        .collect();
    let blobs = Blobs::new(&plan.blobs)?;
    for b in &pending {
        layer::apply(&root, &blobs.path(&b.digest))?;
    }
    states[i].ready = true;
    Ok(())
}

/// The stage root as an overlay: the base image's squashfs mounted through
/// FUSE as the lower layer (nothing unpacked), an upper directory beside
/// the root for the build's changes. The worker's mount namespace holds
/// both mounts; they go with it.
fn overlay_root(sqfs: &Path, root: &Path) -> std::result::Result<PathBuf, OverlayError> {
    let dir = |suffix: &str| {
        let mut name = root.file_name().unwrap_or_default().to_os_string();
        name.push(suffix);
        root.with_file_name(name)
    };
    let (lower, upper, work) = (dir("-lower"), dir("-upper"), dir("-work"));
    for d in [root, &lower, &upper, &work] {
        fs::create_dir_all(d).map_err(|source| OverlayError::File {
            what: "create",
            path: d.to_path_buf(),
            source,
        })?;
    }
    let image = fs::File::open(sqfs).map_err(|source| OverlayError::File {
        what: "open",
        path: sqfs.to_path_buf(),
        source,
    })?;
    let server = berth_runtime::image_mount::mount_fuse(
        &LINUX,
        berth_runtime::image_mount::ServedImage {
            file: &image,
            offset: 0,
            verity: None,
            profile: None,
        },
        &lower,
        (0, 0),
        berth_config::SquashfsServer::from_env(),
    )
    .map_err(|e| OverlayError::Fuse(e.to_string()))?;
    // The server lives as long as the connection; nothing waits for it.
    std::mem::forget(server);
    let opts = format!(
        "lowerdir={},upperdir={},workdir={},userxattr",
        lower.display(),
        upper.display(),
        work.display()
    );
    LINUX
        .mount(
            Some(Path::new("overlay")),
            root,
            Some("overlay"),
            0,
            Some(&opts),
        )
        .map_err(|source| {
            let _ = LINUX.unmount(&lower, libc::MNT_DETACH);
            OverlayError::Mount {
                path: root.to_path_buf(),
                source: source.into(),
            }
        })?;
    Ok(upper)
}

/// Unpacks a base image's squashfs into `root` with its owners:
/// `unsquashfs` (squashfs-tools, multi-threaded: 3 x faster than
/// `rdsquashfs` on the Debian base here, 0.63 s against 2.0 s), else
/// `rdsquashfs` (squashfs-tools-ng, which berth needs anyway).
fn unpack_base(sqfs: &Path, root: &Path, full_map: bool) -> Result<()> {
    let mut cmd = Command::new("unsquashfs");
    cmd.args(["-q", "-n", "-no-xattrs", "-f", "-d"]).arg(root);
    if !full_map {
        // Owners cannot be set with one id mapped: everything is root's.
        cmd.arg("-ignore-errors");
    }
    let out = match cmd.arg(sqfs).stdout(std::process::Stdio::null()).output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut cmd = Command::new("rdsquashfs");
            cmd.args(["-u", "/", "-p"])
                .arg(root)
                .args(["-C", "-T", "-D", "-S"]);
            if full_map {
                cmd.arg("-O");
            }
            cmd.arg(sqfs)
                .stdout(std::process::Stdio::null())
                .output()
                .map_err(|e| Error::io("run unsquashfs or rdsquashfs for", sqfs, e))?
        }
        Err(e) => return Err(Error::io("run unsquashfs for", sqfs, e)),
    };
    if !out.status.success() {
        return Err(Error::Plan(format!(
            "cannot unpack the base image {}: {}",
            sqfs.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}
