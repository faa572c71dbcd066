//! LZO1X decompression (what mksquashfs's `lzo` compressor writes), in safe
//! Rust over untrusted input: every read and copy is checked, and the
//! output never grows past the caller's limit.
//!
//! Written here because the crate used before (`lzokay-native` 0.1)
//! panics on some malformed blocks (an index out of bounds, found by the
//! `squashfs` fuzz target); a panic is not an answer to a bad image. The
//! instruction set follows the LZO1X format as the Linux kernel's
//! `lib/lzo/lzo1x_decompress_safe.c` documents it (without LZO-RLE, which
//! squashfs does not use).

/// Why a block did not decompress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LzoError {
    /// The input ended inside an instruction.
    InputOverrun,
    /// The output would grow past the limit.
    OutputOverrun,
    /// A match points before the start of the output.
    LookBehind,
    /// The end marker was followed by more input, or came in a bad state.
    BadEnd,
    /// A run length is absurdly long.
    TooLong,
}

impl std::fmt::Display for LzoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LzoError::InputOverrun => "the input ends inside an instruction",
            LzoError::OutputOverrun => "the output grows past the block size",
            LzoError::LookBehind => "a match points before the start of the block",
            LzoError::BadEnd => "bad end of stream",
            LzoError::TooLong => "a run length is too long",
        })
    }
}

/// Largest count of zero bytes in one length extension the kernel accepts.
const MAX_255_COUNT: usize = usize::MAX / 255 - 2;

/// The decompressor's position in input and output.
struct Stream<'a> {
    src: &'a [u8],
    ip: usize,
    out: Vec<u8>,
    limit: usize,
}

impl Stream<'_> {
    fn byte(&mut self) -> Result<usize, LzoError> {
        let b = *self.src.get(self.ip).ok_or(LzoError::InputOverrun)?;
        self.ip += 1;
        Ok(usize::from(b))
    }

    fn le16(&mut self) -> Result<usize, LzoError> {
        Ok(self.byte()? | self.byte()? << 8)
    }

    /// A length continued in the following bytes: each zero adds 255, the
    /// first non-zero byte ends it.
    fn extended(&mut self, base: usize) -> Result<usize, LzoError> {
        let start = self.ip;
        while *self.src.get(self.ip).ok_or(LzoError::InputOverrun)? == 0 {
            self.ip += 1;
        }
        let zeros = self.ip - start;
        if zeros > MAX_255_COUNT {
            return Err(LzoError::TooLong);
        }
        let last = self.byte()?;
        Ok(zeros * 255 + base + last)
    }

    fn literals(&mut self, n: usize) -> Result<(), LzoError> {
        let end = self.ip.checked_add(n).ok_or(LzoError::InputOverrun)?;
        let run = self.src.get(self.ip..end).ok_or(LzoError::InputOverrun)?;
        if self.out.len() + n > self.limit {
            return Err(LzoError::OutputOverrun);
        }
        self.out.extend_from_slice(run);
        self.ip = end;
        Ok(())
    }

    /// Copies `len` bytes from `distance` bytes back (they may overlap
    /// what is being written: a run).
    fn copy_match(&mut self, distance: usize, len: usize) -> Result<(), LzoError> {
        if distance == 0 || distance > self.out.len() {
            return Err(LzoError::LookBehind);
        }
        if self.out.len() + len > self.limit {
            return Err(LzoError::OutputOverrun);
        }
        let from = self.out.len() - distance;
        for i in 0..len {
            let b = self.out[from + i];
            self.out.push(b);
        }
        Ok(())
    }
}

