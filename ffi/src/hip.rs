//! The HIP registration ABI clang emits (`__hip_module_ctor` / `__hip_module_dtor`,
//! clang/lib/CodeGen/CGCUDANV.cpp): register the fat binary, then each kernel
//! and variable against the returned handle; unregister at exit.
//!
//! Beside libamdhip64 ([`crate::vendor`]; clang's `-x hip` links it) each
//! hook passes the call on after its own work: the fat binary's wrapper as
//! the program gave it (or, where libamdhip64's first fit would take
//! another code object than this library's choice, a copy with the bundle
//! reordered: [`crate::first_fit`]), and every later call with the handle
//! libamdhip64 returned for it in place of this library's, so that its
//! launch and memory calls know the same kernels and variables.

use std::ffi::{c_char, c_int, c_uint, c_void};

use offload_loader::registration::WrapperKind;

use crate::fatbin::{add, register_wrapper, unregister_handle, Handle};
use crate::library::SymbolKind;
use crate::process;
use crate::registry::{self, HandleState};
use crate::slots::Runtime;
use crate::vendor::Next;
use crate::{first_fit, guard, handover, set_last_error};

/// libamdhip64's hooks, where it is in the process after this library.
static REGISTER_FATBIN: Next = Next::new(c"__hipRegisterFatBinary");
static UNREGISTER_FATBIN: Next = Next::new(c"__hipUnregisterFatBinary");
static REGISTER_FUNCTION: Next = Next::new(c"__hipRegisterFunction");
static REGISTER_VAR: Next = Next::new(c"__hipRegisterVar");
static REGISTER_MANAGED_VAR: Next = Next::new(c"__hipRegisterManagedVar");
static REGISTER_SURFACE: Next = Next::new(c"__hipRegisterSurface");
static REGISTER_TEXTURE: Next = Next::new(c"__hipRegisterTexture");

/// Looks libamdhip64's hooks up (see [`crate::vendor`]).
pub(crate) fn find_vendor() {
    REGISTER_FATBIN.resolve(__hipRegisterFatBinary as *const () as usize);
    UNREGISTER_FATBIN.resolve(__hipUnregisterFatBinary as *const () as usize);
    REGISTER_FUNCTION.resolve(__hipRegisterFunction as *const () as usize);
    REGISTER_VAR.resolve(__hipRegisterVar as *const () as usize);
    REGISTER_MANAGED_VAR.resolve(__hipRegisterManagedVar as *const () as usize);
    REGISTER_SURFACE.resolve(__hipRegisterSurface as *const () as usize);
    REGISTER_TEXTURE.resolve(__hipRegisterTexture as *const () as usize);
}

/// Registers the fat binary described by `wrapper` (a `__CudaFatBinaryWrapper`
/// in `.hipFatBinSegment`: magic `0x48495046`, version 1, pointer to the bundle).
/// Returns a handle even when the fat binary cannot be registered, as HIP
/// does: the symbols registered against it then record an error.
#[no_mangle]
pub extern "C" fn __hipRegisterFatBinary(wrapper: *const c_void) -> Handle {
    // Two atomic loads when no libamdhip64 is there: registration stays cheap.
    crate::vendors();
    let vendor = REGISTER_FATBIN.found().then_some("libamdhip64");
    let handle = register_wrapper(wrapper as usize, Runtime::Hip, WrapperKind::Hip, vendor);
    if let Some(next) = REGISTER_FATBIN.address() {
        let handed = guard(wrapper, || first_fit::wrapper_for(wrapper, handle as usize));
        handover::register(handed, handle, next);
    }
    handle
}

/// Unregisters the fat binary; what was loaded from it is unloaded by the
/// next query (see `runtime`), not under the destructor that calls this. A handle
/// that was never issued, or was already released, is an error recorded for
/// the caller; nothing else happens.
#[no_mangle]
pub extern "C" fn __hipUnregisterFatBinary(handle: Handle) {
    unregister_handle(handle, "__hipUnregisterFatBinary");
    handover::unregister(handle, &UNREGISTER_FATBIN);
    guard((), || first_fit::release(handle as usize));
}

/// Registers kernel `dev_name`, launched from host stub `host_stub`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn __hipRegisterFunction(
    handle: Handle,
    host_stub: *const c_void,
    dev_name: *mut c_char,
    name: *const c_char,
    thread_limit: c_int,
    tid: *mut c_void,
    bid: *mut c_void,
    block_dim: *mut c_void,
    grid_dim: *mut c_void,
    warp_size: *mut c_int,
) -> c_int {
    guard(-1, || {
        add(
            handle as *const c_void,
            host_stub,
            dev_name,
            name,
            SymbolKind::Kernel,
        );
        let f = handover::Function {
            host: host_stub,
            device: dev_name,
            name,
            thread_limit,
            tid,
            bid,
            block: block_dim,
            grid: grid_dim,
            warp_size,
        };
        handover::function(&REGISTER_FUNCTION, handle, f);
        0
    })
}

