//! Putting an image on a device and finding its symbols, through the driver
//! that found the device: the interface the registration runtime uses.
//!
//! HSA (ROCR-Runtime hsa.h): a code-object reader over a copy of the image
//! (`hsa_code_object_reader_create_from_memory`), an executable
//! (`hsa_executable_create_alt`, full profile, default rounding, no options),
//! the code object loaded for the device's agent
//! (`hsa_executable_load_agent_code_object`), then frozen. A kernel is the
//! symbol `<name>.kd` and its handle is `KERNEL_OBJECT` (22); a variable is
//! its own name, `VARIABLE_ADDRESS` (21) and `VARIABLE_SIZE` (9). Unloading
//! destroys the executable, then the reader; the copy of the image lives until
//! then (the runtime's code-object URI points into it).
//!
//! CUDA (cuda.h): the device's primary context (`cuDevicePrimaryCtxRetain`)
//! made current on the calling thread (`cuCtxSetCurrent`, as the CUDA runtime
//! does), `cuModuleLoadData` on a cubin, a fat binary or PTX (given a trailing
//! NUL when it has none), `cuModuleGetFunction`, `cuModuleGetGlobal_v2`;
//! unloading is `cuModuleUnload` then `cuDevicePrimaryCtxRelease`.
//!
//! Errors carry the driver's own name and string for the status
//! ([`DriverStatus`]). Everything here is `Send + Sync`: HSA executables and
//! CUDA modules may be used from any thread (each CUDA call first makes the
//! module's context current on the calling thread).

use std::ffi::{c_void, CString};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::{cuda, hsa, Device, DriverStatus, Source};

/// The driver a device was found through.
#[derive(Clone, Copy, Default)]
pub(crate) enum DriverRef {
    /// None: a device from `OFFLOAD_LOADER_DEVICES` or KFD.
    #[default]
    None,
    Hsa(&'static hsa::Api),
    Cuda(&'static cuda::Api),
}

impl fmt::Debug for DriverRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DriverRef::None => f.write_str("no driver"),
            DriverRef::Hsa(api) => api.fmt(f),
            DriverRef::Cuda(api) => api.fmt(f),
        }
    }
}

impl PartialEq for DriverRef {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (DriverRef::None, DriverRef::None) => true,
            (DriverRef::Hsa(a), DriverRef::Hsa(b)) => std::ptr::eq(*a, *b),
            (DriverRef::Cuda(a), DriverRef::Cuda(b)) => std::ptr::eq(*a, *b),
            _ => false,
        }
    }
}

impl Eq for DriverRef {}

/// Why an image could not be loaded, or a symbol not found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DriverError {
    /// A driver call failed.
    #[error("{call} failed: {status}")]
    Call {
        /// The call, e.g. `hsa_executable_load_agent_code_object`, `cuModuleLoadData`.
        call: &'static str,
        /// The driver's status, name and string.
        status: DriverStatus,
    },
    /// The device came from an override or from KFD: no driver was loaded.
    #[error("device {device} came from {} and has no driver to load images with", .origin.name())]
    NoDriver {
        /// The device's index.
        device: usize,
        /// Where it came from.
        origin: Source,
    },
    /// A symbol name with a NUL in it cannot be passed to the driver.
    #[error("symbol name {0:?} contains a NUL byte")]
    BadName(String),
    /// The CUDA driver takes no image size: an image whose own headers claim
    /// more bytes than were given would be read past its end, so it is refused.
    #[error("the {kind} image declares {declared} bytes but only {given} were given")]
    Truncated {
        /// `ELF` or `fat binary`.
        kind: &'static str,
        /// What its headers claim.
        declared: u64,
        /// The slice's length.
        given: usize,
    },
    /// The image was already unloaded.
    #[error("the image was already unloaded")]
    Unloaded,
}

/// A kernel's handle: the HSA kernel object (for the dispatch packet) or the
/// `CUfunction`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KernelHandle {
    /// The handle's value.
    pub handle: u64,
}

