//! The keeper process, `berth __keeper DIR IMAGE MODE IDLE_SECS`: started
//! inside its user and mount namespaces (`--in-ns`, by
//! [`super::client`], so its memory belongs to its user namespace; real
//! root enters a mount namespace itself), it mounts the image, starts its
//! helpers, prints `ready PID` and serves until no run has used it for
//! `IDLE_SECS`.

use std::fs::{self, File};
use std::io::Write;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::idmap::{self, IdMode, NestedMaps};
use crate::node::{self, LeaseFiles, Served};
use crate::state;
use crate::sys::{self, Kernel, LINUX};
use crate::{image_mount, process};

use super::{data, helpers, DECIDE_LOCK};

/// How often an idle keeper looks for runs (and for its server).
const POLL: Duration = Duration::from_millis(250);

/// The keeper's arguments.
#[derive(Debug, PartialEq, Eq)]
struct Args<'a> {
    dir: PathBuf,
    /// A path, or `fd:N` for a descriptor the starting run handed down.
    image: &'a str,
    mode: IdMode,
    idle: Duration,
    /// Started inside its namespaces: the ids inside and the
    /// caller's ids outside.
    in_ns: Option<((u32, u32), (u32, u32))>,
}

fn parse(args: &[String]) -> Result<Args<'_>> {
    let (args, in_ns) = match args {
        [a @ .., flag, uid, gid, huid, hgid] if flag == "--in-ns" => {
            let n = |s: &String| s.parse::<u32>().ok();
            match (n(uid), n(gid), n(huid), n(hgid)) {
                (Some(u), Some(g), Some(hu), Some(hg)) => (a, Some(((u, g), (hu, hg)))),
                _ => return Err(Error::Setup("bad --in-ns ids".into())),
            }
        }
        _ => (args, None),
    };
    let [dir, image, mode, idle] = args else {
        return Err(Error::Setup(
            "usage: berth __keeper DIR IMAGE MODE IDLE".into(),
        ));
    };
    Ok(Args {
        dir: PathBuf::from(dir),
        image,
        mode: IdMode::parse(mode).ok_or_else(|| Error::Setup(format!("bad mode {mode}")))?,
        idle: Duration::from_secs(idle.parse().unwrap_or(30)),
        in_ns,
    })
}

/// The keeper process. Prints `ready PID` on stdout once the image is
/// mounted, then serves until idle; the exit code.
pub fn keeper_main(args: &[String]) -> i32 {
    match run(&LINUX, args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("berth: error: {e}");
            1
        }
    }
}

