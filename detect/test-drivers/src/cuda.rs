//! The CUDA half: `cu*` symbols with cuda.h's signatures. `CUdevice` values
//! are physical indices (before `CUDA_VISIBLE_DEVICES`), contexts are
//! `0x1000 + device` (each device's primary context; there are no others).
//!
//! As in the real driver, each thread has its own context stack
//! (`cuCtxPushCurrent_v2`, `cuCtxPopCurrent_v2`, `cuCtxSetCurrent` replacing
//! the top, `cuCtxGetCurrent` reading it), modules are loaded into the
//! context on top, and module calls fail with `CUDA_ERROR_INVALID_CONTEXT`
//! when the stack is empty. Primary contexts count their retains: a release
//! without a retain fails, and `cuDevicePrimaryCtxGetState` reports a context
//! active while it is retained.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::{env, env_num, find_name, fnv, log_call, log_load, visible, write};

const SUCCESS: c_int = 0;
const INVALID_VALUE: c_int = 1;
const NOT_INITIALIZED: c_int = 3;
const INVALID_DEVICE: c_int = 101;
const INVALID_CONTEXT: c_int = 201;
const INVALID_HANDLE: c_int = 400;
const NOT_FOUND: c_int = 500;
const CONTEXT_BASE: usize = 0x1000;

pub(crate) struct DeviceSpec {
    pub(crate) major: c_int,
    pub(crate) minor: c_int,
    name: String,
}

