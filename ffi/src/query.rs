//! The query API for the runtime above this library: devices, registered
//! libraries and their selections, kernel handles and variable addresses,
//! and the calling thread's last error. Declared in `include/offload_loader.h`.

use std::ffi::{c_char, c_int, c_void, CStr};

use crate::registry::{self, SymbolKind};
use crate::{guard, loader, set_last_error, LAST_ERROR};

/// Success.
pub const OK: c_int = 0;
/// No such device, library, kernel or variable.
pub const NOT_FOUND: c_int = -1;
/// The device has no compatible image in the library.
pub const NO_IMAGE: c_int = -2;
/// The driver failed to load the image or resolve the symbol.
pub const DRIVER: c_int = -3;
/// A null pointer or an out-of-range argument.
pub const INVALID: c_int = -4;
/// The caller's buffer is too small; the needed size was stored.
pub const TOO_SMALL: c_int = -5;
/// An internal error was caught.
pub const INTERNAL: c_int = -6;

/// Copies `s` with a NUL into `buf` of `len` bytes; `TOO_SMALL` if it does not fit.
fn copy_str(s: &str, buf: *mut c_char, len: usize) -> c_int {
    if buf.is_null() || len <= s.len() {
        set_last_error(format!(
            "buffer of {len} bytes is too small for {} bytes",
            s.len() + 1
        ));
        return TOO_SMALL;
    }
    // SAFETY: the caller provides `len` writable bytes at `buf`, and `s.len() + 1 <= len`.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), s.len());
        *buf.add(s.len()) = 0;
    }
    OK
}

/// Number of devices found (or given by `OFFLOAD_LOADER_DEVICES`).
#[no_mangle]
pub extern "C" fn offload_loader_device_count() -> c_int {
    guard(0, || loader::devices().len() as c_int)
}

/// The target of device `device` (`gfx90a:sramecc+:xnack-`, `sm_90`) into `buf`.
#[no_mangle]
pub extern "C" fn offload_loader_device_target(
    device: c_int,
    buf: *mut c_char,
    len: usize,
) -> c_int {
    guard(INTERNAL, || match loader::devices().get(device as usize) {
        Some(d) if device >= 0 => copy_str(&d.target.to_string(), buf, len),
        _ => {
            set_last_error(format!("no device {device}"));
            NOT_FOUND
        }
    })
}

/// Number of libraries registered so far (ids run from 0; unregistered ones stay counted).
#[no_mangle]
pub extern "C" fn offload_loader_library_count() -> c_int {
    guard(0, || {
        registry::libraries()
            .last()
            .map_or(0, |l| l.id as c_int + 1)
    })
}

/// The image library `library` selected for `device`: its index, target ID
/// (into `target`, `target_len` bytes) and bytes (`*data`, `*size`, valid while
/// the library is registered; a compressed image is inflated into memory
/// owned by this library). `NO_IMAGE` when nothing fits.
#[no_mangle]
pub extern "C" fn offload_loader_selected_image(
    library: c_int,
    device: c_int,
    index: *mut c_int,
    target: *mut c_char,
    target_len: usize,
    data: *mut *const c_void,
    size: *mut usize,
) -> c_int {
    guard(INTERNAL, || {
        let Some(lib) = usize::try_from(library).ok().and_then(registry::library) else {
            set_last_error(format!("no library {library}"));
            return NOT_FOUND;
        };
        let Some(selection) = usize::try_from(device)
            .ok()
            .and_then(|d| lib.selections().get(d))
        else {
            set_last_error(format!("no device {device}"));
            return NOT_FOUND;
        };
        let Some(chosen) = selection.chosen else {
            set_last_error(format!(
                "library {library} has no compatible image for device {device}"
            ));
            return NO_IMAGE;
        };
        if !index.is_null() {
            // SAFETY: non-null out-pointer provided by the caller.
            unsafe { *index = chosen as c_int };
        }
        if !target.is_null() {
            let rc = copy_str(&lib.images[chosen].arch.to_string(), target, target_len);
            if rc != OK {
                return rc;
            }
        }
        if !data.is_null() || !size.is_null() {
            let bytes = match lib.image_bytes(chosen) {
                Ok(b) => b,
                Err(e) => {
                    set_last_error(e);
                    return DRIVER;
                }
            };
            let (ptr, len) = match bytes {
                std::borrow::Cow::Borrowed(b) => (b.as_ptr(), b.len()),
                // Kept alive for the rest of the process: images are small and
                // asked for once per library and device.
                std::borrow::Cow::Owned(v) => {
                    let leaked: &'static [u8] = Vec::leak(v);
                    (leaked.as_ptr(), leaked.len())
                }
            };
            // SAFETY: non-null out-pointers provided by the caller.
            unsafe {
                if !data.is_null() {
                    *data = ptr.cast();
                }
                if !size.is_null() {
                    *size = len;
                }
            }
        }
        OK
    })
}

