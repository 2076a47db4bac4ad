//! Diagnostics in the vendor runtime's terms: each device numbered as the
//! runtime that will load the library numbers it, and a device with no
//! image described by what that runtime then does.
//!
//! - HIP numbers the AMD devices it sees, in order (after
//!   `HIP_VISIBLE_DEVICES`, which detection applies as clr does), and fails
//!   at start-up with `hipErrorNoBinaryForGpu` when a fat binary has no code
//!   object for one of them (clr `hip_code_object.cpp`).
//! - CUDA numbers the NVIDIA devices by the driver's ordinals (after
//!   `CUDA_VISIBLE_DEVICES`, which the driver applies), and a launch on a
//!   device with no image fails with `cudaErrorNoKernelImageForDevice`.
//! - libomptarget (LLVM 22 `PluginManager::registerLib`) numbers a device
//!   the first time it is compatible with an image: images in the order of
//!   the descriptor it is handed, for each the plugins in their build order
//!   (amdgpu, then cuda), for each plugin its devices in order. A device
//!   compatible with no image gets no number: libomptarget skips it, and
//!   the program's regions run elsewhere or on the host. The numbers are
//!   the process's, given by every OpenMP library registered so far
//!   ([`crate::omp_numbers`]). A numbered device this library has no image
//!   for fails at its first use, whichever library uses it: libomptarget
//!   loads every registered library's image on a device when it starts it
//!   (LLVM 22 `omptarget.cpp` `initLibrary`: "No image loaded for device
//!   id N").

use offload_detect::Device;
use offload_loader::{first_fit_order, Image};

use crate::omp_numbers;
use crate::slots::Runtime;

/// `runtime`'s number for each of `devices`, for a library of `images`;
/// `None` for a device the runtime does not number (another vendor's, or
/// for libomptarget one no image runs on).
pub(crate) fn numbers(
    runtime: Runtime,
    images: &[Image],
    devices: &[Device],
) -> Vec<Option<usize>> {
    match runtime.vendor() {
        Some(vendor) => {
            let mut next = 0;
            devices
                .iter()
                .map(|d| {
                    (d.target.vendor() == vendor).then(|| {
                        next += 1;
                        next - 1
                    })
                })
                .collect()
        }
        None => libomptarget_numbers(images, devices),
    }
}

/// libomptarget's numbering (see the module docs): the numbers every
/// OpenMP library registered so far gave ([`omp_numbers`]); where those
/// cannot be known, this library's alone, over its images in the order it
/// hands them on.
fn libomptarget_numbers(images: &[Image], devices: &[Device]) -> Vec<Option<usize>> {
    if let Some(numbers) = omp_numbers::numbers(devices) {
        return numbers;
    }
    let order = first_fit_order(images).unwrap_or_else(|| (0..images.len()).collect());
    let mut numbered: Vec<_> = devices.iter().map(|d| (d.target, None)).collect();
    omp_numbers::number(order.iter().map(|&i| &images[i]), &mut numbered, &mut 0);
    numbered.into_iter().map(|(_, n)| n).collect()
}

/// How `runtime` names device `number` (its own number, if it has one) of
/// target `target`: "HIP device 1 (gfx1030)".
pub(crate) fn device(runtime: Runtime, number: Option<usize>, target: &str) -> String {
    let who = match runtime {
        Runtime::Hip => "HIP",
        Runtime::Cuda => "CUDA",
        Runtime::OpenMp => "OpenMP",
    };
    match number {
        Some(n) => format!("{who} device {n} ({target})"),
        None => target.to_string(),
    }
}

/// What `runtime` does on a device no image of the library runs on.
pub(crate) fn consequence(runtime: Runtime) -> &'static str {
    match runtime {
        Runtime::Hip => "hipErrorNoBinaryForGpu at start-up",
        Runtime::Cuda => "cudaErrorNoKernelImageForDevice at a launch there",
        Runtime::OpenMp => "libomptarget skips this device",
    }
}

/// What libomptarget does with OpenMP device `n`, numbered, when a library
/// with target regions has no image for it (LLVM 22 `omptarget.cpp`
/// `initLibrary`, run when a device is first used and again after each
/// registration: every registered descriptor with host entries must have an
/// image for it).
pub(crate) fn numbered_without_image(n: usize) -> String {
    format!(
        "libomptarget fails every use of OpenMP device {n} while this library's target regions \
         are registered (\"No image loaded for device id {n}\"), whichever library's region runs there"
    )
}
