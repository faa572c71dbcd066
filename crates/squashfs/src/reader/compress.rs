//! Decompressing blocks, with the output bounded: a block never grows past
//! the size the format allows it (8 KiB of metadata, a data block).
//!
//! Each compressor comes from a crate: zlib from `flate2` (zlib-rs), zstd
//! from `zstd` (libzstd), xz from `liblzma` (with its BCJ filters), lz4
//! from `lz4_flex`; lzo is decoded here (`lzo.rs`). The legacy `lzma`
//! compressor (id 2) is refused: the kernel does not read it either.
//!
//! zlib and zstd keep one decompressor per thread: making one per block
//! (a zstd context, zlib's state and window) showed in the server's
//! profile of a cold directory walk, where every block is 8 KiB of
//! metadata.

use std::cell::RefCell;

use super::error::{corrupt, Error, Result};

thread_local! {
    /// This thread's zstd context, made on its first zstd block.
    static ZSTD: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
    /// This thread's zlib state, reset for each block.
    static ZLIB: RefCell<Option<flate2::Decompress>> = const { RefCell::new(None) };
}

/// A squashfs compressor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compressor {
    /// zlib (squashfs calls it gzip).
    Gzip,
    /// LZO1X.
    Lzo,
    /// xz.
    Xz,
    /// LZ4 (block format).
    Lz4,
    /// Zstandard.
    Zstd,
}

/// liblzma's memory limit for one block.
const XZ_MEMLIMIT: u64 = 256 << 20;

impl Compressor {
    /// The compressor of superblock id `id`.
    pub fn from_id(id: u16) -> Result<Self> {
        Ok(match id {
            1 => Compressor::Gzip,
            3 => Compressor::Lzo,
            4 => Compressor::Xz,
            5 => Compressor::Lz4,
            6 => Compressor::Zstd,
            2 => {
                return Err(Error::Unsupported(
                    "lzma compression (squashfs-tools' legacy lzma: the kernel does not read it either); rebuild the image with xz or zstd".into(),
                ))
            }
            _ => return Err(corrupt(format!("unknown compressor id {id}"))),
        })
    }

    /// The compressor's name, as mksquashfs spells it.
    pub fn name(self) -> &'static str {
        match self {
            Compressor::Gzip => "gzip",
            Compressor::Lzo => "lzo",
            Compressor::Xz => "xz",
            Compressor::Lz4 => "lz4",
            Compressor::Zstd => "zstd",
        }
    }

    /// Decompresses `src`, which must give at most `limit` bytes.
    pub fn decompress(self, src: &[u8], limit: usize) -> Result<Vec<u8>> {
        let out = match self {
            Compressor::Gzip => inflate(src, limit)?,
            Compressor::Zstd => unzstd(src, limit)?,
            Compressor::Xz => unxz(src, limit)?,
            Compressor::Lz4 => {
                let mut out = vec![0; limit];
                let n = lz4_flex::block::decompress_into(src, &mut out)
                    .map_err(|e| corrupt(format!("an lz4 block does not decompress: {e}")))?;
                out.truncate(n);
                out
            }
            Compressor::Lzo => super::lzo::decompress(src, limit)
                .map_err(|e| corrupt(format!("an lzo block does not decompress: {e}")))?,
        };
        if out.len() > limit {
            return Err(corrupt(format!(
                "a block decompresses to {} bytes, more than {limit}",
                out.len()
            )));
        }
        Ok(out)
    }
}

fn unzstd(src: &[u8], limit: usize) -> Result<Vec<u8>> {
    let bad = |e: std::io::Error| corrupt(format!("a zstd block does not decompress: {e}"));
    ZSTD.with_borrow_mut(|slot| {
        let d = match slot {
            Some(d) => d,
            None => slot.insert(zstd::bulk::Decompressor::new().map_err(bad)?),
        };
        d.decompress(src, limit).map_err(bad)
    })
}

