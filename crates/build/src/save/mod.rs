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
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use berth_config::SquashfsSettings;
use berth_image::flatten::Flattener;
use berth_image::squash::SquashWriter;
use berth_runtime::IdMode;
use serde::{Deserialize, Serialize};

mod amend;
mod confined;

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
    // The changes and the image, opened as the caller, before entering
    // the namespace; either may come as a descriptor berth commit opened
    // and handed down (`/proc/self/fd/N`): a live shared container's layer
    // taken from its anchor, a named container's opened inside the store,
    // the image file whose id it checked.
    let opened = confined::Layer::open(&plan.upper).and_then(|layer| {
        let image = open_handed(&plan.image)?;
        layer.enter()?;
        Ok((layer, image))
    });
    let (layer, image) = match opened {
        Ok(o) => o,
        Err(e) => {
            eprintln!(
                "berth: error: cannot open the container's changes {} or its image {}: {e}",
                plan.upper.display(),
                plan.image.display()
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
    let result = layer
        .here()
        .map_err(|e| format!("cannot open the container's changes again: {e}"))
        .and_then(|layer| write(&plan, &layer, &image));
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

/// The descriptor `path` names when it is one handed down as
/// `/proc/self/fd/N`, taken over (and kept from the programs the save
/// starts).
fn taken_over(path: &Path) -> Option<fs::File> {
    path.to_str()
        .and_then(|d| d.strip_prefix("/proc/self/fd/"))
        .and_then(|n| n.parse().ok())
        .and_then(berth_runtime::sys::take_inherited_fd)
}

/// `path` opened for reading: the descriptor handed down
/// ([`taken_over`]), or the file opened.
fn open_handed(path: &Path) -> std::io::Result<fs::File> {
    match taken_over(path) {
        Some(file) => Ok(file),
        None => fs::File::open(path),
    }
}

/// Writes the image `image` with the changes of `layer` applied as
/// `plan.output`.
fn write(plan: &SavePlan, layer: &confined::Layer, image: &fs::File) -> Result<(), String> {
    // The changes, as a layer (small next to the image: spooled).
    let upper_tar = plan.spool.join("upper.tar");
    let file = fs::File::create(&upper_tar)
        .map_err(|e| format!("cannot create {}: {e}", upper_tar.display()))?;
    layer.read_confined(file).map_err(|e| {
        format!(
            "reading the container's changes in {}: {e}",
            plan.upper.display()
        )
    })?;
    match amend::amend(plan, image, &upper_tar) {
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
    // sqfs2tar reads the same file, through a copy of the descriptor that
    // it inherits (the worker's own are kept from it).
    let inherited = rustix::io::dup(image).map_err(|e| format!("dup: {e}"))?;
    let mut reader = Command::new(sqfs2tar())
        .arg("--no-skip")
        .arg(format!("/proc/self/fd/{}", inherited.as_raw_fd()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!(
                "cannot start {} (squashfs-tools-ng, as tar2sqfs): {e}",
                sqfs2tar().display()
            )
        })?;
    drop(inherited);
    let stream = reader
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
    let status = reader.wait().map_err(|e| e.to_string())?;
    if let Err(e) = flattened {
        writer.abort();
        return Err(e);
    }
    if !status.success() {
        writer.abort();
        let mut msg = String::new();
        if let Some(mut err) = reader.stderr.take() {
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
