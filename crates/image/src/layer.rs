//! Layer streams: digest checks and decompression.
//!
//! A layer blob is checked twice while it streams: the compressed bytes
//! against the manifest's digest and size ([`VerifyingReader`]), the
//! uncompressed tar against the config's `diff_id` ([`HashingReader`]). Both
//! report a mismatch as an error at the end of the stream, before anything
//! derived from the blob is published.

use std::io::{self, BufRead, BufReader, Read};

use sha2::{Digest as _, Sha256};

use crate::error::{Error, Result};

/// Compression of a layer, sniffed from its first bytes (media types lie:
/// some registries label plain tars as gzip).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// No compression.
    None,
    /// gzip.
    Gzip,
    /// zstd.
    Zstd,
}

/// A parsed `sha256:<hex>` digest.
pub fn parse_sha256(digest: &str) -> Result<[u8; 32]> {
    let hex_part = digest.strip_prefix("sha256:").ok_or_else(|| {
        Error::BadImage(format!(
            "unsupported digest {digest:?}: berth verifies sha256 digests only"
        ))
    })?;
    let mut out = [0u8; 32];
    hex::decode_to_slice(hex_part, &mut out)
        .map_err(|_| Error::BadImage(format!("malformed digest {digest:?}")))?;
    Ok(out)
}

/// `sha256:<hex>` of a byte slice.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Checks bytes against a digest.
pub fn verify_bytes(what: &str, bytes: &[u8], digest: &str) -> Result<()> {
    let want = parse_sha256(digest)?;
    let got: [u8; 32] = Sha256::digest(bytes).into();
    if got != want {
        return Err(Error::Integrity {
            what: what.to_string(),
            detail: format!("expected {digest}, got sha256:{}", hex::encode(got)),
        });
    }
    Ok(())
}

/// Hashes everything read through it.
pub struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
    count: u64,
}

impl<R: Read> HashingReader<R> {
    /// Wraps `inner`.
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            count: 0,
        }
    }

    /// Bytes read so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The digest of what was read (`sha256:<hex>`) and the count.
    pub fn finish(self) -> (String, u64) {
        (
            format!("sha256:{}", hex::encode(self.hasher.finalize())),
            self.count,
        )
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}

/// Reads a blob and fails at its end unless size and digest match.
pub struct VerifyingReader<R> {
    inner: HashingReader<R>,
    what: String,
    digest: String,
    size: Option<u64>,
    done: bool,
}

impl<R: Read> VerifyingReader<R> {
    /// `size` is the descriptor's size, when known.
    pub fn new(inner: R, what: &str, digest: &str, size: Option<u64>) -> Self {
        Self {
            inner: HashingReader::new(inner),
            what: what.to_string(),
            digest: digest.to_string(),
            size,
            done: false,
        }
    }

    fn check(&mut self) -> io::Result<()> {
        let hasher = std::mem::replace(&mut self.inner.hasher, Sha256::new());
        let got = format!("sha256:{}", hex::encode(hasher.finalize()));
        if let Some(size) = self.size {
            if self.inner.count != size {
                return Err(integrity_io(
                    &self.what,
                    format!("expected {size} bytes, got {}", self.inner.count),
                ));
            }
        }
        if got != self.digest {
            return Err(integrity_io(
                &self.what,
                format!("digest mismatch: expected {}, got {got}", self.digest),
            ));
        }
        Ok(())
    }
}

/// An integrity failure carried through `io::Error` (tar and decompressors
/// only speak io), recovered by [`from_io`].
#[derive(Debug)]
struct IntegrityFailure {
    what: String,
    detail: String,
}

impl std::fmt::Display for IntegrityFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.what, self.detail)
    }
}

impl std::error::Error for IntegrityFailure {}

fn integrity_io(what: &str, detail: String) -> io::Error {
    io::Error::other(IntegrityFailure {
        what: what.to_string(),
        detail,
    })
}

/// Recovers a typed error from an `io::Error` raised inside a stream: an
/// integrity failure or an [`Error`] smuggled by a source; else `fallback`.
pub fn from_io(e: io::Error, fallback: impl FnOnce(io::Error) -> Error) -> Error {
    if e.get_ref().is_some_and(|r| r.is::<IntegrityFailure>()) {
        if let Some(Ok(f)) = e.into_inner().map(|b| b.downcast::<IntegrityFailure>()) {
            return Error::Integrity {
                what: f.what,
                detail: f.detail,
            };
        }
        return Error::Integrity {
            what: "blob".to_string(),
            detail: "digest mismatch".to_string(),
        };
    }
    if e.get_ref().is_some_and(|r| r.is::<Error>()) {
        if let Some(Ok(err)) = e.into_inner().map(|b| b.downcast::<Error>()) {
            return *err;
        }
        return Error::BadImage("stream failed".to_string());
    }
    fallback(e)
}

