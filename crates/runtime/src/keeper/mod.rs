//! The image keeper: one process per (user, image, id mapping, Slurm job)
//! on a node that holds a user namespace and a mount namespace in which
//! the image's squashfs file is mounted read-only ([`crate::image_mount`]).
//!
//! A mount made afresh for every start costs about 25 ms plus cold
//! decompression (28 to 33 ms for `true`, 108 to 133 ms for
//! `python3 -c pass`, measured for docs/benchmarks.md); a mount that stays
//! alive keeps its page cache and dentries. Runs join the keeper's
//! namespaces with `setns` and make their own mount namespace from it, so
//! `pivot_root` never moves the FUSE server.
//!
//! - [`client`]: a run finds or starts the keeper and takes a share
//!   ([`KeeperLease`]), by [`crate::node`]'s lease protocol.
//! - [`daemon`]: the keeper process (`berth __keeper`).
//! - [`helpers`]: the processes a keeper forks to hold what runs join: the
//!   prepared root of default runs and the nested user namespace.
//! - [`data`]: squashfs data files (`-v FILE:DST:sqsh`) the keeper mounts
//!   beside the image.

use std::os::fd::OwnedFd;
use std::path::PathBuf;

use crate::idmap::{IdMode, KeeperIds};
use crate::node::Share;

pub mod client;
pub mod daemon;
pub mod data;
mod helpers;

pub use client::acquire;
pub use daemon::keeper_main;

/// The decision lock of a keeper's directory.
const DECIDE_LOCK: &str = "keeper.lock";

/// The keeper's environment variable saying where the squashfs starts in
/// the image file (set by the client for every keeper it starts).
const IMAGE_OFFSET_ENV: &str = "BERTH_IMAGE_OFFSET";

/// The keeper's environment variable holding the root of the image file's
/// verity table (empty: the file has none).
const IMAGE_VERITY_ENV: &str = "BERTH_IMAGE_VERITY";

/// The keeper's environment variable saying where the image's read
/// profile on this node is (see
/// [`crate::image_mount::ServedImage::profile`]): one per image, shared by
/// the image's keepers of every job and mode.
const IMAGE_PROFILE_ENV: &str = "BERTH_IMAGE_PROFILE";

/// The caller's ids in a keeper's user namespace: their host ids, so
/// that the containers' nested maps read as host ids, where the squashfs
/// server reports the image's root as the user (berth's own); root where
/// it reports the image's ids as they are (squashfuse_ll).
fn keeper_ids(server: berth_config::SquashfsServer) -> KeeperIds {
    match server {
        berth_config::SquashfsServer::Berth => KeeperIds::Host,
        berth_config::SquashfsServer::SquashfuseLl => KeeperIds::Root,
    }
}

/// A live keeper a run is using; dropping it releases the run's share.
#[derive(Debug)]
pub struct KeeperLease {
    /// The keeper's directory (its tmpfs is mounted at `mnt/` inside its namespace).
    pub dir: PathBuf,
    /// The keeper's pid.
    pub pid: i32,
    /// `/proc/PID/ns/user`, when the keeper has a user namespace.
    pub userns: Option<OwnedFd>,
    /// `/proc/PID/ns/mnt`.
    pub mntns: OwnedFd,
    /// The mount namespace of the keeper's prepared root, when it was
    /// prepared for the same [`Template`] as this run's.
    pub template_mntns: Option<OwnedFd>,
    /// The user namespace nested in the keeper's that every run of the
    /// keeper joins just before `exec`: in identity mode the caller's own
    /// ids inside, in fakeroot mode root and the subordinate ids (mapped
    /// to the keeper's ids that stand for the image's: see
    /// [`crate::idmap::NestedMaps`]). One namespace for all ranks of a node, so
    /// MPI's shared-memory and cross-memory-attach transports (which open
    /// /proc/PID/fd of a peer, or ptrace-read it) work between containers;
    /// and none of them holds a capability in the keeper's namespace, so a
    /// container cannot enter, trace or remount what the keeper holds.
    pub nested_userns: Option<OwnedFd>,
    /// This run's share of the keeper.
    pub share: Share,
}

impl KeeperLease {
    /// Where the image is mounted, as seen inside the keeper's namespace.
    pub fn image_mount(&self) -> PathBuf {
        self.dir.join("mnt/image")
    }

    /// A scratch mount point for a run's own tmpfs.
    pub fn stage(&self) -> PathBuf {
        self.dir.join("mnt/stage")
    }
}

/// Makes the keeper's tmpfs (`DIR/mnt`) unbindable in the current mount
/// namespace: a recursive bind of a directory above it (a container's
/// `/tmp`, where the state directory is `/tmp/berth-UID`) then leaves the
/// keeper's mounts (the image, the prepared root and its `/dev`, `/proc`,
/// `/sys`) out, instead of copying them into the container, hidden under
/// a tmpfs, only to tear them down at its end. A copy of a mount namespace
/// does not keep the flag (Linux 6.18), so each namespace that binds sets
/// it. An optimisation only: a failure is said at debug level.
pub(crate) fn keep_out_of_binds(k: &dyn crate::sys::Kernel, dir: &std::path::Path) {
    let mnt = dir.join("mnt");
    if let Err(e) = k.mount(None, &mnt, None, libc::MS_UNBINDABLE, None) {
        tracing::debug!("cannot make {} unbindable: {e}", mnt.display());
    }
}

