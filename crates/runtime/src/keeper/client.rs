//! A run's side of the keeper: find the live keeper of its image (or start
//! one) and take a share in it, under the keeper directory's decision lock
//! ([`crate::node`]'s protocol), so a run never joins a keeper that is
//! leaving.

use std::fs::{self, File};
use std::io::{BufRead, BufReader};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::idmap::{self, IdMode};
use crate::node::{self, Deciding, Pinned};
use crate::state;

use super::{keeper_ids, keeper_name, KeeperLease, Template, DECIDE_LOCK};

/// What a run asks of the keeper.
#[derive(Debug, Clone, Copy)]
pub struct KeeperRequest<'a> {
    /// berth's binary, to start a keeper with (`berth __keeper ...`).
    pub berth_exe: &'a Path,
    /// The image's squashfs file.
    pub image: &'a Path,
    /// Where the squashfs starts in it.
    pub image_offset: u64,
    /// The root of its verity table, when it has one.
    pub image_verity: Option<&'a str>,
    /// The image id (the keeper's key).
    pub image_id: &'a str,
    /// The id mapping.
    pub mode: IdMode,
    /// How long a keeper without runs stays.
    pub idle: Duration,
    /// What a keeper started now prepares once for default runs.
    pub template: Option<&'a Template>,
    /// The image, already open (handed to a keeper started now).
    pub image_file: Option<&'a File>,
    /// What serves the image (rootless keepers).
    pub server: berth_config::SquashfsServer,
    /// FUSE or unpacked (rootless keepers).
    pub image_mount: berth_config::ImageMount,
    /// What stacks the prepared root's layer on the image.
    pub root_overlay: berth_config::RootOverlay,
    /// Squashfs data files the keeper mounts beside the image (part of
    /// its key).
    pub data: &'a [super::data::DataFile],
}

/// Finds or starts the keeper of the request's image and mode and takes
/// a share in it.
pub fn acquire(req: &KeeperRequest<'_>) -> Result<KeeperLease> {
    // The whole id: two images never share a keeper.
    let hex = req.image_id.trim_start_matches("sha256:");
    if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::Setup(format!(
            "{:?} is not an image id",
            req.image_id
        )));
    }
    let key = super::data::keeper_key(hex, req.data);
    let job = std::env::var("SLURM_JOB_ID").ok();
    let step = job.as_deref().and_then(|job| {
        let cgroups = fs::read_to_string("/proc/self/cgroup").ok()?;
        super::slurm_step_cgroup(&cgroups, job)
    });
    let dir = node::state_dir()?.join("keepers").join(keeper_name(
        &key,
        req.mode,
        job.as_deref(),
        step.as_deref(),
    ));
    node::private_dir(&dir.join("mnt"))?;
    let deciding = Deciding::begin(&dir, DECIDE_LOCK)?;
    let wanted = req.template.and_then(|t| serde_json::to_string(t).ok());
    let keeper = match keeper_alive(&dir) {
        Some(pinned) => pinned,
        None => {
            // The keeper prepares the root for the template of the run that
            // starts it.
            let path = dir.join("template.json");
            match &wanted {
                Some(json) => state::write(&path, json.as_bytes())
                    .map_err(|e| Error::io("write", &path, e))?,
                None => {
                    let _ = fs::remove_file(&path);
                }
            }
            let profiles = node::state_dir()?.join("profiles");
            let profile = node::private_dir(&profiles)
                .ok()
                .map(|()| profiles.join(hex));
            let pid = start(req, &dir, profile.as_deref())?;
            Pinned::new(pid).ok_or_else(|| {
                Error::Setup(format!(
                    "the keeper (pid {pid}) ended at once; its log: {}",
                    dir.join("keeper.log").display()
                ))
            })?
        }
    };
    let pid = keeper.pid();
    let template_mntns = match (&wanted, state::read(&dir.join("template.json"))) {
        (Some(w), Ok(have)) if *w == have => {
            helper_ns(helper_of(&dir.join("holder.pid"), pid), "mnt")
        }
        _ => None,
    };
    let share = deciding.share()?;
    let userns = match req.mode {
        IdMode::HostRoot => None,
        IdMode::Identity | IdMode::FakeRoot => Some(node::open_ns(pid, "user")?),
    };
    let mntns = node::open_ns(pid, "mnt")?;
    let nested_userns = match req.mode {
        IdMode::Identity | IdMode::FakeRoot => {
            helper_ns(helper_of(&dir.join("identity.pid"), pid), "user")
        }
        IdMode::HostRoot => None,
    };
    // Everything above was opened by pid: it is the keeper's only if the
    // keeper still runs (else the pid may name another process by now).
    if !keeper.still_runs() {
        return Err(Error::Setup(format!(
            "the keeper of {} ended while this run was joining it; run again",
            dir.display()
        )));
    }
    deciding.end();
    Ok(KeeperLease {
        dir,
        pid,
        userns,
        mntns,
        template_mntns,
        nested_userns,
        share,
    })
}

