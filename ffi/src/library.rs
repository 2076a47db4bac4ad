//! A registered library and the memory a reader may touch.
//!
//! A library's images live in the memory of the object that registered it,
//! which `dlclose` unmaps right after the object's destructor unregisters
//! them. So nothing here holds a `'static` borrow that escapes: the bytes are
//! reached only through [`Library::enter`], which counts the reader, and
//! [`Library::revoke`] (called by unregistration) stops new readers and waits
//! for the current ones before the destructor returns to `dlclose`.
//!
//! That wait is safe because a [`Reading`] only parses, selects, copies and
//! builds text (rule 1 of [`crate::loader_lock`]): every method here is pure
//! work on memory, so a reader always leaves. What needs a device or a driver
//! (the selection's devices, the loaded modules) is handed in by, or stored
//! for, `runtime`, which does it with no library entered.

use std::borrow::Cow;
use std::ffi::{c_char, CStr};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::Arc;

use offload_detect::{Detection, Device, LoadedImage};
use offload_loader::{select, Container, Content, Image, ImageSource, Limits, Policy, Selection};
use once_cell::race::OnceBox;

use crate::error::Error;
use crate::link::{self, Copied, Linked};
use crate::loader_lock::Inside;
use crate::objects;
use crate::process::{self, Located, ObjectName};
use crate::slots::{Fatbin, Runtime};
use crate::vendor_terms;

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
        /// Published with one compare-and-swap, never initialised under a
        /// lock (a thread forked away mid-parse leaves no waiter behind).
        parsed: OnceBox<Result<Container<'static>, offload_loader::Error>>,
        /// A CUDA device-link stub's objects' fat binaries (see
        /// [`crate::link`]), each to the end of its segment.
        linked: Vec<Linked>,
    },
    /// Images listed by a `__tgt_bin_desc`, with each image's code in this
    /// process's memory.
    Listed {
        images: Vec<Image>,
        code: Vec<&'static [u8]>,
    },
}

/// Where a library came from, kept as addresses; the text is made only when
/// a message needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Origin {
    pub object: ObjectName,
    /// `fatbin` or `descriptor`.
    pub what: &'static str,
    pub address: usize,
}

/// A registered kernel or variable. `name` is borrowed from the registering
/// object's read-only data (a NUL-terminated string), read only while the
/// library is entered or the registry's lock is held.
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
    Variable {
        size: u64,
    },
    /// A HIP managed variable: `host` is the host's copy.
    Managed {
        size: u64,
    },
    /// A CUDA managed variable: `host` is the address of nvcc's host
    /// pointer to it, which `__cudaInitModule` sets.
    CudaManaged {
        size: u64,
    },
    Surface,
    Texture,
}

/// A device's loaded image: loaded once, or the reason it could not be;
/// published by compare-and-swap (never initialised under a lock).
pub(crate) type ModuleCell = OnceBox<Result<Arc<LoadedImage>, Error>>;

/// What the runtime made of a library for one detection: the selection for
/// each device and, at first use, the module loaded on each. A detection in
/// which a driver timed out is replaced by a later one (see
/// `offload_detect::devices`), and a library gets one of these per
/// detection it met, so nothing made for a provisional device list is used
/// for the final one. Never freed before the library: module handles the
/// runtime gave out stay valid while it is registered.
pub(crate) struct Made {
    /// The detection it was made for (compared by address: detections are
    /// never freed).
    detection: *const Detection,
    pub selections: Vec<Selection>,
    /// Per device: its module is linked from the program's objects by the
    /// CUDA driver, the stub having no image for it ([`crate::link`]).
    linked: Vec<bool>,
    pub modules: Vec<ModuleCell>,
    next: *mut Made,
}

impl Made {
    /// Whether `device` has code: an image selected, or the objects of an
    /// `-rdc` stub linked for it.
    pub(crate) fn has_code(&self, device: usize) -> bool {
        self.selections
            .get(device)
            .is_some_and(|s| s.chosen.is_some())
            || self.is_linked(device)
    }

