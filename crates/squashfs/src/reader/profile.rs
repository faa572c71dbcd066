//! Read profiles: the blocks an image's first start on a node decompressed,
//! in the order it needed them, so that the next server of the same image
//! can decompress them ahead (while the keeper builds the container's root
//! and the run sets itself up) instead of one round trip at a time while
//! the program loads.
//!
//! A profile is advice, never data: a block is named by where it lies in
//! the image and its stored size word, decompressed by the same checked
//! path a read takes, and cached under that same name, so a profile that
//! names wrong blocks (a damaged or forged file) costs bounded work and
//! memory and can never change what a read returns.
//!
//! The file: `berthpf1`, a count (u32, little endian), that many entries
//! (a kind byte, 0 metadata or 1 data, the position as u64 and the size
//! word as u32), then the first 16 bytes of the BLAKE3 hash of all before.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::metadata::META_SIZE;
use super::Image;

/// The file's first bytes.
const MAGIC: &[u8; 8] = b"berthpf1";
/// Bytes of one entry.
const ENTRY: usize = 1 + 8 + 4;
/// Bytes of the digest at the end.
const DIGEST: usize = 16;
/// The most entries a profile holds.
pub const MAX_BLOCKS: usize = 4096;
/// The largest profile file.
pub const MAX_BYTES: usize = MAGIC.len() + 4 + MAX_BLOCKS * ENTRY + DIGEST;

/// What is left of a profile's budgets: bytes of decompressed metadata and
/// data blocks (see [`Image::profile_budget`]), a metadata block weighing
/// [`META_SIZE`] and a data block the image's block size. The one measure
/// of what a profile may name, a recorder note and a prefetch hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Bytes of metadata blocks left.
    pub meta: usize,
    /// Bytes of data blocks left.
    pub data: usize,
    /// What a data block weighs.
    pub block_size: usize,
}

impl Budget {
    /// Spends `block`'s weight if what is left of its kind's budget holds
    /// it; whether it did.
    fn spend(&mut self, block: &Block) -> bool {
        let (left, weight) = match block {
            Block::Meta(_) => (&mut self.meta, META_SIZE),
            Block::Data(..) => (&mut self.data, self.block_size),
        };
        if *left < weight {
            return false;
        }
        *left -= weight;
        true
    }
}

/// The profile to write after a start that read `recent`, when the last
/// one named `older`: `recent` in order, then what `older` named that this
/// start did not read, within [`MAX_BLOCKS`] and `budget`. So a node that
/// runs several programs from one image keeps them all ahead, the latest
/// first, until the budgets push the oldest out.
pub fn merge(recent: &[Block], older: &[Block], mut budget: Budget) -> Vec<Block> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for b in recent.iter().chain(older) {
        if out.len() >= MAX_BLOCKS {
            break;
        }
        if seen.contains(b) || !budget.spend(b) {
            continue;
        }
        seen.insert(*b);
        out.push(*b);
    }
    out
}

/// A block the reader decompressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Block {
    /// A metadata block at this position.
    Meta(u64),
    /// A data or fragment block at this position, with its size word.
    Data(u64, u32),
}

/// The profile file's bytes for `blocks`.
pub fn encode(blocks: &[Block]) -> Vec<u8> {
    let blocks = &blocks[..blocks.len().min(MAX_BLOCKS)];
    let mut out = Vec::with_capacity(MAGIC.len() + 4 + blocks.len() * ENTRY + DIGEST);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(blocks.len() as u32).to_le_bytes());
    for b in blocks {
        let (kind, pos, word) = match *b {
            Block::Meta(pos) => (0u8, pos, 0u32),
            Block::Data(pos, word) => (1, pos, word),
        };
        out.push(kind);
        out.extend_from_slice(&pos.to_le_bytes());
        out.extend_from_slice(&word.to_le_bytes());
    }
    let digest = blake3::hash(&out);
    out.extend_from_slice(&digest.as_bytes()[..DIGEST]);
    out
}

/// The blocks of a profile file; None when it is not one (empty, cut
/// short, damaged, of another version).
pub fn decode(bytes: &[u8]) -> Option<Vec<Block>> {
    let body_len = bytes.len().checked_sub(DIGEST)?;
    let (body, digest) = bytes.split_at(body_len);
    if blake3::hash(body).as_bytes()[..DIGEST] != *digest {
        return None;
    }
    let rest = body.strip_prefix(MAGIC)?;
    let (count, entries) = rest.split_at_checked(4)?;
    let count = u32::from_le_bytes(count.try_into().ok()?) as usize;
    if count > MAX_BLOCKS || entries.len() != count * ENTRY {
        return None;
    }
    entries
        .chunks_exact(ENTRY)
        .map(|e| {
            let pos = u64::from_le_bytes(e[1..9].try_into().ok()?);
            let word = u32::from_le_bytes(e[9..13].try_into().ok()?);
            match e[0] {
                0 => Some(Block::Meta(pos)),
                1 => Some(Block::Data(pos, word)),
                _ => None,
            }
        })
        .collect()
}

