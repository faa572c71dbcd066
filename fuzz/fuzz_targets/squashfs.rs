//! The squashfs reader on arbitrary images: it never panics, never loops
//! without end and never reads outside the image, whatever the image says.
//! Seeds are real images made by mksquashfs (tests/fuzz.sh).
#![no_main]
use std::io::Write;

use berth_squashfs::reader::{Body, Image, InodeRef};
use libfuzzer_sys::fuzz_target;

/// Walks at most this many entries, this deep.
const ENTRIES: usize = 2000;
const DEPTH: usize = 8;

fuzz_target!(|data: &[u8]| {
    let Ok(mut f) = tempfile::tempfile() else { return };
    if f.write_all(data).is_err() {
        return;
    }
    let Ok(image) = Image::open(f, 0) else { return };
    let mut seen = 0;
    let mut stack: Vec<(InodeRef, usize)> = vec![(image.root(), 0)];
    while let Some((r, depth)) = stack.pop() {
        let Ok(inode) = image.inode(r) else { continue };
        if let Some(x) = inode.xattr {
            let _ = image.xattrs(x);
        }
        match &inode.body {
            Body::Dir(_) if depth < DEPTH => {
                let Ok(listing) = image.listing(r, &inode) else { continue };
                for e in &listing.entries {
                    seen += 1;
                    if seen > ENTRIES {
                        return;
                    }
                    assert!(!e.name.contains(&b'/') && !e.name.is_empty());
                    stack.push((e.inode, depth + 1));
                }
            }
            Body::File(body) => {
                let mut out = Vec::new();
                if image.read_file(r, body, inode.size, 0, 256 * 1024, &mut out).is_ok() {
                    assert!(out.len() as u64 <= inode.size.min(256 * 1024));
                }
            }
            _ => {}
        }
    }
});
