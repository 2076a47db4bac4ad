//! The registered libraries: their images, the image selected for each device,
//! the kernels and variables registered against them, and the images loaded
//! from them (lazily, at first lookup, unless `OFFLOAD_LOADER_EAGER=1`).
//!
//! A library's images live in the memory of the object that registered it,
//! which `dlclose` unmaps right after the object's destructor unregisters
//! them. So the registry owns no `'static` borrow: a library's bytes are only
//! reached through [`Library::enter`], which counts the reader, and
//! [`unregister`] revokes the library and waits for its readers before it
//! returns to the destructor. Lookups by host address and by kernel name go
//! through hash maps; names stay borrowed C strings until a lookup or a
//! message needs them. The registry's one lock is released around `fork`
//! (see [`crate::lock`]).
//!
//! A [`Reading`] is an [`ImageSource`]: it selects through
//! [`offload_loader::select`], the function `offload-probe` calls, so the
//! runtime loads the image the probe names.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ffi::{c_char, CStr};
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use offload_detect::LoadedImage;
use offload_loader::discover::process::{self, ObjectName};
use offload_loader::target::OffloadKind;
use offload_loader::{select, Container, Content, Image, ImageSource, Limits, Policy, Selection};
use once_cell::sync::{Lazy, OnceCell};

use crate::devices;
use crate::error::Error;
use crate::info;
use crate::lock::ForkSafeMutex;
use crate::objects::{self, Pin};
use crate::slots::{self, Fatbin, State};

/// The language runtime a library registered through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Runtime {
    Hip,
    OpenMp,
    /// nvcc's `__cudaRegisterFatBinary` (see `cuda.rs`).
    Cuda,
}

impl Runtime {
    pub(crate) fn offload_kind(self) -> OffloadKind {
        match self {
            Runtime::Hip => OffloadKind::Hip,
            Runtime::OpenMp => OffloadKind::OpenMp,
            Runtime::Cuda => OffloadKind::Cuda,
        }
    }
}

/// A library's images and where their bytes are. The `'static` lifetimes are
/// erased borrows of the registering object's memory: they are only handed
/// out, with a shorter lifetime, through a [`Reading`].
pub(crate) enum Images {
    /// A bundle or compressed bundle in this process's memory, parsed at
    /// first use (as HIP defers its fat binaries): registering it costs no
    /// more than recording where it is.
    Fatbin {
        /// From the fat binary to the end of its segment; `None` when the
        /// wrapper points into no loaded segment.
        bytes: Option<&'static [u8]>,
        parsed: OnceCell<Result<Container<'static>, offload_loader::Error>>,
    },
    /// Images listed by a `__tgt_bin_desc`, with each image's code in this
    /// process's memory.
    Listed {
        images: Vec<Image>,
        code: Vec<&'static [u8]>,
    },
}

/// Where a library came from, kept as addresses; the text is made only when
/// a message is printed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Origin {
    pub object: ObjectName,
    /// `fatbin` or `descriptor`.
    pub what: &'static str,
    pub address: usize,
}

/// A registered kernel or variable. `name` is borrowed from the registering
/// object's read-only data (a NUL-terminated string), read only while the
/// library is entered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Symbol {
    /// The host-side address: kernel stub or shadow variable.
    pub host: usize,
    /// The device-side name: address of a NUL-terminated string.
    pub name: usize,
    /// What it is.
    pub kind: SymbolKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SymbolKind {
    Kernel,
    Variable { size: u64 },
    Managed { size: u64 },
    Surface,
    Texture,
}

/// A device's loaded image: loaded once, or the reason it could not be.
type ModuleCell = OnceCell<Result<Arc<LoadedImage>, Error>>;

/// One registered library (one fat binary or one OpenMP descriptor).
pub(crate) struct Library {
    pub id: usize,
    origin: Origin,
    source: Images,
    runtime: Runtime,
    /// The selection for each device, by device index: made at first use.
    selections: OnceCell<Vec<Selection>>,
    /// The module loaded for each device, by device index: made at first use.
    modules: OnceCell<Vec<ModuleCell>>,
    /// Threads reading the library's memory now.
    readers: AtomicUsize,
    /// Set by [`unregister`]: no new reader may enter.
    revoked: AtomicBool,
}

