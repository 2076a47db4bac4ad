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
//!
//! Beside libcudart (`nvcc -cudart shared`, linked after this library;
//! [`crate::vendor`]) the registration calls are handed on after this
//! library's own work, with the handle libcudart returned for the fat
//! binary, and `__cudaInitModule`, the launch configuration, `__cudaGetKernel`
//! and `__cudaLaunchKernel` are libcudart's: it loads, launches and manages
//! memory, as without this library.

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_void};

use offload_loader::registration::WrapperKind;

use crate::fatbin::{self, Handle};
use crate::library::SymbolKind;
use crate::registry::{self, HandleState};
use crate::runtime;
use crate::slots::Runtime;
use crate::vendor::Next;
use crate::{guard, handover, set_last_error};

/// libcudart's hooks, where it is in the process after this library.
static REGISTER_FATBIN: Next = Next::new(c"__cudaRegisterFatBinary");
static REGISTER_FATBIN_END: Next = Next::new(c"__cudaRegisterFatBinaryEnd");
static UNREGISTER_FATBIN: Next = Next::new(c"__cudaUnregisterFatBinary");
static REGISTER_FUNCTION: Next = Next::new(c"__cudaRegisterFunction");
static REGISTER_VAR: Next = Next::new(c"__cudaRegisterVar");
static REGISTER_MANAGED_VAR: Next = Next::new(c"__cudaRegisterManagedVar");
static INIT_MODULE: Next = Next::new(c"__cudaInitModule");
static PUSH_CONFIGURATION: Next = Next::new(c"__cudaPushCallConfiguration");
static POP_CONFIGURATION: Next = Next::new(c"__cudaPopCallConfiguration");
static GET_KERNEL: Next = Next::new(c"__cudaGetKernel");
static LAUNCH_KERNEL: Next = Next::new(c"__cudaLaunchKernel");

/// Looks libcudart's hooks up (see [`crate::vendor`]).
pub(crate) fn find_vendor() {
    REGISTER_FATBIN.resolve(__cudaRegisterFatBinary as *const () as usize);
    REGISTER_FATBIN_END.resolve(__cudaRegisterFatBinaryEnd as *const () as usize);
    UNREGISTER_FATBIN.resolve(__cudaUnregisterFatBinary as *const () as usize);
    REGISTER_FUNCTION.resolve(__cudaRegisterFunction as *const () as usize);
    REGISTER_VAR.resolve(__cudaRegisterVar as *const () as usize);
    REGISTER_MANAGED_VAR.resolve(__cudaRegisterManagedVar as *const () as usize);
    INIT_MODULE.resolve(__cudaInitModule as *const () as usize);
    PUSH_CONFIGURATION.resolve(__cudaPushCallConfiguration as *const () as usize);
    POP_CONFIGURATION.resolve(__cudaPopCallConfiguration as *const () as usize);
    GET_KERNEL.resolve(__cudaGetKernel as *const () as usize);
    LAUNCH_KERNEL.resolve(__cudaLaunchKernel as *const () as usize);
}

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
    // Two atomic loads when no libcudart is there: registration stays cheap.
    crate::vendors();
    let vendor = REGISTER_FATBIN.found().then_some("libcudart");
    let handle =
        fatbin::register_wrapper(wrapper as usize, Runtime::Cuda, WrapperKind::Cuda, vendor);
    if let Some(next) = REGISTER_FATBIN.address() {
        handover::register(wrapper, handle, next);
    }
    handle
}

/// Called once the fat binary's kernels and variables are registered: nothing
/// is left to do (images load at first lookup, or at registration with
/// `OFFLOAD_LOADER_EAGER=1`).
#[no_mangle]
pub extern "C" fn __cudaRegisterFatBinaryEnd(handle: Handle) {
    guard((), || {
        if let Some((next, theirs)) = handover::handed(&REGISTER_FATBIN_END, handle as _) {
            // SAFETY: libcudart's `void __cudaRegisterFatBinaryEnd(void **)`,
            // with its own handle.
            let end: unsafe extern "C" fn(Handle) = unsafe { std::mem::transmute(next) };
            // SAFETY: as the program would have called it.
            unsafe { end(theirs) };
        }
    })
}

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
    if let Some((next, theirs)) = guard(None, || handover::handed(&INIT_MODULE, handle as _)) {
        // SAFETY: libcudart's `char __cudaInitModule(void **)`: it loads the
        // module and places the managed variables, with its own handle.
        let init: unsafe extern "C" fn(Handle) -> c_char = unsafe { std::mem::transmute(next) };
        // SAFETY: as the program would have called it.
        let loaded = unsafe { init(theirs) };
        guard((), runtime::vendor_running);
        return loaded;
    }
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
    fatbin::unregister_handle(handle, "__cudaUnregisterFatBinary");
    handover::unregister(handle, &UNREGISTER_FATBIN);
}

