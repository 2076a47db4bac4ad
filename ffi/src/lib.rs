//! The C ABI of offload-loader.
//!
//! Link `liboffload_loader` (shared or static) into a program built by clang for
//! HIP or OpenMP offload, or by `nvcc -cudart none`, and the registration calls
//! its startup code makes (`__hipRegisterFatBinary` and friends,
//! `__tgt_register_lib` and friends, `__cudaRegisterFatBinary` and friends) find
//! the program's images, select the best one for each GPU found by
//! `offload-detect`, load it (lazily by default) and resolve every registered
//! kernel and variable. A small query API (`offload_loader_*`, see
//! `include/offload_loader.h`) answers what was registered and selected.
//!
//! No panic crosses the ABI: every entry point runs under `guard`, and a
//! failure is recorded as the calling thread's last error. Registration is
//! thread-safe, lock-free and fork-safe, and a library is revoked before its
//! object is unmapped, without waiting on the dynamic loader (see
//! `loader_lock` for the rule, and `library`). Launching kernels is out of
//! scope: the vendor runtime's, where one is linked after this library
//! (`vendor`: each registration is handed on to it).
//!
//! ## Layout
//!
//! Each module uses only those above it:
//! `loader_lock` (the rule and its check), `abi` (last error, panic guard),
//! `error`, `lock`, `stack`, `process` (loaded objects), `view` (a reordered bundle over the
//! program's own code objects) → `slots` (every
//! registration, lock-free), `objects` (pinned objects), `vendor_terms`
//! (devices numbered and described as each vendor runtime does) → `library` (a
//! library's memory and what a reader may do with it) → `registry` (the
//! index, under the lock) → `info` (messages), `runtime` (detection, driver
//! loads and unloads), `vendor` (the vendor runtimes' hooks this library
//! hands registrations on to),
//! `fatbin` (HIP's and CUDA's registration, alike), `first_fit` (HIP
//! bundles reordered for libamdhip64) → `handover` (HIP's and CUDA's calls
//! handed on to the vendor) → the C entry points `hip`, `cuda`, `omp`,
//! `query`.

mod abi;
mod chunked;
mod cuda;
mod error;
mod fatbin;
mod first_fit;
mod handover;
mod hip;
mod info;
mod library;
mod link;
mod loader_lock;
mod lock;
mod objects;
mod omp;
mod omp_numbers;
mod process;
mod query;
mod registry;
mod runtime;
mod slots;
mod stack;
mod symbol_table;
mod vendor;
mod vendor_terms;
mod view;

pub(crate) use abi::{guard, set_last_error};

/// Looks up the vendor runtimes' hooks, the first time ([`vendor`]).
#[inline]
pub(crate) fn vendors() {
    vendor::look_up_once(|| {
        omp::find_vendor();
        hip::find_vendor();
        cuda::find_vendor();
    });
}

/// Runs when the library is loaded, before any registration: resolves what
/// registration needs from the dynamic loader now, under the loader's lock
/// that loading holds anyway, rather than later on a thread another may fork
/// beside.
/// Installs the `fork` handlers here too, before the program can have
/// threads: glibc ignores handlers installed while a fork is running others.
extern "C" fn on_load() {
    let _ = std::panic::catch_unwind(|| {
        abi::prepare();
        process::prepare_locate();
        registry::install_fork_handlers();
        offload_detect::install_fork_handlers();
        vendors();
    });
}

#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;

/// Runs when the library is unloaded (at exit, or when a static copy's
/// shared object is closed): deletes the last error's `pthread` key, whose
/// destructor is this library's code.
extern "C" fn on_unload() {
    let _ = std::panic::catch_unwind(abi::forget);
}

#[used]
#[link_section = ".fini_array"]
static ON_UNLOAD: extern "C" fn() = on_unload;
