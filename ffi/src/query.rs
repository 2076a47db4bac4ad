//! The query API for the runtime above this library: devices, registered
//! libraries and their selections, kernel handles and variable addresses,
//! and the calling thread's last error. Declared in `include/offload_loader.h`.
//!
//! Each query first settles what destructors and constructors left for it
//! ([`runtime::settle`]): the modules of unregistered libraries are unloaded,
//! eager registrations loaded.

use std::ffi::{c_char, c_int, c_void, CStr};

use offload_loader::ImageSource;

use crate::error::{status, Error, INTERNAL, NOT_FOUND};
use crate::registry;
use crate::runtime::{self, devices};
use crate::{abi, guard};

/// [`guard`] for a query: settles first (see the module docs).
pub(crate) fn query<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    guard(fallback, || {
        runtime::settle();
        f()
    })
}

/// Copies `s` with a NUL into `buf` of `len` bytes.
fn copy_str(s: &str, buf: *mut c_char, len: usize) -> Result<(), Error> {
    if buf.is_null() {
        return Err(Error::Invalid("null buffer"));
    }
    if len <= s.len() {
        return Err(Error::TooSmall {
            len,
            needed: s.len() + 1,
        });
    }
    // SAFETY: the caller provides `len` writable bytes at `buf`, and `s.len() + 1 <= len`.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), s.len());
        *buf.add(s.len()) = 0;
    }
    Ok(())
}

/// The library's version, `MAJOR.MINOR.PATCH` with a NUL, from the crate's
/// (`OFFLOAD_LOADER_VERSION_STRING` in the header must match it: a test
/// says so). Static storage; touches no state, so it needs no settling.
#[no_mangle]
pub extern "C" fn offload_loader_version() -> *const c_char {
    const VERSION: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(v) => v,
            Err(_) => panic!("the crate version has a NUL"),
        };
    VERSION.as_ptr()
}

/// Number of devices found (or given by `OFFLOAD_LOADER_DEVICES`).
#[no_mangle]
pub extern "C" fn offload_loader_device_count() -> c_int {
    query(0, || devices().len() as c_int)
}

/// The target of device `device` (`gfx90a:sramecc+:xnack-`, `sm_90`) into `buf`.
#[no_mangle]
pub extern "C" fn offload_loader_device_target(
    device: c_int,
    buf: *mut c_char,
    len: usize,
) -> c_int {
    query(INTERNAL, || {
        status(
            usize::try_from(device)
                .ok()
                .and_then(|d| devices().get(d))
                .ok_or(Error::NoDevice(device.into()))
                .and_then(|d| copy_str(&d.target.to_string(), buf, len)),
        )
    })
}

/// Number of libraries registered so far (ids run from 0; unregistered ones stay counted).
#[no_mangle]
pub extern "C" fn offload_loader_library_count() -> c_int {
    query(0, || registry::count().try_into().unwrap_or(c_int::MAX))
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
    query(INTERNAL, || {
        status((|| {
            let lib = usize::try_from(library)
                .ok()
                .and_then(registry::library)
                .ok_or(Error::NoLibrary(library.into()))?;
            let made = runtime::made(&lib, runtime::detection())
                .ok_or(Error::NoLibrary(library.into()))?;
            let selection = usize::try_from(device)
                .ok()
                .and_then(|d| made.selections.get(d))
                .ok_or(Error::NoDevice(device.into()))?;
            let lib = lib.enter().ok_or(Error::NoLibrary(library.into()))?;
            let chosen = selection.chosen.ok_or_else(|| {
                Error::NoImage(format!(
                    "library {library} has no compatible image for device {device}{}",
                    lib.unreadable()
                ))
            })?;
            if !index.is_null() {
                // SAFETY: non-null out-pointer provided by the caller.
                unsafe { *index = chosen as c_int };
            }
            if !target.is_null() {
                copy_str(&lib.images()[chosen].arch.to_string(), target, target_len)?;
            }
            if !data.is_null() || !size.is_null() {
                // Borrowed from the process's memory, or from memory the
                // library keeps while it is registered (its inflated bundle,
                // or this image inflated once).
                let bytes = lib.kept_image(chosen)?;
                // SAFETY: non-null out-pointers provided by the caller.
                unsafe {
                    if !data.is_null() {
                        *data = bytes.as_ptr().cast();
                    }
                    if !size.is_null() {
                        *size = bytes.len();
                    }
                }
            }
            Ok(())
        })())
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
    query(INTERNAL, || {
        if handle.is_null() {
            return status(Err(Error::Invalid("null handle pointer")));
        }
        let found = registry::kernel(host_stub as usize);
        let what = || format!("kernel with host stub {host_stub:p}");
        status(runtime::lookup(found, device.into(), what).map(|(h, _)| {
            // SAFETY: checked non-null above.
            unsafe { *handle = h };
        }))
    })
}

/// The device kernel handle of the kernel named `name` (device-side name).
#[no_mangle]
pub extern "C" fn offload_loader_kernel_by_name(
    name: *const c_char,
    device: c_int,
    handle: *mut u64,
) -> c_int {
    query(INTERNAL, || {
        if name.is_null() || handle.is_null() {
            return status(Err(Error::Invalid("null name or handle pointer")));
        }
        // SAFETY: the caller passes a NUL-terminated string.
        let name = unsafe { CStr::from_ptr(name) };
        let found = registry::kernel_by_name(name);
        let what = || format!("kernel {}", name.to_string_lossy());
        status(runtime::lookup(found, device.into(), what).map(|(h, _)| {
            // SAFETY: checked non-null above.
            unsafe { *handle = h };
        }))
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
    query(INTERNAL, || {
        let found = registry::variable(host_var as usize);
        let what = || format!("variable with host address {host_var:p}");
        status(runtime::lookup(found, device.into(), what).map(|(a, s)| {
            // SAFETY: non-null out-pointers provided by the caller.
            unsafe {
                if !address.is_null() {
                    *address = a;
                }
                if !size.is_null() {
                    *size = s;
                }
            }
        }))
    })
}

/// Number of kernels and variables registered in library `library`, or -1.
#[no_mangle]
pub extern "C" fn offload_loader_symbol_count(library: c_int) -> c_int {
    query(NOT_FOUND, || {
        usize::try_from(library)
            .ok()
            .and_then(registry::symbol_count)
            .map_or(NOT_FOUND, |n| n.try_into().unwrap_or(c_int::MAX))
    })
}

/// The calling thread's last error message, or null. Valid until the next
/// call into this library from the same thread.
#[no_mangle]
pub extern "C" fn offload_loader_last_error() -> *const c_char {
    abi::last_error()
}
