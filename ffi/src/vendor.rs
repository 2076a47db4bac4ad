//! The vendor runtimes beside this library: where a program also links
//! libomptarget or libamdhip64, each registration hook passes the
//! registration on to the next definition of the same hook, after doing its
//! own work, so that the vendor's launch, memory and data-mapping calls work
//! on the same code.
//!
//! The next definition is the one `dlsym(RTLD_NEXT, name)` finds from this
//! library: the vendor's when the program was linked with this library
//! first, as `clang -fopenmp … -loffload_loader` links it (clang appends
//! `-lomp -lomptarget` after the user's libraries), `clang -x hip …
//! -loffload_loader` (clang appends `-lamdhip64`) and `nvcc -cudart shared
//! … -loffload_loader` (nvcc appends `-lcudart`). Looked up once, when this
//! library is loaded (under the loader's lock that loading holds anyway:
//! every library the program was linked with is mapped by then), or by the
//! first hook called if that constructor did not run: registration, which
//! a program's start-up makes hundreds of times, then costs one load.

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::loader_lock;

/// Whether the hooks were looked up.
static LOOKED_UP: AtomicBool = AtomicBool::new(false);

/// Runs `find` (which resolves every hook) the first time; two threads
/// that race both run it, to the same result.
#[inline]
pub(crate) fn look_up_once(find: fn()) {
    if !LOOKED_UP.load(Ordering::Acquire) {
        find();
        LOOKED_UP.store(true, Ordering::Release);
    }
}

/// A hook's next definition.
pub(crate) struct Next {
    name: &'static CStr,
    /// Its address; 0 while none was found.
    address: AtomicUsize,
}

impl Next {
    pub(crate) const fn new(name: &'static CStr) -> Next {
        Next {
            name,
            address: AtomicUsize::new(0),
        }
    }

    /// Looks the definition up unless one was found (see [`look_up_once`]);
    /// `ours` is this library's own definition, which is never the next one
    /// (a second copy of this library, static and shared, finds the first).
    pub(crate) fn resolve(&self, ours: usize) {
        if self.address.load(Ordering::Acquire) != 0 {
            return;
        }
        loader_lock::check("dlsym of a vendor runtime's hook");
        // SAFETY: `name` is NUL-terminated; `RTLD_NEXT` searches the objects
        // loaded after the one this call is made from (this library).
        let found = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) } as usize;
        if found != 0 && found != ours {
            self.address.store(found, Ordering::Release);
        }
    }

    /// Whether a definition was found.
    pub(crate) fn found(&self) -> bool {
        self.address().is_some()
    }

    /// The definition found, if any.
    #[inline]
    pub(crate) fn address(&self) -> Option<usize> {
        Some(self.address.load(Ordering::Acquire)).filter(|&a| a != 0)
    }

    /// Calls the definition, a `void (void *)` hook, with `arg`; whether
    /// there was one.
    pub(crate) fn call_ptr(&self, arg: *mut c_void) -> bool {
        let Some(address) = self.address() else {
            return false;
        };
        // SAFETY: `address` is the vendor runtime's definition of this hook,
        // whose C signature is `void (void *)` (`__tgt_register_lib`,
        // `__tgt_unregister_lib`: LLVM offload/include/omptarget.h).
        let hook: unsafe extern "C" fn(*mut c_void) = unsafe { std::mem::transmute(address) };
        // SAFETY: the vendor's hook is called as the program would have
        // called it, with the argument the program passed (or a copy of it).
        unsafe { hook(arg) };
        true
    }

    /// Calls the definition, a `void (int64_t)` hook; whether there was one.
    pub(crate) fn call_i64(&self, arg: i64) -> bool {
        let Some(address) = self.address() else {
            return false;
        };
        // SAFETY: as in `call_ptr`, for `__tgt_register_requires(int64_t)`.
        let hook: unsafe extern "C" fn(i64) = unsafe { std::mem::transmute(address) };
        // SAFETY: called as the program would have called it.
        unsafe { hook(arg) };
        true
    }

    /// Calls the definition, a `void (void)` hook; whether there was one.
    pub(crate) fn call(&self) -> bool {
        let Some(address) = self.address() else {
            return false;
        };
        // SAFETY: as in `call_ptr`, for `__tgt_init_all_rtls(void)`.
        let hook: unsafe extern "C" fn() = unsafe { std::mem::transmute(address) };
        // SAFETY: called as the program would have called it.
        unsafe { hook() };
        true
    }
}
