//! Named containers (`berth run --name NAME`): the container's changes
//! are kept under NAME in the user's store (`STORE/containers/NAME`: an
//! overlay's `upper/` and `work/`, and a record of the image), so that a
//! later run with the same name and image goes on from them, as Pyxis's
//! named containers and enroot's containers do. `berth ps -a` lists them,
//! `berth commit` saves one as an image, `berth rm` removes one.

use std::fs::File;
use std::path::{Path, PathBuf};

use berth_config::Config;
use berth_runtime::node;
use berth_runtime::shared::Reuse;
use berth_runtime::IdMode;
use rustix::fs::FlockOperation;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The record's file name in a container's directory.
const RECORD: &str = "container.json";

/// What berth keeps of a named container beside its changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedContainer {
    /// Its name.
    pub name: String,
    /// The image as the first run named it.
    pub image: String,
    /// The image's id: later runs must run this image.
    pub image_id: String,
    /// When it was made (seconds since the epoch).
    pub created: u64,
    /// The id mode of its last run (`identity`, `fakeroot`, `root`): its
    /// files belong to that mode's ids.
    pub mode: String,
    /// The Slurm step (`JOB.STEP`) whose task made it: that step's other
    /// tasks take it as their own (`:create` with several tasks on a node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
}

/// A named container as `berth ps -a` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Listed {
    /// The record.
    #[serde(flatten)]
    pub record: NamedContainer,
    /// Its directory.
    pub path: PathBuf,
    /// A run uses it now.
    pub in_use: bool,
}

/// The store's directory of named containers.
const CONTAINERS: &str = "containers";

/// Where a store keeps its named containers.
pub fn containers_dir(config: &Config) -> PathBuf {
    config.store.join(CONTAINERS)
}

/// The changes (the overlay's `upper/`) of container `name`, opened inside
/// the store (`openat2(RESOLVE_IN_ROOT)`, or a walk that follows no
/// symlink out of it): what another container of the user's with the store
/// bound put in their place cannot lead out of the store.
/// (`name` is one [`validate_name`] passed.)
pub fn open_upper(config: &Config, name: &str) -> std::io::Result<std::os::fd::OwnedFd> {
    use berth_runtime::sys::Kernel;
    use rustix::fs::{Mode, OFlags};
    use std::os::fd::AsFd;
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let store = rustix::fs::open(&config.store, flags, Mode::empty())?;
    let rel = format!("{CONTAINERS}/{name}/upper");
    Ok(berth_runtime::sys::LINUX.open_in_root(store.as_fd(), &rel, flags)?)
}

/// A name is letters, digits, `_`, `.` and `-`, starting with a letter or
/// digit, at most 128 bytes: it names a directory ([`berth_config::names`],
/// the rule the Slurm plugin checks at submission).
pub fn validate_name(name: &str) -> Result<()> {
    if berth_config::names::name_ok(name) {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "container name {name:?}: {}",
            berth_config::names::NAME_RULE
        )))
    }
}

/// The directory of named container `name`: in the store
/// (`STORE/containers/NAME`, `berth run --name`), or, for the named
/// container of shared container `shared` (`--shared KEY --name NAME`,
/// the Slurm plugin's named containers), on this node under the key
/// (`RUNTIME/named/KEY`), where the job's end removes it: a later instance
/// of the key goes on from its changes.
pub fn dir_of(config: &Config, name: &str, shared: Option<&str>) -> Result<PathBuf> {
    validate_name(name)?;
    match shared {
        None => Ok(containers_dir(config).join(name)),
        Some(key) => Ok(berth_runtime::shared::named_dir(key)?),
    }
}

