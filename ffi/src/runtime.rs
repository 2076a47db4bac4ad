//! The effects: detecting devices, selecting for them, loading the selected
//! images through the driver and resolving symbols in them, unloading what
//! unregistered libraries loaded, and saying what happened.
//!
//! Everything here runs with no library entered and no lock held (rule 3 of
//! [`crate::loader_lock`]): each step that needs a library's memory enters
//! it, copies what it needs (selections, an image's bytes, a name, message
//! text) and leaves before the next effect. Each effect first calls
//! [`loader_lock::check`]. Destructors never unload here: an unregistered
//! library is retired ([`retire`]) and its modules unloaded by the next query
//! ([`settle`]); a registration under `OFFLOAD_LOADER_EAGER=1` is loaded there
//! too, since loading from the constructor could wait on a driver that waits
//! for the loader's lock the constructor holds. At exit ([`at_exit`]) what
//! no query did is done.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use offload_detect::{Detection, Device, LoadedImage, Vendors};
use offload_loader::{ImageSource, Selection};
use once_cell::race::OnceBool;

use crate::error::Error;
use crate::info;
use crate::library::{Library, Made, Message, Snapshot, Symbol, SymbolKind};
use crate::loader_lock;
use crate::objects::{self, Pin};
use crate::process;
use crate::registry;
use crate::slots::{self, State};
use crate::stack::Stack;

/// Libraries registered under `OFFLOAD_LOADER_EAGER=1`, by id, to load at
/// the next query.
static EAGER: Stack<usize> = Stack::new();
/// Unregistered libraries whose modules the next query unloads.
static RETIRED: Stack<Arc<Library>> = Stack::new();
/// Under `OFFLOAD_LOADER_INFO`: libraries unregistered before any device
/// was known, copied out to be reported at exit ([`at_exit`]), the first
/// [`UNREPORTED_KEPT`] of them.
static UNREPORTED: Stack<Snapshot> = Stack::new();
/// How many libraries were unregistered before any device was known.
static UNREPORTED_COUNT: AtomicUsize = AtomicUsize::new(0);
/// How many of them are copied for the report at exit: a program that
/// `dlopen`s and `dlclose`s a library 100,000 times keeps a bounded
/// memory under `OFFLOAD_LOADER_INFO` too; the others are counted.
const UNREPORTED_KEPT: usize = 64;
/// Whether [`at_exit`] is installed: not decided yet, not wanted, installed.
static AT_EXIT: AtomicU8 = AtomicU8::new(AT_EXIT_UNDECIDED);
const AT_EXIT_UNDECIDED: u8 = 0;
const AT_EXIT_UNWANTED: u8 = 1;
const AT_EXIT_INSTALLED: u8 = 2;

static EAGER_ON: OnceBool = OnceBool::new();

fn eager() -> bool {
    EAGER_ON.get_or_init(|| std::env::var_os("OFFLOAD_LOADER_EAGER").is_some_and(|v| v == "1"))
}

/// The GPU vendors registered libraries have images for ([`Vendors::bits`]):
/// detection opens only their drivers. It only grows. OpenMP registration
/// adds its images' vendors ([`need`]); fat binaries' are read from their
/// slots by the next query ([`needed`]), which keeps registration, the path
/// a program's start-up takes hundreds of times, as cheap as it was.
static NEEDED: AtomicU8 = AtomicU8::new(0);
/// Slots below this id are counted in [`NEEDED`].
static COUNTED: AtomicUsize = AtomicUsize::new(0);

/// Records that a registered library has images for `vendors`.
pub(crate) fn need(vendors: Vendors) {
    NEEDED.fetch_or(vendors.bits(), Ordering::Relaxed);
}

