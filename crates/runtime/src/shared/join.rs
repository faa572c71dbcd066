//! A task joining a live shared container: its namespaces are opened and
//! checked against pinned processes, a forked child enters them and
//! `exec`s the command, the parent forwards signals and reports the exit
//! code.

use std::os::fd::{AsFd, OwnedFd};

use crate::container::Process;
use crate::error::{Error, Result, EXIT_BERTH};
use crate::idmap::IdMode;
use crate::node::{self, Pinned, Share};
use crate::process::{self, Timing};
use crate::sys::{self, Fork, Kernel, Namespace, LINUX};

use super::{anchor_alive, SharedInfo};

/// The namespaces a task enters, in order.
pub(super) struct Entry {
    /// The keeper's user namespace (the container's mount namespace
    /// belongs to it, and joining one needs `CAP_SYS_ADMIN` there).
    keeper_userns: Option<OwnedFd>,
    /// The container's mount namespace.
    mntns: OwnedFd,
    /// The container's user namespace (nested in the keeper's).
    inner_userns: Option<OwnedFd>,
    /// The container's own network, IPC and UTS namespaces.
    own: Vec<(Namespace, OwnedFd)>,
    mode: IdMode,
}

impl Entry {
    /// Opens the namespaces of `info`'s container, checking afterwards
    /// that its anchor and keeper still run (a pid recycled between
    /// reading the record and opening them would lead elsewhere).
    pub(super) fn open(info: &SharedInfo) -> Result<Self> {
        let mode = info.mode;
        // Pinned first: checked below, once their namespaces are open.
        let anchor = Pinned::new(info.pid);
        let keeper = Pinned::new(info.keeper_pid);
        let entry = Entry {
            keeper_userns: match mode {
                IdMode::HostRoot => None,
                IdMode::Identity | IdMode::FakeRoot => {
                    Some(node::open_ns(info.keeper_pid, "user")?)
                }
            },
            mntns: node::open_ns(info.pid, "mnt")?,
            inner_userns: match mode {
                IdMode::Identity | IdMode::FakeRoot => Some(node::open_ns(info.pid, "user")?),
                IdMode::HostRoot => None,
            },
            own: info
                .namespaces
                .iter()
                .filter_map(|name| {
                    let kind = match name.as_str() {
                        "net" => Namespace::Net,
                        "ipc" => Namespace::Ipc,
                        "uts" => Namespace::Uts,
                        _ => return None,
                    };
                    Some(node::open_ns(info.pid, name).map(|fd| (kind, fd)))
                })
                .collect::<Result<_>>()?,
            mode,
        };
        let runs = |p: &Option<Pinned>| p.as_ref().is_some_and(Pinned::still_runs);
        if !anchor_alive(info) || !runs(&anchor) || !runs(&keeper) {
            return Err(Error::Setup(format!(
                "shared container {} ended while this task was joining it; start the task again",
                info.key
            )));
        }
        Ok(entry)
    }
}

/// Joins the anchor's namespaces in a forked child and `exec`s `job`;
/// the parent forwards signals and returns the exit code. `share` is the
/// caller's share of the container, held until the command ends.
pub(super) fn join(info: &SharedInfo, job: &Process, share: Share) -> Result<i32> {
    let entry = Entry::open(info)?;
    // The entrypoint that runs first runs once for the container: its
    // record, opened before the container's mount namespace hides it.
    let record = match &job.entrypoint_first {
        Some(first) => Some(entrypoint_record(info, first)?),
        None => None,
    };
    let set = process::block_watched()?;
    match sys::fork().map_err(|e| Error::Setup(format!("fork: {e}")))? {
        Fork::Child => {
            let Err(e) = enter_and_exec(&LINUX, entry, job, record.as_ref(), &[]);
            eprintln!("berth: error: {e}");
            sys::exit_now(EXIT_BERTH)
        }
        Fork::Parent(pid) => {
            process::not_dumpable();
            let exit = process::supervise(pid, &set);
            drop(share);
            Ok(exit.as_code())
        }
    }
}