/// The directory `dir` ([`dir_of`]) of container `name` for a run of image
/// `image_id` (`image` as the user gave it) in `mode`: made with its
/// record on first use. An error when the container was made from
/// another image. `on_node`: a shared container's (the Slurm plugin's),
/// for the message; `step`: the run's Slurm step, recorded as the one that
/// made it.
pub fn prepare(
    dir: &Path,
    name: &str,
    (image, image_id): (&str, &str),
    mode: IdMode,
    (on_node, step): (bool, Option<&str>),
) -> Result<PathBuf> {
    let dir = dir.to_path_buf();
    match read(&dir) {
        Ok(mut record) => {
            if record.image_id != image_id {
                let (made, short) = (&record.image, short(&record.image_id));
                return Err(Error::Usage(if on_node {
                    format!(
                        "container {name} was made from {made} ({short}) on this node in this job, not from {image}: give that image, or none (the container's own is run), or another name"
                    )
                } else {
                    format!(
                        "container {name} was made from {made} ({short}), not from {image}: run it with that image (berth run --name {name} {made}), or remove it first (berth rm {name})"
                    )
                }));
            }
            if record.mode != mode.as_str() {
                record.mode = mode.as_str().to_string();
                write(&dir, &record)?;
            }
        }
        Err(_) if !dir.join(RECORD).exists() => {
            if let Some(parent) = dir.parent() {
                private_dir(parent)?;
            }
            private_dir(&dir)?;
            let created = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            let record = NamedContainer {
                name: name.to_string(),
                image: image.to_string(),
                image_id: image_id.to_string(),
                created,
                mode: mode.as_str().to_string(),
                step: step.map(str::to_string),
            };
            write(&dir, &record)?;
        }
        Err(e) => return Err(e),
    }
    // A container stacked read-only before any run wrote to it.
    for d in ["upper", "work"] {
        private_dir(&dir.join(d))?;
    }
    Ok(dir)
}

/// The image a run of named container `name` (in `dir`, [`dir_of`])
/// runs, when not the one the request gives: the container's own for
/// `existing` (which must exist) and for `any` when it exists; `new`
/// refuses an existing container, unless another task of the run's Slurm
/// `step` made it. `on_node`: a shared container's (the Slurm plugin's),
/// for the messages.
pub fn image_of(
    config: &Config,
    (name, dir): (&str, &Path),
    reuse: Reuse,
    (on_node, step): (bool, Option<&str>),
) -> Result<Option<String>> {
    let record = dir.join(RECORD).exists().then(|| read(dir)).transpose()?;
    match (reuse, record) {
        // Made by another task of this step (`:create`, several tasks on
        // the node): this task's own, as Pyxis creates once per node.
        (Reuse::New, Some(r)) if step.is_some() && r.step.as_deref() == step => {
            Ok(None)
        }
        (Reuse::Existing, None) if on_node => Err(Error::Usage(format!(
            "no container {name} runs or was made on this node in this job, and no image was given to create it"
        ))),
        (Reuse::Existing, None) => Err(Error::Usage(format!(
            "no container {name} in the store {} (berth ps -a lists them); give an image to make it",
            config.store.display()
        ))),
        (Reuse::New, Some(_)) if on_node => Err(Error::Usage(format!(
            "container {name} exists already on this node in this job; it was asked to be created anew (:create)"
        ))),
        (Reuse::New, Some(_)) => Err(Error::Usage(format!(
            "container {name} exists already: remove it first (berth rm {name}), or let it be used (not :create)"
        ))),
        (Reuse::Existing | Reuse::Any, Some(r)) => Ok(Some(r.image_id)),
        _ => Ok(None),
    }
}

/// The first 12 hex digits of an id.
fn short(id: &str) -> &str {
    let hex = id.strip_prefix("sha256:").unwrap_or(id);
    hex.get(..12).unwrap_or(hex)
}

/// The store's named containers, by name.
pub fn list(config: &Config) -> Result<Vec<Listed>> {
    let dir = containers_dir(config);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::Usage(format!("cannot read {}: {e}", dir.display()))),
    };
    let mut out: Vec<Listed> = entries
        .flatten()
        // A container `berth rm` is removing.
        .filter(|e| !e.file_name().as_encoded_bytes().starts_with(b"."))
        .filter_map(|e| {
            let path = e.path();
            let record = read(&path).ok()?;
            let in_use = in_use(&path);
            Some(Listed {
                record,
                path,
                in_use,
            })
        })
        .collect();
    out.sort_by(|a, b| a.record.name.cmp(&b.record.name));
    Ok(out)
}

/// The lock `berth commit` holds (shared) while it saves a container a
/// run uses, and `berth rm` takes (exclusively) before it removes one.
const COMMIT_LOCK: &str = "commit.lock";

