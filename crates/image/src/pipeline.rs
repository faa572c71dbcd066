//! From a resolved image (config + layer list) and a source of layer blobs to
//! a published squashfs image in the store.
//!
//! Threads: the source delivers compressed bytes (a download task, or reads
//! from an archive); this thread decompresses, hashes and flattens; tar2sqfs
//! compresses with its own workers. Layers stream in one pass each, from the
//! top down (see [`crate::flatten`]).

use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

use berth_config::SquashfsSettings;
use oci_spec::image::{ImageConfiguration, ImageManifest};

use crate::error::{Error, Result};
use crate::flatten::Flattener;
use crate::layer::{from_io, LayerStream};
use crate::squash::SquashWriter;
use crate::store::{timestamp, ImageRecord, LayerRecord, SquashfsRecord, Store, StoredImage};

/// One layer as the manifest lists it.
#[derive(Debug, Clone)]
pub struct LayerDesc {
    /// Digest of the blob.
    pub digest: String,
    /// Size of the blob.
    pub size: u64,
    /// Media type.
    pub media_type: String,
}

/// An image whose manifest and config are known and verified.
#[derive(Debug, Clone)]
pub struct ResolvedImage {
    /// Digest of the platform manifest, when there is one.
    pub manifest_digest: Option<String>,
    /// The config, byte for byte.
    pub config_bytes: Vec<u8>,
    /// The parsed config.
    pub config: ImageConfiguration,
    /// Layers, bottom first.
    pub layers: Vec<LayerDesc>,
    /// Where it came from.
    pub source: String,
}

/// Delivers layer blobs.
pub trait LayerSource {
    /// Opens the blob of `layer` (compressed as stored). Implementations
    /// verify size and digest where the source records them; diff_ids are
    /// verified here in any case.
    fn open_layer(&self, layer: &LayerDesc) -> Result<Box<dyn Read + Send + '_>>;
}

/// Receives progress events.
pub trait Progress: Sync {
    /// The image is already in the store.
    fn cached(&self, _id: &str) {}
    /// A layer starts (index bottom-first, count, blob size).
    fn layer_start(&self, _index: usize, _count: usize, _layer: &LayerDesc) {}
    /// Compressed bytes of the current layer consumed so far.
    fn layer_bytes(&self, _index: usize, _bytes: u64) {}
    /// A layer is done.
    fn layer_done(&self, _index: usize) {}
    /// Another process converts the same image; waiting for it.
    fn waiting(&self, _id: &str) {}
    /// Layers are read; the squashfs writer is finishing.
    fn finishing(&self) {}
    /// The image is stored; `cached` of its `count` layers came from the
    /// store's layer cache instead of the registry.
    fn layers_cached(&self, _cached: usize, _count: usize) {}
}

/// A [`Progress`] that reports nothing.
pub struct NoProgress;
impl Progress for NoProgress {}

/// Checks that a manifest describes a container image berth can run.
pub fn layers_of(manifest: &ImageManifest, reference: &str) -> Result<Vec<LayerDesc>> {
    let config_type = manifest.config().media_type().to_string();
    if !(config_type.contains("image.config") || config_type.contains("container.image")) {
        return Err(Error::BadImage(format!(
            "{reference} is not a container image (its config has media type {config_type}); it may be an artifact such as a Helm chart or a signature"
        )));
    }
    let mut layers = Vec::new();
    for l in manifest.layers() {
        let media_type = l.media_type().to_string();
        if media_type.contains("encrypted") {
            return Err(Error::BadImage(format!(
                "{reference}: layer {} is encrypted, which berth does not support",
                l.digest()
            )));
        }
        if media_type.contains("foreign") || media_type.contains("nondistributable") {
            return Err(Error::BadImage(format!(
                "{reference}: layer {} is a foreign (Windows) layer, which berth cannot run",
                l.digest()
            )));
        }
        if !(media_type.contains("tar") || media_type.contains("rootfs.diff")) {
            return Err(Error::BadImage(format!(
                "{reference}: layer {} has media type {media_type}, not a filesystem layer",
                l.digest()
            )));
        }
        layers.push(LayerDesc {
            digest: l.digest().to_string(),
            size: l.size(),
            media_type,
        });
    }
    Ok(layers)
}

pub use crate::image_config::{parse_config, run_config};

fn platform_of(config: &ImageConfiguration) -> String {
    let mut p = format!("{}/{}", config.os(), config.architecture());
    if let Some(v) = config.variant() {
        p.push('/');
        p.push_str(v);
    }
    p
}

/// A blob reader the pipeline keeps a handle on, to drain it after an error.
#[derive(Clone)]
struct SharedReader<'a>(Arc<Mutex<Box<dyn Read + Send + 'a>>>);

