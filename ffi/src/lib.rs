//! The C ABI of offload-loader.
//!
//! Link `liboffload_loader` (shared or static) into a program built by clang for
//! HIP or OpenMP offload, and the registration calls its startup code makes
//! (`__hipRegisterFatBinary` and friends, `__tgt_register_lib` and friends) find
//! the program's images, select the best one for each GPU found by
//! `offload-detect`, load it (lazily by default) and resolve every registered
//! kernel and variable. A small query API (`offload_loader_*`, see
//! `include/offload_loader.h`) answers what was registered and selected.
//!
//! No panic crosses the ABI: every entry point runs under [`guard`], and a
//! failure is recorded as the calling thread's last error. Registration is
//! thread-safe. Launching kernels is out of scope.

mod devices;
mod error;
mod hip;
mod info;
mod libraries;
mod lock;
mod omp;
mod query;

use std::cell::RefCell;
use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};

thread_local! {
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
}

/// Records `message` as this thread's last error (see `offload_loader_last_error`).
pub(crate) fn set_last_error(message: impl Into<String>) {
    let message = message.into();
    tracing::debug!("{message}");
    let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = Some(c));
}

/// Runs `f`, turning a panic into `fallback` and a last-error message, so that
/// no unwinding ever crosses into the C caller.
pub(crate) fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    info::init();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_last_error(format!("internal error (caught panic): {what}"));
            fallback
        }
    }
}
