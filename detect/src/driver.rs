//! Putting an image on a device and finding its symbols, through the driver
//! that found the device: the interface the registration runtime uses. This
//! module only dispatches; what each driver does is its backend's
//! (`hsa::load`, `cuda::module`).
//!
//! Everything here is `Send + Sync`: HSA executables and CUDA modules may be
//! used from any thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::image::{DriverError, Global, KernelHandle};
use crate::{cuda, hsa};

/// The driver a device was found through, and the device as it knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Driver {
    /// An HSA runtime and agent.
    Hsa(hsa::Driver),
    /// A CUDA driver and device.
    Cuda(cuda::Driver),
}

impl Driver {
    /// Loads `image` through this driver.
    pub(crate) fn load(self, image: &[u8]) -> Result<LoadedImage, DriverError> {
        let inner = match self {
            Driver::Hsa(driver) => Loaded::Hsa(driver.load(image)?),
            Driver::Cuda(driver) => Loaded::Cuda(driver.load(image)?),
        };
        Ok(LoadedImage::new(inner))
    }

    /// Links `inputs` (fat binaries of `-rdc` objects) with the driver's own
    /// linker and loads the result: CUDA only.
    pub(crate) fn link(self, inputs: &[&[u8]]) -> Result<LoadedImage, DriverError> {
        match self {
            Driver::Hsa(_) => Err(DriverError::Unsupported("linking fat binaries")),
            Driver::Cuda(driver) => Ok(LoadedImage::new(Loaded::Cuda(driver.link(inputs)?))),
        }
    }
}

/// An image loaded on a device; unloaded by [`LoadedImage::unload`] or when
/// dropped.
pub struct LoadedImage {
    inner: Loaded,
    unloaded: AtomicBool,
    /// Variables pointed at host memory ([`LoadedImage::point_at_host`]):
    /// name, the address at which the device reaches that memory, its size.
    shared: Mutex<Vec<(String, u64, u64)>>,
}

enum Loaded {
    Hsa(hsa::Loaded),
    Cuda(cuda::Loaded),
}

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<LoadedImage>();
    assert_send_sync::<DriverError>();
};

impl std::fmt::Debug for LoadedImage {
    /// `HSA executable 0x…`, `CUDA module 0x…`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner {
            Loaded::Hsa(loaded) => loaded.fmt(f),
            Loaded::Cuda(loaded) => loaded.fmt(f),
        }
    }
}

impl LoadedImage {
    fn new(inner: Loaded) -> LoadedImage {
        LoadedImage {
            inner,
            unloaded: AtomicBool::new(false),
            shared: Mutex::new(Vec::new()),
        }
    }

    fn live(&self) -> Result<&Loaded, DriverError> {
        if self.unloaded.load(Ordering::Acquire) {
            Err(DriverError::Unloaded)
        } else {
            Ok(&self.inner)
        }
    }

    /// The handle of kernel `name`: the HSA kernel object of symbol
    /// `<name>.kd`, or the `CUfunction` named `name`.
    pub fn kernel(&self, name: &str) -> Result<KernelHandle, DriverError> {
        match self.live()? {
            Loaded::Hsa(loaded) => loaded.kernel(name),
            Loaded::Cuda(loaded) => loaded.kernel(name),
        }
    }

    /// The device address and size of variable `name`.
    pub fn global(&self, name: &str) -> Result<Global, DriverError> {
        match self.live()? {
            Loaded::Hsa(loaded) => loaded.global(name),
            Loaded::Cuda(loaded) => loaded.global(name),
        }
    }

    /// Points the 8-byte device variable `name` (a HIP managed variable's
    /// device-side pointer) at the `size` bytes at `host`, which the caller
    /// keeps alive while the image is loaded: the device then reads and
    /// writes the host's copy. HSA only.
    pub fn point_at_host(&self, name: &str, host: usize, size: usize) -> Result<(), DriverError> {
        let reached = match self.live()? {
            Loaded::Hsa(loaded) => loaded.point_at_host(name, host, size)?,
            Loaded::Cuda(_) => {
                return Err(DriverError::Unsupported(
                    "pointing a device variable at host memory",
                ))
            }
        };
        self.shared.lock().unwrap_or_else(|e| e.into_inner()).push((
            name.to_string(),
            reached,
            size as u64,
        ));
        Ok(())
    }

    /// Where the device reaches the host memory variable `name` was pointed
    /// at ([`LoadedImage::point_at_host`]), and its size: a HIP managed
    /// variable's memory, as clr's `hipGetSymbolAddress` answers for one.
    pub fn shared(&self, name: &str) -> Option<Global> {
        self.live().ok()?;
        self.shared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|&(_, address, size)| Global { address, size })
    }

    /// Unloads the image and reports the driver's status; further lookups
    /// fail with [`DriverError::Unloaded`]. Dropping an image unloads it too,
    /// ignoring the status.
    pub fn unload(self) -> Result<(), DriverError> {
        self.release()
    }

    /// Unloads the image the first time it is called.
    fn release(&self) -> Result<(), DriverError> {
        if self.unloaded.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        match &self.inner {
            Loaded::Hsa(loaded) => loaded.unload(),
            Loaded::Cuda(loaded) => loaded.unload(),
        }
    }
}

impl Drop for LoadedImage {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            tracing::debug!(error = %e, "unloading an image failed");
        }
    }
}