/// Registers kernel `device_name`, launched from host stub `host_fun`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn __cudaRegisterFunction(
    handle: Handle,
    host_fun: *const c_char,
    device_fun: *mut c_char,
    device_name: *const c_char,
    thread_limit: c_int,
    tid: *mut c_void,
    bid: *mut c_void,
    block_dim: *mut c_void,
    grid_dim: *mut c_void,
    warp_size: *mut c_int,
) {
    guard((), || {
        fatbin::add(
            handle as *const c_void,
            host_fun.cast(),
            device_name,
            device_fun,
            SymbolKind::Kernel,
        );
        let f = handover::Function {
            host: host_fun.cast(),
            device: device_fun,
            name: device_name,
            thread_limit,
            tid,
            bid,
            block: block_dim,
            grid: grid_dim,
            warp_size,
        };
        handover::function(&REGISTER_FUNCTION, handle, f);
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
    ext: c_int,
    size: usize,
    constant: c_int,
    global: c_int,
) {
    let v = handover::Variable {
        host: host_var.cast(),
        device: device_address,
        name: device_name,
        ext,
        size,
        constant,
        global,
    };
    register_variable(
        handle,
        v,
        SymbolKind::Variable { size: size as u64 },
        &REGISTER_VAR,
    )
}

/// Registers managed variable `device_name` of `size` bytes: nvcc's host
/// code reaches it through the pointer at `host_var_ptr`, null until
/// `__cudaInitModule` (which nvcc's code calls before the first host use)
/// points it at the variable's memory.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn __cudaRegisterManagedVar(
    handle: Handle,
    host_var_ptr: *mut *mut c_void,
    device_address: *mut c_char,
    device_name: *const c_char,
    ext: c_int,
    size: usize,
    constant: c_int,
    global: c_int,
) {
    let v = handover::Variable {
        host: host_var_ptr.cast(),
        device: device_address,
        name: device_name,
        ext,
        size,
        constant,
        global,
    };
    let kind = SymbolKind::CudaManaged { size: size as u64 };
    register_variable(handle, v, kind, &REGISTER_MANAGED_VAR)
}

/// Records variable `v` as `kind`, then hands it on to libcudart's `next`.
fn register_variable(handle: Handle, v: handover::Variable, kind: SymbolKind, next: &Next) {
    guard((), || {
        fatbin::add(handle as *const c_void, v.host, v.name, v.device, kind);
        handover::variable(next, handle, v);
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
    if let Some(next) = PUSH_CONFIGURATION.address() {
        // SAFETY: libcudart's `unsigned __cudaPushCallConfiguration(dim3,
        // dim3, size_t, void *)`: beside it, launching is its.
        let push: unsafe extern "C" fn(Dim3, Dim3, usize, *mut c_void) -> c_uint =
            unsafe { std::mem::transmute(next) };
        // SAFETY: the program's arguments.
        let pushed = unsafe { push(grid, block, shared, stream) };
        guard((), runtime::vendor_running);
        return pushed;
    }
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
    if let Some(next) = POP_CONFIGURATION.address() {
        // SAFETY: libcudart's `cudaError_t __cudaPopCallConfiguration(dim3 *,
        // dim3 *, size_t *, void **)`.
        let pop: unsafe extern "C" fn(*mut Dim3, *mut Dim3, *mut usize, *mut *mut c_void) -> c_int =
            unsafe { std::mem::transmute(next) };
        // SAFETY: the program's arguments.
        return unsafe { pop(grid, block, shared, stream) };
    }
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
    if let Some(next) = GET_KERNEL.address() {
        // SAFETY: libcudart's `cudaError_t __cudaGetKernel(cudaKernel_t *,
        // const void *)`.
        let get: unsafe extern "C" fn(*mut *mut c_void, *const c_void) -> c_int =
            unsafe { std::mem::transmute(next) };
        // SAFETY: the program's arguments.
        return unsafe { get(kernel, host_fun) };
    }
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
    kernel: *const c_void,
    grid: Dim3,
    block: Dim3,
    args: *mut *mut c_void,
    shared: usize,
    stream: *mut c_void,
) -> c_int {
    if let Some(next) = LAUNCH_KERNEL.address() {
        type Launch = unsafe extern "C" fn(
            *const c_void,
            Dim3,
            Dim3,
            *mut *mut c_void,
            usize,
            *mut c_void,
        ) -> c_int;
        // SAFETY: libcudart's `__cudaLaunchKernel`, of this signature.
        let launch: Launch = unsafe { std::mem::transmute(next) };
        // SAFETY: the program's arguments.
        return unsafe { launch(kernel, grid, block, args, shared, stream) };
    }
    guard(CUDA_ERROR_NOT_SUPPORTED, || {
        set_last_error(
            "offload-loader finds, selects, loads and resolves kernels; launch them with \
             cuLaunchKernel on the handle offload_loader_kernel returns",
        );
        CUDA_ERROR_NOT_SUPPORTED
    })
}