/// Notes the blocks reads ask for (each once, in the order first asked)
/// for a while after the server started, within a [`Budget`]. What a prefetch decompresses is not noted, only what
/// reads use: each start's profile is what that start needed.
#[derive(Debug)]
pub struct Recorder {
    until: Instant,
    closed: AtomicBool,
    state: Mutex<Noted>,
}

#[derive(Debug)]
struct Noted {
    blocks: Vec<Block>,
    seen: HashSet<Block>,
    budget: Budget,
}

impl Recorder {
    /// Notes for `window` from now, within `budget`.
    pub fn new(window: Duration, budget: Budget) -> Self {
        Recorder {
            until: Instant::now() + window,
            closed: AtomicBool::new(false),
            state: Mutex::new(Noted {
                blocks: Vec::new(),
                seen: HashSet::new(),
                budget,
            }),
        }
    }

    /// When noting ends.
    pub fn until(&self) -> Instant {
        self.until
    }

    /// Notes `block` unless it was noted before, the window has closed or
    /// its kind's budget is spent.
    pub(crate) fn note(&self, block: Block) {
        if self.closed.load(Ordering::Relaxed) {
            return;
        }
        if Instant::now() >= self.until {
            self.closed.store(true, Ordering::Relaxed);
            return;
        }
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.blocks.len() >= MAX_BLOCKS || s.seen.contains(&block) || !s.budget.spend(&block) {
            return;
        }
        s.seen.insert(block);
        s.blocks.push(block);
    }

    /// The blocks noted so far, in order.
    pub fn noted(&self) -> Vec<Block> {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .blocks
            .clone()
    }

    /// How many blocks are noted so far.
    pub fn len(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .blocks
            .len()
    }

    /// Whether nothing is noted yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The blocks noted, in order; noting stops.
    pub fn take(&self) -> Vec<Block> {
        self.closed.store(true, Ordering::Relaxed);
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.seen.clear();
        std::mem::take(&mut s.blocks)
    }
}

impl Image {
    /// Notes the blocks reads ask for from now on in `recorder`. The
    /// budget to give it: [`Image::profile_budget`].
    pub fn record_into(&mut self, recorder: std::sync::Arc<Recorder>) {
        self.recorder = Some(recorder);
    }

    /// Half of the metadata and data caches' budgets: what a profile may
    /// name and [`Image::prefetch`] hold without the caches dropping what
    /// it decompressed before a read asks for it.
    pub fn profile_budget(&self) -> Budget {
        Budget {
            meta: self.budgets.metadata / 2,
            data: self.budgets.data / 2,
            block_size: self.sb.block_size as usize,
        }
    }

