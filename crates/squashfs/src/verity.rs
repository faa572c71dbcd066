//! Verified reads: a table of BLAKE3 hashes of an image file's 64 KiB
//! chunks, written after the squashfs in the same file when berth stores
//! it, and checked by the server for every chunk it reads.
//!
//! The squashfs stays a valid squashfs (the kernel, squashfuse and
//! sqfs2tar read up to its `bytes_used` and ignore what follows). The
//! table's own digest (the *root*) is kept in the image's record; the
//! server is given the root, reads the table from the end of the file,
//! checks it against the root once, then checks each chunk the first time
//! it reads it and keeps the checked bytes (a bounded cache), so a file
//! changed under a running server gives I/O errors, never other data.
//!
//! Layout after the squashfs (padded to 4 KiB), all little-endian:
//! `count` hashes of 32 bytes, then a 64-byte trailer at the file's end:
//! magic `berth-verity-v1\0`, chunk size (u32), 0 (u32), the length of
//! the data hashed (u64), the table's offset (u64), `count` (u64), 16
//! zero bytes. The root is `blake3:` and the hex BLAKE3 hash of the table
//! and the trailer's first 48 bytes.
//!
//! BLAKE3, not sha256: the first read of every chunk is hashed, and on
//! the benchmark machine (SHA-NI, AVX-512) sha256 ran at 1.4 GB/s a core,
//! which made cold reads of incompressible data 36% slower
//! (bench/fileaccess.sh --no-verify against the default).

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;

/// Bytes per hashed chunk.
pub const CHUNK: u32 = 64 * 1024;
const MAGIC: &[u8; 16] = b"berth-verity-v1\0";
const TRAILER: usize = 64;
/// The largest table read (a 1 TiB image's).
const MAX_HASHES: u64 = (1 << 40) / CHUNK as u64;

/// The hashes of a file's chunks, checked against their root.
#[derive(Debug, Clone)]
pub struct Table {
    /// Bytes per chunk.
    pub chunk: u32,
    /// The length of the data hashed (from the file's start).
    pub data_len: u64,
    /// One hash per chunk.
    pub hashes: Vec<[u8; 32]>,
}

fn trailer(chunk: u32, data_len: u64, table_off: u64, count: u64) -> [u8; TRAILER] {
    let mut t = [0u8; TRAILER];
    t[..16].copy_from_slice(MAGIC);
    t[16..20].copy_from_slice(&chunk.to_le_bytes());
    t[24..32].copy_from_slice(&data_len.to_le_bytes());
    t[32..40].copy_from_slice(&table_off.to_le_bytes());
    t[40..48].copy_from_slice(&count.to_le_bytes());
    t
}

