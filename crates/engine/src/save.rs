//! `--save TARGET`: when the command ends, the container's root (its image
//! with the run's changes) becomes a squashfs file (TARGET a path, starting
//! with `/` or `.`, or ending in `.sqsh`, `.squashfs` or `.sqfs`) or an
//! image in the store (TARGET a name) with the image's settings. The run keeps its changes in a host
//! directory for that: the `--overlay` directory, else a temporary one.
//! The file is written under a temporary name beside TARGET and renamed
//! over it when complete: a failed save leaves an older file as it was.

use std::path::{Path, PathBuf};

use berth_build::save::SavePlan;
use berth_config::Config;
use berth_image::image_config::RunConfig;
use berth_image::store::Store;
use berth_runtime::IdMode;
use serde::Serialize;

use crate::error::{Error, Result};

/// Where the saved root goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// A squashfs file (absolute).
    File(PathBuf),
    /// A name in the store.
    Name(String),
}

/// File name endings that make a target a file.
const FILE_ENDINGS: [&str; 3] = [".sqsh", ".squashfs", ".sqfs"];

impl Target {
    /// `spec` as a target, a relative file from `cwd`.
    pub fn parse(spec: &str, cwd: &Path) -> Result<Self> {
        if spec.is_empty() {
            return Err(Error::Usage(
                "--save needs a file (NAME.sqsh) or an image name".into(),
            ));
        }
        // A path (as an image file is told apart: `/` or `.` first), or a
        // squashfs file's name.
        if spec.starts_with(['/', '.']) || FILE_ENDINGS.iter().any(|e| spec.ends_with(e)) {
            if spec.ends_with('/') {
                return Err(Error::Usage(format!(
                    "--save {spec}: names a directory; give a file (DIR/NAME.sqsh)"
                )));
            }
            let path = cwd.join(spec);
            let dir = path.parent().unwrap_or(Path::new("/"));
            if !dir.is_dir() {
                return Err(Error::Usage(format!(
                    "--save {spec}: the directory {} does not exist",
                    dir.display()
                )));
            }
            return Ok(Target::File(path));
        }
        // A name without a registry lands under localhost/, as an import.
        let name = berth_image::reference::ImageRef::parse_local_name(spec)
            .map_err(|e| Error::Usage(format!("--save {spec}: not an image name: {e}")))?;
        Ok(Target::Name(name.store_name()))
    }
}

/// A save to make once the command ended.
#[derive(Debug, Serialize)]
pub struct SaveJob {
    /// Where.
    pub target: Target,
    /// The overlay's upper directory.
    pub upper: PathBuf,
    /// The run's temporary overlay directory, removed after the save.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temporary: Option<PathBuf>,
    /// The image's squashfs file.
    #[serde(skip)]
    pub image: PathBuf,
    /// The image's id (recorded as the saved image's source).
    pub base: String,
    /// The image's settings, kept.
    #[serde(skip)]
    pub run: RunConfig,
    /// The run's id mode.
    #[serde(skip)]
    pub mode: IdMode,
    /// The configuration (the store, the squashfs settings).
    #[serde(skip)]
    pub config: Config,
}

