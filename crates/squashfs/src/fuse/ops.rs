//! Answers to each request, from the image. Nothing here keeps state per
//! request: opens are zero-message (OPEN and OPENDIR answer ENOSYS, and
//! the kernel then keeps pages and listings cached), node ids are inode
//! references, and FORGET has nothing to forget.

use std::sync::atomic::{AtomicU32, Ordering};

use super::abi::{self, op, Reply, Request};
use crate::reader::{Body, Image, Inode, InodeRef, Kind, Piece, Result};

/// Seconds entries and attributes stay valid: the image never changes.
/// (Not u64::MAX: the kernel turns the seconds into a signed time.)
pub const FOREVER: u64 = 1 << 32;
/// Node ids other than the root's are inode references with this bit.
const NODE_BIT: u64 = 1 << 48;
/// The most a READ returns.
pub const MAX_READ: usize = 1 << 20;
/// Corruption reports logged before the log goes quiet.
const MAX_REPORTS: u32 = 100;

/// The file system a connection serves.
#[derive(Debug)]
pub struct Fs {
    image: Image,
    has_xattrs: bool,
    reports: AtomicU32,
    owners: super::owners::Owners,
}

impl Fs {
    /// Serves `image`.
    pub fn new(image: Image) -> Self {
        let sb = image.superblock();
        // SQUASHFS_NOX (0x200): written without xattrs.
        let has_xattrs =
            sb.xattr_table != crate::reader::superblock::NO_TABLE && sb.flags & 0x200 == 0;
        Fs {
            image,
            has_xattrs,
            reports: AtomicU32::new(0),
            owners: super::owners::Owners::of_this_namespace(),
        }
    }

    /// The image served.
    pub fn image(&self) -> &Image {
        &self.image
    }

    fn node_ref(&self, nodeid: u64) -> Option<InodeRef> {
        match nodeid {
            abi::ROOT_ID => Some(self.image.root()),
            n if n & NODE_BIT != 0 => Some(n & (NODE_BIT - 1)),
            _ => None,
        }
    }

    fn node_id(&self, r: InodeRef) -> u64 {
        if r == self.image.root() {
            abi::ROOT_ID
        } else {
            r | NODE_BIT
        }
    }

    /// The reply to `req` as its head and its tail of data pieces (see
    /// [`Reply::finish_parts`]); None: the request takes no reply.
    pub fn handle(&self, req: &Request<'_>) -> Option<(Vec<u8>, Vec<Piece>)> {
        let u = req.unique;
        let reply = match req.opcode {
            op::FORGET | op::BATCH_FORGET | op::INTERRUPT => return None,
            // Zero-message opens: the kernel stops asking and keeps its
            // caches (FOPEN_KEEP_CACHE, FOPEN_CACHE_DIR) from then on.
            // FLUSH too: the kernel sends one at every close of a file
            // (no_open or not) and stops once told ENOSYS; nothing is
            // ever written here to flush.
            op::OPEN | op::OPENDIR | op::ACCESS | op::FLUSH => Reply::error(u, libc::ENOSYS),
            op::RELEASE | op::RELEASEDIR => Reply::ok(u, 0),
            op::GETXATTR | op::LISTXATTR if !self.has_xattrs => Reply::error(u, libc::ENOSYS),
            o if op::WRITES.contains(&o) => Reply::error(u, libc::EROFS),
            op::STATFS => self.statfs(u),
            _ => match self.answer(req) {
                Ok(r) => r,
                Err(e) => {
                    self.report(req, &e);
                    Reply::error(u, e.errno())
                }
            },
        };
        Some(reply.finish_parts())
    }

    fn report(&self, req: &Request<'_>, e: &crate::reader::Error) {
        if self.reports.fetch_add(1, Ordering::Relaxed) < MAX_REPORTS {
            eprintln!(
                "berth-squashfs: request {} on node {:#x}: {e}",
                req.opcode, req.nodeid
            );
        }
    }

    fn answer(&self, req: &Request<'_>) -> Result<Reply> {
        let u = req.unique;
        let Some(r) = self.node_ref(req.nodeid) else {
            return Ok(Reply::error(u, libc::ESTALE));
        };
        let inode = self.image.inode(r)?;
        let einval = || Ok(Reply::error(u, libc::EINVAL));
        match req.opcode {
            op::LOOKUP => {
                let Some(name) = req.name(0) else {
                    return einval();
                };
                self.lookup(u, r, &inode, name)
            }
            op::GETATTR => {
                let mut out = Reply::ok(u, 16 + abi::ATTR);
                out.u64(FOREVER).u32(0).u32(0);
                attr(&mut out, &inode, &self.owners);
                Ok(out)
            }
            op::READLINK => match &inode.body {
                Body::Symlink(t) => Ok(Reply::data(u, t)),
                _ => einval(),
            },
            op::READ => {
                let (Some(offset), Some(size)) = (req.u64(8), req.u32(16)) else {
                    return einval();
                };
                let Body::File(f) = &inode.body else {
                    return Ok(Reply::error(u, libc::EISDIR));
                };
                let size = (size as usize).min(MAX_READ);
                let mut out = Reply::ok(u, 0);
                self.image
                    .file_pieces(r, f, inode.size, offset, size, &mut out.tail)?;
                Ok(out)
            }
            op::READDIR | op::READDIRPLUS => {
                let (Some(offset), Some(size)) = (req.u64(8), req.u32(16)) else {
                    return einval();
                };
                self.readdir(
                    u,
                    r,
                    &inode,
                    offset,
                    size as usize,
                    req.opcode == op::READDIRPLUS,
                )
            }
            op::GETXATTR => {
                let (Some(size), Some(name)) = (req.u32(0), req.name(8)) else {
                    return einval();
                };
                let found = match inode.xattr {
                    Some(i) => self.image.xattrs(i)?.into_iter().find(|(n, _)| n == name),
                    None => None,
                };
                let Some((_, value)) = found else {
                    return Ok(Reply::error(u, libc::ENODATA));
                };
                Ok(sized(u, size, &value))
            }
            op::LISTXATTR => {
                let Some(size) = req.u32(0) else {
                    return einval();
                };
                let mut names = Vec::new();
                if let Some(i) = inode.xattr {
                    for (n, _) in self.image.xattrs(i)? {
                        names.extend_from_slice(&n);
                        names.push(0);
                    }
                }
                Ok(sized(u, size, &names))
            }
            _ => Ok(Reply::error(u, libc::ENOSYS)),
        }
    }