/// What a keeper prepares once so that runs need not: the root file system
/// with the binds and identity files every default run of this user has.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Template {
    /// Binds common to the user's runs (site binds, home, /tmp).
    pub binds: Vec<crate::rootfs::Bind>,
    /// `/etc/passwd` line.
    pub passwd_line: Option<String>,
    /// `/etc/group` line.
    pub group_line: Option<String>,
}

/// The keeper serving `mode`. Identity and fakeroot runs never share one:
/// a fakeroot container is root in its own nested user namespace, and
/// keeping its prepared root (and the upper layer it writes) apart from
/// identity runs' is what keeps it out of theirs.
fn kind(mode: IdMode) -> &'static str {
    match mode {
        IdMode::Identity => "user",
        IdMode::FakeRoot => "fakeroot",
        IdMode::HostRoot => "root",
    }
}

/// The keeper directory's name for image `hex` in `mode`. Under Slurm each
/// job has its own keepers: a keeper lives in the cgroup of the job that
/// started it, so a later job of the same user that shared it would lose
/// its image mount when the first job ends and Slurm kills that cgroup.
/// Where each step runs in a cgroup of its own that Slurm kills at the
/// step's end (`step`: [`slurm_step_cgroup`]), each step has its own: a
/// step's keeper goes with it, and steps that run beside it (a task farm
/// of `srun &`) must not lose their image then.
fn keeper_name(hex: &str, mode: IdMode, slurm_job: Option<&str>, step: Option<&str>) -> String {
    let kind = kind(mode);
    match slurm_job.filter(|j| !j.is_empty() && j.bytes().all(|b| b.is_ascii_digit())) {
        Some(job) => match step {
            Some(step) => format!("{hex}-{kind}-job{job}-{step}"),
            None => format!("{hex}-{kind}-job{job}"),
        },
        None => format!("{hex}-{kind}"),
    }
}

/// The Slurm step cgroup (`step_0`, `step_batch`) of Slurm job `job` that
/// `cgroups` (`/proc/self/cgroup`) puts the process in, in the hierarchy
/// whose processes Slurm's `proctrack/cgroup` kills together when the
/// step ends: cgroup v1's freezer (`…/job_42/step_0`), or cgroup v2's one
/// hierarchy (`…/job_42/step_0/user/task_0`). `None` outside one
/// (`proctrack/linuxproc`, no Slurm).
pub(crate) fn slurm_step_cgroup(cgroups: &str, job: &str) -> Option<String> {
    let job_dir = format!("job_{job}");
    cgroups.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        if !(controllers.is_empty() || controllers.split(',').any(|c| c == "freezer")) {
            return None;
        }
        let dirs: Vec<&str> = path.split('/').collect();
        dirs.windows(2).find_map(|w| {
            let step = w[1].strip_prefix("step_")?;
            let ok = !step.is_empty() && step.bytes().all(|b| b.is_ascii_alphanumeric());
            (w[0] == job_dir && ok).then(|| w[1].to_string())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_slurm_job_has_its_own_keepers() {
        let a = keeper_name("ab12", IdMode::Identity, Some("41"), None);
        let b = keeper_name("ab12", IdMode::Identity, Some("42"), None);
        assert_ne!(a, b);
        assert_eq!(
            keeper_name("ab12", IdMode::Identity, None, None),
            "ab12-user"
        );
        assert_eq!(
            keeper_name("ab12", IdMode::FakeRoot, None, None),
            "ab12-fakeroot"
        );
        // Not a job id: no part of the name.
        assert_eq!(
            keeper_name("ab12", IdMode::Identity, Some("../x"), None),
            "ab12-user"
        );
        // A step in a cgroup of its own: the step's.
        assert_eq!(
            keeper_name("ab12", IdMode::Identity, Some("41"), Some("step_0")),
            "ab12-user-job41-step_0"
        );
    }

    #[test]
    fn a_step_cgroup_is_found_where_slurm_kills_it_whole() {
        let v1 = "10:hugetlb:/\n6:freezer:/slurm_n1/uid_1001/job_42/step_0\n\
                  4:memory:/slurm/uid_1001/job_42/step_3\n0::/\n";
        assert_eq!(slurm_step_cgroup(v1, "42").as_deref(), Some("step_0"));
        // Another job's, or task/cgroup's memory controller alone: none.
        assert_eq!(slurm_step_cgroup(v1, "4"), None);
        let memory_only = "4:memory:/slurm/uid_1001/job_42/step_3\n0::/\n";
        assert_eq!(slurm_step_cgroup(memory_only, "42"), None);
        let v2 = "0::/system.slice/slurmstepd.scope/job_42/step_batch/user/task_0\n";
        assert_eq!(slurm_step_cgroup(v2, "42").as_deref(), Some("step_batch"));
        for odd in [
            "0::/job_42/step_../x\n",
            "0::/job_42/step_\n",
            "0::/job_42\n",
            "",
        ] {
            assert_eq!(slurm_step_cgroup(odd, "42"), None, "{odd}");
        }
    }
}