/// The vendors to detect: those registered libraries need, or every vendor
/// when nothing is registered (a program asking what is here). Counts the
/// fat binaries registered since the last call first.
fn needed() -> Vendors {
    let (from, to) = (COUNTED.load(Ordering::Acquire), slots::len());
    if from < to {
        let mut vendors = Vendors::NONE;
        let mut counted = to;
        for id in from..to {
            let Some(slot) = slots::get(id) else { break };
            if slot.state() == State::Writing {
                // Not yet written (or abandoned by a thread lost to fork):
                // counted again by a later call.
                counted = counted.min(id);
                continue;
            }
            if let Some(vendor) = slot.fatbin().and_then(|f| f.runtime.vendor()) {
                vendors = vendors.union(Vendors::of(vendor));
            }
        }
        need(vendors);
        COUNTED.fetch_max(counted, Ordering::AcqRel);
    }
    match Vendors::from_bits(NEEDED.load(Ordering::Relaxed)) {
        v if v.is_empty() => Vendors::ALL,
        v => v,
    }
}

/// The devices of this process, of the vendors registered libraries need,
/// detected once per set of vendors (each driver under its time limit; a
/// driver that timed out is asked again later, see
/// `offload_detect::devices_for`). A library of a new vendor registered
/// later widens the next detection (devices stay numbered AMD first).
pub(crate) fn detection() -> &'static Detection {
    loader_lock::check("device detection");
    info::init();
    let detection = offload_detect::devices_for(needed());
    if detection.devices.is_empty() && info::enabled() {
        say_none_found(detection);
    }
    detection
}

/// The last detection that found no device and was said.
static SAID_NONE: AtomicUsize = AtomicUsize::new(0);

/// Under `OFFLOAD_LOADER_INFO`, says once per detection why it found no
/// device: each backend's report, with the driver's error by name (by
/// this library's table where the driver cannot name it).
fn say_none_found(detection: &'static Detection) {
    let at = detection as *const Detection as usize;
    if SAID_NONE.swap(at, Ordering::AcqRel) == at {
        return;
    }
    let reports: Vec<String> = detection.backends.iter().map(|r| r.to_string()).collect();
    info::say([Message::Info(format!(
        "no GPU found: {}",
        reports.join("; ")
    ))]);
}

/// The devices of [`detection`].
pub(crate) fn devices() -> &'static [Device] {
    &detection().devices
}

/// Called by registration of a library or of one of its symbols (maybe in a
/// constructor): with `OFFLOAD_LOADER_EAGER=1`, library `id` is loaded, and
/// its symbols resolved, at the next query (which may come between two
/// registrations of the same constructor: each one asks again).
pub(crate) fn registered(id: usize) {
    if eager() {
        EAGER.push(id);
    }
    // One load on the path every registration takes, once decided.
    if AT_EXIT.load(Ordering::Relaxed) == AT_EXIT_UNDECIDED {
        install_at_exit();
    }
}

/// Installs [`at_exit`] if `OFFLOAD_LOADER_EAGER` or `OFFLOAD_LOADER_INFO`
/// asks for it, once; else records that nothing is to be done.
#[cold]
fn install_at_exit() {
    if !(eager() || info::enabled()) {
        AT_EXIT.store(AT_EXIT_UNWANTED, Ordering::Relaxed);
    } else if AT_EXIT.swap(AT_EXIT_INSTALLED, Ordering::AcqRel) != AT_EXIT_INSTALLED {
        // SAFETY: registers a function of this library, which is never
        // unloaded before exit (`-z nodelete`, see build.rs) or is linked
        // into the program; `atexit` takes no lock of the loader's.
        unsafe { libc::atexit(at_exit) };
    }
}

/// Whether [`vendor_running`] has done its work.
static SEEN_RUNNING: AtomicBool = AtomicBool::new(false);

/// Called beside a vendor runtime by the hooks of its launch path, once
/// each call was handed on (the vendor is initialised by then). Under
/// `OFFLOAD_LOADER_INFO` or `OFFLOAD_LOADER_EAGER`, the first call installs
/// [`at_exit`] a second time: `atexit` handlers run in reverse order, and
/// libcudart's, installed at its first call, tears the driver down at exit
/// (`cuInit` then answers `CUDA_ERROR_DEINITIALIZED`, and `cuGetErrorName`
/// names nothing), so the one installed at registration would run too
/// late. Nothing is detected here: the call may come from a constructor,
/// under the loader's lock. The first installation still runs, last, and
/// finds nothing left to say. After the first call, one load.
#[inline]
pub(crate) fn vendor_running() {
    if AT_EXIT.load(Ordering::Relaxed) == AT_EXIT_INSTALLED
        && !SEEN_RUNNING.load(Ordering::Relaxed)
        && !SEEN_RUNNING.swap(true, Ordering::AcqRel)
    {
        // SAFETY: as in `install_at_exit`.
        unsafe { libc::atexit(at_exit) };
    }
}

