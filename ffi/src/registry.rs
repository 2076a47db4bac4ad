//! The index of what is registered: library records by id, their symbols
//! (found by host address and by name once a lookup asks), OpenMP
//! descriptors, under one fork-safe lock (see [`crate::lock`]).
//!
//! Registration itself takes no lock (see [`crate::slots`]); the lock guards
//! the maps, and its holder only looks up, inserts and removes (rule 1 of
//! [`crate::loader_lock`]): a destructor that unregisters takes it, possibly
//! under the dynamic loader's lock, so no holder may wait for anything. A
//! fat binary's record is made at first use outside the lock (finding its
//! segment may walk the loaded objects) and inserted under it, only while
//! its slot is still live.

use std::collections::HashMap;
use std::ffi::{c_char, CStr};
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::{Arc, Weak};

use crate::library::{Images, Library, Origin, Symbol, SymbolKind};
use crate::loader_lock::Inside;
use crate::lock::ForkSafeMutex;
use crate::process;
use crate::slots::{self, Fatbin, Runtime, State};
use crate::symbol_table::{At, SymbolTable};
use crate::view::{Handed, ObjectView};

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
        // (its object loaded: unregistration removes it under the lock before
        // the object can be unmapped); a key built for a query lives during
        // the call.
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

/// Symbols by what a lookup knows of them: their entries in the table.
#[derive(Default)]
struct Index {
    kernels: FastMap<usize, At>,
    variables: FastMap<usize, At>,
    kernel_names: FastMap<NameKey, At>,
}

impl Index {
    /// Adds the symbol at `at`: the first symbol of a host address or a
    /// kernel name is the one found.
    fn add(&mut self, symbol: &Symbol, at: At) {
        let map = match symbol.kind {
            SymbolKind::Kernel => {
                self.kernel_names.entry(NameKey(symbol.name)).or_insert(at);
                &mut self.kernels
            }
            _ => &mut self.variables,
        };
        map.entry(symbol.host).or_insert(at);
    }

    /// Removes the symbol at `at`, where it is the one found.
    fn remove(&mut self, symbol: &Symbol, at: At) {
        let map = match symbol.kind {
            SymbolKind::Kernel => {
                if self.kernel_names.get(&NameKey(symbol.name)) == Some(&at) {
                    self.kernel_names.remove(&NameKey(symbol.name));
                }
                &mut self.kernels
            }
            _ => &mut self.variables,
        };
        if map.get(&symbol.host) == Some(&at) {
            map.remove(&symbol.host);
        }
    }

    /// The index of every symbol in `table`, in id order (the first
    /// library to register an address or a name is the one found, as in a
    /// scan in registration order).
    fn of(table: &SymbolTable) -> Index {
        let mut index = Index::default();
        for id in 0..slots::len() {
            let Some(slot) = slots::get(id) else { continue };
            for (at, symbol) in table.in_order(slot.last_symbol()) {
                index.add(&symbol, at);
            }
        }
        index
    }
}

/// What the hand-over to libamdhip64 decided for one list of bundle entry
/// IDs (`first_fit`), which a library repeats in every bundle.
pub(crate) struct FirstFit {
    /// The entries whose code objects' headers can change the order.
    pub contested: Vec<usize>,
    /// The order when no header contradicts its ID (`None`: the table's own).
    pub order: Option<Vec<usize>>,
    /// The bytes a table with the same entry IDs holds, to tell one where
    /// it lies.
    pub ids: offload_loader::bundle::IdsPattern,
    /// The images of the first bundle decided, in table order: their IDs
    /// are the list decided (their offsets no one reads: each bundle's own
    /// code objects are).
    pub images: Vec<offload_loader::Image>,
}

/// Everything registered. Ids are the slots' (see [`crate::slots`]): never
/// reused, and issued without this lock.
#[derive(Default)]
pub(crate) struct Registry {
    /// By id: the library records made so far (a fat binary's at first
    /// use), removed at unregistration.
    libraries: FastMap<usize, Arc<Library>>,
    /// The symbols of every registered library, each chained from its
    /// last, which its slot keeps.
    symbols: SymbolTable,
    /// The lookups: built at the first one, kept up to date after. A
    /// program beside a vendor runtime, which launches through the vendor,
    /// never makes one, and its registrations fill no index.
    index: Option<Index>,
    /// OpenMP: descriptor address → library id.
    pub descriptors: FastMap<usize, usize>,
    /// OpenMP: descriptor address → the reordered copy handed to
    /// libomptarget in its place (see `omp`).
    pub handed: FastMap<usize, usize>,
    /// HIP: this library's fat-binary handle → the wrapper and reordered
    /// bundle handed to libamdhip64 in the program's place (see
    /// `first_fit`).
    pub reordered_bundles: FastMap<usize, Handed>,
    /// HIP: the last list of bundle entry IDs decided (`first_fit`).
    pub first_fit: Option<Arc<FirstFit>>,
    /// HIP: the views of loaded file mappings the reordered bundles' tables
    /// lie in, by the mapping they repeat (see `view`).
    pub views: Vec<(std::ops::Range<usize>, Weak<ObjectView>)>,
    /// AOMP image infos waiting for the next descriptor: image number → target ID.
    pub image_info: Vec<(i32, String)>,
    /// Requirement flags from `__tgt_register_requires`.
    pub requires: i64,
}

