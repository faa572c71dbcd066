//! Compressing blocks for the writer, with the compressors whose blocks
//! the kernel reads without options berth would have to choose: zstd,
//! gzip (zlib) and lz4. xz is left out (the kernel bounds its dictionary
//! by the image's options, which a writer must then match) and so is lzo
//! (no compressor crate): images with those are written by `tar2sqfs`.

use std::io::Write;

use crate::reader::{Compressor, Error, Result};

/// A compressor for data and metadata blocks.
pub struct BlockCompressor {
    kind: Compressor,
    level: i32,
    zstd: Option<zstd::bulk::Compressor<'static>>,
}

impl std::fmt::Debug for BlockCompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} level {}", self.kind.name(), self.level)
    }
}

impl BlockCompressor {
    /// A compressor of `kind` at `level` (the compressor's usual level
    /// when `None`: zstd 3, berth's default; gzip 9, mksquashfs's).
    pub fn new(kind: Compressor, level: Option<u32>) -> Result<Self> {
        let level = match kind {
            Compressor::Zstd => level.unwrap_or(3).clamp(1, 22) as i32,
            Compressor::Gzip => level.unwrap_or(9).clamp(1, 9) as i32,
            Compressor::Lz4 => 0,
            Compressor::Xz | Compressor::Lzo => {
                return Err(Error::Unsupported(format!(
                    "berth writes no {} blocks itself",
                    kind.name()
                )))
            }
        };
        let zstd = match kind {
            Compressor::Zstd => Some(zstd::bulk::Compressor::new(level)?),
            _ => None,
        };
        Ok(BlockCompressor { kind, level, zstd })
    }

    /// Whether berth writes blocks of `kind` itself.
    pub fn writes(kind: Compressor) -> bool {
        matches!(kind, Compressor::Zstd | Compressor::Gzip | Compressor::Lz4)
    }

    /// `data` compressed, or `None` where that would not make it smaller
    /// (the block is then stored as it is).
    pub fn compress(&mut self, data: &[u8]) -> Result<Option<Vec<u8>>> {
        let out = match (self.kind, &mut self.zstd) {
            (Compressor::Zstd, Some(z)) => z.compress(data)?,
            (Compressor::Gzip, _) => {
                let mut e = flate2::write::ZlibEncoder::new(
                    Vec::with_capacity(data.len() / 2),
                    flate2::Compression::new(self.level as u32),
                );
                e.write_all(data)?;
                e.finish()?
            }
            (Compressor::Lz4, _) => lz4_flex::block::compress(data),
            _ => {
                return Err(Error::Unsupported(format!(
                    "berth writes no {} blocks itself",
                    self.kind.name()
                )))
            }
        };
        Ok((out.len() < data.len()).then_some(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_through_the_reader_s_decompressors() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        for kind in [Compressor::Zstd, Compressor::Gzip, Compressor::Lz4] {
            let mut c = BlockCompressor::new(kind, None).unwrap();
            let z = c.compress(&data).unwrap().unwrap();
            assert_eq!(kind.decompress(&z, data.len()).unwrap(), data, "{kind:?}");
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect();
        let mut c = BlockCompressor::new(Compressor::Zstd, None).unwrap();
        assert!(c.compress(&noise).unwrap().is_none());
        assert!(BlockCompressor::new(Compressor::Xz, None).is_err());
    }
}
