//! # offload-detect
//!
//! Which GPUs this machine has and exactly what each can run: the full AMDGPU
//! target ID with its xnack/sramecc settings, the NVIDIA compute capability and
//! driver version. Sources, in order:
//!
//! 1. `OFFLOAD_LOADER_DEVICES` ([`overrides`]) replaces detection entirely;
//! 2. the HSA runtime ([`hsa`]), loaded at run time, never linked;
//! 3. the KFD topology in sysfs ([`kfd`]) when HSA is absent or fails: it names
//!    the processor but cannot tell xnack or sramecc;
//! 4. the CUDA driver ([`cuda`]), loaded at run time.
//!
//! Detection never fails the host program: each backend ends in a
//! [`BackendReport`] with a printable [`Reason`], and nothing is printed
//! (events go to `tracing`). [`driver`] puts an image on a device.

/// Resolves the C function `$name` from `$lib` (opened from `$path`) into a
/// field whose type is the signature the vendor's header declares, or returns
/// [`Reason::MissingSymbol`].
macro_rules! resolve {
    ($lib:expr, $path:expr, $name:literal) => {{
        // SAFETY: the symbol is looked up by its C name and given the C
        // signature the vendor's header declares for it (the field's type).
        match unsafe { $lib.get(concat!($name, "\0").as_bytes()) } {
            Ok(symbol) => *symbol,
            Err(_) => {
                return Err($crate::Reason::MissingSymbol {
                    symbol: $name,
                    library: $path.clone(),
                })
            }
        }
    }};
}

pub mod cuda;
pub mod driver;
pub mod hsa;
pub mod kfd;
pub mod overrides;

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use offload_loader::select::DeviceTarget;
use once_cell::sync::OnceCell;

pub use driver::{load, DriverError, Module};

/// Where a device was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Source::Override => "override",
            Source::Hsa => "hsa",
            Source::Kfd => "kfd",
            Source::Cuda => "cuda",
        }
    }
}

/// A GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// Index among the devices found, from 0.
    pub index: usize,
    /// What it runs.
    pub target: DeviceTarget,
    /// Where it was found.
    pub source: Source,
    /// Marketing name, if known (`AMD Instinct MI210`, `NVIDIA H100`).
    pub name: Option<String>,
    /// HSA agent node, KFD node or CUDA ordinal.
    pub ordinal: u32,
    /// PCI bus ID (CUDA).
    pub pci_bus_id: Option<String>,
    /// CUDA driver version (1000 × major + 10 × minor).
    pub driver_version: Option<u32>,
    /// ISA names the HSA runtime reports, specific first, then generic.
    pub isas: Vec<String>,
    /// Whether the source could not tell the xnack/sramecc settings (KFD).
    pub unknown_features: bool,
    /// The driver handle used to load images (HSA agent handle, CUdevice).
    pub(crate) handle: u64,
    /// The driver that found it, used to load images.
    pub(crate) driver: driver::DriverRef,
}

/// A detection backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `OFFLOAD_LOADER_DEVICES`.
    Override,
    /// The HSA runtime.
    Hsa,
    /// KFD sysfs.
    Kfd,
    /// The CUDA driver.
    Cuda,
}

impl Backend {
    /// Its name in reports.
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
    /// It found this many devices.
    Found(usize),
    /// It works and found no device.
    NoDevice,
    /// It could not be used (library missing, init failed, ...).
    Unavailable,
    /// It was not asked (overridden, or HSA already answered).
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

/// Why a backend found nothing or could not run: one plain sentence each.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Reason {
    /// No candidate library could be opened.
    #[error("{library} not found ({detail})")]
    LibraryNotFound {
        /// The first name tried.
        library: String,
        /// The loader's message for the last name tried.
        detail: String,
    },
    /// A required symbol is missing from the library.
    #[error("symbol {symbol} missing from {library}")]
    MissingSymbol {
        /// The symbol.
        symbol: &'static str,
        /// The library.
        library: PathBuf,
    },
    /// Initialisation failed with the driver's status.
    #[error("{library} present, {call} failed: {status}")]
    InitFailed {
        /// The library.
        library: PathBuf,
        /// The call (`hsa_init`, `cuInit`).
        call: &'static str,
        /// The driver's own name and string for the status.
        status: String,
    },
    /// The runtime works but reports no GPU.
    #[error("{library} present, no GPU")]
    NoGpu {
        /// The library.
        library: PathBuf,
    },
    /// A call after initialisation failed.
    #[error("{call} failed: {status}")]
    CallFailed {
        /// The call.
        call: &'static str,
        /// The driver's status.
        status: String,
    },
    /// The library did not return within the time limit.
    #[error("{library} did not answer within {millis} ms; detection gave up on it")]
    Timeout {
        /// The library.
        library: String,
        /// The limit.
        millis: u64,
    },
    /// The KFD topology is not there.
    #[error("no KFD topology at {0}")]
    NoTopology(PathBuf),
    /// KFD names the processor only.
    #[error("KFD reports the processor only: xnack and sramecc settings are unknown")]
    FeaturesUnknown,
    /// An override entry is not a valid target.
    #[error("OFFLOAD_LOADER_DEVICES: {0}")]
    BadOverride(String),
    /// The backend was not consulted, and why.
    #[error("{0}")]
    Skipped(&'static str),
}

/// What one backend did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendReport {
    /// The backend.
    pub backend: Backend,
    /// What it found.
    pub status: Status,
    /// Why, when it found nothing, or a caveat.
    pub reason: Option<Reason>,
}

