//! Regular files' data: full blocks (or holes) and the tail end in a
//! fragment block. Decompressed blocks are cached (bounded): the kernel's
//! page cache keeps what it read, so this cache mostly serves reads that
//! cut a block in two and fragment blocks that many small files share.

use std::sync::Arc;

use super::error::{corrupt, Result};
use super::inode::{FileBody, InodeRef};
use super::Image;

/// Bit 24 of a size word: stored uncompressed.
const UNCOMPRESSED: u32 = 1 << 24;
/// A size word's size bits.
const SIZE_MASK: u32 = UNCOMPRESSED - 1;
/// Block positions are kept for every this many blocks.
const STRIDE: usize = 1024;

/// A file's block list.
#[derive(Debug)]
pub struct BlockList {
    sizes: Vec<u32>,
    /// The position of block `k * STRIDE`.
    starts: Vec<u64>,
}

impl BlockList {
    /// Block `i`'s position and size word.
    fn block(&self, i: usize) -> (u64, u32) {
        let k = i / STRIDE;
        let pos = self.sizes[k * STRIDE..i]
            .iter()
            .fold(self.starts[k], |p, s| p + u64::from(s & SIZE_MASK));
        (pos, self.sizes[i])
    }
}

impl Image {
    /// The block list of file `r`, cached.
    fn block_list(&self, r: InodeRef, f: &FileBody) -> Result<Arc<BlockList>> {
        if let Some(l) = self.list_cache.get(&r) {
            return Ok(l);
        }
        let n = f.block_count as usize;
        let mut c = self.cursor(f.list_at.0, f.list_at.1)?;
        let raw = c.bytes(n * 4)?;
        let sizes: Vec<u32> = raw
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let bs = self.sb.block_size;
        if sizes
            .iter()
            .any(|s| s & SIZE_MASK > bs || s & !(SIZE_MASK | UNCOMPRESSED) != 0)
        {
            return Err(corrupt("a data block larger than the block size"));
        }
        let mut starts = Vec::with_capacity(n / STRIDE + 1);
        let mut pos = f.blocks_start;
        for (i, s) in sizes.iter().enumerate() {
            if i % STRIDE == 0 {
                starts.push(pos);
            }
            pos += u64::from(s & SIZE_MASK);
        }
        if pos > self.sb.bytes_used {
            return Err(corrupt("a file's blocks run past the image's end"));
        }
        let list = Arc::new(BlockList { sizes, starts });
        self.list_cache.put(r, list.clone(), n * 4 + 64);
        Ok(list)
    }

    /// A data or fragment block at `pos` with size word `word`,
    /// decompressed, cached.
    fn data_block(&self, pos: u64, word: u32) -> Result<Arc<Vec<u8>>> {
        if let Some(b) = self.data_cache.get(&pos) {
            return Ok(b);
        }
        let size = (word & SIZE_MASK) as usize;
        let bs = self.sb.block_size as usize;
        if size > bs {
            return Err(corrupt(format!("a data block of {size} bytes at {pos}")));
        }
        let mut raw = vec![0; size];
        self.src.read_at(pos, &mut raw)?;
        let data = if word & UNCOMPRESSED != 0 {
            raw
        } else {
            self.sb.compressor.decompress(&raw, bs)?
        };
        let data = Arc::new(data);
        self.data_cache.put(pos, data.clone(), bs);
        Ok(data)
    }

    /// Appends up to `len` bytes of file `r` from `offset` on to `out`
    /// (fewer at the file's end).
    pub fn read_file(
        &self,
        r: InodeRef,
        f: &FileBody,
        size: u64,
        offset: u64,
        len: usize,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let end = size.min(offset.saturating_add(len as u64));
        let bs = u64::from(self.sb.block_size);
        let mut pos = offset;
        let list = if f.block_count > 0 && pos < end {
            Some(self.block_list(r, f)?)
        } else {
            None
        };
        while pos < end {
            let i = pos / bs;
            let block_len = bs.min(size - i * bs) as usize;
            let at = (pos % bs) as usize;
            let n = (block_len - at).min((end - pos) as usize);
            match list.as_ref().filter(|_| i < f.block_count) {
                Some(list) => {
                    let (bpos, word) = list.block(i as usize);
                    if word & SIZE_MASK == 0 {
                        out.resize(out.len() + n, 0);
                    } else {
                        let b = self.data_block(bpos, word)?;
                        if b.len() != block_len {
                            return Err(corrupt(format!(
                                "data block {i} holds {} bytes, not {block_len}",
                                b.len()
                            )));
                        }
                        out.extend_from_slice(&b[at..at + n]);
                    }
                }
                None => {
                    let (index, frag_offset) = f
                        .fragment
                        .ok_or_else(|| corrupt("a file's tail has no fragment"))?;
                    let frag = self.fragment(index)?;
                    let b = self.data_block(frag.start, frag.size)?;
                    let tail = b
                        .get(frag_offset as usize..frag_offset as usize + block_len)
                        .ok_or_else(|| corrupt("a file's tail lies outside its fragment"))?;
                    out.extend_from_slice(&tail[at..at + n]);
                }
            }
            pos += n as u64;
        }
        Ok(())
    }
}
