//! What every entry point shares: the calling thread's last error and the
//! guard that keeps panics from crossing into C. (Its own module so that the
//! fuzz target `c_abi` can compile the C ABI's modules into itself.)

use std::cell::RefCell;
use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};

thread_local! {
    pub(crate) static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
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
    crate::info::init();
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
