//! The last steps before `exec`: the container's own UTS namespace when
//! asked, and leaving the keeper's user namespace for the container's
//! user.

use std::os::fd::AsFd;

use rustix::thread::UnshareFlags;

use super::RunSpec;
use crate::error::{Error, Result};
use crate::idmap::{self, IdMode};
use crate::keeper::KeeperLease;
use crate::sys::{self, Kernel, Namespace};

/// The container's own UTS namespace, when asked: made in the user
/// namespace the command runs in (still with its capabilities there,
/// before `exec`), so that root inside may set the hostname.
pub(super) fn own_uts(k: &dyn Kernel, spec: &RunSpec) -> Result<()> {
    if !spec.uts_ns {
        return Ok(());
    }
    k.unshare(UnshareFlags::NEWUTS)
        .map_err(|e| Error::sys("unshare the UTS namespace", None, e))
}

/// Leaves the keeper's user namespace, where the setup held capabilities,
/// for the container's user in the namespace nested in it.
pub(super) fn become_user(k: &dyn Kernel, spec: &RunSpec, lease: &KeeperLease) -> Result<()> {
    let id = &spec.identity;
    match (id.mode, &lease.nested_userns) {
        // The keeper's nested namespace: one for all runs, and none of its
        // capabilities (fakeroot's root has all of them) reach the
        // keeper's namespace, its mounts or its processes.
        (IdMode::Identity | IdMode::FakeRoot, Some(ns)) => k
            .setns(ns.as_fd(), Namespace::User)
            .map_err(|e| Error::sys("join the nested user namespace", None, e)),
        (IdMode::Identity, None) => idmap::become_caller(k, id.uid, id.gid),
        (IdMode::FakeRoot, None) => idmap::become_caller(k, 0, 0),
        // Real root has real capabilities: keep Docker's default set only.
        (IdMode::HostRoot, _) => k
            .restrict_bounding_set(sys::ROOT_KEEPS)
            .map_err(|e| Error::sys("drop capabilities", None, e)),
    }
}
