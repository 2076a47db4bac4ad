//! A test double of `libhsa-runtime64.so.1` and `libcuda.so.1`: the same C
//! symbols, with devices, failures and load results set by environment, so
//! offload-detect's production code path runs unchanged without a GPU.
//!
//! | variable | effect |
//! |---|---|
//! | `FAKE_HSA_INIT_STATUS` | `hsa_init`'s status (hex `0x1008` or decimal) |
//! | `FAKE_HSA_AGENTS` | GPU agents, `;`-separated; each `isa|isa...` target IDs (`gfx90a:sramecc+:xnack-`); a CPU agent always comes first |
//! | `FAKE_HSA_HANG_MS` | `hsa_init` sleeps this long first |
//! | `FAKE_HSA_LOAD_STATUS` | status of `hsa_executable_load_agent_code_object` |
//! | `FAKE_CUDA_INIT` | `cuInit`'s result (100 = no device) |
//! | `FAKE_CUDA_DEVICES` | `major.minor:name`, `;`-separated |
//! | `FAKE_CUDA_DRIVER_VERSION` | `cuDriverGetVersion` (default 12040) |
//! | `FAKE_CUDA_LOAD_ERROR` | result of `cuModuleLoadData` (e.g. 209) |
//! | `FAKE_DRIVER_LOG` | file to which each load appends `<driver> load <device> <size> <fnv64>` |
//!
//! Symbols resolve when the loaded image holds the name followed by a NUL (as
//! ELF string tables and PTX do); handles and addresses are derived from the
//! name's offset, so they are stable and distinct.

#![allow(clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::io::Write;
use std::sync::Mutex;

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

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

