//! The container's `/etc/passwd` and `/etc/group`: the image's, with the
//! caller's entry added (replacing one of the same name or id), written
//! beside the root and bound read-only over the image's.

use std::io::Read;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::error::{Error, Result};
use crate::sys::Kernel;

/// The largest image `/etc/passwd` or `/etc/group` berth reads (real ones
/// are kilobytes; LDAP-sized dumps a few hundred).
pub const IDENTITY_FILE_MAX: u64 = 4 << 20;

/// The image's `etc/NAME` (`passwd`, `group`), read inside the image root:
/// a symlink is followed in the image, never on the host (an image's
/// `/etc/passwd -> /proc/self/environ` finds the image's own empty
/// `/proc`), magic links are refused, and only a regular file of at most
/// [`IDENTITY_FILE_MAX`] bytes is read (a FIFO or a device would hang or
/// exhaust berth). Missing (or a dangling link): empty.
pub fn read_image_file(k: &dyn Kernel, image: &Path, name: &str) -> Result<String> {
    let path = image.join("etc").join(name);
    let refused = |why: String| {
        Error::Setup(format!(
            "the image's /etc/{name} {why}; berth reads only a regular file of at most {} MiB there. Fix the image (its /etc/{name} must be a plain file)",
            IDENTITY_FILE_MAX >> 20
        ))
    };
    let root = rustix::fs::open(
        image,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::sys("open", Some(image.into()), e))?;
    let rel = format!("etc/{name}");
    let fd = match k.open_in_root(
        root.as_fd(),
        &rel,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY,
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT | Errno::NOTDIR) => {
            // A symlink to nothing in the image (a host path, say): the
            // entry berth adds could not be mounted there either.
            let dangling = k
                .open_in_root(root.as_fd(), &rel, OFlags::PATH | OFlags::NOFOLLOW)
                .is_ok();
            if dangling {
                return Err(refused(
                    "is a symlink to something the image does not have (symlinks are followed inside the image, never on the host)".into(),
                ));
            }
            return Ok(String::new());
        }
        Err(Errno::LOOP) => return Err(refused("is a symlink loop or a /proc magic link".into())),
        Err(e) => return Err(Error::sys("open", Some(path), e)),
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| Error::sys("stat", Some(path.clone()), e))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(refused("is not a regular file".into()));
    }
    if st.st_size as u64 > IDENTITY_FILE_MAX {
        return Err(refused(format!("is {} bytes", st.st_size)));
    }
    let mut text = String::new();
    std::fs::File::from(fd)
        .take(IDENTITY_FILE_MAX)
        .read_to_string(&mut text)
        .map_err(|e| Error::io("read", path, e))?;
    Ok(text)
}

/// `existing` (an image's passwd or group file) with `line` added, in
/// place of any entry of the same name (field 1) or id (field 3), so `id`
/// and `whoami` show the caller's name.
pub fn with_entry(existing: &str, line: &str) -> String {
    let fields: Vec<&str> = line.split(':').collect();
    let (our_name, our_id) = (
        fields.first().copied().unwrap_or(""),
        fields.get(2).copied().unwrap_or(""),
    );
    let mut text: String = existing
        .lines()
        .filter(|l| {
            let f: Vec<&str> = l.split(':').collect();
            !(f.first() == Some(&our_name) || f.get(2) == Some(&our_id))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    text.push_str(line);
    text.push('\n');
    text
}

/// Writes the image's `name` file with `line` into `stage`; its path, to
/// bind over the image's (`None` without a line).
pub fn write_file(
    k: &dyn Kernel,
    image: &Path,
    name: &str,
    line: Option<&str>,
    stage: &Path,
) -> Result<Option<PathBuf>> {
    let Some(line) = line else { return Ok(None) };
    let text = with_entry(&read_image_file(k, image, name)?, line);
    let out = stage.join(name);
    std::fs::write(&out, text).map_err(|e| Error::io("write", &out, e))?;
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_callers_entry_replaces_one_of_the_same_name_or_id() {
        let image = "root:x:0:0::/root:/bin/sh\nubuntu:x:1000:1000::/home/ubuntu:/bin/sh\nme:x:5:5::/:/bin/sh\n";
        let out = with_entry(image, "me:x:1000:1000::/home/me:/bin/sh");
        assert_eq!(
            out,
            "root:x:0:0::/root:/bin/sh\nme:x:1000:1000::/home/me:/bin/sh\n"
        );
    }
}