/// The devices found and what each backend said.
#[derive(Debug, Clone, Default)]
pub struct Detection {
    /// The devices, in order: AMD then NVIDIA (or the override's order).
    pub devices: Vec<Device>,
    /// One report per backend.
    pub backends: Vec<BackendReport>,
}

/// What detection reads from the environment, explicit so tests need not touch
/// the process environment.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// `OFFLOAD_LOADER_DEVICES`.
    pub devices: Option<String>,
    /// `OFFLOAD_LOADER_HSA_LIBRARY`.
    pub hsa_library: Option<PathBuf>,
    /// `OFFLOAD_LOADER_CUDA_LIBRARY`.
    pub cuda_library: Option<PathBuf>,
    /// KFD topology root (`OFFLOAD_LOADER_KFD_ROOT`), default
    /// `/sys/devices/virtual/kfd/kfd/topology/nodes`.
    pub kfd_root: Option<PathBuf>,
    /// `HSA_OVERRIDE_GFX_VERSION` and its per-node forms, as (node, value).
    pub gfx_overrides: Vec<(Option<u32>, String)>,
    /// `ROCR_VISIBLE_DEVICES`, then `HIP_VISIBLE_DEVICES`.
    pub amd_visible: Option<String>,
    /// `CUDA_VISIBLE_DEVICES`.
    pub cuda_visible: Option<String>,
    /// How long one backend may take (`OFFLOAD_LOADER_DETECT_TIMEOUT_MS`, default 10 s).
    pub timeout: Option<Duration>,
    /// Run each backend on the calling thread, with no time limit. For callers
    /// inside a constructor of a library being `dlopen`ed: there glibc holds
    /// the loader's locks, and a new thread touching a loaded library's
    /// thread-locals would wait for them, so the time-limited thread cannot run.
    pub in_place: bool,
}

impl Config {
    /// The configuration the process environment gives.
    pub fn from_env() -> Config {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let gfx_overrides = std::env::vars()
            .filter_map(|(k, v)| {
                let rest = k.strip_prefix("HSA_OVERRIDE_GFX_VERSION")?;
                match rest.strip_prefix('_') {
                    None if rest.is_empty() => Some((None, v)),
                    Some(node) => node.parse().ok().map(|n| (Some(n), v)),
                    None => None,
                }
            })
            .collect();
        Config {
            devices: var("OFFLOAD_LOADER_DEVICES"),
            hsa_library: var("OFFLOAD_LOADER_HSA_LIBRARY").map(PathBuf::from),
            cuda_library: var("OFFLOAD_LOADER_CUDA_LIBRARY").map(PathBuf::from),
            kfd_root: var("OFFLOAD_LOADER_KFD_ROOT").map(PathBuf::from),
            gfx_overrides,
            amd_visible: var("ROCR_VISIBLE_DEVICES").or_else(|| var("HIP_VISIBLE_DEVICES")),
            cuda_visible: var("CUDA_VISIBLE_DEVICES"),
            timeout: var("OFFLOAD_LOADER_DETECT_TIMEOUT_MS")
                .and_then(|v| v.parse().ok())
                .map(Duration::from_millis),
            in_place: false,
        }
    }
}

static DETECTION: OnceCell<Detection> = OnceCell::new();

