//! The squashfs writer: a `tar2sqfs` child process fed through a pipe.
//!
//! Why an external writer: the Rust crate `backhand` was measured as a writer
//! (../shared/notes, 2026-11): it drops xattrs, splits hard links into separate
//! inodes, writes no directory index (a `stat` of every entry of an
//! 18,404-entry directory took 145.8 s on a kernel mount against 1.5 s), is
//! single-threaded, and keeps every pushed reader alive until the end, so a
//! tar stream has to be buffered. `tar2sqfs` from squashfs-tools-ng reads a
//! tar stream from a pipe with 31 MB of memory, is exact (contents, modes,
//! owners, mtimes, hard links, xattrs), and compresses with several threads
//! while berth decompresses and flattens in its own process.

use std::io::{BufWriter, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

use berth_config::SquashfsSettings;

use crate::error::{Error, Result};

/// The tool's name; `BERTH_TAR2SQFS` may point to another path.
pub const TAR2SQFS: &str = "tar2sqfs";

/// A running squashfs writer.
pub struct SquashWriter {
    child: Child,
    output: PathBuf,
}

fn tool_path() -> PathBuf {
    std::env::var_os("BERTH_TAR2SQFS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(TAR2SQFS))
}

/// Checks the (merged) settings before anything is downloaded.
pub fn validate(settings: &SquashfsSettings) -> Result<()> {
    settings.check().map_err(Error::HostTool)
}

impl SquashWriter {
    /// Starts `tar2sqfs` writing `output` with `jobs` compressor threads.
    pub fn start(output: &Path, settings: &SquashfsSettings, jobs: usize) -> Result<Self> {
        validate(settings)?;
        let mut cmd = Command::new(tool_path());
        cmd.arg("--quiet")
            .arg("--no-skip")
            .arg("--force")
            .arg("--compressor")
            .arg(&settings.compressor)
            .arg("--block-size")
            .arg(settings.block_size.to_string())
            .arg("--num-jobs")
            .arg(jobs.max(1).to_string())
            .arg("--defaults")
            .arg("mode=0755");
        if let Some(level) = settings.effective_level() {
            if matches!(settings.compressor.as_str(), "zstd" | "gzip" | "xz") {
                cmd.arg("--comp-extra").arg(format!("level={level}"));
            }
        }
        cmd.arg(output)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let child = cmd.spawn().map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::HostTool(format!(
                    "{} not found: install squashfs-tools-ng (Debian/Ubuntu: apt-get install squashfs-tools-ng; \
                     RHEL/Fedora: dnf install squashfs-tools-ng), or set BERTH_TAR2SQFS",
                    tool_path().display()
                ))
            } else {
                Error::HostTool(format!("cannot start {}: {e}", tool_path().display()))
            }
        })?;
        Ok(Self {
            child,
            output: output.to_path_buf(),
        })
    }

    /// The pipe to write the flattened tar stream to (buffered).
    pub fn input(&mut self) -> Result<BufWriter<ChildStdin>> {
        let stdin = self
            .child
            .stdin
            .take()
            .ok_or_else(|| Error::HostTool("tar2sqfs input already taken".to_string()))?;
        Ok(BufWriter::with_capacity(1 << 20, stdin))
    }

    /// Waits for the writer after the input was closed.
    pub fn finish(mut self) -> Result<()> {
        let mut stderr = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut stderr);
        }
        let status = self
            .child
            .wait()
            .map_err(|e| Error::HostTool(format!("waiting for tar2sqfs: {e}")))?;
        if status.success() {
            return Ok(());
        }
        let msg = stderr.trim();
        // tar2sqfs reports a full disk as a bare "I/O error": ask the
        // filesystem (the partial output still occupies the space).
        let dir = self.output.parent().unwrap_or(Path::new("."));
        let nearly_full = rustix::fs::statvfs(dir)
            .map(|s| s.f_bavail.saturating_mul(s.f_frsize) < 4 << 20)
            .unwrap_or(false);
        let full_disk = msg.contains("No space left") || msg.contains("ENOSPC") || nearly_full;
        if full_disk {
            return Err(Error::store(
                "write",
                &self.output,
                std::io::Error::from_raw_os_error(28),
            ));
        }
        Err(Error::HostTool(format!(
            "tar2sqfs failed ({status}) writing {}: {}",
            self.output.display(),
            if msg.is_empty() { "no message" } else { msg }
        )))
    }

    /// Stops the writer after a failure elsewhere.
    pub fn abort(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
