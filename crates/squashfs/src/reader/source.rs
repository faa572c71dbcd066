//! The image's bytes: a file, from an offset (a squashfs inside a SIF
//! file), never read past the image's end.

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::error::{corrupt, Result};

/// An image file from `base` on.
#[derive(Debug)]
pub struct Source {
    file: File,
    base: u64,
    len: u64,
}

impl Source {
    /// The image in `file` from byte `base` to the file's end.
    pub fn new(file: File, base: u64) -> Result<Self> {
        let size = file.metadata()?.len();
        let len = size
            .checked_sub(base)
            .ok_or_else(|| corrupt(format!("offset {base} is past the file's end ({size})")))?;
        Ok(Source { file, base, len })
    }

    /// The image's length in bytes.
    pub fn size(&self) -> u64 {
        self.len
    }

    /// Reads `buf.len()` bytes at `pos` (from the image's start); an error
    /// if they are not all inside the image.
    pub fn read_at(&self, pos: u64, buf: &mut [u8]) -> Result<()> {
        let end = pos.checked_add(buf.len() as u64);
        if end.is_none_or(|end| end > self.len) {
            return Err(corrupt(format!(
                "a read of {} bytes at {pos} goes past the image's end ({})",
                buf.len(),
                self.len
            )));
        }
        self.file.read_exact_at(buf, self.base + pos)?;
        Ok(())
    }
}
