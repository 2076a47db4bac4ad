//! # offload-detect
//!
//! Which GPUs this machine has and exactly what each can run: the full AMDGPU
//! target ID with its xnack/sramecc settings, the NVIDIA compute capability
//! and the PTX ISA its driver can JIT; and the driver calls that put an image
//! on one of them ([`Device::load`]).
//!
//! Sources, in order:
//!
//! 1. `OFFLOAD_LOADER_DEVICES` ([`overrides`]) replaces detection entirely;
//!    an invalid entry makes it fail with a reason and no device (never a
//!    silent fall-back to detection).
//! 2. The HSA runtime (module `hsa`), loaded at run time, never linked. It is
//!    authoritative when it works (it reports a GPU, or that there is none).
//!    It is opened only when `/dev/kfd` (or WSL's `/dev/dxg`) exists (module
//!    `nodes`), so a machine without an AMD GPU pays a `stat`, not the
//!    13 ms of loading the runtime and its libraries.
//! 3. The KFD topology in sysfs (module `kfd`), only when HSA is absent or fails:
//!    it names the processor but cannot tell xnack or sramecc.
//! 4. The CUDA driver (module `cuda`), loaded at run time when the `nvidia`
//!    kernel module's `/proc/driver/nvidia` or `/dev/nvidiactl` (or WSL's
//!    `/dev/dxg`) exists.
//!
//! A driver library named in the environment is opened whatever the device
//! nodes say. [`devices_for`] looks only for the vendors asked for (the
//! registration runtime asks for those its images are for).
//!
//! Devices are listed AMD first, then NVIDIA, after the visible-devices
//! lists (module `visible` says which variable is applied by whom).
//!
//! Detection never fails the host program and never prints: each backend ends
//! in a [`BackendReport`] whose [`Reason`] reads as one plain sentence, and
//! events go to `tracing`. Each driver call runs on a detection thread under a
//! time limit (`OFFLOAD_LOADER_DETECT_TIMEOUT_MS`, default 10 s) so a hung
//! driver cannot hang the program. A missing
//! library costs one failed `dlopen` and no thread. Libraries are opened once
//! per process and path and never closed.
//!
//! ## Layout
//!
//! Data flows down; each module uses only those above it:
//! `report`, `library` (opening driver libraries), `config`, `nodes` (the
//! signs of a kernel driver), `image` (what a
//! load gives) → the backends `hsa` and `cuda`, each with its raw API table
//! (`sys`), its detection and its own load code → `visible`, `overrides`,
//! `kfd` → `driver` (dispatch over the backends' loaded images) → `device`
//! (the one place a backend's record becomes a [`Device`]) → this file.
//!
//! ## Environment
//!
//! | variable | read by | effect |
//! |---|---|---|
//! | `OFFLOAD_LOADER_DEVICES=gfx90a:sramecc+:xnack-,sm_80` | this crate | these devices instead of detection |
//! | `OFFLOAD_LOADER_HSA_LIBRARY`, `OFFLOAD_LOADER_CUDA_LIBRARY` | this crate | the only driver library to try |
//! | `OFFLOAD_LOADER_KFD_ROOT` | this crate | the KFD `nodes` directory |
//! | `OFFLOAD_LOADER_DETECT_TIMEOUT_MS` | this crate | time limit per driver (default 10000) |
//! | `HSA_OVERRIDE_GFX_VERSION`, `HSA_OVERRIDE_GFX_VERSION_<node>` | the HSA runtime; this crate for KFD | `major.minor.stepping` replaces the processor |
//! | `ROCR_VISIBLE_DEVICES` | the HSA runtime; this crate for KFD | indices or UUID prefixes |
//! | `HIP_VISIBLE_DEVICES` | this crate, for AMD devices | indices or UUIDs, as HIP reads it |
//! | `CUDA_VISIBLE_DEVICES` | the CUDA driver | whatever the driver accepts |

mod comgr;
mod config;
mod cuda;
mod device;
mod driver;
mod hsa;
mod image;
mod kfd;
mod library;
mod nodes;
pub mod overrides;
mod report;
mod visible;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::time::Duration;

