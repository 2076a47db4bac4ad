//! A whole section: every container format, resynchronisation after errors,
//! and image extraction with small limits.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::compressed::Limits;
use offload_loader::container::scan;

fuzz_target!(|data: &[u8]| {
    let limits = Limits { max_uncompressed: 1 << 20, verify_hash: true };
    for container in scan(data, &limits).into_iter().flatten() {
        assert!(container.offset + container.len <= data.len() as u64);
        for i in 0..container.images.len() {
            if let Ok(bytes) = container.image_bytes(i, &limits) {
                assert_eq!(bytes.len() as u64, container.images[i].size);
            }
        }
    }
});
