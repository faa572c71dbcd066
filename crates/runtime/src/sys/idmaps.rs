//! Writing the id maps of a fresh user namespace.
#![allow(clippy::disallowed_methods)]

use std::io;

/// Writes the id maps of the calling process's (fresh) user namespace:
/// `setgroups` denied first (required to map groups unprivileged), then
/// one `uid_map` and one `gid_map` line.
///
/// The files are opened as `/proc/PID/...` without following any symlink
/// and must be on a procfs: after `pivot_root` /proc is the container's,
/// and an image whose `/proc` is a symlink into a later bind (the
/// CVE-2019-16884 pattern) would otherwise take the writes.
pub fn write_id_maps(uid_line: &str, gid_line: &str) -> io::Result<()> {
    write_id_maps_of(std::process::id(), uid_line, gid_line)
}

/// [`write_id_maps`] for the maps of this process's namespace that are
/// not written yet (a map, once written, cannot be written again; a gid
/// map written by newgidmap needs no `setgroups` denial).
pub fn write_missing_maps(uid_line: &str, gid_line: &str) -> io::Result<()> {
    let pid = std::process::id();
    let written = |name: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/{name}")).is_ok_and(|m| !m.trim().is_empty())
    };
    if !written("uid_map") {
        write_proc_file(pid, "uid_map", &format!("{uid_line}\n"))?;
    }
    if !written("gid_map") {
        write_proc_file(pid, "setgroups", "deny")?;
        write_proc_file(pid, "gid_map", &format!("{gid_line}\n"))?;
    }
    Ok(())
}

/// [`write_id_maps`] for the process `pid` (the caller's child, whose
/// namespace the caller may map).
pub fn write_id_maps_of(pid: u32, uid_line: &str, gid_line: &str) -> io::Result<()> {
    write_proc_file(pid, "setgroups", "deny")?;
    write_uid_gid_maps_of(pid, uid_line, gid_line)
}

/// Writes the uid and gid maps of the process `pid` without denying
/// `setgroups` (a map the writer's capabilities above allow, with
/// several ids).
pub fn write_uid_gid_maps_of(pid: u32, uid_map: &str, gid_map: &str) -> io::Result<()> {
    write_proc_file(pid, "uid_map", &format!("{uid_map}\n"))?;
    write_proc_file(pid, "gid_map", &format!("{gid_map}\n"))
}

/// `/proc/PID/NAME` opened for writing without following a symlink, and
/// refused unless it is on a procfs.
fn write_proc_file(pid: u32, name: &str, text: &str) -> io::Result<()> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    use std::io::Write;
    const PROC_SUPER_MAGIC: i64 = 0x9fa0;
    let path = format!("/proc/{pid}/{name}");
    let flags = OFlags::WRONLY | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat2(
        rustix::fs::CWD,
        &path,
        flags,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS,
    ) {
        // Before Linux 5.6: one component at a time, none followed.
        Err(rustix::io::Errno::NOSYS) => {
            let path_only = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let proc_dir = rustix::fs::open("/proc", path_only, Mode::empty())?;
            let dir = rustix::fs::openat(&proc_dir, pid.to_string(), path_only, Mode::empty())?;
            rustix::fs::openat(&dir, name, flags | OFlags::NOFOLLOW, Mode::empty())?
        }
        other => other?,
    };
    if rustix::fs::fstatfs(&fd)?.f_type as i64 != PROC_SUPER_MAGIC {
        return Err(io::Error::other(format!(
            "{path} is not on a proc file system"
        )));
    }
    std::fs::File::from(fd).write_all(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::process::{exit_now, wait};
    use crate::sys::{make_rslave, Kernel, LINUX};
    use rustix::thread::UnshareFlags;

    /// L6 of the security review: with something other than a procfs at
    /// /proc (here a tmpfs in a private mount namespace, holding plain
    /// files and then a symlink where /proc/PID/ would be), the id maps are
    /// not written there.
    #[test]
    fn id_maps_are_written_only_to_a_procfs() {
        // SAFETY: the child makes only system calls and exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = (|| -> Option<i32> {
                let (uid, gid) = (
                    rustix::process::getuid().as_raw(),
                    rustix::process::getgid().as_raw(),
                );
                LINUX.unshare(UnshareFlags::NEWUSER).ok()?;
                // On the real procfs: written.
                write_id_maps(&format!("0 {uid} 1"), &format!("0 {gid} 1")).ok()?;
                LINUX
                    .unshare(UnshareFlags::NEWUSER | UnshareFlags::NEWNS)
                    .ok()?;
                write_id_maps("0 0 1", "0 0 1").ok()?;
                make_rslave(&LINUX).ok()?;
                let proc_dir = std::path::Path::new("/proc");
                LINUX
                    .mount(Some(proc_dir), proc_dir, Some("tmpfs"), 0, None)
                    .ok()?;
                let me = proc_dir.join(std::process::id().to_string());
                std::fs::create_dir(&me).ok()?;
                for f in ["setgroups", "uid_map", "gid_map"] {
                    std::fs::write(me.join(f), "").ok()?;
                }
                // As a procfs has it (the previous code wrote through it).
                std::os::unix::fs::symlink(std::process::id().to_string(), proc_dir.join("self"))
                    .ok()?;
                let plain = write_id_maps("0 0 1", "0 0 1");
                if !plain.is_err_and(|e| e.to_string().contains("not on a proc")) {
                    return Some(2);
                }
                std::fs::remove_dir_all(&me).ok()?;
                std::os::unix::fs::symlink("/tmp", &me).ok()?;
                Some(if write_id_maps("0 0 1", "0 0 1").is_err() {
                    0
                } else {
                    3
                })
            })()
            .unwrap_or(4);
            exit_now(code);
        }
        let (_, exit) = wait(pid, false).unwrap().unwrap();
        assert_eq!(exit.as_code(), 0);
    }
}
