//! Regular files' data: full blocks (or holes) and the tail end in a
//! fragment block, as pieces (see [`super::piece`]). Decompressed blocks
//! are cached (bounded): the kernel's page cache keeps what it read, so
//! this cache mostly serves reads that cut a block in two and fragment
//! blocks that many small files share. Blocks stored uncompressed are not
//! copied into it: their pieces are the image file's (checked) bytes.

use std::sync::Arc;

use super::error::{corrupt, Result};
use super::inode::{FileBody, InodeRef};
use super::piece::{self, Piece};
use super::Image;

/// Bit 24 of a size word: stored uncompressed.
pub(crate) const UNCOMPRESSED: u32 = 1 << 24;
/// A size word's size bits.
pub(crate) const SIZE_MASK: u32 = UNCOMPRESSED - 1;
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

    /// The size words of file `r`'s blocks, as stored (bit 24: stored
    /// uncompressed; 0: a hole), for copying them as they are.
    pub fn block_words(&self, r: InodeRef, f: &FileBody) -> Result<Vec<u32>> {
        if f.block_count == 0 {
            return Ok(Vec::new());
        }
        Ok(self.block_list(r, f)?.sizes.clone())
    }

    /// A data or fragment block at `pos` with size word `word`,
    /// decompressed, cached, and noted for a read profile.
    fn data_block(&self, pos: u64, word: u32) -> Result<Arc<Vec<u8>>> {
        let block = self.load_data_block(pos, word)?;
        if let Some(r) = &self.recorder {
            r.note(super::profile::Block::Data(pos, word));
        }
        Ok(block)
    }

    /// [`Image::data_block`], not noted.
    pub(crate) fn load_data_block(&self, pos: u64, word: u32) -> Result<Arc<Vec<u8>>> {
        if let Some(b) = self.data_cache.get(&(pos, word)) {
            return Ok(b);
        }
        let size = (word & SIZE_MASK) as usize;
        let bs = self.sb.block_size as usize;
        if size > bs {
            return Err(corrupt(format!("a data block of {size} bytes at {pos}")));
        }
        let raw = self.src.read_vec(pos, size)?;
        let data = if word & UNCOMPRESSED != 0 {
            raw
        } else {
            self.sb.compressor.decompress(&raw, bs)?
        };
        let data = Arc::new(data);
        self.data_cache.put((pos, word), data.clone(), bs);
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
        let mut pieces = Vec::new();
        self.file_pieces(r, f, size, offset, len, &mut pieces)?;
        piece::append(&pieces, out);
        Ok(())
    }

    /// [`Image::read_file`] as pieces appended to `out`, which share the
    /// reader's buffers instead of copying them.
    pub fn file_pieces(
        &self,
        r: InodeRef,
        f: &FileBody,
        size: u64,
        offset: u64,
        len: usize,
        out: &mut Vec<Piece>,
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
                    let stored = (word & SIZE_MASK) as usize;
                    if stored == 0 {
                        out.push(Piece::Zeros(n));
                    } else if word & UNCOMPRESSED != 0 {
                        if stored != block_len {
                            return Err(corrupt(format!(
                                "data block {i} holds {stored} bytes, not {block_len}"
                            )));
                        }
                        self.src.pieces(bpos + at as u64, n, out)?;
                    } else {
                        let b = self.data_block(bpos, word)?;
                        if b.len() != block_len {
                            return Err(corrupt(format!(
                                "data block {i} holds {} bytes, not {block_len}",
                                b.len()
                            )));
                        }
                        out.push(Piece::Shared(b, at..at + n));
                    }
                }
                None => {
                    let (index, frag_offset) = f
                        .fragment
                        .ok_or_else(|| corrupt("a file's tail has no fragment"))?;
                    let frag = self.fragment(index)?;
                    let b = self.data_block(frag.start, frag.size)?;
                    let from = frag_offset as usize;
                    if b.len() < from + block_len {
                        return Err(corrupt("a file's tail lies outside its fragment"));
                    }
                    out.push(Piece::Shared(b, from + at..from + at + n));
                }
            }
            pos += n as u64;
        }
        Ok(())
    }
}
