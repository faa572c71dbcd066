//! Reading a layer's tar stream: errors of the reader, a stream cut inside
//! its last block, counting what an entry holds, and the PAX records kept.

use std::io::{self, Read};

use crate::error::{Error, Result};

pub(super) fn io_err(layer: &str, e: io::Error) -> Error {
    // Typed errors of the blob reader (network, integrity) travel inside the
    // io::Error; anything else is a malformed stream.
    crate::layer::from_io(e, |e| {
        if e.to_string().contains("unexpected EOF") || e.kind() == io::ErrorKind::UnexpectedEof {
            Error::BadImage(format!(
                "layer {layer} is truncated: its last entry's content ends early ({e})"
            ))
        } else {
            Error::BadImage(format!("layer {layer}: cannot read the tar stream: {e}"))
        }
    })
}

/// A tar stream whose end, when it falls inside a 512-byte block, is padded
/// with zeros to the block's end, so the tar reader sees the missing
/// padding of a last entry as present; [`PadLastBlock::padded_from`] tells
/// whether that happened and where the real stream ended.
pub(super) struct PadLastBlock<R> {
    inner: R,
    pos: u64,
    /// Where the real stream ended, once padding was supplied.
    real_end: Option<u64>,
    pad_left: usize,
}

impl<R: Read> PadLastBlock<R> {
    pub(super) fn new(inner: R) -> Self {
        Self {
            inner,
            pos: 0,
            real_end: None,
            pad_left: 0,
        }
    }

    pub(super) fn padded_from(&self) -> Option<u64> {
        self.real_end
    }
}

impl<R: Read> Read for PadLastBlock<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.real_end.is_none() {
            let n = self.inner.read(buf)?;
            if n > 0 {
                self.pos += n as u64;
                return Ok(n);
            }
            let partial = (self.pos % 512) as usize;
            if partial == 0 {
                return Ok(0);
            }
            self.real_end = Some(self.pos);
            self.pad_left = 512 - partial;
        }
        let n = self.pad_left.min(buf.len());
        buf[..n].fill(0);
        self.pad_left -= n;
        Ok(n)
    }
}

/// Counts what is read through it, to tell a short entry from a whole one.
pub(super) struct Counted<'a> {
    pub(super) inner: &'a mut dyn Read,
    pub(super) count: u64,
}

impl Read for Counted<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count += n as u64;
        Ok(n)
    }
}

/// The PAX records worth keeping (extended attributes); the reader already
/// applied path, linkpath and size.
pub(super) fn pax_records<R: Read>(
    entry: &mut tar::Entry<'_, R>,
    layer: &str,
) -> Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    if let Some(exts) = entry.pax_extensions().map_err(|e| io_err(layer, e))? {
        for ext in exts {
            let ext = ext.map_err(|e| io_err(layer, e))?;
            let Ok(key) = ext.key() else { continue };
            if key.starts_with("SCHILY.xattr.") || key.starts_with("LIBARCHIVE.xattr.") {
                out.push((key.to_string(), ext.value_bytes().to_vec()));
            }
        }
    }
    Ok(out)
}