    /// Whether `device`'s module is linked from an `-rdc` stub's objects.
    pub(crate) fn is_linked(&self, device: usize) -> bool {
        self.linked.get(device).copied().unwrap_or(false)
    }
}

// SAFETY: `detection` and `next` are only compared and followed, never
// written after publication; the rest is `Send + Sync`.
unsafe impl Send for Made {}
// SAFETY: as above.
unsafe impl Sync for Made {}

/// One registered library (one fat binary or one OpenMP descriptor).
pub(crate) struct Library {
    pub id: usize,
    origin: Origin,
    source: Images,
    pub runtime: Runtime,
    /// What the runtime made, per detection: a list pushed by compare-and-swap.
    made: AtomicPtr<Made>,
    /// Inflated copies of images handed to C callers, by image index, kept
    /// while the library lives (`offload_loader_selected_image`).
    kept: OnceBox<Vec<OnceBox<Vec<u8>>>>,
    /// Threads reading the library's memory now.
    readers: AtomicUsize,
    /// Set by [`Library::revoke`]: no new reader may enter.
    revoked: AtomicBool,
}

impl Drop for Library {
    fn drop(&mut self) {
        let mut p = *self.made.get_mut();
        while !p.is_null() {
            // SAFETY: every node was leaked by `publish` and is freed once,
            // here, where no one else can reach the list.
            let node = unsafe { Box::from_raw(p) };
            p = node.next;
        }
    }
}

impl Library {
    /// Library `id`, registered and not yet used.
    pub(crate) fn new(id: usize, origin: Origin, source: Images, runtime: Runtime) -> Library {
        Library {
            id,
            origin,
            source,
            runtime,
            made: AtomicPtr::new(std::ptr::null_mut()),
            kept: OnceBox::new(),
            readers: AtomicUsize::new(0),
            revoked: AtomicBool::new(false),
        }
    }

    /// The record of the fat binary in slot `id`: its bytes run from its
    /// address to the end of the segment that holds it, found in the pinned
    /// object or else by `locate`; a fat binary in no loaded segment is a
    /// library whose parse failed. The caller keeps the object loaded while
    /// this runs (see `registry::library`).
    pub(crate) fn from_slot(
        id: usize,
        fatbin: Fatbin,
        mut locate: impl FnMut(usize) -> Option<Located>,
    ) -> Library {
        // The library reaches these bytes only until `revoke`.
        let bytes = fatbin_bytes(&fatbin, &mut locate);
        let linked = link::inputs(&fatbin, &mut locate);
        Library::new(
            id,
            Origin {
                object: ObjectName::from_raw(fatbin.object),
                what: "fatbin",
                address: fatbin.start,
            },
            Images::Fatbin {
                bytes,
                parsed: OnceBox::new(),
                linked,
            },
            fatbin.runtime,
        )
    }

