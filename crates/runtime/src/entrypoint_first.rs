//! `--entrypoint-first` (Pyxis's `--container-entrypoint`): the image's
//! entrypoint runs on its own before the command. It is given a helper as
//! its command, a shell that hands back the environment it was started
//! with; the command then runs without the entrypoint, in that
//! environment. The entrypoint's output (NGC images print a banner) is
//! kept in memory and shown only when it fails, or always with
//! `--entrypoint-log`.

use std::io::{Read, Seek};
use std::os::fd::{AsRawFd, OwnedFd};

use serde::{Deserialize, Serialize};

use crate::error::EXIT_BERTH;
use crate::process::{self, Timing};
use crate::seccomp::Seccomp;
use crate::sys::{self, Exit, Fork};

/// The entrypoint to run before the command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntrypointFirst {
    /// The entrypoint's command line (the helper comes after it).
    pub argv: Vec<String>,
    /// Show its output as it runs (`--entrypoint-log`).
    pub log: bool,
    /// The entrypoint's own environment where it sees less than the
    /// command (Pyxis's split): the command's then goes under what the
    /// entrypoint leaves. `None`: it sees the command's, and what it
    /// leaves is the command's.
    #[serde(default)]
    pub sees: Option<Vec<(String, String)>>,
    /// Variables over what the entrypoint leaves (`--container-env`).
    #[serde(default)]
    pub after: Vec<(String, String)>,
}

/// The helper's script: its own starting environment (what the
/// entrypoint's `exec "$@"` handed on) to the memfd `{fd}`, reopened
/// through /proc so that any descriptor number works in any shell. The
/// `exit` keeps the shell from replacing itself with `cat`, whose
/// environment would be the shell's exports.
fn helper(fd: i32) -> [String; 3] {
    [
        "/bin/sh".into(),
        "-c".into(),
        format!("cat /proc/$$/environ > /proc/$$/fd/{fd}; exit $?"),
    ]
}

/// Runs the entrypoint and returns the command's environment (`env`, the
/// command's own, as [`EntrypointFirst::sees`] says); on failure says why
/// (with the entrypoint's output) and exits with the entrypoint's status,
/// 127/126 where it cannot be run, or 125. Signals sent to berth while it
/// runs are passed on to it.
pub fn run(
    first: &EntrypointFirst,
    env: &[(String, String)],
    workdir: &str,
    argv0_fallback: bool,
    filters: (&Seccomp, bool),
) -> Vec<(String, String)> {
    let changes = changes_of(first, env, workdir, argv0_fallback, filters);
    command_env(first, env, &changes)
}

/// Runs the entrypoint and returns its changes to the environment it was
/// given; on failure says why and exits (see [`run`]).
fn changes_of(
    first: &EntrypointFirst,
    env: &[(String, String)],
    workdir: &str,
    argv0_fallback: bool,
    filters: (&Seccomp, bool),
) -> Changes {
    match try_run(first, env, workdir, argv0_fallback, filters) {
        Ok(left) => Changes::between(seen(first, env), &left),
        Err((code, msg)) => {
            eprintln!("berth: error: {msg}");
            sys::exit_now(code)
        }
    }
}

/// [`run`] once for all tasks of a shared container (Pyxis runs the
/// entrypoint once when a node's container starts): the first task to
/// take `record`'s lock runs it and writes its changes to the environment
/// there; the others wait for the lock (a signal ends the wait) and apply
/// them to their own. A failure is not recorded: the next task runs it
/// again, and fails alike where the failure is the entrypoint's.
pub fn run_once(
    first: &EntrypointFirst,
    record: &std::fs::File,
    env: &[(String, String)],
    workdir: &str,
    argv0_fallback: bool,
    filters: (&Seccomp, bool),
) -> Vec<(String, String)> {
    use std::io::Write;
    // Waiting for the task that runs it: a signal (scancel, ^C) ends this
    // task, as it would end the entrypoint.
    let watched = process::watched_signals();
    let _ = sys::process::mask(&watched, false);
    let locked = rustix::fs::flock(record, rustix::fs::FlockOperation::LockExclusive);
    let _ = sys::process::mask(&watched, true);
    let mut text = String::new();
    let mut file = record;
    let recorded = locked
        .ok()
        .and_then(|()| {
            file.rewind()
                .and_then(|()| file.read_to_string(&mut text))
                .ok()
        })
        .and_then(|_| serde_json::from_str::<Changes>(&text).ok());
    let changes = match recorded {
        Some(changes) => changes,
        None => {
            let changes = changes_of(first, env, workdir, argv0_fallback, filters);
            let written = serde_json::to_vec(&changes)
                .map_err(std::io::Error::other)
                .and_then(|b| {
                    file.set_len(0)?;
                    file.rewind()?;
                    file.write_all(&b)
                });
            if let Err(e) = written {
                tracing::warn!(
                    "cannot record the entrypoint's changes for the container's other tasks: {e}"
                );
            }
            changes
        }
    };
    let _ = rustix::fs::flock(record, rustix::fs::FlockOperation::Unlock);
    command_env(first, env, &changes)
}

