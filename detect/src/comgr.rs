//! Compiling AMD's portable code (SPIR-V, clang's `amdgcnspirv`) for an
//! agent's ISA through the code-object manager, `libamd_comgr`, opened at
//! run time with `libloading` as the HIP runtime uses it.
//!
//! Library: `OFFLOAD_LOADER_COMGR_LIBRARY` if set (and only it), otherwise
//! `libamd_comgr.so.3`, `libamd_comgr.so`, `/opt/rocm/lib/libamd_comgr.so.3`.
//! Its version (`amd_comgr_get_version`) must be 3.0 or later: comgr 3.0
//! (ROCm 6.4 and 7.0) added `AMD_COMGR_DATA_KIND_SPIRV` and
//! `AMD_COMGR_ACTION_TRANSLATE_SPIRV_TO_BC`, and renumbered the actions
//! (amd_comgr.h); comgr 2.x (Debian 12 has 2.4) has no SPIR-V at all.
//!
//! The sequence is clr's in ROCm 7.0 (`hipamd/src/hip_fatbin.cpp`): the
//! SPIR-V translated to bitcode, then for the ISA
//! (`amdgcn-amd-amdhsa--gfx1100`, with its features) the bitcode compiled
//! to a relocatable with the device libraries linked, and linked to an
//! executable code object, which HSA loads as any other.

use std::ffi::{c_char, CString};
use std::path::PathBuf;

use crate::image::DriverError;
use crate::library::{self, resolve, Cache};
use crate::report::{DriverStatus, Reason};

const DEFAULT_CANDIDATES: [&str; 3] = [
    "libamd_comgr.so.3",
    "libamd_comgr.so",
    "/opt/rocm/lib/libamd_comgr.so.3",
];

/// `amd_comgr_data_kind_t` values (comgr 3, amd_comgr.h).
const DATA_KIND_EXECUTABLE: u32 = 0x8;
const DATA_KIND_SPIRV: u32 = 0x15;
/// `amd_comgr_action_kind_t` values (comgr 3; 2.x numbered them otherwise).
const ACTION_CODEGEN_BC_TO_RELOCATABLE: u32 = 0x4;
const ACTION_LINK_RELOCATABLE_TO_EXECUTABLE: u32 = 0x7;
const ACTION_TRANSLATE_SPIRV_TO_BC: u32 = 0x13;

/// `amd_comgr_data_t`, `amd_comgr_data_set_t`, `amd_comgr_action_info_t`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Handle {
    handle: u64,
}

type Status = u32;
type GetVersion = unsafe extern "C" fn(*mut usize, *mut usize);
type Create = unsafe extern "C" fn(*mut Handle) -> Status;
type CreateData = unsafe extern "C" fn(u32, *mut Handle) -> Status;
type SetData = unsafe extern "C" fn(Handle, usize, *const c_char) -> Status;
type SetName = unsafe extern "C" fn(Handle, *const c_char) -> Status;
type DataSetAdd = unsafe extern "C" fn(Handle, Handle) -> Status;
type SetDeviceLibLinking = unsafe extern "C" fn(Handle, bool) -> Status;
type DoAction = unsafe extern "C" fn(u32, Handle, Handle, Handle) -> Status;
type ActionDataGetData = unsafe extern "C" fn(Handle, u32, usize, *mut Handle) -> Status;
type GetData = unsafe extern "C" fn(Handle, *mut usize, *mut c_char) -> Status;
type Release = unsafe extern "C" fn(Handle) -> Status;

/// The comgr entry points this crate uses, resolved once per library.
struct Api {
    path: PathBuf,
    version: (usize, usize),
    create_data: CreateData,
    set_data: SetData,
    set_data_name: SetName,
    release_data: Release,
    create_data_set: Create,
    data_set_add: DataSetAdd,
    destroy_data_set: Release,
    create_action_info: Create,
    set_isa_name: SetName,
    set_device_lib_linking: SetDeviceLibLinking,
    destroy_action_info: Release,
    do_action: DoAction,
    action_data_get_data: ActionDataGetData,
    get_data: GetData,
}

static APIS: Cache<Api> = Cache::new();

