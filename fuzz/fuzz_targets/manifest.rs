//! Manifests and indexes as a registry or an archive serves them: parsing,
//! the layer list and platform selection never panic.
#![no_main]
use berth_image::{pipeline, platform};
use libfuzzer_sys::fuzz_target;
use oci_spec::image::{ImageIndex, ImageManifest};

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = serde_json::from_slice::<ImageManifest>(data) {
        let _ = pipeline::layers_of(&m, "fuzz");
    }
    if let Ok(i) = serde_json::from_slice::<ImageIndex>(data) {
        let _ = platform::select("fuzz", i.manifests(), &platform::Platform::host());
    }
    let _ = pipeline::parse_config(data, "fuzz");
});
