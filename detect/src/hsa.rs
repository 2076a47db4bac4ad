//! AMD GPUs through the HSA runtime (`libhsa-runtime64.so.1`), opened with
//! `libloading`: never linked, so a machine without ROCm pays nothing.
//!
//! Facts from ROCR-Runtime `hsa.h` / `hsa_ext_amd.h`: handles are
//! `struct { uint64_t handle; }` passed by value; `HSA_AGENT_INFO_NAME` = 0
//! (char[64]), `HSA_AGENT_INFO_NODE` = 16 (u32), `HSA_AGENT_INFO_DEVICE` = 17
//! (u32, 1 = GPU); `HSA_ISA_INFO_NAME_LENGTH` = 0, `HSA_ISA_INFO_NAME` = 1
//! (e.g. `amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-`); symbol info
//! `VARIABLE_SIZE` = 9, `VARIABLE_ADDRESS` = 21, `KERNEL_OBJECT` = 22.

use std::ffi::{c_char, c_void, CStr};
use std::path::PathBuf;
use std::sync::Arc;

use offload_loader::select::DeviceTarget;
use offload_loader::target::TargetId;

use crate::{open_library, Backend, BackendReport, Device, Reason, Source, Status};

/// `hsa_status_t`.
pub type HsaStatus = u32;
/// `HSA_STATUS_SUCCESS`.
pub const SUCCESS: HsaStatus = 0;
/// `HSA_STATUS_INFO_BREAK`.
pub const INFO_BREAK: HsaStatus = 1;

const AGENT_INFO_NAME: u32 = 0;
const AGENT_INFO_NODE: u32 = 16;
const AGENT_INFO_DEVICE: u32 = 17;
const DEVICE_TYPE_GPU: u32 = 1;
const ISA_INFO_NAME_LENGTH: u32 = 0;
const ISA_INFO_NAME: u32 = 1;
pub(crate) const SYMBOL_INFO_VARIABLE_SIZE: u32 = 9;
pub(crate) const SYMBOL_INFO_VARIABLE_ADDRESS: u32 = 21;
pub(crate) const SYMBOL_INFO_KERNEL_OBJECT: u32 = 22;

/// The symbolic name of an HSA status (ROCR-Runtime hsa.h `hsa_status_t`).
pub fn status_name(status: HsaStatus) -> &'static str {
    match status {
        0x0 => "HSA_STATUS_SUCCESS",
        0x1 => "HSA_STATUS_INFO_BREAK",
        0x1000 => "HSA_STATUS_ERROR",
        0x1001 => "HSA_STATUS_ERROR_INVALID_ARGUMENT",
        0x1002 => "HSA_STATUS_ERROR_INVALID_QUEUE_CREATION",
        0x1003 => "HSA_STATUS_ERROR_INVALID_ALLOCATION",
        0x1004 => "HSA_STATUS_ERROR_INVALID_AGENT",
        0x1005 => "HSA_STATUS_ERROR_INVALID_REGION",
        0x1006 => "HSA_STATUS_ERROR_INVALID_SIGNAL",
        0x1007 => "HSA_STATUS_ERROR_INVALID_QUEUE",
        0x1008 => "HSA_STATUS_ERROR_OUT_OF_RESOURCES",
        0x1009 => "HSA_STATUS_ERROR_INVALID_PACKET_FORMAT",
        0x100A => "HSA_STATUS_ERROR_RESOURCE_FREE",
        0x100B => "HSA_STATUS_ERROR_NOT_INITIALIZED",
        0x100C => "HSA_STATUS_ERROR_REFCOUNT_OVERFLOW",
        0x100D => "HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS",
        0x100E => "HSA_STATUS_ERROR_INVALID_INDEX",
        0x100F => "HSA_STATUS_ERROR_INVALID_ISA",
        0x1010 => "HSA_STATUS_ERROR_INVALID_CODE_OBJECT",
        0x1011 => "HSA_STATUS_ERROR_INVALID_EXECUTABLE",
        0x1012 => "HSA_STATUS_ERROR_FROZEN_EXECUTABLE",
        0x1013 => "HSA_STATUS_ERROR_INVALID_SYMBOL_NAME",
        0x1014 => "HSA_STATUS_ERROR_VARIABLE_ALREADY_DEFINED",
        0x1015 => "HSA_STATUS_ERROR_VARIABLE_UNDEFINED",
        0x1016 => "HSA_STATUS_ERROR_EXCEPTION",
        0x1017 => "HSA_STATUS_ERROR_INVALID_ISA_NAME",
        0x1018 => "HSA_STATUS_ERROR_INVALID_CODE_SYMBOL",
        0x1019 => "HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL",
        0x1020 => "HSA_STATUS_ERROR_INVALID_FILE",
        0x1021 => "HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER",
        0x1022 => "HSA_STATUS_ERROR_INVALID_CACHE",
        0x1023 => "HSA_STATUS_ERROR_INVALID_WAVEFRONT",
        0x1024 => "HSA_STATUS_ERROR_INVALID_SIGNAL_GROUP",
        0x1025 => "HSA_STATUS_ERROR_INVALID_RUNTIME_STATE",
        0x1026 => "HSA_STATUS_ERROR_FATAL",
        _ => "unknown HSA status",
    }
}

