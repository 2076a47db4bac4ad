//! The HSA half: `hsa_*` symbols with hsa.h's signatures (handles are
//! `struct { uint64_t }`, passed as `u64`).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use crate::{env, env_num, find_name, fnv, log_call, log_load, visible, write};

pub(crate) const SUCCESS: u32 = 0;
pub(crate) const INVALID_ARGUMENT: u32 = 0x1001;
const NOT_INITIALIZED: u32 = 0x100B;
const INVALID_CODE_OBJECT: u32 = 0x1010;
const INVALID_SYMBOL_NAME: u32 = 0x1013;
pub(crate) const CPU_AGENT: u64 = 1;
const FIRST_GPU: u64 = 100;

/// `hsa_init` minus `hsa_shut_down` calls.
static INIT_COUNT: AtomicU32 = AtomicU32::new(0);

/// One `FAKE_HSA_AGENTS` entry.
#[derive(Clone)]
pub(crate) struct AgentSpec {
    isas: Vec<String>,
    name: Option<String>,
}

impl AgentSpec {
    fn target_id(&self) -> &str {
        self.isas.first().map_or("", String::as_str)
    }
}

fn all_agents() -> Vec<AgentSpec> {
    env("FAKE_HSA_AGENTS")
        .map(|s| {
            s.split(';')
                .filter(|a| !a.is_empty())
                .map(|a| {
                    let (isas, name) = match a.split_once('=') {
                        Some((isas, name)) => (isas, Some(name.to_string())),
                        None => (a, None),
                    };
                    AgentSpec {
                        isas: isas.split('|').map(String::from).collect(),
                        name,
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The spec of a GPU agent handle (`FIRST_GPU` + physical index).
pub(crate) fn agent(handle: u64) -> Option<AgentSpec> {
    let index = usize::try_from(handle.checked_sub(FIRST_GPU)?).ok()?;
    all_agents().get(index).cloned()
}

fn initialised() -> bool {
    INIT_COUNT.load(Ordering::SeqCst) > 0
}

/// Images handed to `hsa_code_object_reader_create_from_memory`, by reader handle - 1.
static READERS: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
/// Executables, by handle - 1.
static EXECUTABLES: Mutex<Vec<Executable>> = Mutex::new(Vec::new());

/// An executable: the reader loaded into it (0 = none) and, for an ELF
/// image, the image as loaded.
#[derive(Default)]
struct Executable {
    reader: u64,
    loaded: Option<Loaded>,
}

/// An ELF code object laid out as a loader lays it out: each `PT_LOAD`
/// segment's file bytes at its address from the start of `memory` (real
/// memory, so a copy to a variable's address writes it), and the symbol
/// table's (name, value, size).
struct Loaded {
    memory: Box<[u64]>,
    symbols: Vec<(String, u64, u64)>,
}

impl Loaded {
    fn new(image: &[u8]) -> Option<Loaded> {
        use object::{Object, ObjectSegment, ObjectSymbol};
        let file = object::File::parse(image).ok()?;
        let end = file
            .segments()
            .map(|s| s.address() + s.size())
            .max()
            .unwrap_or(0);
        let mut memory = vec![0u64; (end as usize).div_ceil(8).max(1)].into_boxed_slice();
        let bytes = memory.as_mut_ptr().cast::<u8>();
        for segment in file.segments() {
            let data = segment.data().ok()?;
            let at = segment.address() as usize;
            if at + data.len() > end as usize {
                return None;
            }
            // SAFETY: `at + data.len()` is within the `end` bytes allocated.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), bytes.add(at), data.len()) };
        }
        let symbols = file
            .symbols()
            .filter_map(|s| Some((s.name().ok()?.to_string(), s.address(), s.size())))
            .collect();
        Some(Loaded { memory, symbols })
    }

    fn base(&self) -> u64 {
        self.memory.as_ptr() as u64
    }
}

/// Runs `f` on the executable of handle `exe`, if there is one.
fn with_executable<R>(exe: u64, f: impl FnOnce(&mut Executable) -> R) -> Option<R> {
    EXECUTABLES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_mut(exe.wrapping_sub(1) as usize)
        .map(f)
}

/// The memory of every loaded image, as (address, size).
pub(crate) fn loaded_ranges() -> Vec<(usize, usize)> {
    EXECUTABLES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter_map(|e| e.loaded.as_ref())
        .map(|l| (l.base() as usize, l.memory.len() * 8))
        .collect()
}

/// A symbol found in an image's symbol table: its handle is
/// [`ELF_SYMBOL`] | its index here.
struct SymbolInfo {
    /// `hsa_symbol_kind_t`: 0 variable, 1 kernel (a `.kd` descriptor).
    kind: u32,
    address: u64,
    size: u64,
}

const ELF_SYMBOL: u64 = 0x5359_4d00_0000_0000;
static SYMBOLS: Mutex<Vec<SymbolInfo>> = Mutex::new(Vec::new());

fn elf_symbol(handle: u64) -> Option<(u32, u64, u64)> {
    if handle & 0xffff_ff00_0000_0000 != ELF_SYMBOL {
        return None;
    }
    let symbols = SYMBOLS.lock().unwrap_or_else(|e| e.into_inner());
    let s = symbols.get((handle & 0xff_ffff_ffff) as usize)?;
    Some((s.kind, s.address, s.size))
}

#[no_mangle]
pub extern "C" fn hsa_init() -> u32 {
    // Only the first call hangs: a driver that is slow once, as at boot.
    static HUNG: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if let Some(ms) = env_num("FAKE_HSA_HANG_MS") {
        if !HUNG.swap(true, Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
    }
    log_call("hsa_init".into());
    match env_num("FAKE_HSA_INIT_STATUS") {
        Some(status) if status != 0 => status as u32,
        _ => {
            INIT_COUNT.fetch_add(1, Ordering::SeqCst);
            SUCCESS
        }
    }
}

#[no_mangle]
pub extern "C" fn hsa_shut_down() -> u32 {
    log_call("hsa_shut_down".into());
    match INIT_COUNT.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)) {
        Ok(_) => SUCCESS,
        Err(_) => NOT_INITIALIZED,
    }
}

#[no_mangle]
pub unsafe extern "C" fn hsa_status_string(status: u32, out: *mut *const c_char) -> u32 {
    let text: &'static CStr = match status {
        0 => c"HSA_STATUS_SUCCESS: The function has been executed successfully.",
        0x1001 => c"HSA_STATUS_ERROR_INVALID_ARGUMENT: One of the actual arguments does not meet a precondition. (fake)",
        0x1008 => c"HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary resources. (fake)",
        0x100B => c"HSA_STATUS_ERROR_NOT_INITIALIZED: An API other than hsa_init has been invoked while the reference count of the HSA runtime is 0. (fake)",
        0x1010 => c"HSA_STATUS_ERROR_INVALID_CODE_OBJECT: The code object is invalid. (fake)",
        0x1013 => c"HSA_STATUS_ERROR_INVALID_SYMBOL_NAME: There is no symbol with the given name. (fake)",
        _ => c"HSA_STATUS_ERROR: A generic error has occurred. (fake)",
    };
    if out.is_null() {
        return INVALID_ARGUMENT;
    }
    // SAFETY: `out` points to a `const char*` (hsa.h).
    unsafe { *out = text.as_ptr() };
    SUCCESS
}

type Callback = unsafe extern "C" fn(u64, *mut c_void) -> u32;

/// Left out of the `missing-symbol` build.
#[cfg_attr(not(feature = "missing-symbol"), no_mangle)]
#[cfg_attr(feature = "missing-symbol", allow(dead_code, non_snake_case))]
pub unsafe extern "C" fn hsa_iterate_agents(cb: Callback, data: *mut c_void) -> u32 {
    if !initialised() {
        return NOT_INITIALIZED;
    }
    let gpus = visible("ROCR_VISIBLE_DEVICES", all_agents().len());
    let handles = std::iter::once(CPU_AGENT).chain(gpus.into_iter().map(|i| FIRST_GPU + i as u64));
    for handle in handles {
        // SAFETY: the caller's callback, with its own data pointer.
        let s = unsafe { cb(handle, data) };
        if s != SUCCESS {
            return s;
        }
    }
    SUCCESS
}

unsafe fn write_string(value: *mut c_void, capacity: usize, text: &str) {
    let n = text.len().min(capacity - 1);
    let out = value.cast::<u8>();
    // SAFETY: the caller passes a buffer of `capacity` bytes (hsa.h).
    unsafe {
        std::ptr::write_bytes(out, 0, capacity);
        std::ptr::copy_nonoverlapping(text.as_ptr(), out, n);
    }
}

#[no_mangle]
pub unsafe extern "C" fn hsa_agent_get_info(
    handle: u64,
    attribute: u32,
    value: *mut c_void,
) -> u32 {
    if !initialised() {
        return NOT_INITIALIZED;
    }
    if value.is_null() {
        return INVALID_ARGUMENT;
    }
    let spec = if handle == CPU_AGENT {
        None
    } else {
        match agent(handle) {
            Some(spec) => Some(spec),
            None => return INVALID_ARGUMENT,
        }
    };
    // SAFETY (all arms): `value` points to storage of the attribute's type
    // (hsa.h, hsa_ext_amd.h), which the caller provides.
    unsafe {
        match (attribute, &spec) {
            // HSA_AGENT_INFO_NAME: char[64], the processor name.
            (0, Some(spec)) => {
                write_string(value, 64, spec.target_id().split(':').next().unwrap_or(""))
            }
            (0, None) => write_string(value, 64, "Fake CPU"),
            // HSA_AGENT_INFO_NODE: uint32_t; node 0 is the CPU.
            (16, None) => write(value, 0u32),
            (16, Some(_)) => write(value, (handle - FIRST_GPU + 1) as u32),
            // HSA_AGENT_INFO_DEVICE: 0 CPU, 1 GPU.
            (17, _) => write(value, u32::from(spec.is_some())),
            // HSA_AMD_AGENT_INFO_PRODUCT_NAME: char[64], when the spec names one.
            (
                0xA009,
                Some(AgentSpec {
                    name: Some(name), ..
                }),
            ) => write_string(value, 64, name),
            // HSA_AMD_AGENT_INFO_UUID: at most 21 chars with the NUL.
            (0xA011, Some(_)) => {
                write_string(value, 21, &format!("GPU-fa4e{:012x}", handle - FIRST_GPU))
            }
            // HSA_AGENT_INFO_FEATURE: a GPU dispatches kernels, a CPU agents.
            (2, Some(_)) => write(value, 1u32),
            (2, None) => write(value, 2u32),
            // WAVEFRONT_SIZE: 32 from gfx10 on, else 64.
            (6, Some(spec)) => write(value, wavefront(spec.target_id())),
            // WORKGROUP_MAX_DIM (uint16_t[3]), GRID_MAX_DIM (hsa_dim3_t).
            (7, Some(_)) => write(value, [1024u16; 3]),
            (9, Some(_)) => write(value, [u32::MAX; 3]),
            // QUEUES_MAX, QUEUE_MIN_SIZE, QUEUE_MAX_SIZE.
            (12, Some(_)) => write(value, 128u32),
            (13, Some(_)) => write(value, 64u32),
            (14, Some(_)) => write(value, 131_072u32),
            // CHIP_ID, COMPUTE_UNIT_COUNT, MAX_WAVES_PER_CU (ROCr's for an MI210).
            (0xA000, Some(_)) => write(value, 0x740fu32),
            (0xA002, Some(_)) => write(value, 104u32),
            (0xA00A, Some(_)) => write(value, 32u32),
            // TIMESTAMP_FREQUENCY: 100 MHz.
            (0xA016, Some(_)) => write(value, 100_000_000u64),
            _ => return INVALID_ARGUMENT,
        }
    }
    SUCCESS
}

/// The wavefront size of the processor `target_id` names: 32 on gfx10 and
/// later (RDNA, which ROCr runs in wave32), else 64.
fn wavefront(target_id: &str) -> u32 {
    let digits = target_id.trim_start_matches("gfx");
    if digits.len() >= 4 && !digits.starts_with('9') {
        32
    } else {
        64
    }
}

#[no_mangle]
pub unsafe extern "C" fn hsa_agent_iterate_isas(
    handle: u64,
    cb: Callback,
    data: *mut c_void,
) -> u32 {
    if !initialised() {
        return NOT_INITIALIZED;
    }
    let Some(spec) = agent(handle) else {
        return if handle == CPU_AGENT {
            SUCCESS
        } else {
            INVALID_ARGUMENT
        };
    };
    for i in 0..spec.isas.len() as u64 {
        // SAFETY: the caller's callback, with its own data pointer.
        let s = unsafe { cb(((handle - FIRST_GPU) << 16) | i, data) };
        if s != SUCCESS {
            return s;
        }
    }
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn hsa_isa_get_info_alt(isa: u64, attribute: u32, value: *mut c_void) -> u32 {
    let Some(id) =
        agent(FIRST_GPU + (isa >> 16)).and_then(|a| a.isas.get((isa & 0xffff) as usize).cloned())
    else {
        return INVALID_ARGUMENT;
    };
    if value.is_null() {
        return INVALID_ARGUMENT;
    }
    let name = format!("amdgcn-amd-amdhsa--{id}");
    match attribute {
        // ROCR's Isa::GetInfo counts the NUL in the length.
        // SAFETY: NAME_LENGTH is a uint32_t.
        0 => unsafe { write(value, name.len() as u32 + 1) },
        // SAFETY: the caller's buffer holds NAME_LENGTH bytes.
        1 => unsafe { write_string(value, name.len() + 1, &name) },
        _ => return INVALID_ARGUMENT,
    }
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn hsa_code_object_reader_create_from_memory(
    ptr: *const c_void,
    size: usize,
    reader: *mut u64,
) -> u32 {
    if ptr.is_null() || reader.is_null() || size == 0 {
        return INVALID_ARGUMENT;
    }
    // SAFETY: the caller's image of `size` bytes.
    let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), size) }.to_vec();
    let mut readers = READERS.lock().unwrap_or_else(|e| e.into_inner());
    readers.push(bytes);
    // SAFETY: an out-pointer.
    unsafe { *reader = readers.len() as u64 };
    SUCCESS
}

#[no_mangle]
pub extern "C" fn hsa_code_object_reader_destroy(reader: u64) -> u32 {
    log_call(format!("hsa_code_object_reader_destroy {reader}"));
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn hsa_executable_create(
    profile: u32,
    _state: u32,
    options: *const c_char,
    exe: *mut u64,
) -> u32 {
    // SAFETY: as the caller's.
    unsafe { hsa_executable_create_alt(profile, 0, options, exe) }
}

#[no_mangle]
pub unsafe extern "C" fn hsa_executable_create_alt(
    _profile: u32,
    _rounding: u32,
    _options: *const c_char,
    exe: *mut u64,
) -> u32 {
    if exe.is_null() {
        return INVALID_ARGUMENT;
    }
    let mut exes = EXECUTABLES.lock().unwrap_or_else(|e| e.into_inner());
    exes.push(Executable::default());
    // SAFETY: an out-pointer.
    unsafe { *exe = exes.len() as u64 };
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn hsa_executable_load_agent_code_object(
    exe: u64,
    handle: u64,
    reader: u64,
    _options: *const c_char,
    _loaded: *mut u64,
) -> u32 {
    crate::in_driver(true, || load_code_object(exe, handle, reader))
}

fn load_code_object(exe: u64, handle: u64, reader: u64) -> u32 {
    if let Some(status) = env_num("FAKE_HSA_LOAD_STATUS") {
        return status as u32;
    }
    let Some(spec) = agent(handle) else {
        return INVALID_ARGUMENT;
    };
    let readers = READERS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(image) = readers.get(reader.wrapping_sub(1) as usize) else {
        return INVALID_ARGUMENT;
    };
    if !image.starts_with(b"\x7fELF") {
        return INVALID_CODE_OBJECT;
    }
    log_load(format!(
        "hsa load {} {} {:016x}",
        spec.target_id(),
        image.len(),
        fnv(image)
    ));
    if let Some(dir) = env("FAKE_HSA_SAVE_DIR") {
        let path = std::path::Path::new(&dir).join(format!("{}.co", spec.target_id()));
        let _ = std::fs::write(path, image);
    }
    with_executable(exe, |e| {
        e.reader = reader;
        e.loaded = Loaded::new(image);
    });
    SUCCESS
}

#[no_mangle]
pub extern "C" fn hsa_executable_freeze(_exe: u64, _options: *const c_char) -> u32 {
    SUCCESS
}

#[no_mangle]
pub extern "C" fn hsa_executable_destroy(exe: u64) -> u32 {
    crate::in_driver(false, || {
        log_call(format!("hsa_executable_destroy {exe}"));
        with_executable(exe, |e| e.loaded = None);
        SUCCESS
    })
}

#[no_mangle]
pub unsafe extern "C" fn hsa_executable_get_symbol_by_name(
    exe: u64,
    name: *const c_char,
    _agent: *const u64,
    symbol: *mut u64,
) -> u32 {
    if name.is_null() || symbol.is_null() {
        return INVALID_ARGUMENT;
    }
    // SAFETY: a NUL-terminated name (hsa.h).
    let wanted = unsafe { CStr::from_ptr(name) }.to_bytes();
    let (reader, found) = with_executable(exe, |e| {
        let found = e.loaded.as_ref().and_then(|loaded| {
            let (name, value, size) = loaded.symbols.iter().find(|s| s.0.as_bytes() == wanted)?;
            Some(SymbolInfo {
                kind: u32::from(name.ends_with(".kd")),
                address: loaded.base() + value,
                size: *size,
            })
        });
        (e.reader, found)
    })
    .unwrap_or((0, None));
    if let Some(info) = found {
        let mut symbols = SYMBOLS.lock().unwrap_or_else(|e| e.into_inner());
        symbols.push(info);
        // SAFETY: an out-pointer.
        unsafe { *symbol = ELF_SYMBOL | (symbols.len() - 1) as u64 };
        return SUCCESS;
    }
    let readers = READERS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(image) = readers.get(reader.wrapping_sub(1) as usize) else {
        return INVALID_ARGUMENT;
    };
    // SAFETY: a NUL-terminated name (hsa.h).
    let name = unsafe { CStr::from_ptr(name) };
    match find_name(image, name.to_bytes()) {
        Some(offset) => {
            // SAFETY: an out-pointer.
            unsafe { *symbol = (exe << 32) | offset as u64 };
            SUCCESS
        }
        None => INVALID_SYMBOL_NAME,
    }
}

#[no_mangle]
pub unsafe extern "C" fn hsa_executable_symbol_get_info(
    symbol: u64,
    attribute: u32,
    value: *mut c_void,
) -> u32 {
    if let Some((kind, address, size)) = elf_symbol(symbol) {
        return elf_symbol_info(kind, address, size, attribute, value);
    }
    // SAFETY (all arms): storage of the attribute's type (hsa.h).
    unsafe {
        match attribute {
            9 => write(value, 4u32),
            21 => write(value, 0x7f00_0000_0000u64 + symbol),
            22 => write(value, 0x6f00_0000_0000u64 + symbol),
            _ => return INVALID_ARGUMENT,
        }
    }
    SUCCESS
}

/// `attribute` of a symbol from an image's symbol table, at `address` in
/// the loaded image, of `size` bytes. A kernel's segment sizes are read
/// from its descriptor (`amd_kernel_code_t`'s successor, 64 bytes:
/// group segment size at 0, private at 4, kernarg at 8).
fn elf_symbol_info(kind: u32, address: u64, size: u64, attribute: u32, value: *mut c_void) -> u32 {
    let descriptor = |at: u64| -> u32 {
        // SAFETY: a kernel descriptor's 64 bytes lie in the loaded image.
        unsafe { ((address + at) as *const u32).read_unaligned() }
    };
    let kernel = kind == 1;
    // SAFETY (all arms): storage of the attribute's type (hsa.h).
    unsafe {
        match attribute {
            0 => write(value, kind),
            9 => write(value, size as u32),
            21 => write(value, address),
            22 if kernel => write(value, address),
            11 if kernel => write(value, descriptor(8)),
            13 if kernel => write(value, descriptor(0)),
            14 if kernel => write(value, descriptor(4)),
            // DYNAMIC_CALLSTACK, a bool.
            15 if kernel => write(value, false),
            _ => return INVALID_ARGUMENT,
        }
    }
    SUCCESS
}

/// Pins nothing: as on a system whose GPUs reach host memory at its own
/// address, the agent's pointer is the host pointer. Recorded in
/// `FAKE_CALL_LOG` as `hsa_amd_memory_lock <host> <size>`.
#[no_mangle]
pub unsafe extern "C" fn hsa_amd_memory_lock(
    host: *mut c_void,
    size: usize,
    _agents: *mut u64,
    _count: c_int,
    agent_ptr: *mut *mut c_void,
) -> u32 {
    if host.is_null() || size == 0 || agent_ptr.is_null() {
        return INVALID_ARGUMENT;
    }
    log_call(format!("hsa_amd_memory_lock {host:p} {size}"));
    // SAFETY: an out-pointer.
    unsafe { write(agent_ptr.cast(), host) };
    SUCCESS
}