fn root_of(table: &[u8], trailer: &[u8; TRAILER]) -> String {
    let mut h = blake3::Hasher::new();
    h.update(table);
    h.update(&trailer[..48]);
    format!("blake3:{}", hex(h.finalize().as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Hashes chunks of a stream as it is written (the bytes from the file's
/// start on).
#[derive(Default)]
pub struct Hasher {
    current: blake3::Hasher,
    filled: u32,
    len: u64,
    hashes: Vec<u8>,
}

impl Hasher {
    /// A hasher at the file's start.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the next bytes.
    pub fn update(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let n = ((CHUNK - self.filled) as usize).min(data.len());
            self.current.update(&data[..n]);
            self.filled += n as u32;
            self.len += n as u64;
            data = &data[n..];
            if self.filled == CHUNK {
                self.finish_chunk();
            }
        }
    }

    fn finish_chunk(&mut self) {
        let h = self.current.finalize();
        self.current.reset();
        self.hashes.extend_from_slice(h.as_bytes());
        self.filled = 0;
    }

    /// Appends the table for the `self.len` bytes seen to `out` (the same
    /// file, positioned at its end, which must be `self.len`); returns the
    /// root.
    pub fn append_to(mut self, out: &mut impl Write) -> io::Result<String> {
        if self.filled > 0 {
            self.finish_chunk();
        }
        let count = (self.hashes.len() / 32) as u64;
        let t = trailer(CHUNK, self.len, self.len, count);
        out.write_all(&self.hashes)?;
        out.write_all(&t)?;
        Ok(root_of(&self.hashes, &t))
    }
}

/// Why a table is refused.
#[derive(Debug, thiserror::Error)]
pub enum VerityError {
    /// No trailer where it should be.
    #[error("the image file has no verity table (it was changed, or cut short)")]
    Missing,
    /// The table does not hash to the root.
    #[error("the image file's verity table does not match the image's record ({0}): the file was changed")]
    Mismatch(String),
    /// Malformed sizes.
    #[error("the image file's verity table is malformed: {0}")]
    Malformed(String),
    /// Reading failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl Table {
    /// Reads the table at the end of `file` (starting at byte `base` of
    /// it, for a squashfs inside another file) and checks it against
    /// `root`.
    pub fn load(file: &File, base: u64, root: &str) -> Result<Table, VerityError> {
        let size = file.metadata()?.len();
        if size < base + TRAILER as u64 {
            return Err(VerityError::Missing);
        }
        let mut t = [0u8; TRAILER];
        file.read_exact_at(&mut t, size - TRAILER as u64)?;
        if &t[..16] != MAGIC {
            return Err(VerityError::Missing);
        }
        let u64_at = |at: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&t[at..at + 8]);
            u64::from_le_bytes(a)
        };
        let mut c = [0u8; 4];
        c.copy_from_slice(&t[16..20]);
        let chunk = u32::from_le_bytes(c);
        let (data_len, table_off, count) = (u64_at(24), u64_at(32), u64_at(40));
        let expected = data_len.div_ceil(u64::from(chunk.max(1)));
        let sane = chunk >= 4096
            && chunk.is_power_of_two()
            && count == expected
            && count <= MAX_HASHES
            && table_off >= data_len
            && base + table_off + count * 32 + TRAILER as u64 == size;
        if !sane {
            return Err(VerityError::Malformed(format!(
                "chunk {chunk}, {count} hashes for {data_len} bytes at {table_off} in a file of {size}"
            )));
        }
        let mut raw = vec![0u8; (count * 32) as usize];
        file.read_exact_at(&mut raw, base + table_off)?;
        let found = root_of(&raw, &t);
        if found != root {
            return Err(VerityError::Mismatch(format!("{found}, recorded {root}")));
        }
        let hashes = raw
            .chunks_exact(32)
            .map(|h| {
                let mut a = [0u8; 32];
                a.copy_from_slice(h);
                a
            })
            .collect();
        Ok(Table {
            chunk,
            data_len,
            hashes,
        })
    }

    /// Whether `data` is chunk `i`.
    pub fn check(&self, i: u64, data: &[u8]) -> bool {
        self.hashes
            .get(i as usize)
            .is_some_and(|h| blake3::hash(data) == *h)
    }

    /// Bytes in chunk `i` (the last may be short).
    pub fn chunk_len(&self, i: u64) -> usize {
        let start = i * u64::from(self.chunk);
        (self.data_len.saturating_sub(start)).min(u64::from(self.chunk)) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(data: &[u8]) -> (File, String) {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(data).unwrap();
        let mut h = Hasher::new();
        h.update(data);
        let root = h.append_to(&mut f).unwrap();
        (f, root)
    }

    #[test]
    fn a_table_written_is_read_back_and_checks_its_chunks() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let (f, root) = file_with(&data);
        let t = Table::load(&f, 0, &root).unwrap();
        assert_eq!(t.hashes.len(), 4);
        assert_eq!(t.chunk_len(3), 200_000 - 3 * 65536);
        for i in 0..4 {
            let s = (i * 65536) as usize;
            let chunk = &data[s..s + t.chunk_len(i)];
            assert!(t.check(i, chunk));
            let mut bad = chunk.to_vec();
            bad[7] ^= 1;
            assert!(!t.check(i, &bad));
        }
        assert!(!t.check(9, b""));
    }

    #[test]
    fn a_changed_table_or_root_is_refused() {
        let data = vec![5u8; 70_000];
        let (f, root) = file_with(&data);
        let other = format!("blake3:{}", "0".repeat(64));
        assert!(matches!(
            Table::load(&f, 0, &other),
            Err(VerityError::Mismatch(_))
        ));
        // A hash flipped in the table.
        f.write_all_at(&[1], 70_000 + 3).unwrap();
        assert!(matches!(
            Table::load(&f, 0, &root),
            Err(VerityError::Mismatch(_))
        ));
        // No table at all.
        let mut plain = tempfile::tempfile().unwrap();
        plain.write_all(&data).unwrap();
        assert!(matches!(
            Table::load(&plain, 0, &root),
            Err(VerityError::Missing)
        ));
    }
}
