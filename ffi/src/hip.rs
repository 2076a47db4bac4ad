//! The HIP registration ABI clang emits (`__hip_module_ctor` / `__hip_module_dtor`,
//! clang/lib/CodeGen/CGCUDANV.cpp): register the fat binary, then each kernel
//! and variable against the returned handle; unregister at exit.

use std::ffi::{c_char, c_int, c_uint, c_void};

use offload_loader::registration::{FatbinWrapper, WrapperKind};

use crate::error::RegistrationError;
use crate::library::{Symbol, SymbolKind};
use crate::objects::{Pin, Pinned};
use crate::process;
use crate::registry::{self, HandleState};
use crate::slots::{Fatbin, Runtime};
use crate::{guard, info, runtime, set_last_error};

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
    register_wrapper(wrapper as usize, Runtime::Hip, WrapperKind::Hip)
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
    unregister_handle(handle, "__hipUnregisterFatBinary")
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
pub(crate) fn add(
    handle: *const c_void,
    host: *const c_void,
    dev_name: *const c_char,
    name: *const c_char,
    kind: SymbolKind,
) {
    let id = match registry::handle(handle as usize) {
        HandleState::Library(id) => id,
        HandleState::Failed => {
            set_last_error("symbol registered against a fat binary that failed to register");
            return;
        }
        HandleState::Unknown => {
            set_last_error(format!(
                "symbol registered against {handle:p}, which is not a live handle of this library"
            ));
            return;
        }
    };
    // Borrowed, not copied: the name is read when a lookup or message needs it.
    let name = if !dev_name.is_null() { dev_name } else { name };
    if name.is_null() {
        set_last_error("symbol registered without a name");
        return;
    }
    let symbol = Symbol {
        host: host as usize,
        name: name as usize,
        kind,
    };
    match registry::add_symbol(id, symbol) {
        Ok(()) => runtime::registered(id),
        Err(e) => set_last_error(e.to_string()),
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
