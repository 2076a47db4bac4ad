//! Fat-binary wrappers, binary descriptors, device images, AOMP structures.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::registration::*;

fuzz_target!(|data: &[u8]| {
    let _ = FatbinWrapper::all(data).count();
    let _ = BinaryDescriptor::parse(data, 4096);
    let _ = DeviceImage::parse(data);
    let _ = ImageInfo::parse(data);
    let _ = offload_arch_list(data).count();
});
