//! The FUSE server: one connection the caller mounted, served by several
//! threads (each on its own clone of the connection's descriptor) as an
//! immutable tree.
//!
//! Why not the `fuser` crate: its `Filesystem` takes `&mut self` and runs
//! one request at a time, so the threads (and clones of the connection)
//! the issue asks for would sit behind one lock; the protocol a read-only
//! server needs is a dozen requests of fixed layout (linux/fuse.h), which
//! [`abi`] writes down.
//!
//! What the kernel is told, and why:
//! - entries and attributes are valid without end, and failed lookups too
//!   (negative entries): nothing in the image ever changes;
//! - OPEN and OPENDIR answer ENOSYS: the kernel then opens without a
//!   message, keeps a file's pages (FOPEN_KEEP_CACHE) and a directory's
//!   listing (FOPEN_CACHE_DIR) for every later open, by any container of
//!   the node;
//! - FLUSH answers ENOSYS: otherwise every close of a file in a container
//!   is a round trip to the server (12 in a `python3 -c pass`);
//! - READDIRPLUS: a listing carries its entries' attributes, so a walk
//!   needs no lookup per entry;
//! - PARALLEL_DIROPS, ASYNC_READ: lookups and reads in parallel;
//! - MAX_PAGES 256: reads of up to 1 MiB;
//! - CACHE_SYMLINKS: link targets in the page cache;
//! - an image without xattrs answers GETXATTR with ENOSYS, so the kernel
//!   stops asking (it asks for security.capability at every exec).

pub mod abi;
pub mod dev;
pub mod ops;
pub mod owners;

use std::io::{self, IoSlice};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use crate::reader::Piece;
use abi::{init, op, Reply, Request};
pub use ops::Fs;

/// Pages per request (the kernel's limit is 256).
const MAX_PAGES: u16 = 256;
/// The read buffer: the largest request (a write of max_write bytes, which
/// a read-only mount never sends) and its header.
const BUFFER: usize = 128 * 1024 + 4096;

/// Serves `fs` on the mounted connection `fuse` with `threads` threads
/// until it is unmounted (or the server killed).
pub fn serve(fs: Arc<Fs>, fuse: OwnedFd, threads: usize) -> io::Result<()> {
    let mut buf = vec![0u8; BUFFER];
    handshake(fuse.as_fd(), &mut buf)?;
    let mut clones = Vec::new();
    for _ in 1..threads.max(1) {
        match dev::clone_connection(fuse.as_fd()) {
            Ok(fd) => clones.push(fd),
            // One thread still serves.
            Err(e) => {
                eprintln!("berth-squashfs: cannot clone the FUSE connection ({e}): serving with fewer threads");
                break;
            }
        }
    }
    std::thread::scope(|s| {
        for fd in &clones {
            let fs = fs.clone();
            s.spawn(move || serve_on(&fs, fd.as_fd(), &mut vec![0u8; BUFFER]));
        }
        serve_on(&fs, fuse.as_fd(), &mut buf)
    })
}

/// Reads one request; None once the connection is gone.
fn read_request<'b>(fd: BorrowedFd<'_>, buf: &'b mut [u8]) -> io::Result<Option<&'b [u8]>> {
    loop {
        match rustix::io::read(fd, &mut *buf) {
            Ok(n) => return Ok(Some(&buf[..n])),
            // Interrupted, or a request the kernel took back.
            Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN | rustix::io::Errno::NOENT) => {}
            Err(rustix::io::Errno::NODEV) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
}

fn write_reply(fd: BorrowedFd<'_>, reply: &[u8]) -> io::Result<()> {
    write_parts(fd, reply, &[])
}

/// Writes a reply's head and its tail of data pieces in one vectored
/// write: the kernel takes a reply in one write, and copies the pieces
/// straight from the reader's buffers into the pages being read.
fn write_parts(fd: BorrowedFd<'_>, head: &[u8], tail: &[Piece]) -> io::Result<()> {
    let slices: Vec<IoSlice<'_>> = std::iter::once(head)
        .chain(tail.iter().flat_map(Piece::slices))
        .map(IoSlice::new)
        .collect();
    match rustix::io::writev(fd, &slices) {
        // ENOENT: the request was interrupted meanwhile.
        Ok(_) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Answers INIT (and nothing else comes first).
fn handshake(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<()> {
    loop {
        let Some(raw) = read_request(fd, buf)? else {
            return Err(io::Error::other("the FUSE connection closed before INIT"));
        };
        let Some(req) = Request::parse(raw) else {
            return Err(io::Error::other("a malformed first FUSE request"));
        };
        if req.opcode != op::INIT {
            write_reply(fd, &Reply::error(req.unique, libc::EIO).finish())?;
            continue;
        }
        let (major, minor) = (req.u32(0).unwrap_or(0), req.u32(4).unwrap_or(0));
        let readahead = req.u32(8).unwrap_or(0);
        let kernel_flags = req.u32(12).unwrap_or(0);
        let mut out = Reply::ok(req.unique, 64);
        if major > abi::MAJOR {
            // The kernel asks again with ours.
            out.u32(abi::MAJOR).u32(abi::MINOR);
            write_reply(fd, &out.finish())?;
            continue;
        }
        if major < abi::MAJOR || minor < 28 {
            write_reply(fd, &Reply::error(req.unique, libc::EPROTO).finish())?;
            return Err(io::Error::other(format!(
                "FUSE protocol {major}.{minor} is too old (7.28 or later)"
            )));
        }
        let wanted = init::ASYNC_READ
            | init::DO_READDIRPLUS
            | init::PARALLEL_DIROPS
            | init::MAX_PAGES
            | init::CACHE_SYMLINKS;
        out.u32(abi::MAJOR)
            .u32(abi::MINOR.min(minor))
            .u32(readahead)
            .u32(wanted & kernel_flags)
            .u16(64)
            .u16(48)
            .u32(128 * 1024)
            .u32(1)
            .u16(MAX_PAGES)
            .u16(0)
            .u32(0)
            .bytes(&[0; 28]);
        return write_reply(fd, &out.finish());
    }
}

fn serve_on(fs: &Fs, fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<()> {
    while let Some(raw) = read_request(fd, buf)? {
        let Some(req) = Request::parse(raw) else {
            continue;
        };
        if req.opcode == op::DESTROY {
            return Ok(());
        }
        if let Some((head, tail)) = fs.handle(&req) {
            write_parts(fd, &head, &tail)?;
        }
    }
    Ok(())
}
