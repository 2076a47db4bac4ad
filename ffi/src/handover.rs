//! Handing HIP and CUDA registrations on to the vendor runtime
//! (libamdhip64, libcudart; see [`crate::vendor`]): their hooks have the
//! same shapes (clr `hip_platform.cpp`, CUDA `crt/host_runtime.h`), so one
//! set of calls serves both. The vendor returns its own handle for a fat
//! binary; every later call for it is made with that handle, which this
//! library's handle's slot keeps (see [`crate::slots`]).

use std::ffi::{c_char, c_int, c_void};

use crate::fatbin::Handle;
use crate::guard;
use crate::slots::{self, State};
use crate::vendor::Next;

/// Hands the fat binary behind `wrapper`, which this library registered as
/// `handle`, on to `next` (`__hipRegisterFatBinary` or
/// `__cudaRegisterFatBinary`, `void **(void *)`), and keeps the handle the
/// vendor returns: every wrapper the program registers, this library's own
/// or one it could not place or read (the vendor's to judge, as without this
/// library), but a null one, which is no registration and crashes
/// libamdhip64 (this library says it as a warning).
#[cold]
#[inline(never)]
pub(crate) fn register(wrapper: *const c_void, handle: Handle, next: usize) {
    guard((), || {
        // One lookup: the slot of a handle this library issued and has not
        // released (a fat binary's, or one that failed to register).
        let live = slots::from_handle(handle as usize)
            .filter(|(_, slot)| matches!(slot.state(), State::Fatbin | State::Failed));
        let Some((_, slot)) = live.filter(|_| !wrapper.is_null()) else {
            return;
        };
        // SAFETY: the vendor's `void **__*RegisterFatBinary(void *)`.
        let register: unsafe extern "C" fn(*const c_void) -> Handle =
            unsafe { std::mem::transmute(next) };
        // SAFETY: as the program would have called it.
        let theirs = unsafe { register(wrapper) };
        slot.set_vendor(theirs as usize);
    })
}

/// Hands the unregistration of this library's `handle` on to `next`
/// (`void __*UnregisterFatBinary(void **)`) with the vendor's handle.
pub(crate) fn unregister(handle: Handle, next: &Next) {
    guard((), || {
        let theirs = slots::from_handle(handle as usize).and_then(|(_, slot)| slot.take_vendor());
        if let (Some(theirs), Some(next)) = (theirs, next.address()) {
            // SAFETY: the vendor's `void __*UnregisterFatBinary(void **)`.
            let unregister: unsafe extern "C" fn(Handle) = unsafe { std::mem::transmute(next) };
            // SAFETY: with the handle it returned for this fat binary.
            unsafe { unregister(theirs as Handle) };
        }
    })
}

/// The vendor's hook `next` and the handle it returned for the fat binary
/// of this library's `handle`, when both are there.
pub(crate) fn handed(next: &Next, handle: *const c_void) -> Option<(usize, Handle)> {
    let address = next.address()?;
    let (_, slot) = slots::from_handle(handle as usize)?;
    let theirs = slot.vendor()?;
    Some((address, theirs as Handle))
}

/// A kernel's registration, as the program made it.
pub(crate) struct Function {
    pub host: *const c_void,
    pub device: *mut c_char,
    pub name: *const c_char,
    pub thread_limit: c_int,
    pub tid: *mut c_void,
    pub bid: *mut c_void,
    pub block: *mut c_void,
    pub grid: *mut c_void,
    pub warp_size: *mut c_int,
}

/// Hands a kernel's registration on to `next` (`__hipRegisterFunction`,
/// `__cudaRegisterFunction`) for this library's `handle`.
pub(crate) fn function(next: &Next, handle: Handle, f: Function) {
    let Some((next, theirs)) = handed(next, handle as _) else {
        return;
    };
    type Hook = unsafe extern "C" fn(
        Handle,
        *const c_void,
        *mut c_char,
        *const c_char,
        c_int,
        *mut c_void,
        *mut c_void,
        *mut c_void,
        *mut c_void,
        *mut c_int,
    );
    // SAFETY: the vendor's `__*RegisterFunction`, of this signature.
    let hook: Hook = unsafe { std::mem::transmute(next) };
    // SAFETY: the program's arguments, with the vendor's handle.
    unsafe {
        hook(
            theirs,
            f.host,
            f.device,
            f.name,
            f.thread_limit,
            f.tid,
            f.bid,
            f.block,
            f.grid,
            f.warp_size,
        )
    };
}

/// A variable's registration, as the program made it.
pub(crate) struct Variable {
    /// The host shadow (for a CUDA managed variable, nvcc's host pointer).
    pub host: *mut c_void,
    pub device: *mut c_char,
    pub name: *const c_char,
    pub ext: c_int,
    pub size: usize,
    pub constant: c_int,
    pub global: c_int,
}

/// Hands a variable's registration on to `next` (`__hipRegisterVar`,
/// `__cudaRegisterVar`, `__cudaRegisterManagedVar`) for this library's
/// `handle`.
pub(crate) fn variable(next: &Next, handle: Handle, v: Variable) {
    let Some((next, theirs)) = handed(next, handle as _) else {
        return;
    };
    type Hook = unsafe extern "C" fn(
        Handle,
        *mut c_void,
        *mut c_char,
        *const c_char,
        c_int,
        usize,
        c_int,
        c_int,
    );
    // SAFETY: the vendor's `__*RegisterVar`, of this signature.
    let hook: Hook = unsafe { std::mem::transmute(next) };
    // SAFETY: the program's arguments, with the vendor's handle.
    unsafe {
        hook(
            theirs, v.host, v.device, v.name, v.ext, v.size, v.constant, v.global,
        )
    };
}
