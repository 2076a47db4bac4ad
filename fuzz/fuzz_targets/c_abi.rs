//! The C ABI's registration, driven in memory: the runtime's own modules
//! (ffi/src, compiled into this target) register a fuzzed fat binary through
//! a `__hipRegisterFatBinary` wrapper, or fuzzed images through a
//! `__tgt_bin_desc`, both laid out in this binary's `.bss` (a loaded segment,
//! as clang's are); kernels named by strings of the input are registered
//! against the handle; then every query runs for three override devices
//! (no driver: loads fail, selection and extraction run), and the library is
//! unregistered, twice.
//!
//! Input: byte 0 selects HIP (even) or OpenMP (odd). HIP: the rest is the
//! fat binary. OpenMP: byte 1 is the image count (0..=8), then 4 bytes per
//! image (u16 offset, u16 length into the payload), then the payload.
//!
//! Invariants: no panic (a caught one shows as an "internal error" last
//! error, which fails the target), no crash; a released handle is refused.
#![no_main]
#![allow(dead_code)]

#[path = "../../ffi/src/abi.rs"]
mod abi;
#[path = "../../ffi/src/chunked.rs"]
mod chunked;
#[path = "../../ffi/src/error.rs"]
mod error;
#[path = "../../ffi/src/fatbin.rs"]
mod fatbin;
#[path = "../../ffi/src/first_fit.rs"]
mod first_fit;
#[path = "../../ffi/src/handover.rs"]
mod handover;
#[path = "../../ffi/src/hip.rs"]
mod hip;
#[path = "../../ffi/src/info.rs"]
mod info;
#[path = "../../ffi/src/library.rs"]
mod library;
#[path = "../../ffi/src/link.rs"]
mod link;
#[path = "../../ffi/src/loader_lock.rs"]
mod loader_lock;
#[path = "../../ffi/src/lock.rs"]
mod lock;
#[path = "../../ffi/src/objects.rs"]
mod objects;
#[path = "../../ffi/src/omp.rs"]
mod omp;
#[path = "../../ffi/src/omp_numbers.rs"]
mod omp_numbers;
#[path = "../../ffi/src/process.rs"]
mod process;
#[path = "../../ffi/src/query.rs"]
mod query;
#[path = "../../ffi/src/registry.rs"]
mod registry;
#[path = "../../ffi/src/runtime.rs"]
mod runtime;
#[path = "../../ffi/src/slots.rs"]
mod slots;
#[path = "../../ffi/src/stack.rs"]
mod stack;
#[path = "../../ffi/src/symbol_table.rs"]
mod symbol_table;
#[path = "../../ffi/src/vendor.rs"]
mod vendor;
#[path = "../../ffi/src/vendor_terms.rs"]
mod vendor_terms;
#[path = "../../ffi/src/view.rs"]
mod view;

pub(crate) use abi::{guard, set_last_error};

/// The library's `vendors()` for the runtimes compiled in here: the HIP
/// and OpenMP hooks (no vendor runtime is in this process: none is found).
fn vendors() {
    vendor::look_up_once(|| {
        omp::find_vendor();
        hip::find_vendor();
    });
}

use std::ffi::{c_char, c_void, CStr};
use std::ptr::{addr_of_mut, null, null_mut};
use std::sync::Once;

use libfuzzer_sys::fuzz_target;

const SIZE: usize = 1 << 16;
/// Where the structures are laid out: 8-aligned, in a loaded segment.
static mut MEMORY: [u64; SIZE / 8] = [0; SIZE / 8];
static INIT: Once = Once::new();

fn no_internal_error() {
    let e = query::offload_loader_last_error();
    if !e.is_null() {
        // SAFETY: the last error is a NUL-terminated string owned by this thread.
        let e = unsafe { CStr::from_ptr(e) }.to_string_lossy();
        assert!(!e.contains("internal error"), "{e}");
    }
}

fn queries(library: i32, names: &[*const c_char], stubs: &[*const c_void]) {
    for device in -1..4 {
        let mut index = 0;
        let mut target = [0 as c_char; 64];
        let mut data: *const c_void = null();
        let mut size = 0usize;
        query::offload_loader_selected_image(
            library,
            device,
            &mut index,
            target.as_mut_ptr(),
            target.len(),
            &mut data,
            &mut size,
        );
        let mut handle = 0u64;
        for &n in names {
            query::offload_loader_kernel_by_name(n, device, &mut handle);
        }
        for &s in stubs {
            query::offload_loader_kernel(s, device, &mut handle);
            let (mut a, mut z) = (0u64, 0u64);
            query::offload_loader_variable(s, device, &mut a, &mut z);
        }
        no_internal_error();
    }
    query::offload_loader_symbol_count(library);
}

