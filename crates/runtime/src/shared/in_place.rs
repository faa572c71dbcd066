//! Tasks that join a shared container in place, with no berth process of
//! their own (the Slurm plugin's tasks, as Pyxis's join in slurmstepd):
//! one `berth run --shared KEY --hand-over` per node and step makes or
//! finds the container and hands over a [`JoinPlan`]; each task then
//! enters the container's namespaces from its own process
//! ([`join_in_place`]) and `exec`s its command. Its share of the container
//! is a descriptor its command inherits, so the container stays while any
//! task's command runs, as with a supervising berth.

use std::collections::HashSet;
use std::io::Write;
use std::os::fd::AsRawFd;

use serde::{Deserialize, Serialize};

use super::join::{enter_and_exec, Entry};
use super::{containers_dir, read_alive, Placed, SharedInfo, DECIDE_LOCK};
use crate::container::Process;
use crate::error::{Error, Result};
use crate::node::Deciding;
use crate::seccomp::{RootEmulation, Seccomp};
use crate::semantics::passes_below_image;
use crate::sys::LINUX;

/// What a task needs to join a live shared container without berth: the
/// container's record and the command's settings, as berth worked them out
/// for the task that prepared it (its environment is `host`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinPlan {
    /// The container.
    pub info: SharedInfo,
    /// The command line berth would run (the plugin's tasks pass their
    /// own command, which is this one).
    pub argv: Vec<String>,
    /// The working directory inside.
    pub workdir: String,
    /// See [`Process::argv0_fallback`].
    pub argv0_fallback: bool,
    /// `default`, `unconfined` or a seccomp profile's path.
    pub seccomp: String,
    /// Root emulation for `--fakeroot`.
    pub root_emulation: RootEmulation,
    /// The command's environment, in order, for the preparing task.
    pub env: Vec<(String, String)>,
    /// The names of `env` that are the preparing task's own values: every
    /// task gets its own.
    pub passed: Vec<String>,
    /// The preparing task's names that the container does not get.
    pub dropped: Vec<String>,
}

/// What `--hand-over` prints: a plan, or why each task must start berth
/// itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HandOver {
    /// Tasks join in place with this plan.
    Plan(Box<JoinPlan>),
    /// Tasks run berth each (their settings differ by task).
    PerTask(String),
}

impl JoinPlan {
    /// The plan for `job` in `info`'s container, prepared with the
    /// environment `host`; `passed`: the names of `job`'s environment that
    /// are the caller's own values.
    pub fn new(
        info: &SharedInfo,
        job: &Process,
        host: &[(String, String)],
        passed: &[String],
    ) -> Self {
        let dropped = host
            .iter()
            .filter(|(k, _)| !job.env.iter().any(|(n, _)| n == k))
            .map(|(k, _)| k.clone())
            .collect();
        JoinPlan {
            info: info.clone(),
            argv: job.argv.clone(),
            workdir: job.workdir.clone(),
            argv0_fallback: job.argv0_fallback,
            seccomp: job.seccomp.setting().into_owned(),
            root_emulation: job.root_emulation,
            env: job.env.clone(),
            passed: passed.to_vec(),
            dropped,
        }
    }

    /// The environment of a task whose own is `task`: the container's
    /// values, the task's own where the preparing task's passed through,
    /// and the task's variables the preparing task lacked (per-task ones),
    /// as the plugin's policy passes them.
    pub fn env_for(&self, task: &[(String, String)]) -> Vec<(String, String)> {
        let passed: HashSet<&str> = self.passed.iter().map(String::as_str).collect();
        let dropped: HashSet<&str> = self.dropped.iter().map(String::as_str).collect();
        let own = |k: &str| task.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let mut out: Vec<(String, String)> = self
            .env
            .iter()
            .filter_map(|(k, v)| match passed.contains(k.as_str()) {
                true => own(k).map(|v| (k.clone(), v)),
                false => Some((k.clone(), v.clone())),
            })
            .collect();
        let known: HashSet<String> = out.iter().map(|(k, _)| k.clone()).collect();
        out.extend(
            task.iter()
                .filter(|(k, _)| {
                    !known.contains(k) && !dropped.contains(k.as_str()) && passes_below_image(k)
                })
                .cloned(),
        );
        out
    }
}

impl Placed {
    /// `--hand-over`: prints the [`JoinPlan`] of this task's command as
    /// one JSON line (`passed`: see [`JoinPlan::new`]) and holds the share
    /// until standard input closes (the caller has taken its own share by
    /// then).
    /// The caller has sent a command with an entrypoint run first to
    /// [`HandOver::PerTask`] already.
    pub fn hand_over(self, passed: &[String]) -> Result<i32> {
        let host: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        let plan = JoinPlan::new(&self.info, &self.job, &host, passed);
        print_hand_over(&HandOver::Plan(Box::new(plan)))?;
        let mut sink = std::io::sink();
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut sink);
        drop(self.share);
        Ok(0)
    }
}