/// A library entered by a reader: its memory stays mapped while this lives.
pub(crate) struct Reading<'a> {
    lib: &'a Library,
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        self.lib.readers.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Library {
    /// Library `id`, registered and not yet used.
    fn new(id: usize, origin: Origin, source: Images, runtime: Runtime) -> Library {
        Library {
            id,
            origin,
            source,
            runtime,
            selections: OnceCell::new(),
            modules: OnceCell::new(),
            readers: AtomicUsize::new(0),
            revoked: AtomicBool::new(false),
        }
    }

    /// The record of the fat binary in slot `id`: its bytes run from its
    /// address to the end of the segment that holds it, found in the pinned
    /// object or else by a lookup; a fat binary in no loaded segment is a
    /// library whose parse failed.
    fn from_slot(id: usize, fatbin: Fatbin) -> Library {
        let segment = Pin::from_raw(fatbin.pin)
            .and_then(|pin| pin.segment(fatbin.start))
            .or_else(|| Some(process::locate(fatbin.start)?.segment));
        // SAFETY: the range lies in a loaded segment of the registering
        // object, which stays loaded until its destructor unregisters this fat
        // binary; the library reaches these bytes only until `unregister` has
        // revoked it.
        let bytes = segment.map(|s| unsafe { process::memory(fatbin.start..s.end) });
        Library::new(
            id,
            Origin {
                object: ObjectName::from_raw(fatbin.object),
                what: "fatbin",
                address: fatbin.start,
            },
            Images::Fatbin {
                bytes,
                parsed: OnceCell::new(),
            },
            fatbin.runtime,
        )
    }

    /// Enters the library, or `None` once it is unregistered.
    pub(crate) fn enter(&self) -> Option<Reading<'_>> {
        // Paired with `revoke`: a reader either sees `revoked`, or is counted
        // before `revoke` reads the count (both sequentially consistent).
        self.readers.fetch_add(1, Ordering::SeqCst);
        let reading = Reading { lib: self };
        (!self.revoked.load(Ordering::SeqCst)).then_some(reading)
    }

    /// Stops new readers and waits for the current ones to leave.
    fn revoke(&self) {
        self.revoked.store(true, Ordering::SeqCst);
        let mut spins = 0u32;
        while self.readers.load(Ordering::SeqCst) != 0 {
            spins += 1;
            if spins < 100 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
    }
}

impl ImageSource for Reading<'_> {
    fn images(&self) -> &[Image] {
        match &self.lib.source {
            Images::Fatbin { .. } => self.container().map_or(&[], |c| c.images()),
            Images::Listed { images, .. } => images,
        }
    }

    fn read_content(&self, index: usize) -> Option<Content> {
        match &self.lib.source {
            Images::Fatbin { .. } => self.container().ok()?.read_content(index),
            Images::Listed { code, .. } => code.get(index).map(|code| Content::read(code)),
        }
    }
}

impl<'a> Reading<'a> {
    pub(crate) fn id(&self) -> usize {
        self.lib.id
    }