fn inflate(src: &[u8], limit: usize) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(limit);
    let status = ZLIB.with_borrow_mut(|slot| {
        let d = match slot {
            Some(d) => {
                d.reset(true);
                d
            }
            None => slot.insert(flate2::Decompress::new(true)),
        };
        d.decompress_vec(src, &mut out, flate2::FlushDecompress::Finish)
    });
    let status = status.map_err(|e| corrupt(format!("a gzip block does not decompress: {e}")))?;
    if status != flate2::Status::StreamEnd {
        return Err(corrupt("a gzip block is cut short or too large"));
    }
    Ok(out)
}

fn unxz(src: &[u8], limit: usize) -> Result<Vec<u8>> {
    let mut s = liblzma::stream::Stream::new_stream_decoder(XZ_MEMLIMIT, 0)
        .map_err(|e| corrupt(format!("xz: {e}")))?;
    let mut out = Vec::with_capacity(limit);
    let status = s
        .process_vec(src, &mut out, liblzma::stream::Action::Finish)
        .map_err(|e| corrupt(format!("an xz block does not decompress: {e}")))?;
    if status != liblzma::stream::Status::StreamEnd {
        return Err(corrupt("an xz block is cut short or too large"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn gzip_output_is_bounded() {
        let data = vec![7u8; 100_000];
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&data).unwrap();
        let z = e.finish().unwrap();
        assert_eq!(Compressor::Gzip.decompress(&z, 100_000).unwrap(), data);
        assert!(Compressor::Gzip.decompress(&z, 8192).is_err());
    }

    #[test]
    fn garbage_is_an_error_for_every_compressor() {
        let junk = [0xffu8; 64];
        for c in [
            Compressor::Gzip,
            Compressor::Lzo,
            Compressor::Xz,
            Compressor::Lz4,
            Compressor::Zstd,
        ] {
            let _ = c.decompress(&junk, 8192).map(|v| assert!(v.len() <= 8192));
        }
    }

    /// The thread's reused decompressors start clean after a bad block.
    #[test]
    fn a_bad_block_does_not_spoil_the_next() {
        let data: Vec<u8> = (0..8192u32).map(|i| (i % 13) as u8).collect();
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&data).unwrap();
        let gz = e.finish().unwrap();
        let zs = zstd::bulk::compress(&data, 3).unwrap();
        for (c, good) in [(Compressor::Gzip, &gz), (Compressor::Zstd, &zs)] {
            let half = &good[..good.len() / 2];
            assert!(c.decompress(half, 8192).is_err());
            assert!(c.decompress(good, 100).is_err());
            assert_eq!(c.decompress(good, 8192).unwrap(), data);
            assert_eq!(c.decompress(good, 8192).unwrap(), data);
        }
    }

    /// A/B of one context per block against one per thread, for 8 KiB
    /// metadata blocks (run with --release --ignored --nocapture).
    #[test]
    #[ignore = "a measurement, not a check"]
    fn measure_decompressor_reuse() {
        let data: Vec<u8> = (0..8192u32).map(|i| (i * 31 % 97) as u8).collect();
        let zs = zstd::bulk::compress(&data, 15).unwrap();
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(&data).unwrap();
        let gz = e.finish().unwrap();
        let n = 50_000;
        let time = |f: &dyn Fn()| {
            let t = std::time::Instant::now();
            for _ in 0..n {
                f();
            }
            t.elapsed().as_nanos() as f64 / n as f64
        };
        let fresh_zstd = time(&|| drop(zstd::bulk::decompress(&zs, 8192).unwrap()));
        let kept_zstd = time(&|| drop(Compressor::Zstd.decompress(&zs, 8192).unwrap()));
        let fresh_gzip = time(&|| {
            let mut d = flate2::Decompress::new(true);
            let mut out = Vec::with_capacity(8192);
            d.decompress_vec(&gz, &mut out, flate2::FlushDecompress::Finish)
                .unwrap();
        });
        let kept_gzip = time(&|| drop(Compressor::Gzip.decompress(&gz, 8192).unwrap()));
        println!(
            "zstd: {fresh_zstd:.0} ns a block with a new context, {kept_zstd:.0} ns with the thread's; gzip: {fresh_gzip:.0} ns, {kept_gzip:.0} ns"
        );
    }
}
