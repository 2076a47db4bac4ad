//! The CUDA driver's linker, `cuLink*` with cuda.h's signatures, as libcudart
//! uses it for an `-rdc` program's objects: each input a fat binary
//! (`CU_JIT_INPUT_FATBINARY`) from which the linker takes, for the device of
//! the current context, a cubin of exactly its architecture, else the
//! newest PTX not newer than it (which it would compile); an input with
//! neither fails with `CUDA_ERROR_NO_BINARY_FOR_GPU`, as the driver does.
//! Every call needs a current context.
//!
//! The fat binary is read here by its own short reading of the layout
//! (16-byte header, 64-byte entry headers, zstd payloads), not by the
//! library under test. The "linked cubin" `cuLinkComplete` gives is text:
//! each input's PTX, or the names of its cubin's symbols, one per line, and
//! a NUL; `cuModuleLoadData` takes it as PTX, and finds symbols in it by
//! name. Each call is logged to `FAKE_DRIVER_LOG`:
//! `cuda link sm_<cc> <input> <kind> sm_<sm>` per input, then
//! `cuda link complete sm_<cc> <inputs> <size>`.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::Mutex;

use object::{Object, ObjectSymbol};

use crate::cuda::{current_spec, DeviceSpec};
use crate::{log_load, write};

const SUCCESS: c_int = 0;
const INVALID_VALUE: c_int = 1;
const INVALID_CONTEXT: c_int = 201;
const NO_BINARY_FOR_GPU: c_int = 209;
const INVALID_HANDLE: c_int = 400;
const NOT_SUPPORTED: c_int = 801;
/// `CU_JIT_INPUT_FATBINARY`.
const INPUT_FATBINARY: c_int = 2;
/// Link states are `LINK_BASE + index`.
const LINK_BASE: usize = 0x71_0000;

/// A link in progress: the device's compute capability, what was added, and
/// the output once complete.
struct Link {
    sm: u32,
    inputs: Vec<Vec<u8>>,
    output: Option<Vec<u8>>,
    destroyed: bool,
}

static LINKS: Mutex<Vec<Link>> = Mutex::new(Vec::new());

fn with_link<T>(
    state: *mut c_void,
    f: impl FnOnce(&mut Link) -> Result<T, c_int>,
) -> Result<T, c_int> {
    let mut links = LINKS.lock().unwrap_or_else(|e| e.into_inner());
    let link = (state as usize)
        .checked_sub(LINK_BASE)
        .and_then(|i| links.get_mut(i))
        .filter(|l| !l.destroyed)
        .ok_or(INVALID_HANDLE)?;
    f(link)
}

fn code(result: Result<(), c_int>) -> c_int {
    result.err().unwrap_or(SUCCESS)
}

fn sm(spec: &DeviceSpec) -> u32 {
    (spec.major * 10 + spec.minor) as u32
}