    /// The fat binary's container, parsed now if it was not yet (published
    /// like `selections`, never filled under the cell's lock); its error is
    /// reported once, by the thread that publishes it.
    fn container(&self) -> Result<&Container<'_>, &offload_loader::Error> {
        let Images::Fatbin { bytes, parsed } = &self.lib.source else {
            unreachable!("only fat binaries have a container")
        };
        if parsed.get().is_none() {
            let result = match bytes {
                Some(bytes) => Container::parse(bytes, &Limits::default()),
                None => Err(offload_loader::Error::new(
                    8,
                    offload_loader::ErrorKind::Malformed {
                        what: "the wrapper's fat binary pointer",
                        why: "it points into no loaded segment",
                    },
                )),
            };
            if parsed.set(result).is_ok() {
                if let Some(Err(e)) = parsed.get() {
                    let message = format!("{}: {e}", self.origin());
                    tracing::warn!("{message}");
                    eprintln!("offload-loader: {message}");
                    crate::set_last_error(message);
                }
            }
        }
        match parsed.get() {
            Some(Ok(c)) => Ok(c),
            Some(Err(e)) => Err(e),
            None => unreachable!("set above"),
        }
    }

    /// Why the library's images could not be listed, if they could not: a
    /// fat binary that does not parse, said after "no compatible image".
    pub(crate) fn unreadable(&self) -> String {
        match &self.lib.source {
            Images::Fatbin { .. } => self
                .container()
                .err()
                .map(|e| format!(" (its fat binary cannot be read: {e})"))
                .unwrap_or_default(),
            Images::Listed { .. } => String::new(),
        }
    }

    /// `<object path> fatbin at 0x…`: built now, for a message.
    pub(crate) fn origin(&self) -> String {
        let o = self.lib.origin;
        // SAFETY: the library is entered, so its object is still loaded.
        let path = unsafe { o.object.path() };
        format!("{} {} at {:#x}", path.display(), o.what, o.address)
    }

    /// The selection for each device, made (and reported) the first time it
    /// is needed. Registration runs in constructors, where a library being
    /// `dlopen`ed holds the dynamic loader's lock: detecting devices there
    /// would load driver libraries under that lock, so it waits for first use
    /// (or `OFFLOAD_LOADER_EAGER=1`).
    pub(crate) fn selections(&self) -> &'a [Selection] {
        let lib: &'a Library = self.lib;
        if let Some(s) = lib.selections.get() {
            return s;
        }
        // Made outside the cell and then published, never inside
        // `get_or_init`: a thread forked meanwhile must not wait on a cell
        // whose initialising thread does not exist in the child. Two threads
        // may both select; the first to publish wins and reports.
        let policy = Policy {
            offload_kind: Some(lib.runtime.offload_kind()),
        };
        let selections: Vec<Selection> = devices::devices()
            .iter()
            .map(|d| select(&d.target, self, &policy))
            .collect();
        if lib.selections.set(selections).is_ok() {
            if let Some(s) = lib.selections.get() {
                report(self, s);
            }
        }
        lib.selections.get().map_or(&[], Vec::as_slice)
    }

    /// The bytes of image `index`, borrowed from the process's memory or
    /// from the library's inflated bundle.
    pub(crate) fn image_bytes(&self, index: usize) -> Result<Cow<'_, [u8]>, Error> {
        let bad = |source| Error::BadImage {
            origin: self.origin(),
            source: Box::new(source),
        };
        match &self.lib.source {
            Images::Fatbin { .. } => match self.container() {
                Ok(c) => c.image_bytes(index).map_err(bad),
                Err(e) => Err(bad(e.clone())),
            },
            Images::Listed { code, .. } => code
                .get(index)
                .map(|b| Cow::Borrowed(*b))
                .ok_or_else(|| Error::NoSymbol(format!("image {index} of {}", self.origin()))),
        }
    }

    /// The image loaded from this library for `device`, loading it on first use.
    pub(crate) fn module(&self, device: usize) -> Result<Arc<LoadedImage>, Error> {
        let devices = devices::devices();
        let lib = self.lib;
        if lib.modules.get().is_none() {
            let _ = lib
                .modules
                .set(devices.iter().map(|_| OnceCell::new()).collect());
        }
        let cell = lib
            .modules
            .get()
            .and_then(|m| m.get(device))
            .ok_or(Error::NoDevice(device as i64))?;
        if let Some(loaded) = cell.get() {
            return loaded.clone();
        }
        // Loaded outside the cell, then published (see `selections`): two
        // threads may both load; the loser's module is unloaded when dropped.
        let loaded = (|| {
            let selections = self.selections();
            let selection = selections
                .get(device)
                .ok_or(Error::NoDevice(device as i64))?;
            let index = selection
                .chosen
                .ok_or_else(|| Error::NoImage(no_binary_message(self, selections, device)))?;
            let bytes = self.image_bytes(index)?;
            let target = devices.get(device).ok_or(Error::NoDevice(device as i64))?;
            target
                .load(&bytes)
                .map(Arc::new)
                .map_err(|source| Error::Driver {
                    origin: self.origin(),
                    what: format!("loading {}", self.images()[index].id),
                    device,
                    source: Box::new(source),
                })
        })();
        let _ = cell.set(loaded.clone());
        cell.get().cloned().unwrap_or(loaded)
    }

    /// The device handle or address of `symbol` on `device`: kernel handle, or
    /// variable address and size.
    pub(crate) fn resolve(&self, device: usize, symbol: &Symbol) -> Result<(u64, u64), Error> {
        let module = self.module(device)?;
        let name = self.name(symbol);
        match symbol.kind {
            SymbolKind::Kernel => module.kernel(&name).map(|k| (k.handle, 0)),
            _ => module.global(&name).map(|g| (g.address, g.size)),
        }
        .map_err(|source| Error::Driver {
            origin: self.origin(),
            what: name.into_owned(),
            device,
            source: Box::new(source),
        })
    }

    /// The symbol's name, read from the object's memory now.
    pub(crate) fn name(&self, symbol: &Symbol) -> Cow<'_, str> {
        // SAFETY: `symbol.name` is a NUL-terminated string in the object that
        // registered this library, which stays loaded while it is entered.
        unsafe { CStr::from_ptr(symbol.name as *const c_char) }.to_string_lossy()
    }
}

