//! The registered libraries: their images, the image selected for each device,
//! the kernels and variables registered against them, and the images loaded
//! from them (lazily, at first lookup, unless `OFFLOAD_LOADER_EAGER=1`).
//!
//! A [`Library`] is an [`ImageSource`]: it selects through
//! [`offload_loader::select`], the function `offload-probe` calls, so the
//! runtime loads the image the probe names.

use std::borrow::Cow;
use std::sync::{Arc, Mutex, RwLock};

use offload_detect::LoadedImage;
use offload_loader::target::OffloadKind;
use offload_loader::{select, Container, Content, Image, ImageSource, Policy, Selection};
use once_cell::sync::{Lazy, OnceCell};

use crate::devices;
use crate::error::Error;
use crate::info;

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

/// A library's images and where their bytes are.
pub(crate) enum Images {
    /// A bundle or compressed bundle in this process's memory.
    Container(Container<'static>),
    /// Images listed by a `__tgt_bin_desc`, with each image's code in this
    /// process's memory.
    Listed {
        images: Vec<Image>,
        code: Vec<&'static [u8]>,
    },
}

/// A registered kernel or variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Symbol {
    /// The host-side address: kernel stub or shadow variable.
    pub host: usize,
    /// The device-side name.
    pub name: String,
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
    /// Where it came from, for messages: object path and address.
    pub origin: String,
    source: Images,
    runtime: Runtime,
    /// The selection for each device, by device index: made at first use.
    selections: OnceCell<Vec<Selection>>,
    pub symbols: Mutex<Vec<Symbol>>,
    /// The module loaded for each device, by device index: made at first use.
    modules: OnceCell<Vec<ModuleCell>>,
}

impl ImageSource for Library {
    fn images(&self) -> &[Image] {
        match &self.source {
            Images::Container(c) => c.images(),
            Images::Listed { images, .. } => images,
        }
    }

    fn read_content(&self, index: usize) -> Option<Content> {
        match &self.source {
            Images::Container(c) => c.read_content(index),
            Images::Listed { code, .. } => code.get(index).map(|code| Content::read(code)),
        }
    }
}

impl Library {
    /// The selection for each device, made (and reported) the first time it
    /// is needed. Registration runs in constructors, where a library being
    /// `dlopen`ed holds the dynamic loader's lock: detecting devices there
    /// would load driver libraries under that lock, so it waits for first use
    /// (or `OFFLOAD_LOADER_EAGER=1`).
    pub(crate) fn selections(&self) -> &[Selection] {
        self.selections.get_or_init(|| {
            let policy = Policy {
                offload_kind: Some(self.runtime.offload_kind()),
            };
            let selections: Vec<Selection> = devices::devices()
                .iter()
                .map(|d| select(&d.target, self, &policy))
                .collect();
            report(self, &selections);
            selections
        })
    }

    /// The bytes of image `index`, borrowed from the process's memory or
    /// from the library's inflated bundle.
    pub(crate) fn image_bytes(&self, index: usize) -> Result<Cow<'_, [u8]>, Error> {
        let bad = |source| Error::BadImage {
            origin: self.origin.clone(),
            source: Box::new(source),
        };
        match &self.source {
            Images::Container(c) => c.image_bytes(index).map_err(bad),
            Images::Listed { code, .. } => code
                .get(index)
                .map(|b| Cow::Borrowed(*b))
                .ok_or(Error::NoSymbol(format!("image {index} of {}", self.origin))),
        }
    }

    /// The image loaded from this library for `device`, loading it on first use.
    pub(crate) fn module(&self, device: usize) -> Result<Arc<LoadedImage>, Error> {
        let devices = devices::devices();
        let cell = self
            .modules
            .get_or_init(|| devices.iter().map(|_| OnceCell::new()).collect())
            .get(device)
            .ok_or(Error::NoDevice(device as i64))?;
        cell.get_or_init(|| {
            let selection = &self.selections()[device];
            let index = selection.chosen.ok_or_else(|| {
                Error::NoImage(no_binary_message(self, self.selections(), device))
            })?;
            let bytes = self.image_bytes(index)?;
            devices[device]
                .load(&bytes)
                .map(Arc::new)
                .map_err(|source| Error::Driver {
                    origin: self.origin.clone(),
                    what: format!("loading {}", self.images()[index].id),
                    device,
                    source: Box::new(source),
                })
        })
        .clone()
    }
}

/// HIP's "no binary for GPU", with the reasons of the closest candidates.
fn no_binary_message(library: &Library, selections: &[Selection], device: usize) -> String {
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
        library.origin,
        if why.is_empty() {
            "it holds no device image".into()
        } else {
            why.join("; ")
        }
    )
}

static LIBRARIES: Lazy<RwLock<Vec<Option<Arc<Library>>>>> = Lazy::new(Default::default);

static EAGER: Lazy<bool> =
    Lazy::new(|| std::env::var("OFFLOAD_LOADER_EAGER").is_ok_and(|v| v == "1"));

