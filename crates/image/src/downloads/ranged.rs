//! A big layer downloaded in parts: HTTP range requests at once, each
//! written at its offset in the layer's spool file, while this thread
//! hashes the file's complete beginning as it grows and hands it to the
//! flattener (the slot's `written`). Registries and CDNs limit each
//! connection's rate; several connections for one multi-gigabyte layer
//! (NGC images have them) are what the spare connections are for.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::{LockOrPoisoned, Shared};
use crate::error::{Error, Result};
use crate::layer::from_io;
use crate::pipeline::LayerDesc;
use crate::registry::BlobFetcher;

/// The smallest part worth its own connection.
pub(super) const PART_MIN: u64 = 8 << 20;

/// The most parts of one layer.
pub(super) const MAX_PARTS: usize = 8;

/// How many parts a layer of `size` bytes is worth (1: one request).
pub(super) fn parts_for(size: u64) -> usize {
    ((size / PART_MIN) as usize).clamp(1, MAX_PARTS)
}

/// The byte ranges of `count` parts of `size` bytes, in order.
fn split(size: u64, count: usize) -> Vec<(u64, u64)> {
    let count = count.max(1) as u64;
    (0..count)
        .map(|i| (size * i / count, size * (i + 1) / count))
        .collect()
}

/// How a download in parts ended.
pub(super) enum Outcome {
    /// Every byte is in the file and the digest is right.
    Done,
    /// The registry answers range requests with the whole blob: nothing
    /// was written; download it in one piece.
    RangesIgnored,
}

/// What the part threads report.
#[derive(Default)]
struct Progress {
    /// Bytes written by each part, from its start.
    done: Vec<u64>,
    /// The first failure.
    failed: Option<Error>,
}

/// One layer's download in parts.
pub(super) struct Parts<'a> {
    pub(super) shared: &'a Shared,
    pub(super) fetcher: &'a BlobFetcher,
    pub(super) index: usize,
    pub(super) file: &'a File,
    pub(super) path: &'a Path,
}

