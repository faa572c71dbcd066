//! The image's bytes: a file, from an offset (a squashfs inside a SIF
//! file), never read past the image's end; with a verity table, every
//! chunk checked against its hash before any of it is used.

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use super::cache::Cache;
use super::error::{corrupt, Error, Result};
use super::piece::Piece;
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
        self.check_bounds(pos, buf.len())?;
        let Some(v) = &self.verity else {
            self.file.read_exact_at(buf, self.base + pos)?;
            return Ok(());
        };
        let mut done = 0;
        self.checked_runs(v, pos, buf.len(), |chunk, run| {
            buf[done..done + run.len()].copy_from_slice(&chunk[run.clone()]);
            done += run.len();
        })
    }

    /// `len` bytes at `pos` as a new buffer (not zeroed first).
    pub fn read_vec(&self, pos: u64, len: usize) -> Result<Vec<u8>> {
        self.check_bounds(pos, len)?;
        let Some(v) = &self.verity else {
            return Ok(read_new(&self.file, self.base + pos, len)?);
        };
        let mut buf = Vec::with_capacity(len);
        self.checked_runs(v, pos, len, |chunk, run| {
            buf.extend_from_slice(&chunk[run]);
        })?;
        Ok(buf)
    }

    /// Appends `len` bytes at `pos` to `out` as pieces: the checked chunks
    /// themselves when verified (no copy), else one new buffer.
    pub fn pieces(&self, pos: u64, len: usize, out: &mut Vec<Piece>) -> Result<()> {
        self.check_bounds(pos, len)?;
        let Some(v) = &self.verity else {
            let buf = read_new(&self.file, self.base + pos, len)?;
            out.push(Piece::Shared(Arc::new(buf), 0..len));
            return Ok(());
        };
        self.checked_runs(v, pos, len, |chunk, run| {
            out.push(Piece::Shared(chunk, run));
        })
    }

    /// Calls `each` with the checked chunks that hold the `len` bytes at
    /// `pos` (inside the image), in order, and the run of each chunk that
    /// belongs to them.
    fn checked_runs(
        &self,
        v: &Verified,
        pos: u64,
        len: usize,
        mut each: impl FnMut(Arc<Vec<u8>>, Range<usize>),
    ) -> Result<()> {
        let size = u64::from(v.table.chunk);
        let mut done = 0usize;
        while done < len {
            let at = pos + done as u64;
            let i = at / size;
            let chunk = self.checked_chunk(v, i)?;
            let from = (at - i * size) as usize;
            let n = (chunk.len() - from).min(len - done);
            each(chunk, from..from + n);
            done += n;
        }
        Ok(())
    }

    fn check_bounds(&self, pos: u64, len: usize) -> Result<()> {
        let end = pos.checked_add(len as u64);
        if end.is_none_or(|end| end > self.len) {
            return Err(corrupt(format!(
                "a read of {len} bytes at {pos} goes past the image's end ({})",
                self.len
            )));
        }
        Ok(())
    }

    /// Chunk `i`, read and checked now or before.
    fn checked_chunk(&self, v: &Verified, i: u64) -> Result<Arc<Vec<u8>>> {
        if let Some(c) = v.checked.get(&i) {
            return Ok(c);
        }
        let data = read_new(
            &self.file,
            self.base + i * u64::from(v.table.chunk),
            v.table.chunk_len(i),
        )?;
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

/// Reads exactly `len` bytes of `file` at `pos` into a new buffer, without
/// zeroing it first (zeroing cost as much as the read itself).
fn read_new(file: &File, pos: u64, len: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(len);
    while buf.len() < len {
        let at = pos + buf.len() as u64;
        // Reads into the spare capacity and grows the length by what it
        // read (the capacity may exceed len: the extra is cut below).
        if rustix::io::pread(file, rustix::buffer::spare_capacity(&mut buf), at)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    buf.truncate(len);
    Ok(buf)
}
