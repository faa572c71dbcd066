//! Running OCI hooks: the OCI state on stdin, a timeout, the exit status
//! checked, and the environment protocol (`BERTH_SETENV NAME=VALUE` lines
//! on stdout set container variables; see berth-inject's `hooks`).

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// One hook call.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Hook {
    /// OCI stage.
    pub stage: String,
    /// Program.
    pub path: PathBuf,
    /// argv, with argv\[0\].
    pub args: Vec<String>,
    /// Environment, `NAME=VALUE`.
    pub env: Vec<String>,
    /// Time limit.
    pub timeout: Option<Duration>,
}

/// The OCI state a hook reads on stdin.
pub fn state_json(
    id: &str,
    status: &str,
    pid: i32,
    bundle: &std::path::Path,
    annotations: &[(String, String)],
) -> String {
    let ann: serde_json::Map<String, serde_json::Value> = annotations
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    serde_json::json!({
        "ociVersion": "1.0.2",
        "id": id,
        "status": status,
        "pid": pid,
        "bundle": bundle,
        "annotations": ann,
    })
    .to_string()
}

/// Runs `hook` with `state` on stdin; returns the variables it sets, or
/// why it failed (its stderr included).
pub fn run(hook: &Hook, state: &str) -> Result<Vec<(String, String)>, String> {
    let what = format!("{} hook {}", hook.stage, hook.path.display());
    if berth_config::root::is_real_root() {
        // Root runs only programs nobody else can replace.
        berth_config::root::root_may_trust(&hook.path).map_err(|why| {
            format!("{what}: not run as root: {why}; make it root's and not writable by others")
        })?;
    }
    let mut cmd = Command::new(&hook.path);
    if let Some((arg0, rest)) = hook.args.split_first() {
        cmd.arg0(arg0).args(rest);
    }
    cmd.env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .envs(hook.env.iter().filter_map(|kv| kv.split_once('=')))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("{what}: cannot start: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A hook that does not read its state must not fail the write.
        let _ = stdin.write_all(state.as_bytes());
    }
    // A pidfd names this child even after the waiter reaps it: the
    // timeout's kill can never reach a process that reused its pid.
    let pid = child.id() as i32;
    let pidfd = rustix::process::Pid::from_raw(pid)
        .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match hook.timeout {
        Some(t) => match rx.recv_timeout(t) {
            Ok(r) => r,
            Err(_) => {
                match &pidfd {
                    Some(fd) => {
                        let _ =
                            rustix::process::pidfd_send_signal(fd, rustix::process::Signal::KILL);
                    }
                    // Kernels before 5.3.
                    None => crate::sys::kill(pid, libc::SIGKILL),
                }
                let _ = rx.recv();
                return Err(format!("{what}: timed out after {} s", t.as_secs()));
            }
        },
        None => rx.recv().map_err(|e| format!("{what}: {e}"))?,
    }
    .map_err(|e| format!("{what}: {e}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "{what} failed ({}){}{}",
            out.status,
            if stderr.trim().is_empty() { "" } else { ": " },
            stderr.trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("BERTH_SETENV "))
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect())
}

/// The hand-shake between berth and the container process around the
/// hooks of the stages before the command starts: the container process
/// says `ready PID` once its root is in place; berth runs createRuntime
/// and createContainer hooks, then sends the variables they set and `go`.
pub struct Sync {
    to_parent: (std::os::fd::OwnedFd, std::os::fd::OwnedFd),
    to_child: (std::os::fd::OwnedFd, std::os::fd::OwnedFd),
}

fn pipe() -> std::io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(std::io::Error::from)
}

