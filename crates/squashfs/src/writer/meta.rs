//! Metadata blocks as the writer makes them: 8 KiB of a table before
//! compression, each after a 2-byte header (its stored size, bit 15 set
//! when stored uncompressed).

use super::compress::BlockCompressor;
use crate::reader::Result;

/// The most a metadata block holds.
pub const META_SIZE: usize = 8192;

/// One table's metadata blocks, built in memory.
#[derive(Debug, Default)]
pub struct MetaWriter {
    /// The block being filled.
    buf: Vec<u8>,
    /// The blocks written, each with its header.
    out: Vec<u8>,
    /// Where each written block starts in `out`.
    starts: Vec<u64>,
}

impl MetaWriter {
    /// Where the next byte goes: its block's position in the table and
    /// its offset in that block.
    pub fn position(&self) -> (u64, u16) {
        (self.out.len() as u64, self.buf.len() as u16)
    }

    /// The table's bytes so far, before compression.
    pub fn total(&self) -> u64 {
        (self.starts.len() * META_SIZE + self.buf.len()) as u64
    }

    /// Appends `bytes`.
    pub fn write(&mut self, c: &mut BlockCompressor, mut bytes: &[u8]) -> Result<()> {
        while !bytes.is_empty() {
            let n = bytes.len().min(META_SIZE - self.buf.len());
            self.buf.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.buf.len() == META_SIZE {
                self.flush(c)?;
            }
        }
        Ok(())
    }

    fn flush(&mut self, c: &mut BlockCompressor) -> Result<()> {
        self.starts.push(self.out.len() as u64);
        match c.compress(&self.buf)? {
            Some(z) => {
                self.out.extend((z.len() as u16).to_le_bytes());
                self.out.extend(z);
            }
            None => {
                self.out
                    .extend((self.buf.len() as u16 | 0x8000).to_le_bytes());
                self.out.extend(&self.buf);
            }
        }
        self.buf.clear();
        Ok(())
    }

    /// The table's blocks, and where each starts in them.
    pub fn finish(mut self, c: &mut BlockCompressor) -> Result<(Vec<u8>, Vec<u64>)> {
        if !self.buf.is_empty() {
            self.flush(c)?;
        }
        Ok((self.out, self.starts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::Compressor;

    #[test]
    fn blocks_hold_8_kib_and_positions_follow_them() {
        let mut c = BlockCompressor::new(Compressor::Zstd, None).unwrap();
        let mut m = MetaWriter::default();
        m.write(&mut c, &[1u8; 8000]).unwrap();
        assert_eq!(m.position(), (0, 8000));
        m.write(&mut c, &[2u8; 400]).unwrap();
        let (pos, off) = m.position();
        assert!(pos > 0 && off == 208);
        assert_eq!(m.total(), 8400);
        let (out, starts) = m.finish(&mut c).unwrap();
        assert_eq!(starts, vec![0, pos]);
        let h = u16::from_le_bytes([out[0], out[1]]);
        let first = Compressor::Zstd
            .decompress(&out[2..2 + usize::from(h & 0x7fff)], META_SIZE)
            .unwrap();
        assert_eq!(first.len(), META_SIZE);
    }
}
