//! The CUDA registration ABI that `nvcc`'s generated host code calls, so a
//! program built with `nvcc -cudart none` and linked with this library
//! registers, selects and resolves its kernels here (HIP on NVIDIA compiles
//! through `nvcc` too).
//!
//! The symbols are those an `nvcc -c` object of CUDA 13.5 leaves undefined
//! (`nm`): `__cudaRegisterFatBinary`, `__cudaRegisterFatBinaryEnd`,
//! `__cudaRegisterFunction`, `__cudaRegisterVar`, `__cudaUnregisterFatBinary`
//! (the module constructor `__sti____cudaRegisterAll` and the `atexit`
//! destructor), and `__cudaPushCallConfiguration`, `__cudaPopCallConfiguration`,
//! `__cudaGetKernel`, `__cudaLaunchKernel` (every kernel's host stub). Their
//! signatures are those of CUDA's `crt/host_runtime.h` and of clang's
//! `CGCUDANV.cpp`, which emits the same calls. The handle `nvcc` stores
//! (`__cudaFatCubinHandle`) is an opaque token the registry issued and checks
//! (as HIP's, [`crate::hip`]).
//!
//! Launching is out of scope, as for HIP: `__cudaGetKernel` resolves a host
//! stub to its `CUfunction` on device 0 (what the driver's `cuLaunchKernel`
//! takes), and `__cudaLaunchKernel` answers `cudaErrorNotSupported` (801).

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_void};

use offload_loader::registration::WrapperKind;

use crate::hip::Handle;
use crate::library::SymbolKind;
use crate::registry::{self, HandleState};
use crate::runtime;
use crate::slots::Runtime;
use crate::{guard, set_last_error};

/// `cudaErrorInvalidDeviceFunction`: no kernel registered for a host stub.
const CUDA_ERROR_INVALID_DEVICE_FUNCTION: c_int = 98;
/// `cudaErrorNotSupported`.
const CUDA_ERROR_NOT_SUPPORTED: c_int = 801;
/// `cudaErrorMissingConfiguration`: pop without a push.
const CUDA_ERROR_MISSING_CONFIGURATION: c_int = 52;

/// Registers the fat binary behind `wrapper` (`__fatBinC_Wrapper_t` in
/// `.nvFatBinSegment`: magic `0x466243b1`, version, pointer to the fat binary
/// in `.nv_fatbin`). Only the entry selected for a device is ever inflated.
#[no_mangle]
pub extern "C" fn __cudaRegisterFatBinary(wrapper: *mut c_void) -> Handle {
    crate::hip::register_wrapper(wrapper as usize, Runtime::Cuda, WrapperKind::Cuda)
}

/// Called once the fat binary's kernels and variables are registered: nothing
/// is left to do (images load at first lookup, or at registration with
/// `OFFLOAD_LOADER_EAGER=1`).
#[no_mangle]
pub extern "C" fn __cudaRegisterFatBinaryEnd(_handle: Handle) {}

/// What nvcc's managed-variable initialiser (`__nv_init_managed_rt_with_module`)
/// calls before host code first touches a `__managed__` variable: the fat
/// binary's selected image loaded on every device that has one, as cudart
/// loads the module then. nvcc 13.0 emits that initialiser into every
/// `-cudart none` program with a device variable (seen on an H100 machine),
/// so the program does not link without this. 1 when an image was loaded;
/// 0, and the last error, for a handle that names no registered fat binary
/// or a load that failed. Never call it from a constructor: it detects the
/// devices (the loader-lock rule).
#[no_mangle]
pub extern "C" fn __cudaInitModule(handle: Handle) -> c_char {
    guard(0, || match registry::handle(handle as usize) {
        HandleState::Library(id) => c_char::from(runtime::init_module(id)),
        _ => {
            set_last_error(format!(
                "__cudaInitModule: {handle:p} is not the handle of a registered fat binary"
            ));
            0
        }
    })
}

/// Unregisters the fat binary and unloads what was loaded from it. A handle
/// that was never issued, or was already released, is an error recorded for
/// the caller; nothing else happens.
#[no_mangle]
pub extern "C" fn __cudaUnregisterFatBinary(handle: Handle) {
    crate::hip::unregister_handle(handle, "__cudaUnregisterFatBinary")
}

