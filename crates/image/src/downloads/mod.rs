//! A pull's layer downloads: several at once, top layer first, each into a
//! file of the pull's work directory that the flattener reads while it
//! grows, so the top layer still streams (its first bytes are flattened
//! while the rest arrives) and the layers below arrive meanwhile.
//!
//! A downloaded blob is verified (digest and size) and then moved into the
//! store's layer cache, where later pulls find it; a cached blob is read
//! from there and verified again as it is read. A cached blob that fails
//! its digest is removed from the cache ([`Downloads::evicted`] says so;
//! the pull then starts again and downloads it).
//!
//! Threads: one per connection (`[network] max_connections`), each copying
//! a blob from the registry client's runtime to its file; decompression
//! stays on the flattener's side ([`crate::pipeline`]).

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

use crate::error::{Error, Result};
use crate::layer::{from_io, to_io, VerifyingReader};
use crate::pipeline::{LayerDesc, LayerSource};
use crate::registry::BlobFetcher;
use crate::store::layer_cache::LayerCache;
use crate::store::{Store, WorkDir};

mod ranged;

/// How a pull downloads its layers.
#[derive(Debug, Clone)]
pub struct DownloadOptions {
    /// Layers downloaded at once (at least 1).
    pub connections: usize,
    /// Whether downloaded layers are kept in the store's layer cache
    /// (`--no-layer-cache` and `[layer_cache] enabled = false` say no).
    pub keep: bool,
    /// The layer cache's size cap in bytes, applied after each pull.
    pub cache_max: Option<u64>,
}

impl Default for DownloadOptions {
    fn default() -> Self {
        Self {
            connections: 8,
            keep: true,
            cache_max: None,
        }
    }
}

/// `Mutex::lock` that takes the value of a poisoned lock as it is (a
/// panicked download thread must not stop the others' reports).
trait LockOrPoisoned<T> {
    fn lock_or_poisoned(&self) -> MutexGuard<'_, T>;
}

