//! The squashfs 4.0 reader: lazy (nothing but the superblock and the id
//! table is read when an image opens), bounded (caches of fixed budgets,
//! limits on every size an image states) and strict (every position is
//! checked against the image's end; every cursor only moves forward).
//!
//! The format is the kernel's (fs/squashfs, squashfs_fs.h) as
//! squashfs-tools and squashfs-tools-ng write it.

mod cache;
pub mod compress;
mod dir;
mod error;
pub(crate) mod file;
mod inode;
mod lzo;
mod metadata;
mod path;
pub mod piece;
pub mod profile;
mod source;
pub mod superblock;
mod tables;
mod xattr;

use std::fs::File;
use std::sync::Arc;

pub use compress::Compressor;
pub use dir::{Entry, Listing};
pub use error::{Error, Result};
pub use inode::{Body, DirBody, FileBody, Inode, InodeRef, Kind};
pub use piece::Piece;
pub use superblock::Superblock;

use cache::Cache;
use source::Source;
pub use tables::Fragment;

/// How much each cache may hold.
#[derive(Debug, Clone, Copy)]
pub struct Budgets {
    /// Bytes of decompressed metadata blocks.
    pub metadata: usize,
    /// Bytes of decompressed data and fragment blocks.
    pub data: usize,
    /// Parsed inodes.
    pub inodes: usize,
    /// Bytes (about) of parsed directory listings.
    pub listings: usize,
}

impl Default for Budgets {
    fn default() -> Self {
        Budgets {
            metadata: 16 << 20,
            data: 32 << 20,
            inodes: 64 * 1024,
            listings: 32 << 20,
        }
    }
}

/// An open squashfs image.
#[derive(Debug)]
pub struct Image {
    src: Source,
    sb: Superblock,
    ids: Vec<u32>,
    budgets: Budgets,
    meta_cache: Cache<u64, metadata::MetaBlock>,
    /// Keyed by position and size word: a block is only ever found under
    /// the name it was read by (see [`profile`]).
    data_cache: Cache<(u64, u32), Vec<u8>>,
    frag_cache: Cache<u32, Fragment>,
    inode_cache: Cache<InodeRef, Inode>,
    dir_cache: Cache<InodeRef, Listing>,
    list_cache: Cache<InodeRef, file::BlockList>,
    /// Notes the blocks decompressed, for a read profile.
    recorder: Option<Arc<profile::Recorder>>,
}

impl Image {
    /// Opens the squashfs image in `file` starting at byte `offset`.
    pub fn open(file: File, offset: u64) -> Result<Self> {
        Self::open_with(file, offset, Budgets::default())
    }

    /// [`Image::open`], every read checked against the verity table at
    /// the file's end, whose digest is `root` (see [`crate::verity`]).
    pub fn open_verified(file: File, offset: u64, root: &str) -> Result<Self> {
        Self::from_source(Source::verified(file, offset, root)?, Budgets::default())
    }

    /// [`Image::open`] with cache budgets of the caller's choosing.
    pub fn open_with(file: File, offset: u64, budgets: Budgets) -> Result<Self> {
        Self::from_source(Source::new(file, offset)?, budgets)
    }

    fn from_source(src: Source, budgets: Budgets) -> Result<Self> {
        let mut b = [0u8; superblock::SIZE];
        if src.size() < b.len() as u64 {
            return Err(Error::NotSquashfs("shorter than a superblock".into()));
        }
        src.read_at(0, &mut b)?;
        let sb = Superblock::parse(&b, src.size())?;
        let mut image = Image {
            src,
            sb,
            ids: Vec::new(),
            budgets,
            meta_cache: Cache::new(budgets.metadata),
            data_cache: Cache::new(budgets.data),
            frag_cache: Cache::new(64 * 1024),
            inode_cache: Cache::new(budgets.inodes),
            dir_cache: Cache::new(budgets.listings),
            list_cache: Cache::new(16 << 20),
            recorder: None,
        };
        image.ids = image.read_ids()?;
        Ok(image)
    }

    /// The superblock.
    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    /// The root directory's reference.
    pub fn root(&self) -> InodeRef {
        self.sb.root_inode
    }

    /// Looks `name` up in directory `dir` (at `r`).
    pub fn lookup(&self, r: InodeRef, dir: &Inode, name: &[u8]) -> Result<Option<Entry>> {
        Ok(self.listing(r, dir)?.find(name).cloned())
    }
}