use offload_loader::target::Vendor;
use once_cell::sync::OnceCell;

pub use comgr::{compile_spirv, CompiledSpirv};
pub use config::{Config, Vendors};
pub use device::Device;
pub use driver::LoadedImage;
pub use image::{DriverError, Global, KernelHandle};
pub use report::{Backend, BackendReport, DriverStatus, Reason, Source, Status};

/// The devices found and what each backend said.
#[derive(Debug, Clone, Default)]
pub struct Detection {
    /// The devices: AMD then NVIDIA, or the override's order.
    pub devices: Vec<Device>,
    /// One report per backend, in the order they were consulted:
    /// `override` (only when set), `hsa`, `kfd`, `cuda`.
    pub backends: Vec<BackendReport>,
}

impl Detection {
    /// What `backend` said, if it is listed.
    pub fn backend(&self, backend: Backend) -> Option<&BackendReport> {
        self.backends.iter().find(|r| r.backend == backend)
    }
}

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Device>();
    assert_send_sync::<Detection>();
};

/// The detection for each set of vendors (by [`Vendors::bits`]), once no
/// backend timed out: final for the process.
static DETECTION: [OnceCell<Detection>; 4] = [const { OnceCell::new() }; 4];
/// A detection in which a backend timed out (leaked, null when none), per
/// set of vendors: used while that backend's thread is still running,
/// replaced by a new detection once it has ended.
static PROVISIONAL: [AtomicPtr<Detection>; 4] = [const { AtomicPtr::new(std::ptr::null_mut()) }; 4];
/// Whether a detection thread is still running, per backend (HSA, CUDA).
static IN_FLIGHT: [AtomicBool; 2] = [AtomicBool::new(false), AtomicBool::new(false)];

fn in_flight(backend: Backend) -> Option<&'static AtomicBool> {
    match backend {
        Backend::Hsa => Some(&IN_FLIGHT[0]),
        Backend::Cuda => Some(&IN_FLIGHT[1]),
        _ => None,
    }
}

/// The devices of this process, detected from the environment
/// ([`Config::from_env`]), each driver on a thread with a time limit.
///
/// Detected once, unless a driver did not answer in time: then that answer
/// is used only while the driver's thread is still running, and the first
/// call after it has ended detects again (retrying that driver), so a slow
/// driver is not given up on for the life of the process. A hung driver
/// costs the time limit once, not once per call.
pub fn devices() -> &'static Detection {
    detect_cached(Vendors::ALL)
}

/// [`devices`] of the `vendors` asked for only: the drivers of the others
/// are not opened (unless named in the environment) and their backends are
/// reported as skipped. Each set of vendors is detected once (as
/// [`devices`]); devices are numbered within the detection, AMD first.
pub fn devices_for(vendors: Vendors) -> &'static Detection {
    detect_cached(vendors)
}

/// The final detection for `vendors` if it has been made, without detecting
/// or waiting: for code that must not start a detection (a destructor, which
/// may hold the dynamic loader's lock, reports a selection only if the
/// devices are already known).
pub fn detected(vendors: Vendors) -> Option<&'static Detection> {
    DETECTION[usize::from(vendors.bits())].get()
}

/// The AMD processors a GPU runtime of this process can find: those KFD's
/// topology in sysfs lists (after `HSA_OVERRIDE_GFX_VERSION` and
/// `ROCR_VISIBLE_DEVICES`, as libhsakmt and ROCr apply them; under
/// `OFFLOAD_LOADER_KFD_ROOT` where set), read from files: no driver is
/// opened and no library loaded, so a constructor may ask (registration
/// does, to decide whether a first-fit runtime beside it needs a table
/// reordered). ROCr finds its agents through the same topology: where it
/// lists none, no HSA runtime finds an AMD GPU.
pub fn kfd_processors() -> Vec<&'static offload_loader::target::Processor> {
    let (nodes, _) = kfd::detect(&Config::from_env());
    nodes.iter().map(|n| n.target.processor).collect()
}

