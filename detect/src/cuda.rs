//! NVIDIA GPUs through the CUDA driver (`libcuda.so.1`), opened at run time
//! with `libloading`.
//!
//! Library: `OFFLOAD_LOADER_CUDA_LIBRARY` if set (and only it), otherwise
//! `libcuda.so.1`, `libcuda.so`. Detection does what LLVM's `nvptx-arch`
//! (clang/tools/offload-arch/NVPTXArch.cpp) does: `cuInit(0)`
//! (`CUDA_ERROR_NO_DEVICE` = 100 means no device, not a failure),
//! `cuDeviceGetCount`, `cuDeviceGet`, and the compute capability from
//! attributes 75/76; plus the name, the PCI bus ID and `cuDriverGetVersion`
//! (1000 × major + 10 × minor), which bounds the PTX ISA the driver can JIT.
//! `CUDA_VISIBLE_DEVICES` is applied by the driver inside `cuInit`. Each
//! device is returned as a [`Gpu`] record with the [`Driver`] that loads
//! images on it ([`module`]).

mod module;
mod results;
mod sys;

use std::ffi::{c_char, c_int, CStr};
use std::path::PathBuf;

use offload_loader::select::DeviceTarget;
use offload_loader::target::{nvptx::max_ptx_for_driver, ComputeCapability};

pub(crate) use module::{Driver, Loaded};
use sys::{CuResult, SUCCESS};

use crate::library::{self, resolve, Cache};
use crate::report::{Backend, BackendReport, DriverStatus, Reason, Status};

const DEFAULT_CANDIDATES: [&str; 2] = ["libcuda.so.1", "libcuda.so"];

/// The CUDA driver entry points this crate uses, resolved once per library.
pub(crate) struct Api {
    path: PathBuf,
    init: sys::Init,
    driver_get_version: sys::DriverGetVersion,
    device_get_count: sys::DeviceGetCount,
    device_get: sys::DeviceGet,
    device_get_attribute: sys::DeviceGetAttribute,
    device_get_name: sys::DeviceGetString,
    device_get_pci_bus_id: sys::DeviceGetString,
    get_error_string: sys::GetErrorText,
    get_error_name: sys::GetErrorText,
    primary_ctx_retain: sys::PrimaryCtxRetain,
    primary_ctx_release: sys::PrimaryCtxRelease,
    ctx_push_current: sys::CtxPushCurrent,
    ctx_pop_current: sys::CtxPopCurrent,
    module_load_data: sys::ModuleLoadData,
    module_get_function: sys::ModuleGetFunction,
    module_get_global: sys::ModuleGetGlobal,
    module_unload: sys::ModuleUnload,
    link_create: sys::LinkCreate,
    link_add_data: sys::LinkAddData,
    link_complete: sys::LinkComplete,
    link_destroy: sys::LinkDestroy,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CUDA driver at {}", self.path.display())
    }
}

static APIS: Cache<Api> = Cache::new();

/// The CUDA driver at `library` (or the default names), opened and resolved
/// on the first call for that path, on the calling thread.
pub(crate) fn open(library: Option<PathBuf>) -> Result<&'static Api, Reason> {
    APIS.get_or_open(library, |library| {
        let (lib, path) = library::open(library, &DEFAULT_CANDIDATES)?;
        Ok(Api {
            init: resolve!(lib, path, "cuInit"),
            driver_get_version: resolve!(lib, path, "cuDriverGetVersion"),
            device_get_count: resolve!(lib, path, "cuDeviceGetCount"),
            device_get: resolve!(lib, path, "cuDeviceGet"),
            device_get_attribute: resolve!(lib, path, "cuDeviceGetAttribute"),
            device_get_name: resolve!(lib, path, "cuDeviceGetName"),
            device_get_pci_bus_id: resolve!(lib, path, "cuDeviceGetPCIBusId"),
            get_error_string: resolve!(lib, path, "cuGetErrorString"),
            get_error_name: resolve!(lib, path, "cuGetErrorName"),
            primary_ctx_retain: resolve!(lib, path, "cuDevicePrimaryCtxRetain"),
            primary_ctx_release: resolve!(lib, path, "cuDevicePrimaryCtxRelease_v2"),
            ctx_push_current: resolve!(lib, path, "cuCtxPushCurrent_v2"),
            ctx_pop_current: resolve!(lib, path, "cuCtxPopCurrent_v2"),
            module_load_data: resolve!(lib, path, "cuModuleLoadData"),
            module_get_function: resolve!(lib, path, "cuModuleGetFunction"),
            module_get_global: resolve!(lib, path, "cuModuleGetGlobal_v2"),
            module_unload: resolve!(lib, path, "cuModuleUnload"),
            link_create: resolve!(lib, path, "cuLinkCreate_v2"),
            link_add_data: resolve!(lib, path, "cuLinkAddData_v2"),
            link_complete: resolve!(lib, path, "cuLinkComplete"),
            link_destroy: resolve!(lib, path, "cuLinkDestroy"),
            path,
        })
    })
}

