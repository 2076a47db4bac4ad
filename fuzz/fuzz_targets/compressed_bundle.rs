//! CCOB headers and inflation, with a small cap to prove it holds.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::compressed::{CompressedBundle, Limits};

fuzz_target!(|data: &[u8]| {
    let Ok(ccob) = CompressedBundle::parse(data) else { return };
    assert!(ccob.len() <= data.len() as u64);
    let _ = ccob.decompress_prefix(4096);
    let limits = Limits { max_uncompressed: 1 << 20, verify_hash: true };
    if let Ok(out) = ccob.decompress(&limits) {
        assert_eq!(out.len() as u64, ccob.uncompressed_size);
        assert!(out.len() <= 1 << 20);
    }
});