/// A device variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Global {
    /// Its device address.
    pub address: u64,
    /// Its size in bytes.
    pub size: u64,
}

/// An image loaded on a device; unloaded by [`LoadedImage::unload`] or when
/// dropped.
pub struct LoadedImage {
    inner: Inner,
    unloaded: AtomicBool,
}

enum Inner {
    Hsa {
        api: &'static hsa::Api,
        agent: hsa::Agent,
        executable: hsa::Executable,
        reader: hsa::CodeObjectReader,
        // The reader (and the runtime's code-object URI) refer to this copy
        // until the executable and the reader are destroyed.
        _image: Box<[u8]>,
    },
    Cuda {
        api: &'static cuda::Api,
        device: i32,
        context: usize,
        module: usize,
    },
}

// SAFETY: the raw handles are plain values that the HSA runtime and the CUDA
// driver, both thread-safe APIs, accept from any thread; a CUDA module belongs
// to a context that each call here makes current on the calling thread first.
// The only state mutated through `&self`, `unloaded`, is atomic.
unsafe impl Send for LoadedImage {}
// SAFETY: as above.
unsafe impl Sync for LoadedImage {}

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<LoadedImage>();
    assert_send_sync::<DriverError>();
    assert_send_sync::<Device>();
    assert_send_sync::<crate::Detection>();
};

impl fmt::Debug for LoadedImage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Inner::Hsa { executable, .. } => write!(f, "HSA executable {:#x}", executable.handle),
            Inner::Cuda { module, .. } => write!(f, "CUDA module {module:#x}"),
        }
    }
}

fn hsa_check(api: &hsa::Api, call: &'static str, status: u32) -> Result<(), DriverError> {
    if status == hsa::STATUS_SUCCESS {
        Ok(())
    } else {
        Err(DriverError::Call {
            call,
            status: api.status(status),
        })
    }
}

fn cuda_check(
    api: &cuda::Api,
    call: &'static str,
    result: cuda::CuResult,
) -> Result<(), DriverError> {
    if result == cuda::SUCCESS {
        Ok(())
    } else {
        Err(DriverError::Call {
            call,
            status: api.status(result),
        })
    }
}

fn c_name(name: &str) -> Result<CString, DriverError> {
    CString::new(name).map_err(|_| DriverError::BadName(name.into()))
}

impl Device {
    /// Whether images can be loaded on this device (it was found through a
    /// driver, not named by `OFFLOAD_LOADER_DEVICES` or read from KFD).
    pub fn can_load(&self) -> bool {
        !matches!(self.driver, DriverRef::None)
    }

    /// Loads `image` (an AMDGPU code object; a cubin, NVIDIA fat binary or
    /// PTX) on this device through the driver that found it.
    pub fn load(&self, image: &[u8]) -> Result<LoadedImage, DriverError> {
        match self.driver {
            DriverRef::None => Err(DriverError::NoDriver {
                device: self.index,
                origin: self.source,
            }),
            DriverRef::Hsa(api) => load_hsa(
                api,
                hsa::Agent {
                    handle: self.handle,
                },
                image,
            ),
            DriverRef::Cuda(api) => load_cuda(api, self.handle as i32, image),
        }
    }
}

