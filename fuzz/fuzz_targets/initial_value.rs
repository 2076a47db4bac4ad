//! A device variable's initial value, from a cubin or PTX text
//! (`offload_loader::image::globals`): the name to look for is the input's
//! first line, the image the rest.
//!
//! Invariants: never more bytes than the limit allows; a cubin's value is
//! borrowed from the image or zeros.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::image::globals::initial_value;

fuzz_target!(|data: &[u8]| {
    let split = data.iter().position(|&b| b == b'\n').unwrap_or(data.len());
    let Ok(name) = std::str::from_utf8(&data[..split]) else {
        return;
    };
    let image = data.get(split + 1..).unwrap_or_default();
    for max in [0, 8, 1 << 16] {
        if let Some(value) = initial_value(image, name, max) {
            assert!(value.len() as u64 <= max);
        }
    }
});
