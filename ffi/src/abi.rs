//! What every entry point shares: the calling thread's last error and the
//! guard that keeps panics from crossing into C. (Its own module so that the
//! fuzz target `c_abi` can compile the C ABI's modules into itself.)
//!
//! The last error lives under a `pthread` key rather than in a Rust
//! thread-local: the first write of a thread-local with a destructor
//! registers that destructor through `__cxa_thread_atexit_impl`, which takes
//! the dynamic loader's lock (see `loader_lock`), while a key's destructor
//! is registered once, with the key. The shared library is linked `-z
//! nodelete` (build.rs), so that destructor's code stays mapped for every
//! thread; a static copy deletes the key as it is unloaded ([`forget`]).

use std::ffi::{c_char, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The key, plus one (0: not created yet).
static KEY: AtomicUsize = AtomicUsize::new(0);

/// Frees a thread's message when the thread exits.
unsafe extern "C" fn free_message(message: *mut c_void) {
    if !message.is_null() {
        // SAFETY: every value stored under the key is a `CString` leaked by
        // `set_last_error`, and the thread that owned it is exiting.
        drop(unsafe { CString::from_raw(message.cast()) });
    }
}

/// The key, created at the first call (the library's constructor makes
/// that call, before the program has threads).
fn key() -> Option<libc::pthread_key_t> {
    let k = KEY.load(Ordering::Acquire);
    if k != 0 {
        return Some((k - 1) as libc::pthread_key_t);
    }
    let mut new: libc::pthread_key_t = 0;
    // SAFETY: `new` is a valid out-pointer; the destructor matches the type.
    if unsafe { libc::pthread_key_create(&mut new, Some(free_message)) } != 0 {
        return None;
    }
    match KEY.compare_exchange(0, new as usize + 1, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Some(new),
        Err(won) => {
            // SAFETY: `new` was created above and never used.
            unsafe { libc::pthread_key_delete(new) };
            Some((won - 1) as libc::pthread_key_t)
        }
    }
}

/// Creates the last error's key (from the library's constructor).
pub(crate) fn prepare() {
    let _ = key();
}

/// Deletes the key (from the library's destructor): its destructor is code
/// of this library, which a static copy linked into an unloadable shared
/// object takes with it. Threads' messages are then left, not freed.
pub(crate) fn forget() {
    let k = KEY.swap(0, Ordering::AcqRel);
    if k != 0 {
        // SAFETY: a key this module created, deleted once (the swap).
        unsafe { libc::pthread_key_delete((k - 1) as libc::pthread_key_t) };
    }
}

/// Records `message` as this thread's last error (see `offload_loader_last_error`).
pub(crate) fn set_last_error(message: impl Into<String>) {
    let Some(key) = key() else { return };
    let mut message = message.into();
    if message.contains('\0') {
        message = message.replace('\0', " ");
    }
    let Ok(c) = CString::new(message) else { return };
    // SAFETY: `key` is a live key; the old value, if any, is a `CString`
    // leaked by an earlier call on this thread, replaced before it is freed.
    unsafe {
        let old = libc::pthread_getspecific(key);
        let new = c.into_raw();
        if libc::pthread_setspecific(key, new.cast()) != 0 {
            free_message(new.cast());
            return;
        }
        free_message(old);
    }
}

/// This thread's last error, valid until its next call into this library.
pub(crate) fn last_error() -> *const c_char {
    match key() {
        // SAFETY: `key` is a live key; its value is null or a `CString` of
        // this thread's.
        Some(key) => unsafe { libc::pthread_getspecific(key) }
            .cast_const()
            .cast(),
        None => std::ptr::null(),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn read() -> Option<String> {
        let p = last_error();
        // SAFETY: a non-null last error is this thread's NUL-terminated string.
        (!p.is_null()).then(|| {
            unsafe { std::ffi::CStr::from_ptr(p) }
                .to_string_lossy()
                .into()
        })
    }

    #[test]
    fn each_thread_has_its_own_last_error() {
        set_last_error("first");
        set_last_error("second\0half");
        assert_eq!(read().as_deref(), Some("second half"));
        std::thread::spawn(|| {
            assert_eq!(read(), None);
            set_last_error("other thread");
            assert_eq!(read().as_deref(), Some("other thread"));
        })
        .join()
        .unwrap();
        assert_eq!(read().as_deref(), Some("second half"));
        assert_eq!(guard(7, || panic!("boom")), 7);
        assert_eq!(
            read().as_deref(),
            Some("internal error (caught panic): boom")
        );
    }
}