/// The helper in a helper's pid file (`holder.pid`, `identity.pid`) if it
/// names a child of `keeper` (the keeper forks its helpers), so a pid
/// planted there cannot make a run join some other process's namespaces.
fn helper_of(file: &Path, keeper: i32) -> Option<Pinned> {
    let pid = state::read_pid(file)?;
    let pinned = Pinned::new(pid)?;
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let ppid: i32 = status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))?
        .trim()
        .parse()
        .ok()?;
    (ppid == keeper).then_some(pinned)
}

/// A namespace of a helper (`helper_of`), opened while the helper still
/// runs.
fn helper_ns(helper: Option<Pinned>, kind: &str) -> Option<OwnedFd> {
    let helper = helper?;
    let ns = node::open_ns(helper.pid(), kind).ok()?;
    helper.still_runs().then_some(ns)
}

/// The keeper of `dir`, if its pid file names a live one: a process
/// running this very berth binary (same device and inode: a process that
/// only calls itself `__keeper` is not one) with `__keeper DIR` as its
/// first arguments.
fn keeper_alive(dir: &Path) -> Option<Pinned> {
    use std::os::unix::fs::MetadataExt;
    let pid = state::read_pid(&dir.join("pid"))?;
    let pinned = Pinned::new(pid)?;
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let mut args = cmdline.split(|b| *b == 0).skip(1);
    let ours = args.next() == Some(b"__keeper".as_slice())
        && args.next() == Some(dir.as_os_str().as_encoded_bytes());
    let exe = fs::metadata(format!("/proc/{pid}/exe")).ok()?;
    let me = fs::metadata("/proc/self/exe").ok()?;
    (ours && (exe.dev(), exe.ino()) == (me.dev(), me.ino())).then_some(pinned)
}

