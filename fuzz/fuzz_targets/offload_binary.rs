//! LLVM offload binaries.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::offload_binary::OffloadBinary;

fuzz_target!(|data: &[u8]| {
    if let Ok(bin) = OffloadBinary::parse(data) {
        assert!(bin.len() <= data.len() as u64);
        for entry in bin.entries() {
            let _ = (entry.triple(), entry.arch());
        }
    }
});
