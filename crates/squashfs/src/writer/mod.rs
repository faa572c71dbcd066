//! berth's squashfs writer for amending an image: the new image starts as
//! a copy of the old one's data (every data and fragment block, at the
//! same positions, so the old image's files are kept as they are, without
//! decompressing or compressing any of them), then the new files' blocks
//! are appended, then the whole tree's tables are written anew (inodes,
//! directories with their lookup index, fragments, ids, xattrs).
//!
//! This is what makes `berth run --save` and `berth commit` cost the size
//! of the changes rather than of the image: `tar2sqfs` and `mksquashfs`
//! compress every block again. What a save removes or replaces stays in
//! the file, unused ([`Tree::unused_image_data`] says how much; the
//! caller decides when a rewrite is worth it).
//!
//! The layout is the one the kernel checks (fs/squashfs/super.c): data,
//! the inode table, the directory table, the fragment table and its index,
//! the id table and its index, then the xattr table whose index ends the
//! image; no export table.

mod compress;
mod layout;
mod meta;
pub mod tree;

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;

pub use compress::BlockCompressor;
pub use tree::{Attrs, Content, FileData, Node, NodeId, Tree, Xattrs};

use crate::reader::file::UNCOMPRESSED;
use crate::reader::{superblock, Error, Image, Result};

/// A new image being written as an amended copy of an old one.
#[derive(Debug)]
pub struct Appender {
    out: File,
    /// Where the next data block goes.
    pos: u64,
    /// The old image's superblock, as bytes (patched at the end).
    sb_bytes: [u8; superblock::SIZE],
    block_size: u32,
    comp: BlockCompressor,
    /// Fragment blocks: position and size word.
    fragments: Vec<(u64, u32)>,
    /// The fragment block being filled.
    frag_buf: Vec<u8>,
}

impl Appender {
    /// Starts `out` (empty) as a copy of `image`'s data, read from `file`
    /// (the image from its first byte), with new blocks compressed at
    /// `level` by the image's own compressor.
    pub fn start(image: &Image, file: &File, mut out: File, level: Option<u32>) -> Result<Self> {
        let sb = image.superblock();
        if !BlockCompressor::writes(sb.compressor) {
            return Err(Error::Unsupported(format!(
                "berth amends no {} image itself",
                sb.compressor.name()
            )));
        }
        let comp = BlockCompressor::new(sb.compressor, level)?;
        let mut sb_bytes = [0u8; superblock::SIZE];
        file.read_exact_at(&mut sb_bytes, 0)?;
        let data_end = sb.inode_table;
        let mut fragments = Vec::new();
        for i in 0..sb.frag_count {
            let f = image.fragment(i)?;
            if f.start.saturating_add(u64::from(f.size & !UNCOMPRESSED)) > data_end {
                return Err(Error::Unsupported(
                    "a fragment block lies after the inode table".into(),
                ));
            }
            fragments.push((f.start, f.size));
        }
        // The data, copied in the kernel (copy_file_range; a reflink
        // where the filesystem has them).
        let mut src = file.try_clone()?;
        src.seek(SeekFrom::Start(0))?;
        let copied =
            std::io::copy(&mut (&mut src).take(data_end), &mut out).map_err(Error::Write)?;
        if copied != data_end {
            return Err(Error::Corrupt(format!(
                "the image file ends at {copied}, before its inode table at {data_end}"
            )));
        }
        Ok(Appender {
            out,
            pos: data_end,
            sb_bytes,
            block_size: sb.block_size,
            comp,
            fragments,
            frag_buf: Vec::new(),
        })
    }

    /// Writes a file of `size` bytes read from `r`: full blocks
    /// compressed (a block of zeros as a hole), the tail end into a
    /// fragment block.
    pub fn add_file(&mut self, r: &mut impl Read, size: u64) -> Result<FileData> {
        let bs = u64::from(self.block_size);
        let mut data = FileData {
            size,
            start: self.pos,
            ..FileData::default()
        };
        let mut buf = vec![0u8; self.block_size as usize];
        let mut left = size;
        while left >= bs {
            r.read_exact(&mut buf)?;
            left -= bs;
            if buf.iter().all(|&b| b == 0) {
                data.words.push(0);
                data.sparse += bs;
                continue;
            }
            let word = self.write_block(&buf)?;
            data.words.push(word);
        }
        if left > 0 {
            let tail = &mut buf[..left as usize];
            r.read_exact(tail)?;
            if self.frag_buf.len() + tail.len() > self.block_size as usize {
                self.flush_fragment()?;
            }
            data.fragment = Some((self.fragments.len() as u32, self.frag_buf.len() as u32));
            self.frag_buf.extend_from_slice(tail);
        }
        Ok(data)
    }

    /// Writes one data block at the end; its size word.
    fn write_block(&mut self, block: &[u8]) -> Result<u32> {
        let (bytes, word) = match self.comp.compress(block)? {
            Some(z) => {
                let n = z.len() as u32;
                (z, n)
            }
            None => (block.to_vec(), block.len() as u32 | UNCOMPRESSED),
        };
        self.out
            .write_all_at(&bytes, self.pos)
            .map_err(Error::Write)?;
        self.pos += bytes.len() as u64;
        Ok(word)
    }

    fn flush_fragment(&mut self) -> Result<()> {
        if self.frag_buf.is_empty() {
            return Ok(());
        }
        let block = std::mem::take(&mut self.frag_buf);
        let at = self.pos;
        let word = self.write_block(&block)?;
        self.fragments.push((at, word));
        Ok(())
    }

    /// Writes `tree`'s tables and the superblock; the image's length.
    pub fn finish(mut self, tree: &Tree) -> Result<u64> {
        self.flush_fragment()?;
        let tables = layout::Layout::build(tree, &mut self.comp, self.block_size)?;
        tables.write(self)
    }
}

#[cfg(test)]
mod tests;