fuzz_target!(|data: &[u8]| {
    INIT.call_once(|| {
        std::env::set_var(
            "OFFLOAD_LOADER_DEVICES",
            "gfx90a:sramecc+:xnack-,gfx1100,gfx1103",
        );
        std::env::remove_var("OFFLOAD_LOADER_EAGER");
    });
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    // One iteration at a time uses MEMORY, and every library that borrows
    // it is unregistered before the iteration ends.
    let base = addr_of_mut!(MEMORY).cast::<u8>();
    let payload_at = 512;
    let n = rest.len().min(SIZE - payload_at - 1);
    // SAFETY: all writes stay within MEMORY's SIZE bytes.
    unsafe {
        std::ptr::write_bytes(base, 0, SIZE);
        std::ptr::copy_nonoverlapping(rest.as_ptr(), base.add(payload_at), n);
    }
    let at = |offset: usize| base.wrapping_add(offset);
    // Kernel names: the input's first NUL-terminated strings (the byte after
    // the payload is zero, so each ends inside MEMORY).
    let mut names = Vec::new();
    let mut start = 0;
    for (i, &b) in rest[..n].iter().enumerate() {
        if b == 0 {
            if i > start && names.len() < 4 {
                names.push(at(payload_at + start) as *const c_char);
            }
            start = i + 1;
        }
    }
    let stubs: Vec<*const c_void> = (0..4).map(|i| at(64 + i) as *const c_void).collect();
    let library = query::offload_loader_library_count();
    if mode & 1 == 0 {
        // SAFETY: the wrapper is written inside MEMORY, 8-aligned.
        unsafe {
            let w = base.cast::<u32>();
            *w = 0x4849_5046;
            *w.add(1) = 1;
            *base.add(8).cast::<usize>() = at(payload_at) as usize;
        }
        let h = hip::__hipRegisterFatBinary(base as *const c_void);
        for (i, &name) in names.iter().enumerate() {
            hip::__hipRegisterFunction(
                h,
                stubs[i],
                name as *mut c_char,
                null(),
                -1,
                null_mut(),
                null_mut(),
                null_mut(),
                null_mut(),
                null_mut(),
            );
        }
        if let Some(&name) = names.first() {
            hip::__hipRegisterVar(
                h,
                stubs[3] as *mut c_void,
                name as *mut c_char,
                null(),
                0,
                4,
                0,
                0,
            );
        }
        no_internal_error();
        queries(library, &names, &stubs);
        hip::__hipUnregisterFatBinary(h);
        hip::__hipUnregisterFatBinary(h);
        let e = query::offload_loader_last_error();
        // SAFETY: as in `no_internal_error`.
        assert!(
            !e.is_null()
                && unsafe { CStr::from_ptr(e) }
                    .to_bytes()
                    .ends_with(b"already released")
        );
    } else {
        let count = rest.first().map_or(0, |c| usize::from(*c % 9));
        let images = at(64);
        // SAFETY: the descriptor (32 bytes at 0) and up to 8 device images
        // (32 bytes each from 64) are written inside MEMORY.
        unsafe {
            *base.cast::<i32>() = count as i32;
            *base.add(8).cast::<usize>() = images as usize;
            for i in 0..count {
                let field = |k: usize| rest.get(1 + 4 * i + k).copied().unwrap_or(0) as usize;
                let offset = field(0) | field(1) << 8;
                let len = field(2) | field(3) << 8;
                let s = payload_at + offset.min(n);
                let e = (s + len).min(payload_at + n);
                let image = images.add(32 * i).cast::<usize>();
                *image = at(s) as usize;
                *image.add(1) = at(e) as usize;
            }
        }
        omp::__tgt_register_lib(base as *mut c_void);
        no_internal_error();
        queries(library, &names, &stubs);
        omp::__tgt_unregister_lib(base as *mut c_void);
        omp::__tgt_unregister_lib(base as *mut c_void);
    }
    no_internal_error();
});
