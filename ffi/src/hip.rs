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

use offload_loader::registration::{FatbinWrapper, WrapperKind};

use crate::error::RegistrationError;
use crate::library::{Symbol, SymbolKind};
use crate::objects::{Pin, Pinned};
use crate::process;
use crate::registry::{self, HandleState};
use crate::slots::{Fatbin, Runtime};
use crate::vendor::Next;
use crate::{first_fit, guard, handover, info, runtime, set_last_error};

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

/// The handle clang stores in `__hip_gpubin_handle` and passes back: an
/// opaque token the registry issued (never dereferenced, by clang or here),
/// checked against the tokens issued and not yet released.
pub(crate) type Handle = *mut *mut c_void;

/// Registers the fat binary described by `wrapper` (a `__CudaFatBinaryWrapper`
/// in `.hipFatBinSegment`: magic `0x48495046`, version 1, pointer to the bundle).
/// Returns a handle even when the fat binary cannot be registered, as HIP
/// does: the symbols registered against it then record an error.
#[no_mangle]
pub extern "C" fn __hipRegisterFatBinary(wrapper: *const c_void) -> Handle {
    let handle = register_wrapper(wrapper as usize, Runtime::Hip, WrapperKind::Hip);
    // Two atomic loads when no libamdhip64 is there: registration stays cheap.
    crate::vendors();
    if let Some(next) = REGISTER_FATBIN.address() {
        let handed = guard(wrapper, || first_fit::wrapper_for(wrapper, handle as usize));
        handover::register(handed, handle, next);
    }
    handle
}

/// Registers the fat binary behind a `kind` wrapper at `wrapper` for
/// `runtime` and issues its handle (HIP's and, from [`crate::cuda`], CUDA's).
pub(crate) fn register_wrapper(wrapper: usize, runtime: Runtime, kind: WrapperKind) -> Handle {
    guard(std::ptr::null_mut(), || {
        let fatbin = match locate_fatbin(wrapper, runtime, kind) {
            Ok(fatbin) => Some(fatbin),
            Err(e) => {
                // In a constructor, whose thread may hold the loader's lock
                // itself: saying it waits on no other thread.
                info::warn(e.to_string());
                None
            }
        };
        let (handle, id) = registry::register_fatbin(fatbin, runtime);
        if let Some(id) = id {
            runtime::registered(id);
        }
        handle as Handle
    })
}

/// Checks the wrapper and records where its fat binary is, which is found
/// and parsed at first use (as HIP defers its fat binaries). The wrapper's
/// object is pinned for the registration (see [`crate::objects`]): its next
/// wrapper is checked without a lookup.
fn locate_fatbin(
    wrapper: usize,
    runtime: Runtime,
    kind: WrapperKind,
) -> Result<Fatbin, RegistrationError> {
    let object = Pinned::find(wrapper).ok_or(RegistrationError::NotLoaded {
        what: "fat binary wrapper",
        address: wrapper as u64,
    })?;
    // SAFETY: the span lies inside a loaded segment of an object pinned by a
    // live registration, which stays loaded while `object` is held.
    let bytes = unsafe { process::memory(wrapper..object.segment.end) };
    // SAFETY: the object is loaded (pinned).
    let path = || unsafe { object.object.path() }.display().to_string();
    let info = FatbinWrapper::parse(bytes).map_err(|source| RegistrationError::Malformed {
        origin: path(),
        what: format!("fat binary wrapper at {wrapper:#x}"),
        source: Box::new(source),
    })?;
    if info.kind != kind {
        return Err(RegistrationError::WrongWrapper {
            origin: path(),
            address: wrapper as u64,
            found: info.kind.to_string(),
            expected: kind.to_string(),
        });
    }
    Ok(Fatbin {
        runtime,
        object: object.object.to_raw(),
        start: info.fatbin as usize,
        pin: object.keep().map_or(0, Pin::to_raw),
    })
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

/// Releases `handle` and unregisters its library, for `caller` (HIP's and,
/// from [`crate::cuda`], CUDA's unregistration).
pub(crate) fn unregister_handle(handle: Handle, caller: &str) {
    guard((), || match registry::release_handle(handle as usize) {
        Some(Some(id)) => {
            runtime::unregister(id);
        }
        Some(None) => {}
        None => set_last_error(format!(
            "{caller}: {handle:p} is not a handle this library issued, or it was already released"
        )),
    })
}

/// Records symbol `dev_name` (else `name`) at host address `host` in the
/// library behind `handle`; the CUDA ABI's registrations come here too.
/// Whether it was recorded (else the reason is the last error).
pub(crate) fn add(
    handle: *const c_void,
    host: *const c_void,
    dev_name: *const c_char,
    name: *const c_char,
    kind: SymbolKind,
) -> bool {
    let id = match registry::handle(handle as usize) {
        HandleState::Library(id) => id,
        HandleState::Failed => {
            set_last_error("symbol registered against a fat binary that failed to register");
            return false;
        }
        HandleState::Unknown => {
            set_last_error(format!(
                "symbol registered against {handle:p}, which is not a live handle of this library"
            ));
            return false;
        }
    };
    // Borrowed, not copied: the name is read when a lookup or message needs it.
    let name = if !dev_name.is_null() { dev_name } else { name };
    if name.is_null() {
        set_last_error("symbol registered without a name");
        return false;
    }
    let symbol = Symbol {
        host: host as usize,
        name: name as usize,
        kind,
    };
    match registry::add_symbol(id, symbol) {
        Ok(()) => {
            runtime::registered(id);
            true
        }
        Err(e) => {
            set_last_error(e.to_string());
            false
        }
    }
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
        let recorded = add(
            handle as *const c_void,
            host_stub,
            dev_name,
            name,
            SymbolKind::Kernel,
        );
        if recorded {
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
        }
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
        let recorded = add(
            handle as *const c_void,
            host_var,
            dev_name,
            name,
            SymbolKind::Variable { size: size as u64 },
        );
        if recorded {
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
        }
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
        // The host reads and writes the variable through `*pointer` (clang
        // rewrites every host use of `x` to go through the pointer `x`).
        // clr points it at memory it allocates and fills from `init_value`
        // (clang's `x.managed`, the variable's initial value); standalone,
        // with no driver to call from a constructor, it points at
        // `x.managed` itself: host memory of the program's own, holding the
        // initial value. `&x` in the program is then `init_value`, which is
        // what the variable is looked up by. libamdhip64, beside, sets it
        // again to its own allocation.
        if !matches!(registry::handle(handle as usize), HandleState::Library(_)) {
            // Reported by `add`, which refuses the handle.
            add(
                handle,
                init_value,
                std::ptr::null(),
                name,
                SymbolKind::Managed { size: size as u64 },
            );
            return;
        }
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
        let recorded = add(
            handle,
            init_value,
            std::ptr::null(),
            name,
            SymbolKind::Managed { size: size as u64 },
        );
        if let Some((next, theirs)) =
            handover::handed(&REGISTER_MANAGED_VAR, handle as _).filter(|_| recorded)
        {
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
        let recorded = add(
            handle as *const c_void,
            var,
            dev_name,
            name,
            SymbolKind::Surface,
        );
        if let Some((next, theirs)) =
            handover::handed(&REGISTER_SURFACE, handle as _).filter(|_| recorded)
        {
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
        let recorded = add(
            handle as *const c_void,
            var,
            dev_name,
            name,
            SymbolKind::Texture,
        );
        if let Some((next, theirs)) =
            handover::handed(&REGISTER_TEXTURE, handle as _).filter(|_| recorded)
        {
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
