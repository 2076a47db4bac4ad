//! The devices `offload-detect` found, detected once per process.

use offload_detect::Device;

/// The devices of this process, detected once (each driver under its time limit).
pub(crate) fn devices() -> &'static [Device] {
    &offload_detect::devices().devices
}

/// The devices, detected on this thread if not yet done: for registration
/// inside constructors, which may hold the dynamic loader's lock.
pub(crate) fn devices_in_place() -> &'static [Device] {
    &offload_detect::devices_in_place().devices
}
