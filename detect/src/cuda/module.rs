//! Putting an image on a CUDA device and finding its symbols (cuda.h).
//!
//! Loading retains the device's primary context
//! (`cuDevicePrimaryCtxRetain`) and runs `cuModuleLoadData` on a cubin, a
//! fat binary or PTX (given a trailing NUL when it has none);
//! `cuModuleGetFunction` and `cuModuleGetGlobal_v2` find symbols; unloading
//! is `cuModuleUnload`, then `cuDevicePrimaryCtxRelease_v2` balances the
//! retain. Each of these module calls runs with the module's context pushed
//! on the calling thread's context stack (`cuCtxPushCurrent_v2`) and popped
//! right after (`cuCtxPopCurrent_v2`), so the thread's current context is
//! exactly as it was found, whatever the host program made current. Modules
//! may therefore be used from any thread.

use offload_loader::magic::{ELF as ELF_MAGIC, NV_FATBIN as FATBIN_MAGIC};
use std::borrow::Cow;

use super::sys::{CuDevice, CuDevicePtr, CuResult, Handle, SUCCESS};
use super::Api;
use crate::image::{c_name, DriverError, Global, KernelHandle};

/// The driver and device a GPU was found through: what loads images on it.
#[derive(Clone, Copy)]
pub(crate) struct Driver {
    pub(super) api: &'static Api,
    pub(super) device: CuDevice,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}, device {}", self.api, self.device)
    }
}

impl PartialEq for Driver {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.api, other.api) && self.device == other.device
    }
}

impl Eq for Driver {}

/// A module loaded in a device's primary context, which it holds a retain
/// on. The handles are kept as integers: they are plain values the driver
/// accepts from any thread.
pub(crate) struct Loaded {
    api: &'static Api,
    device: CuDevice,
    context: usize,
    module: usize,
}

fn check(api: &Api, call: &'static str, result: CuResult) -> Result<(), DriverError> {
    if result == SUCCESS {
        Ok(())
    } else {
        Err(DriverError::Call {
            call,
            status: api.status(result),
        })
    }
}

impl Driver {
    /// Loads `image` in the device's primary context. On failure the retain
    /// on the context is released again.
    pub(crate) fn load(self, image: &[u8]) -> Result<Loaded, DriverError> {
        let Driver { api, device } = self;
        let data = complete_image(image)?;
        let mut context: Handle = std::ptr::null_mut();
        // SAFETY: out-pointer; `device` is a CUdevice the driver gave.
        check(api, "cuDevicePrimaryCtxRetain", unsafe {
            (api.primary_ctx_retain)(&mut context, device)
        })?;
        let context = context as usize;
        let release_quietly = || {
            if let Err(e) = release(api, device) {
                tracing::debug!(error = %e, "releasing after a failed CUDA load failed");
            }
        };
        if let Err(e) = push(api, context) {
            release_quietly();
            return Err(e);
        }
        let mut module: Handle = std::ptr::null_mut();
        // SAFETY: `data` is a complete image (checked by `complete_image`);
        // the driver copies what it needs before returning.
        let result = check(api, "cuModuleLoadData", unsafe {
            (api.module_load_data)(&mut module, data.as_ptr().cast())
        });
        let popped = pop(api);
        if let Err(e) = result {
            release_quietly();
            return Err(e);
        }
        let loaded = Loaded {
            api,
            device,
            context,
            module: module as usize,
        };
        if let Err(e) = popped {
            if let Err(undo) = loaded.unload() {
                tracing::debug!(error = %undo, "unloading after a failed CUDA load failed");
            }
            return Err(e);
        }
        Ok(loaded)
    }
}

impl Loaded {
    /// The `CUfunction` named `name`.
    pub(crate) fn kernel(&self, name: &str) -> Result<KernelHandle, DriverError> {
        let cname = c_name(name)?;
        let mut function: Handle = std::ptr::null_mut();
        in_context(self.api, self.context, || {
            // SAFETY: a loaded module, a NUL-terminated name, an out-pointer.
            check(self.api, "cuModuleGetFunction", unsafe {
                (self.api.module_get_function)(&mut function, self.module as Handle, cname.as_ptr())
            })
        })?;
        Ok(KernelHandle {
            handle: function as u64,
        })
    }

    /// The device address and size of variable `name`.
    pub(crate) fn global(&self, name: &str) -> Result<Global, DriverError> {
        let cname = c_name(name)?;
        let (mut address, mut size): (CuDevicePtr, usize) = (0, 0);
        in_context(self.api, self.context, || {
            // SAFETY: a loaded module, a NUL-terminated name, out-pointers of
            // the `_v2` types.
            check(self.api, "cuModuleGetGlobal_v2", unsafe {
                (self.api.module_get_global)(
                    &mut address,
                    &mut size,
                    self.module as Handle,
                    cname.as_ptr(),
                )
            })
        })?;
        Ok(Global {
            address,
            size: size as u64,
        })
    }

    /// Unloads the module, then releases the primary context, whether or not
    /// the unload succeeded. The caller calls it once.
    pub(crate) fn unload(&self) -> Result<(), DriverError> {
        let unloaded = in_context(self.api, self.context, || {
            // SAFETY: the module `Driver::load` loaded, unloaded once.
            check(self.api, "cuModuleUnload", unsafe {
                (self.api.module_unload)(self.module as Handle)
            })
        });
        let released = release(self.api, self.device);
        unloaded.and(released)
    }
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CUDA module {:#x}", self.module)
    }
}