/// What the entrypoint was given: under Pyxis's split its own
/// environment, else the command's.
fn seen<'a>(first: &'a EntrypointFirst, env: &'a [(String, String)]) -> &'a [(String, String)] {
    first.sees.as_deref().unwrap_or(env)
}

/// What the entrypoint changed in the environment it was given: what it
/// set (new or other values) and what it removed. Recorded for the other
/// tasks of a container, which apply it to their own (a task's own
/// variables, a RANK, stay its own); only changes, never a task's whole
/// environment, are written down.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Changes {
    set: Vec<(String, String)>,
    removed: Vec<String>,
}

impl Changes {
    fn between(saw: &[(String, String)], left: &[(String, String)]) -> Self {
        Changes {
            set: left
                .iter()
                .filter(|(k, v)| !saw.iter().any(|(n, w)| n == k && w == v))
                .cloned()
                .collect(),
            removed: saw
                .iter()
                .filter(|(k, _)| !left.iter().any(|(n, _)| n == k))
                .map(|(k, _)| k.clone())
                .collect(),
        }
    }

    /// `env` as the entrypoint would have left it.
    fn applied(&self, env: &[(String, String)]) -> Vec<(String, String)> {
        let kept: Vec<(String, String)> = env
            .iter()
            .filter(|(k, _)| !self.removed.contains(k))
            .cloned()
            .collect();
        layered(&kept, self.set.clone(), &[])
    }
}

/// The command's environment from the entrypoint's changes: under
/// Pyxis's split, the command's own below the entrypoint's environment as
/// it left it; else the command's own as the entrypoint left it;
/// [`EntrypointFirst::after`] over both.
fn command_env(
    first: &EntrypointFirst,
    env: &[(String, String)],
    changes: &Changes,
) -> Vec<(String, String)> {
    match &first.sees {
        Some(sees) => layered(env, changes.applied(sees), &first.after),
        None => layered(&changes.applied(env), Vec::new(), &first.after),
    }
}

fn try_run(
    first: &EntrypointFirst,
    env: &[(String, String)],
    workdir: &str,
    argv0_fallback: bool,
    filters: (&Seccomp, bool),
) -> Result<Vec<(String, String)>, (i32, String)> {
    let shown = first.argv.join(" ");
    let setup = |what: &str, e: &dyn std::fmt::Display| {
        (
            EXIT_BERTH,
            format!("cannot run the image's entrypoint first: {what}: {e}"),
        )
    };
    let sees = first.sees.as_deref().unwrap_or(env);
    let program = process::resolve_command(&first.argv[0], sees, workdir, argv0_fallback)
        .map_err(|(code, msg)| (code, format!("the image's entrypoint: {msg}")))?;
    let log: Option<OwnedFd> = if first.log {
        None
    } else {
        Some(
            rustix::fs::memfd_create("berth-entrypoint", rustix::fs::MemfdFlags::CLOEXEC)
                .map_err(|e| setup("memfd_create", &e))?,
        )
    };
    // A memfd, not a pipe: a process the entrypoint leaves running in the
    // background holds no write end that berth would wait on. Not
    // close-on-exec: the helper inherits it (the command does not).
    let handed = rustix::fs::memfd_create("berth-entrypoint-env", rustix::fs::MemfdFlags::empty())
        .map_err(|e| setup("memfd_create", &e))?;
    let signals = process::block_watched().map_err(|e| setup("block signals", &e))?;
    match sys::fork().map_err(|e| setup("fork", &e))? {
        Fork::Child => {
            if let Ok(null) = std::fs::File::open("/dev/null") {
                let _ = rustix::stdio::dup2_stdin(&null);
            }
            if let Some(log) = &log {
                let _ = rustix::stdio::dup2_stdout(log);
                let _ = rustix::stdio::dup2_stderr(log);
            }
            let fd = handed.as_raw_fd();
            let argv: Vec<String> = first.argv.iter().cloned().chain(helper(fd)).collect();
            process::exec_command(&program, &argv, sees, filters, Timing::off(), &[fd])
        }
        Fork::Parent(pid) => {
            let status = process::supervise(pid, &signals);
            let mut file = std::fs::File::from(handed);
            let mut bytes = Vec::new();
            let read = file.rewind().and_then(|()| file.read_to_end(&mut bytes));
            let output = || log.map(output_of).unwrap_or_default();
            match status {
                Exit::Code(0) if read.is_ok() && !bytes.is_empty() => Ok(parse(&bytes)),
                Exit::Code(0) => Err((
                    EXIT_BERTH,
                    format!(
                        "the image's entrypoint ({shown}) ended without running the command it \
                         was given, so it left no environment for the command (berth gives it a \
                         /bin/sh helper that hands the environment back, as Pyxis does: the \
                         entrypoint must end with exec \"$@\"); run without the entrypoint \
                         first (srun: without --container-entrypoint){}",
                        output()
                    ),
                )),
                other => Err((
                    other.as_code(),
                    format!(
                        "the image's entrypoint ({shown}) failed ({}) before the command ran \
                         (the helper it is given needs /bin/sh and cat in the image){}",
                        match other {
                            Exit::Code(c) => format!("exit status {c}"),
                            Exit::Signal(s) => format!("signal {s}"),
                        },
                        output()
                    ),
                )),
            }
        }
    }
}

