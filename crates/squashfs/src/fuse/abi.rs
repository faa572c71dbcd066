//! The FUSE kernel protocol's pieces this server speaks (linux/fuse.h,
//! 7.38): opcodes, flags, and the byte layouts of the requests it reads
//! and the replies it writes (native byte order, as the kernel uses).

use crate::reader::Piece;

/// The protocol's major version.
pub const MAJOR: u32 = 7;
/// The minor version this server speaks.
pub const MINOR: u32 = 38;
/// The root's node id.
pub const ROOT_ID: u64 = 1;

/// Opcodes.
pub mod op {
    #![allow(missing_docs)]
    pub const LOOKUP: u32 = 1;
    pub const FORGET: u32 = 2;
    pub const GETATTR: u32 = 3;
    pub const READLINK: u32 = 5;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const GETXATTR: u32 = 22;
    pub const LISTXATTR: u32 = 23;
    pub const FLUSH: u32 = 25;
    pub const INIT: u32 = 26;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const RELEASEDIR: u32 = 29;
    pub const ACCESS: u32 = 34;
    pub const INTERRUPT: u32 = 36;
    pub const DESTROY: u32 = 38;
    pub const BATCH_FORGET: u32 = 42;
    pub const READDIRPLUS: u32 = 44;
    /// Requests that change the tree: refused with EROFS.
    pub const WRITES: [u32; 15] = [4, 6, 8, 9, 10, 11, 12, 13, 16, 21, 24, 35, 43, 45, 51];
}

/// INIT flags.
pub mod init {
    #![allow(missing_docs)]
    pub const ASYNC_READ: u32 = 1 << 0;
    pub const DO_READDIRPLUS: u32 = 1 << 13;
    pub const READDIRPLUS_AUTO: u32 = 1 << 14;
    pub const PARALLEL_DIROPS: u32 = 1 << 18;
    pub const MAX_PAGES: u32 = 1 << 22;
    pub const CACHE_SYMLINKS: u32 = 1 << 23;
}

/// Bytes of a request header.
pub const IN_HEADER: usize = 40;
/// Bytes of a reply header.
pub const OUT_HEADER: usize = 16;
/// Bytes of `fuse_attr`.
pub const ATTR: usize = 88;
/// Bytes of `fuse_entry_out`.
pub const ENTRY_OUT: usize = 40 + ATTR;
/// Bytes of a `fuse_dirent` before its name.
pub const DIRENT: usize = 24;

/// A request: its header fields and its body.
#[derive(Debug)]
pub struct Request<'a> {
    /// The opcode.
    pub opcode: u32,
    /// The request's id, echoed in its reply.
    pub unique: u64,
    /// The node it is about.
    pub nodeid: u64,
    /// What follows the header.
    pub body: &'a [u8],
}

impl<'a> Request<'a> {
    /// Parses a request the kernel wrote into `buf`.
    pub fn parse(buf: &'a [u8]) -> Option<Self> {
        let len = u32_at(buf, 0)? as usize;
        if len < IN_HEADER || len > buf.len() {
            return None;
        }
        Some(Request {
            opcode: u32_at(buf, 4)?,
            unique: u64_at(buf, 8)?,
            nodeid: u64_at(buf, 16)?,
            body: &buf[IN_HEADER..len],
        })
    }

    /// The body's u32 at `at`.
    pub fn u32(&self, at: usize) -> Option<u32> {
        u32_at(self.body, at)
    }

    /// The body's u64 at `at`.
    pub fn u64(&self, at: usize) -> Option<u64> {
        u64_at(self.body, at)
    }

    /// A NUL-terminated name at `at` of the body.
    pub fn name(&self, at: usize) -> Option<&'a [u8]> {
        let rest = self.body.get(at..)?;
        let end = rest.iter().position(|&b| b == 0)?;
        Some(&rest[..end])
    }
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// A reply being written: the header first, its length filled in at the
/// end.
#[derive(Debug)]
pub struct Reply {
    /// The bytes so far.
    pub buf: Vec<u8>,
    /// Data that follows them: pieces of the reader's buffers, handed to
    /// the kernel as they are (a READ's data, without a copy here).
    pub tail: Vec<Piece>,
}

