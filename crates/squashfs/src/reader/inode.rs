//! Inodes: parsed from the inode table when first asked for, cached.

use std::sync::Arc;

use super::error::{corrupt, Result};
use super::metadata::META_SIZE;
use super::Image;

/// An inode's reference: its metadata block (from the inode table's start)
/// shifted left 16 bits, or'ed with its offset in that block.
pub type InodeRef = u64;

/// No xattrs, no fragment.
const NONE: u32 = u32::MAX;
/// The longest symlink target read.
const MAX_LINK: u32 = 64 * 1024;
/// The most data blocks one file may have (2 TiB at 128 KiB blocks).
pub const MAX_BLOCKS: u64 = 1 << 24;

/// What kind of inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link.
    Symlink,
    /// A block device.
    BlockDev,
    /// A character device.
    CharDev,
    /// A named pipe.
    Fifo,
    /// A socket.
    Socket,
}

impl Kind {
    /// The kind of a basic inode type (1 to 7; the extended ones are 7
    /// more).
    pub fn from_type(t: u16) -> Option<Kind> {
        Some(match t {
            1 | 8 => Kind::Dir,
            2 | 9 => Kind::File,
            3 | 10 => Kind::Symlink,
            4 | 11 => Kind::BlockDev,
            5 | 12 => Kind::CharDev,
            6 | 13 => Kind::Fifo,
            7 | 14 => Kind::Socket,
            _ => return None,
        })
    }

    /// The `S_IFMT` bits.
    pub fn mode_bits(self) -> u32 {
        match self {
            Kind::Dir => libc::S_IFDIR,
            Kind::File => libc::S_IFREG,
            Kind::Symlink => libc::S_IFLNK,
            Kind::BlockDev => libc::S_IFBLK,
            Kind::CharDev => libc::S_IFCHR,
            Kind::Fifo => libc::S_IFIFO,
            Kind::Socket => libc::S_IFSOCK,
        }
    }
}

/// A directory's listing: where it is and how long.
#[derive(Debug, Clone, Copy)]
pub struct DirBody {
    /// Its first metadata block, from the directory table's start.
    pub start: u32,
    /// Its offset in that block.
    pub offset: u16,
    /// The listing's size as stored (3 more than its bytes).
    pub size: u32,
    /// The parent directory's inode number.
    pub parent: u32,
}

/// A regular file's data.
#[derive(Debug, Clone, Copy)]
pub struct FileBody {
    /// Where its first data block is.
    pub blocks_start: u64,
    /// Its tail end: fragment index and offset in that fragment.
    pub fragment: Option<(u32, u32)>,
    /// Its full (or sparse) blocks.
    pub block_count: u64,
    /// Where the list of block sizes starts: metadata block position and
    /// offset.
    pub list_at: (u64, usize),
    /// Bytes of it that are holes (extended inodes only).
    pub sparse: u64,
}

/// What an inode holds besides its attributes.
#[derive(Debug, Clone)]
pub enum Body {
    /// A directory.
    Dir(DirBody),
    /// A regular file.
    File(FileBody),
    /// A symlink's target.
    Symlink(Vec<u8>),
    /// A device node's number (the kernel's new encoding).
    Device(u32),
    /// A fifo or socket.
    Plain,
}

/// An inode.
#[derive(Debug, Clone)]
pub struct Inode {
    /// Its inode number.
    pub number: u32,
    /// Its kind.
    pub kind: Kind,
    /// Permission bits (with setuid, setgid, sticky).
    pub perm: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Modification time, seconds.
    pub mtime: u32,
    /// Links.
    pub nlink: u32,
    /// Size in bytes (a directory's as stored, a symlink's target length).
    pub size: u64,
    /// Its xattr index.
    pub xattr: Option<u32>,
    /// Its kind's data.
    pub body: Body,
}

impl Inode {
    /// The `st_mode`.
    pub fn mode(&self) -> u32 {
        self.kind.mode_bits() | u32::from(self.perm & 0o7777)
    }
}

fn some(v: u32) -> Option<u32> {
    (v != NONE).then_some(v)
}

impl Image {
    /// The inode at `r`, cached.
    pub fn inode(&self, r: InodeRef) -> Result<Arc<Inode>> {
        if let Some(i) = self.inode_cache.get(&r) {
            return Ok(i);
        }
        let i = Arc::new(self.parse_inode(r)?);
        self.inode_cache.put(r, i.clone(), 1);
        Ok(i)
    }