/// Prints `h` as one JSON line on standard output.
pub fn print_hand_over(h: &HandOver) -> Result<i32> {
    let line = serde_json::to_string(h)
        .map_err(|e| Error::Setup(format!("cannot write the join plan: {e}")))?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| Error::Setup(format!("cannot write the join plan: {e}")))?;
    Ok(0)
}

/// Joins `plan`'s container from this process and `exec`s `argv` with
/// the environment [`JoinPlan::env_for`] gives `task_env`; `joined` is
/// called once this task holds its share (before any namespace is
/// entered). `Ok(None)`: the container is gone or going (prepare a new
/// plan). Does not return otherwise; a failure after the first namespace
/// is entered ends the process with berth's exit code.
pub fn join_in_place(
    plan: &JoinPlan,
    argv: &[String],
    task_env: &[(String, String)],
    joined: &mut dyn FnMut(),
) -> Result<Option<std::convert::Infallible>> {
    let info = &plan.info;
    let dir = containers_dir()?.join(&info.key);
    let share = {
        let deciding = Deciding::begin(&dir, DECIDE_LOCK)?;
        let same = read_alive(&dir)
            .is_some_and(|now| now.pid == info.pid && now.start_time == info.start_time);
        if !same {
            return Ok(None);
        }
        let Some(share) = deciding.try_share()? else {
            return Ok(None);
        };
        deciding.end();
        share
    };
    joined();
    let fd = share.as_file().as_raw_fd();
    // The command holds the share: it outlives the exec.
    rustix::io::fcntl_setfd(share.as_file(), rustix::io::FdFlags::empty())
        .map_err(|e| Error::sys("keep the container's share", None, e))?;
    let job = Process {
        argv: argv.to_vec(),
        env: plan.env_for(task_env),
        workdir: plan.workdir.clone(),
        argv0_fallback: plan.argv0_fallback,
        create_workdir: false,
        seccomp: Seccomp::parse(&plan.seccomp, info.mode)?,
        root_emulation: plan.root_emulation,
        entrypoint_first: None,
    };
    let entry = Entry::open(info)?;
    let Err(e) = enter_and_exec(&LINUX, entry, &job, None, &[fd]);
    eprintln!("berth: error: {e}");
    crate::sys::exit_now(crate::error::EXIT_BERTH)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn plan(host: &[(&str, &str)], env: &[(&str, &str)], passed: &[&str]) -> JoinPlan {
        let job = Process {
            argv: vec!["true".into()],
            env: kv(env),
            workdir: "/".into(),
            argv0_fallback: true,
            create_workdir: false,
            seccomp: Seccomp::Default,
            root_emulation: RootEmulation::default(),
            entrypoint_first: None,
        };
        let info = SharedInfo {
            key: "k".into(),
            image: "i".into(),
            image_id: "sha256:0".into(),
            pid: 1,
            start_time: 1,
            keeper_pid: 1,
            mode: crate::idmap::IdMode::Identity,
            fingerprint: String::new(),
            created: 0,
            workdir: "/".into(),
            env: Vec::new(),
            namespaces: Vec::new(),
            upper_fd: None,
            squashfs: None,
            squashfs_offset: 0,
            step: None,
        };
        let passed: Vec<String> = passed.iter().map(|s| s.to_string()).collect();
        JoinPlan::new(&info, &job, &kv(host), &passed)
    }

    #[test]
    fn each_task_keeps_its_own_values_and_gets_the_containers() {
        let p = plan(
            &[
                ("SLURM_PROCID", "0"),
                ("PATH", "/host/bin"),
                ("LD_PRELOAD", "/host/x.so"),
                ("FOO", "task"),
                ("TERM", "xterm"),
            ],
            &[
                ("PATH", "/usr/bin"),
                ("SLURM_PROCID", "0"),
                ("FOO", "image"),
                ("TERM", "xterm"),
                ("HOME", "/home/u"),
            ],
            &["SLURM_PROCID", "TERM"],
        );
        let env = p.env_for(&kv(&[
            ("SLURM_PROCID", "7"),
            ("PATH", "/host/bin"),
            ("LD_PRELOAD", "/host/x.so"),
            ("FOO", "task"),
            ("TERM", "vt100"),
            ("PMI_RANK", "7"),
            ("LD_LIBRARY_PATH", "/host/lib"),
        ]));
        assert_eq!(
            env,
            kv(&[
                ("PATH", "/usr/bin"),
                ("SLURM_PROCID", "7"),
                ("FOO", "image"),
                ("TERM", "vt100"),
                ("HOME", "/home/u"),
                ("PMI_RANK", "7"),
            ])
        );
    }

    #[test]
    fn the_hand_over_line_round_trips() {
        let h = HandOver::Plan(Box::new(plan(&[("A", "1")], &[("A", "1")], &["A"])));
        let line = serde_json::to_string(&h).unwrap();
        assert_eq!(serde_json::from_str::<HandOver>(&line).unwrap(), h);
        let per = HandOver::PerTask("why".into());
        let line = serde_json::to_string(&per).unwrap();
        assert_eq!(line, r#"{"per_task":"why"}"#);
    }
}
