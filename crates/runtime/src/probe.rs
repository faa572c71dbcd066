//! Probes of what this node lets the caller do (for `berth doctor`): each
//! runs in a forked child that tries the real thing (a user namespace as
//! runs make it, an overlay and a FUSE mount inside it) and reports the
//! first failing step's errno as its exit status, so nothing it does
//! outlives it.

use std::os::fd::AsRawFd;
use std::path::Path;

use crate::idmap::{self, IdMode};
use crate::sys::{self, Fork, Kernel, LINUX};

/// What a probe found: `Ok`, or the step that failed and why.
pub type Outcome = Result<(), String>;

/// The steps a probe child can fail at, as exit statuses (errno added to
/// the step's base).
const STEPS: [(&str, i32); 3] = [
    ("create a user namespace", 0),
    ("mount an overlay in it", 1),
    ("mount a FUSE file system in it", 2),
];

/// A user namespace as rootless runs make one (with the subordinate range
/// through newuidmap where there is one), its mount namespace, and
/// `then` in it.
fn in_child(then: fn(&Path) -> Result<(), (usize, i32)>) -> Outcome {
    let dir = std::env::temp_dir().join(format!("berth-probe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let result = match sys::fork().map_err(|e| format!("fork: {e}"))? {
        Fork::Child => {
            let code = match idmap::enter_namespaces(&LINUX, IdMode::FakeRoot) {
                Err(_) => encode(0, libc::EPERM),
                Ok(_) => match then(&dir) {
                    Ok(()) => 0,
                    Err((step, errno)) => encode(step, errno),
                },
            };
            sys::exit_now(code)
        }
        Fork::Parent(pid) => match sys::wait(pid, false) {
            Ok(Some((_, exit))) => decode(exit.as_code()),
            _ => Err("the probe did not finish".into()),
        },
    };
    let _ = std::fs::remove_dir(&dir);
    result
}

/// Exit status of a failed `step` with `errno` (errno below 64).
fn encode(step: usize, errno: i32) -> i32 {
    1 + (step as i32) * 64 + errno.clamp(0, 63)
}

fn decode(code: i32) -> Outcome {
    if code == 0 {
        return Ok(());
    }
    let (step, errno) = (((code - 1) / 64) as usize, (code - 1) % 64);
    let what = STEPS.get(step).map(|s| s.0).unwrap_or("probe");
    Err(format!(
        "cannot {what}: {}",
        std::io::Error::from_raw_os_error(errno)
    ))
}

/// Whether the caller can create a user namespace and map itself in it.
pub fn user_namespace() -> Outcome {
    in_child(|_| Ok(()))
}

/// A tmpfs on `dir` (in the child's mount namespace) with `subdirs`.
fn scratch(dir: &Path, subdirs: &[&str], step: usize) -> Result<(), (usize, i32)> {
    let errno = |e: std::io::Error| (step, e.raw_os_error().unwrap_or(libc::EIO));
    LINUX
        .mount(Some(Path::new("probe")), dir, Some("tmpfs"), 0, None)
        .map_err(|e| (step, e.raw_os_error()))?;
    for d in subdirs {
        std::fs::create_dir(dir.join(d)).map_err(errno)?;
    }
    Ok(())
}

/// Whether overlayfs mounts in a user namespace (kernel 5.11 and later,
/// unless the distribution turned it off), as `--writable` and builds use
/// it (with `userxattr`).
pub fn overlay_in_user_namespace() -> Outcome {
    in_child(|dir| {
        scratch(dir, &["l", "u", "w", "m"], 1)?;
        let opts = format!(
            "lowerdir={0}/l,upperdir={0}/u,workdir={0}/w,userxattr",
            dir.display()
        );
        LINUX
            .mount(
                Some(Path::new("overlay")),
                &dir.join("m"),
                Some("overlay"),
                0,
                Some(&opts),
            )
            .map_err(|e| (1, e.raw_os_error()))
    })
}

/// Whether a FUSE file system mounts in a user namespace through
/// /dev/fuse, as the keeper mounts images (nothing serves it: the probe's
/// end takes it away).
pub fn fuse_in_user_namespace() -> Outcome {
    in_child(|dir| {
        scratch(dir, &["m"], 2)?;
        let fuse = std::fs::File::options()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .map_err(|e| (2, e.raw_os_error().unwrap_or(libc::EIO)))?;
        let opts = format!(
            "fd={},rootmode=40000,user_id=0,group_id=0",
            fuse.as_raw_fd()
        );
        LINUX
            .mount(
                Some(Path::new("berth-probe")),
                &dir.join("m"),
                Some("fuse.berth-probe"),
                libc::MS_NOSUID | libc::MS_NODEV,
                Some(&opts),
            )
            .map_err(|e| (2, e.raw_os_error()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_name_the_step_and_the_error() {
        assert_eq!(decode(0), Ok(()));
        let e = decode(encode(1, libc::EINVAL)).unwrap_err();
        assert!(e.starts_with("cannot mount an overlay in it: "), "{e}");
        assert!(e.contains("Invalid argument"), "{e}");
        let e = decode(encode(0, libc::EPERM)).unwrap_err();
        assert!(e.starts_with("cannot create a user namespace"), "{e}");
    }
}