/// The entrypoint's output kept in `log`, as lines after the message.
fn output_of(log: OwnedFd) -> String {
    let mut file = std::fs::File::from(log);
    let mut text = String::new();
    if file.rewind().is_err() || file.read_to_string(&mut text).is_err() || text.is_empty() {
        return String::new();
    }
    let lines: Vec<&str> = text.lines().collect();
    let shown = &lines[lines.len().saturating_sub(20)..];
    format!(
        "; its output{}:\n  {}",
        if shown.len() < lines.len() {
            " (last 20 lines)"
        } else {
            ""
        },
        shown.join("\n  ")
    )
}

/// `below`, then what the entrypoint left over it, then `after` over both.
fn layered(
    below: &[(String, String)],
    left: Vec<(String, String)>,
    after: &[(String, String)],
) -> Vec<(String, String)> {
    let mut env = below.to_vec();
    for (k, v) in left.into_iter().chain(after.iter().cloned()) {
        match env.iter_mut().find(|(n, _)| *n == k) {
            Some(slot) => slot.1 = v,
            None => env.push((k, v)),
        }
    }
    env
}

/// `/proc/PID/environ`'s text: `NAME=VALUE` entries ended by NUL.
fn parse(bytes: &[u8]) -> Vec<(String, String)> {
    bytes
        .split(|b| *b == 0)
        .filter_map(|entry| {
            let text = String::from_utf8_lossy(entry);
            let (k, v) = text.split_once('=')?;
            (!k.is_empty()).then(|| (k.to_string(), v.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_is_read_as_proc_shows_it() {
        assert_eq!(
            parse(b"A=1\0PATH=/x:/y\0EMPTY=\0=bad\0noequals\0B=a=b\0"),
            [
                ("A".into(), "1".into()),
                ("PATH".into(), "/x:/y".into()),
                ("EMPTY".into(), String::new()),
                ("B".into(), "a=b".into())
            ]
        );
    }

    #[test]
    fn the_entrypoints_variables_go_over_the_tasks_and_the_named_over_both() {
        let v = |l: &[(&str, &str)]| -> Vec<(String, String)> {
            l.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(
            layered(
                &v(&[("TLS", "1"), ("HOST", "task"), ("N", "task")]),
                v(&[("HOST", "ep"), ("N", "ep"), ("NEW", "ep")]),
                &v(&[("N", "task")])
            ),
            v(&[("TLS", "1"), ("HOST", "ep"), ("N", "task"), ("NEW", "ep")])
        );
    }

    fn vars(l: &[(&str, &str)]) -> Vec<(String, String)> {
        l.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn another_task_of_the_container_gets_the_entrypoints_changes_over_its_own() {
        let v = vars;
        let mut first = EntrypointFirst {
            argv: vec!["/ep.sh".into()],
            log: false,
            sees: None,
            after: v(&[("PINNED", "named")]),
        };
        // The first task had RANK=0; the entrypoint changed A, removed
        // GONE and set NEW.
        let changes = Changes::between(
            &v(&[("A", "1"), ("RANK", "0"), ("GONE", "x")]),
            &v(&[("A", "2"), ("RANK", "0"), ("NEW", "ep")]),
        );
        assert_eq!(changes.removed, ["GONE"]);
        let task = v(&[("A", "1"), ("RANK", "1"), ("GONE", "x"), ("OWN", "t")]);
        assert_eq!(
            command_env(&first, &task, &changes),
            v(&[
                ("A", "2"),
                ("RANK", "1"),
                ("OWN", "t"),
                ("NEW", "ep"),
                ("PINNED", "named")
            ])
        );
        // Pyxis's split: the task's own below the entrypoint's environment
        // as this task's would have been left (its own RANK).
        first.sees = Some(v(&[("A", "1"), ("RANK", "1"), ("GONE", "x")]));
        assert_eq!(
            command_env(&first, &v(&[("TASK", "t"), ("RANK", "1")]), &changes),
            v(&[
                ("TASK", "t"),
                ("RANK", "1"),
                ("A", "2"),
                ("NEW", "ep"),
                ("PINNED", "named")
            ])
        );
    }

    #[test]
    fn the_helper_writes_through_proc() {
        assert_eq!(
            helper(12)[2],
            "cat /proc/$$/environ > /proc/$$/fd/12; exit $?"
        );
    }
}