/// Wraps an [`Error`] into an `io::Error` so it survives readers that only
/// speak io; [`from_io`] takes it back out.
pub fn to_io(e: Error) -> io::Error {
    io::Error::other(e)
}

/// Whether `e` is a digest or size mismatch found by a [`VerifyingReader`].
pub fn is_integrity_failure(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|r| r.is::<IntegrityFailure>())
}

impl<R: Read> Read for VerifyingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.done {
            return Ok(0);
        }
        let n = self.inner.read(buf)?;
        if let Some(size) = self.size {
            if self.inner.count > size {
                return Err(integrity_io(
                    &self.what,
                    format!("longer than the expected {size} bytes"),
                ));
            }
        }
        if n == 0 && !buf.is_empty() {
            self.done = true;
            self.check()?;
        }
        Ok(n)
    }
}

/// Sniffs the compression from the first bytes.
pub fn sniff(head: &[u8]) -> Compression {
    if head.starts_with(&[0x1f, 0x8b]) {
        Compression::Gzip
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Compression::Zstd
    } else {
        Compression::None
    }
}

/// A decompressed layer stream whose tar bytes are hashed for the diff_id.
pub struct LayerStream<'a> {
    reader: HashingReader<Box<dyn Read + Send + 'a>>,
}

impl<'a> LayerStream<'a> {
    /// Opens a (possibly compressed) layer blob.
    pub fn open(blob: impl Read + Send + 'a) -> Result<(Self, Compression)> {
        let mut buf = BufReader::with_capacity(256 * 1024, blob);
        let head = buf
            .fill_buf()
            .map_err(|e| from_io(e, |e| Error::BadImage(format!("cannot read layer: {e}"))))?;
        let compression = sniff(head);
        let reader: Box<dyn Read + Send + 'a> = match compression {
            Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(buf)),
            Compression::Zstd => Box::new(
                zstd::stream::read::Decoder::with_buffer(buf)
                    .map_err(|e| Error::BadImage(format!("cannot start zstd decoder: {e}")))?,
            ),
            Compression::None => Box::new(buf),
        };
        Ok((
            Self {
                reader: HashingReader::new(reader),
            },
            compression,
        ))
    }

    /// The uncompressed bytes read so far.
    pub fn count(&self) -> u64 {
        self.reader.count()
    }

    /// The uncompressed digest (diff_id) and size.
    pub fn finish(self) -> (String, u64) {
        self.reader.finish()
    }
}

impl Read for LayerStream<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.reader.read(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn verifying_reader_accepts_and_refuses() {
        let data = b"hello world".to_vec();
        let d = sha256_digest(&data);
        let mut ok = VerifyingReader::new(&data[..], "blob", &d, Some(11));
        io::copy(&mut ok, &mut io::sink()).unwrap();
        let mut bad = VerifyingReader::new(&b"hello worle"[..], "blob", &d, Some(11));
        let err = from_io(
            io::copy(&mut bad, &mut io::sink()).unwrap_err(),
            |_| unreachable!(),
        );
        assert!(matches!(err, Error::Integrity { .. }), "{err}");
        let mut short = VerifyingReader::new(&b"hello"[..], "blob", &d, Some(11));
        let err = from_io(
            io::copy(&mut short, &mut io::sink()).unwrap_err(),
            |_| unreachable!(),
        );
        assert!(err.to_string().contains("expected 11 bytes"), "{err}");
        let mut long = VerifyingReader::new(&b"hello world!"[..], "blob", &d, Some(11));
        assert!(io::copy(&mut long, &mut io::sink()).is_err());
    }

    #[test]
    fn sniffs_and_decompresses() {
        let plain = b"tar bytes".repeat(100);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&plain).unwrap();
        let gz = gz.finish().unwrap();
        let zs = zstd::stream::encode_all(&plain[..], 3).unwrap();
        for (blob, want) in [
            (plain.clone(), Compression::None),
            (gz, Compression::Gzip),
            (zs, Compression::Zstd),
        ] {
            let (mut s, c) = LayerStream::open(&blob[..]).unwrap();
            assert_eq!(c, want);
            let mut out = Vec::new();
            s.read_to_end(&mut out).unwrap();
            assert_eq!(out, plain);
            assert_eq!(s.finish().0, sha256_digest(&plain));
        }
    }

    #[test]
    fn digests_parse() {
        assert!(parse_sha256(&format!("sha256:{}", "0".repeat(64))).is_ok());
        assert!(parse_sha256("sha512:00").is_err());
        assert!(parse_sha256("sha256:zz").is_err());
    }
}