fn run(k: &dyn Kernel, raw: &[String]) -> Result<()> {
    let args = parse(raw)?;
    node::adopt_state_dir(&args.dir);
    // Leave the caller's session: a Ctrl-C or hang-up of the terminal that
    // started the first run must not take the mount from later runs.
    let _ = rustix::process::setsid();
    let image_file = open_image(args.image)?;
    let (uid, gid, host_ids) = match args.in_ns {
        Some((inside, outside)) => {
            // Started in its own namespaces (`client::start`), which the
            // starting run maps meanwhile.
            idmap::finish_own_maps(inside, outside)?;
            // The keeper's memory belongs to its user namespace (it was
            // loaded there): not dumpable, it cannot be traced or opened
            // through /proc by identity-mode containers (no capabilities
            // in this namespace), while runs (outside, its owners) still
            // open its namespaces. Its forked helpers inherit that.
            process::not_dumpable();
            (inside.0, inside.1, outside)
        }
        // Real root (no user namespace), or a keeper started by hand.
        None => {
            let host_ids = (
                rustix::process::getuid().as_raw(),
                rustix::process::getgid().as_raw(),
            );
            let ids = super::keeper_ids(berth_config::SquashfsServer::from_env());
            let (uid, gid) = idmap::enter_namespaces_with(k, args.mode, ids)?;
            (uid, gid, host_ids)
        }
    };
    let image_dir = prepare_mnt(k, &args.dir)?;
    let offset = std::env::var(super::IMAGE_OFFSET_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let verity = std::env::var(super::IMAGE_VERITY_ENV).ok().filter(|v| {
        !v.is_empty() && std::env::var_os("BERTH_SQUASHFS_VERIFY").is_none_or(|x| x != "0")
    });
    let profile = std::env::var_os(super::IMAGE_PROFILE_ENV)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from);
    let served = image_mount::ServedImage {
        file: &image_file,
        offset,
        verity: verity.as_deref(),
        profile: profile.as_deref(),
    };
    let how = berth_config::ImageMount::from_env();
    let unpack = |why: Option<String>| {
        crate::image_unpack::unpack_and_bind(k, served, &args.dir, host_ids.0, &image_dir)
            .map(|tree| (tree, why))
    };
    let mut unpacked = None;
    let mut server = match args.mode {
        IdMode::HostRoot => {
            image_mount::mount_kernel_squashfs(k, &image_file, offset, &image_dir)?;
            None
        }
        _ if how == berth_config::ImageMount::Unpack => {
            unpacked = Some(unpack(None)?);
            None
        }
        _ => match image_mount::mount_fuse(
            k,
            served,
            &image_dir,
            (uid, gid),
            berth_config::SquashfsServer::from_env(),
        ) {
            Ok(server) => Some(server),
            Err(e) if how == berth_config::ImageMount::Auto => {
                unpacked = Some(unpack(Some(e.to_string()))?);
                None
            }
            Err(e) => return Err(e),
        },
    };
    drop(image_file);
    // The nested namespace needs no image: made while the server starts.
    let identity = match args.mode {
        IdMode::Identity => helpers::start_identity_ns(k, &args.dir, &NestedMaps::caller(host_ids)),
        IdMode::FakeRoot => helpers::start_identity_ns(k, &args.dir, &NestedMaps::same_as_keeper()),
        IdMode::HostRoot => None,
    };
    // Squashfs data files, mounted as the image is.
    let unpacked_because = unpacked.as_ref().map(|(_, why)| {
        why.as_deref()
            .unwrap_or("the site unpacks images: [runtime] image_mount = \"unpack\"")
    });
    let data_how = data::how(
        args.mode,
        (uid, gid),
        berth_config::SquashfsServer::from_env(),
        unpacked_because,
    );
    let mut data_servers = data::mount_all(k, &args.dir, &data::from_env()?, data_how)?;
    let hidden = node::state_dir().ok();
    // Also while the server starts: the kernel holds the holder's first
    // request to the image until the server has answered INIT, and the
    // fork and the namespace come before it.
    let prepared = helpers::start_prepared_root(k, &args.dir, hidden.as_deref());
    image_mount::await_server(&image_dir, "the squashfs server")?;
    let files = LeaseFiles::open(&args.dir, DECIDE_LOCK)?;
    let pid = std::process::id();
    state::write_pid(&args.dir.join("pid"), pid)
        .map_err(|e| Error::io("write", args.dir.join("pid"), e))?;
    say_ready(pid, unpacked.as_ref().and_then(|(_, why)| why.as_deref()));
    // Idle (left under both locks) or the server is gone: either way,
    // leave.
    let _: Served = node::serve_until_idle(&files, args.idle, POLL, || {
        server
            .iter_mut()
            .chain(&mut data_servers)
            .all(|s| match s.try_wait() {
                Ok(Some(status)) => {
                    eprintln!("berth: a squashfs server exited ({status})");
                    false
                }
                _ => true,
            })
    });
    // No run finds this keeper from now on; one that comes meanwhile waits
    // on the decision lock (held until `files` goes) until the helpers and
    // the server are gone, so a keeper never runs beside its successor.
    // Only its own record: a keeper started beside it (a run that could
    // not pin this one) keeps its pid file.
    state::remove_pid(&args.dir.join("pid"), pid);
    drop(prepared);
    drop(identity);
    for mut s in server.into_iter().chain(data_servers) {
        sys::kill(s.id() as i32, libc::SIGTERM);
        let _ = s.wait();
    }
    if let Some((tree, _)) = unpacked {
        // Reclaimed with the keeper: the next one unpacks afresh.
        let _ = k.unmount(&image_dir, libc::MNT_DETACH);
        crate::image_unpack::remove_unpacked(&tree);
    }
    drop(files);
    Ok(())
}

