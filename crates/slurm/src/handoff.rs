//! A step's image keepers and containers handed to the steps that still
//! use them, where Slurm kills each step's cgroup whole when the step ends
//! (`proctrack/cgroup`). A step that joins another step's running
//! container (`--container-name` while it runs, `NAME:exec`, `JOB.STEP`)
//! reads its image through the processes of that step's cgroup: the
//! container's anchor (a berth holder), the keeper and its squashfs server.
//! When the last task of the first step ends on the node, before Slurm
//! kills the step's cgroup, the plugin (root, in the step's slurmstepd)
//! moves what is left in that cgroup into the cgroup of a task of the job
//! that runs in a holder's mount namespace; that step's end then ends them.
//!
//! What it trusts: the kernel's records (`/proc`, the cgroup file
//! systems), and, as Slurm's cgroups of the job, only those below the job
//! directory slurmstepd itself is in (`…/job_J`, root's): a cgroup the user
//! made elsewhere (a systemd user slice) with a `job_J/step_X` path is not
//! one. The hand-off starts only where another step's task runs in the
//! mount namespace of a berth holder of this step (the plugin's binary, by
//! device and inode, where it is known); the processes move only from this
//! step's cgroup to another step's of the same job, each checked again
//! through a pidfd just before it moves. Root's processes and slurmstepd
//! stay.

use std::collections::HashSet;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;

use crate::epilog::{is_berth, proc_uid};

/// One line of `/proc/PID/cgroup`: the hierarchy (`ID:CONTROLLERS`) and
/// the path.
fn lines(cgroups: &str) -> impl Iterator<Item = (&str, &str)> {
    cgroups.lines().filter_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        Some((&l[..id.len() + 1 + controllers.len()], path))
    })
}

/// Whether a hierarchy (`ID:CONTROLLERS`) is the one whose cgroups Slurm
/// kills: cgroup v1's freezer, or v2's one hierarchy.
fn is_killing(hierarchy: &str) -> bool {
    let controllers = hierarchy.split_once(':').map_or("", |(_, c)| c);
    controllers.is_empty() || controllers.split(',').any(|c| c == "freezer")
}

/// Slurm's directories of job `job`, per hierarchy, from slurmstepd's own
/// `cgroups`: the path up to and including `job_J`.
pub fn job_dirs(cgroups: &str, job: u32) -> Vec<(String, String)> {
    let job_dir = format!("job_{job}");
    lines(cgroups)
        .filter_map(|(hierarchy, path)| {
            let dirs: Vec<&str> = path.split('/').collect();
            let at = dirs.iter().position(|d| *d == job_dir)?;
            Some((hierarchy.to_string(), dirs[..=at].join("/")))
        })
        .collect()
}

/// The step cgroup (`step_0`) that `cgroups` puts a process in, below
/// `job_dir` (Slurm's job directory in the killing hierarchy).
pub fn step_of(cgroups: &str, (hierarchy, job_dir): (&str, &str)) -> Option<String> {
    let (_, path) = lines(cgroups).find(|(h, _)| *h == hierarchy)?;
    if path.split('/').any(|d| d == "..") {
        return None;
    }
    let step = path
        .strip_prefix(job_dir)?
        .strip_prefix('/')?
        .split('/')
        .next()?;
    let name = step.strip_prefix("step_")?;
    (!name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric())).then(|| step.to_string())
}

/// A process in a step cgroup of the job, as `/proc` shows it now.
struct Proc {
    pid: i32,
    uid: Option<u32>,
    mnt: Option<String>,
    step: String,
}

fn mount_ns(pid: i32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/ns/mnt"))
        .ok()
        .map(|l| l.to_string_lossy().into_owned())
}

/// The processes in the job's step cgroups (`killing`: the hierarchy and
/// Slurm's job directory in it), with their owner and mount namespace.
/// (Not only the user's: a keeper's squashfs server runs as a subordinate
/// id of the user's where there is one.)
fn processes(killing: (&str, &str)) -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
            Some(Proc {
                pid,
                step: step_of(&cgroups, killing)?,
                uid: proc_uid(pid),
                mnt: mount_ns(pid),
            })
        })
        .collect()
}

/// Where the hierarchy `ID:CONTROLLERS` is mounted with its root at the
/// hierarchy's root (`/proc/self/mountinfo`).
fn hierarchy_mount(hierarchy: &str) -> Option<PathBuf> {
    let controllers = hierarchy.split_once(':').map_or("", |(_, c)| c);
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let mut fields = after.split_whitespace();
        let (fstype, _, options) = (fields.next()?, fields.next()?, fields.next()?);
        let mut before = before.split_whitespace();
        let (root, mount_point) = (before.nth(3)?, before.next()?);
        let wanted = match controllers {
            "" => fstype == "cgroup2",
            list => {
                fstype == "cgroup" && list.split(',').all(|c| options.split(',').any(|o| o == c))
            }
        };
        // (An escaped name, `\040`, is not looked for.)
        (wanted && root == "/" && !mount_point.contains('\\')).then(|| PathBuf::from(mount_point))
    })
}

/// What [`hand_off`] did: the pids it moved and the cgroups they went to.
#[derive(Debug, Default)]
pub struct HandedOff {
    /// The processes moved.
    pub moved: Vec<i32>,
    /// The `cgroup.procs` files they were written to.
    pub to: Vec<PathBuf>,
}

/// A pidfd of `pid`, if it still runs.
fn pidfd(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a descriptor.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: the syscall returned a new descriptor that nothing else owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Whether the process of `pidfd` has ended.
fn ended(pidfd: &OwnedFd) -> bool {
    let mut poll = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut poll, 1, 0) != 0 }
}

