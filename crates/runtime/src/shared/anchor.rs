//! A shared container's anchor, `berth __holder USERS KEY_LOCK DEVNULL
//! READY MNTNS USERNS SHARE LINGER_MS` (the name the Slurm epilog looks
//! for): joins the container its creator built, tells the creator it is
//! ready, and holds the container's namespaces until no task has used it
//! for its linger time ([`crate::node`]'s protocol), without capabilities,
//! not dumpable, in a session of its own.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::Duration;

use crate::error::{Error, Result, EXIT_BERTH};
use crate::node::{self, LeaseFiles};
use crate::process;
use crate::sys::{self, Kernel, Namespace, LINUX};

/// How often an anchor without tasks looks for one.
const POLL: Duration = Duration::from_millis(100);

/// What the anchor keeps: descriptors opened for it by its creator (its
/// own open file descriptions, so its locks are not its creator's).
struct Anchor {
    lease: LeaseFiles,
    devnull: File,
    ready: OwnedFd,
    keeper_share: File,
    linger: Duration,
    /// The container's writable layer, kept open for `berth commit`.
    upper: Option<OwnedFd>,
    /// The lock of its persistent layer (a named container's changes),
    /// held while it lives.
    overlay_lock: Option<File>,
}

/// Entry point of `berth __holder ...`; exits with berth's code on a
/// set-up failure.
pub fn anchor_main(args: &[String]) -> i32 {
    match join_container(&LINUX, args) {
        Ok(anchor) => hold(&LINUX, anchor),
        Err(e) => {
            eprintln!("berth: error: shared container anchor: {e}");
            EXIT_BERTH
        }
    }
}

/// Takes over the handed descriptors and joins the container.
fn join_container(k: &dyn Kernel, args: &[String]) -> Result<Anchor> {
    let [users, key_lock, devnull, ready, mntns, userns, share, linger, others, upper, overlay_lock] =
        args
    else {
        return Err(Error::Setup(
            "usage: berth __holder USERS KEY_LOCK DEVNULL READY MNTNS USERNS SHARE LINGER_MS NET=FD,IPC=FD,UTS=FD|- UPPER|- OVERLAY_LOCK|-"
                .into(),
        ));
    };
    let take = |s: &String| {
        s.parse()
            .ok()
            .and_then(sys::take_inherited_fd)
            .ok_or_else(|| Error::Setup(format!("no inherited descriptor {s:?}")))
    };
    let anchor = Anchor {
        lease: LeaseFiles {
            users: take(users)?,
            decide: take(key_lock)?,
        },
        devnull: take(devnull)?,
        ready: take(ready)?.into(),
        keeper_share: take(share)?,
        linger: Duration::from_millis(
            linger
                .parse()
                .map_err(|_| Error::Setup(format!("bad linger {linger:?}")))?,
        ),
        upper: match upper.as_str() {
            "-" => None,
            _ => Some(take(upper)?.into()),
        },
        overlay_lock: match overlay_lock.as_str() {
            "-" => None,
            _ => Some(take(overlay_lock)?),
        },
    };
    let mut own = Vec::new();
    for item in others.split(',').filter(|s| *s != "-" && !s.is_empty()) {
        let (kind, fd) = item
            .split_once('=')
            .ok_or_else(|| Error::Setup(format!("bad namespace {item:?}")))?;
        let kind = match kind {
            "net" => Namespace::Net,
            "ipc" => Namespace::Ipc,
            "uts" => Namespace::Uts,
            other => return Err(Error::Setup(format!("unknown namespace {other:?}"))),
        };
        own.push((kind, OwnedFd::from(take(&fd.to_string())?)));
    }
    let mntns = take(mntns)?;
    k.setns(mntns.as_fd(), Namespace::Mount)
        .map_err(|e| Error::sys("join the container's mount namespace", None, e))?;
    drop(mntns);
    // The network and IPC namespaces belong to the keeper's user
    // namespace, UTS to the container's: each is joined where the anchor
    // holds the capability to.
    join_own(k, &own, super::of_keeper)?;
    if userns != "-" {
        let ns = take(userns)?;
        k.setns(ns.as_fd(), Namespace::User)
            .map_err(|e| Error::sys("join the container's user namespace", None, e))?;
    }
    join_own(k, &own, |kind| !super::of_keeper(kind))?;
    let _ = std::env::set_current_dir("/");
    Ok(anchor)
}

/// Joins those of the container's own namespaces that `which` picks.
fn join_own(
    k: &dyn Kernel,
    own: &[(Namespace, OwnedFd)],
    which: impl Fn(Namespace) -> bool,
) -> Result<()> {
    for (kind, fd) in own.iter().filter(|(kind, _)| which(*kind)) {
        k.setns(fd.as_fd(), *kind)
            .map_err(|e| Error::sys("join the container's namespace", None, e))?;
    }
    Ok(())
}

/// The anchor's life, in the container it just joined: tell the creator
/// it is ready, then wait until no task uses the container, and leave
/// under the key's lock so that no task joins it on its way out.
fn hold(k: &dyn Kernel, anchor: Anchor) -> ! {
    // Its own session: a terminal's Ctrl-C for the creating task does not
    // end the container of the others.
    let _ = rustix::process::setsid();
    // berth blocked the signals it forwards; the anchor takes the defaults
    // (the job epilog ends a named container with a signal).
    sys::process::reset_signals();
    // No task's output pipe stays open in the anchor (srun waits for
    // those to close).
    let _ = rustix::stdio::dup2_stdin(&anchor.devnull);
    let _ = rustix::stdio::dup2_stdout(&anchor.devnull);
    let _ = rustix::stdio::dup2_stderr(&anchor.devnull);
    let keep = [
        anchor.lease.users.as_raw_fd(),
        anchor.lease.decide.as_raw_fd(),
        anchor.ready.as_raw_fd(),
        // Its share of the keeper: the image mount stays while it lives.
        anchor.keeper_share.as_raw_fd(),
    ];
    let keep: Vec<i32> = keep
        .into_iter()
        .chain(anchor.upper.as_ref().map(|u| u.as_raw_fd()))
        .chain(anchor.overlay_lock.as_ref().map(|l| l.as_raw_fd()))
        .collect();
    sys::close_inherited(&keep);
    // The anchor needs no capability to wait on locks: it drops those it
    // had to join the container, and turns not dumpable (its memory is
    // the keeper's namespace's: see `create`).
    let _ = k.drop_capabilities();
    process::not_dumpable();
    let _ = rustix::io::write(&anchor.ready, b"r");
    drop(anchor.ready);
    loop {
        node::serve_until_idle(&anchor.lease, anchor.linger, POLL, || true);
        // Idle, both locks held. A task that joined in place holds its
        // share with a descriptor its command inherited and may close:
        // the container stays while any process runs in it.
        if super::processes_in(std::process::id() as i32) == 0 {
            break;
        }
        use rustix::fs::{flock, FlockOperation};
        let _ = flock(&anchor.lease.users, FlockOperation::Unlock);
        let _ = flock(&anchor.lease.decide, FlockOperation::Unlock);
    }
    // The record is outside this mount namespace; the next task sees the
    // anchor gone (its pid dead) and the record is replaced then.
    sys::exit_now(0)
}