    /// Decompresses `blocks` into the caches, in order, as a read would
    /// (checked against the verity table where there is one); a block
    /// that is no block of this image is skipped. Returns how many were
    /// decompressed.
    pub fn prefetch(&self, blocks: &[Block]) -> usize {
        let mut budget = self.profile_budget();
        let mut done = 0;
        for b in blocks.iter().take(MAX_BLOCKS) {
            let ok = budget.spend(b)
                && match *b {
                    Block::Meta(pos) => self.load_meta_block(pos).is_ok(),
                    Block::Data(pos, word) => self.load_data_block(pos, word).is_ok(),
                };
            done += usize::from(ok);
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Block> {
        vec![
            Block::Meta(96),
            Block::Data(4096, 0x1234),
            Block::Data(u64::MAX, u32::MAX),
        ]
    }

    #[test]
    fn a_profile_reads_back_as_written() {
        assert_eq!(decode(&encode(&sample())), Some(sample()));
        assert_eq!(decode(&encode(&[])), Some(vec![]));
    }

    #[test]
    fn a_damaged_or_short_profile_is_none() {
        let good = encode(&sample());
        for cut in 0..good.len() {
            assert_eq!(decode(&good[..cut]), None, "cut at {cut}");
        }
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x40;
            assert_eq!(decode(&bad), None, "byte {i} flipped");
        }
    }

    #[test]
    fn noting_skips_repeats_and_stops_at_the_budget_the_window_and_take() {
        let budget = budget(2 * META_SIZE, 100, 60);
        let r = Recorder::new(Duration::from_secs(60), budget);
        r.note(Block::Meta(1));
        r.note(Block::Data(2, 3));
        r.note(Block::Meta(1)); // noted before
        r.note(Block::Data(4, 5)); // over the data budget
        r.note(Block::Meta(6));
        r.note(Block::Meta(7)); // over the metadata budget
        assert_eq!(
            r.take(),
            vec![Block::Meta(1), Block::Data(2, 3), Block::Meta(6)]
        );
        r.note(Block::Meta(8));
        assert!(r.take().is_empty());
        let closed = Recorder::new(Duration::ZERO, budget);
        closed.note(Block::Meta(1));
        assert!(closed.take().is_empty());
    }

    /// Paths in an image and their contents.
    type Files = Vec<(String, Vec<u8>)>;

    /// An image made by mksquashfs (gzip, 4 KiB blocks, so that files
    /// span many blocks and share fragments), and its files' contents;
    /// None (skipped) without squashfs-tools, which CI must have.
    fn mksquashfs_image(dir: &std::path::Path) -> Option<(std::fs::File, Files)> {
        let src = dir.join("src");
        std::fs::create_dir_all(src.join("d")).unwrap();
        let mut files = Vec::new();
        for (i, n) in [1usize, 4095, 4097, 20_000, 70_001].iter().enumerate() {
            let data: Vec<u8> = (0..*n).map(|k| ((k * 7 + i * 13) % 251) as u8).collect();
            let name = format!("d/f{i}");
            std::fs::write(src.join(&name), &data).unwrap();
            files.push((format!("/{name}"), data));
        }
        let img = dir.join("img.sqfs");
        let made = std::process::Command::new("mksquashfs")
            .arg(&src)
            .arg(&img)
            .args(["-noappend", "-quiet", "-no-progress", "-b", "4096"])
            .output();
        match made {
            Ok(o) if o.status.success() => {}
            _ if std::env::var_os("CI").is_some() => panic!("mksquashfs missing under CI"),
            _ => {
                eprintln!("skipped: squashfs-tools not installed");
                return None;
            }
        }
        Some((std::fs::File::open(img).unwrap(), files))
    }

    fn read_all(image: &Image, files: &Files) {
        for (path, data) in files {
            let got = image.read_path(path, 1 << 20).unwrap().unwrap();
            assert!(got == *data, "{path} reads differently");
        }
    }

    /// The blocks noted while every file of the image in `file` is read
    /// twice.
    fn noted_reading(file: &std::fs::File, files: &Files) -> Vec<Block> {
        let mut image = Image::open(file.try_clone().unwrap(), 0).unwrap();
        let budget = image.profile_budget();
        let r = std::sync::Arc::new(Recorder::new(Duration::from_secs(60), budget));
        image.record_into(r.clone());
        read_all(&image, files);
        read_all(&image, files);
        r.take()
    }

    #[test]
    fn a_recorded_profile_names_what_reads_used_and_prefetches_it() {
        let d = tempfile::tempdir().unwrap();
        let Some((file, files)) = mksquashfs_image(d.path()) else {
            return;
        };
        let blocks = decode(&encode(&noted_reading(&file, &files))).unwrap();
        let data_blocks = blocks
            .iter()
            .filter(|b| matches!(b, Block::Data(..)))
            .count();
        // 0 + 0 + 1 + 1 + 4 + 17 full blocks, one or more fragments.
        assert!(data_blocks >= 24, "{blocks:?}");
        assert!(blocks.iter().any(|b| matches!(b, Block::Meta(_))));
        let fresh = Image::open(file, 0).unwrap();
        assert_eq!(fresh.prefetch(&blocks), blocks.len());
        read_all(&fresh, &files);
    }

    /// A forged profile (every real block under a wrong size word, and
    /// positions that are no block) costs work, and changes no read.
    #[test]
    fn a_forged_profile_changes_no_read() {
        let d = tempfile::tempdir().unwrap();
        let Some((file, files)) = mksquashfs_image(d.path()) else {
            return;
        };
        let mut forged = Vec::new();
        for b in noted_reading(&file, &files) {
            match b {
                Block::Data(pos, word) => {
                    forged.push(Block::Data(pos, word ^ 1));
                    forged.push(Block::Data(pos, word ^ super::super::file::UNCOMPRESSED));
                    forged.push(Block::Data(pos + 1, word));
                }
                Block::Meta(pos) => forged.extend([Block::Meta(pos + 1), Block::Meta(pos + 2)]),
            }
        }
        forged.push(Block::Data(u64::MAX - 8, 100));
        forged.push(Block::Meta(u64::MAX));
        let fresh = Image::open(file, 0).unwrap();
        fresh.prefetch(&forged);
        read_all(&fresh, &files);
    }

    fn budget(meta: usize, data: usize, block_size: usize) -> Budget {
        Budget {
            meta,
            data,
            block_size,
        }
    }

    #[test]
    fn a_merge_keeps_the_latest_first_then_the_rest_within_budgets() {
        let recent = [Block::Data(10, 1), Block::Meta(5)];
        let older = [
            Block::Meta(5),
            Block::Data(20, 1),
            Block::Data(30, 1),
            Block::Meta(6),
        ];
        assert_eq!(
            merge(&recent, &older, budget(2 * META_SIZE, 3 * 100, 100)),
            vec![
                Block::Data(10, 1),
                Block::Meta(5),
                Block::Data(20, 1),
                Block::Data(30, 1),
                Block::Meta(6)
            ]
        );
        // Budgets push the oldest out.
        assert_eq!(
            merge(&recent, &older, budget(META_SIZE, 2 * 100, 100)),
            vec![Block::Data(10, 1), Block::Meta(5), Block::Data(20, 1)]
        );
        let many: Vec<Block> = (0..2 * MAX_BLOCKS as u64).map(Block::Meta).collect();
        assert_eq!(
            merge(&many, &[], budget(usize::MAX, 0, 1)).len(),
            MAX_BLOCKS
        );
    }

    proptest::proptest! {
        /// Any bytes decode to a profile or to None, never a panic.
        #[test]
        fn any_bytes_decode_without_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = decode(&bytes);
        }
    }
}
