//! Clang offload bundle tables and bundle IDs.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::bundle::{Bundle, BundleId};

fuzz_target!(|data: &[u8]| {
    if let Ok(bundle) = Bundle::parse(data) {
        assert!(bundle.len() <= data.len() as u64);
        for entry in bundle.entries() {
            let object = bundle.code_object(entry).expect("entries lie within the input");
            assert_eq!(object.len() as u64, entry.size);
            let _ = BundleId::parse(entry.id);
        }
    }
});