/// Everything until the other side closes its end: each side writes its
/// one message and closes, so end of file is the end of the message (or
/// the other side's death).
fn read_to_end(fd: &std::os::fd::OwnedFd) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match rustix::io::read(fd, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Sync {
    /// Two pipes, before the fork.
    pub fn new() -> std::io::Result<Sync> {
        Ok(Sync {
            to_parent: pipe()?,
            to_child: pipe()?,
        })
    }

    /// In the container process: says it is ready, waits for berth, and
    /// returns the variables the hooks set; `None` if berth stopped the
    /// start (a hook failed).
    pub fn child_ready(self, pid: i32) -> Option<Vec<(String, String)>> {
        let Sync {
            to_parent: (_r, w),
            to_child: (r, _w),
        } = self;
        drop(_w);
        let _ = rustix::io::write(&w, format!("ready {pid}\n").as_bytes());
        drop(w);
        let text = read_to_end(&r);
        let mut env = Vec::new();
        for line in text.lines() {
            if line == "go" {
                return Some(env);
            }
            if let Some((k, v)) = line.strip_prefix("env ").and_then(|kv| kv.split_once('=')) {
                env.push((k.to_string(), v.to_string()));
            }
        }
        None
    }

    /// In berth, right after the fork: keeps berth's ends only (so a
    /// container process that dies early reads as end of file).
    pub fn parent_side(self) -> ParentEnd {
        let Sync {
            to_parent: (from_child, w),
            to_child: (r, to_child),
        } = self;
        drop(w);
        drop(r);
        ParentEnd {
            from_child,
            to_child,
        }
    }
}

/// berth's ends of a [`Sync`].
pub struct ParentEnd {
    from_child: std::os::fd::OwnedFd,
    to_child: std::os::fd::OwnedFd,
}

impl ParentEnd {
    /// Waits for the container process; its pid, or `None` if it ended
    /// before it was ready.
    pub fn wait(&self) -> Option<i32> {
        let text = read_to_end(&self.from_child);
        text.trim().strip_prefix("ready ")?.parse().ok()
    }

    /// Lets the container process go on with these variables.
    pub fn go(self, env: &[(String, String)]) {
        let mut msg = String::new();
        for (k, v) in env {
            // One variable per line: a value with a newline cannot pass.
            if !v.contains('\n') && !k.contains(['\n', '=']) {
                msg.push_str(&format!("env {k}={v}\n"));
            }
        }
        msg.push_str("go\n");
        let _ = rustix::io::write(&self.to_child, msg.as_bytes());
    }
}

/// A minimal OCI bundle for hooks that read `config.json` (the root is
/// the container process's, through /proc).
pub fn write_bundle(
    dir: &std::path::Path,
    pid: i32,
    argv: &[String],
    env: &[(String, String)],
    cwd: &str,
    annotations: &[(String, String)],
) -> std::io::Result<()> {
    // A symlink planted at the bundle's (per-run) name is not followed.
    if std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
        std::fs::remove_file(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    let ann: serde_json::Map<String, serde_json::Value> = annotations
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    let config = serde_json::json!({
        "ociVersion": "1.0.2",
        "root": { "path": format!("/proc/{pid}/root") },
        "process": {
            "args": argv,
            "env": env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
            "cwd": cwd,
        },
        "annotations": ann,
    });
    // In the runtime directory: written fresh, never through a symlink.
    crate::state::write(&dir.join("config.json"), config.to_string().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, timeout: Option<u64>) -> Hook {
        Hook {
            stage: "createRuntime".into(),
            path: "/bin/sh".into(),
            args: vec!["sh".into(), "-c".into(), script.into()],
            env: vec!["X=1".into()],
            timeout: timeout.map(Duration::from_secs),
        }
    }

    #[test]
    fn state_env_protocol_failures_and_timeouts() {
        let state = state_json("c1", "created", 42, std::path::Path::new("/b"), &[]);
        let env = run(
            &sh(
                "read s; case \"$s\" in *'\"pid\":42'*) echo \"BERTH_SETENV FROM_HOOK=$X\";; esac; echo other",
                None,
            ),
            &state,
        )
        .unwrap();
        assert_eq!(env, vec![("FROM_HOOK".to_string(), "1".to_string())]);
        let err = run(&sh("echo broken >&2; exit 3", None), &state).unwrap_err();
        assert!(
            err.contains("exit status: 3") && err.contains("broken"),
            "{err}"
        );
        let err = run(&sh("sleep 5", Some(1)), &state).unwrap_err();
        assert!(err.contains("timed out"), "{err}");
    }
}