/// Run by `exit`, where no loader lock is held (glibc's `exit` runs the
/// `atexit` handlers before `_dl_fini`, and `_dl_fini` releases the
/// loader's lock before running destructors): the programs that never
/// queried get what a query would have given them. Under
/// `OFFLOAD_LOADER_EAGER=1` the libraries still registered and not yet
/// loaded are loaded (their failures said); under `OFFLOAD_LOADER_INFO`
/// every registration not yet
/// reported is reported, including those unregistered before (by the
/// `atexit` destructors HIP, CUDA and OpenMP programs register after this
/// handler, which run first), from the copies made then.
///
/// A static copy of this library linked into a shared object that is
/// `dlclose`d runs this from that `dlclose`, under the loader's lock: it
/// then detects nothing and reports only for devices already known.
extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if !own_object_stays() {
            return;
        }
        settle();
        let detection = detection();
        for id in 0..slots::len() {
            if let Some(library) = registry::library(id) {
                made(&library, detection);
            }
        }
        let mut unreported = UNREPORTED.take();
        unreported.sort_by_key(|s| s.id());
        for snapshot in unreported {
            let selections = snapshot.select_all(&detection.devices);
            info::say(snapshot.report(&detection.devices, &selections, info::enabled()));
        }
        // Said once: `at_exit` may run twice (see `vendor_running`).
        let uncopied = UNREPORTED_COUNT
            .swap(0, Ordering::Relaxed)
            .saturating_sub(UNREPORTED_KEPT);
        if uncopied > 0 {
            info::say([Message::Info(format!(
                "{uncopied} more libraries were unregistered before any device was known; \
                 the first {UNREPORTED_KEPT} are reported above"
            ))]);
        }
    });
}

/// Whether this library's code lies in an object no `dlclose` unloads:
/// the program itself, or one linked `-z nodelete`, as
/// `liboffload_loader.so` is (build.rs), whatever name it was loaded by;
/// then [`at_exit`] runs from `exit` and not from a `dlclose`.
fn own_object_stays() -> bool {
    process::stays(at_exit as *const () as usize) == Some(true)
}

/// Done first by every query: unloads the modules of libraries unregistered
/// since the last one, and loads the libraries registered eagerly since.
pub(crate) fn settle() {
    loader_lock::check("settling retired and eager libraries");
    // Dropping the last reference unloads (`hsa_executable_destroy`,
    // `cuModuleUnload`, the context's release) on this thread.
    drop(RETIRED.take());
    let mut pending = EAGER.take();
    if pending.is_empty() {
        return;
    }
    pending.sort_unstable();
    pending.dedup();
    let detection = detection();
    for id in pending {
        if let Some(library) = registry::library(id) {
            load_everything(&library, detection);
        }
    }
}

/// `__cudaInitModule`: library `id`'s selected image loaded on every device
/// that has one, its symbols resolved (as [`load_everything`]); whether one
/// was loaded.
pub(crate) fn init_module(id: usize) -> bool {
    loader_lock::check("__cudaInitModule");
    settle();
    let Some(library) = registry::library(id) else {
        return false;
    };
    let detection = detection();
    let loaded = load_everything(&library, detection);
    place_managed(&library, detection);
    loaded
}