/// Registers kernel `device_name`, launched from host stub `host_fun`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn __cudaRegisterFunction(
    handle: Handle,
    host_fun: *const c_char,
    device_fun: *mut c_char,
    device_name: *const c_char,
    _thread_limit: c_int,
    _tid: *mut c_void,
    _bid: *mut c_void,
    _block_dim: *mut c_void,
    _grid_dim: *mut c_void,
    _warp_size: *mut c_int,
) {
    guard((), || {
        crate::hip::add(
            handle as *const c_void,
            host_fun.cast(),
            device_name,
            device_fun,
            SymbolKind::Kernel,
        );
    })
}

/// Registers variable `device_name` of `size` bytes, shadowed by `host_var`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn __cudaRegisterVar(
    handle: Handle,
    host_var: *mut c_char,
    device_address: *mut c_char,
    device_name: *const c_char,
    _ext: c_int,
    size: usize,
    _constant: c_int,
    _global: c_int,
) {
    guard((), || {
        crate::hip::add(
            handle as *const c_void,
            host_var as *const c_void,
            device_name,
            device_address,
            SymbolKind::Variable { size: size as u64 },
        );
    })
}

/// `dim3`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Dim3 {
    x: c_uint,
    y: c_uint,
    z: c_uint,
}

/// A `<<<grid, block, shared, stream>>>` configuration, pushed by the call
/// site and popped by the kernel's host stub.
#[derive(Debug, Clone, Copy)]
struct Config {
    grid: Dim3,
    block: Dim3,
    shared: usize,
    stream: *mut c_void,
}

thread_local! {
    static CONFIG: Cell<Option<Config>> = const { Cell::new(None) };
}

/// Stores a launch configuration for the host stub about to be called.
#[no_mangle]
pub extern "C" fn __cudaPushCallConfiguration(
    grid: Dim3,
    block: Dim3,
    shared: usize,
    stream: *mut c_void,
) -> c_uint {
    guard(0, || {
        CONFIG.with(|c| {
            c.set(Some(Config {
                grid,
                block,
                shared,
                stream,
            }))
        });
        0
    })
}

/// Hands the host stub the configuration pushed before it.
#[no_mangle]
pub extern "C" fn __cudaPopCallConfiguration(
    grid: *mut Dim3,
    block: *mut Dim3,
    shared: *mut usize,
    stream: *mut *mut c_void,
) -> c_int {
    guard(CUDA_ERROR_MISSING_CONFIGURATION, || {
        let Some(config) = CONFIG.with(|c| c.take()) else {
            return CUDA_ERROR_MISSING_CONFIGURATION;
        };
        // SAFETY: nvcc's host stub passes pointers to its own locals (or
        // null, which is skipped).
        unsafe {
            if !grid.is_null() {
                *grid = config.grid;
            }
            if !block.is_null() {
                *block = config.block;
            }
            if !shared.is_null() {
                *shared = config.shared;
            }
            if !stream.is_null() {
                *stream = config.stream;
            }
        }
        0
    })
}

/// Resolves host stub `host_fun` to its kernel's `CUfunction` on device 0,
/// loading the image selected for that device if it is not yet loaded.
#[no_mangle]
pub extern "C" fn __cudaGetKernel(kernel: *mut *mut c_void, host_fun: *const c_void) -> c_int {
    crate::query::query(CUDA_ERROR_INVALID_DEVICE_FUNCTION, || {
        let what = || format!("kernel with host stub {host_fun:p}");
        let resolved = runtime::lookup(registry::kernel(host_fun as usize), 0, what);
        match resolved {
            Ok((handle, _)) => {
                if !kernel.is_null() {
                    // SAFETY: the stub passes a pointer to its own local.
                    unsafe { *kernel = handle as usize as *mut c_void };
                }
                0
            }
            Err(e) => {
                set_last_error(e.to_string());
                CUDA_ERROR_INVALID_DEVICE_FUNCTION
            }
        }
    })
}

/// Launching is left to the runtime above this library: always
/// `cudaErrorNotSupported`, with the reason as the last error.
#[no_mangle]
pub extern "C" fn __cudaLaunchKernel(
    _kernel: *const c_void,
    _grid: Dim3,
    _block: Dim3,
    _args: *mut *mut c_void,
    _shared: usize,
    _stream: *mut c_void,
) -> c_int {
    guard(CUDA_ERROR_NOT_SUPPORTED, || {
        set_last_error(
            "offload-loader finds, selects, loads and resolves kernels; launch them with \
             cuLaunchKernel on the handle offload_loader_kernel returns",
        );
        CUDA_ERROR_NOT_SUPPORTED
    })
}
