//! Where a device came from, what each detection backend did, and why it
//! found nothing: typed, with a `Display` that reads as one plain sentence.

use std::fmt;
use std::path::PathBuf;

/// Where a device was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// `OFFLOAD_LOADER_DEVICES`.
    Override,
    /// The HSA runtime.
    Hsa,
    /// The KFD topology in sysfs.
    Kfd,
    /// The CUDA driver.
    Cuda,
}

impl Source {
    /// Its name in reports: `override`, `hsa`, `kfd`, `cuda`.
    pub fn name(self) -> &'static str {
        match self {
            Source::Override => "override",
            Source::Hsa => "hsa",
            Source::Kfd => "kfd",
            Source::Cuda => "cuda",
        }
    }
}

/// A detection backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// `OFFLOAD_LOADER_DEVICES`.
    Override,
    /// The HSA runtime (`libhsa-runtime64.so.1`).
    Hsa,
    /// The KFD topology in sysfs.
    Kfd,
    /// The CUDA driver (`libcuda.so.1`).
    Cuda,
}

impl Backend {
    /// Its name in reports: `override`, `hsa`, `kfd`, `cuda`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Override => "override",
            Backend::Hsa => "hsa",
            Backend::Kfd => "kfd",
            Backend::Cuda => "cuda",
        }
    }
}

/// What a backend found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// It found this many devices (after the visible-devices lists).
    Found(usize),
    /// It works and found no device.
    NoDevice,
    /// It could not be used: library missing, a symbol missing,
    /// initialisation failed, a bad override.
    Unavailable,
    /// It was not asked (overridden, or HSA already answered for KFD).
    Skipped,
}

impl Status {
    /// Its name in reports: `found`, `no-device`, `unavailable`, `skipped`.
    pub fn name(self) -> &'static str {
        match self {
            Status::Found(_) => "found",
            Status::NoDevice => "no-device",
            Status::Unavailable => "unavailable",
            Status::Skipped => "skipped",
        }
    }
}

/// A status a driver returned, with the driver's own name and description
/// for it (`hsa_status_string`, `cuGetErrorName` / `cuGetErrorString`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriverStatus {
    /// An `hsa_status_t`.
    Hsa {
        /// The value, e.g. 0x1008.
        status: u32,
        /// Its name in ROCR-Runtime's hsa.h, e.g. `HSA_STATUS_ERROR_OUT_OF_RESOURCES`.
        name: &'static str,
        /// `hsa_status_string`'s text without the name it starts with (empty
        /// if the runtime gave none).
        message: String,
    },
    /// A `CUresult`.
    Cuda {
        /// The value, e.g. 100.
        result: i32,
        /// `cuGetErrorName`, e.g. `CUDA_ERROR_NO_DEVICE`.
        name: String,
        /// `cuGetErrorString`, e.g. `no CUDA-capable device is detected`.
        message: String,
    },
    /// An `amd_comgr_status_t`.
    Comgr {
        /// The value, e.g. 1.
        status: u32,
        /// Its name in amd_comgr.h, e.g. `AMD_COMGR_STATUS_ERROR`.
        name: &'static str,
    },
}

impl fmt::Display for DriverStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let message = match self {
            DriverStatus::Hsa {
                status,
                name,
                message,
            } => {
                write!(f, "{name} ({status:#x})")?;
                message
            }
            DriverStatus::Cuda {
                result,
                name,
                message,
            } => {
                write!(f, "{name} ({result})")?;
                message
            }
            DriverStatus::Comgr { status, name } => return write!(f, "{name} ({status})"),
        };
        if message.is_empty() {
            Ok(())
        } else {
            write!(f, ": {message}")
        }
    }
}