/// HIP's "no binary for GPU", with the reasons of the closest candidates.
fn no_binary_message(library: &Reading, selections: &[Selection], device: usize) -> String {
    let target = devices::devices()
        .get(device)
        .map(|d| d.target.to_string())
        .unwrap_or_default();
    let mut why: Vec<String> = selections[device]
        .rejected
        .iter()
        .filter(|(i, _)| !library.images()[*i].is_host())
        .map(|(i, r)| format!("[{i}] {}: {r}", library.images()[*i].id))
        .collect();
    why.truncate(8);
    format!(
        "no binary for GPU: device {device} ({target}) has no compatible image in {}; {}",
        library.origin(),
        if why.is_empty() {
            "it holds no device image".into()
        } else {
            why.join("; ")
        }
    )
}

/// One line per device: what was chosen and why the others lost. The lines
/// are built only when `OFFLOAD_LOADER_INFO` prints them; a device with no
/// image for code of its own vendor is always reported.
fn report(library: &Reading, selections: &[Selection]) {
    let devices = devices::devices();
    if devices.is_empty() && *info::INFO {
        info::line(&format!(
            "library {} ({}): {} images, no GPU found",
            library.id(),
            library.origin(),
            library.images().len()
        ));
    }
    for (d, device) in devices.iter().enumerate() {
        let selection = &selections[d];
        match selection.chosen {
            Some(i) if *info::INFO => {
                let lost: Vec<String> = selection
                    .rejected
                    .iter()
                    .filter(|(i, _)| !library.images()[*i].is_host())
                    .map(|(i, r)| format!("[{i}] {}: {r}", library.images()[*i].arch))
                    .collect();
                info::line(&format!(
                    "library {} ({}): device {d} {} loads [{i}] {}{}",
                    library.id(),
                    library.origin(),
                    device.target,
                    library.images()[i].id,
                    if lost.is_empty() {
                        String::new()
                    } else {
                        format!("; not {}", lost.join("; "))
                    }
                ));
            }
            Some(_) => {}
            None if library
                .images()
                .iter()
                .any(|i| i.triple.gpu_vendor() == Some(device.target.vendor())) =>
            {
                let message = no_binary_message(library, selections, d);
                tracing::warn!("{message}");
                eprintln!("offload-loader: {message}");
                crate::set_last_error(message);
            }
            None if *info::INFO => info::line(&format!(
                "library {} ({}): device {d} {}: no {} code in this library",
                library.id(),
                library.origin(),
                device.target,
                device.target.vendor()
            )),
            None => {}
        }
    }
}