fn all_devices() -> Vec<DeviceSpec> {
    env("FAKE_CUDA_DEVICES")
        .map(|s| {
            s.split(';')
                .filter_map(|d| {
                    let (cc, name) = d.split_once(':').unwrap_or((d, "Fake NVIDIA GPU"));
                    let (major, minor) = cc.split_once('.')?;
                    Some(DeviceSpec {
                        major: major.trim().parse().ok()?,
                        minor: minor.trim().parse().ok()?,
                        name: name.to_string(),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Physical indices in ordinal order, after `CUDA_VISIBLE_DEVICES`.
fn ordinals() -> Vec<usize> {
    visible("CUDA_VISIBLE_DEVICES", all_devices().len())
}

fn device(dev: c_int) -> Option<DeviceSpec> {
    let dev = usize::try_from(dev).ok()?;
    ordinals()
        .contains(&dev)
        .then(|| all_devices().into_iter().nth(dev))?
}

thread_local! {
    /// This thread's context stack, its current context last.
    static STACK: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on this thread's context stack; `None` once the thread's locals
/// are destroyed (at process exit, `atexit` handlers such as nvcc's
/// `__cudaUnregisterBinaryUtil` run after them), where the real driver
/// answers `CUDA_ERROR_DEINITIALIZED`.
fn with_stack<T>(f: impl FnOnce(&mut Vec<usize>) -> T) -> Option<T> {
    STACK.try_with(|s| f(&mut s.borrow_mut())).ok()
}

/// `CUDA_ERROR_DEINITIALIZED`.
const DEINITIALIZED: c_int = 4;

/// How many times each physical device's primary context is retained.
static RETAINS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// The device whose primary context `ctx` is, if it is one.
fn context_device(ctx: *mut c_void) -> Option<c_int> {
    let dev = c_int::try_from((ctx as usize).checked_sub(CONTEXT_BASE)?).ok()?;
    device(dev).map(|_| dev)
}

/// The device of the context current on this thread.
fn current_device() -> Option<c_int> {
    with_stack(|s| s.last().copied())
        .flatten()
        .and_then(|ctx| context_device(ctx as *mut c_void))
}

/// The device of the context current on this thread, as configured.
pub(crate) fn current_spec() -> Option<DeviceSpec> {
    device(current_device()?)
}

/// Images loaded by `cuModuleLoadData`, by module handle - 1.
static MODULES: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
static INITIALISED: Mutex<bool> = Mutex::new(false);

fn initialised() -> bool {
    *INITIALISED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether [`fake_cuda_tear_down`] was called.
static TORN_DOWN: AtomicBool = AtomicBool::new(false);

/// What libcudart's exit handler leaves (seen on an H200 with CUDA 13:
/// libcudart tears the driver down at exit, before handlers installed
/// earlier than its first call run): from then on `cuInit` and every device
/// query answer `CUDA_ERROR_DEINITIALIZED`, and `cuGetErrorName` and
/// `cuGetErrorString` name nothing. Not a driver symbol: tests/programs/
/// cuda_spy.c calls it where libcudart would tear down.
#[no_mangle]
pub extern "C" fn fake_cuda_tear_down() {
    TORN_DOWN.store(true, Ordering::Release);
}

fn torn_down() -> bool {
    TORN_DOWN.load(Ordering::Acquire)
}

/// What a call that needs `cuInit` answers before it, or after the driver
/// was torn down; `None` in between.
fn unready() -> Option<c_int> {
    if torn_down() {
        Some(DEINITIALIZED)
    } else if !initialised() {
        Some(NOT_INITIALIZED)
    } else {
        None
    }
}

#[no_mangle]
pub extern "C" fn cuInit(_flags: c_uint) -> c_int {
    if torn_down() {
        return DEINITIALIZED;
    }
    match env_num("FAKE_CUDA_INIT") {
        Some(r) if r != 0 => r as c_int,
        _ => {
            *INITIALISED.lock().unwrap_or_else(|e| e.into_inner()) = true;
            SUCCESS
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(v: *mut c_int) -> c_int {
    if v.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: an out-pointer (works before cuInit, as in the real driver).
    unsafe { *v = env_num("FAKE_CUDA_DRIVER_VERSION").unwrap_or(12040) as c_int };
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(n: *mut c_int) -> c_int {
    if let Some(error) = unready() {
        return error;
    }
    // SAFETY: an out-pointer.
    unsafe { write(n.cast(), ordinals().len() as c_int) };
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(d: *mut c_int, ordinal: c_int) -> c_int {
    if let Some(error) = unready() {
        return error;
    }
    let Some(physical) = usize::try_from(ordinal)
        .ok()
        .and_then(|o| ordinals().get(o).copied())
    else {
        return INVALID_DEVICE;
    };
    // SAFETY: an out-pointer.
    unsafe { write(d.cast(), physical as c_int) };
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    v: *mut c_int,
    attribute: c_int,
    dev: c_int,
) -> c_int {
    let Some(spec) = device(dev) else {
        return INVALID_DEVICE;
    };
    let value = match attribute {
        75 => spec.major,
        76 => spec.minor,
        _ => return INVALID_VALUE,
    };
    // SAFETY: an out-pointer.
    unsafe { write(v.cast(), value) };
    SUCCESS
}

unsafe fn copy_c(buf: *mut c_char, len: c_int, text: &str) -> c_int {
    if buf.is_null() || len <= 0 {
        return INVALID_VALUE;
    }
    let n = text.len().min(len as usize - 1);
    // SAFETY: the caller's buffer of `len` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(buf: *mut c_char, len: c_int, dev: c_int) -> c_int {
    match device(dev) {
        // SAFETY: the caller's buffer.
        Some(spec) => unsafe { copy_c(buf, len, &spec.name) },
        None => INVALID_DEVICE,
    }
}

/// Left out of the `missing-symbol` build.
#[cfg_attr(not(feature = "missing-symbol"), no_mangle)]
#[cfg_attr(feature = "missing-symbol", allow(dead_code, non_snake_case))]
pub unsafe extern "C" fn cuDeviceGetPCIBusId(buf: *mut c_char, len: c_int, dev: c_int) -> c_int {
    match device(dev) {
        // SAFETY: the caller's buffer.
        Some(_) => unsafe { copy_c(buf, len, &format!("0000:{:02x}:00.0", dev + 0x41)) },
        None => INVALID_DEVICE,
    }
}

fn error_text(r: c_int) -> (&'static CStr, &'static CStr) {
    match r {
        0 => (c"CUDA_SUCCESS", c"no error"),
        1 => (c"CUDA_ERROR_INVALID_VALUE", c"invalid argument"),
        3 => (c"CUDA_ERROR_NOT_INITIALIZED", c"initialization error"),
        34 => (c"CUDA_ERROR_STUB_LIBRARY", c"CUDA driver is a stub library"),
        100 => (
            c"CUDA_ERROR_NO_DEVICE",
            c"no CUDA-capable device is detected",
        ),
        101 => (c"CUDA_ERROR_INVALID_DEVICE", c"invalid device ordinal"),
        200 => (
            c"CUDA_ERROR_INVALID_IMAGE",
            c"device kernel image is invalid",
        ),
        201 => (c"CUDA_ERROR_INVALID_CONTEXT", c"invalid device context"),
        209 => (
            c"CUDA_ERROR_NO_BINARY_FOR_GPU",
            c"no kernel image is available for execution on the device",
        ),
        218 => (c"CUDA_ERROR_INVALID_PTX", c"a PTX JIT compilation failed"),
        222 => (
            c"CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
            c"the provided PTX was compiled with an unsupported toolchain.",
        ),
        400 => (c"CUDA_ERROR_INVALID_HANDLE", c"invalid resource handle"),
        500 => (c"CUDA_ERROR_NOT_FOUND", c"named symbol not found"),
        _ => (c"CUDA_ERROR_UNKNOWN", c"unknown error"),
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(r: c_int, out: *mut *const c_char) -> c_int {
    if torn_down() {
        return DEINITIALIZED;
    }
    // SAFETY: an out-pointer for a static string.
    unsafe { write(out.cast(), error_text(r).1.as_ptr()) };
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(r: c_int, out: *mut *const c_char) -> c_int {
    if torn_down() {
        return DEINITIALIZED;
    }
    // SAFETY: an out-pointer for a static string.
    unsafe { write(out.cast(), error_text(r).0.as_ptr()) };
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut *mut c_void, dev: c_int) -> c_int {
    if device(dev).is_none() {
        return INVALID_DEVICE;
    }
    if ctx.is_null() {
        return INVALID_VALUE;
    }
    let mut retains = RETAINS.lock().unwrap_or_else(|e| e.into_inner());
    let i = dev as usize;
    if retains.len() <= i {
        retains.resize(i + 1, 0);
    }
    retains[i] += 1;
    log_call(format!("cuDevicePrimaryCtxRetain {dev}"));
    // SAFETY: an out-pointer, checked not null.
    unsafe { *ctx = (CONTEXT_BASE + i) as *mut c_void };
    SUCCESS
}

/// `cuDevicePrimaryCtxRelease` since CUDA 11.0.
#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: c_int) -> c_int {
    if device(dev).is_none() {
        return INVALID_DEVICE;
    }
    let mut retains = RETAINS.lock().unwrap_or_else(|e| e.into_inner());
    match retains.get_mut(dev as usize) {
        Some(n) if *n > 0 => *n -= 1,
        _ => return INVALID_CONTEXT,
    }
    log_call(format!("cuDevicePrimaryCtxRelease_v2 {dev}"));
    SUCCESS
}

/// `flags` is always 0; `active` is 1 while the primary context is retained.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(
    dev: c_int,
    flags: *mut c_uint,
    active: *mut c_int,
) -> c_int {
    if device(dev).is_none() {
        return INVALID_DEVICE;
    }
    if flags.is_null() || active.is_null() {
        return INVALID_VALUE;
    }
    let retains = RETAINS.lock().unwrap_or_else(|e| e.into_inner());
    let retained = retains.get(dev as usize).is_some_and(|&n| n > 0);
    // SAFETY: out-pointers, checked not null.
    unsafe {
        *flags = 0;
        *active = c_int::from(retained);
    }
    SUCCESS
}

/// Replaces the top of this thread's stack with `ctx` (pushes it when the
/// stack is empty); a null `ctx` pops the top, if any.
#[no_mangle]
pub extern "C" fn cuCtxSetCurrent(ctx: *mut c_void) -> c_int {
    if ctx.is_null() {
        return with_stack(|s| s.pop()).map_or(DEINITIALIZED, |_| SUCCESS);
    }
    if context_device(ctx).is_none() {
        return INVALID_CONTEXT;
    }
    with_stack(|stack| {
        stack.pop();
        stack.push(ctx as usize);
    })
    .map_or(DEINITIALIZED, |_| SUCCESS)
}

/// `cuCtxPushCurrent` since CUDA 4.0.
#[no_mangle]
pub extern "C" fn cuCtxPushCurrent_v2(ctx: *mut c_void) -> c_int {
    if context_device(ctx).is_none() {
        return INVALID_CONTEXT;
    }
    with_stack(|s| s.push(ctx as usize)).map_or(DEINITIALIZED, |_| SUCCESS)
}

/// `cuCtxPopCurrent` since CUDA 4.0.
#[no_mangle]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(ctx: *mut *mut c_void) -> c_int {
    let Some(popped) = with_stack(|s| s.pop()) else {
        return DEINITIALIZED;
    };
    let Some(top) = popped else {
        return INVALID_CONTEXT;
    };
    // SAFETY: an out-pointer, may be null (cuda.h).
    unsafe { write(ctx.cast(), top as *mut c_void) };
    SUCCESS
}

/// The top of this thread's stack, or null.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(ctx: *mut *mut c_void) -> c_int {
    if ctx.is_null() {
        return INVALID_VALUE;
    }
    let top = with_stack(|s| s.last().copied()).flatten().unwrap_or(0);
    // SAFETY: an out-pointer, checked not null.
    unsafe { *ctx = top as *mut c_void };
    SUCCESS
}

/// The size of a cubin (its headers end it) or of NUL-terminated PTX, read the
/// way the real driver must: from the image alone.
unsafe fn image_size(p: *const u8) -> usize {
    // SAFETY: the caller passes a complete image; an ELF has a 64-byte header.
    unsafe {
        if std::slice::from_raw_parts(p, 4) == b"\x7fELF" {
            let h = std::slice::from_raw_parts(p, 64);
            let field = |o: usize, n: usize| {
                h[o..o + n]
                    .iter()
                    .rev()
                    .fold(0usize, |v, &b| (v << 8) | b as usize)
            };
            let ph = field(32, 8) + field(54, 2) * field(56, 2);
            let sh = field(40, 8) + field(58, 2) * field(60, 2);
            ph.max(sh).max(64)
        } else {
            CStr::from_ptr(p.cast()).to_bytes().len() + 1
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(module: *mut *mut c_void, image: *const c_void) -> c_int {
    // SAFETY: the caller's pointers, passed on as they came.
    crate::in_driver(true, || unsafe { load_data(module, image) })
}

/// `cuModuleLoadData` under the driver's lock.
///
/// # Safety
/// As `cuModuleLoadData`: `image` is a complete image, `module` an out-pointer.
unsafe fn load_data(module: *mut *mut c_void, image: *const c_void) -> c_int {
    let Some(dev) = current_device() else {
        return INVALID_CONTEXT;
    };
    if let Some(r) = env_num("FAKE_CUDA_LOAD_ERROR") {
        return r as c_int;
    }
    if module.is_null() || image.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: a complete image (cuda.h: the driver reads it without a size).
    let bytes = unsafe {
        let size = image_size(image.cast());
        std::slice::from_raw_parts(image.cast::<u8>(), size).to_vec()
    };
    let Some(spec) = device(dev) else {
        return INVALID_CONTEXT;
    };
    log_load(format!(
        "cuda load sm_{}{} {} {:016x}",
        spec.major,
        spec.minor,
        bytes.len(),
        fnv(&bytes)
    ));
    let mut modules = MODULES.lock().unwrap_or_else(|e| e.into_inner());
    modules.push(bytes);
    // SAFETY: an out-pointer.
    unsafe { *module = modules.len() as *mut c_void };
    SUCCESS
}

/// Where `name` appears in PTX text as a whole identifier.
fn find_identifier(text: &[u8], name: &[u8]) -> Option<usize> {
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'$';
    if name.is_empty() {
        return None;
    }
    text.windows(name.len()).enumerate().find_map(|(i, w)| {
        let before = i.checked_sub(1).map(|j| text[j]);
        let after = text.get(i + name.len()).copied();
        (w == name && !before.is_some_and(ident) && !after.is_some_and(ident)).then_some(i)
    })
}

unsafe fn module_symbol(module: *mut c_void, name: *const c_char) -> Result<u64, c_int> {
    if current_device().is_none() {
        return Err(INVALID_CONTEXT);
    }
    if name.is_null() {
        return Err(INVALID_VALUE);
    }
    let modules = MODULES.lock().unwrap_or_else(|e| e.into_inner());
    let image = modules
        .get((module as usize).wrapping_sub(1))
        .ok_or(INVALID_HANDLE)?;
    // SAFETY: a NUL-terminated name (cuda.h).
    let name = unsafe { CStr::from_ptr(name) };
    let name = name.to_bytes();
    let offset = if image.starts_with(b"\x7fELF") {
        find_name(image, name)
    } else {
        find_identifier(image, name)
    };
    offset
        .map(|o| ((module as u64) << 32) | o as u64)
        .ok_or(NOT_FOUND)
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(
    f: *mut *mut c_void,
    module: *mut c_void,
    name: *const c_char,
) -> c_int {
    // SAFETY: the caller's module handle and name.
    match unsafe { module_symbol(module, name) } {
        Ok(h) => {
            // SAFETY: an out-pointer.
            unsafe { write(f.cast(), (0x5f00_0000_0000u64 + h) as *mut c_void) };
            SUCCESS
        }
        Err(e) => e,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetGlobal_v2(
    address: *mut u64,
    size: *mut usize,
    module: *mut c_void,
    name: *const c_char,
) -> c_int {
    // SAFETY: the caller's module handle and name.
    match unsafe { module_symbol(module, name) } {
        Ok(h) => {
            // SAFETY: `module_symbol` checked the name is non-null; NUL-terminated.
            let name = unsafe { CStr::from_ptr(name) }.to_bytes();
            let (at, bytes) =
                managed(module as usize, name).unwrap_or((0x4f00_0000_0000u64 + h, 4));
            // SAFETY: out-pointers, either may be null (cuda.h).
            unsafe {
                write(address.cast(), at);
                write(size.cast(), bytes);
            }
            SUCCESS
        }
        Err(e) => e,
    }
}

/// The memory of one managed variable of a loaded module.
struct Managed {
    module: usize,
    name: Vec<u8>,
    address: usize,
    size: usize,
}

/// Memory of managed variables, by module and name, never freed.
static MANAGED: Mutex<Vec<Managed>> = Mutex::new(Vec::new());

/// As the driver allocates managed memory, which the host reads and writes,
/// for each `__managed__` variable of a module it loads (initialised from
/// the module): the address and size of `name`'s, when the module is a
/// cubin whose symbol `name` carries `STO_CUDA_MANAGED` (0x4 in
/// `st_other`, as nvcc writes it); the same memory every time.
fn managed(module: usize, name: &[u8]) -> Option<(u64, usize)> {
    let mut managed = MANAGED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(m) = managed
        .iter()
        .find(|m| m.module == module && m.name == name)
    {
        return Some((m.address as u64, m.size));
    }
    let initial = {
        let modules = MODULES.lock().unwrap_or_else(|e| e.into_inner());
        initial_value(modules.get(module.wrapping_sub(1))?, name)?
    };
    let memory: &'static mut [u64] = Box::leak(vec![0u64; initial.len().div_ceil(8).max(1)].into());
    // SAFETY: `memory` has at least `initial.len()` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(initial.as_ptr(), memory.as_mut_ptr().cast(), initial.len())
    };
    let at = memory.as_ptr() as usize;
    managed.push(Managed {
        module,
        name: name.to_vec(),
        address: at,
        size: initial.len(),
    });
    Some((at as u64, initial.len()))
}

/// The initial bytes of managed variable `name` in cubin `image`: its
/// section's bytes at its value (zeros in `SHT_NOBITS`).
fn initial_value(image: &[u8], name: &[u8]) -> Option<Vec<u8>> {
    use object::read::elf::{ElfFile64, SectionHeader, Sym};
    let file = ElfFile64::<object::LittleEndian>::parse(image).ok()?;
    let endian = file.endian();
    let symbols = file.elf_symbol_table();
    let (at, symbol) = symbols
        .iter()
        .enumerate()
        .find(|(_, s)| symbols.symbol_name(endian, s).ok() == Some(name))?;
    if symbol.st_other() & 0x4 == 0 {
        return None;
    }
    let size = usize::try_from(symbol.st_size(endian)).ok()?;
    let index = symbols
        .symbol_section(endian, symbol, object::SymbolIndex(at))
        .ok()??;
    let section = file.elf_section_table().section(index).ok()?;
    if section.sh_type(endian) == object::elf::SHT_NOBITS {
        return Some(vec![0; size]);
    }
    let data = section.data(endian, image).ok()?;
    let start = usize::try_from(
        symbol
            .st_value(endian)
            .checked_sub(section.sh_addr(endian))?,
    )
    .ok()?;
    data.get(start..start.checked_add(size)?)
        .map(<[u8]>::to_vec)
}

#[no_mangle]
pub extern "C" fn cuModuleUnload(module: *mut c_void) -> c_int {
    crate::in_driver(false, || {
        if current_device().is_none() {
            return INVALID_CONTEXT;
        }
        log_call(format!("cuModuleUnload {}", module as usize));
        SUCCESS
    })
}
