//! The lookup tables: ids, fragments. Each is an index of 8-byte pointers
//! to metadata blocks that hold fixed-size entries.

use std::sync::Arc;

use super::error::{corrupt, Result};
use super::metadata::META_SIZE;
use super::superblock::NO_TABLE;
use super::Image;

/// A fragment block: where it is and its size word.
#[derive(Debug, Clone, Copy)]
pub struct Fragment {
    /// Its position in the image.
    pub start: u64,
    /// Its size word: the stored size, bit 24 set if stored uncompressed.
    pub size: u32,
}

impl Image {
    /// Entry `i` (of `size` bytes) of the table whose index is at `index`.
    pub(super) fn table_entry(&self, index: u64, size: usize, i: u64) -> Result<Vec<u8>> {
        let byte = i * size as u64;
        let slot = byte / META_SIZE as u64;
        let mut p = [0u8; 8];
        self.src.read_at(index + slot * 8, &mut p)?;
        let block = u64::from_le_bytes(p);
        let mut c = self.cursor(block, (byte % META_SIZE as u64) as usize)?;
        c.bytes(size)
    }

    /// Reads the whole id table.
    pub(crate) fn read_ids(&self) -> Result<Vec<u32>> {
        (0..u64::from(self.sb.id_count))
            .map(|i| {
                let b = self.table_entry(self.sb.id_table, 4, i)?;
                Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            })
            .collect()
    }

    /// The id at `idx` of the id table.
    pub(crate) fn id(&self, idx: u16) -> Result<u32> {
        self.ids
            .get(usize::from(idx))
            .copied()
            .ok_or_else(|| corrupt(format!("id index {idx} is past the id table")))
    }

    /// Fragment entry `i`.
    pub fn fragment(&self, i: u32) -> Result<Fragment> {
        if self.sb.frag_table == NO_TABLE || i >= self.sb.frag_count {
            return Err(corrupt(format!(
                "fragment {i} is not in the fragment table"
            )));
        }
        if let Some(f) = self.frag_cache.get(&i) {
            return Ok(*f);
        }
        let b = self.table_entry(self.sb.frag_table, 16, u64::from(i))?;
        let mut s = [0u8; 8];
        s.copy_from_slice(&b[..8]);
        let f = Fragment {
            start: u64::from_le_bytes(s),
            size: u32::from_le_bytes([b[8], b[9], b[10], b[11]]),
        };
        self.frag_cache.put(i, Arc::new(f), 1);
        Ok(f)
    }
}
