//! berth.toml, with its [host], [network] and inline [modules.NAME] tables.
#![no_main]
use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(file) = berth_config::ConfigFile::parse(text, Path::new("/etc/berth/berth.toml")) {
        for (path, table) in &file.modules {
            let _ = berth_inject::module::from_table(table, path);
        }
    }
});