type AgentCallback = unsafe extern "C" fn(agent: u64, data: *mut c_void) -> HsaStatus;

/// The HSA entry points this crate uses, resolved once.
pub(crate) struct Api {
    pub path: PathBuf,
    // Kept loaded for the life of the process: the runtime starts threads.
    _library: libloading::Library,
    pub init: unsafe extern "C" fn() -> HsaStatus,
    pub status_string: unsafe extern "C" fn(HsaStatus, *mut *const c_char) -> HsaStatus,
    pub iterate_agents: unsafe extern "C" fn(AgentCallback, *mut c_void) -> HsaStatus,
    pub agent_get_info: unsafe extern "C" fn(u64, u32, *mut c_void) -> HsaStatus,
    pub agent_iterate_isas: unsafe extern "C" fn(u64, AgentCallback, *mut c_void) -> HsaStatus,
    pub isa_get_info_alt: unsafe extern "C" fn(u64, u32, *mut c_void) -> HsaStatus,
    pub reader_create_from_memory:
        unsafe extern "C" fn(*const c_void, usize, *mut u64) -> HsaStatus,
    pub reader_destroy: unsafe extern "C" fn(u64) -> HsaStatus,
    pub executable_create_alt: unsafe extern "C" fn(u32, u32, *const c_char, *mut u64) -> HsaStatus,
    pub executable_load_agent_code_object:
        unsafe extern "C" fn(u64, u64, u64, *const c_char, *mut u64) -> HsaStatus,
    pub executable_freeze: unsafe extern "C" fn(u64, *const c_char) -> HsaStatus,
    pub executable_get_symbol_by_name:
        unsafe extern "C" fn(u64, *const c_char, *const u64, *mut u64) -> HsaStatus,
    pub executable_symbol_get_info: unsafe extern "C" fn(u64, u32, *mut c_void) -> HsaStatus,
    pub executable_destroy: unsafe extern "C" fn(u64) -> HsaStatus,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HSA runtime at {}", self.path.display())
    }
}

impl Api {
    fn open(explicit: Option<PathBuf>) -> Result<Api, Reason> {
        let candidates = match explicit {
            Some(p) => vec![p],
            None => vec![
                "libhsa-runtime64.so.1".into(),
                "libhsa-runtime64.so".into(),
                "/opt/rocm/lib/libhsa-runtime64.so.1".into(),
            ],
        };
        let (lib, path) = open_library(&candidates)?;
        Ok(Api {
            init: resolve!(lib, path, "hsa_init"),
            status_string: resolve!(lib, path, "hsa_status_string"),
            iterate_agents: resolve!(lib, path, "hsa_iterate_agents"),
            agent_get_info: resolve!(lib, path, "hsa_agent_get_info"),
            agent_iterate_isas: resolve!(lib, path, "hsa_agent_iterate_isas"),
            isa_get_info_alt: resolve!(lib, path, "hsa_isa_get_info_alt"),
            reader_create_from_memory: resolve!(
                lib,
                path,
                "hsa_code_object_reader_create_from_memory"
            ),
            reader_destroy: resolve!(lib, path, "hsa_code_object_reader_destroy"),
            executable_create_alt: resolve!(lib, path, "hsa_executable_create_alt"),
            executable_load_agent_code_object: resolve!(
                lib,
                path,
                "hsa_executable_load_agent_code_object"
            ),
            executable_freeze: resolve!(lib, path, "hsa_executable_freeze"),
            executable_get_symbol_by_name: resolve!(lib, path, "hsa_executable_get_symbol_by_name"),
            executable_symbol_get_info: resolve!(lib, path, "hsa_executable_symbol_get_info"),
            executable_destroy: resolve!(lib, path, "hsa_executable_destroy"),
            path,
            _library: lib,
        })
    }