fn load_hsa(
    api: &'static hsa::Api,
    agent: hsa::Agent,
    image: &[u8],
) -> Result<LoadedImage, DriverError> {
    let image: Box<[u8]> = image.into();
    let mut reader = hsa::CodeObjectReader { handle: 0 };
    // SAFETY: `image` is a live allocation of `image.len()` bytes that the
    // returned LoadedImage keeps until the reader is destroyed.
    hsa_check(api, "hsa_code_object_reader_create_from_memory", unsafe {
        (api.reader_create_from_memory)(image.as_ptr().cast(), image.len(), &mut reader)
    })?;
    let mut executable = hsa::Executable { handle: 0 };
    // SAFETY: valid enum values, no options, an out-pointer.
    let created = hsa_check(api, "hsa_executable_create_alt", unsafe {
        (api.executable_create_alt)(
            hsa::PROFILE_FULL,
            hsa::ROUNDING_MODE_DEFAULT,
            std::ptr::null(),
            &mut executable,
        )
    });
    // From here on, dropping `loaded` destroys what was created.
    let loaded = LoadedImage {
        inner: Inner::Hsa {
            api,
            agent,
            executable: if created.is_ok() {
                executable
            } else {
                hsa::Executable { handle: 0 }
            },
            reader,
            _image: image,
        },
        unloaded: AtomicBool::new(false),
    };
    created?;
    let mut code_object = hsa::LoadedCodeObject { handle: 0 };
    // SAFETY: handles created above, an agent the runtime gave, no options.
    hsa_check(api, "hsa_executable_load_agent_code_object", unsafe {
        (api.executable_load_agent_code_object)(
            executable,
            agent,
            reader,
            std::ptr::null(),
            &mut code_object,
        )
    })?;
    // SAFETY: a valid executable; empty options.
    hsa_check(api, "hsa_executable_freeze", unsafe {
        (api.executable_freeze)(executable, c"".as_ptr())
    })?;
    Ok(loaded)
}

fn load_cuda(
    api: &'static cuda::Api,
    device: i32,
    image: &[u8],
) -> Result<LoadedImage, DriverError> {
    let data = cuda_image(image)?;
    let mut context: cuda::Handle = std::ptr::null_mut();
    // SAFETY: out-pointer; `device` is a CUdevice the driver gave.
    cuda_check(api, "cuDevicePrimaryCtxRetain", unsafe {
        (api.primary_ctx_retain)(&mut context, device)
    })?;
    let release = || {
        // SAFETY: balances the successful retain above.
        unsafe { (api.primary_ctx_release)(device) };
    };
    // SAFETY: the context the driver just returned.
    if let Err(e) = cuda_check(api, "cuCtxSetCurrent", unsafe {
        (api.ctx_set_current)(context)
    }) {
        release();
        return Err(e);
    }
    let mut module: cuda::Handle = std::ptr::null_mut();
    // SAFETY: `data` is a complete image (checked by `cuda_image`); the driver
    // copies what it needs before returning.
    if let Err(e) = cuda_check(api, "cuModuleLoadData", unsafe {
        (api.module_load_data)(&mut module, data.as_ptr().cast())
    }) {
        release();
        return Err(e);
    }
    Ok(LoadedImage {
        inner: Inner::Cuda {
            api,
            device,
            context: context as usize,
            module: module as usize,
        },
        unloaded: AtomicBool::new(false),
    })
}

const ELF_MAGIC: &[u8] = b"\x7fELF";
const FATBIN_MAGIC: [u8; 4] = 0xBA55_ED50u32.to_le_bytes();