fn lookup(
    found: Option<(std::sync::Arc<registry::Library>, registry::Symbol)>,
    what: &str,
    device: c_int,
) -> Result<(u64, u64, SymbolKind), c_int> {
    let Some((lib, symbol)) = found else {
        set_last_error(format!("no registered {what}"));
        return Err(NOT_FOUND);
    };
    let Some(d) = usize::try_from(device)
        .ok()
        .filter(|&d| d < lib.selections().len())
    else {
        set_last_error(format!("no device {device}"));
        return Err(NOT_FOUND);
    };
    if lib.selections()[d].chosen.is_none() {
        set_last_error(format!(
            "{}: device {device} has no compatible image for {}",
            lib.origin, symbol.name
        ));
        return Err(NO_IMAGE);
    }
    registry::resolve(&lib, d, &symbol)
        .map(|(a, b)| (a, b, symbol.kind))
        .map_err(|e| {
            set_last_error(e);
            DRIVER
        })
}

/// The device kernel handle of the kernel whose host stub is `host_stub`
/// (HSA kernel object, or CUfunction), loading its image on `device` if needed.
#[no_mangle]
pub extern "C" fn offload_loader_kernel(
    host_stub: *const c_void,
    device: c_int,
    handle: *mut u64,
) -> c_int {
    guard(INTERNAL, || {
        if handle.is_null() {
            return INVALID;
        }
        let found =
            registry::find(|s| s.host == host_stub as usize && s.kind == SymbolKind::Kernel);
        match lookup(
            found,
            &format!("kernel with host stub {host_stub:p}"),
            device,
        ) {
            Ok((h, _, _)) => {
                // SAFETY: checked non-null above.
                unsafe { *handle = h };
                OK
            }
            Err(rc) => rc,
        }
    })
}

/// The device kernel handle of the kernel named `name` (device-side name).
#[no_mangle]
pub extern "C" fn offload_loader_kernel_by_name(
    name: *const c_char,
    device: c_int,
    handle: *mut u64,
) -> c_int {
    guard(INTERNAL, || {
        if name.is_null() || handle.is_null() {
            return INVALID;
        }
        // SAFETY: the caller passes a NUL-terminated string.
        let name = unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned();
        let found = registry::find(|s| s.name == name && s.kind == SymbolKind::Kernel);
        match lookup(found, &format!("kernel {name}"), device) {
            Ok((h, _, _)) => {
                // SAFETY: checked non-null above.
                unsafe { *handle = h };
                OK
            }
            Err(rc) => rc,
        }
    })
}

/// The device address and size of the variable whose host shadow is `host_var`.
#[no_mangle]
pub extern "C" fn offload_loader_variable(
    host_var: *const c_void,
    device: c_int,
    address: *mut u64,
    size: *mut u64,
) -> c_int {
    guard(INTERNAL, || {
        let found = registry::find(|s| s.host == host_var as usize && s.kind != SymbolKind::Kernel);
        match lookup(
            found,
            &format!("variable with host address {host_var:p}"),
            device,
        ) {
            Ok((a, s, _)) => {
                // SAFETY: non-null out-pointers provided by the caller.
                unsafe {
                    if !address.is_null() {
                        *address = a;
                    }
                    if !size.is_null() {
                        *size = s;
                    }
                }
                OK
            }
            Err(rc) => rc,
        }
    })
}

/// Number of kernels and variables registered in library `library`, or -1.
#[no_mangle]
pub extern "C" fn offload_loader_symbol_count(library: c_int) -> c_int {
    guard(NOT_FOUND, || {
        usize::try_from(library)
            .ok()
            .and_then(registry::library)
            .map_or(NOT_FOUND, |l| {
                l.symbols.lock().unwrap_or_else(|e| e.into_inner()).len() as c_int
            })
    })
}

/// The calling thread's last error message, or null. Valid until the next
/// call into this library from the same thread.
#[no_mangle]
pub extern "C" fn offload_loader_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ref().map_or(std::ptr::null(), |c| c.as_ptr()))
}