/// Installs this crate's `fork` handlers now: call it before the program
/// has threads (from a library constructor), so that no `fork` can run
/// while they are being installed (see the `fork_lock` module).
pub fn install_fork_handlers() {
    fork_lock::install();
}

fn detect_cached(vendors: Vendors) -> &'static Detection {
    let slot = usize::from(vendors.bits());
    if let Some(d) = DETECTION[slot].get() {
        return d;
    }
    let _detecting = fork_lock::lock();
    if let Some(d) = DETECTION[slot].get() {
        return d;
    }
    // SAFETY: a non-null pointer is a leaked, never freed `Detection`.
    if let Some(p) = unsafe { PROVISIONAL[slot].load(Ordering::SeqCst).as_ref() } {
        let waiting = p.backends.iter().any(|r| {
            matches!(r.reason, Some(Reason::Timeout { .. }))
                && in_flight(r.backend).is_some_and(|f| f.load(Ordering::SeqCst))
        });
        if waiting {
            return p;
        }
    }
    let detection = detect_with(&Config {
        vendors,
        ..Config::from_env()
    });
    let gave_up = detection
        .backends
        .iter()
        .any(|r| matches!(r.reason, Some(Reason::Timeout { .. })));
    if gave_up {
        // Leaked: at most one per driver answer that came too late.
        let leaked: &'static mut Detection = Box::leak(Box::new(detection));
        PROVISIONAL[slot].store(leaked, Ordering::SeqCst);
        leaked
    } else {
        // Published, not initialised in place: `set` never runs user code
        // under the cell's lock (the value is already made).
        let _ = DETECTION[slot].set(detection);
        DETECTION[slot].get().expect("set above")
    }
}

/// Detects devices with an explicit configuration (tests, tools). Drivers
/// still read their own variables (`ROCR_VISIBLE_DEVICES`,
/// `CUDA_VISIBLE_DEVICES`, `HSA_OVERRIDE_GFX_VERSION`) from the process
/// environment.
pub fn detect_with(config: &Config) -> Detection {
    let mut detection = Detection::default();
    if let Some(list) = &config.devices {
        let (targets, report) = overrides::devices(list);
        tracing::debug!(%report, "OFFLOAD_LOADER_DEVICES");
        detection.devices = targets
            .into_iter()
            .enumerate()
            .map(|(i, target)| Device::from_override(i, target))
            .collect();
        detection.backends.push(report);
        for backend in [Backend::Hsa, Backend::Kfd, Backend::Cuda] {
            detection.backends.push(BackendReport::new(
                backend,
                Status::Skipped,
                Some(Reason::Skipped("OFFLOAD_LOADER_DEVICES replaces detection")),
            ));
        }
        return detection;
    }
    let timeout = config.timeout.unwrap_or(Duration::from_secs(10));

    let root = config.system_root();
    let not_asked =
        |backend, why| BackendReport::new(backend, Status::Skipped, Some(Reason::Skipped(why)));

    // AMD: HSA, else KFD; then HIP_VISIBLE_DEVICES.
    let want_amd = config.vendors.contains(Vendor::Amd);
    let hsa_api = open_driver(&config.hsa_library, want_amd, Vendor::Amd, root, hsa::open);
    let (amd, mut hsa_report) = match hsa_api {
        Ok(None) => (Vec::new(), not_asked(Backend::Hsa, "no AMD GPU asked for")),
        Ok(Some(api)) => on_thread(timeout, "the HSA runtime", Backend::Hsa, move || {
            hsa::detect(api)
        }),
        Err(reason) => (Vec::new(), unopened(Backend::Hsa, reason)),
    };
    // Only a runtime that ran answers for KFD: without /dev/kfd the topology
    // is still read (a container may show it), as when HSA fails.
    let hsa_answered = matches!(hsa_report.status, Status::Found(_))
        || (hsa_report.status == Status::NoDevice
            && !matches!(hsa_report.reason, Some(Reason::NoKernelDriver { .. })));
    let (mut amd, mut kfd_report): (Vec<Device>, _) = if hsa_answered {
        let skipped = Reason::Skipped("the HSA runtime answered");
        (
            amd.into_iter().map(Device::from_hsa).collect(),
            BackendReport::new(Backend::Kfd, Status::Skipped, Some(skipped)),
        )
    } else if !want_amd {
        (Vec::new(), not_asked(Backend::Kfd, "no AMD GPU asked for"))
    } else {
        let (nodes, report) = kfd::detect(config);
        (nodes.into_iter().map(Device::from_kfd).collect(), report)
    };
    if let Some(list) = &config.hip_visible {
        let report = if hsa_answered {
            &mut hsa_report
        } else {
            &mut kfd_report
        };
        amd = apply_visible(amd, report, "HIP_VISIBLE_DEVICES", list);
    }
    detection.backends.push(hsa_report);
    detection.backends.push(kfd_report);

    // NVIDIA: the driver is opened when it is named, or asked for and its
    // kernel module is here.
    let want_nvidia = config.vendors.contains(Vendor::Nvidia);
    let cuda_api = open_driver(
        &config.cuda_library,
        want_nvidia,
        Vendor::Nvidia,
        root,
        cuda::open,
    );
    let (nvidia, cuda_report) = match cuda_api {
        Ok(None) => (
            Vec::new(),
            not_asked(Backend::Cuda, "no NVIDIA GPU asked for"),
        ),
        Ok(Some(api)) => on_thread(timeout, "the CUDA driver", Backend::Cuda, move || {
            cuda::detect(api)
        }),
        Err(reason) => (Vec::new(), unopened(Backend::Cuda, reason)),
    };
    detection.backends.push(cuda_report);

    detection.devices = amd
        .into_iter()
        .chain(nvidia.into_iter().map(Device::from_cuda))
        .collect();
    for (i, d) in detection.devices.iter_mut().enumerate() {
        d.index = i;
    }
    for report in &detection.backends {
        tracing::debug!(%report, "detection");
    }
    detection
}

