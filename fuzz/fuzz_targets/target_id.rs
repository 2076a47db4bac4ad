//! Target IDs, NVPTX arches, bundle IDs and device strings.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::bundle::BundleId;
use offload_loader::select::DeviceTarget;
use offload_loader::target::{NvArch, TargetId};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(id) = TargetId::parse(s) {
        // The canonical form parses back to the same target ID.
        assert_eq!(TargetId::parse(&id.to_string()).unwrap(), id);
    }
    if let Ok(arch) = NvArch::parse(s) {
        assert_eq!(NvArch::parse(&arch.to_string()).unwrap(), arch);
    }
    let _ = BundleId::parse(s);
    let _ = DeviceTarget::parse(s);
});
