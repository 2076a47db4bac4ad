//! The HIP registration ABI clang emits (`__hip_module_ctor` / `__hip_module_dtor`,
//! clang/lib/CodeGen/CGCUDANV.cpp): register the fat binary, then each kernel
//! and variable against the returned handle; unregister at exit.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

use offload_loader::discover::process;
use offload_loader::registration::FatbinWrapper;
use offload_loader::{Container, Limits};

use crate::libraries::{self, Images, Runtime, Symbol, SymbolKind};
use crate::{guard, set_last_error};

/// The handle clang stores in `__hip_gpubin_handle`: a heap cell holding the
/// library id, or `usize::MAX` when the fat binary could not be registered.
type Handle = *mut *mut c_void;

fn new_handle(id: usize) -> Handle {
    Box::into_raw(Box::new(id as *mut c_void))
}

/// The library id behind `handle`, if it names one.
fn handle_id(handle: *const c_void) -> Option<usize> {
    if handle.is_null() {
        return None;
    }
    // SAFETY: every non-null handle clang passes back is one `new_handle`
    // returned (it stores the return value of `__hipRegisterFatBinary`).
    let id = unsafe { *(handle as *const *mut c_void) } as usize;
    (id != usize::MAX).then_some(id)
}

/// The NUL-terminated string at `p`, if any.
fn c_name(p: *const c_char) -> Option<String> {
    // SAFETY: clang passes pointers to NUL-terminated names in the binary's
    // read-only data, or null.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Registers the fat binary described by `wrapper` (a `__CudaFatBinaryWrapper`
/// in `.hipFatBinSegment`: magic `0x48495046`, version 1, pointer to the bundle).
#[no_mangle]
pub extern "C" fn __hipRegisterFatBinary(wrapper: *const c_void) -> Handle {
    // The handle is allocated once, outside the guard: a fallback value
    // built eagerly would leak on every successful call.
    let id = guard(usize::MAX, || match register_fatbin(wrapper as usize) {
        Ok(id) => id,
        Err(e) => {
            tracing::warn!("{e}");
            eprintln!("offload-loader: {e}");
            set_last_error(e);
            usize::MAX
        }
    });
    new_handle(id)
}

fn register_fatbin(wrapper: usize) -> Result<usize, String> {
    let (object, span) = process::span_containing(wrapper)
        .ok_or_else(|| format!("fat binary wrapper at {wrapper:#x} is not in any loaded object"))?;
    // SAFETY: `span` lies inside a loaded segment of `object`, which stays
    // loaded at least until its destructor unregisters this fat binary.
    let bytes = unsafe { process::memory(span) };
    let wrapper_info = FatbinWrapper::parse(bytes).map_err(|e| {
        format!(
            "{}: fat binary wrapper at {wrapper:#x}: {e}",
            object.path.display()
        )
    })?;
    let fatbin = wrapper_info.fatbin as usize;
    let (_, span) = process::span_containing(fatbin).ok_or_else(|| {
        format!(
            "fat binary at {fatbin:#x} (from wrapper at {wrapper:#x}) is not in any loaded object"
        )
    })?;
    // SAFETY: as above, for the segment holding the fat binary.
    let bytes = unsafe { process::memory(span) };
    let origin = format!("{} fatbin at {fatbin:#x}", object.path.display());
    let container =
        Container::parse(bytes, &Limits::default()).map_err(|e| format!("{origin}: {e}"))?;
    Ok(libraries::register(
        Runtime::Hip,
        origin,
        Images::Container(container),
    ))
}

/// Unregisters the fat binary and unloads what was loaded from it.
#[no_mangle]
pub extern "C" fn __hipUnregisterFatBinary(handle: Handle) {
    guard((), || {
        if let Some(id) = handle_id(handle as *const c_void) {
            libraries::unregister(id);
        }
        if !handle.is_null() {
            // SAFETY: `handle` came from `new_handle` and clang calls this once,
            // from the module destructor.
            drop(unsafe { Box::from_raw(handle) });
        }
    })
}

fn add(
    handle: *const c_void,
    host: *const c_void,
    dev_name: *const c_char,
    name: *const c_char,
    kind: SymbolKind,
) {
    let Some(id) = handle_id(handle) else {
        set_last_error("symbol registered against a fat binary that failed to register");
        return;
    };
    let Some(name) = c_name(dev_name).or_else(|| c_name(name)) else {
        set_last_error("symbol registered without a name");
        return;
    };
    libraries::add_symbol(
        id,
        Symbol {
            host: host as usize,
            name,
            kind,
        },
    );
}

/// Registers kernel `dev_name`, launched from host stub `host_stub`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn __hipRegisterFunction(
    handle: Handle,
    host_stub: *const c_void,
    dev_name: *mut c_char,
    name: *const c_char,
    _thread_limit: c_int,
    _tid: *mut c_void,
    _bid: *mut c_void,
    _block_dim: *mut c_void,
    _grid_dim: *mut c_void,
    _warp_size: *mut c_int,
) -> c_int {
    guard(-1, || {
        add(
            handle as *const c_void,
            host_stub,
            dev_name,
            name,
            SymbolKind::Kernel,
        );
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
    _ext: c_int,
    size: usize,
    _constant: c_int,
    _global: c_int,
) {
    guard((), || {
        add(
            handle as *const c_void,
            host_var,
            dev_name,
            name,
            SymbolKind::Variable { size: size as u64 },
        )
    })
}

/// Registers managed variable `name`; `pointer` is the host-side pointer the
/// HIP runtime would point at managed memory. This library allocates no memory
/// (no launch or memory API is in scope) and leaves `*pointer` as it is.
#[no_mangle]
pub extern "C" fn __hipRegisterManagedVar(
    handle: *mut c_void,
    pointer: *mut *mut c_void,
    _init_value: *mut c_void,
    name: *const c_char,
    size: usize,
    _align: c_uint,
) {
    guard((), || {
        add(
            handle,
            pointer as *const c_void,
            std::ptr::null(),
            name,
            SymbolKind::Managed { size: size as u64 },
        )
    })
}

/// Registers surface reference `dev_name`.
#[no_mangle]
pub extern "C" fn __hipRegisterSurface(
    handle: Handle,
    var: *mut c_void,
    dev_name: *mut c_char,
    name: *const c_char,
    _dim: c_int,
    _ext: c_int,
) {
    guard((), || {
        add(
            handle as *const c_void,
            var,
            dev_name,
            name,
            SymbolKind::Surface,
        )
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
    _dim: c_int,
    _norm: c_int,
    _ext: c_int,
) {
    guard((), || {
        add(
            handle as *const c_void,
            var,
            dev_name,
            name,
            SymbolKind::Texture,
        )
    })
}