/// Registers a library and returns its id. Selection and loading wait for
/// first use, unless `OFFLOAD_LOADER_EAGER=1` asks for them now.
pub(crate) fn register(runtime: Runtime, origin: String, source: Images) -> usize {
    let mut libraries = LIBRARIES.write().unwrap_or_else(|e| e.into_inner());
    let id = libraries.len();
    let library = Arc::new(Library {
        id,
        origin,
        source,
        runtime,
        selections: OnceCell::new(),
        symbols: Mutex::new(Vec::new()),
        modules: OnceCell::new(),
    });
    libraries.push(Some(library.clone()));
    drop(libraries);
    if *EAGER {
        // In a constructor: detect without the time-limited thread.
        devices::devices_in_place();
        for device in 0..library.selections().len() {
            if let Err(e) = library.module(device) {
                crate::set_last_error(e.to_string());
            }
        }
    }
    id
}

/// One line per device: what was chosen and why the others lost.
fn report(library: &Library, selections: &[Selection]) {
    let devices = devices::devices();
    if devices.is_empty() {
        info::line(&format!(
            "library {} ({}): {} images, no GPU found",
            library.id,
            library.origin,
            library.images().len()
        ));
    }
    for (d, device) in devices.iter().enumerate() {
        let selection = &selections[d];
        let targets_vendor = library
            .images()
            .iter()
            .any(|i| i.triple.gpu_vendor() == Some(device.target.vendor()));
        match selection.chosen {
            Some(i) => {
                let lost: Vec<String> = selection
                    .rejected
                    .iter()
                    .filter(|(i, _)| !library.images()[*i].is_host())
                    .map(|(i, r)| format!("[{i}] {}: {r}", library.images()[*i].arch))
                    .collect();
                info::line(&format!(
                    "library {} ({}): device {d} {} loads [{i}] {}{}",
                    library.id,
                    library.origin,
                    device.target,
                    library.images()[i].id,
                    if lost.is_empty() {
                        String::new()
                    } else {
                        format!("; not {}", lost.join("; "))
                    }
                ));
            }
            None if targets_vendor => {
                let message = no_binary_message(library, selections, d);
                tracing::warn!("{message}");
                eprintln!("offload-loader: {message}");
                crate::set_last_error(message);
            }
            None => info::line(&format!(
                "library {} ({}): device {d} {}: no {} code in this library",
                library.id,
                library.origin,
                device.target,
                device.target.vendor()
            )),
        }
    }
}

/// The library with this id, if still registered.
pub(crate) fn library(id: usize) -> Option<Arc<Library>> {
    LIBRARIES
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(id)
        .cloned()
        .flatten()
}

/// Every registered library, in registration order.
pub(crate) fn libraries() -> Vec<Arc<Library>> {
    LIBRARIES
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .flatten()
        .cloned()
        .collect()
}

/// Adds a symbol to library `id`; with eager loading, resolves it now.
pub(crate) fn add_symbol(id: usize, symbol: Symbol) {
    let Some(library) = library(id) else {
        crate::set_last_error(format!(
            "registering {}: library {id} is not registered",
            symbol.name
        ));
        return;
    };
    if *EAGER {
        // In a constructor: detect without the time-limited thread.
        devices::devices_in_place();
        for device in 0..library.selections().len() {
            if library.selections()[device].chosen.is_some() {
                if let Err(e) = resolve(&library, device, &symbol) {
                    crate::set_last_error(e.to_string());
                }
            }
        }
    }
    library
        .symbols
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(symbol);
}

/// Unregisters library `id`: its modules are unloaded when the last user lets go.
pub(crate) fn unregister(id: usize) -> bool {
    let mut libraries = LIBRARIES.write().unwrap_or_else(|e| e.into_inner());
    let removed = libraries.get_mut(id).and_then(Option::take);
    if let Some(l) = &removed {
        info::line(&format!("library {} ({}): unregistered", l.id, l.origin));
    }
    removed.is_some()
}

/// The device handle or address of `symbol` on `device`: kernel handle, or
/// variable address and size.
pub(crate) fn resolve(
    library: &Library,
    device: usize,
    symbol: &Symbol,
) -> Result<(u64, u64), Error> {
    let module = library.module(device)?;
    match symbol.kind {
        SymbolKind::Kernel => module.kernel(&symbol.name).map(|k| (k.handle, 0)),
        _ => module.global(&symbol.name).map(|g| (g.address, g.size)),
    }
    .map_err(|source| Error::Driver {
        origin: library.origin.clone(),
        what: symbol.name.clone(),
        device,
        source: Box::new(source),
    })
}

/// Finds a registered symbol by host address or by name.
pub(crate) fn find(matches: impl Fn(&Symbol) -> bool) -> Option<(Arc<Library>, Symbol)> {
    libraries().into_iter().find_map(|l| {
        let found = l
            .symbols
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|s| matches(s))
            .cloned();
        found.map(|s| (l, s))
    })
}
