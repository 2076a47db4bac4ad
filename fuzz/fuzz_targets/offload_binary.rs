//! LLVM offload binaries (v1 and v2).
//!
//! Invariants: the binary's size lies within the input, every image is the
//! slice of the input at its stated offset, and the string lookups work.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::offload_binary::OffloadBinary;
use offload_loader::Limits;

fuzz_target!(|data: &[u8]| {
    let Ok(bin) = OffloadBinary::parse(data, &Limits::default()) else { return };
    assert!(bin.len() <= data.len() as u64);
    for entry in bin.entries() {
        let end = entry.image_offset + entry.image.len() as u64;
        assert!(end <= bin.len(), "image ends past the binary");
        let start = entry.image_offset as usize;
        assert_eq!(entry.image.as_ptr(), data[start..].as_ptr(), "image is where it says");
        let _ = (entry.triple(), entry.arch().to_string(), entry.get("producer"));
    }
});