/// Why a backend found nothing, could not run, or what to keep in mind about
/// what it found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Reason {
    /// No candidate file name could be found by the dynamic loader.
    #[error("{library} not found{}", nor(.also_tried))]
    LibraryNotFound {
        /// The first name tried.
        library: String,
        /// The other names tried, in order.
        also_tried: Vec<String>,
    },
    /// A library was found but the dynamic loader refused it (wrong class,
    /// a missing dependency, ...).
    #[error("{library} could not be loaded: {detail}")]
    LibraryUnloadable {
        /// The name tried.
        library: String,
        /// The dynamic loader's message (`dlerror`).
        detail: String,
    },
    /// A required symbol is missing from the library.
    #[error("symbol {symbol} missing from {}", .library.display())]
    MissingSymbol {
        /// The symbol.
        symbol: &'static str,
        /// The library.
        library: PathBuf,
    },
    /// Initialisation failed with the driver's status.
    #[error("{} present, {call} failed: {status}", .library.display())]
    InitFailed {
        /// The library.
        library: PathBuf,
        /// The call (`hsa_init`, `cuInit`).
        call: &'static str,
        /// The driver's status.
        status: DriverStatus,
    },
    /// A call after initialisation failed.
    #[error("{call} failed: {status}")]
    CallFailed {
        /// The call.
        call: &'static str,
        /// The driver's status.
        status: DriverStatus,
    },
    /// The HSA runtime works and has agents, none of them a GPU.
    #[error("{} present, no GPU agent", .library.display())]
    NoGpuAgent {
        /// The library.
        library: PathBuf,
    },
    /// The CUDA driver works and counts no device.
    #[error("{} present, cuDeviceGetCount reports no device", .library.display())]
    NoCudaDevice {
        /// The library.
        library: PathBuf,
    },
    /// GPUs were found, but none has a processor LLVM 22 knows, so none can
    /// be given a target.
    #[error("no GPU with a processor LLVM 22 knows: {0}")]
    UnknownProcessor(String),
    /// The library did not return within the time limit.
    #[error("{library} did not answer within {millis} ms; detection gave up on it")]
    Timeout {
        /// What was asked (`the HSA runtime`, `the CUDA driver`).
        library: String,
        /// The limit.
        millis: u64,
    },
    /// The KFD topology is not there (no amdgpu kernel driver, or a container
    /// without `/sys`).
    #[error("no KFD topology at {}", .0.display())]
    NoTopology(PathBuf),
    /// The KFD topology lists no GPU node.
    #[error("no GPU node in the KFD topology at {}", .0.display())]
    NoGpuNode(PathBuf),
    /// KFD names the processor only.
    #[error("KFD reports the processor only: xnack and sramecc settings are unknown")]
    FeaturesUnknown,
    /// An `HSA_OVERRIDE_GFX_VERSION` value that ROCm's libhsakmt would reject
    /// (it then fails `hsa_init`), or that names no processor.
    #[error("{variable}=`{value}` {problem}")]
    BadGfxOverride {
        /// The variable, `HSA_OVERRIDE_GFX_VERSION` or `HSA_OVERRIDE_GFX_VERSION_<node>`.
        variable: String,
        /// Its value.
        value: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// An `OFFLOAD_LOADER_DEVICES` entry is not a device target.
    #[error("OFFLOAD_LOADER_DEVICES: `{entry}`: {detail}")]
    BadOverride {
        /// The entry as written.
        entry: String,
        /// Why it is not a device.
        detail: String,
    },
    /// `OFFLOAD_LOADER_DEVICES` is set but lists nothing.
    #[error("OFFLOAD_LOADER_DEVICES lists no device")]
    EmptyOverride,
    /// A visible-devices list hides every GPU the backend found.
    #[error("{variable}=`{value}` hides all {found} GPU(s) found")]
    AllHidden {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
        /// How many the backend found before the list was applied.
        found: usize,
    },
    /// None of the device nodes or kernel-driver entries a vendor's driver
    /// needs exists, so its library was not opened.
    #[error("no {vendor} GPU kernel driver here: none of {} exists", paths(.looked))]
    NoKernelDriver {
        /// `AMD` or `NVIDIA`.
        vendor: &'static str,
        /// The paths looked at, in order.
        looked: Vec<PathBuf>,
    },
    /// The backend was not consulted, and why.
    #[error("{0}")]
    Skipped(&'static str),
}

fn paths(list: &[PathBuf]) -> String {
    let names: Vec<String> = list.iter().map(|p| p.display().to_string()).collect();
    names.join(", ")
}

fn nor(also: &[String]) -> String {
    if also.is_empty() {
        String::new()
    } else {
        format!(" (nor {})", also.join(", "))
    }
}

/// What one backend did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendReport {
    /// The backend.
    pub backend: Backend,
    /// What it found.
    pub status: Status,
    /// Why it found nothing, or a caveat about what it found.
    pub reason: Option<Reason>,
}

impl BackendReport {
    pub(crate) fn new(backend: Backend, status: Status, reason: Option<Reason>) -> Self {
        BackendReport {
            backend,
            status,
            reason,
        }
    }

    /// What a driver backend's enumeration ends in: the devices it found with
    /// [`Status::Found`], or none with the status and reason it failed with.
    pub(crate) fn of_enumeration<T>(
        backend: Backend,
        enumerated: Result<Vec<T>, (Status, Reason)>,
    ) -> (Vec<T>, BackendReport) {
        match enumerated {
            Ok(devices) => {
                let n = devices.len();
                (devices, BackendReport::new(backend, Status::Found(n), None))
            }
            Err((status, reason)) => (
                Vec::new(),
                BackendReport::new(backend, status, Some(reason)),
            ),
        }
    }
}

impl fmt::Display for BackendReport {
    /// `hsa: unavailable: libhsa-runtime64.so.1 present, hsa_init failed: ...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.backend.name(), self.status.name())?;
        if let Status::Found(n) = self.status {
            write!(f, " {n}")?;
        }
        if let Some(reason) = &self.reason {
            write!(f, ": {reason}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences() {
        let status = DriverStatus::Hsa {
            status: 0x1008,
            name: "HSA_STATUS_ERROR_OUT_OF_RESOURCES",
            message: "The runtime failed to allocate the necessary resources.".into(),
        };
        let r = Reason::InitFailed {
            library: "libhsa-runtime64.so.1".into(),
            call: "hsa_init",
            status,
        };
        assert_eq!(
            r.to_string(),
            "libhsa-runtime64.so.1 present, hsa_init failed: HSA_STATUS_ERROR_OUT_OF_RESOURCES \
             (0x1008): The runtime failed to allocate the necessary resources."
        );
        let r = Reason::CallFailed {
            call: "cuInit",
            status: DriverStatus::Cuda {
                result: 100,
                name: "CUDA_ERROR_NO_DEVICE".into(),
                message: "no CUDA-capable device is detected".into(),
            },
        };
        assert_eq!(
            r.to_string(),
            "cuInit failed: CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected"
        );
        let r = Reason::LibraryNotFound {
            library: "libcuda.so.1".into(),
            also_tried: vec!["libcuda.so".into()],
        };
        assert_eq!(r.to_string(), "libcuda.so.1 not found (nor libcuda.so)");
        let r = Reason::MissingSymbol {
            symbol: "hsa_iterate_agents",
            library: "/x/libfake.so".into(),
        };
        assert_eq!(
            r.to_string(),
            "symbol hsa_iterate_agents missing from /x/libfake.so"
        );
        let report = BackendReport::new(
            Backend::Kfd,
            Status::Found(2),
            Some(Reason::FeaturesUnknown),
        );
        assert_eq!(
            report.to_string(),
            "kfd: found 2: KFD reports the processor only: xnack and sramecc settings are unknown"
        );
    }
}
