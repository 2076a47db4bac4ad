//! CCOB headers and inflation, with a 1 MiB cap to prove the cap holds.
//!
//! Invariants: the header and payload lie within the input; a prefix
//! decompression returns at most what was asked; a header promising more than
//! the cap is refused; a successful decompression returns exactly
//! `uncompressed_size` bytes, and a verified one matches the stored hash.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::bundle::Bundle;
use offload_loader::compressed::{hash, CompressedBundle};
use offload_loader::Limits;

const CAP: u64 = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let Ok(ccob) = CompressedBundle::parse(data) else { return };
    assert!(ccob.len() <= data.len() as u64);
    assert!(ccob.header_len <= ccob.len());
    // The hash rarely survives mutation: decompress unverified to reach the
    // bundle behind it, then check the verdict of a verified run cheaply.
    let unverified = Limits { max_uncompressed: CAP, verify_hash: false, ..Limits::default() };
    let prefix = ccob.decompress_prefix(4096, &unverified);
    if let Ok(p) = &prefix {
        assert!(p.len() <= 4096);
    }
    match ccob.decompress(&unverified) {
        Ok(out) => {
            assert_eq!(out.len() as u64, ccob.uncompressed_size);
            assert!(out.len() as u64 <= CAP);
            if let Ok(p) = &prefix {
                assert!(out.starts_with(p), "a prefix decompression is a prefix");
            }
            if hash(&out) == ccob.hash {
                let verified = Limits { max_uncompressed: CAP, verify_hash: true, ..Limits::default() };
                assert_eq!(ccob.decompress(&verified).expect("hash matches"), out);
            }
            if let Ok(bundle) = Bundle::parse(&out, &unverified) {
                for entry in bundle.entries() {
                    assert!(bundle.code_object(entry).is_ok());
                }
            }
        }
        Err(_) => {}
    }
});