    /// Enters the library, or `None` once it is revoked.
    pub(crate) fn enter(&self) -> Option<Reading<'_>> {
        // Paired with `revoke`: a reader either sees `revoked`, or is counted
        // before `revoke` reads the count (both sequentially consistent).
        self.readers.fetch_add(1, Ordering::SeqCst);
        let reading = Reading {
            lib: self,
            _inside: Inside::enter(),
        };
        (!self.revoked.load(Ordering::SeqCst)).then_some(reading)
    }

    /// Stops new readers and waits for the current ones to leave. Readers
    /// only do pure work (rule 1 of `loader_lock`), so the wait ends even
    /// when the caller holds the dynamic loader's lock.
    pub(crate) fn revoke(&self) {
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

    /// The threads that were reading do not exist in a forked child.
    pub(crate) fn forget_readers(&self) {
        self.readers.store(0, Ordering::SeqCst);
    }

    /// What was made for `detection`, if it was.
    pub(crate) fn made(&self, detection: &Detection) -> Option<&Made> {
        let mut p = self.made.load(Ordering::Acquire);
        // SAFETY: nodes are published with release ordering and freed only
        // when the library is dropped, which `&self` rules out.
        while let Some(node) = unsafe { p.as_ref() } {
            if std::ptr::eq(node.detection, detection) {
                return Some(node);
            }
            p = node.next;
        }
        None
    }

    /// Whether a module loaded from this library is held: dropping the
    /// last reference then calls a driver to unload it.
    pub(crate) fn holds_modules(&self) -> bool {
        let mut p = self.made.load(Ordering::Acquire);
        // SAFETY: as in `made`.
        while let Some(node) = unsafe { p.as_ref() } {
            if node.modules.iter().any(|m| matches!(m.get(), Some(Ok(_)))) {
                return true;
            }
            p = node.next;
        }
        false
    }

    /// Publishes `selections` for `detection`, unless another thread did
    /// first: the record to use, and whether it is this call's.
    pub(crate) fn publish(
        &self,
        detection: &Detection,
        selections: Vec<Selection>,
        linked: Vec<bool>,
    ) -> (&Made, bool) {
        let modules = selections.iter().map(|_| ModuleCell::new()).collect();
        let node = Box::into_raw(Box::new(Made {
            detection,
            selections,
            linked,
            modules,
            next: std::ptr::null_mut(),
        }));
        loop {
            if let Some(made) = self.made(detection) {
                // SAFETY: `node` was never published.
                drop(unsafe { Box::from_raw(node) });
                return (made, false);
            }
            let head = self.made.load(Ordering::Acquire);
            // SAFETY: `node` is ours until the exchange below publishes it.
            unsafe { (*node).next = head };
            if self
                .made
                .compare_exchange(head, node, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                // SAFETY: published: lives until the library is dropped.
                return (unsafe { &*node }, true);
            }
        }
    }
}

/// The bytes of the fat binary `fatbin` records: from its address to the
/// end of the segment that holds it, found in the registration's pinned
/// object or else by `locate`; `None` when no loaded segment holds it. The
/// caller uses them only while the registration lasts.
pub(crate) fn fatbin_bytes(
    fatbin: &Fatbin,
    locate: impl FnMut(usize) -> Option<Located>,
) -> Option<&'static [u8]> {
    let segment = objects::segment_of(fatbin.pin, fatbin.start, locate)?;
    // SAFETY: the range lies in a loaded segment of the registering object,
    // which stays loaded until its destructor unregisters this fat binary.
    Some(unsafe { process::memory(fatbin.start..segment.end) })
}

/// A library entered by a reader: its memory stays mapped while this lives.
pub(crate) struct Reading<'a> {
    lib: &'a Library,
    _inside: Inside,
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        self.lib.readers.fetch_sub(1, Ordering::SeqCst);
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

