//! berth's squashfs writer amending an arbitrary image (a crafted image in
//! a shared store, or a SIF someone sent, saved with changes): reading the
//! tree, copying the data, appending a file and writing the tables never
//! panics and never uses memory without bound, whatever the image says;
//! what it writes is read back by berth's reader without a panic. Seeds
//! are real images made by mksquashfs (tests/fuzz.sh).
#![no_main]
use std::io::Write;

use berth_squashfs::reader::{Body, Image, InodeRef};
use berth_squashfs::writer::{Appender, Attrs, Content, Node, Tree};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut f) = tempfile::tempfile() else {
        return;
    };
    if f.write_all(data).is_err() {
        return;
    }
    let Ok(clone) = f.try_clone() else { return };
    let Ok(image) = Image::open(clone, 0) else {
        return;
    };
    let Ok(mut tree) = Tree::from_image(&image) else {
        return;
    };
    let Ok(out) = tempfile::tempfile() else {
        return;
    };
    let Ok(readback) = out.try_clone() else {
        return;
    };
    let Ok(mut a) = Appender::start(&image, &f, out, None) else {
        return;
    };
    let content = b"a file the container wrote\n".repeat(300);
    let Ok(file) = a.add_file(&mut &content[..], content.len() as u64) else {
        return;
    };
    let id = tree.add(Node {
        attrs: Attrs {
            perm: 0o644,
            ..Attrs::default()
        },
        content: Content::File(file),
        layer: 1,
    });
    let root = tree.root();
    if let Some(e) = tree.entries_mut(root) {
        e.insert(b"added-by-fuzz"[..].into(), id);
    }
    let _ = tree.unused_image_data();
    if a.finish(&tree).is_err() {
        return;
    }
    // What was written reads back; the file added reads as written.
    let Ok(saved) = Image::open(readback, 0) else {
        panic!("berth's reader refuses what berth's writer wrote");
    };
    let mut seen = 0;
    let mut stack: Vec<(InodeRef, usize)> = vec![(saved.root(), 0)];
    while let Some((r, depth)) = stack.pop() {
        let Ok(inode) = saved.inode(r) else { continue };
        if let Body::Dir(_) = inode.body {
            if depth >= 8 {
                continue;
            }
            let Ok(listing) = saved.listing(r, &inode) else {
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
    }
    if let Ok(Some(back)) = saved.read_path("/added-by-fuzz", 1 << 20) {
        assert_eq!(back, content, "the added file reads back changed");
    }
});