/// Points nvcc's host pointer of each CUDA managed variable of `library`
/// that is still null at the variable's memory, and makes the variable
/// found by that address: the memory the driver allocated for it in the
/// first device's module (managed memory, which the host reads and writes),
/// as cudart does; with no module loaded (no GPU), host memory holding the
/// initial value the library's images give it, so that the host program
/// runs as on the CPU. Failures become the last error.
fn place_managed(library: &Library, detection: &'static Detection) {
    let managed: Vec<(Symbol, u64)> = registry::symbols(library.id)
        .into_iter()
        .filter_map(|s| match s.kind {
            SymbolKind::CudaManaged { size } => Some((s, size)),
            _ => None,
        })
        .collect();
    for (symbol, size) in managed {
        let pointer = symbol.host as *mut usize;
        let fits = process::locate(symbol.host).is_some_and(|l| {
            symbol.host % std::mem::align_of::<usize>() == 0
                && l.segment.end - symbol.host >= std::mem::size_of::<usize>()
        });
        if !fits {
            crate::set_last_error(format!(
                "{}: a managed variable's host pointer at {:#x} is in no loaded object",
                origin(library),
                symbol.host
            ));
            continue;
        }
        // SAFETY: nvcc's pointer variable, checked to lie, aligned, in a
        // loaded segment of the registering object.
        if unsafe { pointer.read() } != 0 {
            continue;
        }
        let Some(name) = library.enter().map(|r| r.name(&symbol)) else {
            return;
        };
        let address = driver_memory(library, detection, &name)
            .or_else(|| initial_memory(library, &name, size));
        let Some(address) = address else {
            crate::set_last_error(format!(
                "{}: managed variable {name}: no memory for it",
                origin(library)
            ));
            continue;
        };
        // SAFETY: as above; a pointer-sized, aligned global.
        unsafe { pointer.write(address) };
        let alias = Symbol {
            host: address,
            name: symbol.name,
            kind: SymbolKind::Variable { size },
        };
        if let Err(e) = registry::add_symbol(library.id, alias) {
            crate::set_last_error(e.to_string());
        }
    }
}

/// The memory the driver gave managed variable `name` in the module of the
/// first device that loaded `library`.
fn driver_memory(library: &Library, detection: &'static Detection, name: &str) -> Option<usize> {
    let made = library.made(detection)?;
    made.modules
        .iter()
        .filter_map(|cell| cell.get()?.as_ref().ok())
        .find_map(|module| module.global(name).ok())
        .map(|global| global.address as usize)
}

/// Host memory (never freed: nvcc's code keeps the pointer) holding the
/// initial value of variable `name` in the first of `library`'s images that
/// defines it, zeros where none does; 16-byte aligned, as `cudaMallocManaged`
/// memory is at least.
fn initial_memory(library: &Library, name: &str, size: u64) -> Option<usize> {
    let size = usize::try_from(size).ok()?;
    let initial: Option<Vec<u8>> = library.enter().and_then(|reading| {
        (0..reading.images().len()).find_map(|i| {
            let bytes = reading.image_bytes(i).ok()?;
            offload_loader::image::globals::initial_value(&bytes, name, size as u64)
                .map(|v| v.into_owned())
        })
    });
    let layout = std::alloc::Layout::from_size_align(size.max(1), 16).ok()?;
    // SAFETY: a non-zero size.
    let memory = unsafe { std::alloc::alloc_zeroed(layout) };
    if memory.is_null() {
        return None;
    }
    if let Some(initial) = initial.filter(|v| v.len() <= size) {
        // SAFETY: `memory` has `size` bytes, `initial` at most that many.
        unsafe { std::ptr::copy_nonoverlapping(initial.as_ptr(), memory, initial.len()) };
    }
    Some(memory as usize)
}

/// `OFFLOAD_LOADER_EAGER=1`: loads the selected image on every device and
/// resolves every registered symbol; failures become the last error.
/// Whether an image was loaded on some device.
fn load_everything(library: &Library, detection: &'static Detection) -> bool {
    let Some(made) = made(library, detection) else {
        return false;
    };
    let mut loaded = false;
    let symbols = registry::symbols(library.id);
    for device in 0..made.selections.len() {
        if !made.has_code(device) {
            continue;
        }
        if let Err(e) = module(library, detection, made, device) {
            crate::set_last_error(e.to_string());
            continue;
        }
        loaded = true;
        for symbol in &symbols {
            if let Err(e) = resolve_in(library, detection, made, device, symbol) {
                crate::set_last_error(e.to_string());
            }
        }
    }
    loaded
}

