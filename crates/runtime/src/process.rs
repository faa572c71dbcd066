//! Process supervision, shared by a single run and the tasks of a shared
//! container: the parent that forwards signals and reports the exit code,
//! a PID namespace's init, the command looked up and `exec`ed, and the
//! start-up phases `--timing` reports.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Error, Result, EXIT_BERTH, EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND};
use crate::sys::{self, Exit, SigSet};

/// Signals forwarded to the container when a process sends them to berth.
/// (A terminal's Ctrl-C reaches the command directly: same process group.)
pub const FORWARDED: &[i32] = &[
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// The signals a supervising berth waits for: those it forwards, and
/// SIGCHLD.
pub fn watched_signals() -> SigSet {
    let mut watched: Vec<i32> = FORWARDED.to_vec();
    watched.push(libc::SIGCHLD);
    SigSet::of(&watched)
}

/// Blocks the watched signals (before forking, so none is lost).
pub fn block_watched() -> Result<SigSet> {
    let set = watched_signals();
    sys::process::mask(&set, true).map_err(|e| Error::Setup(format!("sigprocmask: {e}")))?;
    Ok(set)
}

/// Waits for `pid`, forwarding signals that processes send us.
pub fn supervise(pid: libc::pid_t, set: &SigSet) -> Exit {
    loop {
        match sys::process::wait_signal(set) {
            Ok(sig) if sig.signo == libc::SIGCHLD => {
                if let Ok(Some((_, exit))) = sys::wait(pid, true) {
                    return exit;
                }
            }
            Ok(sig) if sig.from_process => sys::kill(pid, sig.signo),
            Ok(_) => {}
            Err(_) => {
                // Cannot wait for signals: fall back to a plain wait.
                return match sys::wait(pid, false) {
                    Ok(Some((_, exit))) => exit,
                    _ => Exit::Code(EXIT_BERTH),
                };
            }
        }
    }
}

/// As PID 1 of a PID namespace: reap every process, forward signals to the
/// command, exit with the command's status.
pub fn init_loop(command: libc::pid_t, set: &SigSet) -> Exit {
    loop {
        match sys::process::wait_signal(set) {
            Ok(sig) if sig.signo == libc::SIGCHLD => {
                while let Ok(Some((pid, exit))) = sys::wait(-1, true) {
                    if pid == command {
                        return exit;
                    }
                }
            }
            Ok(sig) => sys::kill(command, sig.signo),
            Err(_) => return Exit::Code(EXIT_BERTH),
        }
    }
}

/// Makes the calling process not dumpable: processes in the container run
/// as the same user, and must not ptrace berth or open /proc/PID/exe
/// (CVE-2019-5736).
pub fn not_dumpable() {
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
}

/// Descriptors the command must inherit besides stdio: the PMI channel an
/// MPI launcher (Hydra's mpiexec, Slurm's PMI-2) hands each rank and names
/// in `PMI_FD`. The variable is read from berth's own environment (the
/// launcher's), never from the container's, where an image's `Env` could
/// set it; and only a socket is kept, so it cannot pass one of berth's own
/// descriptors (a directory, a namespace) on.
pub fn inherited_fds() -> Vec<i32> {
    std::env::var("PMI_FD")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|fd: &i32| *fd > 2 && sys::is_socket(*fd))
        .into_iter()
        .collect()
}

/// The command's program in the container, or berth's message and exit
/// (127 not found, 126 not executable).
pub fn resolve_or_exit(
    cmd: &str,
    env: &[(String, String)],
    workdir: &str,
    argv0_fallback: bool,
) -> PathBuf {
    match resolve_command(cmd, env, workdir, argv0_fallback) {
        Ok(p) => p,
        Err((code, msg)) => {
            eprintln!("berth: error: {msg}");
            sys::exit_now(code);
        }
    }
}

/// The last step in the container: only the descriptors the command must
/// inherit (stdio, the launcher's PMI socket) stay open, signals
/// take their defaults, the seccomp filter is on (and the root-emulation
/// filter where `emulate_root`), and `program` replaces
/// berth. `timing` is reported with the filter's installation as its last
/// phase (`seccomp`). `keep_also`: descriptors the command inherits
/// besides (the pipe of an entrypoint run first).
pub fn exec_command(
    program: &Path,
    argv: &[String],
    env: &[(String, String)],
    (seccomp, emulate_root): (&crate::seccomp::Seccomp, bool),
    mut timing: Timing,
    keep_also: &[i32],
) -> ! {
    let mut keep = inherited_fds();
    keep.extend_from_slice(keep_also);
    sys::fds::cloexec_all_but(&keep);
    sys::process::reset_signals();
    timing.mark("fds");
    if let Err(e) = crate::seccomp::install(seccomp) {
        eprintln!("berth: error: {e}");
        sys::exit_now(EXIT_BERTH);
    }
    if emulate_root {
        if let Err(e) = crate::seccomp::root_emulation::install() {
            eprintln!("berth: error: cannot install the root-emulation filter: {e}");
            sys::exit_now(EXIT_BERTH);
        }
    }
    timing.mark("seccomp");
    timing.report();
    let err = std::process::Command::new(program)
        .arg0(&argv[0])
        .args(&argv[1..])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .exec();
    let code = match err.raw_os_error() {
        Some(libc::ENOENT) => EXIT_NOT_FOUND,
        _ => EXIT_NOT_EXECUTABLE,
    };
    eprintln!("berth: error: cannot execute {}: {err}", program.display());
    sys::exit_now(code)
}