fn log(line: String) {
    if let Some(path) = env("FAKE_DRIVER_LOG") {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// Offset of `name` followed by a NUL in `image`.
fn find_name(image: &[u8], name: &[u8]) -> Option<usize> {
    let mut needle = name.to_vec();
    needle.push(0);
    image.windows(needle.len()).position(|w| w == needle)
}

unsafe fn write<T>(out: *mut c_void, value: T) {
    if !out.is_null() {
        out.cast::<T>().write_unaligned(value);
    }
}

// ---------------------------------------------------------------- HSA ----

const HSA_SUCCESS: u32 = 0;
const HSA_INVALID_ARGUMENT: u32 = 0x1001;
const HSA_INVALID_SYMBOL_NAME: u32 = 0x1013;
const CPU_AGENT: u64 = 1;
const FIRST_GPU: u64 = 100;

fn agents() -> Vec<Vec<String>> {
    env("FAKE_HSA_AGENTS")
        .map(|s| {
            s.split(';')
                .filter(|a| !a.is_empty())
                .map(|a| a.split('|').map(String::from).collect())
                .collect()
        })
        .unwrap_or_default()
}

/// Images handed to `hsa_code_object_reader_create_from_memory`, by reader handle - 1.
static READERS: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
/// Executables: the reader loaded into each (0 = none), by handle - 1.
static EXECUTABLES: Mutex<Vec<u64>> = Mutex::new(Vec::new());

#[no_mangle]
pub extern "C" fn hsa_init() -> u32 {
    if let Some(ms) = env_num("FAKE_HSA_HANG_MS") {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
    env_num("FAKE_HSA_INIT_STATUS").map_or(HSA_SUCCESS, |s| s as u32)
}

#[no_mangle]
pub extern "C" fn hsa_shut_down() -> u32 {
    HSA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn hsa_status_string(status: u32, out: *mut *const c_char) -> u32 {
    let text: &'static CStr = match status {
        0 => c"HSA_STATUS_SUCCESS: The function has been executed successfully.",
        0x1008 => c"HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary resources. (fake)",
        0x1010 => c"HSA_STATUS_ERROR_INVALID_CODE_OBJECT: The code object is invalid. (fake)",
        0x1013 => c"HSA_STATUS_ERROR_INVALID_SYMBOL_NAME: There is no symbol with the given name. (fake)",
        _ => c"HSA_STATUS_ERROR: A generic error has occurred. (fake)",
    };
    write(out.cast(), text.as_ptr());
    HSA_SUCCESS
}

type Callback = unsafe extern "C" fn(u64, *mut c_void) -> u32;

#[no_mangle]
pub unsafe extern "C" fn hsa_iterate_agents(cb: Callback, data: *mut c_void) -> u32 {
    let handles =
        std::iter::once(CPU_AGENT).chain((0..agents().len() as u64).map(|i| FIRST_GPU + i));
    for agent in handles {
        let s = cb(agent, data);
        if s != HSA_SUCCESS {
            return s;
        }
    }
    HSA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn hsa_agent_get_info(agent: u64, attribute: u32, value: *mut c_void) -> u32 {
    let gpu = agent >= FIRST_GPU;
    let isas = if gpu {
        match agents().get((agent - FIRST_GPU) as usize) {
            Some(isas) => isas.clone(),
            None => return HSA_INVALID_ARGUMENT,
        }
    } else {
        Vec::new()
    };
    match attribute {
        0 => {
            let mut name = [0u8; 64];
            let text = match isas.first() {
                Some(id) => id.split(':').next().unwrap_or_default(),
                None => "Fake CPU",
            };
            let n = text.len().min(63);
            name[..n].copy_from_slice(&text.as_bytes()[..n]);
            value.cast::<[u8; 64]>().write_unaligned(name);
        }
        16 => write(
            value,
            if gpu {
                (agent - FIRST_GPU + 1) as u32
            } else {
                0u32
            },
        ),
        17 => write(value, u32::from(gpu)),
        _ => return HSA_INVALID_ARGUMENT,
    }
    HSA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn hsa_agent_iterate_isas(
    agent: u64,
    cb: Callback,
    data: *mut c_void,
) -> u32 {
    if agent < FIRST_GPU {
        return HSA_SUCCESS;
    }
    let count = agents()
        .get((agent - FIRST_GPU) as usize)
        .map_or(0, Vec::len) as u64;
    for i in 0..count {
        let s = cb(((agent - FIRST_GPU) << 16) | i, data);
        if s != HSA_SUCCESS {
            return s;
        }
    }
    HSA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn hsa_isa_get_info_alt(isa: u64, attribute: u32, value: *mut c_void) -> u32 {
    let Some(id) = agents()
        .get((isa >> 16) as usize)
        .and_then(|a| a.get((isa & 0xffff) as usize))
        .cloned()
    else {
        return HSA_INVALID_ARGUMENT;
    };
    let name = format!("amdgcn-amd-amdhsa--{id}");
    match attribute {
        // The real runtime counts the NUL in the length.
        0 => write(value, name.len() as u32 + 1),
        1 => {
            let out = value.cast::<u8>();
            std::ptr::copy_nonoverlapping(name.as_ptr(), out, name.len());
            *out.add(name.len()) = 0;
        }
        _ => return HSA_INVALID_ARGUMENT,
    }
    HSA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn hsa_code_object_reader_create_from_memory(
    ptr: *const c_void,
    size: usize,
    reader: *mut u64,
) -> u32 {
    if ptr.is_null() || reader.is_null() {
        return HSA_INVALID_ARGUMENT;
    }
    let bytes = std::slice::from_raw_parts(ptr.cast::<u8>(), size).to_vec();
    let mut readers = READERS.lock().unwrap();
    readers.push(bytes);
    *reader = readers.len() as u64;
    HSA_SUCCESS
}

#[no_mangle]
pub extern "C" fn hsa_code_object_reader_destroy(_reader: u64) -> u32 {
    HSA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn hsa_executable_create_alt(
    _profile: u32,
    _rounding: u32,
    _options: *const c_char,
    exe: *mut u64,
) -> u32 {
    let mut exes = EXECUTABLES.lock().unwrap();
    exes.push(0);
    *exe = exes.len() as u64;
    HSA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn hsa_executable_load_agent_code_object(
    exe: u64,
    agent: u64,
    reader: u64,
    _options: *const c_char,
    _loaded: *mut u64,
) -> u32 {
    if let Some(status) = env_num("FAKE_HSA_LOAD_STATUS") {
        return status as u32;
    }
    let readers = READERS.lock().unwrap();
    let Some(image) = readers.get(reader.wrapping_sub(1) as usize) else {
        return HSA_INVALID_ARGUMENT;
    };
    if !image.starts_with(b"\x7fELF") {
        return 0x1010;
    }
    let device = agents()
        .get(agent.wrapping_sub(FIRST_GPU) as usize)
        .and_then(|a| a.first().cloned())
        .unwrap_or_default();
    log(format!(
        "hsa load {device} {} {:016x}",
        image.len(),
        fnv(image)
    ));
    if let Some(slot) = EXECUTABLES
        .lock()
        .unwrap()
        .get_mut(exe.wrapping_sub(1) as usize)
    {
        *slot = reader;
    }
    HSA_SUCCESS
}

#[no_mangle]
pub extern "C" fn hsa_executable_freeze(_exe: u64, _options: *const c_char) -> u32 {
    HSA_SUCCESS
}

#[no_mangle]
pub extern "C" fn hsa_executable_destroy(_exe: u64) -> u32 {
    HSA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn hsa_executable_get_symbol_by_name(
    exe: u64,
    name: *const c_char,
    _agent: *const u64,
    symbol: *mut u64,
) -> u32 {
    let reader = EXECUTABLES
        .lock()
        .unwrap()
        .get(exe.wrapping_sub(1) as usize)
        .copied()
        .unwrap_or(0);
    let readers = READERS.lock().unwrap();
    let Some(image) = readers.get(reader.wrapping_sub(1) as usize) else {
        return HSA_INVALID_ARGUMENT;
    };
    match find_name(image, CStr::from_ptr(name).to_bytes()) {
        Some(offset) => {
            *symbol = (exe << 32) | offset as u64;
            HSA_SUCCESS
        }
        None => HSA_INVALID_SYMBOL_NAME,
    }
}

#[no_mangle]
pub unsafe extern "C" fn hsa_executable_symbol_get_info(
    symbol: u64,
    attribute: u32,
    value: *mut c_void,
) -> u32 {
    match attribute {
        9 => write(value, 4u32),
        21 => write(value, 0x7f00_0000_0000u64 + symbol),
        22 => write(value, 0x6f00_0000_0000u64 + symbol),
        _ => return HSA_INVALID_ARGUMENT,
    }
    HSA_SUCCESS
}

// --------------------------------------------------------------- CUDA ----

fn cuda_devices() -> Vec<(i32, i32, String)> {
    env("FAKE_CUDA_DEVICES")
        .map(|s| {
            s.split(';')
                .filter_map(|d| {
                    let (cc, name) = d.split_once(':').unwrap_or((d, "Fake NVIDIA GPU"));
                    let (major, minor) = cc.split_once('.')?;
                    Some((major.parse().ok()?, minor.parse().ok()?, name.to_string()))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Images loaded by `cuModuleLoadData`, by module handle - 1.
static MODULES: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

#[no_mangle]
pub extern "C" fn cuInit(_flags: c_uint) -> c_int {
    env_num("FAKE_CUDA_INIT").map_or(0, |r| r as c_int)
}

#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(v: *mut c_int) -> c_int {
    *v = env_num("FAKE_CUDA_DRIVER_VERSION").unwrap_or(12040) as c_int;
    0
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(n: *mut c_int) -> c_int {
    *n = cuda_devices().len() as c_int;
    0
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(d: *mut c_int, ordinal: c_int) -> c_int {
    if ordinal < 0 || ordinal as usize >= cuda_devices().len() {
        return 101;
    }
    *d = ordinal;
    0
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    v: *mut c_int,
    attribute: c_int,
    dev: c_int,
) -> c_int {
    let Some((major, minor, _)) = cuda_devices().get(dev as usize).cloned() else {
        return 101;
    };
    *v = match attribute {
        75 => major,
        76 => minor,
        _ => return 1,
    };
    0
}

unsafe fn copy_c(buf: *mut c_char, len: c_int, text: &str) {
    let n = text.len().min(len.max(1) as usize - 1);
    std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
    *buf.add(n) = 0;
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(buf: *mut c_char, len: c_int, dev: c_int) -> c_int {
    let Some((_, _, name)) = cuda_devices().get(dev as usize).cloned() else {
        return 101;
    };
    copy_c(buf, len, &name);
    0
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetPCIBusId(buf: *mut c_char, len: c_int, dev: c_int) -> c_int {
    copy_c(buf, len, &format!("0000:{:02x}:00.0", dev + 0x41));
    0
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(r: c_int, out: *mut *const c_char) -> c_int {
    let text: &'static CStr = match r {
        100 => c"no CUDA-capable device is detected",
        200 => c"device kernel image is invalid",
        209 => c"no kernel image is available for execution on the device",
        500 => c"named symbol not found",
        _ => c"unknown error",
    };
    *out = text.as_ptr();
    0
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(r: c_int, out: *mut *const c_char) -> c_int {
    let text: &'static CStr = match r {
        100 => c"CUDA_ERROR_NO_DEVICE",
        200 => c"CUDA_ERROR_INVALID_IMAGE",
        209 => c"CUDA_ERROR_NO_BINARY_FOR_GPU",
        500 => c"CUDA_ERROR_NOT_FOUND",
        _ => c"CUDA_ERROR_UNKNOWN",
    };
    *out = text.as_ptr();
    0
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut *mut c_void, dev: c_int) -> c_int {
    *ctx = (0x1000 + dev as usize) as *mut c_void;
    0
}

#[no_mangle]
pub extern "C" fn cuCtxSetCurrent(_ctx: *mut c_void) -> c_int {
    0
}

/// The size of a cubin (its section headers end it) or of NUL-terminated PTX.
unsafe fn image_size(p: *const u8) -> usize {
    if std::slice::from_raw_parts(p, 4) == b"\x7fELF" {
        let h = std::slice::from_raw_parts(p, 64);
        let shoff = u64::from_le_bytes(h[40..48].try_into().unwrap()) as usize;
        let shentsize = u16::from_le_bytes(h[58..60].try_into().unwrap()) as usize;
        let shnum = u16::from_le_bytes(h[60..62].try_into().unwrap()) as usize;
        shoff + shentsize * shnum
    } else {
        CStr::from_ptr(p.cast()).to_bytes().len()
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(module: *mut *mut c_void, image: *const c_void) -> c_int {
    if let Some(r) = env_num("FAKE_CUDA_LOAD_ERROR") {
        return r as c_int;
    }
    let size = image_size(image.cast());
    let bytes = std::slice::from_raw_parts(image.cast::<u8>(), size).to_vec();
    log(format!(
        "cuda load ctx {} {:016x}",
        bytes.len(),
        fnv(&bytes)
    ));
    let mut modules = MODULES.lock().unwrap();
    modules.push(bytes);
    *module = modules.len() as *mut c_void;
    0
}

unsafe fn module_symbol(module: *mut c_void, name: *const c_char) -> Option<u64> {
    let modules = MODULES.lock().unwrap();
    let image = modules.get((module as usize).wrapping_sub(1))?;
    find_name(image, CStr::from_ptr(name).to_bytes()).map(|o| ((module as u64) << 32) | o as u64)
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(
    f: *mut *mut c_void,
    module: *mut c_void,
    name: *const c_char,
) -> c_int {
    match module_symbol(module, name) {
        Some(h) => {
            *f = (0x5f00_0000_0000u64 + h) as *mut c_void;
            0
        }
        None => 500,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetGlobal_v2(
    address: *mut u64,
    size: *mut usize,
    module: *mut c_void,
    name: *const c_char,
) -> c_int {
    match module_symbol(module, name) {
        Some(h) => {
            write(address.cast(), 0x4f00_0000_0000u64 + h);
            write(size.cast(), 4usize);
            0
        }
        None => 500,
    }
}

#[no_mangle]
pub extern "C" fn cuModuleUnload(_module: *mut c_void) -> c_int {
    0
}
