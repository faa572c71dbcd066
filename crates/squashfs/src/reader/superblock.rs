//! The superblock: the image's first 96 bytes.

use super::compress::Compressor;
use super::error::{corrupt, Error, Result};

/// The superblock's size.
pub const SIZE: usize = 96;
/// "hsqs" read little-endian.
const MAGIC: u32 = 0x7371_7368;
/// A table that is not there.
pub const NO_TABLE: u64 = u64::MAX;

/// What the superblock says.
#[derive(Debug, Clone)]
pub struct Superblock {
    /// Inodes in the image.
    pub inode_count: u32,
    /// Data block size, a power of two from 4 KiB to 1 MiB.
    pub block_size: u32,
    /// Fragment entries.
    pub frag_count: u32,
    /// The compressor.
    pub compressor: Compressor,
    /// Flags (`SQUASHFS_*` in the kernel's squashfs_fs.h).
    pub flags: u16,
    /// Entries of the id table.
    pub id_count: u16,
    /// The root directory's inode reference.
    pub root_inode: u64,
    /// The image's length: nothing is read at or past it.
    pub bytes_used: u64,
    /// Where the id table's index is.
    pub id_table: u64,
    /// Where the xattr id table is, or [`NO_TABLE`].
    pub xattr_table: u64,
    /// Where the inode table starts.
    pub inode_table: u64,
    /// Where the directory table starts.
    pub dir_table: u64,
    /// Where the fragment table's index is, or [`NO_TABLE`].
    pub frag_table: u64,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

impl Superblock {
    /// Parses and checks a superblock read from an image of `image_len`
    /// bytes.
    pub fn parse(b: &[u8; SIZE], image_len: u64) -> Result<Self> {
        if u32_at(b, 0) != MAGIC {
            return Err(Error::NotSquashfs("no squashfs magic at its start".into()));
        }
        let (major, minor) = (u16_at(b, 28), u16_at(b, 30));
        if (major, minor) != (4, 0) {
            return Err(Error::Unsupported(format!(
                "squashfs version {major}.{minor} (berth reads 4.0, what mksquashfs and tar2sqfs write)"
            )));
        }
        let block_size = u32_at(b, 12);
        let block_log = u16_at(b, 22);
        if !(4096..=1 << 20).contains(&block_size)
            || !block_size.is_power_of_two()
            || block_size.trailing_zeros() != u32::from(block_log)
        {
            return Err(corrupt(format!(
                "block size {block_size} (log {block_log}) is not a power of two from 4 KiB to 1 MiB"
            )));
        }
        let sb = Superblock {
            inode_count: u32_at(b, 4),
            block_size,
            frag_count: u32_at(b, 16),
            compressor: Compressor::from_id(u16_at(b, 20))?,
            flags: u16_at(b, 24),
            id_count: u16_at(b, 26),
            root_inode: u64_at(b, 32),
            bytes_used: u64_at(b, 40),
            id_table: u64_at(b, 48),
            xattr_table: u64_at(b, 56),
            inode_table: u64_at(b, 64),
            dir_table: u64_at(b, 72),
            frag_table: u64_at(b, 80),
        };
        if sb.bytes_used > image_len || sb.bytes_used < SIZE as u64 {
            return Err(corrupt(format!(
                "it says it is {} bytes long, but the file holds {image_len}",
                sb.bytes_used
            )));
        }
        let inside = |t: u64| t == NO_TABLE || (t >= SIZE as u64 && t < sb.bytes_used);
        let tables = [
            sb.id_table,
            sb.xattr_table,
            sb.inode_table,
            sb.dir_table,
            sb.frag_table,
        ];
        if !tables.into_iter().all(inside)
            || sb.inode_table == NO_TABLE
            || sb.dir_table == NO_TABLE
            || sb.id_table == NO_TABLE
            || sb.inode_table > sb.dir_table
            || sb.id_count == 0
        {
            return Err(corrupt("a table lies outside the image"));
        }
        Ok(sb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_is_not_squashfs() {
        let b = [0u8; SIZE];
        assert!(matches!(
            Superblock::parse(&b, 4096),
            Err(Error::NotSquashfs(_))
        ));
    }
}
