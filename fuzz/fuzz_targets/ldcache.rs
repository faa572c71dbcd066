//! The host's /etc/ld.so.cache parser (GPU and MPI discovery read it).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(entries) = berth_inject::ldcache::parse(data) {
        for e in entries {
            let _ = e.is_native();
        }
    }
});