/// How a caller holds a named container of the store.
#[derive(Debug)]
pub enum Held {
    /// No run uses it: locked as a run locks it, for this caller alone.
    Alone(File),
    /// A run uses it (`berth commit` reads its changes as they stand):
    /// the commit lock, shared, so `berth rm` refuses until the commit
    /// ends.
    Live(File),
}

/// Container `name` of the store, locked for this caller alone (no run
/// uses it, and no commit reads it, while the locks are held).
fn take(config: &Config, name: &str) -> Result<(PathBuf, [File; 2])> {
    let (_, dir, held) = take_or_snapshot(config, name)?;
    let Held::Alone(lock) = held else {
        return Err(Error::Overlay(format!(
            "container {name} is in use by a run: wait for it to end (berth ps -a shows it in use)"
        )));
    };
    let commits = open_lock(&dir)?;
    if !try_lock(&commits, FlockOperation::NonBlockingLockExclusive, &dir)? {
        return Err(Error::Overlay(format!(
            "container {name} is being saved by berth commit: wait for it to end"
        )));
    }
    Ok((dir, [lock, commits]))
}

/// Container `name` of the store for `berth commit`: [`Held::Alone`] when
/// no run uses it; [`Held::Live`] while one does, for a snapshot of the
/// live container.
pub fn take_or_snapshot(config: &Config, name: &str) -> Result<(NamedContainer, PathBuf, Held)> {
    validate_name(name)?;
    let dir = containers_dir(config).join(name);
    let record = read(&dir).map_err(|_| {
        Error::Usage(format!(
            "no container {name} in the store {} (berth ps -a lists them)",
            config.store.display()
        ))
    })?;
    let lock = File::open(&dir)
        .map_err(|e| Error::Usage(format!("cannot open {}: {e}", dir.display())))?;
    if try_lock(&lock, FlockOperation::NonBlockingLockExclusive, &dir)? {
        return Ok((record, dir, Held::Alone(lock)));
    }
    let commits = open_lock(&dir)?;
    // `berth rm` holds it while it moves the directory away: gone then.
    if !try_lock(&commits, FlockOperation::NonBlockingLockShared, &dir)?
        || !node::still_linked(&commits, &dir.join(COMMIT_LOCK))
    {
        return Err(Error::Overlay(format!(
            "container {name} is being removed by berth rm"
        )));
    }
    Ok((record, dir, Held::Live(commits)))
}

/// The commit lock of the container in `dir`, opened (made if missing).
fn open_lock(dir: &Path) -> Result<File> {
    node::open_lock(&dir.join(COMMIT_LOCK)).map_err(|e| Error::Usage(e.to_string()))
}

/// Takes `op` on `f` without waiting: whether it was free (an error other
/// than "held by another" is an error, not "in use").
fn try_lock(f: &File, op: FlockOperation, dir: &Path) -> Result<bool> {
    match rustix::fs::flock(f, op) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(false),
        Err(e) => Err(Error::Usage(format!(
            "cannot lock the container {}: {e}",
            dir.display()
        ))),
    }
}

/// Whether a run holds the container's directory.
fn in_use(dir: &Path) -> bool {
    File::open(dir).is_ok_and(|f| f.try_lock_shared().is_err())
}

/// The id mode a record names.
pub fn mode_of(record: &NamedContainer) -> IdMode {
    IdMode::parse(&record.mode).unwrap_or(IdMode::Identity)
}

fn read(dir: &Path) -> Result<NamedContainer> {
    let path = dir.join(RECORD);
    let text = std::fs::read_to_string(&path).map_err(|e| Error::Read {
        what: "container record",
        path: path.clone(),
        source: e,
    })?;
    serde_json::from_str(&text).map_err(|e| {
        Error::Usage(format!(
            "{} is not a container record ({e}): remove the directory, or berth rm it",
            path.display()
        ))
    })
}

fn write(dir: &Path, record: &NamedContainer) -> Result<()> {
    let path = dir.join(RECORD);
    let partial = dir.join(format!(".{RECORD}.{}", std::process::id()));
    let text = serde_json::to_string_pretty(record).unwrap_or_default();
    std::fs::write(&partial, text)
        .and_then(|()| std::fs::rename(&partial, &path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&partial);
            Error::Overlay(format!("cannot write {}: {e}", path.display()))
        })
}