impl Reading<'_> {
    /// The fat binary's container, parsed now if it was not yet.
    fn container(&self) -> Result<&Container<'_>, &offload_loader::Error> {
        let Images::Fatbin { bytes, parsed, .. } = &self.lib.source else {
            unreachable!("only fat binaries have a container")
        };
        let parsed = parsed.get_or_init(|| {
            Box::new(match bytes {
                Some(bytes) => Container::parse(bytes, &Limits::default()),
                None => Err(offload_loader::Error::new(
                    8,
                    offload_loader::ErrorKind::Malformed {
                        what: "the wrapper's fat binary pointer",
                        why: "it points into no loaded segment",
                    },
                )),
            })
        });
        parsed.as_ref()
    }

    /// Why a fat binary's images cannot be listed, if they cannot.
    fn parse_error(&self) -> Option<&offload_loader::Error> {
        match &self.lib.source {
            Images::Fatbin { .. } => self.container().err(),
            Images::Listed { .. } => None,
        }
    }

    /// [`Reading::parse_error`], said after "no compatible image".
    pub(crate) fn unreadable(&self) -> String {
        self.parse_error()
            .map(|e| format!(" (its fat binary cannot be read: {e})"))
            .unwrap_or_default()
    }

    /// [`Reading::parse_error`] as a warning naming the library.
    pub(crate) fn parse_failure(&self) -> Option<String> {
        self.parse_error()
            .map(|e| format!("{}: {e}", self.origin()))
    }

    /// `<object path> fatbin at 0x…`: built now, for a message.
    pub(crate) fn origin(&self) -> String {
        let o = self.lib.origin;
        // SAFETY: the library is entered, so its object is still loaded.
        let path = unsafe { o.object.path() };
        format!("{} {} at {:#x}", path.display(), o.what, o.address)
    }

    /// The selection for each of `devices`, made through
    /// [`offload_loader::select()`], the function `offload-probe` calls.
    pub(crate) fn select_all(&self, devices: &[Device]) -> Vec<Selection> {
        select_all(self, self.lib.runtime, devices)
    }

    /// What the CUDA driver's linker would take for each of `devices` from
    /// the objects of a device-link stub (see [`crate::link`]); `None` for
    /// every device when this is no stub.
    pub(crate) fn link_plans(
        &self,
        devices: &[Device],
        selections: &[Selection],
    ) -> Vec<Option<link::Plan>> {
        if selections.iter().all(|s| s.chosen.is_some()) {
            return vec![None; devices.len()];
        }
        link::plans(&link::objects(self.linked()), devices, selections)
    }

    /// Copies of a device-link stub's objects' fat binaries, for the
    /// driver's linker.
    pub(crate) fn link_inputs(&self) -> Result<Vec<Vec<u8>>, Error> {
        link::copies(self.linked()).map_err(|why| {
            Error::NoImage(format!(
                "{}: its objects cannot be linked: {why}",
                self.origin()
            ))
        })
    }

    fn linked(&self) -> &[Linked] {
        match &self.lib.source {
            Images::Fatbin { linked, .. } => linked,
            Images::Listed { .. } => &[],
        }
    }

    /// The bytes of image `index`, borrowed from the process's memory or
    /// from the library's inflated bundle, or inflated for this call (an
    /// NVIDIA entry).
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

    /// The bytes of image `index` as a C caller keeps them: valid while the
    /// library is registered. An image inflated per call (an NVIDIA entry)
    /// is inflated once and kept by the library.
    pub(crate) fn kept_image(&self, index: usize) -> Result<&[u8], Error> {
        let bytes = match self.image_bytes(index)? {
            Cow::Borrowed(b) => return Ok(b),
            Cow::Owned(v) => v,
        };
        let count = self.images().len();
        let kept = self
            .lib
            .kept
            .get_or_init(|| Box::new((0..count).map(|_| OnceBox::new()).collect()));
        let cell = kept.get(index).ok_or(Error::NoImage(format!(
            "image {index} of {}",
            self.origin()
        )))?;
        Ok(cell.get_or_init(|| Box::new(bytes)).as_slice())
    }

    /// The symbol's name, copied from the object's memory.
    pub(crate) fn name(&self, symbol: &Symbol) -> String {
        // SAFETY: `symbol.name` is a NUL-terminated string in the object that
        // registered this library, which stays loaded while it is entered.
        unsafe { CStr::from_ptr(symbol.name as *const c_char) }
            .to_string_lossy()
            .into_owned()
    }

    /// HIP's "no binary for GPU" for `device` (the target `target`), with
    /// the reasons of the closest candidates.
    pub(crate) fn no_binary_message(
        &self,
        selection: &Selection,
        device: usize,
        target: &str,
    ) -> String {
        no_binary(&self.origin(), self.images(), selection, device, target)
    }

    /// What to say about `selections` (for `devices`), see [`report`].
    pub(crate) fn report(
        &self,
        devices: &[Device],
        selections: &[Selection],
        plans: &[Option<link::Plan>],
        info: bool,
    ) -> Vec<Message> {
        let origin = self.origin();
        report(
            self.lib.id,
            self.lib.runtime,
            &origin,
            self.images(),
            devices,
            (selections, plans),
            info,
        )
    }

    /// What a report needs of this library, copied out of its memory: the
    /// images, each with what its header says where that is cheap to read,
    /// and those of a device-link stub's objects.
    pub(crate) fn snapshot(&self) -> Snapshot {
        Snapshot {
            id: self.lib.id,
            origin: self.origin(),
            runtime: self.lib.runtime,
            images: Copied::of(self),
            objects: link::objects(self.linked()),
        }
    }
}