impl<T> LockOrPoisoned<T> for Mutex<T> {
    fn lock_or_poisoned(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One layer's download, as far as it got.
#[derive(Default)]
struct SlotState {
    /// The file the bytes go to (a cached blob: complete from the start).
    file: Option<Arc<File>>,
    /// Bytes in `file` so far.
    written: u64,
    /// Set when the download ended: `Ok(cached)` or the failure (taken by
    /// the reader that reports it).
    outcome: Option<std::result::Result<bool, Option<Error>>>,
    /// The download's file in the work directory while it is one.
    spool: Option<PathBuf>,
}

#[derive(Default)]
struct Slot {
    state: Mutex<SlotState>,
    changed: Condvar,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, SlotState> {
        self.state.lock_or_poisoned()
    }

    fn update(&self, f: impl FnOnce(&mut SlotState)) {
        f(&mut self.lock());
        self.changed.notify_all();
    }
}

/// What the download threads share with the readers.
struct Shared {
    layers: Vec<LayerDesc>,
    slots: Vec<Slot>,
    /// Indexes still to download, popped from the end (the top layer
    /// first, as the flattener reads them).
    queue: Mutex<Vec<usize>>,
    cancel: AtomicBool,
    /// Connections no download uses: a big layer's download takes some
    /// for its parts; a thread that ends gives its own.
    spare: Mutex<usize>,
    /// Download threads still running, to wait for when stopping.
    running: Mutex<usize>,
    stopped: Condvar,
    cached: AtomicUsize,
    evicted: AtomicBool,
}

/// The layers of one image, downloaded in parallel into the layer cache
/// (or read from it); a [`LayerSource`] for [`crate::pipeline::convert`].
/// Nothing is downloaded until the first layer is opened (an image
/// already in the store needs none). Dropping it stops the downloads.
pub struct Downloads {
    shared: Arc<Shared>,
    fetcher: BlobFetcher,
    cache: LayerCache,
    work: WorkDir,
    options: DownloadOptions,
    started: OnceLock<()>,
}

impl Downloads {
    /// Prepares the downloads of `layers` (bottom first, as the manifest
    /// lists them) with `fetcher`, into `store`'s layer cache.
    pub fn new(
        store: &Store,
        fetcher: BlobFetcher,
        layers: &[LayerDesc],
        options: DownloadOptions,
    ) -> Result<Self> {
        let shared = Arc::new(Shared {
            layers: layers.to_vec(),
            slots: layers.iter().map(|_| Slot::default()).collect(),
            queue: Mutex::new((0..layers.len()).collect()),
            cancel: AtomicBool::new(false),
            spare: Mutex::new(0),
            running: Mutex::new(0),
            stopped: Condvar::new(),
            cached: AtomicUsize::new(0),
            evicted: AtomicBool::new(false),
        });
        Ok(Self {
            shared,
            fetcher,
            cache: store.layer_cache()?,
            work: store.work_dir()?,
            options,
            started: OnceLock::new(),
        })
    }

    /// How many layers came from the layer cache.
    pub fn cached(&self) -> usize {
        self.shared.cached.load(Ordering::Relaxed)
    }

    /// Whether a cached layer failed its digest and was removed from the
    /// cache (the pull is worth starting again).
    pub fn evicted(&self) -> bool {
        self.shared.evicted.load(Ordering::Relaxed)
    }

    fn start(&self) {
        self.started.get_or_init(|| {
            // Cached layers first: they need no thread, and the layers to
            // download get every connection (a big one in parts).
            let mut queue = self.shared.queue.lock_or_poisoned();
            queue.retain(|&index| !self.shared.use_cached(index, &self.cache));
            let missing = queue.len();
            drop(queue);
            let connections = self.options.connections.clamp(1, 64);
            let threads = connections.min(missing);
            self.shared.give_connections(connections - threads);
            for n in 0..threads {
                let worker = Worker {
                    shared: self.shared.clone(),
                    fetcher: self.fetcher.clone(),
                    cache: self.cache.clone(),
                    spool: self.work.path().to_path_buf(),
                    keep: self.options.keep,
                };
                *self.shared.running.lock_or_poisoned() += 1;
                let spawned = std::thread::Builder::new()
                    .name(format!("berth-download-{n}"))
                    .spawn(move || worker.run());
                if let Err(e) = spawned {
                    *self.shared.running.lock_or_poisoned() -= 1;
                    tracing::warn!("cannot start a download thread: {e}");
                    if n == 0 {
                        // None started: this thread fails every layer.
                        for slot in &self.shared.slots {
                            let err =
                                Error::HostTool(format!("cannot start a download thread: {e}"));
                            slot.update(|s| {
                                s.outcome.get_or_insert(Err(Some(err)));
                            });
                        }
                    }
                    break;
                }
            }
        });
    }
}

impl Drop for Downloads {
    /// Stops the downloads; waits a moment for the threads to leave the
    /// work directory before it is removed (one stuck in a stalled
    /// transfer ends at its read time-out, writing only to files already
    /// unlinked).
    fn drop(&mut self) {
        self.shared.cancel.store(true, Ordering::Relaxed);
        for slot in &self.shared.slots {
            slot.changed.notify_all();
        }
        let running = self.shared.running.lock_or_poisoned();
        let _ = self.shared.stopped.wait_timeout_while(
            running,
            std::time::Duration::from_secs(2),
            |n| *n > 0,
        );
    }
}

impl LayerSource for Downloads {
    fn open_layer(&self, layer: &LayerDesc) -> Result<Box<dyn Read + Send + '_>> {
        self.start();
        let index = self
            .shared
            .layers
            .iter()
            .position(|l| l.digest == layer.digest)
            .ok_or_else(|| {
                Error::BadImage(format!("layer {} is not in the manifest", layer.digest))
            })?;
        let reader = SlotReader {
            shared: self.shared.clone(),
            index,
            pos: 0,
        };
        let cached = {
            let mut state = self.shared.slots[index].lock();
            while state.outcome.is_none() && state.file.is_none() {
                state = self.shared.slots[index]
                    .changed
                    .wait(state)
                    .unwrap_or_else(|p| p.into_inner());
            }
            matches!(state.outcome, Some(Ok(true)))
        };
        if !cached {
            // Verified by the download itself.
            return Ok(Box::new(reader));
        }
        let what = format!("cached layer {}", layer.digest);
        Ok(Box::new(CachedReader {
            inner: VerifyingReader::new(reader, &what, &layer.digest, Some(layer.size)),
            cache: self.cache.clone(),
            digest: layer.digest.clone(),
            shared: self.shared.clone(),
        }))
    }
}

/// One download thread.
struct Worker {
    shared: Arc<Shared>,
    fetcher: BlobFetcher,
    cache: LayerCache,
    spool: PathBuf,
    keep: bool,
}

impl Shared {
    /// Resolves layer `index` from the layer cache if it is there.
    fn use_cached(&self, index: usize, cache: &LayerCache) -> bool {
        let Some(file) = cache.open(&self.layers[index].digest) else {
            return false;
        };
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        self.cached.fetch_add(1, Ordering::Relaxed);
        self.slots[index].update(|s| {
            s.file = Some(Arc::new(file));
            s.written = size;
            s.outcome = Some(Ok(true));
        });
        true
    }

    /// Takes up to `want` spare connections; returns how many.
    fn take_connections(&self, want: usize) -> usize {
        let mut spare = self.spare.lock_or_poisoned();
        let n = want.min(*spare);
        *spare -= n;
        n
    }

    /// Gives `n` connections back.
    fn give_connections(&self, n: usize) {
        *self.spare.lock_or_poisoned() += n;
    }
}

impl Worker {
    fn run(self) {
        self.download_all();
        self.shared.give_connections(1);
        *self.shared.running.lock_or_poisoned() -= 1;
        self.shared.stopped.notify_all();
    }

