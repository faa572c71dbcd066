//! Metadata blocks (8 KiB before compression, each after a 2-byte header)
//! and a cursor that reads across them.

use std::sync::Arc;

use super::error::{corrupt, Result};
use super::Image;

/// The most a metadata block holds.
pub const META_SIZE: usize = 8192;

/// A metadata block, decompressed, and where the next one starts.
#[derive(Debug)]
pub struct MetaBlock {
    /// The block's bytes.
    pub data: Vec<u8>,
    /// This block's position in the image.
    pub pos: u64,
    /// The next block's position in the image.
    pub next: u64,
}

impl Image {
    /// The metadata block at `pos` (from the image's start), cached, and
    /// noted for a read profile.
    pub(crate) fn meta_block(&self, pos: u64) -> Result<Arc<MetaBlock>> {
        let block = self.load_meta_block(pos)?;
        if let Some(r) = &self.recorder {
            r.note(super::profile::Block::Meta(pos));
        }
        Ok(block)
    }

    /// [`Image::meta_block`], not noted.
    pub(crate) fn load_meta_block(&self, pos: u64) -> Result<Arc<MetaBlock>> {
        if let Some(b) = self.meta_cache.get(&pos) {
            return Ok(b);
        }
        let mut h = [0u8; 2];
        self.src.read_at(pos, &mut h)?;
        let h = u16::from_le_bytes(h);
        let size = usize::from(h & 0x7fff);
        if size == 0 || size > META_SIZE {
            return Err(corrupt(format!(
                "a metadata block at {pos} says it holds {size} bytes"
            )));
        }
        let mut raw = vec![0; size];
        self.src.read_at(pos + 2, &mut raw)?;
        let data = if h & 0x8000 != 0 {
            raw
        } else {
            self.sb.compressor.decompress(&raw, META_SIZE)?
        };
        let block = Arc::new(MetaBlock {
            data,
            pos,
            next: pos + 2 + size as u64,
        });
        self.meta_cache.put(pos, block.clone(), META_SIZE);
        Ok(block)
    }

    /// A cursor at byte `offset` of the metadata block at `pos`.
    pub(crate) fn cursor(&self, pos: u64, offset: usize) -> Result<Cursor<'_>> {
        let block = self.meta_block(pos)?;
        if offset > block.data.len() {
            return Err(corrupt(format!(
                "an offset {offset} into the metadata block at {pos}, which holds {}",
                block.data.len()
            )));
        }
        Ok(Cursor {
            image: self,
            block,
            offset,
        })
    }
}

/// Reads metadata from a position on, across blocks. Every block read lies
/// further into the image than the one before: a cursor cannot loop.
pub struct Cursor<'a> {
    image: &'a Image,
    block: Arc<MetaBlock>,
    offset: usize,
}

impl Cursor<'_> {
    /// Fills `buf`.
    pub fn read(&mut self, mut buf: &mut [u8]) -> Result<()> {
        while !buf.is_empty() {
            if self.offset == self.block.data.len() {
                self.block = self.image.meta_block(self.block.next)?;
                self.offset = 0;
            }
            let n = buf.len().min(self.block.data.len() - self.offset);
            buf[..n].copy_from_slice(&self.block.data[self.offset..self.offset + n]);
            self.offset += n;
            buf = &mut buf[n..];
        }
        Ok(())
    }

    /// Where the cursor is: its block's position and the offset in it.
    pub fn position(&self) -> (u64, usize) {
        (self.block.pos, self.offset)
    }

    /// `n` bytes in a new vector.
    pub fn bytes(&mut self, n: usize) -> Result<Vec<u8>> {
        let mut v = vec![0; n];
        self.read(&mut v)?;
        Ok(v)
    }

    /// A little-endian u16.
    pub fn u16(&mut self) -> Result<u16> {
        let mut b = [0; 2];
        self.read(&mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    /// A little-endian u32.
    pub fn u32(&mut self) -> Result<u32> {
        let mut b = [0; 4];
        self.read(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// A little-endian u64.
    pub fn u64(&mut self) -> Result<u64> {
        let mut b = [0; 8];
        self.read(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }
}
