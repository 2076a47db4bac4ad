//! AMD GPUs through the HSA runtime (ROCR, `libhsa-runtime64.so.1`), opened
//! at run time with `libloading`: never linked, so a machine without ROCm
//! pays one failed `dlopen`.
//!
//! Library: `OFFLOAD_LOADER_HSA_LIBRARY` if set (and only it), otherwise
//! `libhsa-runtime64.so.1`, `libhsa-runtime64.so`,
//! `/opt/rocm/lib/libhsa-runtime64.so.1`. Every symbol this crate uses,
//! detection and loading alike, is resolved once, when the library is first
//! opened; a missing one makes the backend unavailable.
//!
//! Detection: `hsa_init`; `hsa_iterate_agents`; for each agent whose
//! `HSA_AGENT_INFO_DEVICE` is GPU: its node (`HSA_AGENT_INFO_NODE`), its
//! marketing name (`HSA_AMD_AGENT_INFO_PRODUCT_NAME`, else
//! `HSA_AGENT_INFO_NAME`), its UUID, and its ISAs (`hsa_agent_iterate_isas`,
//! `hsa_isa_get_info_alt` `NAME_LENGTH` / `NAME`): the first is the agent's
//! own, `amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-`, which gives the full
//! target ID; the generic one that may follow is kept too. Each GPU is
//! returned as a [`Gpu`] record with the [`Driver`] that loads images on it
//! ([`load`]).
//!
//! The runtime stays initialised when it reports a GPU, because images are
//! loaded through it later; when it reports none,
//! `hsa_shut_down` balances the `hsa_init`. `ROCR_VISIBLE_DEVICES` and
//! `HSA_OVERRIDE_GFX_VERSION` are applied by the runtime itself.

mod load;
mod sys;

use std::ffi::{c_char, c_void, CStr};
use std::path::PathBuf;

use offload_loader::target::TargetId;

pub(crate) use load::{Driver, Loaded};
use sys::{Agent, STATUS_SUCCESS};

use crate::library::{self, resolve, Cache};
use crate::report::{Backend, BackendReport, DriverStatus, Reason, Status};

const DEFAULT_CANDIDATES: [&str; 3] = [
    "libhsa-runtime64.so.1",
    "libhsa-runtime64.so",
    "/opt/rocm/lib/libhsa-runtime64.so.1",
];

/// The HSA entry points this crate uses, resolved once per library.
pub(crate) struct Api {
    path: PathBuf,
    init: sys::Init,
    shut_down: sys::ShutDown,
    status_string: sys::StatusString,
    iterate_agents: sys::IterateAgents,
    agent_get_info: sys::AgentGetInfo,
    agent_iterate_isas: sys::AgentIterateIsas,
    isa_get_info_alt: sys::IsaGetInfoAlt,
    reader_create_from_memory: sys::CodeObjectReaderCreateFromMemory,
    reader_destroy: sys::CodeObjectReaderDestroy,
    executable_create_alt: sys::ExecutableCreateAlt,
    executable_load_agent_code_object: sys::ExecutableLoadAgentCodeObject,
    executable_freeze: sys::ExecutableFreeze,
    executable_get_symbol_by_name: sys::ExecutableGetSymbolByName,
    executable_symbol_get_info: sys::ExecutableSymbolGetInfo,
    executable_destroy: sys::ExecutableDestroy,
    amd_memory_lock: sys::AmdMemoryLock,
    memory_copy: sys::MemoryCopy,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HSA runtime at {}", self.path.display())
    }
}

static APIS: Cache<Api> = Cache::new();

/// The HSA runtime at `library` (or the default names), opened and resolved
/// on the first call for that path, on the calling thread.
pub(crate) fn open(library: Option<PathBuf>) -> Result<&'static Api, Reason> {
    APIS.get_or_open(library, |library| {
        let (lib, path) = library::open(library, &DEFAULT_CANDIDATES)?;
        Ok(Api {
            init: resolve!(lib, path, "hsa_init"),
            shut_down: resolve!(lib, path, "hsa_shut_down"),
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
            amd_memory_lock: resolve!(lib, path, "hsa_amd_memory_lock"),
            memory_copy: resolve!(lib, path, "hsa_memory_copy"),
            path,
        })
    })
}