/// A temporary overlay directory for a run that saves without
/// `--overlay`: under `$TMPDIR`, else `/var/tmp` (a disk, with user
/// extended attributes, where a tmpfs may have none).
pub fn temporary_overlay(var: &dyn Fn(&str) -> Option<String>) -> Result<PathBuf> {
    let base = var("TMPDIR")
        .filter(|t| t.starts_with('/'))
        .unwrap_or_else(|| "/var/tmp".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let dir = Path::new(&base).join(format!("berth-save-{}-{nanos}", std::process::id()));
    std::fs::create_dir(&dir).map_err(|e| {
        Error::Overlay(format!(
            "--save: cannot make a directory for the run's changes in {base}: {e} (set TMPDIR to a directory of yours, or give --overlay DIR)"
        ))
    })?;
    Ok(dir)
}

/// Saves the container's root as `job` says; a line for the user.
pub fn save(job: &SaveJob, berth_exe: &Path) -> Result<String> {
    let config = &job.config;
    let fail = |why: String| {
        if let Some(t) = &job.temporary {
            let _ = std::fs::remove_dir_all(t);
        }
        Error::Save(why)
    };
    let jobs = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    match &job.target {
        Target::File(path) => {
            let dir = path.parent().unwrap_or(Path::new("/"));
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default();
            let partial = dir.join(format!(".{name}.berth-save-{}", std::process::id()));
            let spool = tempdir_in(dir).map_err(fail)?;
            let plan = plan(job, &partial, &spool, config, jobs);
            let result = berth_build::save::save(berth_exe, &plan);
            let _ = std::fs::remove_dir_all(&spool);
            if let Err(e) = result {
                let _ = std::fs::remove_file(&partial);
                return Err(fail(format!("--save {}: {e}", path.display())));
            }
            std::fs::rename(&partial, path).map_err(|e| {
                let _ = std::fs::remove_file(&partial);
                fail(format!(
                    "--save {}: cannot put the file in place: {e}",
                    path.display()
                ))
            })?;
            Ok(format!("saved the container as {}", path.display()))
        }
        Target::Name(name) => {
            let store = Store::open(&config.store, &config.shared_stores)
                .map_err(|e| fail(e.to_string()))?;
            let work = store.work_dir().map_err(|e| fail(e.to_string()))?;
            let output = work.path().join("image.sqfs");
            let plan = plan(job, &output, work.path(), config, jobs);
            berth_build::save::save(berth_exe, &plan)
                .map_err(|e| fail(format!("--save {name}: {e}")))?;
            let sq = &config.squashfs;
            let stored = berth_image::image_file::publish_written(
                &store,
                work,
                job.run.clone(),
                &format!("save:{}", job.base),
                (&sq.compressor, sq.block_size),
                std::slice::from_ref(name),
            )
            .map_err(|e| fail(format!("--save {name}: {e}")))?;
            Ok(format!(
                "saved the container as {name} ({})",
                stored.record.id
            ))
        }
    }
}

/// The worker's plan.
fn plan(job: &SaveJob, output: &Path, spool: &Path, config: &Config, jobs: usize) -> SavePlan {
    SavePlan {
        upper: job.upper.clone(),
        remove: job.temporary.clone(),
        image: job.image.clone(),
        output: output.to_path_buf(),
        spool: spool.to_path_buf(),
        squashfs: config.squashfs.clone(),
        jobs,
        mode: job.mode,
    }
}

/// A fresh directory in `dir` for the worker's spool.
fn tempdir_in(dir: &Path) -> std::result::Result<PathBuf, String> {
    for attempt in 0..100u32 {
        let p = dir.join(format!(
            ".berth-save-spool-{}-{attempt}",
            std::process::id()
        ));
        match std::fs::create_dir(&p) {
            Ok(()) => return Ok(p),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("--save: cannot write in {}: {e}", dir.display())),
        }
    }
    Err(format!(
        "--save: cannot make a spool directory in {}",
        dir.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_files_or_names() {
        let cwd = Path::new("/tmp");
        assert_eq!(
            Target::parse("x.sqsh", cwd).unwrap(),
            Target::File("/tmp/x.sqsh".into())
        );
        assert_eq!(
            Target::parse("/tmp/y.squashfs", cwd).unwrap(),
            Target::File("/tmp/y.squashfs".into())
        );
        assert_eq!(
            Target::parse("mine/app:v2", cwd).unwrap(),
            Target::Name("localhost/mine/app:v2".into())
        );
        assert!(Target::parse("/nonexistent-dir/x.sqsh", cwd).is_err());
        assert_eq!(
            Target::parse("./x", cwd).unwrap(),
            Target::File("/tmp/./x".into())
        );
        assert!(Target::parse("/tmp/", cwd).is_err());
        assert!(Target::parse("Bad Name", cwd).is_err());
        assert!(Target::parse("", cwd).is_err());
    }
}