fn private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(Error::Overlay(format!(
            "cannot make {}: {e}",
            dir.display()
        ))),
        _ => Ok(()),
    }
}

/// Removes the tree at `path` as far as this process may: directories it
/// owns but cannot read or write (overlayfs's `work/work`, mode 0) are
/// opened up first. Files of other ids (subordinate ids of a `--fakeroot`
/// run) are left for [`remove_tree_in_namespace`].
pub fn remove_tree(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
        Ok(m) if !m.is_dir() => return std::fs::remove_file(path),
        Ok(m) if m.permissions().mode() & 0o700 != 0o700 => {
            let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700));
        }
        Ok(_) => {}
    }
    for entry in std::fs::read_dir(path)? {
        remove_tree(&entry?.path())?;
    }
    std::fs::remove_dir(path)
}

/// `berth __rm-tree DIR`: removes DIR as root of a fresh user namespace
/// with the caller's subordinate ids mapped (so files a `--fakeroot` run
/// gave to those ids go too); the exit code.
pub fn remove_tree_main(args: &[String]) -> i32 {
    let [dir] = args else {
        eprintln!("berth: error: usage: berth __rm-tree DIR");
        return 2;
    };
    if let Err(e) =
        berth_runtime::idmap::enter_namespaces(&berth_runtime::sys::LINUX, IdMode::FakeRoot)
    {
        eprintln!("berth: error: {e}");
        return 1;
    }
    match remove_tree(Path::new(dir)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("berth: error: cannot remove {dir}: {e}");
            1
        }
    }
}