/// A multiplicative hash for addresses and short names (FxHash's constant):
/// the keys are not chosen by an adversary who gains from collisions.
#[derive(Default)]
pub(crate) struct FastHasher(u64);

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut v = [0u8; 8];
            v[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(v));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// A NUL-terminated name in a registered object's memory, compared by content.
#[derive(Clone, Copy)]
struct NameKey(usize);

impl NameKey {
    fn bytes(&self) -> &[u8] {
        // SAFETY: a key is in the map only while its library is registered
        // (its object loaded); a key built for a query lives during the call.
        unsafe { CStr::from_ptr(self.0 as *const c_char) }.to_bytes()
    }
}

impl PartialEq for NameKey {
    fn eq(&self, other: &Self) -> bool {
        self.bytes() == other.bytes()
    }
}
impl Eq for NameKey {}
impl Hash for NameKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.bytes().hash(state)
    }
}

/// A symbol: its library's id and its index there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SymbolRef {
    library: usize,
    index: usize,
}

/// Everything registered, under one fork-safe lock. Ids are the slots'
/// (see [`crate::slots`]): never reused, and issued without this lock.
#[derive(Default)]
pub(crate) struct Registry {
    /// By id: the library records made so far (a fat binary's at first use).
    libraries: Vec<Option<Arc<Library>>>,
    /// The symbols of each library, by id.
    symbols: Vec<Vec<Symbol>>,
    kernels: FastMap<usize, SymbolRef>,
    variables: FastMap<usize, SymbolRef>,
    /// Kernels by name: built at the first lookup by name, kept up to date after.
    kernel_names: Option<FastMap<NameKey, SymbolRef>>,
    /// OpenMP: descriptor address → library id.
    pub descriptors: FastMap<usize, usize>,
    /// AOMP image infos waiting for the next descriptor: image number → target ID.
    pub image_info: Vec<(i32, String)>,
    /// Requirement flags from `__tgt_register_requires`.
    pub requires: i64,
}

impl Registry {
    /// Library `id`, if it is registered: made from its slot the first time.
    fn library(&mut self, id: usize) -> Option<Arc<Library>> {
        if let Some(Some(library)) = self.libraries.get(id) {
            return Some(library.clone());
        }
        let slot = slots::get(id)?;
        if slot.state() != State::Fatbin {
            return None;
        }
        let library = Arc::new(Library::from_slot(id, slot.fatbin()?));
        set(&mut self.libraries, id, Some(library.clone()));
        Some(library)
    }
}

/// `v[at] = value`, growing `v` as needed.
fn set<T: Default>(v: &mut Vec<T>, at: usize, value: T) {
    if v.len() <= at {
        v.resize_with(at + 1, T::default);
    }
    v[at] = value;
}

/// Whether slot `id` is a registered library.
fn is_live(id: usize) -> bool {
    slots::get(id).is_some_and(|s| matches!(s.state(), State::Fatbin | State::Descriptor))
}

fn after_fork(registry: &mut Option<Registry>) {
    // The threads that were reading libraries do not exist in the child.
    if let Some(r) = registry {
        for l in r.libraries.iter().flatten() {
            l.readers.store(0, Ordering::SeqCst);
        }
    }
}

pub(crate) type Shared = Option<Registry>;

static REGISTRY: ForkSafeMutex<Shared> = ForkSafeMutex::new(None, after_fork);

/// Installs the registry's `fork` handlers (see [`crate::lock`]).
pub(crate) fn install_fork_handlers() {
    REGISTRY.install();
}

/// Runs `f` on the registry, under its lock.
pub(crate) fn with<R>(f: impl FnOnce(&mut Registry) -> R) -> R {
    let mut guard = REGISTRY.lock();
    f(guard.get_or_insert_with(Registry::default))
}

static EAGER: Lazy<bool> =
    Lazy::new(|| std::env::var_os("OFFLOAD_LOADER_EAGER").is_some_and(|v| v == "1"));

