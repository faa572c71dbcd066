//! The layer applier on arbitrary tar streams: it never panics, and what it
//! emits never names a path outside the root (no `..`, nothing absolute)
//! or a hard link to one.
#![no_main]
use std::io::Read;

use berth_image::flatten::Flattener;
use libfuzzer_sys::fuzz_target;

fn inside(p: &[u8]) -> bool {
    !p.starts_with(b"/") && !p.split(|b| *b == b'/').any(|c| c == b"..")
}

fuzz_target!(|data: &[u8]| {
    let spool = std::env::temp_dir();
    // Two layers: the input over itself exercises shadowing, whiteouts
    // and links across layers.
    let mut f = Flattener::new(Vec::new(), &spool);
    if f.add_layer("sha256:upper", data).is_err() || f.add_layer("sha256:lower", data).is_err() {
        return;
    }
    let Ok((out, _)) = f.finish() else {
        return;
    };
    let mut archive = tar::Archive::new(&out[..]);
    let Ok(entries) = archive.entries() else {
        return;
    };
    for e in entries {
        let Ok(mut e) = e else { return };
        let path = e.path_bytes().into_owned();
        assert!(
            inside(&path),
            "emitted {:?}",
            String::from_utf8_lossy(&path)
        );
        if e.header().entry_type() == tar::EntryType::Link {
            if let Some(target) = e.link_name_bytes() {
                assert!(
                    inside(&target),
                    "hard link to {:?}",
                    String::from_utf8_lossy(&target)
                );
            }
        }
        let mut sink = Vec::new();
        let _ = e.read_to_end(&mut sink);
    }
});