/// What was made of `library` for `detection`: the selection for each
/// device, made (and reported, by the thread that publishes it) the first
/// time; `None` once the library is unregistered.
pub(crate) fn made<'l>(library: &'l Library, detection: &'static Detection) -> Option<&'l Made> {
    if let Some(made) = library.made(detection) {
        return Some(made);
    }
    let (selections, linked, messages) = {
        let reading = library.enter()?;
        let selections = reading.select_all(&detection.devices);
        let plans = reading.link_plans(&detection.devices, &selections);
        let mut messages = reading.report(&detection.devices, &selections, &plans, info::enabled());
        if let Some(failure) = reading.parse_failure() {
            messages.insert(0, Message::Warning(failure));
        }
        // A device the stub has no image for is linked for, where every
        // object has an image for it.
        let linked = selections
            .iter()
            .zip(&plans)
            .map(|(s, plan)| s.chosen.is_none() && matches!(plan, Some(Ok(_))))
            .collect();
        (selections, linked, messages)
    };
    let (made, ours) = library.publish(detection, selections, linked);
    if ours {
        info::say(messages);
    }
    Some(made)
}

/// `<object> fatbin at 0x…`, or the library's id once it is unregistered.
fn origin(library: &Library) -> String {
    match library.enter() {
        Some(reading) => reading.origin(),
        None => format!("library {} (unregistered)", library.id),
    }
}

/// The module loaded from `library` on `device`, loading it the first time.
/// Two threads may both load; the loser's module is unloaded as it drops.
fn module(
    library: &Library,
    detection: &'static Detection,
    made: &Made,
    device: usize,
) -> Result<Arc<LoadedImage>, Error> {
    let no_device = || Error::NoDevice(device as i64);
    let cell = made.modules.get(device).ok_or_else(no_device)?;
    if let Some(loaded) = cell.get() {
        return loaded.clone();
    }
    let selection = made.selections.get(device).ok_or_else(no_device)?;
    let target = detection.devices.get(device).ok_or_else(no_device)?;
    let loaded = if made.is_linked(device) {
        link(library, target, device)
    } else {
        load(library, selection, target, device)
    };
    let _ = cell.set(Box::new(loaded.clone()));
    cell.get().cloned().unwrap_or(loaded)
}

/// Copies the image `selection` chose for `target` (device `device`) out of
/// the library, then loads the copy: the driver never reads the library's
/// memory, so no reader is counted while it works.
fn load(
    library: &Library,
    selection: &Selection,
    target: &Device,
    device: usize,
) -> Result<Arc<LoadedImage>, Error> {
    let (bytes, id, origin, portable) = {
        let reading = library.enter().ok_or(Error::NoLibrary(library.id as i64))?;
        let Some(index) = selection.chosen else {
            return Err(Error::NoImage(reading.no_binary_message(
                selection,
                device,
                &target.target.to_string(),
            )));
        };
        let bytes = reading.image_bytes(index)?.into_owned();
        let image = &reading.images()[index];
        (
            bytes,
            image.id.to_string(),
            reading.origin(),
            image.arch == offload_loader::target::Arch::AmdSpirv,
        )
    };
    loader_lock::check("a driver load");
    // AMD's SPIR-V is compiled for the device first, as the HIP runtime
    // does where a fat binary has no code object for it.
    let bytes = if portable {
        compile_spirv(&bytes, target, &id, device).map_err(|source| Error::Driver {
            origin: origin.clone(),
            what: format!("compiling {id} from SPIR-V"),
            device,
            source: Box::new(source),
        })?
    } else {
        bytes
    };
    let loaded = target
        .load(&bytes)
        .map(Arc::new)
        .map_err(|source| Error::Driver {
            origin,
            what: format!("loading {id}"),
            device,
            source: Box::new(source),
        })?;
    share_managed(library, &loaded, device);
    Ok(loaded)
}