/// The devices of this process, detected once from the environment, each
/// backend on a thread with a time limit.
pub fn devices() -> &'static Detection {
    DETECTION.get_or_init(|| detect_with(&Config::from_env()))
}

/// The same detection as [`devices`], but run on the calling thread without a
/// time limit if it has not happened yet: for constructors that may run
/// under the dynamic loader's lock (see [`Config::in_place`]).
pub fn devices_in_place() -> &'static Detection {
    DETECTION.get_or_init(|| {
        detect_with(&Config {
            in_place: true,
            ..Config::from_env()
        })
    })
}

/// Detects devices with an explicit configuration.
pub fn detect_with(config: &Config) -> Detection {
    let mut detection = Detection::default();
    if let Some(list) = &config.devices {
        let (devices, report) = overrides::devices(list);
        detection.devices = devices;
        detection.backends.push(report);
        for backend in [Backend::Hsa, Backend::Kfd, Backend::Cuda] {
            detection.backends.push(BackendReport {
                backend,
                status: Status::Skipped,
                reason: Some(Reason::Skipped("OFFLOAD_LOADER_DEVICES replaces detection")),
            });
        }
        return detection;
    }
    let timeout = config.timeout.unwrap_or(Duration::from_secs(10));
    let (mut amd, hsa_report) = with_timeout(
        config.in_place,
        timeout,
        "the HSA runtime",
        Backend::Hsa,
        hsa::detect(config.hsa_library.clone()),
    );
    let hsa_worked = matches!(hsa_report.status, Status::Found(_) | Status::NoDevice);
    detection.backends.push(hsa_report);
    if hsa_worked {
        detection.backends.push(BackendReport {
            backend: Backend::Kfd,
            status: Status::Skipped,
            reason: Some(Reason::Skipped("the HSA runtime answered")),
        });
    } else {
        let (kfd, report) = kfd::detect(config);
        amd = kfd;
        detection.backends.push(report);
    }
    overrides::apply_gfx_overrides(&mut amd, &config.gfx_overrides);
    let amd = overrides::visible(amd, config.amd_visible.as_deref());
    let (nvidia, cuda_report) = with_timeout(
        config.in_place,
        timeout,
        "the CUDA driver",
        Backend::Cuda,
        cuda::detect(config.cuda_library.clone()),
    );
    detection.backends.push(cuda_report);
    let nvidia = overrides::visible(nvidia, config.cuda_visible.as_deref());
    detection.devices = amd.into_iter().chain(nvidia).collect();
    for (i, d) in detection.devices.iter_mut().enumerate() {
        d.index = i;
    }
    detection
}

/// Runs a backend on its own thread and gives up after `timeout`, so that a
/// driver that hangs in its initialisation cannot hang the host program (the
/// thread is left behind; a driver that crashes cannot be contained).
fn with_timeout(
    in_place: bool,
    timeout: Duration,
    what: &str,
    backend: Backend,
    run: impl FnOnce() -> (Vec<Device>, BackendReport) + Send + 'static,
) -> (Vec<Device>, BackendReport) {
    if in_place {
        return run();
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name(format!("offload-detect-{}", backend.name()))
        .spawn(move || {
            let _ = tx.send(run());
        });
    let timed_out = || {
        (
            Vec::new(),
            BackendReport {
                backend,
                status: Status::Unavailable,
                reason: Some(Reason::Timeout {
                    library: what.into(),
                    millis: timeout.as_millis() as u64,
                }),
            },
        )
    };
    match spawned {
        Ok(_) => rx.recv_timeout(timeout).unwrap_or_else(|_| timed_out()),
        Err(_) => timed_out(),
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.target, self.source.name())?;
        if let Some(name) = &self.name {
            write!(f, " {name}")?;
        }
        Ok(())
    }
}

/// Opens the first library of `candidates` that loads.
pub(crate) fn open_library(
    candidates: &[PathBuf],
) -> Result<(libloading::Library, PathBuf), Reason> {
    let mut last = String::new();
    for path in candidates {
        // SAFETY: loading a driver library runs its initialisers; these are the
        // vendor's runtime libraries (or the path the user named), loaded as
        // the vendor's own runtimes load them.
        match unsafe { libloading::Library::new(path) } {
            Ok(lib) => return Ok((lib, path.clone())),
            Err(e) => last = e.to_string(),
        }
    }
    Err(Reason::LibraryNotFound {
        library: candidates
            .first()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        detail: last,
    })
}
