//! The image's read profile on this node (`berth_squashfs::reader::profile`):
//! one file per image in the node's berth state directory
//! (`profiles/IMAGE-ID`), which berth's squashfs server reads to decompress
//! ahead what the last start of the image needed, then rewrites with what
//! this start needs. Handed to the server as one descriptor (the server's
//! own id may not open the user's files).
//!
//! A profile is advice: a torn or damaged one (a server killed while
//! writing, two keepers of the image writing at once) is skipped and
//! written again. `BERTH_READ_PROFILE=0` turns profiles off;
//! `BERTH_READ_PROFILE_WINDOW_MS` is how long a start's reads are noted
//! (5000 ms).

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::Command;

/// How long a start's reads are noted unless the environment says.
const WINDOW_MS: u64 = 5000;

/// The profile file at `path`, opened (created where missing) for the
/// server to inherit; None where profiles are off or it cannot be opened.
pub(super) fn open(path: &Path) -> Option<File> {
    if std::env::var_os("BERTH_READ_PROFILE").is_some_and(|v| v == "0") {
        return None;
    }
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    // A FIFO there would stop the server's first read, and with it the
    // start.
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    // Inherited by the server, and nothing else it starts (none).
    rustix::io::fcntl_setfd(&f, rustix::io::FdFlags::empty()).ok()?;
    Some(f)
}

/// The server's arguments that hand `profile` on.
pub(super) fn add_args(cmd: &mut Command, profile: &File) {
    let window = std::env::var("BERTH_READ_PROFILE_WINDOW_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(WINDOW_MS);
    cmd.arg("--profile")
        .arg(format!("fd:{}", profile.as_raw_fd()))
        .arg(window.to_string());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_is_opened_in_place_and_a_symlink_is_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("abc");
        assert!(open(&path).is_some());
        assert!(path.is_file());
        std::fs::write(&path, "kept").unwrap();
        drop(open(&path));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "kept");
        let target = d.path().join("elsewhere");
        std::fs::write(&target, "keep").unwrap();
        let link = d.path().join("def");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(open(&link).is_none());
        let fifo = d.path().join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        assert!(open(&fifo).is_none());
    }
}