    /// `HSA_STATUS_ERROR_OUT_OF_RESOURCES (0x1008): <the runtime's string>`.
    pub fn describe(&self, status: HsaStatus) -> String {
        let mut text: *const c_char = std::ptr::null();
        // SAFETY: `status_string` writes a pointer to a static string it owns.
        let ok = unsafe { (self.status_string)(status, &mut text) } == SUCCESS;
        let detail = if ok && !text.is_null() {
            // SAFETY: the runtime returned a NUL-terminated static string.
            unsafe { CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned()
        } else {
            String::new()
        };
        let name = status_name(status);
        // The runtime's own string usually repeats the name: keep it once.
        let detail = detail
            .strip_prefix(name)
            .map(|d| d.trim_start_matches([':', ' ']))
            .unwrap_or(&detail);
        format!("{name} ({status:#x}): {detail}")
    }
}

/// Detection through HSA, to run on a detection thread.
///
/// The library is opened here, on the calling thread: registration may run in
/// a constructor of a library being `dlopen`ed, under the dynamic loader's
/// lock, which only this thread may take again. The returned closure, run on
/// the detection thread under a time limit, initialises the driver and
/// enumerates devices.
pub(crate) fn detect(
    library: Option<PathBuf>,
) -> impl FnOnce() -> (Vec<Device>, BackendReport) + Send {
    let api = Api::open(library).map(Arc::new);
    move || match api.map_err(|r| (Status::Unavailable, r)).and_then(run) {
        Ok(devices) => {
            let report = BackendReport {
                backend: Backend::Hsa,
                status: Status::Found(devices.len()),
                reason: None,
            };
            (devices, report)
        }
        Err((status, reason)) => (
            Vec::new(),
            BackendReport {
                backend: Backend::Hsa,
                status,
                reason: Some(reason),
            },
        ),
    }
}

fn run(api: Arc<Api>) -> Result<Vec<Device>, (Status, Reason)> {
    // SAFETY: `hsa_init` takes no arguments; it may be called more than once
    // (the runtime reference-counts it), and is never shut down here because
    // loaded images need the runtime.
    let status = unsafe { (api.init)() };
    if status != SUCCESS {
        return Err((
            Status::Unavailable,
            Reason::InitFailed {
                library: api.path.clone(),
                call: "hsa_init",
                status: api.describe(status),
            },
        ));
    }
    let mut agents: Vec<u64> = Vec::new();
    // SAFETY: `collect_agent` matches `AgentCallback` and `agents` outlives the call.
    let status =
        unsafe { (api.iterate_agents)(collect_agent, (&mut agents as *mut Vec<u64>).cast()) };
    if status != SUCCESS && status != INFO_BREAK {
        return Err((
            Status::Unavailable,
            Reason::CallFailed {
                call: "hsa_iterate_agents",
                status: api.describe(status),
            },
        ));
    }
    let mut devices = Vec::new();
    for agent in agents {
        let mut kind = 0u32;
        // SAFETY: DEVICE writes a u32.
        if unsafe { (api.agent_get_info)(agent, AGENT_INFO_DEVICE, (&mut kind as *mut u32).cast()) }
            != SUCCESS
            || kind != DEVICE_TYPE_GPU
        {
            continue;
        }
        let mut name = [0u8; 64];
        // SAFETY: NAME writes at most 64 bytes.
        unsafe { (api.agent_get_info)(agent, AGENT_INFO_NAME, name.as_mut_ptr().cast()) };
        let mut node = 0u32;
        // SAFETY: NODE writes a u32.
        unsafe { (api.agent_get_info)(agent, AGENT_INFO_NODE, (&mut node as *mut u32).cast()) };
        let isas = isa_names(&api, agent);
        let Some(target) = isas.first().and_then(|n| target_of_isa(n)) else {
            tracing::warn!(?isas, "HSA GPU agent with no ISA this crate knows; skipped");
            continue;
        };
        let name = CStr::from_bytes_until_nul(&name)
            .ok()
            .map(|c| c.to_string_lossy().into_owned())
            .filter(|n| !n.is_empty());
        devices.push(Device {
            index: devices.len(),
            target: DeviceTarget::Amdgpu(target),
            source: Source::Hsa,
            name,
            ordinal: node,
            pci_bus_id: None,
            driver_version: None,
            isas,
            unknown_features: false,
            handle: agent,
            driver: crate::driver::DriverRef::Hsa(api.clone()),
        });
    }
    if devices.is_empty() {
        return Err((
            Status::NoDevice,
            Reason::NoGpu {
                library: api.path.clone(),
            },
        ));
    }
    Ok(devices)
}

unsafe extern "C" fn collect_agent(agent: u64, data: *mut c_void) -> HsaStatus {
    // SAFETY: `data` is the `Vec<u64>` passed to `hsa_iterate_agents`.
    unsafe { &mut *data.cast::<Vec<u64>>() }.push(agent);
    SUCCESS
}

fn isa_names(api: &Api, agent: u64) -> Vec<String> {
    let mut isas: Vec<u64> = Vec::new();
    // SAFETY: `collect_agent` pushes each handle (ISAs are u64 handles too).
    unsafe { (api.agent_iterate_isas)(agent, collect_agent, (&mut isas as *mut Vec<u64>).cast()) };
    isas.into_iter()
        .filter_map(|isa| {
            let mut len = 0u32;
            // SAFETY: NAME_LENGTH writes a u32.
            if unsafe {
                (api.isa_get_info_alt)(isa, ISA_INFO_NAME_LENGTH, (&mut len as *mut u32).cast())
            } != SUCCESS
            {
                return None;
            }
            // The length may or may not count the NUL: leave room for one.
            let mut name = vec![0u8; (len as usize).min(4096) + 1];
            // SAFETY: NAME writes `len` bytes, which fit.
            if unsafe { (api.isa_get_info_alt)(isa, ISA_INFO_NAME, name.as_mut_ptr().cast()) }
                != SUCCESS
            {
                return None;
            }
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            Some(String::from_utf8_lossy(&name[..end]).into_owned())
        })
        .collect()
}

/// `amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-` → the target ID after the last `--`.
pub fn target_of_isa(isa: &str) -> Option<TargetId> {
    let id = isa.rsplit_once("--").map_or(isa, |(_, id)| id);
    TargetId::parse(id).ok()
}