/// What `cuModuleLoadData` can read without a size: an ELF (cubin) or fat
/// binary whose headers fit in `image`, or PTX text, NUL-terminated (a NUL is
/// appended when missing).
fn cuda_image(image: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>, DriverError> {
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
    } else if image.starts_with(&FATBIN_MAGIC) {
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

impl LoadedImage {
    fn live(&self) -> Result<(), DriverError> {
        if self.unloaded.load(Ordering::Acquire) {
            Err(DriverError::Unloaded)
        } else {
            Ok(())
        }
    }

    /// The handle of kernel `name`: the HSA kernel object of symbol
    /// `<name>.kd`, or the `CUfunction` named `name`.
    pub fn kernel(&self, name: &str) -> Result<KernelHandle, DriverError> {
        self.live()?;
        match &self.inner {
            Inner::Hsa {
                api,
                agent,
                executable,
                ..
            } => {
                let symbol = hsa_symbol(api, *executable, *agent, &format!("{name}.kd"))?;
                let mut object = 0u64;
                // SAFETY: KERNEL_OBJECT is a `uint64_t`.
                hsa_check(api, "hsa_executable_symbol_get_info", unsafe {
                    (api.executable_symbol_get_info)(
                        symbol,
                        hsa::SYMBOL_INFO_KERNEL_OBJECT,
                        (&mut object as *mut u64).cast(),
                    )
                })?;
                Ok(KernelHandle { handle: object })
            }
            Inner::Cuda {
                api,
                context,
                module,
                ..
            } => {
                let cname = c_name(name)?;
                set_current(api, *context)?;
                let mut function: cuda::Handle = std::ptr::null_mut();
                // SAFETY: a loaded module, a NUL-terminated name, an out-pointer.
                cuda_check(api, "cuModuleGetFunction", unsafe {
                    (api.module_get_function)(
                        &mut function,
                        *module as cuda::Handle,
                        cname.as_ptr(),
                    )
                })?;
                Ok(KernelHandle {
                    handle: function as u64,
                })
            }
        }
    }

    /// The device address and size of variable `name`.
    pub fn global(&self, name: &str) -> Result<Global, DriverError> {
        self.live()?;
        match &self.inner {
            Inner::Hsa {
                api,
                agent,
                executable,
                ..
            } => {
                let symbol = hsa_symbol(api, *executable, *agent, name)?;
                let (mut address, mut size) = (0u64, 0u32);
                // SAFETY: VARIABLE_ADDRESS is a `uint64_t`.
                hsa_check(api, "hsa_executable_symbol_get_info", unsafe {
                    (api.executable_symbol_get_info)(
                        symbol,
                        hsa::SYMBOL_INFO_VARIABLE_ADDRESS,
                        (&mut address as *mut u64).cast(),
                    )
                })?;
                // SAFETY: VARIABLE_SIZE is a `uint32_t`.
                hsa_check(api, "hsa_executable_symbol_get_info", unsafe {
                    (api.executable_symbol_get_info)(
                        symbol,
                        hsa::SYMBOL_INFO_VARIABLE_SIZE,
                        (&mut size as *mut u32).cast(),
                    )
                })?;
                Ok(Global {
                    address,
                    size: size.into(),
                })
            }
            Inner::Cuda {
                api,
                context,
                module,
                ..
            } => {
                let cname = c_name(name)?;
                set_current(api, *context)?;
                let (mut address, mut size): (cuda::CuDevicePtr, usize) = (0, 0);
                // SAFETY: a loaded module, a NUL-terminated name, out-pointers
                // of the `_v2` types.
                cuda_check(api, "cuModuleGetGlobal_v2", unsafe {
                    (api.module_get_global)(
                        &mut address,
                        &mut size,
                        *module as cuda::Handle,
                        cname.as_ptr(),
                    )
                })?;
                Ok(Global {
                    address,
                    size: size as u64,
                })
            }
        }
    }

    /// Unloads the image and reports the driver's status; further lookups
    /// fail with [`DriverError::Unloaded`]. Dropping an image unloads it too,
    /// ignoring the status.
    pub fn unload(self) -> Result<(), DriverError> {
        self.release()
    }

    fn release(&self) -> Result<(), DriverError> {
        if self.unloaded.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        match &self.inner {
            Inner::Hsa {
                api,
                executable,
                reader,
                ..
            } => {
                let mut result = Ok(());
                if executable.handle != 0 {
                    // SAFETY: the executable this image created, destroyed once.
                    result = hsa_check(api, "hsa_executable_destroy", unsafe {
                        (api.executable_destroy)(*executable)
                    });
                }
                // SAFETY: the reader this image created, destroyed once, after
                // the executable loaded from it.
                let destroyed = hsa_check(api, "hsa_code_object_reader_destroy", unsafe {
                    (api.reader_destroy)(*reader)
                });
                result.and(destroyed)
            }
            Inner::Cuda {
                api,
                device,
                context,
                module,
            } => {
                let unloaded = set_current(api, *context).and_then(|_| {
                    // SAFETY: the module this image loaded, unloaded once, in
                    // its context.
                    cuda_check(api, "cuModuleUnload", unsafe {
                        (api.module_unload)(*module as cuda::Handle)
                    })
                });
                // SAFETY: balances the retain in `load_cuda`.
                let released = cuda_check(api, "cuDevicePrimaryCtxRelease", unsafe {
                    (api.primary_ctx_release)(*device)
                });
                unloaded.and(released)
            }
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

fn set_current(api: &cuda::Api, context: usize) -> Result<(), DriverError> {
    // SAFETY: a primary context this image holds a retain on.
    cuda_check(api, "cuCtxSetCurrent", unsafe {
        (api.ctx_set_current)(context as *mut c_void)
    })
}

fn hsa_symbol(
    api: &hsa::Api,
    executable: hsa::Executable,
    agent: hsa::Agent,
    name: &str,
) -> Result<hsa::ExecutableSymbol, DriverError> {
    let cname = c_name(name)?;
    let mut symbol = hsa::ExecutableSymbol { handle: 0 };
    // SAFETY: a frozen executable, a NUL-terminated name, the agent by pointer
    // (as hsa.h declares), an out-pointer.
    hsa_check(api, "hsa_executable_get_symbol_by_name", unsafe {
        (api.executable_get_symbol_by_name)(executable, cname.as_ptr(), &agent, &mut symbol)
    })?;
    Ok(symbol)
}

/// An image loaded on a device, in the form `offload-loader-ffi` uses:
/// handles as plain integers. New code uses [`Device::load`] and
/// [`LoadedImage`].
#[derive(Debug)]
pub struct Module(LoadedImage);

impl Module {
    /// The kernel handle of kernel `name` ([`LoadedImage::kernel`]).
    pub fn kernel(&self, name: &str) -> Result<u64, DriverError> {
        self.0.kernel(name).map(|k| k.handle)
    }

    /// The device address and size of variable `name` ([`LoadedImage::global`]).
    pub fn global(&self, name: &str) -> Result<(u64, u64), DriverError> {
        self.0.global(name).map(|g| (g.address, g.size))
    }

    /// The loaded image.
    pub fn into_inner(self) -> LoadedImage {
        self.0
    }
}

/// Loads `image` on `device` ([`Device::load`]), in the form
/// `offload-loader-ffi` uses.
pub fn load(device: &Device, image: &[u8]) -> Result<Module, DriverError> {
    device.load(image).map(Module)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_images() {
        // PTX gets its NUL; a NUL-terminated one is passed as is.
        assert_eq!(&*cuda_image(b".version 8.0").unwrap(), b".version 8.0\0");
        assert_eq!(&*cuda_image(b"x\0").unwrap(), b"x\0");
        assert_eq!(&*cuda_image(b"").unwrap(), b"\0");
        // An ELF whose section headers lie past the end is refused.
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(ELF_MAGIC);
        elf[40..48].copy_from_slice(&64u64.to_le_bytes());
        elf[58..60].copy_from_slice(&64u16.to_le_bytes());
        elf[60..62].copy_from_slice(&2u16.to_le_bytes());
        assert_eq!(
            cuda_image(&elf).unwrap_err().to_string(),
            "the ELF image declares 192 bytes but only 64 were given"
        );
        elf.resize(192, 0);
        assert!(cuda_image(&elf).is_ok());
        assert!(cuda_image(&elf[..10]).is_err());
        // A fat binary: 16-byte header + payload.
        let mut fat = FATBIN_MAGIC.to_vec();
        fat.extend(1u16.to_le_bytes());
        fat.extend(16u16.to_le_bytes());
        fat.extend(8u64.to_le_bytes());
        assert!(cuda_image(&fat).is_err());
        fat.extend([0; 8]);
        assert!(cuda_image(&fat).is_ok());
    }

    #[test]
    fn no_driver() {
        let device = Device::new(
            Source::Override,
            offload_loader::select::DeviceTarget::parse("sm_80").unwrap(),
            0,
        );
        assert!(!device.can_load());
        assert_eq!(
            device.load(b"x").unwrap_err().to_string(),
            "device 0 came from override and has no driver to load images with"
        );
    }
}