/// Registers a library listed by a descriptor and returns its id.
pub(crate) fn register(runtime: Runtime, origin: Origin, source: Images) -> usize {
    let id = slots::push(State::Descriptor, None);
    let library = Arc::new(Library::new(id, origin, source, runtime));
    with(|r| set(&mut r.libraries, id, Some(library.clone())));
    if *EAGER {
        load_now(&library);
    }
    id
}

/// Registers the fat binary recorded by `fatbin` (`None`: it could not be
/// registered) and returns its handle. Selection and loading wait for first
/// use, unless `OFFLOAD_LOADER_EAGER=1` asks for them now.
pub(crate) fn register_fatbin(fatbin: Option<Fatbin>, runtime: Runtime) -> usize {
    let id = match fatbin {
        Some(f) => slots::push(State::Fatbin, Some(f)),
        None => slots::push(
            State::Failed,
            Some(Fatbin {
                runtime,
                object: 0,
                start: 0,
                pin: 0,
            }),
        ),
    };
    if fatbin.is_some() && *EAGER {
        if let Some(library) = with(|r| r.library(id)) {
            load_now(&library);
        }
    }
    slots::handle(id)
}

/// `OFFLOAD_LOADER_EAGER=1`: selects and loads now, for every device.
fn load_now(library: &Library) {
    // In a constructor: detect without the time-limited thread.
    devices::devices_in_place();
    if let Some(reading) = library.enter() {
        for device in 0..reading.selections().len() {
            if let Err(e) = reading.module(device) {
                crate::set_last_error(e.to_string());
            }
        }
    }
}

/// What a HIP handle names.
pub(crate) enum HandleState {
    /// A registered library.
    Library(usize),
    /// Issued for a fat binary that failed to register.
    Failed,
    /// Never issued, or already released.
    Unknown,
}

pub(crate) fn handle(handle: usize) -> HandleState {
    match slots::from_handle(handle) {
        Some((id, slot)) => match slot.state() {
            State::Fatbin => HandleState::Library(id),
            State::Failed => HandleState::Failed,
            _ => HandleState::Unknown,
        },
        None => HandleState::Unknown,
    }
}

/// Releases a HIP handle: the library it names, if any, or `None` when the
/// handle was never issued or was already released. A handle is released
/// once: the second of two racing releases gets `None`.
pub(crate) fn release_handle(handle: usize) -> Option<Option<usize>> {
    let (id, slot) = slots::from_handle(handle)?;
    if slot.release(State::Fatbin) {
        Some(Some(id))
    } else if slot.release(State::Failed) {
        Some(None)
    } else {
        None
    }
}

/// Number of libraries ever registered, fat binaries that failed included
/// (ids run from 0 to it).
pub(crate) fn count() -> usize {
    slots::len()
}

/// The library with this id, if still registered.
pub(crate) fn library(id: usize) -> Option<Arc<Library>> {
    with(|r| r.library(id))
}

/// Number of symbols of library `id`, if registered.
pub(crate) fn symbol_count(id: usize) -> Option<usize> {
    with(|r| is_live(id).then(|| r.symbols.get(id).map_or(0, Vec::len)))
}

/// Adds a symbol to library `id`; with eager loading, resolves it now.
pub(crate) fn add_symbol(id: usize, symbol: Symbol) -> Result<(), Error> {
    let library = with(|r| {
        if !is_live(id) {
            return Err(Error::NoLibrary(id as i64));
        }
        if r.symbols.len() <= id {
            r.symbols.resize_with(id + 1, Vec::new);
        }
        let at = SymbolRef {
            library: id,
            index: r.symbols[id].len(),
        };
        r.symbols[id].push(symbol);
        let map = match symbol.kind {
            SymbolKind::Kernel => {
                if let Some(names) = &mut r.kernel_names {
                    names.entry(NameKey(symbol.name)).or_insert(at);
                }
                &mut r.kernels
            }
            _ => &mut r.variables,
        };
        // The first registration of a host address wins, as in a scan in
        // registration order.
        map.entry(symbol.host).or_insert(at);
        Ok(if *EAGER { r.library(id) } else { None })
    })?;
    if let Some(library) = library {
        // In a constructor: detect without the time-limited thread.
        devices::devices_in_place();
        if let Some(reading) = library.enter() {
            for device in 0..reading.selections().len() {
                if reading.selections()[device].chosen.is_some() {
                    if let Err(e) = reading.resolve(device, &symbol) {
                        crate::set_last_error(e.to_string());
                    }
                }
            }
        }
    }
    Ok(())
}

