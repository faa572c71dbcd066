//! The RUN step's sandbox: a child in its own mount and PID namespaces,
//! pivoted into the stage root, with /proc, a read-only /sys, a few /dev
//! nodes and the host's resolv.conf and hosts.

use std::fs;
use std::path::Path;
use std::process::Command;

use berth_runtime::sys::{self, Fork};

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

/// In the RUN child: mounts, pivot, user, exec. Returns only on failure.
fn sandbox_exec(
    root: &Path,
    argv: &[String],
    env: &[(String, String)],
    workdir: &str,
    user: &str,
) -> String {
    use rustix::thread::UnshareFlags;
    let step = || -> std::result::Result<std::convert::Infallible, String> {
        // Its own PID namespace and procfs: the worker, the base image's
        // squashfs server and the user's other processes are not in it, so
        // /proc/PID/root cannot lead out.
        sys::unshare(UnshareFlags::NEWNS | UnshareFlags::NEWPID)
            .map_err(|e| format!("unshare: {e}"))?;
        if let Fork::Parent(init) = sys::fork().map_err(|e| format!("fork: {e}"))? {
            let code = match sys::wait(init, false) {
                Ok(Some((_, exit))) => exit.as_code(),
                _ => 125,
            };
            sys::exit_now(code);
        }
        let rec = (libc::MS_BIND | libc::MS_REC) as libc::c_ulong;
        let bind = |src: &Path, dst: &Path| {
            sys::mount(Some(src), dst, None, rec, None)
                .map_err(|e| format!("bind {} on {}: {e}", src.display(), dst.display()))
        };
        bind(root, root)?;
        sys::mount(
            Some(Path::new("proc")),
            &root.join("proc"),
            Some("proc"),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            None,
        )
        .map_err(|e| format!("mount /proc: {e}"))?;
        bind(Path::new("/sys"), &root.join("sys"))?;
        read_only_all_the_way_down(&root.join("sys"))?;
        let dev = root.join("dev");
        sys::mount(
            Some(Path::new("tmpfs")),
            &dev,
            Some("tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            Some("mode=755"),
        )
        .map_err(|e| format!("mount /dev: {e}"))?;
        for node in ["null", "zero", "full", "random", "urandom", "tty"] {
            let target = dev.join(node);
            fs::write(&target, "").map_err(|e| format!("create /dev/{node}: {e}"))?;
            bind(&Path::new("/dev").join(node), &target)?;
        }
        for (link, to) in [
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ] {
            let _ = std::os::unix::fs::symlink(to, dev.join(link));
        }
        for d in ["pts", "shm"] {
            let _ = fs::create_dir(dev.join(d));
        }
        let _ = sys::mount(
            Some(Path::new("tmpfs")),
            &dev.join("shm"),
            Some("tmpfs"),
            0,
            Some("mode=1777"),
        );
        // Pseudo-terminals (apt, script, expect): a private devpts.
        if sys::mount(
            Some(Path::new("devpts")),
            &dev.join("pts"),
            Some("devpts"),
            0,
            Some("newinstance,ptmxmode=0666,mode=0620"),
        )
        .is_ok()
        {
            let _ = std::os::unix::fs::symlink("pts/ptmx", dev.join("ptmx"));
        }
        for f in ["etc/resolv.conf", "etc/hosts"] {
            let host = Path::new("/").join(f);
            let target = root.join(f);
            if host.is_file() && target.is_file() {
                let _ = bind(&host, &target);
            }
        }
        std::env::set_current_dir(root).map_err(|e| format!("enter the root: {e}"))?;
        rustix::process::pivot_root(".", ".").map_err(|e| format!("pivot_root: {e}"))?;
        sys::umount(Path::new("."), libc::MNT_DETACH)
            .map_err(|e| format!("detach the old root: {e}"))?;
        fs::create_dir_all(workdir).map_err(|e| format!("working directory {workdir}: {e}"))?;
        std::env::set_current_dir(workdir)
            .map_err(|e| format!("working directory {workdir}: {e}"))?;
        let (uid, gid, home) = resolve_user(user).map_err(|e| e.to_string())?;
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
        rustix::thread::set_no_new_privs(true).map_err(|e| format!("no_new_privs: {e}"))?;
        sys::cloexec_all_but(&[]);
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

/// Remounts the bind at `path` read-only, nosuid and nodev, with every
/// mount below it (a RUN step's /sys: its cgroup, debug and bpf mounts).
fn read_only_all_the_way_down(path: &Path) -> std::result::Result<(), String> {
    let top = fs::File::open(path).map_err(|e| format!("open {}: {e}", path.display()))?;
    match sys::set_mount_attr_recursive(
        std::os::fd::AsFd::as_fd(&top),
        sys::ATTR_RDONLY | sys::ATTR_NOSUID | sys::ATTR_NODEV,
    ) {
        // Before Linux 5.12: the top mount only (sysfs is mounted noexec).
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
            let flags = libc::MS_REMOUNT
                | libc::MS_BIND
                | libc::MS_RDONLY
                | libc::MS_NOSUID
                | libc::MS_NODEV
                | libc::MS_NOEXEC;
            sys::mount(None, path, None, flags, None)
                .map_err(|e| format!("remount {} read-only: {e}", path.display()))
        }
        r => r.map_err(|e| format!("{} read-only: {e}", path.display())),
    }
}
