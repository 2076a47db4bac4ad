//! NVIDIA fat-binary entry code: stored payloads, zstd frames, raw LZ4 blocks
//! and `--concat` group members, inflated under a small limit.
//!
//! Invariants: inflating never panics and never yields more than the limit
//! allows; what comes back has exactly the size the entry declares (the exact
//! size for a stored entry or a compressed one; at most the padded size for a
//! group member); a group itself is never code.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::nv_fatbin::{kind, NvFatbin};
use offload_loader::Limits;

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_uncompressed: 1 << 20,
        ..Limits::default()
    };
    let Ok(f) = NvFatbin::parse(data, &limits) else { return };
    for (i, e) in f.entries().iter().enumerate() {
        match f.code(i, &limits) {
            Ok(code) => {
                assert!(e.kind != kind::CONCAT, "a group is not code");
                assert!(code.len() as u64 <= limits.max_uncompressed.max(f.len()));
                match (e.group, e.exact_size) {
                    (Some(_), _) => assert!(code.len() as u64 <= e.stored_size),
                    (None, Some(exact)) => assert_eq!(code.len() as u64, exact),
                    (None, None) => panic!("a top-level code entry has an exact size"),
                }
            }
            Err(_) => {}
        }
    }
});
