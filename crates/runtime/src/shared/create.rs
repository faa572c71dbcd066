//! Creating a shared container: a forked child builds it as a run's child
//! does ([`container::build`]), then a fresh `berth __holder` (the
//! container's anchor) joins its namespaces and takes over.
//!
//! Executed in the keeper's user namespace, the anchor's memory belongs
//! to that namespace, so once it is not dumpable the container's
//! processes (no capabilities there) can neither trace it nor open its
//! `/proc` files, while the user's runs outside still join it.

use std::fs::{self, File};
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;

use crate::container::{self, RunSpec};
use crate::error::{Error, Result, EXIT_BERTH};
use crate::idmap::IdMode;
use crate::keeper::KeeperLease;
use crate::node;
use crate::process::Timing;
use crate::sys::{self, Fork, Kernel, Namespace, LINUX};

use super::{Placement, SharedInfo, DECIDE_LOCK};

/// How long a new instance waits for its persistent layer's lock, which
/// the last instance's anchor drops as it leaves.
const OVERLAY_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Builds the container and starts its anchor; returns its record, written
/// to `info.json`. The caller holds the key's decision lock; `let_go` is
/// called once the keeper is leased.
pub(super) fn create(
    spec: &RunSpec,
    dir: &Path,
    placement: &Placement,
    fingerprint: String,
    image_file: Option<&File>,
    let_go: &mut dyn FnMut(),
) -> Result<SharedInfo> {
    let key = &placement.key;
    // A persistent layer (a named container's changes) is the container's
    // while its anchor lives; an earlier instance may be on its way out.
    let overlay_lock = match &spec.overlay {
        Some(p) => match p.lock(OVERLAY_WAIT) {
            Ok(Some(lock)) => Some(lock),
            Ok(None) => {
                return Err(Error::Usage(format!(
                    "shared container {key}: its changes in {} are in use by another container; wait for it to end",
                    p.dir.display()
                )))
            }
            Err(e) => return Err(Error::io("lock", &p.dir, e)),
        },
        None => None,
    };
    let leased = container::lease(spec, image_file)?;
    // The keeper is there: the node's other ranks need not wait for the
    // container to be built (they wait on its decision lock instead).
    let_go();
    let lease = leased.keeper();
    let pipe = || rustix::pipe::pipe().map_err(|e| Error::Setup(format!("pipe: {e}")));
    let (ready_read, ready_write) = pipe()?;
    let (release_read, release_write) = pipe()?;
    let sync = container::new_sync(spec)?;
    let builder = match sys::fork().map_err(|e| Error::Setup(format!("fork: {e}")))? {
        Fork::Child => {
            drop(ready_read);
            drop(release_write);
            let built = match container::build(&LINUX, spec, lease, &mut Timing::off(), sync) {
                Ok(built) => built,
                Err(e) => {
                    eprintln!("berth: error: shared container {key}: {e}");
                    sys::exit_now(EXIT_BERTH);
                }
            };
            // Built: say so (with the descriptor of the writable layer,
            // which the creator opens through /proc for the anchor), then
            // wait until the creator lets go (the anchor has joined), and
            // leave.
            let said = match &built.upper {
                Some(upper) => format!("r{}", upper.as_raw_fd()),
                None => "r".to_string(),
            };
            let _ = rustix::io::write(&ready_write, said.as_bytes());
            drop(ready_write);
            let mut byte = [0u8; 1];
            let _ = rustix::io::read(&release_read, &mut byte);
            sys::exit_now(0)
        }
        Fork::Parent(pid) => pid,
    };
    drop(ready_write);
    drop(release_read);
    if let Some(sync) = sync {
        let bundles = node::state_dir()?.join("bundles");
        if let Err(msg) = spec.hooks().before_start(&bundles, sync.parent_side()) {
            sys::kill(builder, libc::SIGKILL);
            let _ = sys::wait(builder, false);
            return Err(Error::Setup(msg));
        }
    }
    let anchor = if let Some(upper) = read_built(ready_read) {
        start_anchor(
            &LINUX,
            spec,
            dir,
            lease,
            (builder, upper, overlay_lock.as_ref()),
            placement,
        )
    } else {
        Err(Error::Setup(format!(
            "shared container {key} could not be set up (the reason is above)"
        )))
    };
    // The anchor has joined (or failed): the builder may go.
    drop(release_write);
    let _ = sys::wait(builder, false);
    let (pid, upper_fd) = anchor?;
    let start_time = node::proc_start(pid)
        .map(|(t, _)| t)
        .ok_or_else(|| Error::Setup(format!("shared container {key}: its anchor vanished")))?;
    let info = SharedInfo {
        key: key.clone(),
        image: placement.image.clone(),
        image_id: spec.image.id.clone(),
        pid,
        start_time,
        keeper_pid: lease.pid,
        mode: spec.identity.mode,
        fingerprint,
        created: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        workdir: spec.process.workdir.clone(),
        env: spec.process.env.clone(),
        namespaces: super::own_namespaces(spec)
            .into_iter()
            .map(|(_, name)| name.to_string())
            .collect(),
        upper_fd,
        squashfs: Some(spec.image.squashfs.clone()),
        squashfs_offset: spec.image.offset,
        step: placement.step.clone(),
    };
    // A former container of the key left its entrypoint's record.
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name();
        if name
            .to_string_lossy()
            .starts_with(super::join::ENTRYPOINT_RECORD)
        {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    let path = dir.join("info.json");
    let json = serde_json::to_vec(&info).map_err(|e| Error::Setup(e.to_string()))?;
    crate::state::write(&path, &json).map_err(|e| Error::io("write", &path, e))?;
    // The anchor keeps its own share of the keeper (inherited descriptor).
    drop(leased);
    Ok(info)
}

/// True once the other end wrote its ready byte (false: it ended first).
fn read_ready(pipe: OwnedFd) -> bool {
    let mut byte = [0u8; 1];
    File::from(pipe).read(&mut byte).unwrap_or(0) == 1
}

/// Once the builder said it built the container (`None`: it ended
/// first): the number of its descriptor of the writable layer, if any.
/// One read: the builder says it in one write, and what the container
/// started (a module's server) may hold the pipe open for good.
fn read_built(pipe: OwnedFd) -> Option<Option<i32>> {
    let mut said = [0u8; 16];
    let n = File::from(pipe).read(&mut said).ok()?;
    let rest = std::str::from_utf8(&said[..n]).ok()?.strip_prefix('r')?;
    Some(rest.parse().ok())
}

/// Starts `berth __holder` in the keeper's user namespace with the
/// descriptors it keeps and the builder's namespaces to join; returns its
/// pid once it is in the container.
fn start_anchor(
    k: &dyn Kernel,
    spec: &RunSpec,
    dir: &Path,
    lease: &KeeperLease,
    (builder, upper, overlay_lock): (i32, Option<i32>, Option<&File>),
    placement: &Placement,
) -> Result<(i32, Option<i32>)> {
    // Its own open file descriptions, so its locks are not its creator's.
    let users = node::open_lock(&dir.join("users.lock"))?;
    let key_lock = node::open_lock(&dir.join(DECIDE_LOCK))?;
    let devnull = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(|e| Error::io("open", "/dev/null", e))?;
    let mode = spec.identity.mode;
    let mntns = node::open_ns(builder, "mnt")?;
    // The container's other namespaces, as KIND=FD for the anchor.
    let mut others: Vec<(&str, OwnedFd)> = Vec::new();
    for (_, name) in super::own_namespaces(spec) {
        others.push((name, node::open_ns(builder, name)?));
    }
    let others_arg = if others.is_empty() {
        "-".to_string()
    } else {
        others
            .iter()
            .map(|(name, fd)| format!("{name}={}", fd.as_raw_fd()))
            .collect::<Vec<_>>()
            .join(",")
    };
    let userns = match mode {
        IdMode::Identity | IdMode::FakeRoot => Some(node::open_ns(builder, "user")?),
        IdMode::HostRoot => None,
    };
    // The writable layer, through the builder's descriptor.
    let upper = match upper {
        Some(n) => Some(node::open_fd_of(builder, n)?),
        None => None,
    };
    let (ready_read, ready_write) =
        rustix::pipe::pipe().map_err(|e| Error::Setup(format!("pipe: {e}")))?;
    let share = lease.share.as_file();
    let fd = |f: &dyn AsRawFd| f.as_raw_fd().to_string();
    let args = [
        fd(&users),
        fd(&key_lock),
        fd(&devnull),
        fd(&ready_write),
        fd(&mntns),
        userns.as_ref().map_or("-".into(), |ns| fd(ns)),
        fd(share),
        placement.linger.as_millis().to_string(),
        others_arg,
        upper.as_ref().map_or("-".into(), |u| fd(u)),
        overlay_lock.map_or("-".into(), |l| fd(l)),
    ];
    let pid = match sys::fork().map_err(|e| Error::Setup(format!("fork: {e}")))? {
        Fork::Child => {
            drop(ready_read);
            let mut handed: Vec<&dyn AsFd> =
                vec![&users, &key_lock, &devnull, &ready_write, &mntns, share];
            handed.extend(others.iter().map(|(_, fd)| fd as &dyn AsFd));
            handed.extend(upper.iter().map(|fd| fd as &dyn AsFd));
            handed.extend(overlay_lock.map(|l| l as &dyn AsFd));
            exec_anchor(k, lease, &args, &handed, userns.as_ref())
        }
        Fork::Parent(pid) => pid,
    };
    drop(ready_write);
    if read_ready(ready_read) {
        Ok((pid, upper.map(|u| u.as_raw_fd())))
    } else {
        let _ = sys::wait(pid, false);
        Err(Error::Setup(
            "the shared container's anchor could not start (the reason is above)".into(),
        ))
    }
}

/// In the forked child: joins the keeper's user namespace and executes
/// `berth __holder ARGS` with the `handed` descriptors inherited.
fn exec_anchor(
    k: &dyn Kernel,
    lease: &KeeperLease,
    args: &[String],
    handed: &[&dyn AsFd],
    userns: Option<&OwnedFd>,
) -> ! {
    if let Some(ns) = &lease.userns {
        if let Err(e) = k.setns(ns.as_fd(), Namespace::User) {
            eprintln!("berth: error: anchor: join the keeper's user namespace: {e}");
            sys::exit_now(EXIT_BERTH);
        }
    }
    for f in handed
        .iter()
        .copied()
        .chain(userns.map(|ns| ns as &dyn AsFd))
    {
        let _ = rustix::io::fcntl_setfd(f.as_fd(), rustix::io::FdFlags::empty());
    }
    // It joins the container with the capabilities it holds in the
    // keeper's namespace (as its joiner, where the user keeps host ids).
    if let Err(e) = k.keep_capabilities_across_exec() {
        eprintln!("berth: error: anchor: keep capabilities across exec: {e}");
        sys::exit_now(EXIT_BERTH);
    }
    let err = std::process::Command::new("/proc/self/exe")
        .arg0("berth")
        .arg("__holder")
        .args(args)
        .exec();
    eprintln!("berth: error: cannot start the shared container's anchor: {err}");
    sys::exit_now(EXIT_BERTH)
}