impl Parts<'_> {
    /// Downloads `layer` as `count` ranges at once and verifies it.
    pub(super) fn download(&self, layer: &LayerDesc, count: usize) -> Result<Outcome> {
        let ranges = split(layer.size, count);
        let progress = Mutex::new(Progress {
            done: vec![0; ranges.len()],
            failed: None,
        });
        let changed = Condvar::new();
        let stop = AtomicBool::new(false);
        let ignored = Arc::new(AtomicBool::new(false));
        tracing::debug!("layer {}: {} parts", layer.digest, ranges.len());
        let hashed = std::thread::scope(|scope| {
            for (part, &range) in ranges.iter().enumerate() {
                let (progress, changed, stop, ignored) = (&progress, &changed, &stop, &ignored);
                scope.spawn(move || {
                    let result =
                        self.fetch_part(layer, part, range, progress, changed, stop, ignored);
                    let mut p = progress.lock_or_poisoned();
                    if let Err(e) = result {
                        if p.failed.is_none() {
                            p.failed = Some(e);
                        }
                    }
                    changed.notify_all();
                });
            }
            let hashed = self.hash_as_written(layer, &ranges, &progress, &changed);
            stop.store(true, Ordering::Relaxed);
            hashed
        });
        if ignored.load(Ordering::Relaxed) {
            return Ok(Outcome::RangesIgnored);
        }
        let digest = hashed?;
        if digest != layer.digest {
            return Err(Error::Integrity {
                what: format!("layer {}", layer.digest),
                detail: format!(
                    "downloaded in {} parts, the content is {digest}",
                    ranges.len()
                ),
            });
        }
        Ok(Outcome::Done)
    }

    /// One part: its bytes written at their offsets.
    #[allow(clippy::too_many_arguments)]
    fn fetch_part(
        &self,
        layer: &LayerDesc,
        part: usize,
        (start, end): (u64, u64),
        progress: &Mutex<Progress>,
        changed: &Condvar,
        stop: &AtomicBool,
        ignored: &Arc<AtomicBool>,
    ) -> Result<()> {
        let mut reader =
            self.fetcher
                .range(&layer.digest, layer.size, (start, end), ignored.clone());
        let mut buf = vec![0u8; 1 << 20];
        let mut pos = start;
        while pos < end {
            if stop.load(Ordering::Relaxed) || self.shared.cancel.load(Ordering::Relaxed) {
                return Err(Error::Cancelled);
            }
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(from_io(e, |e| {
                        Error::BadImage(format!("layer {}: {e}", layer.digest))
                    }))
                }
            };
            self.file
                .write_all_at(&buf[..n], pos)
                .map_err(|e| Error::store("write", self.path, e))?;
            pos += n as u64;
            progress.lock_or_poisoned().done[part] = pos - start;
            changed.notify_all();
        }
        if pos < end {
            return Err(Error::Network {
                registry: self.fetcher.registry().to_string(),
                detail: format!(
                    "layer {}: bytes {start}-{end} ended after {}",
                    layer.digest,
                    pos - start
                ),
            });
        }
        Ok(())
    }

    /// Hashes the file's complete beginning as the parts fill it, and
    /// publishes it to the flattener; returns the digest once whole.
    fn hash_as_written(
        &self,
        layer: &LayerDesc,
        ranges: &[(u64, u64)],
        progress: &Mutex<Progress>,
        changed: &Condvar,
    ) -> Result<String> {
        let slot = &self.shared.slots[self.index];
        let mut hasher = Sha256::new();
        let mut hashed = 0u64;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let complete = {
                let mut p = progress.lock_or_poisoned();
                if let Some(e) = p.failed.take() {
                    return Err(e);
                }
                if self.shared.cancel.load(Ordering::Relaxed) {
                    return Err(Error::Cancelled);
                }
                let complete = contiguous(ranges, &p.done);
                if complete == hashed {
                    p = changed
                        .wait_timeout(p, Duration::from_millis(200))
                        .map(|(p, _)| p)
                        .unwrap_or_else(|e| e.into_inner().0);
                    drop(p);
                    continue;
                }
                complete
            };
            while hashed < complete {
                let want = buf.len().min((complete - hashed) as usize);
                let n = self
                    .file
                    .read_at(&mut buf[..want], hashed)
                    .map_err(|e| Error::store("read", self.path, e))?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                hashed += n as u64;
            }
            slot.update(|s| s.written = hashed);
            if hashed >= layer.size {
                return Ok(format!("sha256:{}", hex::encode(hasher.finalize())));
            }
        }
    }
}

/// How many bytes from the start are written: the parts in order, up to
/// the first that is not complete.
fn contiguous(ranges: &[(u64, u64)], done: &[u64]) -> u64 {
    let mut end = 0;
    for (&(start, stop), &d) in ranges.iter().zip(done) {
        end = start + d;
        if start + d < stop {
            break;
        }
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_the_blob_once() {
        for (size, count) in [(100, 3), (1, 1), (PART_MIN * 5 + 7, 5), (10, 8)] {
            let r = split(size, count);
            assert_eq!(r.len(), count);
            assert_eq!(r[0].0, 0);
            assert_eq!(r.last().unwrap().1, size);
            for w in r.windows(2) {
                assert_eq!(w[0].1, w[1].0);
            }
        }
        assert_eq!(parts_for(10), 1);
        assert_eq!(parts_for(PART_MIN * 3), 3);
        assert_eq!(parts_for(u64::MAX / 2), MAX_PARTS);
    }

    #[test]
    fn the_complete_beginning_stops_at_the_first_gap() {
        let r = [(0, 10), (10, 20), (20, 30)];
        assert_eq!(contiguous(&r, &[0, 10, 10]), 0);
        assert_eq!(contiguous(&r, &[10, 3, 10]), 13);
        assert_eq!(contiguous(&r, &[10, 10, 10]), 30);
        assert_eq!(contiguous(&r, &[4, 10, 0]), 4);
    }
}