/// comgr at `library` (or the default names), opened and resolved once.
fn open(library: Option<PathBuf>) -> Result<&'static Api, Reason> {
    APIS.get_or_open(library, |library| {
        let (lib, path) = library::open(library, &DEFAULT_CANDIDATES)?;
        let get_version: GetVersion = resolve!(lib, path, "amd_comgr_get_version");
        let mut version = (0, 0);
        // SAFETY: amd_comgr_get_version writes the two size_t it is given.
        unsafe { get_version(&mut version.0, &mut version.1) };
        Ok(Api {
            version,
            create_data: resolve!(lib, path, "amd_comgr_create_data"),
            set_data: resolve!(lib, path, "amd_comgr_set_data"),
            set_data_name: resolve!(lib, path, "amd_comgr_set_data_name"),
            release_data: resolve!(lib, path, "amd_comgr_release_data"),
            create_data_set: resolve!(lib, path, "amd_comgr_create_data_set"),
            data_set_add: resolve!(lib, path, "amd_comgr_data_set_add"),
            destroy_data_set: resolve!(lib, path, "amd_comgr_destroy_data_set"),
            create_action_info: resolve!(lib, path, "amd_comgr_create_action_info"),
            set_isa_name: resolve!(lib, path, "amd_comgr_action_info_set_isa_name"),
            set_device_lib_linking: resolve!(
                lib,
                path,
                "amd_comgr_action_info_set_device_lib_linking"
            ),
            destroy_action_info: resolve!(lib, path, "amd_comgr_destroy_action_info"),
            do_action: resolve!(lib, path, "amd_comgr_do_action"),
            action_data_get_data: resolve!(lib, path, "amd_comgr_action_data_get_data"),
            get_data: resolve!(lib, path, "amd_comgr_get_data"),
            path,
        })
    })
}

/// A code object compiled from SPIR-V, and the comgr that compiled it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledSpirv {
    /// The executable code object.
    pub code: Vec<u8>,
    /// comgr's version, `major.minor`.
    pub comgr: String,
    /// The library it was found at.
    pub library: PathBuf,
}

/// Compiles `spirv` (an `amdgcnspirv` image) for the agent whose target ID
/// is `target` (`gfx1100`, `gfx90a:sramecc+:xnack-`), as the HIP runtime
/// does when a fat binary has no code object for it.
pub fn compile_spirv(spirv: &[u8], target: &str) -> Result<CompiledSpirv, DriverError> {
    let library = std::env::var_os("OFFLOAD_LOADER_COMGR_LIBRARY")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let api = open(library).map_err(|e| DriverError::NoSpirvCompiler(e.to_string()))?;
    if api.version.0 < 3 {
        return Err(DriverError::NoSpirvCompiler(format!(
            "{} is comgr {}.{}, which has no SPIR-V action",
            api.path.display(),
            api.version.0,
            api.version.1
        )));
    }
    let isa = CString::new(format!("amdgcn-amd-amdhsa--{target}"))
        .map_err(|_| DriverError::BadName(target.into()))?;
    let code = Session::new(api).compile(spirv, &isa)?;
    Ok(CompiledSpirv {
        code,
        comgr: format!("{}.{}", api.version.0, api.version.1),
        library: api.path.clone(),
    })
}

/// The comgr objects one compilation creates, released when it ends.
struct Session {
    api: &'static Api,
    data: Vec<Handle>,
    sets: Vec<Handle>,
    infos: Vec<Handle>,
}

impl Session {
    fn new(api: &'static Api) -> Session {
        Session {
            api,
            data: Vec::new(),
            sets: Vec::new(),
            infos: Vec::new(),
        }
    }

    fn compile(&mut self, spirv: &[u8], isa: &CString) -> Result<Vec<u8>, DriverError> {
        let api = self.api;
        let input = self.set()?;
        let source = self.new_data(DATA_KIND_SPIRV)?;
        // SAFETY: comgr copies `spirv.len()` bytes from the slice; the name is
        // a NUL-terminated C string; both handles came from comgr.
        check("amd_comgr_set_data", unsafe {
            (api.set_data)(source, spirv.len(), spirv.as_ptr().cast())
        })?;
        check("amd_comgr_set_data_name", unsafe {
            (api.set_data_name)(source, c"offload-loader.spv".as_ptr())
        })?;
        // SAFETY: both handles came from comgr and are live.
        check("amd_comgr_data_set_add", unsafe {
            (api.data_set_add)(input, source)
        })?;
        let translate = self.info()?;
        let bitcode = self.action(
            "amd_comgr_do_action(TRANSLATE_SPIRV_TO_BC)",
            ACTION_TRANSLATE_SPIRV_TO_BC,
            translate,
            input,
        )?;
        let codegen = self.info()?;
        // SAFETY: a live action info and a NUL-terminated ISA name.
        check("amd_comgr_action_info_set_isa_name", unsafe {
            (api.set_isa_name)(codegen, isa.as_ptr())
        })?;
        // SAFETY: a live action info.
        check("amd_comgr_action_info_set_device_lib_linking", unsafe {
            (api.set_device_lib_linking)(codegen, true)
        })?;
        let relocatable = self.action(
            "amd_comgr_do_action(CODEGEN_BC_TO_RELOCATABLE)",
            ACTION_CODEGEN_BC_TO_RELOCATABLE,
            codegen,
            bitcode,
        )?;
        let executable = self.action(
            "amd_comgr_do_action(LINK_RELOCATABLE_TO_EXECUTABLE)",
            ACTION_LINK_RELOCATABLE_TO_EXECUTABLE,
            codegen,
            relocatable,
        )?;
        self.executable(executable)
    }

