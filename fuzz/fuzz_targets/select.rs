//! Selection over whatever containers the input holds, for a few devices and
//! policies: `select` on the listed images alone, then on the container,
//! which also reads the chosen image's header.
//!
//! Invariants: every image is chosen or rejected exactly once; the chosen one
//! is the best compatible one; `check` agrees with `select`.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::select::check;
use offload_loader::{scan, select, DeviceTarget, Limits, Policy, Selection};
use offload_loader::target::OffloadKind;

fn well_formed(s: &Selection, n: usize) {
    let mut seen = vec![false; n];
    for i in s.chosen.iter().copied().chain(s.rejected.iter().map(|r| r.0)) {
        assert!(i < n && !seen[i], "image {i} chosen or rejected twice");
        seen[i] = true;
    }
    assert!(seen.iter().all(|&b| b), "an image is neither chosen nor rejected");
    assert_eq!(s.chosen, s.compatible.first().map(|c| c.0));
    assert!(s.compatible.windows(2).all(|w| w[0].1 >= w[1].1), "ranking out of order");
    assert!(s.rejected.windows(2).all(|w| w[0].0 < w[1].0));
    for (_, why) in &s.rejected {
        let _ = why.to_string();
    }
}

fuzz_target!(|data: &[u8]| {
    let limits = Limits { max_uncompressed: 1 << 20, verify_hash: false, ..Limits::default() };
    let devices = ["gfx90a:sramecc+:xnack-", "gfx90a", "gfx1151", "gfx1100", "gfx906", "sm_80", "sm_90"]
        .map(|d| DeviceTarget::parse(d).unwrap());
    let policies = [
        Policy::default(),
        Policy { offload_kind: Some(OffloadKind::Hip) },
        Policy { offload_kind: Some(OffloadKind::OpenMp) },
    ];
    for container in scan(data, &limits).into_iter().flatten() {
        let images = container.images();
        for device in &devices {
            for policy in &policies {
                let s = select(device, images, policy);
                well_formed(&s, images.len());
                for (i, image) in images.iter().enumerate() {
                    let ok = check(device, image, policy).is_ok();
                    assert_eq!(ok, s.compatible.iter().any(|c| c.0 == i));
                }
            }
            let s = select(device, &container, &Policy::default());
            well_formed(&s, images.len());
        }
    }
});
