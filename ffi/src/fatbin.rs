//! Fat-binary registration, alike for HIP ([`crate::hip`]) and CUDA
//! ([`crate::cuda`]): a wrapper is checked and its fat binary recorded (found
//! and parsed at first use), a handle issued, symbols recorded against it,
//! and the handle released at unregistration.
//!
//! A wrapper this library cannot place or read (one a JIT or framework built
//! in `malloc`ed memory, a foreign or malformed one) still gets a handle:
//! beside a vendor runtime the registration is handed on to it unchanged
//! ([`crate::handover`]) and said under `OFFLOAD_LOADER_INFO`; alone, it is a
//! warning, and the symbols registered against it record an error.

use std::ffi::{c_char, c_void};

use offload_loader::registration::{FatbinWrapper, WrapperKind};

use crate::error::RegistrationError;
use crate::library::{Message, Symbol, SymbolKind};
use crate::objects::{Pin, Pinned};
use crate::process;
use crate::registry::{self, HandleState};
use crate::slots::{Fatbin, Runtime};
use crate::{guard, info, runtime, set_last_error};

/// The handle clang stores in `__hip_gpubin_handle` and passes back: an
/// opaque token the registry issued (never dereferenced, by clang or here),
/// checked against the tokens issued and not yet released.
pub(crate) type Handle = *mut *mut c_void;

/// Registers the fat binary behind a `kind` wrapper at `wrapper` for
/// `runtime` and issues its handle. `vendor` names the vendor runtime the
/// registration is handed on to, if one is there: a wrapper this library
/// cannot use is then the vendor's alone, said as information.
pub(crate) fn register_wrapper(
    wrapper: usize,
    runtime: Runtime,
    kind: WrapperKind,
    vendor: Option<&str>,
) -> Handle {
    guard(std::ptr::null_mut(), || {
        let fatbin = match locate_fatbin(wrapper, runtime, kind) {
            Ok(fatbin) => Some(fatbin),
            // In a constructor, whose thread may hold the loader's lock
            // itself: saying it waits on no other thread.
            Err(e) => {
                // A null wrapper is not handed on (see `handover::register`).
                match vendor.filter(|_| wrapper != 0) {
                    Some(vendor) => info::say([Message::Info(format!(
                        "{e}: handed to {vendor} as it is; not selected here"
                    ))]),
                    None => info::warn(e.to_string()),
                }
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
        // crt/link.stub: a device-link stub's wrapper (`FATBINC_LINK_VERSION`)
        // points at `__cudaPrelinkedFatbins`, filled before it registers.
        linked: match (info.kind, info.version) {
            (WrapperKind::Cuda, 2) => info.aux as usize,
            _ => 0,
        },
    })
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
