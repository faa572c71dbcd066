//! Extended attributes: the xattr id table points each inode's index at a
//! run of key/value pairs; a value may be stored once and referenced.

use super::error::{corrupt, Result};
use super::superblock::NO_TABLE;
use super::Image;

/// The most xattrs one inode may have.
const MAX_PAIRS: u32 = 4096;
/// The largest value read (the kernel's XATTR_SIZE_MAX).
const MAX_VALUE: u32 = 64 * 1024;
/// A key's flag: its value is a reference to a value stored elsewhere.
const OUT_OF_LINE: u16 = 0x100;

impl Image {
    /// The xattrs of the inode whose xattr index is `idx`: full names
    /// (with their `user.`, `trusted.` or `security.` prefix) and values.
    pub fn xattrs(&self, idx: u32) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        if self.sb.xattr_table == NO_TABLE {
            return Err(corrupt(
                "an inode has xattrs but the image has no xattr table",
            ));
        }
        // The table's header: where the pairs start, and how many ids.
        let mut h = [0u8; 16];
        self.src.read_at(self.sb.xattr_table, &mut h)?;
        let kv_start = u64::from_le_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]]);
        let ids = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
        if idx >= ids || kv_start >= self.sb.xattr_table {
            return Err(corrupt(format!(
                "xattr index {idx} is past the xattr table"
            )));
        }
        let (xref, count) = self.xattr_id(idx)?;
        if count > MAX_PAIRS {
            return Err(corrupt(format!("an inode with {count} xattrs")));
        }
        let mut c = self.cursor(kv_start + (xref >> 16), (xref & 0xffff) as usize)?;
        let mut out = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let t = c.u16()?;
            let name_len = c.u16()?;
            let prefix: &[u8] = match t & !OUT_OF_LINE {
                0 => b"user.",
                1 => b"trusted.",
                2 => b"security.",
                _ => return Err(corrupt(format!("xattr type {t}"))),
            };
            let mut name = prefix.to_vec();
            name.extend(c.bytes(usize::from(name_len))?);
            let len = c.u32()?;
            let value = if t & OUT_OF_LINE != 0 {
                if len != 8 {
                    return Err(corrupt("an xattr reference that is not 8 bytes"));
                }
                let r = c.u64()?;
                let mut v = self.cursor(kv_start + (r >> 16), (r & 0xffff) as usize)?;
                let len = v.u32()?;
                if len > MAX_VALUE {
                    return Err(corrupt(format!("an xattr value of {len} bytes")));
                }
                v.bytes(len as usize)?
            } else {
                if len > MAX_VALUE {
                    return Err(corrupt(format!("an xattr value of {len} bytes")));
                }
                c.bytes(len as usize)?
            };
            out.push((name, value));
        }
        Ok(out)
    }

    /// Entry `idx` of the xattr id table: where its pairs are, how many.
    /// (Its index follows the table's 16-byte header.)
    fn xattr_id(&self, idx: u32) -> Result<(u64, u32)> {
        let e = self.table_entry(self.sb.xattr_table + 16, 16, u64::from(idx))?;
        let xref = u64::from_le_bytes([e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]]);
        Ok((xref, u32::from_le_bytes([e[8], e[9], e[10], e[11]])))
    }
}
