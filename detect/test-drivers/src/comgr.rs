//! The `libamd_comgr` half: what offload-detect asks of comgr 3 to compile
//! AMD SPIR-V for an agent (clr's sequence in ROCm 7.0). Objects are handles
//! into one table; each action checks its inputs as comgr does (the data
//! kinds it needs, a SPIR-V module's magic, an ISA name it knows) and
//! answers `AMD_COMGR_STATUS_ERROR` otherwise; an action kind the version
//! given does not have is `AMD_COMGR_STATUS_ERROR_INVALID_ARGUMENT`.
//!
//! | variable | effect |
//! |---|---|
//! | `FAKE_COMGR_VERSION` | `amd_comgr_get_version` (default `3.0`) |
//! | `FAKE_COMGR_EXECUTABLE` | the code object the link action makes (a file; unset: the link fails) |
//! | `FAKE_COMGR_SAVE_DIR` | directory to which translation writes the SPIR-V it was given, as `input.spv` |
//!
//! Each compilation appends `comgr compile <isa> <SPIR-V size> <fnv64>` to
//! `FAKE_DRIVER_LOG`.

use std::ffi::{c_char, CStr};
use std::sync::Mutex;

use crate::{append, env, fnv};

const SUCCESS: u32 = 0;
const ERROR: u32 = 1;
const INVALID_ARGUMENT: u32 = 2;

const KIND_BC: u32 = 0x6;
const KIND_RELOCATABLE: u32 = 0x7;
const KIND_EXECUTABLE: u32 = 0x8;
const KIND_SPIRV: u32 = 0x15;

const CODEGEN_BC_TO_RELOCATABLE: u32 = 0x4;
const LINK_RELOCATABLE_TO_EXECUTABLE: u32 = 0x7;
const TRANSLATE_SPIRV_TO_BC: u32 = 0x13;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct Handle {
    handle: u64,
}

enum Object {
    Data { kind: u32, bytes: Vec<u8> },
    Set(Vec<usize>),
    Info { isa: Option<String> },
    Gone,
}

static OBJECTS: Mutex<Vec<Object>> = Mutex::new(Vec::new());

fn with<R>(f: impl FnOnce(&mut Vec<Object>) -> R) -> R {
    f(&mut OBJECTS.lock().unwrap_or_else(|e| e.into_inner()))
}

fn add(object: Object) -> Handle {
    with(|o| {
        o.push(object);
        Handle {
            handle: o.len() as u64,
        }
    })
}

fn version() -> (usize, usize) {
    let v = env("FAKE_COMGR_VERSION").unwrap_or_else(|| "3.0".into());
    let (major, minor) = v.split_once('.').unwrap_or((&v, "0"));
    (major.parse().unwrap_or(3), minor.parse().unwrap_or(0))
}

#[no_mangle]
pub unsafe extern "C" fn amd_comgr_get_version(major: *mut usize, minor: *mut usize) {
    let (a, b) = version();
    // SAFETY: comgr's callers pass two writable size_t.
    unsafe {
        crate::write(major.cast(), a);
        crate::write(minor.cast(), b);
    }
}