/// Starts the keeper of `dir` and waits until it says `ready PID`.
fn start(req: &KeeperRequest<'_>, dir: &Path, profile: Option<&Path>) -> Result<i32> {
    let log_path = dir.join("keeper.log");
    let log = state::create_fresh(&log_path).map_err(|e| Error::io("create", &log_path, e))?;
    // An already open image goes to the keeper as /dev/fd/N: reopening it
    // through that link costs no path walk on a parallel filesystem. The
    // descriptor is inheritable only while the keeper starts.
    let image_arg = match req.image_file {
        Some(f) if rustix::io::fcntl_setfd(f, rustix::io::FdFlags::empty()).is_ok() => {
            PathBuf::from(format!("fd:{}", f.as_raw_fd()))
        }
        _ => req.image.to_path_buf(),
    };
    let mut cmd = Command::new(req.berth_exe);
    // Named as every berth helper is (`ps`: `berth __keeper DIR ...`).
    std::os::unix::process::CommandExt::arg0(&mut cmd, "berth");
    cmd.arg("__keeper")
        .arg(dir)
        .arg(&image_arg)
        .arg(req.mode.as_str())
        .arg(req.idle.as_secs().to_string());
    // A keeper with a user namespace starts in it: made between fork and
    // exec, mapped by this run while the keeper loads (one exec of berth,
    // newuidmap and newgidmap side by side).
    let ids = keeper_ids(req.server);
    let host = (
        rustix::process::getuid().as_raw(),
        rustix::process::getgid().as_raw(),
    );
    let unshared = req.mode.has_user_namespace();
    if unshared {
        let inside = ids.inside(host.0, host.1);
        cmd.arg("--in-ns")
            .args([inside.0, inside.1, host.0, host.1].map(|n| n.to_string()));
        crate::sys::process::exec_in_new_user_namespace(&mut cmd);
    }
    let spawned = cmd
        .stdin(if unshared {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .env_remove("BERTH_TIMING")
        .env(berth_config::SquashfsServer::ENV, req.server.as_str())
        .env(berth_config::ImageMount::ENV, req.image_mount.as_str())
        .env(berth_config::RootOverlay::ENV, req.root_overlay.as_str())
        .env(super::IMAGE_OFFSET_ENV, req.image_offset.to_string())
        .env(super::IMAGE_VERITY_ENV, req.image_verity.unwrap_or(""))
        .env(super::IMAGE_PROFILE_ENV, profile.unwrap_or(Path::new("")))
        .env(
            super::data::DATA_ENV,
            serde_json::to_string(req.data).unwrap_or_default(),
        )
        .spawn();
    if let Some(f) = req.image_file {
        // Never into the container: close-on-exec again.
        let _ = rustix::io::fcntl_setfd(f, rustix::io::FdFlags::CLOEXEC);
    }
    let mut child = spawned.map_err(|e| match e.raw_os_error() {
        // unshare(CLONE_NEWUSER) refused, or too many nested namespaces.
        Some(libc::EPERM | libc::ENOSPC | libc::EUSERS) if unshared => idmap::no_user_namespace(e),
        _ => Error::io("start the image keeper", req.berth_exe, e),
    })?;
    if unshared {
        if let Err(e) = idmap::map_child(child.id(), ids, host) {
            tracing::warn!("newuidmap/newgidmap failed ({e}); mapping your ids only");
        }
        // The keeper maps what is left once told.
        if let Some(mut stdin) = child.stdin.take() {
            let _ = std::io::Write::write_all(&mut stdin, &[idmap::MAPPED]);
        }
    }
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| Error::Setup("keeper has no stdout".into()))?;
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .map_err(|e| Error::io("read from the keeper", dir, e))?;
    if let Some(ready) = line.trim().strip_prefix("ready ") {
        // The keeper detaches (setsid) and outlives this run: leave it be.
        drop(child);
        let (pid, note) = ready.split_once(' ').unwrap_or((ready, ""));
        if let Some(why) = note.strip_prefix("unpacked ") {
            eprintln!(
                "berth: warning: FUSE cannot serve the image here ({why}); it is unpacked for \
                 this node's runs instead, which takes longer to start and disk space \
                 (set [runtime] image_mount = \"unpack\" to choose it without this warning)"
            );
        }
        return pid
            .parse()
            .map_err(|_| Error::Setup(format!("keeper said {line:?}")));
    }
    let _ = child.wait();
    // The keeper opened the image by path: if it is not there (any more),
    // say so plainly, so that a caller holding a stale record can retry.
    if image_arg == req.image
        && fs::symlink_metadata(req.image).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
    {
        return Err(Error::ImageMissing(req.image.to_path_buf()));
    }
    let log = state::read(&log_path).unwrap_or_default();
    let msg = log
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no message")
        .to_string();
    Err(Error::Mount(
        msg.trim_start_matches("berth: error: ").to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pid planted in a helper's pid file counts only if the process is
    /// the keeper's child.
    #[test]
    fn a_helper_is_a_child_of_its_keeper() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("holder.pid");
        state::write(&f, format!("{}\n", std::process::id()).as_bytes()).unwrap();
        let parent = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get());
        assert_eq!(
            helper_of(&f, parent).map(|p| p.pid()),
            Some(std::process::id() as i32)
        );
        assert!(helper_of(&f, parent + 1).is_none());
        state::write(&f, b"1\n").unwrap();
        assert!(helper_of(&f, parent).is_none());
    }

    /// A pid file naming a process that is not this binary's keeper of
    /// that very directory is no keeper.
    #[test]
    fn only_this_binarys_keeper_of_this_directory_counts() {
        let d = tempfile::tempdir().unwrap();
        assert!(keeper_alive(d.path()).is_none());
        // The test process itself: alive, same binary, but not `__keeper DIR`.
        state::write(
            &d.path().join("pid"),
            format!("{}\n", std::process::id()).as_bytes(),
        )
        .unwrap();
        assert!(keeper_alive(d.path()).is_none());
    }

    #[test]
    fn an_image_id_that_is_not_hex_is_refused_before_anything_is_made() {
        let req = KeeperRequest {
            berth_exe: Path::new("/nonexistent"),
            image: Path::new("/nonexistent"),
            image_offset: 0,
            image_verity: None,
            image_id: "sha256:../../etc",
            mode: IdMode::Identity,
            idle: Duration::from_secs(1),
            template: None,
            image_file: None,
            server: Default::default(),
            image_mount: Default::default(),
            root_overlay: Default::default(),
            data: &[],
        };
        let err = acquire(&req).unwrap_err().to_string();
        assert!(err.contains("is not an image id"), "{err}");
    }
}
