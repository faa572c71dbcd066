//! The image's bytes: a file, from an offset (a squashfs inside a SIF
//! file), never read past the image's end; with a verity table, every
//! chunk checked against its hash before any of it is used.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use super::cache::Cache;
use super::error::{corrupt, Error, Result};
use crate::verity::Table;

/// Checked chunks kept (bytes): reads of the same chunk are then served
/// from memory, neither read nor hashed again.
const CHECKED_BUDGET: usize = 16 << 20;

/// An image file from `base` on.
#[derive(Debug)]
pub struct Source {
    file: File,
    base: u64,
    len: u64,
    verity: Option<Verified>,
}

/// The table and the chunks already checked.
#[derive(Debug)]
struct Verified {
    table: Table,
    checked: Cache<u64, Vec<u8>>,
}

impl Source {
    /// The image in `file` from byte `base` to the file's end.
    pub fn new(file: File, base: u64) -> Result<Self> {
        let size = file.metadata()?.len();
        let len = size
            .checked_sub(base)
            .ok_or_else(|| corrupt(format!("offset {base} is past the file's end ({size})")))?;
        Ok(Source {
            file,
            base,
            len,
            verity: None,
        })
    }

    /// The image in `file` from byte `base`, checked against the verity
    /// table at the file's end, whose digest must be `root`.
    pub fn verified(file: File, base: u64, root: &str) -> Result<Self> {
        let table = Table::load(&file, base, root).map_err(|e| Error::Verity(e.to_string()))?;
        Ok(Source {
            file,
            base,
            len: table.data_len,
            verity: Some(Verified {
                table,
                checked: Cache::new(CHECKED_BUDGET),
            }),
        })
    }

    /// The image's length in bytes.
    pub fn size(&self) -> u64 {
        self.len
    }

    /// Reads `buf.len()` bytes at `pos` (from the image's start); an error
    /// if they are not all inside the image, or (verified) do not match
    /// their hashes.
    pub fn read_at(&self, pos: u64, buf: &mut [u8]) -> Result<()> {
        let end = pos.checked_add(buf.len() as u64);
        if end.is_none_or(|end| end > self.len) {
            return Err(corrupt(format!(
                "a read of {} bytes at {pos} goes past the image's end ({})",
                buf.len(),
                self.len
            )));
        }
        let Some(v) = &self.verity else {
            self.file.read_exact_at(buf, self.base + pos)?;
            return Ok(());
        };
        let size = u64::from(v.table.chunk);
        let mut done = 0usize;
        while done < buf.len() {
            let at = pos + done as u64;
            let i = at / size;
            let chunk = self.checked_chunk(v, i)?;
            let from = (at - i * size) as usize;
            let n = (chunk.len() - from).min(buf.len() - done);
            buf[done..done + n].copy_from_slice(&chunk[from..from + n]);
            done += n;
        }
        Ok(())
    }

    /// Chunk `i`, read and checked now or before.
    fn checked_chunk(&self, v: &Verified, i: u64) -> Result<Arc<Vec<u8>>> {
        if let Some(c) = v.checked.get(&i) {
            return Ok(c);
        }
        let mut data = vec![0u8; v.table.chunk_len(i)];
        self.file
            .read_exact_at(&mut data, self.base + i * u64::from(v.table.chunk))?;
        if !v.table.check(i, &data) {
            return Err(Error::Verity(format!(
                "chunk {i} (bytes {} to {}) does not match its hash: the image file was changed or damaged after it was stored",
                i * u64::from(v.table.chunk),
                i * u64::from(v.table.chunk) + data.len() as u64
            )));
        }
        let data = Arc::new(data);
        v.checked.put(i, data.clone(), data.len());
        Ok(data)
    }
}
