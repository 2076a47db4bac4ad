//! Raw CUDA driver types, values and C signatures, as `cuda.h` declares them
//! (CUDA 11.x–13.x; the values used here have not changed since CUDA 3–4).

use std::ffi::{c_char, c_int, c_uint, c_void};

/// `CUresult` (a C enum).
pub type CuResult = c_int;
/// `CUdevice` (`int`).
pub type CuDevice = c_int;
/// `CUcontext`, `CUmodule`, `CUfunction`: opaque pointers.
pub type Handle = *mut c_void;
/// `CUdeviceptr` (`unsigned long long` on 64-bit, the `_v2` API).
pub type CuDevicePtr = u64;

/// `CUDA_SUCCESS`.
pub const SUCCESS: CuResult = 0;
/// `CUDA_ERROR_NO_DEVICE`: `cuInit` found no device.
pub const ERROR_NO_DEVICE: CuResult = 100;
/// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR`.
pub const ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: c_int = 75;
/// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR`.
pub const ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: c_int = 76;

pub type Init = unsafe extern "C" fn(c_uint) -> CuResult;
pub type DriverGetVersion = unsafe extern "C" fn(*mut c_int) -> CuResult;
pub type DeviceGetCount = unsafe extern "C" fn(*mut c_int) -> CuResult;
pub type DeviceGet = unsafe extern "C" fn(*mut CuDevice, c_int) -> CuResult;
pub type DeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, CuDevice) -> CuResult;
/// `cuDeviceGetName(char *name, int len, CUdevice)` and
/// `cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice)`.
pub type DeviceGetString = unsafe extern "C" fn(*mut c_char, c_int, CuDevice) -> CuResult;
/// `cuGetErrorString` and `cuGetErrorName`: a pointer to a static string.
pub type GetErrorText = unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult;
pub type PrimaryCtxRetain = unsafe extern "C" fn(*mut Handle, CuDevice) -> CuResult;
/// `cuDevicePrimaryCtxRelease_v2(CUdevice)` (what `cuDevicePrimaryCtxRelease`
/// names since CUDA 11.0).
pub type PrimaryCtxRelease = unsafe extern "C" fn(CuDevice) -> CuResult;
/// `cuCtxPushCurrent_v2(CUcontext)` (what `cuCtxPushCurrent` names since
/// CUDA 4.0): pushes a context on the calling thread's stack.
pub type CtxPushCurrent = unsafe extern "C" fn(Handle) -> CuResult;
/// `cuCtxPopCurrent_v2(CUcontext *)`: pops the calling thread's current
/// context, writing it to the pointer when it is not null.
pub type CtxPopCurrent = unsafe extern "C" fn(*mut Handle) -> CuResult;
pub type ModuleLoadData = unsafe extern "C" fn(*mut Handle, *const c_void) -> CuResult;
pub type ModuleGetFunction = unsafe extern "C" fn(*mut Handle, Handle, *const c_char) -> CuResult;
pub type ModuleGetGlobal =
    unsafe extern "C" fn(*mut CuDevicePtr, *mut usize, Handle, *const c_char) -> CuResult;
pub type ModuleUnload = unsafe extern "C" fn(Handle) -> CuResult;
/// `CU_JIT_INPUT_FATBINARY` (`CUjitInputType`): a fat binary, from which
/// the driver's linker takes the code that fits the context's device.
pub const JIT_INPUT_FATBINARY: c_int = 2;
/// `cuLinkCreate_v2(unsigned numOptions, CUjit_option *, void **values,
/// CUlinkState *out)` (what `cuLinkCreate` names since CUDA 6.5).
pub type LinkCreate =
    unsafe extern "C" fn(c_uint, *mut c_int, *mut *mut c_void, *mut Handle) -> CuResult;
/// `cuLinkAddData_v2(CUlinkState, CUjitInputType, void *data, size_t size,
/// const char *name, unsigned numOptions, CUjit_option *, void **values)`.
pub type LinkAddData = unsafe extern "C" fn(
    Handle,
    c_int,
    *mut c_void,
    usize,
    *const c_char,
    c_uint,
    *mut c_int,
    *mut *mut c_void,
) -> CuResult;
/// `cuLinkComplete(CUlinkState, void **cubinOut, size_t *sizeOut)`: the
/// linked cubin belongs to the link state until `cuLinkDestroy`.
pub type LinkComplete = unsafe extern "C" fn(Handle, *mut *mut c_void, *mut usize) -> CuResult;
/// `cuLinkDestroy(CUlinkState)`.
pub type LinkDestroy = unsafe extern "C" fn(Handle) -> CuResult;
