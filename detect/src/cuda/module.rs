//! Putting an image on a CUDA device and finding its symbols (cuda.h).
//!
//! Loading retains the device's primary context
//! (`cuDevicePrimaryCtxRetain`) and runs `cuModuleLoadData` on a cubin, a
//! fat binary or PTX (given a trailing NUL when it has none);
//! `cuModuleGetFunction` and `cuModuleGetGlobal_v2` find symbols. An `-rdc`
//! program's objects are linked by the driver's own linker (`cuLink*`) and
//! the result loaded the same way. Unloading
//! is `cuModuleUnload`, then `cuDevicePrimaryCtxRelease_v2` balances the
//! retain. Each of these module calls runs with the module's context pushed
//! on the calling thread's context stack (`cuCtxPushCurrent_v2`) and popped
//! right after (`cuCtxPopCurrent_v2`), so the thread's current context is
//! exactly as it was found, whatever the host program made current. Modules
//! may therefore be used from any thread.

use offload_loader::magic::{ELF as ELF_MAGIC, NV_FATBIN as FATBIN_MAGIC};
use std::borrow::Cow;

use super::sys::{CuDevice, CuDevicePtr, CuResult, Handle, JIT_INPUT_FATBINARY, SUCCESS};
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
        let data = complete_image(image)?;
        self.load_in_context(|api| module_load_data(api, &data))
    }

    /// Links `inputs`, fat binaries of `-rdc` objects, with the driver's own
    /// linker for the device (`cuLinkCreate_v2`, one `cuLinkAddData_v2` of
    /// `CU_JIT_INPUT_FATBINARY` each, `cuLinkComplete`), and loads the
    /// linked cubin in the device's primary context, as libcudart does for a
    /// device-link stub whose own fat binary has no image for the device
    /// (crt/link.stub hands it the objects' fat binaries). The linker picks
    /// from each fat binary the code that fits (a cubin of the device's
    /// architecture, else PTX it compiles). The link state is destroyed once
    /// the module is loaded.
    pub(crate) fn link(self, inputs: &[&[u8]]) -> Result<Loaded, DriverError> {
        for input in inputs {
            if !input.starts_with(FATBIN_MAGIC) {
                return Err(DriverError::Unsupported(
                    "linking anything but fat binaries",
                ));
            }
            complete_image(input)?;
        }
        self.load_in_context(|api| {
            let state = LinkState::create(api)?;
            for (i, input) in inputs.iter().enumerate() {
                state.add_fatbin(input, i)?;
            }
            let cubin = state.complete()?;
            module_load_data(api, cubin)
        })
    }

    /// Retains the device's primary context, runs `make` with it pushed on
    /// the calling thread's stack, and pops it: the module `make` loaded,
    /// holding the retain. On failure the retain is released again.
    fn load_in_context(
        self,
        make: impl FnOnce(&Api) -> Result<Handle, DriverError>,
    ) -> Result<Loaded, DriverError> {
        let Driver { api, device } = self;
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
        let result = make(api);
        let popped = pop(api);
        let module = match result {
            Ok(module) => module,
            Err(e) => {
                release_quietly();
                return Err(e);
            }
        };
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

/// `cuModuleLoadData` of `data`, a complete image, in the current context.
fn module_load_data(api: &Api, data: &[u8]) -> Result<Handle, DriverError> {
    let mut module: Handle = std::ptr::null_mut();
    // SAFETY: `data` is a complete image (checked by `complete_image`, or a
    // cubin the driver's linker wrote); the driver copies what it needs
    // before returning.
    check(api, "cuModuleLoadData", unsafe {
        (api.module_load_data)(&mut module, data.as_ptr().cast())
    })?;
    Ok(module)
}

/// A `CUlinkState` of the current context, destroyed when dropped (which
/// frees the cubin `cuLinkComplete` gave).
struct LinkState<'a> {
    api: &'a Api,
    state: Handle,
}

impl<'a> LinkState<'a> {
    /// `cuLinkCreate_v2` with no options.
    fn create(api: &'a Api) -> Result<LinkState<'a>, DriverError> {
        let mut state: Handle = std::ptr::null_mut();
        // SAFETY: no options (both arrays may be null with a count of 0);
        // an out-pointer.
        check(api, "cuLinkCreate_v2", unsafe {
            (api.link_create)(0, std::ptr::null_mut(), std::ptr::null_mut(), &mut state)
        })?;
        Ok(LinkState { api, state })
    }

    /// `cuLinkAddData_v2` of fat binary `input`, named `object <i>`.
    fn add_fatbin(&self, input: &[u8], i: usize) -> Result<(), DriverError> {
        let name = c_name(&format!("object {i}"))?;
        // SAFETY: a live link state; `input` is a complete fat binary of
        // `input.len()` bytes, which the driver reads (never writes, though
        // cuda.h types it `void *`) during the call; a NUL-terminated name;
        // no options.
        check(self.api, "cuLinkAddData_v2", unsafe {
            (self.api.link_add_data)(
                self.state,
                JIT_INPUT_FATBINARY,
                input.as_ptr() as *mut _,
                input.len(),
                name.as_ptr(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        })
    }

    /// `cuLinkComplete`: the linked cubin, valid while `self` lives.
    fn complete(&self) -> Result<&[u8], DriverError> {
        let (mut cubin, mut size): (*mut std::ffi::c_void, usize) = (std::ptr::null_mut(), 0);
        // SAFETY: a live link state; out-pointers.
        check(self.api, "cuLinkComplete", unsafe {
            (self.api.link_complete)(self.state, &mut cubin, &mut size)
        })?;
        if cubin.is_null() {
            return Err(DriverError::NoOutput("cuLinkComplete"));
        }
        // SAFETY: the driver's linked cubin, `size` bytes, owned by the link
        // state until `cuLinkDestroy`, which runs only when `self` drops.
        Ok(unsafe { std::slice::from_raw_parts(cubin.cast::<u8>(), size) })
    }
}

impl Drop for LinkState<'_> {
    fn drop(&mut self) {
        // SAFETY: a link state `cuLinkCreate_v2` made, destroyed once.
        let result = unsafe { (self.api.link_destroy)(self.state) };
        if result != SUCCESS {
            tracing::debug!(status = %self.api.status(result), "cuLinkDestroy failed");
        }
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
