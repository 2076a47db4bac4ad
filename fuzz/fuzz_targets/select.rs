//! Selection over whatever containers the input holds, for a few devices.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::compressed::Limits;
use offload_loader::container::scan;
use offload_loader::select::{DeviceTarget, Policy};

fuzz_target!(|data: &[u8]| {
    let limits = Limits { max_uncompressed: 1 << 20, verify_hash: false };
    let devices = ["gfx90a:sramecc+:xnack-", "gfx1151", "gfx906", "sm_90"].map(|d| DeviceTarget::parse(d).unwrap());
    for mut container in scan(data, &limits).into_iter().flatten() {
        for device in &devices {
            let s = container.select_checked(device, &Policy::default());
            // Every image is either chosen or rejected with a reason.
            assert_eq!(s.rejected.len() + usize::from(s.chosen.is_some()), container.images.len());
            for (_, why) in &s.rejected {
                let _ = why.to_string();
            }
        }
    }
});