/// A driver's library, opened when it is named (`named`: whatever the
/// device nodes say), or asked for and `vendor`'s kernel driver is here;
/// `Ok(None)` when neither.
fn open_driver<A>(
    named: &Option<PathBuf>,
    asked: bool,
    vendor: Vendor,
    root: &Path,
    open: impl FnOnce(Option<PathBuf>) -> Result<A, Reason>,
) -> Result<Option<A>, Reason> {
    match (named, asked) {
        (Some(_), _) => open(named.clone()).map(Some),
        (None, false) => Ok(None),
        (None, true) => nodes::look(vendor, root).and_then(|()| open(None).map(Some)),
    }
}

/// The report of a backend whose library was not opened: no device when no
/// kernel driver is here, unavailable otherwise.
fn unopened(backend: Backend, reason: Reason) -> BackendReport {
    let status = if matches!(reason, Reason::NoKernelDriver { .. }) {
        Status::NoDevice
    } else {
        Status::Unavailable
    };
    BackendReport::new(backend, status, Some(reason))
}

/// Applies the visible-devices list `variable` = `list` ([`visible::hip`])
/// and keeps the backend's report in step: the count after filtering, and a
/// reason when nothing is left.
fn apply_visible(
    devices: Vec<Device>,
    report: &mut BackendReport,
    variable: &'static str,
    list: &str,
) -> Vec<Device> {
    let found = devices.len();
    if found == 0 {
        return devices;
    }
    let devices = visible::hip(devices, list);
    report.status = if devices.is_empty() {
        report.reason = Some(Reason::AllHidden {
            variable,
            value: list.into(),
            found,
        });
        Status::NoDevice
    } else {
        Status::Found(devices.len())
    };
    devices
}