/// A library copied out of its memory for a report made after it is gone
/// (`OFFLOAD_LOADER_INFO` for a library unregistered before any query).
pub(crate) struct Snapshot {
    id: usize,
    origin: String,
    runtime: Runtime,
    images: Copied,
    objects: Vec<link::Object>,
}

impl ImageSource for Snapshot {
    fn images(&self) -> &[Image] {
        self.images.images()
    }

    fn read_content(&self, index: usize) -> Option<Content> {
        self.images.read_content(index)
    }
}

impl Snapshot {
    /// The library's id.
    pub(crate) fn id(&self) -> usize {
        self.id
    }

    /// The selection for each of `devices`, as [`Reading::select_all`] makes it.
    pub(crate) fn select_all(&self, devices: &[Device]) -> Vec<Selection> {
        select_all(self, self.runtime, devices)
    }

    /// What to say about `selections`, as [`Reading::report`] says it.
    pub(crate) fn report(
        &self,
        devices: &[Device],
        selections: &[Selection],
        info: bool,
    ) -> Vec<Message> {
        let plans = link::plans(&self.objects, devices, selections);
        report(
            self.id,
            self.runtime,
            &self.origin,
            self.images.images(),
            devices,
            (selections, &plans),
            info,
        )
    }
}

/// The selection for each of `devices` among `source`'s images of
/// `runtime`'s kind, made through [`offload_loader::select()`], the
/// function `offload-probe` calls.
fn select_all<S: ImageSource>(source: &S, runtime: Runtime, devices: &[Device]) -> Vec<Selection> {
    let policy = Policy {
        offload_kind: Some(runtime.offload_kind()),
    };
    devices
        .iter()
        .map(|d| select(&d.target, source, &policy))
        .collect()
}

/// HIP's "no binary for GPU" for `device` (this library's device number,
/// the target `target`) of the library at `origin`, with the reasons of the
/// closest candidates.
fn no_binary(
    origin: &str,
    images: &[Image],
    selection: &Selection,
    device: usize,
    target: &str,
) -> String {
    format!(
        "no binary for GPU: device {device} ({target}) has no compatible image in {origin}; {}",
        reasons(images, selection)
    )
}

/// Why none of `images` was selected: the reasons of the closest
/// candidates, at most 8.
fn reasons(images: &[Image], selection: &Selection) -> String {
    let mut why: Vec<String> = selection
        .rejected
        .iter()
        .filter(|(i, _)| !images[*i].is_host())
        .map(|(i, r)| format!("[{i}] {}: {r}", images[*i].id))
        .collect();
    why.truncate(8);
    if why.is_empty() {
        "it holds no device image".into()
    } else {
        why.join("; ")
    }
}