    fn download_all(&self) {
        loop {
            if self.shared.cancel.load(Ordering::Relaxed) {
                return;
            }
            let next = self.shared.queue.lock_or_poisoned().pop();
            let Some(index) = next else { return };
            let slot = &self.shared.slots[index];
            let layer = &self.shared.layers[index];
            // Another pull of this store may have brought it meanwhile, or
            // be bringing it now: wait for that one, then take it.
            if self.shared.use_cached(index, &self.cache) {
                continue;
            }
            let _held = self
                .keep
                .then(|| self.cache.hold_download(&layer.digest))
                .flatten();
            if self.shared.use_cached(index, &self.cache) {
                continue;
            }
            let outcome = self.download(index, layer);
            slot.update(|s| s.outcome = Some(outcome.map(|()| false).map_err(Some)));
        }
    }

    /// Downloads layer `index` into the spool (in parts when it is big and
    /// connections are free), then into the cache.
    fn download(&self, index: usize, layer: &LayerDesc) -> Result<()> {
        let slot = &self.shared.slots[index];
        let path = self.spool.join(format!("layer-{index}"));
        let file = File::options()
            .create_new(true)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| Error::store("create", &path, e))?;
        let file = Arc::new(file);
        slot.update(|s| {
            s.file = Some(file.clone());
            s.spool = Some(path.clone());
        });
        let extra = self
            .shared
            .take_connections(ranged::parts_for(layer.size).saturating_sub(1));
        let whole = if extra > 0 {
            let parts = ranged::Parts {
                shared: &self.shared,
                fetcher: &self.fetcher,
                index,
                file: &file,
                path: &path,
            };
            let outcome = parts.download(layer, extra + 1);
            self.shared.give_connections(extra);
            match outcome {
                Ok(ranged::Outcome::Done) => false,
                Ok(ranged::Outcome::RangesIgnored) => {
                    tracing::info!(
                        "the registry ignores range requests: layer {} in one piece",
                        layer.digest
                    );
                    true
                }
                Err(e) => return Err(e),
            }
        } else {
            true
        };
        if whole {
            self.download_whole(index, layer, &file, &path)?;
        }
        // Verified: digest and size checked at the end of the transfer.
        if self.keep {
            match self.cache.insert(&path, &layer.digest) {
                Ok(()) => slot.update(|s| s.spool = None),
                Err(e) => tracing::warn!("layer {} not kept in the layer cache: {e}", layer.digest),
            }
        }
        Ok(())
    }

    /// Downloads layer `index` in one request (resumed with ranges after
    /// failures), verified as it ends.
    fn download_whole(
        &self,
        index: usize,
        layer: &LayerDesc,
        file: &File,
        path: &std::path::Path,
    ) -> Result<()> {
        let slot = &self.shared.slots[index];
        slot.update(|s| s.written = 0);
        let mut blob = self.fetcher.blob(&layer.digest, layer.size, "layer");
        let mut buf = vec![0u8; 1 << 20];
        let mut pos = 0u64;
        loop {
            if self.shared.cancel.load(Ordering::Relaxed) {
                return Err(Error::Cancelled);
            }
            let n = match blob.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(from_io(e, |e| {
                        Error::BadImage(format!("layer {}: {e}", layer.digest))
                    }))
                }
            };
            file.write_all_at(&buf[..n], pos)
                .map_err(|e| Error::store("write", path, e))?;
            pos += n as u64;
            slot.update(|s| s.written = pos);
        }
    }
}

/// Reads one layer's file as it grows.
struct SlotReader {
    shared: Arc<Shared>,
    index: usize,
    pos: u64,
}

impl Read for SlotReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let slot = &self.shared.slots[self.index];
        let mut state = slot.lock();
        loop {
            if let Some(file) = state.file.clone().filter(|_| state.written > self.pos) {
                let want = buf.len().min((state.written - self.pos) as usize);
                drop(state);
                let n = file.read_at(&mut buf[..want], self.pos)?;
                self.pos += n as u64;
                return Ok(n);
            }
            match &mut state.outcome {
                Some(Ok(_)) => {
                    // Read whole: a copy the cache did not take (a spool
                    // is cleared when the cache takes it) is not needed.
                    if let Some(spool) = state.spool.take() {
                        let _ = std::fs::remove_file(spool);
                    }
                    return Ok(0);
                }
                Some(Err(e)) => {
                    let e = e.take().unwrap_or(Error::Cancelled);
                    return Err(to_io(e));
                }
                None if self.shared.cancel.load(Ordering::Relaxed) => {
                    return Err(to_io(Error::Cancelled));
                }
                None => {
                    state = slot.changed.wait(state).unwrap_or_else(|p| p.into_inner());
                }
            }
        }
    }
}

/// A cached blob, verified as it is read; one that fails is removed from
/// the cache.
struct CachedReader {
    inner: VerifyingReader<SlotReader>,
    cache: LayerCache,
    digest: String,
    shared: Arc<Shared>,
}

impl Read for CachedReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf).inspect_err(|e| {
            if crate::layer::is_integrity_failure(e) {
                tracing::warn!(
                    "cached layer {} is corrupt; removed from the layer cache",
                    self.digest
                );
                self.cache.remove(&self.digest);
                self.shared.evicted.store(true, Ordering::Relaxed);
            }
        })
    }
}