/// Unregisters library `id` (a fat binary's handle already released, or a
/// descriptor's) and returns only once no reader is using its memory, so
/// that the caller (the object's destructor) may let it be unmapped. With
/// `OFFLOAD_LOADER_INFO`, a library whose selection was never needed reports
/// it now. Its modules are unloaded when the last user lets go.
pub(crate) fn unregister(id: usize) -> bool {
    let Some(slot) = slots::get(id) else {
        return false;
    };
    if !slot.release(State::Descriptor) && slot.state() != State::Released {
        return false;
    }
    let library = with(|r| {
        if let Some(symbols) = r.symbols.get_mut(id).map(std::mem::take) {
            for (index, s) in symbols.iter().enumerate() {
                let at = SymbolRef { library: id, index };
                let map = if s.kind == SymbolKind::Kernel {
                    if let Some(names) = &mut r.kernel_names {
                        if names.get(&NameKey(s.name)) == Some(&at) {
                            names.remove(&NameKey(s.name));
                        }
                    }
                    &mut r.kernels
                } else {
                    &mut r.variables
                };
                if map.get(&s.host) == Some(&at) {
                    map.remove(&s.host);
                }
            }
        }
        r.libraries.get_mut(id).and_then(Option::take)
    });
    // A fat binary never used has no record yet: made now only to report it.
    let library = library.or_else(|| {
        let fatbin = slot.fatbin().filter(|_| *info::INFO)?;
        Some(Arc::new(Library::from_slot(id, fatbin)))
    });
    if let Some(library) = &library {
        if *info::INFO {
            if let Some(reading) = library.enter() {
                if library.selections.get().is_none() {
                    // In a destructor, maybe under the loader's lock.
                    devices::devices_in_place();
                    reading.selections();
                }
                info::line(&format!(
                    "library {} ({}): unregistered",
                    library.id,
                    reading.origin()
                ));
            }
        }
        library.revoke();
    }
    if let Some(pin) = slot.fatbin().and_then(|f| Pin::from_raw(f.pin)) {
        objects::unpin(pin);
    }
    true
}

/// A symbol found by a lookup, with its library.
pub(crate) type Found = (Arc<Library>, Symbol);

fn found(r: &mut Registry, at: Option<SymbolRef>) -> Option<Found> {
    let at = at?;
    let symbol = *r.symbols.get(at.library)?.get(at.index)?;
    Some((r.library(at.library)?, symbol))
}

/// The kernel whose host stub is `host`.
pub(crate) fn kernel(host: usize) -> Option<Found> {
    with(|r| found(r, r.kernels.get(&host).copied()))
}

/// The variable whose host shadow is `host`.
pub(crate) fn variable(host: usize) -> Option<Found> {
    with(|r| found(r, r.variables.get(&host).copied()))
}

/// The kernel whose device-side name is `name`.
pub(crate) fn kernel_by_name(name: &CStr) -> Option<Found> {
    with(|r| {
        if r.kernel_names.is_none() {
            let mut names = FastMap::default();
            for (id, symbols) in r.symbols.iter().enumerate() {
                for (index, s) in symbols.iter().enumerate() {
                    if s.kind == SymbolKind::Kernel {
                        names
                            .entry(NameKey(s.name))
                            .or_insert(SymbolRef { library: id, index });
                    }
                }
            }
            r.kernel_names = Some(names);
        }
        let at = r
            .kernel_names
            .as_ref()?
            .get(&NameKey(name.as_ptr() as usize))
            .copied();
        found(r, at)
    })
}