/// What to say about `selections` (for `devices`) of library `id` at
/// `origin`, registered by `runtime`, in that runtime's terms
/// ([`vendor_terms`]): one line per device when `info`; a device with no
/// image for code of its own vendor is a warning in any case where the
/// runtime then fails (HIP, CUDA), and a line under `info` where it skips
/// the device (libomptarget). Built inside a reader, said by the caller once
/// it has left.
fn report(
    id: usize,
    runtime: Runtime,
    origin: &str,
    images: &[Image],
    devices: &[Device],
    (selections, plans): (&[Selection], &[Option<link::Plan>]),
    info: bool,
) -> Vec<Message> {
    let numbers = vendor_terms::numbers(runtime, images, devices);
    let mut out = Vec::new();
    if devices.is_empty() && info {
        out.push(Message::Info(format!(
            "library {id} ({origin}): {} images, no GPU found",
            images.len()
        )));
    }
    for (d, (device, selection)) in devices.iter().zip(selections).enumerate() {
        let target = device.target.to_string();
        let named = vendor_terms::device(runtime, numbers[d], &target);
        match selection.chosen {
            Some(i) if info => {
                let lost: Vec<String> = selection
                    .rejected
                    .iter()
                    .filter(|(i, _)| !images[*i].is_host())
                    .map(|(i, r)| format!("[{i}] {}: {r}", images[*i].arch))
                    .collect();
                out.push(Message::Info(format!(
                    "library {id} ({origin}): {named} loads [{i}] {}{}",
                    images[i].id,
                    if lost.is_empty() {
                        String::new()
                    } else {
                        format!("; not {}", lost.join("; "))
                    }
                )));
            }
            Some(_) => {}
            // An `-rdc` stub with no image for the device: libcudart links
            // its objects for it, and so does this library.
            None => match plans.get(d).and_then(Option::as_ref) {
                Some(Ok(taken)) if info => out.push(Message::Info(format!(
                    "library {id} ({origin}): {named}: no image in this device-link stub; \
                     the CUDA driver links its {} objects for it at load, as libcudart does: {}",
                    taken.len(),
                    taken.join("; ")
                ))),
                Some(Ok(_)) => {}
                Some(Err(why)) => out.push(Message::Warning(format!(
                    "no binary for GPU: {named} has no compatible image in {origin}, \
                     and its objects cannot be linked for it ({}); {why}; {}",
                    vendor_terms::consequence(runtime),
                    reasons(images, selection)
                ))),
                None => not_found(
                    &mut out,
                    (id, runtime, origin, images),
                    (device, numbers[d]),
                    selection,
                    &named,
                    info,
                ),
            },
        }
    }
    out
}

/// What to say of `device` (with its number in the runtime's terms, if it
/// has one) when `selection` found no image of the library (`id`,
/// `runtime`, `origin`, `images`) for it, see [`report`].
fn not_found(
    out: &mut Vec<Message>,
    (id, runtime, origin, images): (usize, Runtime, &str, &[Image]),
    (device, number): (&Device, Option<usize>),
    selection: &Selection,
    named: &str,
    info: bool,
) {
    let vendor = device.target.vendor();
    // A device libomptarget numbered (for this library's images or
    // another's) that this library has no image for: starting it fails.
    if let (Runtime::OpenMp, Some(n)) = (runtime, number) {
        return out.push(Message::Warning(format!(
            "no binary for GPU: {named} has no compatible image in {origin}; {}; {}",
            vendor_terms::numbered_without_image(n),
            reasons(images, selection)
        )));
    }
    if !images.iter().any(|i| i.triple.gpu_vendor() == Some(vendor)) {
        if info {
            out.push(Message::Info(format!(
                "library {id} ({origin}): {named}: no {vendor} code in this library"
            )));
        }
        return;
    }
    let (consequence, why) = (
        vendor_terms::consequence(runtime),
        reasons(images, selection),
    );
    out.push(match runtime {
        // libomptarget skips the device: nothing fails.
        Runtime::OpenMp if info => Message::Info(format!(
            "library {id} ({origin}): {named}: no compatible image, {consequence}; {why}"
        )),
        Runtime::OpenMp => return,
        _ => Message::Warning(format!(
            "no binary for GPU: {named} has no compatible image in {origin} ({consequence}); {why}"
        )),
    });
}

/// A message made inside a reader, said outside it (see `info::say`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Message {
    /// An `OFFLOAD_LOADER_INFO` line.
    Info(String),
    /// A warning: stderr, `tracing` and the thread's last error.
    Warning(String),
}