    fn lookup(&self, u: u64, r: InodeRef, dir: &Inode, name: &[u8]) -> Result<Reply> {
        if dir.kind != Kind::Dir {
            return Ok(Reply::error(u, libc::ENOTDIR));
        }
        let mut out = Reply::ok(u, abi::ENTRY_OUT);
        match self.image.lookup(r, dir, name)? {
            Some(e) => {
                let child = self.image.inode(e.inode)?;
                self.entry(&mut out, e.inode, &child);
            }
            // A negative entry the kernel keeps: the next lookup of this
            // name (Python's search path, ld.so's) never comes here.
            None => {
                out.u64(0).u64(0).u64(FOREVER).u64(0).u32(0).u32(0);
                out.bytes(&[0; abi::ATTR]);
            }
        }
        Ok(out)
    }

    fn entry(&self, out: &mut Reply, r: InodeRef, inode: &Inode) {
        out.u64(self.node_id(r))
            .u64(0)
            .u64(FOREVER)
            .u64(FOREVER)
            .u32(0)
            .u32(0);
        attr(out, inode, &self.owners);
    }

    fn readdir(
        &self,
        u: u64,
        r: InodeRef,
        dir: &Inode,
        offset: u64,
        size: usize,
        plus: bool,
    ) -> Result<Reply> {
        let Body::Dir(d) = &dir.body else {
            return Ok(Reply::error(u, libc::ENOTDIR));
        };
        let listing = self.image.listing(r, dir)?;
        let size = size.min(MAX_READ);
        let mut out = Reply::ok(u, size);
        let start = out.buf.len();
        let total = listing.entries.len() as u64 + 2;
        for k in offset..total {
            let (name, number, kind, child): (&[u8], u32, Kind, Option<InodeRef>) = match k {
                0 => (b".", dir.number, Kind::Dir, None),
                1 => (b"..", d.parent, Kind::Dir, None),
                _ => {
                    let e = &listing.entries[(k - 2) as usize];
                    (&e.name, e.number, e.kind, Some(e.inode))
                }
            };
            let head = if plus { abi::ENTRY_OUT } else { 0 };
            let len = (head + abi::DIRENT + name.len()).next_multiple_of(8);
            if out.buf.len() - start + len > size {
                break;
            }
            if plus {
                match child {
                    Some(c) => {
                        let inode = self.image.inode(c)?;
                        self.entry(&mut out, c, &inode);
                    }
                    // `.` and `..`: no entry (node id 0), as the kernel
                    // expects.
                    None => {
                        out.bytes(&[0; abi::ENTRY_OUT]);
                    }
                }
            }
            out.u64(u64::from(number))
                .u64(k + 1)
                .u32(name.len() as u32)
                .u32(kind.mode_bits() >> 12)
                .bytes(name)
                .pad8();
        }
        Ok(out)
    }

    fn statfs(&self, u: u64) -> Reply {
        let sb = self.image.superblock();
        let bs = u64::from(sb.block_size);
        let mut out = Reply::ok(u, 80);
        out.u64(sb.bytes_used.div_ceil(bs)).u64(0).u64(0);
        out.u64(u64::from(sb.inode_count)).u64(0);
        out.u32(sb.block_size).u32(255).u32(sb.block_size).u32(0);
        out.bytes(&[0; 24]);
        out
    }
}

/// A value asked for with a buffer of `size` bytes: its size if `size` is
/// 0, the value if it fits, ERANGE if not.
fn sized(u: u64, size: u32, value: &[u8]) -> Reply {
    if size == 0 {
        let mut out = Reply::ok(u, 8);
        out.u32(value.len() as u32).u32(0);
        out
    } else if value.len() > size as usize {
        Reply::error(u, libc::ERANGE)
    } else {
        Reply::data(u, value)
    }
}

/// Appends `fuse_attr` for `inode`.
fn attr(out: &mut Reply, inode: &Inode, owners: &super::owners::Owners) {
    let mtime = u64::from(inode.mtime);
    let (blocks, rdev) = match &inode.body {
        Body::File(f) => (inode.size.saturating_sub(f.sparse).div_ceil(512), 0),
        Body::Device(d) => (0, *d),
        _ => (0, 0),
    };
    out.u64(u64::from(inode.number))
        .u64(inode.size)
        .u64(blocks)
        .u64(mtime)
        .u64(mtime)
        .u64(mtime)
        .u32(0)
        .u32(0)
        .u32(0)
        .u32(inode.mode())
        .u32(inode.nlink)
        .u32(owners.uid(inode.uid))
        .u32(owners.gid(inode.gid))
        .u32(rdev)
        .u32(4096)
        .u32(0);
}
