//! The processes a keeper forks to hold what its runs join, each of which
//! only sleeps once set up (and dies with the keeper):
//!
//! - the *prepared-root holder* builds the root file system of the
//!   keeper's [`Template`] in a mount namespace of its own, which default
//!   runs copy instead of building theirs (`holder.pid`);
//! - the *identity-namespace holder* makes the user namespace nested in
//!   the keeper's that every run joins before `exec`, whose maps the
//!   keeper writes (`identity.pid`).

use std::path::Path;
use std::time::Duration;

use rustix::thread::UnshareFlags;

use crate::error::{Error, Result};
use crate::idmap::NestedMaps;
use crate::rootfs::{self, Layers, Profile, RootfsPlan};
use crate::state;
use crate::sys::{self, idmaps, Fork, Kernel};

use super::Template;

/// Dies with its parent (the keeper), then sleeps for good.
fn hold_forever() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// A helper's process; killed and reaped when dropped, its pid file gone.
pub(super) struct Helper {
    pid: i32,
    pid_file: std::path::PathBuf,
}

impl Drop for Helper {
    fn drop(&mut self) {
        sys::kill(self.pid, libc::SIGKILL);
        let _ = sys::wait(self.pid, false);
        // Only its own record: a keeper started beside this one keeps its
        // helpers' files.
        state::remove_pid(&self.pid_file, self.pid as u32);
    }
}

/// Forks the prepared-root holder of `dir`'s template; `None` (runs build
/// their root) if there is no template or it could not be prepared.
pub(super) fn start_prepared_root(
    k: &dyn Kernel,
    dir: &Path,
    hidden: Option<&Path>,
) -> Option<Helper> {
    let text = state::read(&dir.join("template.json")).ok()?;
    let template: Template = serde_json::from_str(&text).ok()?;
    let (reader, writer) = rustix::pipe::pipe().ok()?;
    match sys::fork().ok()? {
        Fork::Child => {
            drop(reader);
            let result = (|| -> Result<()> {
                rustix::process::set_parent_process_death_signal(Some(
                    rustix::process::Signal::KILL,
                ))
                .map_err(|e| Error::sys("ask to die with the keeper", None, e))?;
                k.unshare(UnshareFlags::NEWNS)
                    .map_err(|e| Error::sys("unshare the mount namespace", None, e))?;
                super::keep_out_of_binds(k, dir);
                let (image, stage) = (dir.join("mnt/image"), dir.join("mnt/stage"));
                let binds = super::data::resolve(&template.binds, dir);
                let hidden: Vec<&Path> = hidden.into_iter().collect();
                let plan = RootfsPlan {
                    profile: Profile::Container,
                    layers: Layers::Overlay {
                        image: &image,
                        stage: &stage,
                        writable: false,
                        persistent: None,
                        // A keeper's template: always in its user namespace.
                        user_xattr: true,
                        // Joined runs that emulate root do not write.
                        apt_hint: false,
                        loader_cache: None,
                        overlay: berth_config::RootOverlay::from_env(),
                    },
                    fresh_proc: false,
                    confined: false,
                    binds: &binds,
                    passwd_line: template.passwd_line.as_deref(),
                    group_line: template.group_line.as_deref(),
                    workdir: "/",
                    hidden: &hidden,
                    own_ipc: false,
                };
                rootfs::prepare(k, &plan).map(drop)
            })();
            let msg = match &result {
                Ok(()) => "ok".to_string(),
                Err(e) => format!("{e}"),
            };
            let _ = rustix::io::write(&writer, msg.as_bytes());
            drop(writer);
            if result.is_err() {
                sys::exit_now(1);
            }
            hold_forever()
        }
        Fork::Parent(pid) => {
            drop(writer);
            let mut buf = [0u8; 512];
            let n = rustix::io::read(&reader, &mut buf).unwrap_or(0);
            let msg = String::from_utf8_lossy(&buf[..n]).to_string();
            if msg != "ok" {
                eprintln!("berth: the prepared root failed ({msg}); runs will build their own");
                let _ = sys::wait(pid, false);
                return None;
            }
            let pid_file = dir.join("holder.pid");
            let helper = Helper { pid, pid_file };
            state::write_pid(&helper.pid_file, pid as u32).ok()?;
            Some(helper)
        }
    }
}

/// Forks the identity-namespace holder of `dir` with `maps`; `None` (runs
/// make their own) if it cannot be set up.
pub(super) fn start_identity_ns(k: &dyn Kernel, dir: &Path, maps: &NestedMaps) -> Option<Helper> {
    let (ready_r, ready_w) = rustix::pipe::pipe().ok()?;
    let (mapped_r, mapped_w) = rustix::pipe::pipe().ok()?;
    let unmapped_root = crate::idmap::maps_no_root();
    match sys::fork().ok()? {
        Fork::Child => {
            drop(ready_r);
            drop(mapped_w);
            // Dumpable until mapped where the keeper's namespace maps no
            // root (the user keeps host ids): the kernel gives the /proc
            // files of a process that is not to the root of its memory's
            // user namespace, and the keeper could not open them. Nothing
            // of the user's runs exists yet.
            let dumpable = || {
                rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::Dumpable)
            };
            let ok = (!unmapped_root || dumpable().is_ok())
                && rustix::process::set_parent_process_death_signal(Some(
                    rustix::process::Signal::KILL,
                ))
                .is_ok()
                && k.unshare(UnshareFlags::NEWUSER).is_ok();
            let _ = rustix::io::write(&ready_w, if ok { b"y" } else { b"n" });
            drop(ready_w);
            if !ok {
                sys::exit_now(1);
            }
            // Wait until the keeper has written the maps, then hold.
            let mut b = [0u8; 1];
            let _ = rustix::io::read(&mapped_r, &mut b);
            crate::process::not_dumpable();
            hold_forever()
        }
        Fork::Parent(pid) => {
            drop(ready_w);
            drop(mapped_r);
            let mut b = [0u8; 1];
            let n = rustix::io::read(&ready_r, &mut b).unwrap_or(0);
            let mapped = n == 1 && b[0] == b'y' && write_maps(pid, maps).is_ok();
            let _ = rustix::io::write(&mapped_w, b"y");
            drop(mapped_w);
            let helper = Helper {
                pid,
                pid_file: dir.join("identity.pid"),
            };
            if !mapped || state::write_pid(&helper.pid_file, pid as u32).is_err() {
                eprintln!(
                    "berth: the keeper's nested user namespace could not be set up; runs make their own"
                );
                return None;
            }
            Some(helper)
        }
    }
}

/// Writes `maps` for the child `pid` (whose namespace is nested in ours).
fn write_maps(pid: i32, maps: &NestedMaps) -> std::io::Result<()> {
    let pid = pid as u32;
    if maps.deny_setgroups {
        idmaps::write_id_maps_of(pid, &maps.uid_map, &maps.gid_map)
    } else {
        idmaps::write_uid_gid_maps_of(pid, &maps.uid_map, &maps.gid_map)
    }
}
