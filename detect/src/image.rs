//! What loading an image on a device gives (kernel handles, variables) and
//! how it fails: the types the backends' load code returns and
//! [`crate::LoadedImage`] hands on.

use std::ffi::CString;

use crate::report::{DriverStatus, Source};

/// Why an image could not be loaded, or a symbol not found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DriverError {
    /// A driver call failed.
    #[error("{call} failed: {status}")]
    Call {
        /// The call, e.g. `hsa_executable_load_agent_code_object`, `cuModuleLoadData`.
        call: &'static str,
        /// The driver's status, name and string.
        status: DriverStatus,
    },
    /// The device came from an override or from KFD: no driver was loaded.
    #[error("device {device} came from {} and has no driver to load images with", .origin.name())]
    NoDriver {
        /// The device's index.
        device: usize,
        /// Where it came from.
        origin: Source,
    },
    /// A symbol name with a NUL in it cannot be passed to the driver.
    #[error("symbol name {0:?} contains a NUL byte")]
    BadName(String),
    /// The CUDA driver takes no image size: an image whose own headers claim
    /// more bytes than were given would be read past its end, so it is refused.
    #[error("the {kind} image declares {declared} bytes but only {given} were given")]
    Truncated {
        /// `ELF` or `fat binary`.
        kind: &'static str,
        /// What its headers claim.
        declared: u64,
        /// The slice's length.
        given: usize,
    },
    /// The image was already unloaded.
    #[error("the image was already unloaded")]
    Unloaded,
    /// AMD SPIR-V to compile and no comgr that can: none found, or one
    /// older than 3.0 (the first with `AMD_COMGR_ACTION_TRANSLATE_SPIRV_TO_BC`).
    #[error("SPIR-V is compiled at load by comgr 3.0 or later: {0}")]
    NoSpirvCompiler(String),
    /// A call that succeeded gave nothing back.
    #[error("{0} succeeded but returned no image")]
    NoOutput(&'static str),
    /// What was asked has no implementation for this driver.
    #[error("{0} is not supported by this driver")]
    Unsupported(&'static str),
}

/// A kernel's handle: the HSA kernel object (for the dispatch packet) or the
/// `CUfunction`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KernelHandle {
    /// The handle's value.
    pub handle: u64,
}

/// A device variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Global {
    /// Its device address.
    pub address: u64,
    /// Its size in bytes.
    pub size: u64,
}

/// `name` as the C string both drivers take for a symbol name.
pub(crate) fn c_name(name: &str) -> Result<CString, DriverError> {
    CString::new(name).map_err(|_| DriverError::BadName(name.into()))
}