/// Registers device variable `dev_name` shadowed by `host_var`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn __hipRegisterVar(
    handle: Handle,
    host_var: *mut c_void,
    dev_name: *mut c_char,
    name: *const c_char,
    ext: c_int,
    size: usize,
    constant: c_int,
    global: c_int,
) {
    guard((), || {
        add(
            handle as *const c_void,
            host_var,
            dev_name,
            name,
            SymbolKind::Variable { size: size as u64 },
        );
        let v = handover::Variable {
            host: host_var,
            device: dev_name,
            name,
            ext,
            size,
            constant,
            global,
        };
        handover::variable(&REGISTER_VAR, handle, v);
    })
}

/// Registers managed variable `name`; `pointer` is the host-side pointer the
/// HIP runtime would point at managed memory. This library allocates no memory
/// (no launch or memory API is in scope) and leaves `*pointer` as it is.
#[no_mangle]
pub extern "C" fn __hipRegisterManagedVar(
    handle: *mut c_void,
    pointer: *mut *mut c_void,
    init_value: *mut c_void,
    name: *const c_char,
    size: usize,
    align: c_uint,
) {
    guard((), || {
        record_managed(handle, pointer, init_value, name, size);
        if let Some((next, theirs)) = handover::handed(&REGISTER_MANAGED_VAR, handle as _) {
            type Hook = unsafe extern "C" fn(
                *mut c_void,
                *mut *mut c_void,
                *mut c_void,
                *const c_char,
                usize,
                c_uint,
            );
            // SAFETY: libamdhip64's `__hipRegisterManagedVar`, of this
            // signature: it allocates the variable and sets `*pointer`.
            let hook: Hook = unsafe { std::mem::transmute(next) };
            // SAFETY: the program's arguments, with libamdhip64's handle.
            unsafe {
                hook(
                    theirs as *mut c_void,
                    pointer,
                    init_value,
                    name,
                    size,
                    align,
                )
            };
        }
    })
}

/// This library's part of `__hipRegisterManagedVar`: points `*pointer` at
/// the initial value and records the variable (else the reason is the last
/// error).
fn record_managed(
    handle: *mut c_void,
    pointer: *mut *mut c_void,
    init_value: *mut c_void,
    name: *const c_char,
    size: usize,
) {
    // The host reads and writes the variable through `*pointer` (clang
    // rewrites every host use of `x` to go through the pointer `x`).
    // clr points it at memory it allocates and fills from `init_value`
    // (clang's `x.managed`, the variable's initial value); standalone,
    // with no driver to call from a constructor, it points at
    // `x.managed` itself: host memory of the program's own, holding the
    // initial value. `&x` in the program is then `init_value`, which is
    // what the variable is looked up by. libamdhip64, beside, sets it
    // again to its own allocation.
    // A handle that names no registered library: `add` refuses it and
    // says why.
    if matches!(registry::handle(handle as usize), HandleState::Library(_)) {
        if pointer.is_null() || init_value.is_null() {
            set_last_error("__hipRegisterManagedVar: a null pointer or initial value");
            return;
        }
        if process::locate(pointer as usize).is_none() {
            set_last_error(format!(
                "__hipRegisterManagedVar: the pointer at {pointer:p} is in no loaded object"
            ));
            return;
        }
        // SAFETY: `pointer` is the address of clang's pointer variable `x`,
        // a writable global of the registering object (checked to be loaded).
        unsafe { *pointer = init_value };
    }
    add(
        handle,
        init_value,
        std::ptr::null(),
        name,
        SymbolKind::Managed { size: size as u64 },
    );
}

/// Registers surface reference `dev_name`.
#[no_mangle]
pub extern "C" fn __hipRegisterSurface(
    handle: Handle,
    var: *mut c_void,
    dev_name: *mut c_char,
    name: *const c_char,
    dim: c_int,
    ext: c_int,
) {
    guard((), || {
        add(
            handle as *const c_void,
            var,
            dev_name,
            name,
            SymbolKind::Surface,
        );
        if let Some((next, theirs)) = handover::handed(&REGISTER_SURFACE, handle as _) {
            type Hook =
                unsafe extern "C" fn(Handle, *mut c_void, *mut c_char, *const c_char, c_int, c_int);
            // SAFETY: libamdhip64's `__hipRegisterSurface`, of this signature.
            let hook: Hook = unsafe { std::mem::transmute(next) };
            // SAFETY: the program's arguments, with libamdhip64's handle.
            unsafe { hook(theirs as Handle, var, dev_name, name, dim, ext) };
        }
    })
}

/// Registers texture reference `dev_name`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn __hipRegisterTexture(
    handle: Handle,
    var: *mut c_void,
    dev_name: *mut c_char,
    name: *const c_char,
    dim: c_int,
    norm: c_int,
    ext: c_int,
) {
    guard((), || {
        add(
            handle as *const c_void,
            var,
            dev_name,
            name,
            SymbolKind::Texture,
        );
        if let Some((next, theirs)) = handover::handed(&REGISTER_TEXTURE, handle as _) {
            type Hook = unsafe extern "C" fn(
                Handle,
                *mut c_void,
                *mut c_char,
                *const c_char,
                c_int,
                c_int,
                c_int,
            );
            // SAFETY: libamdhip64's `__hipRegisterTexture`, of this signature.
            let hook: Hook = unsafe { std::mem::transmute(next) };
            // SAFETY: the program's arguments, with libamdhip64's handle.
            unsafe { hook(theirs as Handle, var, dev_name, name, dim, norm, ext) };
        }
    })
}
