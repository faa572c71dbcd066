//! Running OCI hooks: the OCI state on stdin, a timeout, the exit status
//! checked, and the environment protocol (`BERTH_SETENV NAME=VALUE` lines
//! on stdout set container variables; see berth-inject's `hooks`).
//!
//! - [`Sync`]: the hand-shake with the container process around the
//!   stages before the command starts.
//! - [`ContainerHooks`]: a container's hooks run at their stages, with the
//!   OCI state and bundle.

mod stages;
mod sync;

pub use stages::ContainerHooks;
pub use sync::{ParentEnd, Sync};

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
/// why it failed (its stderr included). Its environment is `base` (the
/// container's, for a hook run inside the container; empty for one run by
/// berth, which then gets a standard PATH) under the hook's own `env`. What
/// a successful startContainer hook (a module's, in the container) writes
/// on stderr is passed on to berth's; other stages' stay quiet (CDI hooks
/// log there). It starts with no signal blocked, in a process group of its
/// own (a terminal's Ctrl-C is the command's, not a server's a hook
/// started).
pub fn run(
    hook: &Hook,
    state: &str,
    base: &[(String, String)],
) -> Result<Vec<(String, String)>, String> {
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
    cmd.env_clear();
    if !base.iter().any(|(k, _)| k == "PATH") {
        cmd.env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        );
    }
    cmd.envs(base.iter().map(|(k, v)| (k, v)))
        .envs(hook.env.iter().filter_map(|kv| kv.split_once('=')))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    crate::sys::process::reset_signals_in_child(&mut cmd);
    cmd.process_group(0);
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
    if hook.stage == "startContainer" && !out.stderr.is_empty() {
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(&out.stderr);
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("BERTH_SETENV "))
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect())
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
            &[],
        )
        .unwrap();
        assert_eq!(env, vec![("FROM_HOOK".to_string(), "1".to_string())]);
        // A hook in the container gets its environment, under the hook's.
        let base = [("X".to_string(), "0".into()), ("Y".to_string(), "2".into())];
        let env = run(&sh("echo \"BERTH_SETENV SEEN=$X$Y\"", None), &state, &base).unwrap();
        assert_eq!(env, vec![("SEEN".to_string(), "12".to_string())]);
        // berth's blocked signals (this thread's, here) do not reach it.
        let usr2 = crate::sys::SigSet::of(&[libc::SIGUSR2]);
        crate::sys::process::mask(&usr2, true).unwrap();
        let env = run(
            &sh(
                "echo \"BERTH_SETENV BLK=$(grep SigBlk /proc/$$/status | cut -f2)\"",
                None,
            ),
            &state,
            &[],
        );
        crate::sys::process::mask(&usr2, false).unwrap();
        assert_eq!(
            env.unwrap(),
            vec![("BLK".to_string(), "0000000000000000".to_string())]
        );
        let err = run(&sh("echo broken >&2; exit 3", None), &state, &[]).unwrap_err();
        assert!(
            err.contains("exit status: 3") && err.contains("broken"),
            "{err}"
        );
        let err = run(&sh("sleep 5", Some(1)), &state, &[]).unwrap_err();
        assert!(err.contains("timed out"), "{err}");
    }
}
