//! The seam between registration and the drivers: the devices
//! `offload-detect` found, and loading an image on one of them.

use offload_detect::{Device, Module as DriverModule};

/// A loaded image whose symbols can be resolved.
pub(crate) trait Module: Send + Sync {
    /// The kernel handle of kernel `name`.
    fn kernel(&self, name: &str) -> Result<u64, String>;
    /// The device address and size of variable `name`.
    fn global(&self, name: &str) -> Result<(u64, u64), String>;
}

impl Module for DriverModule {
    fn kernel(&self, name: &str) -> Result<u64, String> {
        DriverModule::kernel(self, name).map_err(|e| e.to_string())
    }

    fn global(&self, name: &str) -> Result<(u64, u64), String> {
        DriverModule::global(self, name).map_err(|e| e.to_string())
    }
}

/// The devices of this process, detected once.
pub(crate) fn devices() -> &'static [Device] {
    &offload_detect::devices().devices
}

/// The devices, detected on this thread if not yet done: for registration
/// inside constructors, which may hold the dynamic loader's lock.
pub(crate) fn devices_in_place() -> &'static [Device] {
    &offload_detect::devices_in_place().devices
}

/// Loads `image` on device `device`.
pub(crate) fn load(device: usize, image: &[u8]) -> Result<Box<dyn Module>, String> {
    let device = devices()
        .get(device)
        .ok_or_else(|| format!("no device {device}"))?;
    offload_detect::load(device, image)
        .map(|m| Box::new(m) as Box<dyn Module>)
        .map_err(|e| e.to_string())
}