#[no_mangle]
pub unsafe extern "C" fn amd_comgr_create_data(kind: u32, out: *mut Handle) -> u32 {
    let h = add(Object::Data {
        kind,
        bytes: Vec::new(),
    });
    // SAFETY: a writable handle.
    unsafe { crate::write(out.cast(), h) };
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn amd_comgr_set_data(h: Handle, size: usize, bytes: *const c_char) -> u32 {
    if bytes.is_null() && size > 0 {
        return INVALID_ARGUMENT;
    }
    // SAFETY: the caller passes `size` readable bytes, as comgr requires.
    let data = unsafe { std::slice::from_raw_parts(bytes.cast::<u8>(), size) }.to_vec();
    with(|o| match o.get_mut(h.handle as usize - 1) {
        Some(Object::Data { bytes, .. }) => {
            *bytes = data;
            SUCCESS
        }
        _ => INVALID_ARGUMENT,
    })
}

#[no_mangle]
pub unsafe extern "C" fn amd_comgr_set_data_name(h: Handle, name: *const c_char) -> u32 {
    let known = with(|o| matches!(o.get(h.handle as usize - 1), Some(Object::Data { .. })));
    if name.is_null() || !known {
        return INVALID_ARGUMENT;
    }
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn amd_comgr_release_data(h: Handle) -> u32 {
    release(h)
}

#[no_mangle]
pub unsafe extern "C" fn amd_comgr_create_data_set(out: *mut Handle) -> u32 {
    let h = add(Object::Set(Vec::new()));
    // SAFETY: a writable handle.
    unsafe { crate::write(out.cast(), h) };
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn amd_comgr_data_set_add(set: Handle, data: Handle) -> u32 {
    with(|o| {
        let index = data.handle as usize - 1;
        if !matches!(o.get(index), Some(Object::Data { .. })) {
            return INVALID_ARGUMENT;
        }
        match o.get_mut(set.handle as usize - 1) {
            Some(Object::Set(items)) => {
                items.push(index);
                SUCCESS
            }
            _ => INVALID_ARGUMENT,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn amd_comgr_destroy_data_set(h: Handle) -> u32 {
    release(h)
}

#[no_mangle]
pub unsafe extern "C" fn amd_comgr_create_action_info(out: *mut Handle) -> u32 {
    let h = add(Object::Info { isa: None });
    // SAFETY: a writable handle.
    unsafe { crate::write(out.cast(), h) };
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn amd_comgr_action_info_set_isa_name(h: Handle, isa: *const c_char) -> u32 {
    if isa.is_null() {
        return INVALID_ARGUMENT;
    }
    // SAFETY: a NUL-terminated string.
    let name = unsafe { CStr::from_ptr(isa) }
        .to_string_lossy()
        .into_owned();
    // comgr refuses an ISA name it does not know.
    let known = name
        .strip_prefix("amdgcn-amd-amdhsa--")
        .is_some_and(|target| target.starts_with("gfx"));
    if !known {
        return INVALID_ARGUMENT;
    }
    with(|o| match o.get_mut(h.handle as usize - 1) {
        Some(Object::Info { isa }) => {
            *isa = Some(name);
            SUCCESS
        }
        _ => INVALID_ARGUMENT,
    })
}

#[no_mangle]
pub unsafe extern "C" fn amd_comgr_action_info_set_device_lib_linking(h: Handle, _on: bool) -> u32 {
    with(|o| match o.get(h.handle as usize - 1) {
        Some(Object::Info { .. }) => SUCCESS,
        _ => INVALID_ARGUMENT,
    })
}

#[no_mangle]
pub unsafe extern "C" fn amd_comgr_destroy_action_info(h: Handle) -> u32 {
    release(h)
}

#[no_mangle]
pub unsafe extern "C" fn amd_comgr_do_action(
    kind: u32,
    info: Handle,
    input: Handle,
    result: Handle,
) -> u32 {
    if version().0 < 3 && kind == TRANSLATE_SPIRV_TO_BC {
        return INVALID_ARGUMENT;
    }
    let (isa, inputs) = with(|o| {
        let isa = match o.get(info.handle as usize - 1) {
            Some(Object::Info { isa }) => Ok(isa.clone()),
            _ => Err(INVALID_ARGUMENT),
        };
        let inputs: Vec<(u32, Vec<u8>)> = match o.get(input.handle as usize - 1) {
            Some(Object::Set(items)) => items
                .iter()
                .filter_map(|&i| match &o[i] {
                    Object::Data { kind, bytes } => Some((*kind, bytes.clone())),
                    _ => None,
                })
                .collect(),
            _ => return (Err(INVALID_ARGUMENT), Vec::new()),
        };
        (isa, inputs)
    });
    let isa = match isa {
        Ok(isa) => isa,
        Err(status) => return status,
    };
    let take = |wanted: u32| {
        inputs
            .iter()
            .find(|(k, _)| *k == wanted)
            .map(|(_, b)| b.clone())
    };
    let made = match kind {
        TRANSLATE_SPIRV_TO_BC => take(KIND_SPIRV)
            .filter(|spirv| spirv.starts_with(&[0x03, 0x02, 0x23, 0x07]))
            .map(|spirv| {
                if let Some(dir) = env("FAKE_COMGR_SAVE_DIR") {
                    let _ = std::fs::write(std::path::Path::new(&dir).join("input.spv"), &spirv);
                }
                let mut bc = b"BC\xc0\xde".to_vec();
                bc.extend_from_slice(&spirv);
                (KIND_BC, bc)
            }),
        CODEGEN_BC_TO_RELOCATABLE => match (isa, take(KIND_BC)) {
            (Some(isa), Some(bc)) => {
                let spirv = &bc[4..];
                append(
                    "FAKE_DRIVER_LOG",
                    &format!("comgr compile {isa} {} {:016x}", spirv.len(), fnv(spirv)),
                );
                Some((KIND_RELOCATABLE, isa.into_bytes()))
            }
            _ => None,
        },
        LINK_RELOCATABLE_TO_EXECUTABLE => take(KIND_RELOCATABLE)
            .and(env("FAKE_COMGR_EXECUTABLE"))
            .and_then(|path| std::fs::read(path).ok())
            .map(|code| (KIND_EXECUTABLE, code)),
        _ => return INVALID_ARGUMENT,
    };
    let Some((kind, bytes)) = made else {
        return ERROR;
    };
    let data = add(Object::Data { kind, bytes });
    // SAFETY: no pointer is passed.
    unsafe { amd_comgr_data_set_add(result, data) }
}

#[no_mangle]
pub unsafe extern "C" fn amd_comgr_action_data_get_data(
    set: Handle,
    kind: u32,
    index: usize,
    out: *mut Handle,
) -> u32 {
    let found = with(|o| match o.get(set.handle as usize - 1) {
        Some(Object::Set(items)) => items
            .iter()
            .filter(|&&i| matches!(&o[i], Object::Data { kind: k, .. } if *k == kind))
            .nth(index)
            .map(|&i| Handle {
                handle: i as u64 + 1,
            }),
        _ => None,
    });
    match found {
        Some(h) => {
            // SAFETY: a writable handle.
            unsafe { crate::write(out.cast(), h) };
            SUCCESS
        }
        None => INVALID_ARGUMENT,
    }
}

#[no_mangle]
pub unsafe extern "C" fn amd_comgr_get_data(
    h: Handle,
    size: *mut usize,
    bytes: *mut c_char,
) -> u32 {
    if size.is_null() {
        return INVALID_ARGUMENT;
    }
    let data = with(|o| match o.get(h.handle as usize - 1) {
        Some(Object::Data { bytes, .. }) => Some(bytes.clone()),
        _ => None,
    });
    let Some(data) = data else {
        return INVALID_ARGUMENT;
    };
    // SAFETY: `size` is writable; with a buffer, it holds `*size` bytes, as
    // comgr's callers pass it.
    unsafe {
        if !bytes.is_null() {
            let room = (*size).min(data.len());
            std::ptr::copy_nonoverlapping(data.as_ptr(), bytes.cast::<u8>(), room);
        }
        *size = data.len();
    }
    SUCCESS
}

fn release(h: Handle) -> u32 {
    with(|o| match o.get_mut((h.handle as usize).wrapping_sub(1)) {
        Some(slot) if !matches!(slot, Object::Gone) => {
            // A data object stays readable through the sets holding it.
            if !matches!(slot, Object::Data { .. }) {
                *slot = Object::Gone;
            }
            SUCCESS
        }
        _ => INVALID_ARGUMENT,
    })
}
