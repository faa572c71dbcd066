//! Inputs the `squashfs` fuzz target once crashed on (tests/fuzz-inputs/):
//! each is walked as the target walks it and must give answers or errors,
//! never a panic.

use std::path::Path;

use berth_squashfs::reader::{Body, Image, InodeRef};

/// Walks `image` as the fuzz target does: every inode, listing, xattr and
/// the first 256 KiB of every file, at most 2,000 entries, 8 deep.
fn walk(image: &Image) {
    let mut seen = 0;
    let mut stack: Vec<(InodeRef, usize)> = vec![(image.root(), 0)];
    while let Some((r, depth)) = stack.pop() {
        let Ok(inode) = image.inode(r) else { continue };
        if let Some(x) = inode.xattr {
            let _ = image.xattrs(x);
        }
        match &inode.body {
            Body::Dir(_) if depth < 8 => {
                let Ok(listing) = image.listing(r, &inode) else {
                    continue;
                };
                for e in &listing.entries {
                    seen += 1;
                    if seen > 2000 {
                        return;
                    }
                    stack.push((e.inode, depth + 1));
                }
            }
            Body::File(body) => {
                let mut out = Vec::new();
                if image
                    .read_file(r, body, inode.size, 0, 256 * 1024, &mut out)
                    .is_ok()
                {
                    assert!(out.len() as u64 <= inode.size.min(256 * 1024));
                }
            }
            _ => {}
        }
    }
}

#[test]
fn inputs_that_once_crashed_the_reader_are_answered() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-inputs");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let file = std::fs::File::open(&path).unwrap();
        if let Ok(image) = Image::open(file, 0) {
            walk(&image);
        }
        n += 1;
    }
    assert!(n > 0, "no inputs in {}", dir.display());
}
