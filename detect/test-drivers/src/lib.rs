//! A test double of `libhsa-runtime64.so.1`, `libcuda.so.1` and (for AMD
//! SPIR-V) `libamd_comgr.so.3` in one
//! library: the same C symbols with the same signatures, with devices,
//! failures and load results set by environment variables, so that
//! offload-detect's production code runs unchanged without a GPU (only the
//! library path differs: `OFFLOAD_LOADER_HSA_LIBRARY`,
//! `OFFLOAD_LOADER_CUDA_LIBRARY`, `OFFLOAD_LOADER_COMGR_LIBRARY`; comgr's
//! variables are in `comgr.rs`). Every variable is read at the time of the
//! call.
//!
//! | variable | effect |
//! |---|---|
//! | `FAKE_HSA_AGENTS` | GPU agents, `;`-separated; each `isa[|isa...][=marketing name]`, ISAs as target IDs (`gfx90a:sramecc+:xnack-|gfx9-generic=AMD Instinct MI210`), the agent's own first. A CPU agent always comes first. Agent `i` is KFD node `i + 1`, UUID `GPU-fa4e00000000000i` |
//! | `FAKE_HSA_INIT_STATUS` | `hsa_init`'s status (`0x1008` or decimal) |
//! | `FAKE_HSA_HANG_MS` | the first `hsa_init` of the process sleeps this long first |
//! | `FAKE_HSA_LOAD_STATUS` | status of `hsa_executable_load_agent_code_object` |
//! | `ROCR_VISIBLE_DEVICES` | applied inside `hsa_init`'s world as ROCR does, indices only: set but empty hides all; at most as many tokens as agents; the first invalid, out-of-range or repeated index ends the list |
//! | `FAKE_CUDA_DEVICES` | `major.minor[:name]`, `;`-separated |
//! | `FAKE_CUDA_INIT` | `cuInit`'s result (100 = no device) |
//! | `FAKE_CUDA_DRIVER_VERSION` | `cuDriverGetVersion` (default 12040) |
//! | `FAKE_CUDA_LOAD_ERROR` | result of `cuModuleLoadData` (e.g. 209) |
//! | `CUDA_VISIBLE_DEVICES` | applied as the driver does, indices only: set but empty hides all; the first invalid, out-of-range or repeated index ends the list |
//! | `FAKE_DRIVER_LOG` | file to which each successful load appends `hsa load <target-id> <size> <fnv64>` or `cuda load sm_XY <size> <fnv64>` |
//! | `FAKE_HSA_SAVE_DIR` | directory to which each HSA load writes the code object it was given, as `<agent target ID>.co` |
//! | `FAKE_LOAD_DLOPEN` | a library each load `dlopen`s (and closes) while it holds the driver's lock, as the CUDA driver's PTX JIT loads `libnvidia-ptxjitcompiler` |
//! | `FAKE_CALL_LOG` | file to which lifecycle calls append a line: `hsa_init`, `hsa_shut_down`, `hsa_executable_destroy`, `hsa_code_object_reader_destroy`, `hsa_amd_memory_lock <host> <size>`, `hsa_memory_copy <dst> <size> [<8-byte value>]`, `cuDevicePrimaryCtxRetain <dev>`, `cuDevicePrimaryCtxRelease_v2 <dev>`, `cuModuleUnload <module>` |
//!
//! Like the real drivers, the double holds one lock of its own across every
//! load and unload (`hsa_executable_load_agent_code_object`,
//! `cuModuleLoadData`, `hsa_executable_destroy`, `cuModuleUnload`): a caller
//! that unloads under the dynamic loader's lock while another thread loads
//! with `FAKE_LOAD_DLOPEN` deadlocks here as it would there.
//!
//! An HSA symbol resolves from the loaded ELF image's symbol table: the
//! image is laid out in real memory as a loader would (its `PT_LOAD`
//! segments), a variable's address is where it lies there and its size the
//! symbol's, a `<name>.kd` symbol is a kernel whose object is its descriptor.
//! Otherwise (an image that is not ELF, and CUDA) a symbol resolves when the
//! image holds the name followed by a NUL, or, in PTX, as a whole
//! identifier; handles and addresses are then derived from the name's
//! offset, so they are stable and distinct, and a variable's size is 4.
//!
//! Beyond loading, the HSA half has what LLVM 22's libomptarget AMDGPU
//! plugin needs to run on it (`hsa_runtime`): memory pools, allocations,
//! signals, queues and copies, all in host memory. An agent given as
//! `gfx1100|gfx11-generic` lists both ISAs, as ROCr lists a processor's
//! generic family.
//!
//! Built with the cargo feature `missing-symbol`, the library leaves out
//! `hsa_iterate_agents` and `cuDeviceGetPCIBusId`, to test what a loader does
//! with an incomplete driver.

#![allow(clippy::missing_safety_doc)]

mod comgr;
mod cuda;
mod cuda_link;
mod hsa;
mod hsa_runtime;

use std::ffi::c_void;
use std::io::Write;

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn env_num(name: &str) -> Option<u64> {
    let v = env(name)?;
    match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

/// 64-bit FNV-1a, the hash the load log prints.
fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

fn append(variable: &str, line: &str) {
    if let Some(path) = env(variable) {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// Runs a load (`loading`) or an unload under the driver's lock; a load
/// first `dlopen`s `FAKE_LOAD_DLOPEN`, holding it.
fn in_driver<R>(loading: bool, f: impl FnOnce() -> R) -> R {
    static DRIVER: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _held = DRIVER.lock().unwrap_or_else(|e| e.into_inner());
    if loading {
        if let Some(path) = env("FAKE_LOAD_DLOPEN").and_then(|p| std::ffi::CString::new(p).ok()) {
            // SAFETY: a NUL-terminated path; the handle is closed at once.
            unsafe {
                let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
                if !handle.is_null() {
                    libc::dlclose(handle);
                }
            }
        }
    }
    f()
}

fn log_load(line: String) {
    append("FAKE_DRIVER_LOG", &line);
}

fn log_call(line: String) {
    append("FAKE_CALL_LOG", &line);
}

/// Offset of `name` followed by a NUL in `image`.
fn find_name(image: &[u8], name: &[u8]) -> Option<usize> {
    let mut needle = name.to_vec();
    needle.push(0);
    image.windows(needle.len()).position(|w| w == needle)
}

/// Writes `value` to `out` if it is not null.
unsafe fn write<T>(out: *mut c_void, value: T) {
    if !out.is_null() {
        // SAFETY: the caller passes a pointer to storage for a `T`, as the
        // C API it implements declares.
        unsafe { out.cast::<T>().write_unaligned(value) };
    }
}

/// The physical devices a visible-devices variable leaves, in its order:
/// `None` when unset (all), indices only (see the table above).
fn visible(variable: &str, count: usize) -> Vec<usize> {
    let Ok(list) = std::env::var(variable) else {
        return (0..count).collect();
    };
    let mut chosen = Vec::new();
    if list.is_empty() {
        return chosen;
    }
    for token in list.split(',').take(count) {
        match token.trim().parse::<usize>() {
            Ok(i) if i < count && !chosen.contains(&i) => chosen.push(i),
            _ => break,
        }
    }
    chosen
}