/// Runs a backend on its own thread and gives up after `timeout`, so that a
/// driver that hangs in its initialisation cannot hang the host program (the
/// thread is left behind; a driver that crashes cannot be contained).
fn on_thread<T: Send + 'static>(
    timeout: Duration,
    what: &str,
    backend: Backend,
    run: impl FnOnce() -> (Vec<T>, BackendReport) + Send + 'static,
) -> (Vec<T>, BackendReport) {
    let flag = in_flight(backend);
    let timed_out = || {
        let reason = Reason::Timeout {
            library: what.into(),
            millis: timeout.as_millis() as u64,
        };
        (
            Vec::new(),
            BackendReport::new(backend, Status::Unavailable, Some(reason)),
        )
    };
    // The thread started for an earlier detection has not ended: do not
    // start another, nor wait again.
    if flag.is_some_and(|f| f.swap(true, Ordering::SeqCst)) {
        return timed_out();
    }
    // The job is shared so that it can still run here if no thread can be
    // started.
    let job = std::sync::Arc::new(std::sync::Mutex::new(Some(run)));
    let take =
        |job: &std::sync::Mutex<Option<_>>| job.lock().unwrap_or_else(|e| e.into_inner()).take();
    let (tx, rx) = std::sync::mpsc::channel();
    let for_thread = job.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("offload-detect-{}", backend.name()))
        .spawn(move || {
            let answer = take(&for_thread).map(|run| run());
            // Cleared before the answer is sent: a detection that follows
            // the one waiting for this answer must not find the flag still
            // set and report a time-out for a driver that answered.
            if let Some(f) = flag {
                f.store(false, Ordering::SeqCst);
            }
            if let Some(answer) = answer {
                let _ = tx.send(answer);
            }
        });
    match spawned {
        Ok(_) => rx.recv_timeout(timeout).unwrap_or_else(|_| timed_out()),
        Err(e) => {
            if let Some(f) = flag {
                f.store(false, Ordering::SeqCst);
            }
            tracing::debug!(error = %e, "no detection thread; detecting in place");
            match take(&job) {
                Some(run) => run(),
                None => (
                    Vec::new(),
                    BackendReport::new(
                        backend,
                        Status::Unavailable,
                        Some(Reason::Skipped("no detection thread could be started")),
                    ),
                ),
            }
        }
    }
}

/// The lock that serialises detection. `fork` takes it first (so that a
/// child gets the result of a detection in progress, which ends within the
/// time limit: the threads it gives up on hold no lock); the parent releases
/// it, the child makes it anew and forgets the detection threads it does not
/// have (`pthread_atfork`), so a child never waits on it.
mod fork_lock {
    use std::cell::UnsafeCell;
    use std::sync::Once;

    struct Raw(UnsafeCell<libc::pthread_mutex_t>);
    // SAFETY: a pthread mutex is made to be shared between threads.
    unsafe impl Sync for Raw {}

    static LOCK: Raw = Raw(UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER));
    static ATFORK: Once = Once::new();

    pub(super) struct Guard(());

    impl Drop for Guard {
        fn drop(&mut self) {
            unlock();
        }
    }

    fn raw_lock() {
        // SAFETY: `LOCK` is an initialised static mutex.
        unsafe { libc::pthread_mutex_lock(LOCK.0.get()) };
    }

    fn unlock() {
        // SAFETY: called by the holder (or, after fork, its copy in the child).
        unsafe { libc::pthread_mutex_unlock(LOCK.0.get()) };
    }

    extern "C" fn prepare() {
        raw_lock();
    }

    extern "C" fn parent() {
        unlock();
    }

    /// The child has only the thread that forked: the lock is made anew
    /// (whoever held it), and no detection thread is running any more.
    extern "C" fn child() {
        // SAFETY: the child is single-threaded here; nothing else touches LOCK.
        unsafe { *LOCK.0.get() = libc::PTHREAD_MUTEX_INITIALIZER };
        for flag in &super::IN_FLIGHT {
            flag.store(false, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Installs the handlers (once). glibc runs only the handlers installed
    /// before a `fork` began, and lets others be installed while it runs
    /// earlier ones: installed lazily, on the thread about to take the lock,
    /// they could miss a concurrent fork that then copies the lock held.
    /// So a program installs them before it has threads ([`install_fork_handlers`]).
    pub(super) fn install() {
        ATFORK.call_once(|| {
            // SAFETY: the handlers are `extern "C" fn()` with no preconditions.
            unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
        });
    }

    pub(super) fn lock() -> Guard {
        install();
        raw_lock();
        Guard(())
    }
}