impl Reply {
    /// A successful reply to request `unique`, with room for `cap` bytes.
    pub fn ok(unique: u64, cap: usize) -> Self {
        let mut buf = Vec::with_capacity(OUT_HEADER + cap);
        buf.extend_from_slice(&0u32.to_ne_bytes());
        buf.extend_from_slice(&0i32.to_ne_bytes());
        buf.extend_from_slice(&unique.to_ne_bytes());
        Reply {
            buf,
            tail: Vec::new(),
        }
    }

    /// A successful reply carrying `data`.
    pub fn data(unique: u64, data: &[u8]) -> Self {
        let mut r = Reply::ok(unique, data.len());
        r.bytes(data);
        r
    }

    /// An error reply (`errno` positive).
    pub fn error(unique: u64, errno: i32) -> Self {
        let mut r = Reply::ok(unique, 0);
        r.buf[4..8].copy_from_slice(&(-errno).to_ne_bytes());
        r
    }

    /// Appends a u16.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_ne_bytes());
        self
    }

    /// Appends a u32.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_ne_bytes());
        self
    }

    /// Appends a u64.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_ne_bytes());
        self
    }

    /// Appends bytes.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(b);
        self
    }

    /// Pads with zeros to a multiple of 8.
    pub fn pad8(&mut self) -> &mut Self {
        let n = self.buf.len().next_multiple_of(8) - self.buf.len();
        self.buf.extend(std::iter::repeat_n(0, n));
        self
    }

    /// The finished reply as one buffer (its tail copied in).
    pub fn finish(self) -> Vec<u8> {
        let (mut head, tail) = self.finish_parts();
        crate::reader::piece::append(&tail, &mut head);
        head
    }

    /// The finished reply as its head (whose length field counts the
    /// tail too) and its tail, for one vectored write.
    pub fn finish_parts(mut self) -> (Vec<u8>, Vec<Piece>) {
        let len = self.buf.len() + self.tail.iter().map(Piece::len).sum::<usize>();
        self.buf[0..4].copy_from_slice(&(len as u32).to_ne_bytes());
        (self.buf, self.tail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_or_lying_request_is_not_parsed() {
        assert!(Request::parse(&[0; 10]).is_none());
        let mut b = vec![0u8; 40];
        b[0..4].copy_from_slice(&100u32.to_ne_bytes());
        assert!(Request::parse(&b).is_none());
        b[0..4].copy_from_slice(&40u32.to_ne_bytes());
        b[4..8].copy_from_slice(&op::GETATTR.to_ne_bytes());
        let r = Request::parse(&b).unwrap();
        assert_eq!(r.opcode, op::GETATTR);
        assert!(r.body.is_empty() && r.name(0).is_none());
    }

    #[test]
    fn a_tail_counts_in_the_length() {
        let reply = || {
            let mut r = Reply::ok(3, 0);
            r.u32(7);
            r.tail.push(Piece::Zeros(5));
            r
        };
        let (head, tail) = reply().finish_parts();
        assert_eq!(u32_at(&head, 0), Some(16 + 4 + 5));
        assert_eq!(tail.len(), 1);
        assert_eq!(reply().finish().len(), 16 + 4 + 5);
    }

    #[test]
    fn replies_carry_their_length_and_error() {
        let r = Reply::error(9, libc::ENOENT).finish();
        assert_eq!(r.len(), OUT_HEADER);
        assert_eq!(u32_at(&r, 0), Some(16));
        assert_eq!(
            i32::from_ne_bytes(r[4..8].try_into().unwrap()),
            -libc::ENOENT
        );
        assert_eq!(u64_at(&r, 8), Some(9));
    }
}