/// Whether slot `id` is a registered library.
fn is_live(id: usize) -> bool {
    slots::get(id).is_some_and(|s| matches!(s.state(), State::Fatbin | State::Descriptor))
}

fn after_fork(registry: &mut Option<Registry>) {
    // The threads that were reading libraries do not exist in the child.
    if let Some(r) = registry {
        for l in r.libraries.values() {
            l.forget_readers();
        }
    }
}

static REGISTRY: ForkSafeMutex<Option<Registry>> = ForkSafeMutex::new(None, after_fork);

/// Installs the registry's `fork` handlers (see [`crate::lock`]).
pub(crate) fn install_fork_handlers() {
    REGISTRY.install();
}

/// Runs `f` on the registry, under its lock (pure work only: see the module docs).
pub(crate) fn with<R>(f: impl FnOnce(&mut Registry) -> R) -> R {
    let mut guard = REGISTRY.lock();
    let _inside = Inside::enter();
    f(guard.get_or_insert_with(Registry::default))
}

/// Registers a library listed by a descriptor and returns its id.
pub(crate) fn register(runtime: Runtime, origin: Origin, source: Images) -> usize {
    let id = slots::push(State::Descriptor, None);
    let library = Arc::new(Library::new(id, origin, source, runtime));
    with(|r| r.libraries.insert(id, library));
    id
}

