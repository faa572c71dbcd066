//! Image references: parsing never panics, and what parses prints as a
//! reference that parses again to the same image.
#![no_main]
use berth_image::reference::{names_registry, ImageRef};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = names_registry(text);
    let _ = ImageRef::parse_local_name(text);
    if let Ok(r) = ImageRef::parse(text) {
        let again =
            ImageRef::parse(&r.to_string()).expect("a parsed reference prints as a valid one");
        assert_eq!(again.to_string(), r.to_string());
    }
});
