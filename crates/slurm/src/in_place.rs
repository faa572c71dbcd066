//! Tasks that join their node's shared container from their own process,
//! as Pyxis's tasks join enroot's container in slurmstepd: no berth
//! process starts or stays beside each task. The first task of a node and
//! step runs `berth run --shared KEY --hand-over`, which makes or finds the
//! container and prints a [`JoinPlan`]; the plan is kept in the
//! container's directory for the step's other tasks, each of which enters
//! the container with it and `exec`s its command
//! ([`berth_runtime::shared::in_place`]). Where the plan says the tasks'
//! settings differ (a rank or GPU selection worked out per task, an
//! entrypoint run first), each task starts berth as before.

use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use berth_runtime::node;
use berth_runtime::semantics::valid_name;
use berth_runtime::shared::in_place::{self, HandOver, JoinPlan};
use berth_runtime::{shared, state};

use crate::options::{Mode, Options};

/// Whether the tasks of a step with `opts` may join in place: the step's
/// shared container, its command run without an entrypoint first.
/// Named containers (they outlive steps), saved ones (each task's own)
/// and environment files (their values may be expanded from each task's
/// variables) keep berth per task.
pub fn eligible(opts: &Options) -> bool {
    opts.mode == Mode::Shared
        && opts.name.is_none()
        && opts.save.is_none()
        && opts.environment.is_none()
        && !opts.entrypoint
}

/// berth's command line (`BERTH run ...`, as
/// [`crate::options::berth_argv`] builds it) that hands the join over.
pub fn hand_over_argv(cmd: &[String]) -> Vec<String> {
    let mut out = cmd.to_vec();
    out.insert(2.min(out.len()), "--hand-over".into());
    out
}

/// The file in the container's directory that keeps the hand-over of
/// tasks started as `cmd` (one per command line: a step's tasks share it).
fn plan_file(dir: &Path, cmd: &[String]) -> PathBuf {
    let mut h = std::hash::DefaultHasher::new();
    cmd.hash(&mut h);
    dir.join(format!("plan-{:016x}.json", h.finish()))
}

/// Joins the task's shared container `key` in place and `exec`s `argv`:
/// does not return then. Returns when the task must start berth itself
/// as before (`cmd`), having changed nothing; ends the task with berth's
/// exit code where berth (or the join) failed, berth's message shown.
pub fn join(cmd: &[String], key: &str, env: &[(String, String)], argv: &[String]) {
    // The runtime reads the process's environment (its state directory,
    // the launcher's PMI descriptor): the task's, as berth would see it.
    for (k, _) in std::env::vars_os() {
        std::env::remove_var(k);
    }
    // (set_var panics on a name that is empty or holds `=` or NUL.)
    for (k, v) in env {
        if valid_name(k) && !v.contains('\0') {
            std::env::set_var(k, v);
        }
    }
    if let Err(e) = try_join(cmd, key, env, argv) {
        eprintln!("berth: error: {e}");
        berth_runtime::sys::exit_now(berth_runtime::error::EXIT_BERTH);
    }
}

/// [`join`]; `Ok` where the task starts berth itself.
fn try_join(
    cmd: &[String],
    key: &str,
    env: &[(String, String)],
    argv: &[String],
) -> Result<(), String> {
    let dir = shared::container_dir(key).map_err(|e| e.to_string())?;
    let path = plan_file(&dir, cmd);
    // One task of the step prepares; the others wait for its plan.
    let lock = node::lock_linked(&dir, "plan.lock").map_err(|e| e.to_string())?;
    let mut lock = Some(lock);
    for _ in 0..3 {
        let (handed, mut helper) = match read_plan(&path) {
            Some(h) => (h, None),
            None => {
                let (h, child) = prepare(cmd, env)?;
                write_plan(&path, &h);
                (h, Some(child))
            }
        };
        let plan: JoinPlan = match handed {
            HandOver::Plan(p) if p.argv == argv => *p,
            _ => {
                release(&mut helper);
                return Ok(());
            }
        };
        let mut joined = || {
            drop(lock.take());
            release(&mut helper);
        };
        match in_place::join_in_place(&plan, argv, env, &mut joined) {
            Ok(None) => {
                // The container went: a new plan, for a new container.
                release(&mut helper);
                let _ = std::fs::remove_file(&path);
            }
            Ok(Some(never)) => match never {},
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}

/// Runs berth with `--hand-over`: its plan, and berth still holding the
/// container until [`release`]. Ends the task with berth's exit code
/// where berth failed (it said why).
fn prepare(cmd: &[String], env: &[(String, String)]) -> Result<(HandOver, Child), String> {
    let argv = hand_over_argv(cmd);
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", argv[0]))?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = BufReader::new(out).read_line(&mut line);
    }
    match serde_json::from_str::<HandOver>(line.trim()) {
        Ok(h) => Ok((h, child)),
        Err(_) => {
            drop(child.stdin.take());
            let code = child
                .wait()
                .ok()
                .and_then(|s| s.code())
                .unwrap_or(berth_runtime::error::EXIT_BERTH);
            berth_runtime::sys::exit_now(if code == 0 {
                berth_runtime::error::EXIT_BERTH
            } else {
                code
            })
        }
    }
}

/// Lets the preparing berth go (it holds the container until then) and
/// reaps it.
fn release(helper: &mut Option<Child>) {
    if let Some(mut child) = helper.take() {
        drop(child.stdin.take());
        let _ = child.wait();
    }
}

fn read_plan(path: &Path) -> Option<HandOver> {
    serde_json::from_str(&state::read(path).ok()?).ok()
}

/// Keeps `h` for the step's other tasks (written whole, then renamed; a
/// failure only costs them a berth run of their own).
fn write_plan(path: &Path, h: &HandOver) {
    if let Ok(text) = serde_json::to_string(h) {
        let _ = state::write(path, text.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn only_plain_shared_steps_join_in_place() {
        assert!(eligible(&Options::default()));
        let not = [
            Options {
                mode: Mode::PerTask,
                ..Options::default()
            },
            Options {
                name: Some("n".into()),
                ..Options::default()
            },
            Options {
                save: Some("x.sqsh".into()),
                ..Options::default()
            },
            Options {
                environment: Some("edf".into()),
                ..Options::default()
            },
            Options {
                entrypoint: true,
                ..Options::default()
            },
        ];
        for o in not {
            assert!(!eligible(&o), "{o:?}");
        }
    }

    #[test]
    fn the_hand_over_flag_follows_run() {
        assert_eq!(
            hand_over_argv(&v(&[
                "/usr/bin/berth",
                "run",
                "--shared",
                "k",
                "img",
                "run"
            ])),
            v(&[
                "/usr/bin/berth",
                "run",
                "--hand-over",
                "--shared",
                "k",
                "img",
                "run"
            ])
        );
        // A command's own words are never taken for berth's.
        assert_eq!(
            hand_over_argv(&v(&["b", "run", "img", "app", "run", "--shared"])),
            v(&["b", "run", "--hand-over", "img", "app", "run", "--shared"])
        );
    }

    #[test]
    fn a_step_s_tasks_share_one_plan_file() {
        let dir = Path::new("/x");
        let a = v(&["berth", "run", "--shared", "k", "img", "true"]);
        let b = v(&["berth", "run", "--shared", "k", "img", "false"]);
        assert_eq!(plan_file(dir, &a), plan_file(dir, &a.clone()));
        assert_ne!(plan_file(dir, &a), plan_file(dir, &b));
    }
}