/// Mounts the keeper's private tmpfs on `DIR/mnt` (in its own mount
/// namespace) with `image/` (the image's mount point) and `stage/` (a
/// run's scratch mount point) in it; returns `image/`.
fn prepare_mnt(k: &dyn Kernel, dir: &Path) -> Result<PathBuf> {
    let mnt = dir.join("mnt");
    k.mount(
        Some(Path::new("berth")),
        &mnt,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("mode=0700"),
    )
    .map_err(|e| Error::sys("mount a tmpfs on", Some(mnt.clone()), e))?;
    super::keep_out_of_binds(k, dir);
    for d in ["image", "stage"] {
        fs::create_dir(mnt.join(d)).map_err(|e| Error::io("create", mnt.join(d), e))?;
    }
    Ok(mnt.join("image"))
}

/// The image: the descriptor the starting run handed down (`fd:N`) or an
/// absolute path. Nothing else the starting run inherited stays open.
fn open_image(image: &str) -> Result<File> {
    let image_fd: Option<i32> = image.strip_prefix("fd:").and_then(|n| n.parse().ok());
    sys::close_inherited(image_fd.as_slice());
    match image_fd {
        Some(fd) => {
            sys::take_inherited_fd(fd).ok_or_else(|| Error::Setup(format!("no descriptor {fd}")))
        }
        None if Path::new(image).is_relative() => Err(Error::Setup(format!(
            "the image path {image} is relative; the keeper takes an absolute path or fd:N"
        ))),
        None => File::open(image).map_err(|e| Error::io("open the image", image, e)),
    }
}

/// Tells the starting run `ready PID`, then lets its read finish: stdout
/// goes nowhere from now on.
fn say_ready(pid: u32, unpacked_because: Option<&str>) {
    {
        let mut out = std::io::stdout().lock();
        match unpacked_because {
            // One line: the client prints the reason as a warning.
            Some(why) => {
                let _ = writeln!(out, "ready {pid} unpacked {}", why.replace('\n', " "));
            }
            None => {
                let _ = writeln!(out, "ready {pid}");
            }
        }
        let _ = out.flush();
    }
    if let Ok(null) = File::options().write(true).open("/dev/null") {
        let _ = rustix::stdio::dup2_stdout(null.as_fd());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_keepers_tmpfs_is_private_unbindable_and_holds_the_image_and_stage_points() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("mnt")).unwrap();
        let k = crate::sys::fake::Recording::new();
        let image = prepare_mnt(&k, d.path()).unwrap();
        assert_eq!(image, d.path().join("mnt/image"));
        assert!(d.path().join("mnt/stage").is_dir());
        assert_eq!(
            k.calls(),
            vec![
                crate::sys::fake::Call::Mount {
                    source: Some("berth".into()),
                    target: d.path().join("mnt").display().to_string(),
                    fstype: Some("tmpfs".into()),
                    flags: libc::MS_NOSUID | libc::MS_NODEV,
                    data: Some("mode=0700".into()),
                },
                crate::sys::fake::Call::Mount {
                    source: None,
                    target: d.path().join("mnt").display().to_string(),
                    fstype: None,
                    flags: libc::MS_UNBINDABLE,
                    data: None,
                }
            ]
        );
    }

    #[test]
    fn arguments_with_and_without_the_namespaces() {
        let first = strings(&["/run/berth/keepers/ab-user", "fd:5", "identity", "30"]);
        let a = parse(&first).unwrap();
        assert_eq!(
            (a.image, a.mode, a.idle, a.in_ns),
            ("fd:5", IdMode::Identity, Duration::from_secs(30), None)
        );
        let again = strings(&[
            "/d", "fd:5", "fakeroot", "7", "--in-ns", "0", "0", "1000", "100",
        ]);
        let a = parse(&again).unwrap();
        assert_eq!(a.in_ns, Some(((0, 0), (1000, 100))));
        assert_eq!(a.mode, IdMode::FakeRoot);
        assert!(parse(&strings(&["/d", "x", "nobody", "7"])).is_err());
        assert!(parse(&strings(&["/d"])).is_err());
    }
}
