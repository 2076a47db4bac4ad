//! Raw HSA types, values and C signatures, as ROCR-Runtime declares them in
//! `runtime/hsa-runtime/inc/hsa.h` and `hsa_ext_amd.h` (checked against
//! ROCm/ROCR-Runtime c7785a6, 2024-10). C enums are `int`-sized; the values
//! used here are passed as `u32`.

use std::ffi::{c_char, c_void};

/// `hsa_status_t`.
pub type Status = u32;
/// `HSA_STATUS_SUCCESS`.
pub const STATUS_SUCCESS: Status = 0x0;
/// `HSA_STATUS_INFO_BREAK`: a callback stopped an iteration early.
pub const STATUS_INFO_BREAK: Status = 0x1;

/// `hsa_agent_t`: `struct { uint64_t handle; }`, passed by value.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Agent {
    pub handle: u64,
}

/// `hsa_isa_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Isa {
    pub handle: u64,
}

/// `hsa_code_object_reader_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeObjectReader {
    pub handle: u64,
}

/// `hsa_executable_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Executable {
    pub handle: u64,
}

/// `hsa_executable_symbol_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecutableSymbol {
    pub handle: u64,
}

/// `hsa_loaded_code_object_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadedCodeObject {
    pub handle: u64,
}

/// `hsa_agent_info_t` `HSA_AGENT_INFO_NAME` = 0: `char[64]`, e.g. `gfx90a`.
pub const AGENT_INFO_NAME: u32 = 0;
/// `HSA_AGENT_INFO_NODE` = 16: `uint32_t`, the KFD topology node.
pub const AGENT_INFO_NODE: u32 = 16;
/// `HSA_AGENT_INFO_DEVICE` = 17: `hsa_device_type_t`.
pub const AGENT_INFO_DEVICE: u32 = 17;
/// `hsa_amd_agent_info_t` `HSA_AMD_AGENT_INFO_PRODUCT_NAME` = 0xA009:
/// `char[64]`, the marketing name, e.g. `AMD Instinct MI210`.
pub const AMD_AGENT_INFO_PRODUCT_NAME: u32 = 0xA009;
/// `HSA_AMD_AGENT_INFO_UUID` = 0xA011: at most 21 chars with the NUL,
/// `GPU-<16 hex digits>`, or `GPU-XX` when the device has none.
pub const AMD_AGENT_INFO_UUID: u32 = 0xA011;
/// `hsa_device_type_t` `HSA_DEVICE_TYPE_GPU` = 1 (CPU 0, DSP 2, AIE 3).
pub const DEVICE_TYPE_GPU: u32 = 1;

/// `hsa_isa_info_t` `HSA_ISA_INFO_NAME_LENGTH` = 0: `uint32_t`. hsa.h says it
/// excludes the NUL; ROCR's `Isa::GetInfo` returns `size() + 1`.
pub const ISA_INFO_NAME_LENGTH: u32 = 0;
/// `HSA_ISA_INFO_NAME` = 1: the name, e.g. `amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-`.
pub const ISA_INFO_NAME: u32 = 1;

/// `hsa_executable_symbol_info_t` `HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE`
/// = 9: `uint32_t`.
pub const SYMBOL_INFO_VARIABLE_SIZE: u32 = 9;
/// `HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS` = 21: `uint64_t`.
pub const SYMBOL_INFO_VARIABLE_ADDRESS: u32 = 21;
/// `HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT` = 22: `uint64_t`, the handle a
/// dispatch packet takes.
pub const SYMBOL_INFO_KERNEL_OBJECT: u32 = 22;

/// `hsa_profile_t` `HSA_PROFILE_FULL` = 1 (BASE 0). HIP's HSA path, IREE's
/// HSA driver and ROCR's samples create every executable with the full profile
/// and the default rounding mode, whatever the agent's profile.
pub const PROFILE_FULL: u32 = 1;
/// `hsa_default_float_rounding_mode_t` `..._DEFAULT` = 0 (ZERO 1, NEAR 2).
pub const ROUNDING_MODE_DEFAULT: u32 = 0;

/// The callback `hsa_iterate_agents` takes.
pub type AgentCallback = unsafe extern "C" fn(agent: Agent, data: *mut c_void) -> Status;
/// The callback `hsa_agent_iterate_isas` takes.
pub type IsaCallback = unsafe extern "C" fn(isa: Isa, data: *mut c_void) -> Status;

pub type Init = unsafe extern "C" fn() -> Status;
pub type ShutDown = unsafe extern "C" fn() -> Status;
pub type StatusString = unsafe extern "C" fn(Status, *mut *const c_char) -> Status;
pub type IterateAgents = unsafe extern "C" fn(AgentCallback, *mut c_void) -> Status;
pub type AgentGetInfo = unsafe extern "C" fn(Agent, u32, *mut c_void) -> Status;
pub type AgentIterateIsas = unsafe extern "C" fn(Agent, IsaCallback, *mut c_void) -> Status;
pub type IsaGetInfoAlt = unsafe extern "C" fn(Isa, u32, *mut c_void) -> Status;
pub type CodeObjectReaderCreateFromMemory =
    unsafe extern "C" fn(*const c_void, usize, *mut CodeObjectReader) -> Status;
pub type CodeObjectReaderDestroy = unsafe extern "C" fn(CodeObjectReader) -> Status;
pub type ExecutableCreateAlt =
    unsafe extern "C" fn(u32, u32, *const c_char, *mut Executable) -> Status;
pub type ExecutableLoadAgentCodeObject = unsafe extern "C" fn(
    Executable,
    Agent,
    CodeObjectReader,
    *const c_char,
    *mut LoadedCodeObject,
) -> Status;
pub type ExecutableFreeze = unsafe extern "C" fn(Executable, *const c_char) -> Status;
pub type ExecutableGetSymbolByName =
    unsafe extern "C" fn(Executable, *const c_char, *const Agent, *mut ExecutableSymbol) -> Status;
pub type ExecutableSymbolGetInfo =
    unsafe extern "C" fn(ExecutableSymbol, u32, *mut c_void) -> Status;
pub type ExecutableDestroy = unsafe extern "C" fn(Executable) -> Status;
/// `hsa_amd_memory_lock(host_ptr, size, agents, num_agent, agent_ptr)`
/// (hsa_ext_amd.h): pins host memory and gives the address the agents
/// reach it at.
pub type AmdMemoryLock =
    unsafe extern "C" fn(*mut c_void, usize, *mut Agent, i32, *mut *mut c_void) -> Status;
/// `hsa_memory_copy(dst, src, size)` (hsa.h).
pub type MemoryCopy = unsafe extern "C" fn(*mut c_void, *const c_void, usize) -> Status;

/// The symbolic name of a status (hsa.h `hsa_status_t`).
pub fn status_name(status: Status) -> &'static str {
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
        _ => "HSA_STATUS_UNKNOWN",
    }
}
