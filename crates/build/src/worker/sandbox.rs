//! The RUN step's sandbox: a child in its own mount and PID namespaces,
//! pivoted into the stage root that the runtime's rootfs assembles
//! (`Profile::BuildStep`).

use std::fs;
use std::path::Path;
use std::process::Command;

use berth_runtime::rootfs::{self, Layers, Profile, RootfsPlan};
use berth_runtime::sys::{self, Fork, Kernel, LINUX};

use super::user::resolve_user;
use crate::{Error, Result};

/// A RUN step: a child in its own mount namespace, pivoted into `root`.
pub(super) fn run_step(
    root: &Path,
    argv: &[String],
    env: &[(String, String)],
    workdir: &str,
    user: &str,
) -> Result<i32> {
    // Mount points the step needs and the image may lack; removed after if
    // they were made here.
    let mut made = Vec::new();
    for d in ["proc", "dev", "sys", "etc"] {
        let p = root.join(d);
        if fs::symlink_metadata(&p).is_err() {
            fs::create_dir(&p).map_err(|e| Error::io("create", &p, e))?;
            made.push(p);
        }
    }
    let mut made_files = Vec::new();
    for f in ["etc/resolv.conf", "etc/hosts"] {
        let p = root.join(f);
        if fs::symlink_metadata(&p).is_err() {
            fs::write(&p, "").map_err(|e| Error::io("create", &p, e))?;
            made_files.push(p);
        }
    }
    // apt's hint to stay root, for this step only (removed before the
    // step's changes are read).
    let hint = super::emulating()
        && berth_runtime::seccomp::root_emulation::write_apt_hint(root, root)
            .map_err(|e| Error::io("write apt's hint in", root, e))?;
    let code = match sys::fork().map_err(|e| Error::io("fork for", root, e))? {
        Fork::Child => {
            let err = sandbox_exec(root, argv, env, workdir, user);
            eprintln!("berth: error: {err}");
            sys::exit_now(126)
        }
        Fork::Parent(pid) => match sys::wait(pid, false) {
            Ok(Some((_, exit))) => exit.as_code(),
            _ => 125,
        },
    };
    if hint {
        let _ = fs::remove_file(root.join(berth_runtime::seccomp::root_emulation::APT_HINT_PATH));
    }
    for f in made_files {
        if fs::metadata(&f).is_ok_and(|m| m.len() == 0) {
            let _ = fs::remove_file(f);
        }
    }
    for d in made.into_iter().rev() {
        let _ = fs::remove_dir(d);
    }
    Ok(code)
}

/// In the RUN child: its own mount and PID namespaces, the step's root
/// assembled by the runtime's rootfs (profile `BuildStep`: a fresh /proc,
/// /sys read-only all the way down, a minimal /dev with its own /dev/shm,
/// the host's resolv.conf and hosts, every target resolved inside the
/// root) and pivoted into, then the user and `exec`. Returns only on
/// failure.
fn sandbox_exec(
    root: &Path,
    argv: &[String],
    env: &[(String, String)],
    workdir: &str,
    user: &str,
) -> String {
    use rustix::thread::UnshareFlags;
    let k: &dyn Kernel = &LINUX;
    let step = || -> std::result::Result<std::convert::Infallible, String> {
        // Its own PID namespace and procfs: the worker, the base image's
        // squashfs server and the user's other processes are not in it, so
        // /proc/PID/root cannot lead out.
        k.unshare(UnshareFlags::NEWNS | UnshareFlags::NEWPID)
            .map_err(|e| format!("unshare: {e}"))?;
        if let Fork::Parent(init) = sys::fork().map_err(|e| format!("fork: {e}"))? {
            let code = match sys::wait(init, false) {
                Ok(Some((_, exit))) => exit.as_code(),
                _ => 125,
            };
            sys::exit_now(code);
        }
        let plan = RootfsPlan {
            profile: Profile::BuildStep,
            layers: Layers::Directory(root),
            fresh_proc: true,
            binds: &[],
            passwd_line: None,
            group_line: None,
            workdir,
            confined: false,
            hidden: &[],
            own_ipc: false,
        };
        rootfs::assemble(k, &plan).map_err(|e| e.to_string())?;
        fs::create_dir_all(workdir).map_err(|e| format!("working directory {workdir}: {e}"))?;
        std::env::set_current_dir(workdir)
            .map_err(|e| format!("working directory {workdir}: {e}"))?;
        let (uid, gid, home) = resolve_user(user).map_err(|e| e.to_string())?;
        if super::emulating() {
            // Before USER's switch, which is then faked too.
            k.set_no_new_privs()
                .map_err(|e| format!("no_new_privs: {e}"))?;
            berth_runtime::seccomp::root_emulation::install()
                .map_err(|e| format!("cannot load the root emulation filter: {e}"))?;
        }
        let mut env = env.to_vec();
        if !env.iter().any(|(k, _)| k == "HOME") {
            env.push(("HOME".into(), home));
        }
        if uid != 0 || gid != 0 {
            let _ = rustix::thread::set_thread_groups(&[rustix::fs::Gid::from_raw(gid)]);
            rustix::thread::set_thread_res_gid(
                rustix::fs::Gid::from_raw(gid),
                rustix::fs::Gid::from_raw(gid),
                rustix::fs::Gid::from_raw(gid),
            )
            .map_err(|e| format!("USER {user}: cannot become group {gid}: {e}"))?;
            rustix::thread::set_thread_res_uid(
                rustix::fs::Uid::from_raw(uid),
                rustix::fs::Uid::from_raw(uid),
                rustix::fs::Uid::from_raw(uid),
            )
            .map_err(|e| format!("USER {user}: cannot become user {uid}: {e}"))?;
        }
        // The step's output is the build's log: on stderr, so that stdout
        // carries only the image id.
        let _ = rustix::stdio::dup2_stdout(rustix::stdio::stderr());
        // No setuid elevation, and nothing the worker holds open (blob
        // files, the plan, the build's lock) reaches the step.
        k.set_no_new_privs()
            .map_err(|e| format!("no_new_privs: {e}"))?;
        sys::fds::cloexec_all_but(&[]);
        use std::os::unix::process::CommandExt;
        let err = Command::new(&argv[0])
            .args(&argv[1..])
            .env_clear()
            .envs(env)
            .exec();
        Err(format!("cannot run {:?}: {err}", argv[0]))
    };
    match step() {
        Ok(never) => match never {},
        Err(e) => e,
    }
}
