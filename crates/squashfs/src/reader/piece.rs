//! A file's bytes as pieces of buffers the reader already holds (checked
//! chunks of the image file, decompressed blocks), so a reply can hand
//! them to the kernel in one vectored write instead of copying them into
//! a buffer of its own first.

use std::ops::Range;
use std::sync::Arc;

/// Zeros for holes: a hole is written as this many bytes at a time.
pub static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];

/// A run of a file's bytes.
#[derive(Debug, Clone)]
pub enum Piece {
    /// Part of a buffer shared with a cache.
    Shared(Arc<Vec<u8>>, Range<usize>),
    /// A hole: this many zero bytes.
    Zeros(usize),
}

impl Piece {
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Piece::Shared(_, r) => r.len(),
            Piece::Zeros(n) => *n,
        }
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its bytes as slices (a long hole is several slices of [`ZEROS`]).
    pub fn slices(&self) -> impl Iterator<Item = &[u8]> {
        let (shared, zeros) = match self {
            Piece::Shared(b, r) => (Some(&b[r.clone()]), 0),
            Piece::Zeros(n) => (None, *n),
        };
        let full = zeros / ZEROS.len();
        let rest = zeros % ZEROS.len();
        shared
            .into_iter()
            .chain(std::iter::repeat_n(&ZEROS[..], full))
            .chain((rest > 0).then(|| &ZEROS[..rest]))
    }
}

/// Appends the bytes of `pieces` to `out`.
pub fn append(pieces: &[Piece], out: &mut Vec<u8>) {
    out.reserve(pieces.iter().map(Piece::len).sum());
    for p in pieces {
        for s in p.slices() {
            out.extend_from_slice(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_append_as_their_bytes() {
        let b = Arc::new(vec![1u8, 2, 3, 4]);
        let pieces = [
            Piece::Shared(b.clone(), 1..3),
            Piece::Zeros(ZEROS.len() * 2 + 3),
            Piece::Shared(b, 0..1),
        ];
        let mut out = vec![9];
        append(&pieces, &mut out);
        assert_eq!(out.len(), 1 + 2 + ZEROS.len() * 2 + 3 + 1);
        assert_eq!(&out[..3], &[9, 2, 3]);
        assert!(out[3..out.len() - 1].iter().all(|&b| b == 0));
        assert_eq!(out.last(), Some(&1));
        assert_eq!(pieces[1].slices().count(), 3);
        assert!(Piece::Zeros(0).is_empty());
    }
}
