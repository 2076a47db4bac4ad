//! Fat-binary wrappers, OpenMP binary descriptors and device images, AOMP's
//! image info and `.offload_arch_list`.
//!
//! Invariants: the section walkers report increasing, in-bounds offsets and
//! end; parsed values satisfy the checks their parsers promise.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::registration::*;

fuzz_target!(|data: &[u8]| {
    let len = data.len() as u64;
    let mut next = 0;
    for (at, wrapper) in FatbinWrapper::all(data) {
        assert!(at >= next && at < len && at % WRAPPER_ALIGN == 0);
        next = at + 1;
        if let Ok(w) = wrapper {
            assert_eq!(FatbinWrapper::parse(&data[at as usize..]).unwrap(), w);
            let _ = w.kind.to_string();
        }
    }
    if let Ok(desc) = BinaryDescriptor::parse(data, 4096) {
        assert!(desc.image_count <= 4096);
        assert!(desc.host_entries.start <= desc.host_entries.end);
        if let Ok(range) = desc.image_array() {
            assert_eq!(range.len(), u64::from(desc.image_count) * DEVICE_IMAGE_SIZE);
        }
    }
    if let Ok(image) = DeviceImage::parse(data) {
        let _ = (image.image.len(), image.entries.is_empty());
    }
    if let Ok(info) = ImageInfo::parse(data) {
        assert!(0 <= info.image_number && info.image_number < info.image_count);
    }
    let mut next = 0;
    for (at, arch) in offload_arch_list(data) {
        assert!(at >= next && at < len);
        next = at + 1;
        if let Ok(s) = arch {
            assert!(!s.is_empty() && !s.contains('\0'));
            next = at + s.len() as u64 + 1;
        }
    }
});
