//! File I/O in berth's runtime directory. The directory is the user's own,
//! but what is in it may have been planted (by the user's containers while
//! they could see it, by a crashed run): a record is read only if it is a
//! regular file of bounded size, opened without following a symlink and
//! without blocking (a FIFO there cannot hang berth), and a record is
//! written to a fresh file (`O_CREAT | O_EXCL`, never through a symlink)
//! renamed over the old one.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The largest record berth reads from its runtime directory.
pub const MAX_RECORD: u64 = 1 << 20;

/// Reads a record (see the module text).
pub fn read(path: &Path) -> io::Result<String> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let m = f.metadata()?;
    if !m.is_file() || m.len() > MAX_RECORD {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} is not a regular file of at most {MAX_RECORD} bytes",
                path.display()
            ),
        ));
    }
    let mut text = String::new();
    f.take(MAX_RECORD).read_to_string(&mut text)?;
    Ok(text)
}

/// Writes a record: a fresh file beside `path`, renamed over it.
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let (mut f, tmp) = fresh_beside(path)?;
    let written = f
        .write_all(bytes)
        .and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Records a process's pid in `path` (`PID` and a newline).
pub fn write_pid(path: &Path, pid: u32) -> io::Result<()> {
    write(path, format!("{pid}\n").as_bytes())
}

/// The pid a pid file records, if it holds one.
pub fn read_pid(path: &Path) -> Option<i32> {
    read(path).ok()?.trim().parse().ok()
}

/// Removes the pid file `path` only if it still records `pid` (a process
/// that took over the file keeps its record).
pub fn remove_pid(path: &Path, pid: u32) {
    if read_pid(path).is_some_and(|p| i64::from(p) == i64::from(pid)) {
        let _ = std::fs::remove_file(path);
    }
}

/// A new, empty file at `path` (mode 0600), made after removing whatever
/// was there: a symlink planted at `path` is replaced, never followed.
pub fn create_fresh(path: &Path) -> io::Result<File> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

fn fresh_beside(path: &Path) -> io::Result<(File, std::path::PathBuf)> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mut last = io::Error::from(io::ErrorKind::AlreadyExists);
    for i in 0..16u32 {
        let tmp = path.with_file_name(format!(
            ".{name}.{}.{}",
            std::process::id(),
            nanos.wrapping_add(i)
        ));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
        {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planted_fifos_symlinks_and_big_files_are_not_read() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        let st = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(st.success());
        assert!(read(&fifo).is_err());
        std::os::unix::fs::symlink("/dev/zero", d.path().join("zero")).unwrap();
        assert!(read(&d.path().join("zero")).is_err());
        std::fs::write(d.path().join("big"), vec![b'x'; MAX_RECORD as usize + 1]).unwrap();
        assert!(read(&d.path().join("big")).is_err());
    }

    #[test]
    fn writes_never_follow_a_planted_symlink() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let rec = d.path().join("template.json");
        std::os::unix::fs::symlink(&victim, &rec).unwrap();
        write(&rec, b"{}").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        assert_eq!(read(&rec).unwrap(), "{}");
        let log = d.path().join("keeper.log");
        std::os::unix::fs::symlink(&victim, &log).unwrap();
        drop(create_fresh(&log).unwrap());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    }
}
