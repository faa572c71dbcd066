//! A step's image keepers and containers handed to the steps that still
//! use them, where Slurm kills each step's cgroup whole when the step ends
//! (`proctrack/cgroup`). A step that joins another step's running
//! container (`--container-name` while it runs, `NAME:exec`, `JOB.STEP`)
//! reads its image through the processes of that step's cgroup: the
//! container's anchor, the keeper and its squashfs server. When the last
//! task of the first step ends on the node, before Slurm kills the step's
//! cgroup, the plugin (root, in the step's slurmstepd) moves what is left
//! in that cgroup into the cgroup of a task of the job that runs in one of
//! their mount namespaces; that step's end then ends them.
//!
//! Only the kernel's records are read (`/proc`, the cgroup file systems),
//! only processes of the job's user are moved, and only from this step's
//! cgroup to one of the same job's: nothing the user wrote steers it.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::epilog::proc_uid;

/// A process's place in the hierarchy whose cgroups Slurm kills: cgroup
/// v1's freezer, or v2's one hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// `true` for cgroup v2.
    pub unified: bool,
    /// The cgroup's path from the hierarchy's root.
    pub path: String,
}

/// Where `cgroups` (`/proc/PID/cgroup`) puts a process in job `job`'s
/// step cgroups, with that step's directory name (`step_0`).
pub fn step_place(cgroups: &str, job: u32) -> Option<(Place, String)> {
    let job_dir = format!("job_{job}");
    cgroups.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let unified = controllers.is_empty();
        if !(unified || controllers.split(',').any(|c| c == "freezer")) {
            return None;
        }
        let dirs: Vec<&str> = path.split('/').collect();
        let step = dirs.windows(2).find_map(|w| {
            let ok = w[1]
                .strip_prefix("step_")
                .is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric()));
            (w[0] == job_dir && ok).then(|| w[1].to_string())
        })?;
        let place = Place {
            unified,
            path: path.to_string(),
        };
        Some((place, step))
    })
}

/// A process in a step cgroup of the job, as `/proc` shows it now.
struct Proc {
    pid: i32,
    uid: Option<u32>,
    mnt: Option<String>,
    place: (Place, String),
}

/// The processes in job `job`'s step cgroups, with their owner and mount
/// namespace. (Not only the user's: a keeper's squashfs server runs as a
/// subordinate id of the user's where there is one.)
fn processes(job: u32) -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
            Some(Proc {
                pid,
                place: step_place(&cgroups, job)?,
                uid: proc_uid(pid),
                mnt: std::fs::read_link(format!("/proc/{pid}/ns/mnt"))
                    .ok()
                    .map(|l| l.to_string_lossy().into_owned()),
            })
        })
        .collect()
}

/// Where the hierarchy of `unified` is mounted (`/proc/self/mountinfo`).
fn hierarchy_root(unified: bool) -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let mut fields = after.split_whitespace();
        let (fstype, _, options) = (fields.next()?, fields.next()?, fields.next()?);
        let mount_point = before.split_whitespace().nth(4)?;
        let wanted = match unified {
            true => fstype == "cgroup2",
            false => fstype == "cgroup" && options.split(',').any(|o| o == "freezer"),
        };
        wanted.then(|| PathBuf::from(mount_point))
    })
}

/// What [`hand_off`] did: the pids it moved and where.
#[derive(Debug, Default)]
pub struct HandedOff {
    /// The processes moved.
    pub moved: Vec<i32>,
    /// The cgroup they went to.
    pub to: Option<PathBuf>,
}

/// Step `step` (`step_0`) of job `job` ends on this node: where a process
/// of `uid` in another step of the job runs in a mount namespace of a
/// process left in this step's cgroup, every process left there (but root's
/// and slurmstepd's own) moves to that process's cgroup.
pub fn hand_off(uid: u32, job: u32, step: &str) -> HandedOff {
    let all = processes(job);
    let own = std::process::id() as i32;
    let ours: Vec<&Proc> = all
        .iter()
        .filter(|p| p.place.1 == step && p.pid != own && p.uid.is_some_and(|u| u != 0))
        .collect();
    // The node's own mount namespace (slurmstepd's) is every plain
    // task's: sharing it is not using a container of this step.
    let node = std::fs::read_link("/proc/self/ns/mnt")
        .ok()
        .map(|l| l.to_string_lossy().into_owned());
    let namespaces: HashSet<&str> = ours
        .iter()
        .filter_map(|p| p.mnt.as_deref())
        .filter(|m| Some(*m) != node.as_deref())
        .collect();
    let Some((target, _)) = all
        .iter()
        .filter(|p| p.uid == Some(uid) && p.place.1 != step)
        .find(|p| p.mnt.as_deref().is_some_and(|m| namespaces.contains(m)))
        .map(|p| &p.place)
    else {
        return HandedOff::default();
    };
    let Some(root) = hierarchy_root(target.unified) else {
        return HandedOff::default();
    };
    let procs = root
        .join(target.path.trim_start_matches('/'))
        .join("cgroup.procs");
    let mut done = HandedOff {
        to: procs.parent().map(Path::to_path_buf),
        ..HandedOff::default()
    };
    for p in ours {
        // (A process that ended meanwhile cannot be moved: nothing lost.)
        if std::fs::write(&procs, p.pid.to_string()).is_ok() {
            done.moved.push(p.pid);
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_place_is_found_in_either_hierarchy() {
        let v1 = "6:freezer:/slurm_n1/uid_1001/job_42/step_0\n4:memory:/x/job_42/step_3\n0::/\n";
        let (place, step) = step_place(v1, 42).unwrap();
        assert_eq!(step, "step_0");
        assert!(!place.unified);
        assert_eq!(place.path, "/slurm_n1/uid_1001/job_42/step_0");
        let v2 = "0::/system.slice/slurmstepd.scope/job_42/step_batch/user/task_0\n";
        let (place, step) = step_place(v2, 42).unwrap();
        assert!(place.unified && step == "step_batch");
        assert_eq!(step_place(v1, 7), None);
        assert_eq!(step_place("4:memory:/x/job_42/step_3\n", 42), None);
        assert_eq!(step_place("0::/job_42/step_../x\n", 42), None);
    }

    #[test]
    fn nothing_moves_outside_a_step() {
        // This test process is in no Slurm step: nothing to hand off.
        let uid = std::fs::metadata("/proc/self").map(|m| {
            use std::os::unix::fs::MetadataExt;
            m.uid()
        });
        let done = hand_off(uid.unwrap(), 4_000_000_000, "step_0");
        assert!(done.moved.is_empty() && done.to.is_none());
    }
}