/// Registers the fat binary recorded by `fatbin` (`None`: it could not be
/// registered) and returns its handle and, when registered, its id. No lock:
/// the record is made at first use.
pub(crate) fn register_fatbin(fatbin: Option<Fatbin>, runtime: Runtime) -> (usize, Option<usize>) {
    let id = match fatbin {
        Some(f) => slots::push(State::Fatbin, Some(f)),
        None => slots::push(
            State::Failed,
            Some(Fatbin {
                runtime,
                object: 0,
                start: 0,
                pin: 0,
                linked: 0,
            }),
        ),
    };
    (slots::handle(id), fatbin.map(|_| id))
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

/// The library with this id, if still registered: a fat binary's record is
/// made the first time. It is made under the lock, which keeps the object
/// loaded (its destructor's unregistration waits for the lock), when its
/// segment is found without the loader's lock (the pinned object, or glibc's
/// `_dl_find_object`); only when a walk of the loaded objects is needed
/// (older C libraries) is it made outside, the walk itself holding the
/// loader's lock against `dlclose`, and inserted only while the slot is live.
pub(crate) fn library(id: usize) -> Option<Arc<Library>> {
    // A no-op once `_dl_find_object` is looked up (by the constructor).
    process::prepare_locate();
    let slot = slots::get(id)?;
    // The record, or (`Err`) the fat binary whose segment needs a walk.
    let made = with(|r| {
        if let Some(library) = r.libraries.get(&id) {
            return Some(Ok(library.clone()));
        }
        // A descriptor's record is made at registration: none is gone.
        if slot.state() != State::Fatbin {
            return None;
        }
        let fatbin = slot.fatbin()?;
        let mut walk = false;
        let library = Library::from_slot(id, fatbin, |addr| {
            process::locate_without_walk(addr).unwrap_or_else(|()| {
                walk = true;
                None
            })
        });
        if walk {
            return Some(Err(fatbin));
        }
        let library = Arc::new(library);
        r.libraries.insert(id, library.clone());
        Some(Ok(library))
    })?;
    let fatbin = match made {
        Ok(library) => return Some(library),
        Err(fatbin) => fatbin,
    };
    let made = Arc::new(Library::from_slot(id, fatbin, process::locate_by_walk));
    with(|r| {
        if let Some(library) = r.libraries.get(&id) {
            return Some(library.clone());
        }
        // Unregistration releases the slot before it takes the lock to
        // remove the record: a record inserted while the slot is live is
        // one it will find and revoke.
        (slot.state() == State::Fatbin).then(|| {
            r.libraries.insert(id, made.clone());
            made
        })
    })
}

/// Number of symbols of library `id`, if registered.
pub(crate) fn symbol_count(id: usize) -> Option<usize> {
    with(|r| {
        let slot = slots::get(id).filter(|_| is_live(id))?;
        Some(r.symbols.chain(slot.last_symbol()).count())
    })
}

/// The symbols of library `id`, if registered, in the order they were.
pub(crate) fn symbols(id: usize) -> Vec<Symbol> {
    with(|r| {
        let Some(slot) = slots::get(id) else {
            return Vec::new();
        };
        let symbols = r.symbols.in_order(slot.last_symbol());
        symbols.into_iter().map(|(_, s)| s).collect()
    })
}

/// Adds a symbol to library `id`.
pub(crate) fn add_symbol(id: usize, symbol: Symbol) -> Result<(), crate::error::Error> {
    with(|r| {
        let slot = slots::get(id).filter(|_| is_live(id));
        let Some(slot) = slot else {
            return Err(crate::error::Error::NoLibrary(id as i64));
        };
        let Some(at) = r.symbols.push(id, slot.last_symbol(), symbol) else {
            return Err(crate::error::Error::Invalid(
                "the symbol table is full: 2^32 - 1 symbols registered at once",
            ));
        };
        slot.set_last_symbol(Some(at));
        if let Some(index) = &mut r.index {
            index.add(&symbol, at);
        }
        Ok(())
    })
}

/// Removes library `id` (a fat binary's handle already released, or a
/// descriptor's) and its symbols from the index, and returns its record if
/// one was made; `None` as well when `id` was not registered (then `false`).
pub(crate) fn unregister(id: usize) -> (bool, Option<Arc<Library>>) {
    let Some(slot) = slots::get(id) else {
        return (false, None);
    };
    if !slot.release(State::Descriptor) && slot.state() != State::Released {
        return (false, None);
    }
    let library = with(|r| {
        let last = slot.last_symbol();
        if let Some(index) = &mut r.index {
            for (at, symbol) in r.symbols.chain(last) {
                index.remove(symbol, at);
            }
        }
        r.symbols.release(last);
        slot.set_last_symbol(None);
        r.libraries.remove(&id)
    });
    (true, library)
}

/// A symbol found by a lookup: its library's id and the symbol.
pub(crate) type Found = (usize, Symbol);

fn found(r: &Registry, at: Option<At>) -> Option<Found> {
    r.symbols.get(at?)
}

/// The index of `r`, built now if no lookup was made before.
fn index(r: &mut Registry) -> &Index {
    r.index.get_or_insert_with(|| Index::of(&r.symbols))
}

/// The kernel whose host stub is `host`.
pub(crate) fn kernel(host: usize) -> Option<Found> {
    with(|r| {
        let at = index(r).kernels.get(&host).copied();
        found(r, at)
    })
}

/// The variable whose host shadow is `host`.
pub(crate) fn variable(host: usize) -> Option<Found> {
    with(|r| {
        let at = index(r).variables.get(&host).copied();
        found(r, at)
    })
}

/// The kernel whose device-side name is `name`.
pub(crate) fn kernel_by_name(name: &CStr) -> Option<Found> {
    with(|r| {
        let at = index(r)
            .kernel_names
            .get(&NameKey(name.as_ptr() as usize))
            .copied();
        found(r, at)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::ObjectName;

    static NAME: &CStr = c"registry_test_kernel";
    static OTHER: &CStr = c"registry_test_kernel";

    #[test]
    fn symbols_are_indexed_by_address_and_name_until_unregistered() {
        let id = register(
            Runtime::OpenMp,
            Origin {
                object: ObjectName::from_raw(0),
                what: "descriptor",
                address: 0,
            },
            Images::Listed {
                images: Vec::new(),
                code: Vec::new(),
            },
        );
        let k = Symbol {
            host: 0x1000 + id,
            name: NAME.as_ptr() as usize,
            kind: SymbolKind::Kernel,
        };
        let v = Symbol {
            host: 0x9000 + id,
            name: NAME.as_ptr() as usize,
            kind: SymbolKind::Variable { size: 4 },
        };
        add_symbol(id, k).unwrap();
        // The index is built at the first lookup, or was built by another
        // test's: either way it holds what was registered before ...
        assert_eq!(kernel(0x1000 + id), Some((id, k)));
        // ... and what is registered after.
        add_symbol(id, v).unwrap();
        assert_eq!(variable(0x9000 + id), Some((id, v)));
        assert_eq!(kernel(0x9000 + id), None);
        // By content, not address: another string with the same bytes.
        assert_eq!(kernel_by_name(OTHER).map(|f| f.0), Some(id));
        assert_eq!(symbol_count(id), Some(2));
        assert_eq!(symbols(id), [k, v]);
        assert!(library(id).is_some());
        let (was, record) = unregister(id);
        assert!(was && record.is_some());
        assert_eq!(kernel(0x1000 + id), None);
        assert_eq!(variable(0x9000 + id), None);
        assert_eq!(symbol_count(id), None);
        assert!(symbols(id).is_empty());
        assert!(library(id).is_none());
        assert!(add_symbol(id, k).is_err());
    }
}
