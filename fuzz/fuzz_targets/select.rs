//! Selection over whatever containers the input holds, for a few devices and
//! policies: `select` on the listed images alone, then on the container,
//! which also reads the chosen image's header.
//!
//! Invariants: every image is chosen or rejected exactly once; the chosen one
//! is the best compatible one; `check` agrees with `select`; the first
//! compatible image in `first_fit_order`'s order is `select`'s choice, and
//! clr's (the first of the best tier, a processor's own code before its
//! generic family's) in `first_fit_order_on`'s order for clr; naming the
//! images by their headers keeps every image.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::select::check;
use offload_loader::{
    first_fit_order, first_fit_order_on, named_by_headers, scan, select, DeviceTarget, Limits,
    Policy, Present, Selection, VendorRuntime,
};
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

/// A chosen cubin and its device are both Tegra or both desktop, and a
/// Tegra cubin is for the device's own GPU (CUDA C++ Programming Guide,
/// "Binary Compatibility"). Whether the chosen image is a cubin is its fit's
/// (selection may have read the image's own header to tell).
fn tegra_rule(device: &DeviceTarget, image: &offload_loader::Image, native: bool) {
    use offload_loader::target::{Arch, Platform};
    let (DeviceTarget::Nvidia { capability, .. }, Arch::Nvptx(arch)) = (device, &image.arch) else {
        return;
    };
    let tegra = |p: Platform| p == Platform::Tegra;
    if native && (tegra(arch.capability.platform()) || tegra(capability.platform())) {
        assert!(arch.capability.names_gpu(*capability), "{} chosen for {device}", arch);
    }
}

fuzz_target!(|data: &[u8]| {
    let limits = Limits { max_uncompressed: 1 << 20, verify_hash: false, ..Limits::default() };
    let devices = [
        "gfx90a:sramecc+:xnack-", "gfx90a", "gfx1151", "gfx1100", "gfx906", "sm_80", "sm_90",
        "sm_87", "sm_89", "sm_101", "sm_103", "sm_110", "sm_107",
    ]
    .map(|d| DeviceTarget::parse(d).unwrap());
    let policies = [
        Policy::default(),
        Policy { offload_kind: Some(OffloadKind::Hip) },
        Policy { offload_kind: Some(OffloadKind::OpenMp) },
    ];
    for container in scan(data, &limits).into_iter().flatten() {
        let images = container.images();
        // The order hand-over gives a first-fit runtime: a permutation that
        // moves only GPU images, whose first compatible image is the choice.
        let order = first_fit_order(images).unwrap_or_else(|| (0..images.len()).collect());
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert!(sorted.iter().copied().eq(0..images.len()), "not a permutation");
        for (at, &i) in order.iter().enumerate() {
            assert!(at == i || images[at].triple.gpu_vendor().is_some());
        }
        let clr = first_fit_order_on(images, Present::Any, VendorRuntime::Hip)
            .unwrap_or_else(|| (0..images.len()).collect());
        // Devices whose feature settings are all known, as a vendor runtime knows them.
        for device in ["gfx90a:sramecc+:xnack-", "gfx906:sramecc-:xnack+", "gfx1100", "gfx1151", "sm_80", "sm_90"] {
            let device = &DeviceTarget::parse(device).unwrap();
            let chosen = select(device, images, &Policy::default()).chosen;
            let first = order.iter().copied().find(|&i| check(device, &images[i], &Policy::default()).is_ok());
            assert_eq!(first, chosen, "{device}");
            let tier = |i: usize| check(device, &images[i], &Policy::default()).ok().map(|f| (f.native, f.specific));
            let best = clr.iter().filter_map(|&i| tier(i)).max();
            let taken = clr.iter().copied().find(|&i| best.is_some() && tier(i) == best);
            assert_eq!(taken, chosen, "clr, {device}");
        }
        let all: Vec<usize> = (0..images.len()).collect();
        let named = named_by_headers(&container, &all);
        assert_eq!(named.len(), images.len());
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
            if let Some(&(i, fit)) = s.compatible.first() {
                tegra_rule(device, &images[i], fit.native);
            }
        }
    }
});