/// Decompresses the LZO1X stream `src`, which must give at most `limit`
/// bytes and end with the end marker exactly at its last byte.
pub fn decompress(src: &[u8], limit: usize) -> Result<Vec<u8>, LzoError> {
    let mut s = Stream {
        src,
        ip: 0,
        out: Vec::with_capacity(limit.min(1 << 20)),
        limit,
    };
    // `state`: how many literals followed the last match (0 to 3), or 4
    // after a literal run; it decides what a small instruction means.
    let mut state: usize;
    let first = *src.first().ok_or(LzoError::InputOverrun)?;
    if first > 17 {
        s.ip = 1;
        let t = usize::from(first) - 17;
        s.literals(t)?;
        state = if t < 4 { t } else { 4 };
    } else {
        state = 0;
    }
    loop {
        let t = s.byte()?;
        let (distance, len, next) = if t < 16 {
            match state {
                0 => {
                    // A literal run of 3 or more.
                    let n = if t == 0 { s.extended(15)? } else { t } + 3;
                    s.literals(n)?;
                    state = 4;
                    continue;
                }
                4 => {
                    // A 3-byte match, 2049 to 3072 back.
                    let d = 1 + 0x800 + (t >> 2) + (s.byte()? << 2);
                    (d, 3, t & 3)
                }
                _ => {
                    // A 2-byte match, at most 1024 back.
                    let d = 1 + (t >> 2) + (s.byte()? << 2);
                    (d, 2, t & 3)
                }
            }
        } else if t >= 64 {
            // M2: 3 to 8 bytes, at most 2048 back.
            let d = 1 + ((t >> 2) & 7) + (s.byte()? << 3);
            (d, (t >> 5) + 1, t & 3)
        } else if t >= 32 {
            // M3: at most 16384 back.
            let mut len = (t & 31) + 2;
            if len == 2 {
                len = s.extended(31)? + 2;
            }
            let v = s.le16()?;
            (1 + (v >> 2), len, v & 3)
        } else {
            // M4: 16385 to 49151 back, or the end marker.
            let high = (t & 8) << 11;
            let mut len = (t & 7) + 2;
            if len == 2 {
                len = s.extended(7)? + 2;
            }
            let v = s.le16()?;
            let d = high + (v >> 2);
            if d == 0 {
                // The end of the stream: `0x11 0x00 0x00`.
                if len != 3 || s.ip != src.len() {
                    return Err(LzoError::BadEnd);
                }
                return Ok(s.out);
            }
            (d + 0x4000, len, v & 3)
        };
        s.copy_match(distance, len)?;
        // Up to 3 literals follow a match.
        s.literals(next)?;
        state = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(data: &[u8]) {
        let z = lzokay_native::compress(data).unwrap();
        let got = decompress(&z, data.len());
        assert_eq!(
            got.as_deref(),
            Ok(data),
            "{} bytes, stream {:02x?}",
            data.len(),
            &z[..z.len().min(16)]
        );
        if !data.is_empty() {
            assert_eq!(decompress(&z, data.len() - 1), Err(LzoError::OutputOverrun));
        }
    }

    #[test]
    fn what_an_lzo1x_compressor_writes_comes_back() {
        // The end marker alone (lzokay writes nothing for no input).
        assert_eq!(decompress(&[0x11, 0, 0], 0), Ok(Vec::new()));
        roundtrip(b"a");
        roundtrip(b"hello hello hello hello, world");
        roundtrip(&[0u8; 100_000]);
        let text: Vec<u8> = (0..200_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 % 7 + b'a')
            .collect();
        roundtrip(&text);
        let noise: Vec<u8> = (0..70_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8)
            .collect();
        roundtrip(&noise);
        // Matches far back (M4) and long runs.
        let mut far = noise[..40_000].to_vec();
        far.extend_from_slice(&noise[..40_000]);
        roundtrip(&far);
    }

    #[test]
    fn damaged_streams_are_errors() {
        let data = b"hello hello hello hello, world, hello hello".repeat(50);
        let z = lzokay_native::compress(&data).unwrap();
        for cut in 0..z.len() {
            assert!(decompress(&z[..cut], data.len()).is_err(), "cut at {cut}");
        }
        let mut longer = z.clone();
        longer.push(0);
        assert_eq!(decompress(&longer, data.len()), Err(LzoError::BadEnd));
        // Every single-byte change: an error or bounded output, never a
        // panic.
        for i in 0..z.len() {
            for v in [0u8, 1, 17, 18, 0x20, 0x40, 0xff] {
                let mut bad = z.clone();
                bad[i] = v;
                if let Ok(out) = decompress(&bad, data.len()) {
                    assert!(out.len() <= data.len());
                }
            }
        }
        // A match before the start.
        assert_eq!(
            decompress(&[0x00, 0x01, 0x11, 0x00, 0x00], 64).unwrap_err(),
            LzoError::InputOverrun
        );
        assert_eq!(
            decompress(&[0x12, b'a', 0x40, 0x05, 0x11, 0x00, 0x00], 64),
            Err(LzoError::LookBehind)
        );
    }
}