/// Finds the command in the container, as a shell would: a name with a `/`
/// is a path (relative to the working directory), anything else is searched
/// in the container's PATH. Errors carry exit codes 127 and 126.
pub fn resolve_command(
    cmd: &str,
    env: &[(String, String)],
    workdir: &str,
    argv0_fallback: bool,
) -> Result<PathBuf, (i32, String)> {
    let executable = |p: &Path| -> Option<bool> {
        let m = std::fs::metadata(p).ok()?;
        Some(m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if cmd.contains('/') {
        let p = if cmd.starts_with('/') {
            PathBuf::from(cmd)
        } else {
            Path::new(workdir).join(cmd)
        };
        return match executable(&p) {
            Some(true) => Ok(p),
            None if argv0_fallback && cmd.starts_with('/') => {
                let base = Path::new(cmd)
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or(cmd);
                resolve_command(base, env, workdir, false)
                    .map_err(|(code, msg)| (code, format!("{cmd}: not in the image, and {msg}")))
            }
            Some(false) => Err((
                EXIT_NOT_EXECUTABLE,
                format!("{cmd}: permission denied (not an executable file)"),
            )),
            None => Err((
                EXIT_NOT_FOUND,
                format!("{cmd}: no such file or directory in the container"),
            )),
        };
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .unwrap_or(crate::semantics::DEFAULT_PATH);
    let mut found_non_exec = None;
    for dir in path.split(':').filter(|d| !d.is_empty()) {
        let p = Path::new(dir).join(cmd);
        match executable(&p) {
            Some(true) => return Ok(p),
            Some(false) => {
                found_non_exec.get_or_insert(p);
            }
            None => {}
        }
    }
    match found_non_exec {
        Some(p) => Err((
            EXIT_NOT_EXECUTABLE,
            format!("{cmd}: {} is not executable", p.display()),
        )),
        None => Err((
            EXIT_NOT_FOUND,
            format!("{cmd}: command not found in the image (PATH={path})"),
        )),
    }
}

/// The start-up phases `--timing` prints (`berth timing: keeper=..us ...`).
pub struct Timing {
    on: bool,
    started: Instant,
    marks: Vec<(&'static str, Duration)>,
}

impl Timing {
    /// Phases counted from `started`, printed if `on`.
    pub fn new(on: bool, started: Instant) -> Self {
        Timing {
            on,
            started,
            marks: Vec::new(),
        }
    }

    /// Off: for processes whose phases nobody reports.
    pub fn off() -> Self {
        Self::new(false, Instant::now())
    }

    /// Marks the end of `phase`.
    pub fn mark(&mut self, phase: &'static str) {
        if self.on {
            self.marks.push((phase, self.started.elapsed()));
        }
    }

    /// The phases and their durations, as printed.
    fn line(&self) -> String {
        let mut prev = Duration::ZERO;
        let parts: Vec<String> = self
            .marks
            .iter()
            .map(|(p, t)| {
                let d = t.saturating_sub(prev);
                prev = *t;
                format!("{p}={}us", d.as_micros())
            })
            .collect();
        format!(
            "berth timing: {} total={}us",
            parts.join(" "),
            prev.as_micros()
        )
    }

    /// Prints the phases on stderr, if on.
    pub fn report(&self) {
        if self.on {
            eprintln!("{}", self.line());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_found_as_a_shell_finds_them() {
        let d = tempfile::tempdir().unwrap();
        let bin = d.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::fs::write(bin.join("tool"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(bin.join("tool"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(bin.join("data"), "").unwrap();
        let env = vec![("PATH".to_string(), bin.display().to_string())];
        assert_eq!(
            resolve_command("tool", &env, "/", false),
            Ok(bin.join("tool"))
        );
        assert_eq!(
            resolve_command("data", &env, "/", false).unwrap_err().0,
            EXIT_NOT_EXECUTABLE
        );
        assert_eq!(
            resolve_command("nope", &env, "/", false).unwrap_err().0,
            EXIT_NOT_FOUND
        );
        // srun's absolute path from the submit host: found by base name.
        assert_eq!(
            resolve_command("/usr/bin/tool", &env, "/", true),
            Ok(bin.join("tool"))
        );
        assert_eq!(
            resolve_command("/usr/bin/tool", &env, "/", false)
                .unwrap_err()
                .0,
            EXIT_NOT_FOUND
        );
    }

    #[test]
    fn timing_reports_each_phase_since_the_last() {
        let t0 = Instant::now() - Duration::from_millis(5);
        let mut t = Timing::new(true, t0);
        t.mark("keeper");
        t.mark("exec");
        let line = t.line();
        assert!(line.starts_with("berth timing: keeper="), "{line}");
        assert!(
            line.contains(" exec=") && line.contains(" total="),
            "{line}"
        );
    }
}