impl Api {
    /// The status with the runtime's own description (`hsa_status_string`).
    pub(crate) fn status(&self, status: sys::Status) -> DriverStatus {
        let mut text: *const c_char = std::ptr::null();
        // SAFETY: `hsa_status_string` writes a pointer to a static string it
        // owns (ROCR's hsa.cpp needs no initialised runtime for it).
        let ok = unsafe { (self.status_string)(status, &mut text) } == STATUS_SUCCESS;
        let text = if ok && !text.is_null() {
            // SAFETY: the runtime returned a NUL-terminated static string.
            unsafe { CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned()
        } else {
            String::new()
        };
        let name = sys::status_name(status);
        // ROCR's strings start with the name: keep it once.
        let message = text
            .strip_prefix(name)
            .map(|rest| rest.trim_start_matches([':', ' ']))
            .unwrap_or(&text)
            .to_string();
        DriverStatus::Hsa {
            status,
            name,
            message,
        }
    }
}

/// What the runtime reports about one GPU agent.
#[derive(Debug)]
pub(crate) struct Gpu {
    /// The full target ID of the agent's own ISA.
    pub(crate) target: TargetId,
    /// `HSA_AGENT_INFO_NODE`, the KFD node.
    pub(crate) node: u32,
    /// `HSA_AMD_AGENT_INFO_PRODUCT_NAME`, else `HSA_AGENT_INFO_NAME`.
    pub(crate) name: Option<String>,
    /// `HSA_AMD_AGENT_INFO_UUID`, when it is a real one (not `GPU-XX`).
    pub(crate) uuid: Option<String>,
    /// The ISA names, the agent's own first.
    pub(crate) isas: Vec<String>,
    /// What loads images on it.
    pub(crate) driver: Driver,
}

/// Detection through an opened runtime, run on a detection thread.
pub(crate) fn detect(api: &'static Api) -> (Vec<Gpu>, BackendReport) {
    BackendReport::of_enumeration(Backend::Hsa, enumerate(api))
}

fn enumerate(api: &'static Api) -> Result<Vec<Gpu>, (Status, Reason)> {
    // SAFETY: `hsa_init` takes no arguments and is reference-counted by the
    // runtime; it is balanced below when no GPU is found.
    let status = unsafe { (api.init)() };
    if status != STATUS_SUCCESS {
        return Err((
            Status::Unavailable,
            Reason::InitFailed {
                library: api.path.clone(),
                call: "hsa_init",
                status: api.status(status),
            },
        ));
    }
    let result = gpu_devices(api);
    if !matches!(&result, Ok(devices) if !devices.is_empty()) {
        // SAFETY: balances the successful `hsa_init` above; nothing of this
        // runtime is in use (no device was returned).
        let status = unsafe { (api.shut_down)() };
        if status != STATUS_SUCCESS {
            tracing::debug!(status, "hsa_shut_down failed");
        }
    }
    result
}

fn gpu_devices(api: &'static Api) -> Result<Vec<Gpu>, (Status, Reason)> {
    let mut agents: Vec<Agent> = Vec::new();
    // SAFETY: `push_agent` has the `AgentCallback` signature and `agents`
    // outlives the call, which invokes the callback synchronously.
    let status =
        unsafe { (api.iterate_agents)(push_agent, (&mut agents as *mut Vec<Agent>).cast()) };
    if status != STATUS_SUCCESS && status != sys::STATUS_INFO_BREAK {
        return Err((
            Status::Unavailable,
            Reason::CallFailed {
                call: "hsa_iterate_agents",
                status: api.status(status),
            },
        ));
    }
    let mut devices = Vec::new();
    let mut unknown = Vec::new();
    for agent in agents {
        let Some(kind) = info_u32(api, agent, sys::AGENT_INFO_DEVICE) else {
            continue;
        };
        if kind != sys::DEVICE_TYPE_GPU {
            continue;
        }
        let isas = isa_names(api, agent);
        let Some(target) = isas.iter().find_map(|isa| specific_target(isa)) else {
            tracing::warn!(?isas, "HSA GPU agent with no ISA LLVM 22 knows; left out");
            unknown.push(isas.first().cloned().unwrap_or_else(|| "no ISA".into()));
            continue;
        };
        devices.push(Gpu {
            target,
            node: info_u32(api, agent, sys::AGENT_INFO_NODE).unwrap_or(0),
            name: info_string(api, agent, sys::AMD_AGENT_INFO_PRODUCT_NAME)
                .or_else(|| info_string(api, agent, sys::AGENT_INFO_NAME)),
            uuid: info_string(api, agent, sys::AMD_AGENT_INFO_UUID)
                .filter(|u| u.starts_with("GPU-") && u != "GPU-XX"),
            isas,
            driver: Driver { api, agent },
        });
    }
    if devices.is_empty() {
        let reason = if unknown.is_empty() {
            Reason::NoGpuAgent {
                library: api.path.clone(),
            }
        } else {
            Reason::UnknownProcessor(format!("HSA GPU agents report {}", unknown.join(", ")))
        };
        return Err((Status::NoDevice, reason));
    }
    Ok(devices)
}

unsafe extern "C" fn push_agent(agent: Agent, data: *mut c_void) -> sys::Status {
    // SAFETY: `data` is the `Vec<Agent>` handed to `hsa_iterate_agents`, which
    // calls back on the calling thread while that vector is borrowed for it.
    unsafe { &mut *data.cast::<Vec<Agent>>() }.push(agent);
    STATUS_SUCCESS
}

unsafe extern "C" fn push_isa(isa: sys::Isa, data: *mut c_void) -> sys::Status {
    // SAFETY: as `push_agent`, for the `Vec<Isa>` of `hsa_agent_iterate_isas`.
    unsafe { &mut *data.cast::<Vec<sys::Isa>>() }.push(isa);
    STATUS_SUCCESS
}

fn info_u32(api: &Api, agent: Agent, attribute: u32) -> Option<u32> {
    let mut value = 0u32;
    // SAFETY: the attributes asked for with this helper are `uint32_t` (or a
    // C enum of that size), written to a `u32` that outlives the call.
    let status = unsafe { (api.agent_get_info)(agent, attribute, (&mut value as *mut u32).cast()) };
    (status == STATUS_SUCCESS).then_some(value)
}

/// A character-array attribute of at most 64 bytes (hsa.h: `NAME` and
/// `PRODUCT_NAME` are `char[64]`, `UUID` at most 21 with its NUL); `None` when
/// the runtime does not have it (a vendor extension on another runtime) or it
/// is empty.
fn info_string(api: &Api, agent: Agent, attribute: u32) -> Option<String> {
    // Twice the largest size: the NUL at the end stays whatever is written.
    let mut buffer = [0u8; 129];
    // SAFETY: the attributes asked for with this helper are char arrays of at
    // most 64 bytes, which fit.
    let status = unsafe { (api.agent_get_info)(agent, attribute, buffer.as_mut_ptr().cast()) };
    if status != STATUS_SUCCESS {
        return None;
    }
    let text = CStr::from_bytes_until_nul(&buffer).ok()?;
    Some(text.to_string_lossy().trim().to_string()).filter(|s| !s.is_empty())
}

fn isa_names(api: &Api, agent: Agent) -> Vec<String> {
    let mut isas: Vec<sys::Isa> = Vec::new();
    // SAFETY: `push_isa` has the `IsaCallback` signature and `isas` outlives
    // the synchronous iteration.
    let status = unsafe {
        (api.agent_iterate_isas)(agent, push_isa, (&mut isas as *mut Vec<sys::Isa>).cast())
    };
    if status != STATUS_SUCCESS && status != sys::STATUS_INFO_BREAK {
        tracing::warn!(status, "hsa_agent_iterate_isas failed");
    }
    isas.into_iter()
        .filter_map(|isa| {
            let mut len = 0u32;
            // SAFETY: NAME_LENGTH is a `uint32_t`.
            let status = unsafe {
                (api.isa_get_info_alt)(
                    isa,
                    sys::ISA_INFO_NAME_LENGTH,
                    (&mut len as *mut u32).cast(),
                )
            };
            if status != STATUS_SUCCESS {
                return None;
            }
            // hsa.h says the length excludes the NUL, ROCR counts it: leave
            // room for one either way.
            let mut name = vec![0u8; (len as usize).min(4096) + 1];
            // SAFETY: NAME writes the name (at most `len` bytes, plus the NUL
            // when `len` excludes it), which fits in `len + 1` bytes.
            let status = unsafe {
                (api.isa_get_info_alt)(isa, sys::ISA_INFO_NAME, name.as_mut_ptr().cast())
            };
            if status != STATUS_SUCCESS {
                return None;
            }
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            Some(String::from_utf8_lossy(&name[..end]).into_owned())
        })
        .collect()
}

/// The target ID in an HSA ISA name, `amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-`
/// → `gfx90a:sramecc+:xnack-` (the part after the triple's empty environment).
fn target_of_isa(isa: &str) -> Option<TargetId> {
    let id = isa
        .strip_prefix("amdgcn-amd-amdhsa--")
        .or_else(|| isa.rsplit_once("--").map(|(_, id)| id))?;
    TargetId::parse(id).ok()
}

/// The target of a specific (not generic) processor's ISA.
fn specific_target(isa: &str) -> Option<TargetId> {
    target_of_isa(isa).filter(|t| !t.processor.is_generic())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sys::status_name;

    #[test]
    fn isa_names_give_targets() {
        let t = |s| target_of_isa(s).map(|t| t.to_string());
        assert_eq!(
            t("amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-").as_deref(),
            Some("gfx90a:sramecc+:xnack-")
        );
        assert_eq!(
            t("amdgcn-amd-amdhsa--gfx11-generic").as_deref(),
            Some("gfx11-generic")
        );
        assert_eq!(specific_target("amdgcn-amd-amdhsa--gfx11-generic"), None);
        assert_eq!(t("amdgcn-amd-amdhsa--gfx9999"), None);
        assert_eq!(t("gfx90a"), None);
    }

    #[test]
    fn status_names() {
        assert_eq!(status_name(0x1008), "HSA_STATUS_ERROR_OUT_OF_RESOURCES");
        assert_eq!(status_name(0x1017), "HSA_STATUS_ERROR_INVALID_ISA_NAME");
        assert_eq!(status_name(0x1026), "HSA_STATUS_ERROR_FATAL");
        assert_eq!(status_name(0x2000), "HSA_STATUS_UNKNOWN");
    }
}