impl Api {
    /// The result with the driver's own name and description.
    pub(crate) fn status(&self, result: CuResult) -> DriverStatus {
        let text = |f: sys::GetErrorText, unknown: &str| {
            let mut p: *const c_char = std::ptr::null();
            // SAFETY: writes a pointer to a static string owned by the driver
            // (or leaves it null and returns CUDA_ERROR_INVALID_VALUE).
            if unsafe { f(result, &mut p) } == SUCCESS && !p.is_null() {
                // SAFETY: a NUL-terminated static string.
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            } else {
                unknown.to_string()
            }
        };
        // The driver's name, else cuda.h's (a torn-down driver names
        // nothing), else the number alone.
        let known = results::name(result).unwrap_or("CUDA_ERROR_UNKNOWN_RESULT");
        DriverStatus::Cuda {
            result,
            name: text(self.get_error_name, known),
            message: text(self.get_error_string, ""),
        }
    }

    fn check(&self, call: &'static str, result: CuResult) -> Result<(), Reason> {
        if result == SUCCESS {
            Ok(())
        } else {
            Err(Reason::CallFailed {
                call,
                status: self.status(result),
            })
        }
    }
}

/// What the driver reports about one device.
#[derive(Debug)]
pub(crate) struct Gpu {
    /// Its compute capability, and the newest PTX ISA the driver can JIT.
    pub(crate) target: DeviceTarget,
    /// The device ordinal (after `CUDA_VISIBLE_DEVICES`).
    pub(crate) ordinal: u32,
    /// `cuDeviceGetName`.
    pub(crate) name: Option<String>,
    /// `cuDeviceGetPCIBusId`.
    pub(crate) pci_bus_id: Option<String>,
    /// `cuDriverGetVersion`.
    pub(crate) driver_version: Option<u32>,
    /// What loads images on it.
    pub(crate) driver: Driver,
}

/// Detection through an opened driver, run on a detection thread.
pub(crate) fn detect(api: &'static Api) -> (Vec<Gpu>, BackendReport) {
    BackendReport::of_enumeration(Backend::Cuda, enumerate(api))
}

fn enumerate(api: &'static Api) -> Result<Vec<Gpu>, (Status, Reason)> {
    let unavailable = |r| (Status::Unavailable, r);
    // SAFETY: `cuInit(0)` is the documented first call; it may be repeated.
    let result = unsafe { (api.init)(0) };
    if result != SUCCESS {
        let status = if result == sys::ERROR_NO_DEVICE {
            Status::NoDevice
        } else {
            Status::Unavailable
        };
        return Err((
            status,
            Reason::InitFailed {
                library: api.path.clone(),
                call: "cuInit",
                status: api.status(result),
            },
        ));
    }
    let mut version: c_int = 0;
    // SAFETY: out-pointer to a c_int.
    api.check("cuDriverGetVersion", unsafe {
        (api.driver_get_version)(&mut version)
    })
    .map_err(unavailable)?;
    let version = u32::try_from(version).ok();
    let mut count: c_int = 0;
    // SAFETY: out-pointer to a c_int.
    api.check("cuDeviceGetCount", unsafe {
        (api.device_get_count)(&mut count)
    })
    .map_err(unavailable)?;
    let mut devices = Vec::new();
    for ordinal in 0..count.clamp(0, 4096) {
        let mut dev: sys::CuDevice = 0;
        // SAFETY: out-pointer; `ordinal` < the count the driver gave.
        api.check("cuDeviceGet", unsafe {
            (api.device_get)(&mut dev, ordinal)
        })
        .map_err(unavailable)?;
        let attribute = |attr| {
            let mut v: c_int = 0;
            // SAFETY: out-pointer to a c_int, a device the driver gave.
            api.check("cuDeviceGetAttribute", unsafe {
                (api.device_get_attribute)(&mut v, attr, dev)
            })
            .map(|_| v)
        };
        let major = attribute(sys::ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).map_err(unavailable)?;
        let minor = attribute(sys::ATTRIBUTE_COMPUTE_CAPABILITY_MINOR).map_err(unavailable)?;
        let (Ok(major), Ok(minor)) = (u8::try_from(major), u8::try_from(minor)) else {
            tracing::warn!(
                ordinal,
                major,
                minor,
                "CUDA device with an odd compute capability; left out"
            );
            continue;
        };
        devices.push(Gpu {
            target: DeviceTarget::Nvidia {
                capability: ComputeCapability { major, minor },
                max_ptx: version.and_then(max_ptx_for_driver),
            },
            ordinal: ordinal as u32,
            name: device_string(api.device_get_name, dev),
            pci_bus_id: device_string(api.device_get_pci_bus_id, dev),
            driver_version: version,
            driver: Driver { api, device: dev },
        });
    }
    if devices.is_empty() {
        return Err((
            Status::NoDevice,
            Reason::NoCudaDevice {
                library: api.path.clone(),
            },
        ));
    }
    Ok(devices)
}

/// `cuDeviceGetName` / `cuDeviceGetPCIBusId` into a buffer that always keeps
/// a NUL at its end.
fn device_string(f: sys::DeviceGetString, dev: sys::CuDevice) -> Option<String> {
    let mut buf = [0u8; 257];
    // SAFETY: the driver writes at most `len` (256) bytes, NUL-terminated when
    // they fit; the 257th byte stays 0.
    let result = unsafe { f(buf.as_mut_ptr().cast(), 256, dev) };
    if result != SUCCESS {
        return None;
    }
    let text = CStr::from_bytes_until_nul(&buf).ok()?;
    Some(text.to_string_lossy().into_owned()).filter(|s| !s.is_empty())
}
