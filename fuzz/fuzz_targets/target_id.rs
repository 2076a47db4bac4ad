//! Target IDs, NVPTX arches, bundle IDs, triples and device strings.
//!
//! Invariants: the canonical form of a parsed target ID, arch or device parses
//! back to the same value; parsing a displayed `Arch` is idempotent.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::bundle::BundleId;
use offload_loader::select::DeviceTarget;
use offload_loader::target::{Arch, NvArch, TargetId, Triple, Vendor};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(id) = TargetId::parse(s) {
        assert_eq!(TargetId::parse(&id.to_string()).unwrap(), id);
    }
    if let Ok(arch) = NvArch::parse(s) {
        assert_eq!(NvArch::parse(&arch.to_string()).unwrap(), arch);
    }
    if let Ok(device) = DeviceTarget::parse(s) {
        assert_eq!(DeviceTarget::parse(&device.to_string()).unwrap(), device);
    }
    for vendor in [None, Some(Vendor::Amd), Some(Vendor::Nvidia)] {
        let arch = Arch::parse(vendor, s);
        assert_eq!(Arch::parse(vendor, &arch.to_string()), arch);
    }
    let id = BundleId::parse(s);
    let _ = (id.triple.to_string(), id.triple.gpu_vendor(), id.arch.to_string());
    let triple = Triple::parse(s);
    assert!(triple.same_target(&triple));
});
