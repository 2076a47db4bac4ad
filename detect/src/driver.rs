//! Putting an image on a device and finding its symbols, through the driver
//! that found the device.
//!
//! HSA (ROCR-Runtime hsa.h): a code-object reader over the image, an executable
//! (`hsa_executable_create_alt`, full profile, default rounding), the code
//! object loaded for the agent, then frozen; kernels are the symbols
//! `<name>.kd` (`KERNEL_OBJECT`), variables their own names
//! (`VARIABLE_ADDRESS`, `VARIABLE_SIZE`). CUDA (cuda.h): the device's primary
//! context made current, `cuModuleLoadData` (cubin, fat binary, or PTX with its
//! NUL), `cuModuleGetFunction`, `cuModuleGetGlobal_v2`. Errors carry the
//! driver's own string.

use std::ffi::{c_void, CString};
use std::fmt;
use std::sync::Arc;

use crate::{cuda, hsa, Device};

/// The driver a device was found through.
#[derive(Clone, Default)]
pub(crate) enum DriverRef {
    /// None: a device from `OFFLOAD_LOADER_DEVICES` or KFD.
    #[default]
    None,
    Hsa(Arc<hsa::Api>),
    Cuda(Arc<cuda::Api>),
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
            (DriverRef::Hsa(a), DriverRef::Hsa(b)) => Arc::ptr_eq(a, b),
            (DriverRef::Cuda(a), DriverRef::Cuda(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for DriverRef {}

/// A driver call that failed, with the driver's own description.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call} failed: {message}")]
pub struct DriverError {
    /// The call, e.g. `hsa_executable_load_agent_code_object`, `cuModuleLoadData`.
    pub call: &'static str,
    /// The driver's status name and string, or why no call could be made.
    pub message: String,
}

/// An image loaded on a device; unloaded when dropped.
pub struct Module {
    inner: Inner,
}

enum Inner {
    Hsa {
        api: Arc<hsa::Api>,
        agent: u64,
        executable: u64,
        reader: u64,
        // The reader reads from this copy until it is destroyed.
        _image: Vec<u8>,
    },
    Cuda {
        api: Arc<cuda::Api>,
        context: usize,
        module: usize,
    },
}

// SAFETY: HSA executables and CUDA modules may be used from any thread (each
// CUDA call here first makes the owning context current on the calling thread).
unsafe impl Send for Module {}
// SAFETY: as above; `Module` has no interior mutability of its own.
unsafe impl Sync for Module {}

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Module>();
    assert_send_sync::<DriverError>();
};

fn hsa_check(
    api: &hsa::Api,
    call: &'static str,
    status: hsa::HsaStatus,
) -> Result<(), DriverError> {
    if status == hsa::SUCCESS {
        Ok(())
    } else {
        Err(DriverError {
            call,
            message: api.describe(status),
        })
    }
}

fn cuda_check(
    api: &cuda::Api,
    call: &'static str,
    result: cuda::CuResult,
) -> Result<(), DriverError> {
    if result == 0 {
        Ok(())
    } else {
        Err(DriverError {
            call,
            message: api.describe(result),
        })
    }
}

fn c_name(call: &'static str, name: &str) -> Result<CString, DriverError> {
    CString::new(name).map_err(|_| DriverError {
        call,
        message: format!("symbol name {name:?} contains a NUL"),
    })
}

/// Loads `image` on `device` through the driver that found it.
pub fn load(device: &Device, image: &[u8]) -> Result<Module, DriverError> {
    match &device.driver {
        DriverRef::None => Err(DriverError {
            call: "load",
            message: format!(
                "device {} came from {} and has no driver to load images with",
                device.index,
                device.source.name()
            ),
        }),
        DriverRef::Hsa(api) => load_hsa(api, device.handle, image),
        DriverRef::Cuda(api) => load_cuda(api, device.handle as i32, image),
    }
}

fn load_hsa(api: &Arc<hsa::Api>, agent: u64, image: &[u8]) -> Result<Module, DriverError> {
    let image = image.to_vec();
    let mut reader = 0u64;
    // SAFETY: `image` outlives the reader (both end up in the Module, which
    // destroys the reader first).
    hsa_check(api, "hsa_code_object_reader_create_from_memory", unsafe {
        (api.reader_create_from_memory)(image.as_ptr().cast(), image.len(), &mut reader)
    })?;
    let mut executable = 0u64;
    // SAFETY: profile 1 = HSA_PROFILE_FULL, rounding 0 = default, no options.
    let created = hsa_check(api, "hsa_executable_create_alt", unsafe {
        (api.executable_create_alt)(1, 0, std::ptr::null(), &mut executable)
    });
    let module = Module {
        inner: Inner::Hsa {
            api: api.clone(),
            agent,
            executable: if created.is_ok() { executable } else { 0 },
            reader,
            _image: image,
        },
    };
    created?;
    let mut loaded = 0u64;
    // SAFETY: handles created above; null options.
    hsa_check(api, "hsa_executable_load_agent_code_object", unsafe {
        (api.executable_load_agent_code_object)(
            executable,
            agent,
            reader,
            std::ptr::null(),
            &mut loaded,
        )
    })?;
    // SAFETY: a valid executable; empty options.
    hsa_check(api, "hsa_executable_freeze", unsafe {
        (api.executable_freeze)(executable, c"".as_ptr())
    })?;
    Ok(module)
}

fn load_cuda(api: &Arc<cuda::Api>, device: i32, image: &[u8]) -> Result<Module, DriverError> {
    let mut context: *mut c_void = std::ptr::null_mut();
    // SAFETY: out-pointer; `device` is an ordinal the driver gave.
    cuda_check(api, "cuDevicePrimaryCtxRetain", unsafe {
        (api.primary_ctx_retain)(&mut context, device)
    })?;
    // SAFETY: a context the driver returned.
    cuda_check(api, "cuCtxSetCurrent", unsafe {
        (api.ctx_set_current)(context)
    })?;
    // PTX must be NUL-terminated; cubins and fat binaries carry their size.
    let is_text = image.first() != Some(&0x7f)
        && !image.starts_with(&0xBA55_ED50u32.to_le_bytes())
        && image.last() != Some(&0);
    let owned: Vec<u8>;
    let data = if is_text {
        owned = [image, &[0]].concat();
        &owned[..]
    } else {
        image
    };
    let mut module: *mut c_void = std::ptr::null_mut();
    // SAFETY: `data` is a complete image; the driver copies what it needs.
    cuda_check(api, "cuModuleLoadData", unsafe {
        (api.module_load_data)(&mut module, data.as_ptr().cast())
    })?;
    Ok(Module {
        inner: Inner::Cuda {
            api: api.clone(),
            context: context as usize,
            module: module as usize,
        },
    })
}

impl Module {
    /// The kernel handle of kernel `name`: the HSA kernel object of `name.kd`,
    /// or the `CUfunction`.
    pub fn kernel(&self, name: &str) -> Result<u64, DriverError> {
        match &self.inner {
            Inner::Hsa {
                api,
                agent,
                executable,
                ..
            } => {
                let symbol = hsa_symbol(api, *executable, *agent, &format!("{name}.kd"))?;
                let mut object = 0u64;
                // SAFETY: KERNEL_OBJECT writes a u64.
                hsa_check(api, "hsa_executable_symbol_get_info", unsafe {
                    (api.executable_symbol_get_info)(
                        symbol,
                        hsa::SYMBOL_INFO_KERNEL_OBJECT,
                        (&mut object as *mut u64).cast(),
                    )
                })?;
                Ok(object)
            }
            Inner::Cuda {
                api,
                context,
                module,
            } => {
                let cname = c_name("cuModuleGetFunction", name)?;
                let mut function: *mut c_void = std::ptr::null_mut();
                // SAFETY: the module's context is made current; out-pointer.
                unsafe {
                    cuda_check(
                        api,
                        "cuCtxSetCurrent",
                        (api.ctx_set_current)(*context as *mut c_void),
                    )?;
                    cuda_check(
                        api,
                        "cuModuleGetFunction",
                        (api.module_get_function)(
                            &mut function,
                            *module as *mut c_void,
                            cname.as_ptr(),
                        ),
                    )?;
                }
                Ok(function as u64)
            }
        }
    }

    /// The device address and size of variable `name`.
    pub fn global(&self, name: &str) -> Result<(u64, u64), DriverError> {
        match &self.inner {
            Inner::Hsa {
                api,
                agent,
                executable,
                ..
            } => {
                let symbol = hsa_symbol(api, *executable, *agent, name)?;
                let (mut address, mut size) = (0u64, 0u32);
                // SAFETY: VARIABLE_ADDRESS writes a u64, VARIABLE_SIZE a u32.
                unsafe {
                    hsa_check(
                        api,
                        "hsa_executable_symbol_get_info",
                        (api.executable_symbol_get_info)(
                            symbol,
                            hsa::SYMBOL_INFO_VARIABLE_ADDRESS,
                            (&mut address as *mut u64).cast(),
                        ),
                    )?;
                    hsa_check(
                        api,
                        "hsa_executable_symbol_get_info",
                        (api.executable_symbol_get_info)(
                            symbol,
                            hsa::SYMBOL_INFO_VARIABLE_SIZE,
                            (&mut size as *mut u32).cast(),
                        ),
                    )?;
                }
                Ok((address, size.into()))
            }
            Inner::Cuda {
                api,
                context,
                module,
            } => {
                let cname = c_name("cuModuleGetGlobal_v2", name)?;
                let (mut address, mut size) = (0u64, 0usize);
                // SAFETY: the module's context is made current; out-pointers.
                unsafe {
                    cuda_check(
                        api,
                        "cuCtxSetCurrent",
                        (api.ctx_set_current)(*context as *mut c_void),
                    )?;
                    cuda_check(
                        api,
                        "cuModuleGetGlobal_v2",
                        (api.module_get_global)(
                            &mut address,
                            &mut size,
                            *module as *mut c_void,
                            cname.as_ptr(),
                        ),
                    )?;
                }
                Ok((address, size as u64))
            }
        }
    }
}

fn hsa_symbol(api: &hsa::Api, executable: u64, agent: u64, name: &str) -> Result<u64, DriverError> {
    let cname = c_name("hsa_executable_get_symbol_by_name", name)?;
    let mut symbol = 0u64;
    // SAFETY: a frozen executable, a NUL-terminated name, the agent by pointer.
    hsa_check(api, "hsa_executable_get_symbol_by_name", unsafe {
        (api.executable_get_symbol_by_name)(executable, cname.as_ptr(), &agent, &mut symbol)
    })?;
    Ok(symbol)
}

impl Drop for Module {
    fn drop(&mut self) {
        match &self.inner {
            Inner::Hsa {
                api,
                executable,
                reader,
                ..
            } => {
                // SAFETY: handles this module created; destroyed once.
                unsafe {
                    if *executable != 0 {
                        (api.executable_destroy)(*executable);
                    }
                    (api.reader_destroy)(*reader);
                }
            }
            Inner::Cuda {
                api,
                context,
                module,
            } => {
                // SAFETY: the module this value loaded, in its context.
                unsafe {
                    (api.ctx_set_current)(*context as *mut c_void);
                    (api.module_unload)(*module as *mut c_void);
                }
            }
        }
    }
}