/// Copies the objects of `library`, an `-rdc` device-link stub, out of it,
/// then links the copies with the CUDA driver's linker for `target` (device
/// `device`) and loads the result, said in INFO (see [`crate::link`]).
fn link(library: &Library, target: &Device, device: usize) -> Result<Arc<LoadedImage>, Error> {
    let (inputs, origin) = {
        let reading = library.enter().ok_or(Error::NoLibrary(library.id as i64))?;
        (reading.link_inputs()?, reading.origin())
    };
    loader_lock::check("a driver link");
    let slices: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
    let loaded = target
        .link(&slices)
        .map(Arc::new)
        .map_err(|source| Error::Driver {
            origin: origin.clone(),
            what: format!("linking its {} objects", inputs.len()),
            device,
            source: Box::new(source),
        })?;
    info::say([Message::Info(format!(
        "device {device} {}: {origin}: linked from its {} objects by the CUDA driver",
        target.target,
        inputs.len()
    ))]);
    share_managed(library, &loaded, device);
    Ok(loaded)
}

/// `spirv`, image `id`, compiled through comgr for device `device`
/// (`target`), said in INFO.
fn compile_spirv(
    spirv: &[u8],
    target: &Device,
    id: &str,
    device: usize,
) -> Result<Vec<u8>, offload_detect::DriverError> {
    let compiled = offload_detect::compile_spirv(spirv, &target.target.to_string())?;
    info::say([Message::Info(format!(
        "device {device} {}: {id} compiled from SPIR-V by comgr {} ({}): {} bytes of code object",
        target.target,
        compiled.comgr,
        compiled.library.display(),
        compiled.code.len()
    ))]);
    Ok(compiled.code)
}

/// Points each managed variable's device-side pointer in the image just
/// loaded at the host's copy of the variable (where
/// `__hipRegisterManagedVar` pointed the program), as clr does at load with
/// memory it allocated. Failures become the last error.
fn share_managed(library: &Library, loaded: &LoadedImage, device: usize) {
    // The symbols first, then their names: the registry's lock is never
    // taken inside a reader (unregistration holds it while it waits for
    // readers).
    let managed: Vec<(Symbol, u64)> = registry::symbols(library.id)
        .into_iter()
        .filter_map(|s| match s.kind {
            SymbolKind::Managed { size } => Some((s, size)),
            _ => None,
        })
        .collect();
    if managed.is_empty() {
        return;
    }
    let Some(named) = library.enter().map(|reading| {
        managed
            .iter()
            .map(|(s, size)| (reading.name(s), s.host, *size))
            .collect::<Vec<_>>()
    }) else {
        return;
    };
    for (name, host, size) in named {
        if let Err(source) = loaded.point_at_host(&name, host, size as usize) {
            crate::set_last_error(
                Error::Driver {
                    origin: origin(library),
                    what: format!("managed variable {name}"),
                    device,
                    source: Box::new(source),
                }
                .to_string(),
            );
        }
    }
}

/// The device handle or address of `symbol` of `library` on `device`:
/// kernel handle, or variable address and size; `what` names the symbol in
/// errors.
fn resolve(
    library: &Library,
    detection: &'static Detection,
    device: i64,
    symbol: &Symbol,
    what: impl Fn() -> String,
) -> Result<(u64, u64), Error> {
    // Unregistered since it was found: as if never found.
    let made = made(library, detection).ok_or_else(|| Error::NoSymbol(what()))?;
    let d = usize::try_from(device)
        .ok()
        .filter(|&d| d < made.selections.len())
        .ok_or(Error::NoDevice(device))?;
    if !made.has_code(d) {
        let reading = library.enter().ok_or_else(|| Error::NoSymbol(what()))?;
        return Err(Error::NoImage(format!(
            "{}: device {device} has no compatible image for {}{}",
            reading.origin(),
            reading.name(symbol),
            reading.unreadable()
        )));
    }
    resolve_in(library, detection, made, d, symbol)
}