impl Read for SharedReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.0.lock() {
            Ok(mut r) => r.read(buf),
            Err(_) => Err(io::Error::other("blob reader poisoned")),
        }
    }
}

impl SharedReader<'_> {
    /// Reads the rest; an integrity or network failure comes back typed.
    fn drain(mut self) -> Result<()> {
        io::copy(&mut self, &mut io::sink())
            .map(|_| ())
            .map_err(|e| from_io(e, |e| Error::BadImage(e.to_string())))
            .or_else(|e| match e {
                Error::BadImage(_) => Ok(()),
                other => Err(other),
            })
    }
}

/// Counts compressed bytes for progress.
struct Counting<'a, R> {
    inner: R,
    count: u64,
    index: usize,
    progress: &'a dyn Progress,
}

impl<R: Read> Read for Counting<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count += n as u64;
        self.progress.layer_bytes(self.index, self.count);
        Ok(n)
    }
}

/// Settings for a conversion.
pub struct ConvertOptions<'a> {
    /// Squashfs settings.
    pub squashfs: &'a SquashfsSettings,
    /// Compressor threads for tar2sqfs.
    pub jobs: usize,
    /// Names to point at the image once stored.
    pub names: Vec<String>,
    /// Progress sink.
    pub progress: &'a dyn Progress,
}

/// Converts `image` into the store (or reuses it), then points the names
/// at it. Exactly one process converts a given image id at a time; others
/// wait for it and reuse the result.
pub fn convert(
    store: &Store,
    image: &ResolvedImage,
    source: &dyn LayerSource,
    opts: &ConvertOptions<'_>,
) -> Result<StoredImage> {
    crate::squash::validate(opts.squashfs)?;
    let id = crate::layer::sha256_digest(&image.config_bytes);
    let diff_ids = image.config.rootfs().diff_ids().clone();
    if diff_ids.len() != image.layers.len() {
        return Err(Error::BadImage(format!(
            "{}: the manifest lists {} layers but the config has {} diff_ids",
            image.source,
            image.layers.len(),
            diff_ids.len()
        )));
    }
    if let Ok(existing) = store.find(&id) {
        opts.progress.cached(&id);
        return name_image(store, existing, &opts.names);
    }
    let _lock = store.lock_image(&id)?;
    if store.has_image(&id) {
        opts.progress.waiting(&id);
        let existing = store.find(&id)?;
        return name_image(store, existing, &opts.names);
    }
    let work = store.work_dir()?;
    std::fs::write(work.path().join("config.json"), &image.config_bytes)
        .map_err(|e| Error::store("write", work.path().join("config.json"), e))?;
    let sqfs_path = work.path().join("image.sqfs");
    let mut writer = SquashWriter::start(&sqfs_path, opts.squashfs, opts.jobs)?;
    let t0 = std::time::Instant::now();
    let result = flatten_into(
        &mut writer,
        image,
        source,
        &diff_ids,
        work.path(),
        opts.progress,
    );
    tracing::debug!("layers read and flattened in {:?}", t0.elapsed());
    let stats = match result {
        Ok(stats) => {
            opts.progress.finishing();
            writer.finish()?;
            tracing::debug!("squashfs written at {:?}", t0.elapsed());
            stats
        }
        Err(e @ Error::HostTool(_)) => {
            // The writer quit (disk full, ...): its own message says why.
            writer.finish()?;
            return Err(e);
        }
        Err(e) => {
            writer.abort();
            return Err(e);
        }
    };
    let sealed = crate::seal::seal_file(&sqfs_path)?;
    tracing::debug!("squashfs hashed and synced at {:?}", t0.elapsed());
    let record = ImageRecord {
        version: 1,
        id: id.clone(),
        manifest_digest: image.manifest_digest.clone(),
        source: image.source.clone(),
        platform: platform_of(&image.config),
        stored_at: timestamp(),
        run: run_config(&image.config),
        layers: image
            .layers
            .iter()
            .zip(diff_ids.iter())
            .map(|(l, d)| LayerRecord {
                digest: l.digest.clone(),
                diff_id: d.clone(),
                media_type: l.media_type.clone(),
                size: l.size,
            })
            .collect(),
        squashfs: SquashfsRecord {
            file: "image.sqfs".to_string(),
            size: sealed.size,
            sha256: sealed.sha256,
            compressor: opts.squashfs.compressor.clone(),
            block_size: opts.squashfs.block_size,
            offset: 0,
            verity: Some(sealed.verity),
        },
        dropped_devices: stats.dropped_devices,
    };
    store.publish(work, &record)?;
    let stored = store.find(&id)?;
    name_image(store, stored, &opts.names)
}