    fn parse_inode(&self, r: InodeRef) -> Result<Inode> {
        let block = r >> 16;
        let offset = (r & 0xffff) as usize;
        if r >> 48 != 0 || offset >= META_SIZE {
            return Err(corrupt(format!("inode reference {r:#x} is malformed")));
        }
        let pos = self.sb.inode_table + block;
        if pos >= self.sb.dir_table {
            return Err(corrupt(format!(
                "inode reference {r:#x} is past the inode table"
            )));
        }
        let mut c = self.cursor(pos, offset)?;
        let t = c.u16()?;
        let kind = Kind::from_type(t).ok_or_else(|| corrupt(format!("inode type {t}")))?;
        let perm = c.u16()?;
        let uid = self.id(c.u16()?)?;
        let gid = self.id(c.u16()?)?;
        let mtime = c.u32()?;
        let number = c.u32()?;
        let extended = t >= 8;
        let mut xattr = None;
        let (nlink, size, body) = match (kind, extended) {
            (Kind::Dir, false) => {
                let start = c.u32()?;
                let nlink = c.u32()?;
                let size = u32::from(c.u16()?);
                let offset = c.u16()?;
                let parent = c.u32()?;
                (
                    nlink,
                    u64::from(size),
                    Body::Dir(DirBody {
                        start,
                        offset,
                        size,
                        parent,
                    }),
                )
            }
            (Kind::Dir, true) => {
                let nlink = c.u32()?;
                let size = c.u32()?;
                let start = c.u32()?;
                let parent = c.u32()?;
                let _index_count = c.u16()?;
                let offset = c.u16()?;
                xattr = some(c.u32()?);
                (
                    nlink,
                    u64::from(size),
                    Body::Dir(DirBody {
                        start,
                        offset,
                        size,
                        parent,
                    }),
                )
            }
            (Kind::File, false) => {
                let blocks_start = u64::from(c.u32()?);
                let frag = c.u32()?;
                let frag_offset = c.u32()?;
                let size = u64::from(c.u32()?);
                (
                    1,
                    size,
                    self.file_body(&c, blocks_start, frag, frag_offset, size, 0)?,
                )
            }
            (Kind::File, true) => {
                let blocks_start = c.u64()?;
                let size = c.u64()?;
                let sparse = c.u64()?;
                let nlink = c.u32()?;
                let frag = c.u32()?;
                let frag_offset = c.u32()?;
                xattr = some(c.u32()?);
                (
                    nlink,
                    size,
                    self.file_body(&c, blocks_start, frag, frag_offset, size, sparse)?,
                )
            }
            (Kind::Symlink, _) => {
                let nlink = c.u32()?;
                let len = c.u32()?;
                if len > MAX_LINK {
                    return Err(corrupt(format!("a symlink target of {len} bytes")));
                }
                let target = c.bytes(len as usize)?;
                (nlink, u64::from(len), Body::Symlink(target))
            }
            (Kind::BlockDev | Kind::CharDev, _) => {
                let nlink = c.u32()?;
                let rdev = c.u32()?;
                (nlink, 0, Body::Device(rdev))
            }
            (Kind::Fifo | Kind::Socket, _) => (c.u32()?, 0, Body::Plain),
        };
        // Extended symlinks, devices, fifos and sockets end with theirs.
        if extended && !matches!(kind, Kind::Dir | Kind::File) {
            xattr = some(c.u32()?);
        }
        Ok(Inode {
            number,
            kind,
            perm,
            uid,
            gid,
            mtime,
            nlink,
            size,
            xattr,
            body,
        })
    }

    fn file_body(
        &self,
        c: &super::metadata::Cursor<'_>,
        blocks_start: u64,
        frag: u32,
        frag_offset: u32,
        size: u64,
        sparse: u64,
    ) -> Result<Body> {
        let bs = u64::from(self.sb.block_size);
        let fragment = some(frag).map(|f| (f, frag_offset));
        let block_count = if fragment.is_some() {
            size / bs
        } else {
            size.div_ceil(bs)
        };
        if block_count > MAX_BLOCKS {
            return Err(corrupt(format!(
                "a file of {size} bytes: too large to serve"
            )));
        }
        Ok(Body::File(FileBody {
            blocks_start,
            fragment,
            block_count,
            list_at: c.position(),
            sparse,
        }))
    }
}