/// Runs `call` with `context` pushed on the calling thread's context stack,
/// and pops it again whatever `call` returned: the thread's current context
/// is afterwards what it was before. `call`'s error comes first.
fn in_context<T>(
    api: &Api,
    context: usize,
    call: impl FnOnce() -> Result<T, DriverError>,
) -> Result<T, DriverError> {
    push(api, context)?;
    let result = call();
    let popped = pop(api);
    let value = result?;
    popped.map(|()| value)
}

/// `cuCtxPushCurrent_v2(context)`.
fn push(api: &Api, context: usize) -> Result<(), DriverError> {
    // SAFETY: a primary context the caller holds a retain on.
    check(api, "cuCtxPushCurrent_v2", unsafe {
        (api.ctx_push_current)(context as Handle)
    })
}

/// `cuCtxPopCurrent_v2`: undoes the `push` just before it on this thread.
fn pop(api: &Api) -> Result<(), DriverError> {
    let mut popped: Handle = std::ptr::null_mut();
    // SAFETY: an out-pointer; the driver writes the popped context to it.
    check(api, "cuCtxPopCurrent_v2", unsafe {
        (api.ctx_pop_current)(&mut popped)
    })
}

/// `cuDevicePrimaryCtxRelease_v2(device)`, balancing one retain.
fn release(api: &Api, device: CuDevice) -> Result<(), DriverError> {
    // SAFETY: a CUdevice the driver gave, whose primary context the caller
    // retained.
    check(api, "cuDevicePrimaryCtxRelease_v2", unsafe {
        (api.primary_ctx_release)(device)
    })
}

/// What `cuModuleLoadData` can read without a size: an ELF (cubin) or fat
/// binary whose headers fit in `image`, or PTX text, NUL-terminated (a NUL is
/// appended when missing).
fn complete_image(image: &[u8]) -> Result<Cow<'_, [u8]>, DriverError> {
    let u16_at = |o: usize| {
        image
            .get(o..o + 2)
            .map(|b| u64::from(u16::from_le_bytes([b[0], b[1]])))
    };
    let u64_at = |o: usize| {
        image
            .get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
    };
    let truncated = |kind, declared| DriverError::Truncated {
        kind,
        declared,
        given: image.len(),
    };
    if image.starts_with(ELF_MAGIC) {
        // The program and section header tables must lie inside the image.
        // ELF64 (cubins): e_phoff 32, e_shoff 40, e_phentsize 54, e_phnum 56,
        // e_shentsize 58, e_shnum 60. ELF32: e_phoff 28, e_shoff 32,
        // e_phentsize 42, e_phnum 44, e_shentsize 46, e_shnum 48.
        let u32_at = |o: usize| {
            image
                .get(o..o + 4)
                .map(|b| u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
        };
        let end = (|| {
            let (phoff, shoff, at, header) = if image.get(4) == Some(&1) {
                (u32_at(28)?, u32_at(32)?, 42, 52)
            } else {
                (u64_at(32)?, u64_at(40)?, 54, 64)
            };
            let table = |offset: u64, at: usize| {
                offset.checked_add(u16_at(at)?.checked_mul(u16_at(at + 2)?)?)
            };
            Some(table(phoff, at)?.max(table(shoff, at + 4)?).max(header))
        })()
        .unwrap_or(u64::MAX);
        if end > image.len() as u64 {
            return Err(truncated("ELF", end));
        }
        Ok(image.into())
    } else if image.starts_with(FATBIN_MAGIC) {
        // Fat binary header: u32 magic, u16 version, u16 header size, u64
        // payload size.
        let end = u16_at(6)
            .zip(u64_at(8))
            .and_then(|(h, p)| h.checked_add(p))
            .unwrap_or(u64::MAX);
        if end > image.len() as u64 {
            return Err(truncated("fat binary", end));
        }
        Ok(image.into())
    } else if image.last() == Some(&0) {
        Ok(image.into())
    } else {
        Ok([image, &[0]].concat().into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_images() {
        // PTX gets its NUL; a NUL-terminated one is passed as is.
        assert_eq!(
            &*complete_image(b".version 8.0").unwrap(),
            b".version 8.0\0"
        );
        assert_eq!(&*complete_image(b"x\0").unwrap(), b"x\0");
        assert_eq!(&*complete_image(b"").unwrap(), b"\0");
        // An ELF whose section headers lie past the end is refused.
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(ELF_MAGIC);
        elf[40..48].copy_from_slice(&64u64.to_le_bytes());
        elf[58..60].copy_from_slice(&64u16.to_le_bytes());
        elf[60..62].copy_from_slice(&2u16.to_le_bytes());
        assert_eq!(
            complete_image(&elf).unwrap_err().to_string(),
            "the ELF image declares 192 bytes but only 64 were given"
        );
        elf.resize(192, 0);
        assert!(complete_image(&elf).is_ok());
        assert!(complete_image(&elf[..10]).is_err());
        // A fat binary: 16-byte header + payload.
        let mut fat = FATBIN_MAGIC.to_vec();
        fat.extend(1u16.to_le_bytes());
        fat.extend(16u16.to_le_bytes());
        fat.extend(8u64.to_le_bytes());
        assert!(complete_image(&fat).is_err());
        fat.extend([0; 8]);
        assert!(complete_image(&fat).is_ok());
    }
}