    /// The first executable of `set`, copied out.
    fn executable(&mut self, set: Handle) -> Result<Vec<u8>, DriverError> {
        let api = self.api;
        let mut data = Handle::default();
        // SAFETY: a live data set; comgr writes one handle, which the
        // session releases.
        check("amd_comgr_action_data_get_data", unsafe {
            (api.action_data_get_data)(set, DATA_KIND_EXECUTABLE, 0, &mut data)
        })?;
        self.data.push(data);
        let mut size = 0usize;
        // SAFETY: with a null buffer comgr writes only the size.
        check("amd_comgr_get_data", unsafe {
            (api.get_data)(data, &mut size, std::ptr::null_mut())
        })?;
        let mut code = vec![0u8; size];
        // SAFETY: the buffer holds `size` bytes, the size comgr gave.
        check("amd_comgr_get_data", unsafe {
            (api.get_data)(data, &mut size, code.as_mut_ptr().cast())
        })?;
        code.truncate(size);
        Ok(code)
    }

    /// Runs action `kind` (named `call` in errors) on `input` into a new
    /// data set.
    fn action(
        &mut self,
        call: &'static str,
        kind: u32,
        info: Handle,
        input: Handle,
    ) -> Result<Handle, DriverError> {
        let output = self.set()?;
        // SAFETY: live handles from comgr; comgr reads `input` and adds to `output`.
        check(call, unsafe {
            (self.api.do_action)(kind, info, input, output)
        })?;
        Ok(output)
    }

    fn new_data(&mut self, kind: u32) -> Result<Handle, DriverError> {
        let create = self.api.create_data;
        // SAFETY: comgr writes one handle, released with the session.
        let h = created("amd_comgr_create_data", |h| unsafe { create(kind, h) })?;
        self.data.push(h);
        Ok(h)
    }

    fn set(&mut self) -> Result<Handle, DriverError> {
        let create = self.api.create_data_set;
        // SAFETY: comgr writes one handle, destroyed with the session.
        let h = created("amd_comgr_create_data_set", |h| unsafe { create(h) })?;
        self.sets.push(h);
        Ok(h)
    }

    fn info(&mut self) -> Result<Handle, DriverError> {
        let create = self.api.create_action_info;
        // SAFETY: comgr writes one handle, destroyed with the session.
        let h = created("amd_comgr_create_action_info", |h| unsafe { create(h) })?;
        self.infos.push(h);
        Ok(h)
    }
}

/// A handle `create` (the comgr call `call`) writes.
fn created(
    call: &'static str,
    create: impl FnOnce(*mut Handle) -> Status,
) -> Result<Handle, DriverError> {
    let mut h = Handle::default();
    check(call, create(&mut h))?;
    Ok(h)
}

impl Drop for Session {
    fn drop(&mut self) {
        let api = self.api;
        // SAFETY: every handle came from comgr and is released once.
        unsafe {
            for &h in &self.data {
                (api.release_data)(h);
            }
            for &h in &self.sets {
                (api.destroy_data_set)(h);
            }
            for &h in &self.infos {
                (api.destroy_action_info)(h);
            }
        }
    }
}

fn check(call: &'static str, status: Status) -> Result<(), DriverError> {
    if status == 0 {
        Ok(())
    } else {
        Err(DriverError::Call {
            call,
            status: comgr_status(status),
        })
    }
}

/// `amd_comgr_status_t` by its name in amd_comgr.h.
fn comgr_status(status: Status) -> DriverStatus {
    let name = match status {
        1 => "AMD_COMGR_STATUS_ERROR",
        2 => "AMD_COMGR_STATUS_ERROR_INVALID_ARGUMENT",
        3 => "AMD_COMGR_STATUS_ERROR_OUT_OF_RESOURCES",
        _ => "an unknown amd_comgr_status_t",
    };
    DriverStatus::Comgr { status, name }
}
