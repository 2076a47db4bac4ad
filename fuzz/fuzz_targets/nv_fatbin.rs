//! NVIDIA fat binaries.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::nv_fatbin::NvFatbin;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = NvFatbin::parse(data) {
        assert!(f.len() <= data.len() as u64);
        for i in 0..f.entries().len() {
            let _ = f.payload(i);
        }
        let _ = f.images();
    }
});