/// The record of the entrypoint's changes in this container (this
/// anchor's: a later container of the key has its own), in the
/// container's directory; one per entrypoint and, under Slurm, per job
/// step (Pyxis runs it at each step's start, and a named container of the
/// job outlives a step).
fn entrypoint_record(
    info: &SharedInfo,
    first: &crate::entrypoint_first::EntrypointFirst,
) -> Result<std::fs::File> {
    use std::hash::{Hash, Hasher};
    use std::os::unix::fs::OpenOptionsExt;
    let mut h = std::hash::DefaultHasher::new();
    first.argv.hash(&mut h);
    first.sees.is_some().hash(&mut h);
    for var in ["SLURM_JOB_ID", "SLURM_STEP_ID"] {
        std::env::var(var).ok().hash(&mut h);
    }
    let path = super::containers_dir()?.join(format!(
        "{}/{ENTRYPOINT_RECORD}{}-{}-{:016x}.json",
        info.key,
        info.pid,
        info.start_time,
        h.finish()
    ));
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(|e| Error::io("open", &path, e))
}

/// The start of an entrypoint record's name.
pub(super) const ENTRYPOINT_RECORD: &str = "entrypoint-";

/// Enters `entry`'s namespaces and working directory and `exec`s `job`
/// (after the entrypoint run first, with `record`); `keep`: descriptors
/// the command inherits besides stdio and the launcher's.
pub(super) fn enter_and_exec(
    k: &dyn Kernel,
    entry: Entry,
    job: &Process,
    record: Option<&std::fs::File>,
    keep: &[i32],
) -> Result<std::convert::Infallible> {
    if let Some(ns) = &entry.keeper_userns {
        k.setns(ns.as_fd(), Namespace::User)
            .map_err(|e| Error::sys("join the keeper's user namespace", None, e))?;
    }
    k.setns(entry.mntns.as_fd(), Namespace::Mount)
        .map_err(|e| Error::sys("join the container's mount namespace", None, e))?;
    // Its network and IPC namespaces belong to the keeper's user
    // namespace, its UTS one to the container's (see container::build).
    let join_own = |outer: bool| -> Result<()> {
        for (kind, fd) in entry
            .own
            .iter()
            .filter(|(k, _)| super::of_keeper(*k) == outer)
        {
            k.setns(fd.as_fd(), *kind)
                .map_err(|e| Error::sys("join the container's namespace", None, e))?;
        }
        Ok(())
    };
    join_own(true)?;
    if let Some(ns) = &entry.inner_userns {
        k.setns(ns.as_fd(), Namespace::User)
            .map_err(|e| Error::sys("join the container's user namespace", None, e))?;
    }
    join_own(false)?;
    if entry.mode == IdMode::HostRoot {
        k.restrict_bounding_set(sys::ROOT_KEEPS)
            .map_err(|e| Error::sys("drop capabilities", None, e))?;
    }
    std::env::set_current_dir(&job.workdir).map_err(|e| {
        Error::Setup(format!(
            "working directory {:?} is not in the shared container: {e} (tasks of one container share its binds; start them from the same directory)",
            job.workdir
        ))
    })?;
    k.set_no_new_privs()
        .map_err(|e| Error::sys("set no_new_privs", None, e))?;
    let env = match (&job.entrypoint_first, record) {
        (Some(first), Some(record)) => crate::entrypoint_first::run_once(
            first,
            record,
            &job.env,
            &job.workdir,
            job.argv0_fallback,
            (&job.seccomp, job.root_emulation.wanted()),
        ),
        _ => job.env_after_entrypoint(&job.env),
    };
    let program = process::resolve_or_exit(&job.argv[0], &env, &job.workdir, job.argv0_fallback);
    let emulate = job.root_emulation.wanted();
    process::exec_command(
        &program,
        &job.argv,
        &env,
        (&job.seccomp, emulate),
        Timing::off(),
        keep,
    )
}