/// Points `names` at `image` in `store`.
pub(crate) fn name_image(
    store: &Store,
    mut image: StoredImage,
    names: &[String],
) -> Result<StoredImage> {
    for n in names {
        store.set_name(n, &image.record.id)?;
        if !image.names.contains(n) {
            image.names.push(n.clone());
        }
    }
    Ok(image)
}

fn flatten_into(
    writer: &mut SquashWriter,
    image: &ResolvedImage,
    source: &dyn LayerSource,
    diff_ids: &[String],
    spool_dir: &Path,
    progress: &dyn Progress,
) -> Result<crate::flatten::FlattenStats> {
    let input = writer.input()?;
    let mut flattener = Flattener::new(input, spool_dir);
    flattener.expect_layers(image.layers.len());
    let count = image.layers.len();
    for index in (0..count).rev() {
        let layer = &image.layers[index];
        progress.layer_start(index, count, layer);
        let blob = source.open_layer(layer)?;
        // Decompression and hashing run on their own thread, tar parsing
        // and flattening on this one, compression in tar2sqfs: three stages
        // that overlap.
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(16);
        let (added, decompressed) = std::thread::scope(|scope| {
            let worker = scope.spawn(move || decompress_layer(blob, index, progress, tx));
            let reader = ChunkReader {
                rx,
                current: Vec::new(),
                pos: 0,
            };
            let added = flattener.add_layer(&layer.digest, reader);
            let decompressed = worker.join().unwrap_or_else(|_| {
                Err(Error::BadImage(
                    "the decompressor thread panicked".to_string(),
                ))
            });
            (added, decompressed)
        });
        // The decompressor's error explains the flattener's (a truncated
        // stream), so it comes first.
        let diff_id = match (decompressed, added) {
            (Err(Error::Cancelled), Err(e)) => return Err(e),
            (Err(e), _) => return Err(e),
            (Ok(_), Err(e)) => return Err(e),
            (Ok(d), Ok(())) => d,
        };
        if diff_id != diff_ids[index] {
            return Err(Error::Integrity {
                what: format!("layer {}", layer.digest),
                detail: format!(
                    "uncompressed content is {diff_id}, but the config says {}",
                    diff_ids[index]
                ),
            });
        }
        progress.layer_done(index);
    }
    let (mut out, stats) = flattener.finish()?;
    out.flush()
        .map_err(|e| Error::HostTool(format!("writing to tar2sqfs: {e}")))?;
    drop(out);
    Ok(stats)
}

/// Decompresses one layer blob into chunks for the flattener; returns the
/// diff_id. A corrupt blob usually breaks decompression before its digest
/// can be checked: it is then read to the end, and a digest mismatch is
/// reported instead of the decompressor's complaint.
fn decompress_layer(
    blob: Box<dyn Read + Send + '_>,
    index: usize,
    progress: &dyn Progress,
    tx: std::sync::mpsc::SyncSender<Vec<u8>>,
) -> Result<String> {
    let shared = SharedReader(Arc::new(Mutex::new(blob)));
    let counting = Counting {
        inner: shared.clone(),
        count: 0,
        index,
        progress,
    };
    let run = move || -> Result<String> {
        let (mut stream, _) = LayerStream::open(counting)?;
        loop {
            let mut buf = vec![0u8; 256 * 1024];
            let n = read_full(&mut stream, &mut buf)
                .map_err(|e| from_io(e, |e| Error::BadImage(format!("layer: {e}"))))?;
            if n == 0 {
                break;
            }
            buf.truncate(n);
            if tx.send(buf).is_err() {
                return Err(Error::Cancelled);
            }
        }
        Ok(stream.finish().0)
    };
    match run() {
        Ok(d) => Ok(d),
        // Failures of the transfer or of the disk (a download spooled to a
        // full store) say all there is; only a decompressor's complaint
        // may hide a digest mismatch.
        Err(
            e @ (Error::Integrity { .. }
            | Error::Network { .. }
            | Error::Auth { .. }
            | Error::Store { .. }
            | Error::HostTool(_)
            | Error::Cancelled),
        ) => Err(e),
        Err(e) => Err(shared.drain().err().unwrap_or(e)),
    }
}

/// Fills `buf` as far as the stream allows (fewer, larger chunks).
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Reads the decompressor's chunks.
struct ChunkReader {
    rx: std::sync::mpsc::Receiver<Vec<u8>>,
    current: Vec<u8>,
    pos: usize,
}

impl Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos >= self.current.len() {
            match self.rx.recv() {
                Ok(chunk) => {
                    self.current = chunk;
                    self.pos = 0;
                }
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len() - self.pos);
        buf[..n].copy_from_slice(&self.current[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}