#[no_mangle]
pub unsafe extern "C" fn cuLinkCreate_v2(
    _options: c_uint,
    _option_keys: *mut c_int,
    _option_values: *mut *mut c_void,
    state: *mut *mut c_void,
) -> c_int {
    crate::in_driver(false, || {
        let Some(spec) = current_spec() else {
            return INVALID_CONTEXT;
        };
        if state.is_null() {
            return INVALID_VALUE;
        }
        let mut links = LINKS.lock().unwrap_or_else(|e| e.into_inner());
        links.push(Link {
            sm: sm(&spec),
            inputs: Vec::new(),
            output: None,
            destroyed: false,
        });
        // SAFETY: an out-pointer.
        unsafe { write(state.cast(), LINK_BASE + links.len() - 1) };
        SUCCESS
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn cuLinkAddData_v2(
    state: *mut c_void,
    kind: c_int,
    data: *mut c_void,
    size: usize,
    _name: *const c_char,
    _options: c_uint,
    _option_keys: *mut c_int,
    _option_values: *mut *mut c_void,
) -> c_int {
    crate::in_driver(true, || {
        if current_spec().is_none() {
            return INVALID_CONTEXT;
        }
        if data.is_null() || size == 0 {
            return INVALID_VALUE;
        }
        if kind != INPUT_FATBINARY {
            return NOT_SUPPORTED;
        }
        // SAFETY: `size` readable bytes at `data` (cuda.h).
        let bytes = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), size) };
        code(with_link(state, |link| {
            let taken = take(bytes, link.sm)?;
            link.inputs.push(taken);
            Ok(())
        }))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuLinkComplete(
    state: *mut c_void,
    cubin: *mut *mut c_void,
    size: *mut usize,
) -> c_int {
    crate::in_driver(false, || {
        if current_spec().is_none() {
            return INVALID_CONTEXT;
        }
        if cubin.is_null() || size.is_null() {
            return INVALID_VALUE;
        }
        code(with_link(state, |link| {
            if link.inputs.is_empty() {
                return Err(INVALID_VALUE);
            }
            let mut out: Vec<u8> = link.inputs.join(&b'\n');
            out.push(0);
            log_load(format!(
                "cuda link complete sm_{} {} {}",
                link.sm,
                link.inputs.len(),
                out.len()
            ));
            let output = link.output.insert(out);
            // SAFETY: out-pointers; the output lives until `cuLinkDestroy`.
            unsafe {
                write(cubin.cast(), output.as_ptr() as usize);
                write(size.cast(), output.len());
            }
            Ok(())
        }))
    })
}

#[no_mangle]
pub extern "C" fn cuLinkDestroy(state: *mut c_void) -> c_int {
    crate::in_driver(false, || {
        code(with_link(state, |link| {
            link.destroyed = true;
            // What `cuLinkComplete` gave is freed: poison it first, so a
            // caller that reads it after the destroy sees garbage.
            if let Some(out) = link.output.as_mut() {
                out.fill(0xa5);
            }
            link.output = None;
            link.inputs = Vec::new();
            Ok(())
        }))
    })
}

/// What the linker takes from fat binary `fatbin` for a device of compute
/// capability `sm`, as the text described in the module's documentation.
fn take(fatbin: &[u8], sm: u32) -> Result<Vec<u8>, c_int> {
    let entries = entries(fatbin).ok_or(INVALID_VALUE)?;
    let cubin = entries.iter().find(|e| e.kind == 2 && e.sm == sm);
    let ptx = entries
        .iter()
        .filter(|e| e.kind == 1 && e.sm <= sm)
        .max_by_key(|e| e.sm);
    let entry = cubin.or(ptx).ok_or(NO_BINARY_FOR_GPU)?;
    let payload = entry.payload()?;
    log_load(format!(
        "cuda link sm_{sm} {} sm_{}",
        if entry.kind == 2 { "cubin" } else { "ptx" },
        entry.sm
    ));
    if entry.kind == 1 {
        return Ok(payload.into_iter().filter(|&b| b != 0).collect());
    }
    let file = object::File::parse(&*payload).map_err(|_| INVALID_VALUE)?;
    let names: Vec<&[u8]> = file
        .symbols()
        .filter_map(|s| s.name_bytes().ok())
        .filter(|n| !n.is_empty())
        .collect();
    Ok(names.join(&b'\n'))
}

/// One entry of a fat binary.
struct Entry<'a> {
    kind: u16,
    sm: u32,
    flags: u64,
    stored: &'a [u8],
    compressed: usize,
    inflated: usize,
}

impl Entry<'_> {
    /// Its payload, inflated (zstd) when compressed.
    fn payload(&self) -> Result<Vec<u8>, c_int> {
        const ZSTD: u64 = 0x8000;
        const OTHER_COMPRESSION: u64 = 0x1000 | 0x2000;
        if self.flags & OTHER_COMPRESSION != 0 {
            return Err(NOT_SUPPORTED);
        }
        if self.flags & ZSTD == 0 {
            return Ok(self.stored.to_vec());
        }
        let frame = self.stored.get(..self.compressed).ok_or(INVALID_VALUE)?;
        zstd::bulk::decompress(frame, self.inflated).map_err(|_| INVALID_VALUE)
    }
}

/// The entries of `fatbin` (groups are skipped), or `None` if it is not one.
fn entries(fatbin: &[u8]) -> Option<Vec<Entry<'_>>> {
    let u16_at = |o: usize| Some(u16::from_le_bytes(fatbin.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(fatbin.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(fatbin.get(o..o + 8)?.try_into().ok()?));
    if u32_at(0)? != 0xba55_ed50 {
        return None;
    }
    let end = usize::from(u16_at(6)?).checked_add(usize::try_from(u64_at(8)?).ok()?)?;
    let mut at = usize::from(u16_at(6)?);
    let mut found = Vec::new();
    while at + 64 <= end.min(fatbin.len()) {
        let header = usize::try_from(u32_at(at + 4)?).ok()?;
        let stored = usize::try_from(u64_at(at + 8)?).ok()?;
        let start = at.checked_add(header)?;
        found.push(Entry {
            kind: u16_at(at)?,
            sm: u32_at(at + 28)?,
            flags: u64_at(at + 40)?,
            stored: fatbin.get(start..start.checked_add(stored)?)?,
            compressed: usize::try_from(u32_at(at + 16)?).ok()?,
            inflated: usize::try_from(u64_at(at + 56)?).ok()?,
        });
        at = start + stored;
    }
    Some(found)
}