/// The symbol a registry lookup found (`None`: nothing registered there),
/// resolved on `device`; `what` names it in errors.
pub(crate) fn lookup(
    found: Option<registry::Found>,
    device: i64,
    what: impl Fn() -> String,
) -> Result<(u64, u64), Error> {
    let (id, symbol) = found.ok_or_else(|| Error::NoSymbol(what()))?;
    let library = registry::library(id).ok_or_else(|| Error::NoSymbol(what()))?;
    resolve(&library, detection(), device, &symbol, what)
}

fn resolve_in(
    library: &Library,
    detection: &'static Detection,
    made: &Made,
    device: usize,
    symbol: &Symbol,
) -> Result<(u64, u64), Error> {
    let module = module(library, detection, made, device)?;
    let name = library
        .enter()
        .map(|reading| reading.name(symbol))
        .ok_or(Error::NoLibrary(library.id as i64))?;
    loader_lock::check("a driver symbol lookup");
    match symbol.kind {
        SymbolKind::Kernel => module.kernel(&name).map(|k| (k.handle, 0)),
        // Its memory, which the device reaches through the pointer set at
        // load (`share_managed`), as clr answers for a managed variable.
        SymbolKind::Managed { .. } => match module.shared(&name) {
            Some(g) => Ok((g.address, g.size)),
            None => module.global(&name).map(|g| (g.address, g.size)),
        },
        _ => module.global(&name).map(|g| (g.address, g.size)),
    }
    .map_err(|source| Error::Driver {
        origin: origin(library),
        what: name,
        device,
        source: Box::new(source),
    })
}

/// Unregisters library `id` (a fat binary's handle already released, or a
/// descriptor's) from a destructor, and returns only once no reader uses its
/// memory, so that the object may be unmapped. Its modules are unloaded by
/// the next query, not here. With `OFFLOAD_LOADER_INFO`, it is reported (with
/// its selection when the devices are already known: a destructor never
/// detects).
pub(crate) fn unregister(id: usize) -> bool {
    let (was, record) = registry::unregister(id);
    if !was {
        return false;
    }
    let slot = slots::get(id).and_then(|s| s.fatbin());
    let record = record.or_else(|| {
        // A fat binary never used has no record yet: made now to report it.
        // In the destructor: the object is loaded, and this thread may hold
        // the loader's lock already (a walk then takes it again, recursively).
        let fatbin = slot.filter(|_| info::enabled())?;
        Some(Arc::new(Library::from_slot(id, fatbin, process::locate)))
    });
    if let Some(library) = record {
        if info::enabled() {
            // Selected (and reported) now if it never was, but only for
            // devices already known. This thread may hold the loader's lock
            // (a destructor), which is recursive: saying something waits on
            // no other thread.
            match offload_detect::detected(needed()) {
                Some(detection) => {
                    made(&library, detection);
                }
                // Reported at exit, from a copy (this thread may hold the
                // loader's lock: no detection here).
                None => keep_unreported(&library),
            }
            info::say([Message::Info(format!(
                "library {id} ({}): unregistered",
                origin(&library)
            ))]);
        }
        library.revoke();
        retire(library);
    }
    if let Some(pin) = slot.and_then(|f| Pin::from_raw(f.pin)) {
        objects::unpin(pin);
    }
    true
}

/// Copies `library`, unregistered before any device was known, for the
/// report at exit, unless [`UNREPORTED_KEPT`] were copied already.
fn keep_unreported(library: &Library) {
    if UNREPORTED_COUNT.fetch_add(1, Ordering::Relaxed) < UNREPORTED_KEPT {
        if let Some(reading) = library.enter() {
            UNREPORTED.push(reading.snapshot());
        }
    }
}

/// Hands an unregistered library that holds loaded modules to the next
/// query, which unloads them when it drops the last reference; one that
/// holds none is freed now (freeing memory calls no driver), so that a
/// program that never queries, as one beside a vendor runtime, does not
/// grow with every `dlopen`/`dlclose`. A module loaded after the check, by
/// a thread that read the image before [`Library::revoke`], is that
/// thread's to unload: it holds a reference until it is done.
fn retire(library: Arc<Library>) {
    if library.holds_modules() {
        RETIRED.push(library);
    }
}
