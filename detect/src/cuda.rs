//! NVIDIA GPUs through the CUDA driver (`libcuda.so.1`), opened with
//! `libloading`. Facts from cuda.h: `CUresult` 0 = success, 100 =
//! `CUDA_ERROR_NO_DEVICE`; `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR` = 75,
//! `_MINOR` = 76; `cuDriverGetVersion` gives 1000 × major + 10 × minor.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::path::PathBuf;
use std::sync::Arc;

use offload_loader::select::DeviceTarget;
use offload_loader::target::{nvptx::max_ptx_for_driver, ComputeCapability};

use crate::{open_library, Backend, BackendReport, Device, Reason, Source, Status};

/// `CUresult`.
pub type CuResult = c_int;
const SUCCESS: CuResult = 0;
const ATTRIBUTE_CC_MAJOR: c_int = 75;
const ATTRIBUTE_CC_MINOR: c_int = 76;

/// The CUDA driver entry points this crate uses, resolved once.
pub(crate) struct Api {
    pub path: PathBuf,
    _library: libloading::Library,
    pub init: unsafe extern "C" fn(c_uint) -> CuResult,
    pub driver_get_version: unsafe extern "C" fn(*mut c_int) -> CuResult,
    pub device_get_count: unsafe extern "C" fn(*mut c_int) -> CuResult,
    pub device_get: unsafe extern "C" fn(*mut c_int, c_int) -> CuResult,
    pub device_get_attribute: unsafe extern "C" fn(*mut c_int, c_int, c_int) -> CuResult,
    pub device_get_name: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> CuResult,
    pub device_get_pci_bus_id: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> CuResult,
    pub get_error_string: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    pub get_error_name: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    pub primary_ctx_retain: unsafe extern "C" fn(*mut *mut c_void, c_int) -> CuResult,
    pub ctx_set_current: unsafe extern "C" fn(*mut c_void) -> CuResult,
    pub module_load_data: unsafe extern "C" fn(*mut *mut c_void, *const c_void) -> CuResult,
    pub module_get_function:
        unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const c_char) -> CuResult,
    pub module_get_global:
        unsafe extern "C" fn(*mut u64, *mut usize, *mut c_void, *const c_char) -> CuResult,
    pub module_unload: unsafe extern "C" fn(*mut c_void) -> CuResult,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CUDA driver at {}", self.path.display())
    }
}

impl Api {
    fn open(explicit: Option<PathBuf>) -> Result<Api, Reason> {
        let candidates = match explicit {
            Some(p) => vec![p],
            None => vec!["libcuda.so.1".into(), "libcuda.so".into()],
        };
        let (lib, path) = open_library(&candidates)?;
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
            ctx_set_current: resolve!(lib, path, "cuCtxSetCurrent"),
            module_load_data: resolve!(lib, path, "cuModuleLoadData"),
            module_get_function: resolve!(lib, path, "cuModuleGetFunction"),
            module_get_global: resolve!(lib, path, "cuModuleGetGlobal_v2"),
            module_unload: resolve!(lib, path, "cuModuleUnload"),
            path,
            _library: lib,
        })
    }

    /// `CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected`.
    pub fn describe(&self, result: CuResult) -> String {
        let text = |f: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult| {
            let mut p: *const c_char = std::ptr::null();
            // SAFETY: writes a pointer to a static string owned by the driver.
            if unsafe { f(result, &mut p) } == SUCCESS && !p.is_null() {
                // SAFETY: a NUL-terminated static string.
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            } else {
                "unknown error".into()
            }
        };
        format!(
            "{} ({result}): {}",
            text(self.get_error_name),
            text(self.get_error_string)
        )
    }

    fn call(&self, call: &'static str, result: CuResult) -> Result<(), Reason> {
        if result == SUCCESS {
            Ok(())
        } else {
            Err(Reason::CallFailed {
                call,
                status: self.describe(result),
            })
        }
    }
}

/// Detection through the CUDA driver, to run on a detection thread.
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
    move || {
        let report = |status, reason| BackendReport {
            backend: Backend::Cuda,
            status,
            reason,
        };
        match api.map_err(|r| (Status::Unavailable, r)).and_then(run) {
            Ok(devices) => {
                let n = devices.len();
                (devices, report(Status::Found(n), None))
            }
            Err((status, reason)) => (Vec::new(), report(status, Some(reason))),
        }
    }
}

fn run(api: Arc<Api>) -> Result<Vec<Device>, (Status, Reason)> {
    let unavailable = |r| (Status::Unavailable, r);
    // SAFETY: `cuInit(0)` is the documented first call; it may be repeated.
    let result = unsafe { (api.init)(0) };
    if result != SUCCESS {
        let status = if result == 100 {
            Status::NoDevice
        } else {
            Status::Unavailable
        };
        return Err((
            status,
            Reason::InitFailed {
                library: api.path.clone(),
                call: "cuInit",
                status: api.describe(result),
            },
        ));
    }
    let mut version = 0;
    // SAFETY: out-pointer to a c_int.
    api.call("cuDriverGetVersion", unsafe {
        (api.driver_get_version)(&mut version)
    })
    .map_err(unavailable)?;
    let mut count = 0;
    // SAFETY: out-pointer to a c_int.
    api.call("cuDeviceGetCount", unsafe {
        (api.device_get_count)(&mut count)
    })
    .map_err(unavailable)?;
    let mut devices = Vec::new();
    for ordinal in 0..count.clamp(0, 1024) {
        let mut dev = 0;
        // SAFETY: out-pointer; `ordinal` < count.
        api.call("cuDeviceGet", unsafe {
            (api.device_get)(&mut dev, ordinal)
        })
        .map_err(unavailable)?;
        let attribute = |attr| {
            let mut v = 0;
            // SAFETY: out-pointer to a c_int for a valid device.
            api.call("cuDeviceGetAttribute", unsafe {
                (api.device_get_attribute)(&mut v, attr, dev)
            })
            .map(|_| v)
        };
        let major = attribute(ATTRIBUTE_CC_MAJOR).map_err(unavailable)?;
        let minor = attribute(ATTRIBUTE_CC_MINOR).map_err(unavailable)?;
        let Some(capability) = u32::try_from(major * 10 + minor)
            .ok()
            .and_then(ComputeCapability::from_sm)
        else {
            continue;
        };
        let string = |f: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> CuResult| {
            let mut buf = [0u8; 256];
            // SAFETY: the driver writes at most `len` bytes, NUL-terminated.
            (unsafe { f(buf.as_mut_ptr().cast(), buf.len() as c_int, dev) } == SUCCESS)
                .then(|| {
                    CStr::from_bytes_until_nul(&buf)
                        .ok()
                        .map(|c| c.to_string_lossy().into_owned())
                })
                .flatten()
        };
        devices.push(Device {
            index: devices.len(),
            target: DeviceTarget::Nvidia {
                capability,
                max_ptx: max_ptx_for_driver(version as u32),
            },
            source: Source::Cuda,
            name: string(api.device_get_name),
            ordinal: ordinal as u32,
            pci_bus_id: string(api.device_get_pci_bus_id),
            driver_version: Some(version as u32),
            isas: Vec::new(),
            unknown_features: false,
            handle: dev as u64,
            driver: crate::driver::DriverRef::Cuda(api.clone()),
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