/// Removes container `name` (refused while a run uses it).
pub fn remove(config: &Config, name: &str, berth_exe: &Path) -> Result<()> {
    let (named, _locks) = take(config, name)?;
    // Out of reach first, under both locks: a commit or a run that comes
    // now finds no container of this name (a run makes a new one) instead
    // of one being emptied. Names never start with a dot.
    let dir = named.with_file_name(format!(".rm-{name}-{}", std::process::id()));
    std::fs::rename(&named, &dir).map_err(|e| {
        Error::Overlay(format!(
            "cannot remove container {name} ({}): {e}",
            named.display()
        ))
    })?;
    if remove_tree(&dir).is_ok() {
        return Ok(());
    }
    // Files of other ids: remove them where those ids are mapped.
    let out = std::process::Command::new(berth_exe)
        .arg("__rm-tree")
        .arg(&dir)
        .output()
        .map_err(|e| Error::Overlay(format!("cannot start {}: {e}", berth_exe.display())))?;
    if out.status.success() {
        return Ok(());
    }
    Err(Error::Overlay(format!(
        "cannot remove container {name} ({}): {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(store: &Path) -> Config {
        let env = berth_config::Env::default();
        Config::from_parts(Some(store), &env, Default::default(), vec![]).unwrap()
    }

    #[test]
    fn names_are_directory_names() {
        for good in ["a", "job-1.x_y", "9lives"] {
            assert!(validate_name(good).is_ok(), "{good}");
        }
        for bad in ["", ".hidden", "-x", "a/b", "..", "a b", &"x".repeat(129)] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
    }

    /// Container `dev` of the store of `c`, prepared for a run.
    fn dev(c: &Config, image: &str, id: &str, mode: IdMode) -> Result<PathBuf> {
        prepare(
            &dir_of(c, "dev", None)?,
            "dev",
            (image, id),
            mode,
            (false, None),
        )
    }

    #[test]
    fn a_container_keeps_its_image_and_is_listed_and_removed() {
        let d = tempfile::tempdir().unwrap();
        let c = config(d.path());
        let dir = dev(&c, "debian:12", "sha256:aaaa", IdMode::Identity).unwrap();
        assert_eq!(dir, d.path().join("containers/dev"));
        // Again with the same image: the same directory; the mode follows.
        dev(&c, "debian", "sha256:aaaa", IdMode::FakeRoot).unwrap();
        let err = dev(&c, "other", "sha256:bbbb", IdMode::Identity).unwrap_err();
        assert!(
            err.to_string().contains("was made from debian:12")
                && err.to_string().contains("berth rm dev"),
            "{err}"
        );
        let listed = list(&c).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].record.mode, "fakeroot");
        assert!(!listed[0].in_use);
        // In use while a run holds it.
        let held = File::open(&dir).unwrap();
        held.try_lock().unwrap();
        assert!(list(&c).unwrap()[0].in_use);
        let err = remove(&c, "dev", Path::new("/nonexistent")).unwrap_err();
        assert!(err.to_string().contains("in use"), "{err}");
        drop(held);
        // A work directory of mode 0, as overlayfs leaves it.
        std::fs::create_dir_all(dir.join("work/work")).unwrap();
        std::fs::write(dir.join("work/work/f"), "x").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            dir.join("work/work"),
            std::fs::Permissions::from_mode(0o000),
        )
        .unwrap();
        remove(&c, "dev", Path::new("/nonexistent")).unwrap();
        assert!(!dir.exists());
        let err = remove(&c, "dev", Path::new("/nonexistent")).unwrap_err();
        assert!(err.to_string().contains("no container dev"), "{err}");
    }

    /// `:create`: the tasks of the step that made the container share it
    /// (on the node, and in the store for container_scope=global); a later
    /// step is refused.
    #[test]
    fn create_is_refused_only_to_later_steps() {
        let d = tempfile::tempdir().unwrap();
        let c = config(d.path());
        let dir = d.path().join("named/slurm-7-dev.n1");
        let made = (true, Some("7.0"));
        prepare(&dir, "dev", ("img", "sha256:aaaa"), IdMode::Identity, made).unwrap();
        assert_eq!(read(&dir).unwrap().step.as_deref(), Some("7.0"));
        let of = |step| image_of(&c, ("dev", &dir), Reuse::New, (true, step));
        assert_eq!(of(Some("7.0")).unwrap(), None);
        for later in [Some("7.1"), None] {
            let err = of(later).unwrap_err().to_string();
            assert!(err.contains("exists already on this node"), "{err}");
        }
        // A store's container (container_scope=global) made by a step:
        // the same for that step's tasks.
        let dir = dir_of(&c, "dev", None).unwrap();
        let made = (false, Some("8.0"));
        prepare(&dir, "dev", ("img", "sha256:aaaa"), IdMode::Identity, made).unwrap();
        let of = |step| image_of(&c, ("dev", &dir), Reuse::New, (false, step));
        assert_eq!(of(Some("8.0")).unwrap(), None);
        let err = of(Some("9.0")).unwrap_err().to_string();
        assert!(err.contains("exists already: remove it first"), "{err}");
    }

    /// A commit of a running container and `berth rm` keep out of each
    /// other's way: rm refuses while the commit reads, and a commit that
    /// comes while rm removes finds nothing (not a half-emptied tree).
    #[test]
    fn rm_and_a_live_commit_exclude_each_other() {
        let d = tempfile::tempdir().unwrap();
        let c = config(d.path());
        let dir = dev(&c, "debian:12", "sha256:aaaa", IdMode::Identity).unwrap();
        let run = File::open(&dir).unwrap();
        run.try_lock().unwrap();
        let (_, _, held) = take_or_snapshot(&c, "dev").unwrap();
        assert!(matches!(held, Held::Live(_)));
        drop(run);
        let err = remove(&c, "dev", Path::new("/nonexistent")).unwrap_err();
        assert!(err.to_string().contains("being saved"), "{err}");
        drop(held);
        // rm under way: it holds both locks, then moves the directory.
        let (_, locks) = take(&c, "dev").unwrap();
        let run = File::open(&dir).unwrap();
        assert!(run.try_lock_shared().is_err());
        drop(run);
        let err = take_or_snapshot(&c, "dev").unwrap_err();
        assert!(err.to_string().contains("being removed"), "{err}");
        drop(locks);
        remove(&c, "dev", Path::new("/nonexistent")).unwrap();
        assert!(std::fs::read_dir(d.path().join("containers"))
            .unwrap()
            .next()
            .is_none());
    }
}