/// Step `step` (`step_0`) of job `job` ends on this node. Where a task of
/// `uid` in another step of the job runs in the mount namespace of a berth
/// holder (`berth`: the plugin's binary, device and inode) left in this
/// step's cgroup, every process left there (but root's and slurmstepd's)
/// moves to that task's cgroups.
pub fn hand_off(uid: u32, job: u32, step: &str, berth: Option<(u64, u64)>) -> HandedOff {
    let Ok(own) = std::fs::read_to_string("/proc/self/cgroup") else {
        return HandedOff::default();
    };
    let dirs = job_dirs(&own, job);
    let Some((hierarchy, job_dir)) = dirs.iter().find(|(h, _)| is_killing(h)) else {
        return HandedOff::default();
    };
    let killing = (hierarchy.as_str(), job_dir.as_str());
    let all = processes(killing);
    let own_pid = std::process::id() as i32;
    let ours: Vec<&Proc> = all
        .iter()
        .filter(|p| p.step == step && p.pid != own_pid && p.uid.is_some_and(|u| u != 0))
        .collect();
    // The node's own mount namespace (slurmstepd's) is every plain task's.
    let node = mount_ns(own_pid);
    let holders: HashSet<&str> = ours
        .iter()
        .filter(|p| p.uid == Some(uid) && is_berth(p.pid, uid, (b"__holder", None), berth))
        .filter_map(|p| p.mnt.as_deref())
        .filter(|m| Some(*m) != node.as_deref())
        .collect();
    let Some(target) = all.iter().find(|p| {
        p.uid == Some(uid)
            && p.step != step
            && p.mnt.as_deref().is_some_and(|m| holders.contains(m))
    }) else {
        return HandedOff::default();
    };
    // The target's cgroups that are Slurm's of this job, in every
    // hierarchy where slurmstepd's are (v1: freezer, and memory, cpuset,
    // devices where Slurm's task plugin made them).
    let Ok(target_cgroups) = std::fs::read_to_string(format!("/proc/{}/cgroup", target.pid)) else {
        return HandedOff::default();
    };
    let mut done = HandedOff::default();
    for (hierarchy, path) in lines(&target_cgroups) {
        let under_job = dirs.iter().any(|(h, dir)| {
            h == hierarchy
                && path
                    .strip_prefix(dir.as_str())
                    .is_some_and(|r| r.starts_with('/'))
        });
        if under_job && !path.split('/').any(|d| d == "..") {
            if let Some(mount) = hierarchy_mount(hierarchy) {
                done.to.push(
                    mount
                        .join(path.trim_start_matches('/'))
                        .join("cgroup.procs"),
                );
            }
        }
    }
    if done.to.is_empty() {
        return done;
    }
    for p in ours {
        // Checked again once a pidfd pins it: still in this step's cgroup.
        let Some(fd) = pidfd(p.pid) else { continue };
        let still = std::fs::read_to_string(format!("/proc/{}/cgroup", p.pid))
            .ok()
            .and_then(|c| step_of(&c, killing))
            .is_some_and(|s| s == step);
        if !still || ended(&fd) {
            continue;
        }
        let mut moved = false;
        for procs in &done.to {
            moved |= std::fs::write(procs, p.pid.to_string()).is_ok();
        }
        if moved {
            done.moved.push(p.pid);
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    const STEPD_V1: &str = "6:freezer:/slurm_n1/uid_1001/job_42/step_0\n\
                            4:memory:/slurm_n1/uid_1001/job_42/step_0\n0::/\n";

    #[test]
    fn slurms_job_directories_come_from_slurmstepds_own_cgroups() {
        let dirs = job_dirs(STEPD_V1, 42);
        assert_eq!(
            dirs,
            [
                (
                    "6:freezer".to_string(),
                    "/slurm_n1/uid_1001/job_42".to_string()
                ),
                (
                    "4:memory".to_string(),
                    "/slurm_n1/uid_1001/job_42".to_string()
                ),
            ]
        );
        assert!(is_killing("6:freezer") && is_killing("0:") && !is_killing("4:memory"));
        // A colon in a cgroup's name stays in the path.
        assert_eq!(
            job_dirs("6:freezer:/a:b/job_42/step_0\n", 42),
            [("6:freezer".to_string(), "/a:b/job_42".to_string())]
        );
        let v2 = "0::/system.slice/slurmstepd.scope/job_42/step_0/slurm\n";
        assert_eq!(
            job_dirs(v2, 42),
            [(
                "0:".to_string(),
                "/system.slice/slurmstepd.scope/job_42".to_string()
            )]
        );
    }

    #[test]
    fn a_step_is_one_below_slurms_job_directory() {
        let killing = ("6:freezer", "/slurm_n1/uid_1001/job_42");
        let task = "6:freezer:/slurm_n1/uid_1001/job_42/step_3\n";
        assert_eq!(step_of(task, killing).as_deref(), Some("step_3"));
        // A job_42/step_X the user made elsewhere (a systemd user slice).
        let fake = "6:freezer:/user.slice/user-1001.slice/job_42/step_3\n";
        assert_eq!(step_of(fake, killing), None);
        let dots = "6:freezer:/slurm_n1/uid_1001/job_42/step_3/../../x\n";
        assert_eq!(step_of(dots, killing), None);
        let v2 = ("0:", "/system.slice/slurmstepd.scope/job_42");
        let task = "0::/system.slice/slurmstepd.scope/job_42/step_batch/user/task_0\n";
        assert_eq!(step_of(task, v2).as_deref(), Some("step_batch"));
    }

    #[test]
    fn nothing_moves_outside_a_step() {
        // This test process is in no Slurm job's cgroup: nothing to do.
        let done = hand_off(0, 4_000_000_000, "step_0", None);
        assert!(done.moved.is_empty() && done.to.is_empty());
    }
}
