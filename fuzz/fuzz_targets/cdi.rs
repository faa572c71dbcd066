//! CDI specs (JSON or YAML) as berth reads them from /etc/cdi, and the
//! device names users type.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = berth_inject::cdi::check_spec(text);
    let _ = berth_inject::cdi::parse_name(text);
});
