//! Every registration, by id: an append-only table that a registration
//! writes without a lock and, but for a new chunk each time the table doubles,
//! without an allocation; HIP and CUDA handles name its slots.
//!
//! A fat binary's slot records where the fat binary is and which object holds
//! it; the library record (`library::Library`) is made from it at first use,
//! as HIP defers its fat binaries. Once a slot is written, three parts of it
//! change: its state, published with release ordering once its fields are
//! stored and moved from live to released by one compare-and-swap, so a
//! handle is released at most once; the vendor runtime's handle, set once
//! where the registration is handed on and taken once at unregistration;
//! and the library's last symbol, which only the registry, under its lock,
//! reads and writes. A thread forked beside a registration
//! leaves that one slot unwritten in the child, where no handle names it.

use std::alloc::Layout;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use offload_loader::target::{OffloadKind, Vendor};
use once_cell::race::OnceBox;
use zerocopy::FromZeros;

use crate::chunked::{place, FIRST};
use crate::symbol_table::At;

/// The language runtime a library registered through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Runtime {
    Hip,
    OpenMp,
    /// nvcc's `__cudaRegisterFatBinary` (see `cuda.rs`).
    Cuda,
}

impl Runtime {
    /// The vendor whose GPUs a fat binary registered by this runtime's ABI
    /// is for: HIP's `__hipRegisterFatBinary` carries AMD code objects (HIP
    /// on NVIDIA builds through nvcc and CUDA's ABI), CUDA's carries NVIDIA
    /// code; OpenMP's images each name theirs (`None`).
    pub(crate) fn vendor(self) -> Option<Vendor> {
        match self {
            Runtime::Hip => Some(Vendor::Amd),
            Runtime::Cuda => Some(Vendor::Nvidia),
            Runtime::OpenMp => None,
        }
    }

    pub(crate) fn offload_kind(self) -> OffloadKind {
        match self {
            Runtime::Hip => OffloadKind::Hip,
            Runtime::OpenMp => OffloadKind::OpenMp,
            Runtime::Cuda => OffloadKind::Cuda,
        }
    }
}

/// A slot's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum State {
    /// Reserved, not yet written (or abandoned by a thread lost to `fork`).
    Writing = 0,
    /// A fat binary registered through a handle.
    Fatbin = 1,
    /// A handle issued for a fat binary that could not be registered.
    Failed = 2,
    /// An OpenMP descriptor (no handle names it).
    Descriptor = 3,
    /// Unregistered (or its handle released).
    Released = 4,
}

impl State {
    fn from_u8(v: u8) -> State {
        match v {
            1 => State::Fatbin,
            2 => State::Failed,
            3 => State::Descriptor,
            4 => State::Released,
            _ => State::Writing,
        }
    }
}

/// What a fat binary's slot records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fatbin {
    pub runtime: Runtime,
    /// The registering object's name (`ObjectName::to_raw`).
    pub object: usize,
    /// The fat binary's address (from the wrapper): checked at first use.
    pub start: usize,
    /// The registration's pin on its object (`Pin::to_raw`), or 0.
    pub pin: u64,
    /// A CUDA device-link stub's (version 2 wrapper's) array of its
    /// objects' fat binaries, or 0.
    pub linked: usize,
}

/// All zeros is an unwritten slot (`Writing`, no symbols, nothing handed
/// on): a chunk is allocated zeroed, and only the pages of the slots
/// written are touched.
#[derive(FromZeros)]
pub(crate) struct Slot {
    state: AtomicU8,
    runtime: AtomicU8,
    /// 1 + the library's last symbol in the registry's symbol table, 0
    /// for none: read and written under the registry's lock only.
    last_symbol: AtomicU32,
    object: AtomicUsize,
    start: AtomicUsize,
    pin: AtomicU64,
    linked: AtomicUsize,
    /// Whether `vendor` holds the vendor runtime's handle.
    handed: AtomicBool,
    /// The handle the vendor runtime (libamdhip64, libcudart) returned for
    /// this fat binary when the registration was handed on to it.
    vendor: AtomicUsize,
}

impl Slot {
    pub(crate) fn state(&self) -> State {
        State::from_u8(self.state.load(Ordering::Acquire))
    }

    /// What the slot records, when it is a fat binary's (live, failed or
    /// released): the slots handles name.
    pub(crate) fn fatbin(&self) -> Option<Fatbin> {
        let runtime = match self.runtime.load(Ordering::Relaxed) {
            1 => Runtime::Hip,
            2 => Runtime::Cuda,
            _ => return None,
        };
        Some(Fatbin {
            runtime,
            object: self.object.load(Ordering::Relaxed),
            start: self.start.load(Ordering::Relaxed),
            pin: self.pin.load(Ordering::Relaxed),
            linked: self.linked.load(Ordering::Relaxed),
        })
    }

    /// The library's last symbol in the registry's symbol table
    /// ([`crate::symbol_table`]); for the registry, under its lock.
    pub(crate) fn last_symbol(&self) -> Option<At> {
        self.last_symbol.load(Ordering::Relaxed).checked_sub(1)
    }

    /// Sets the library's last symbol; for the registry, under its lock.
    pub(crate) fn set_last_symbol(&self, at: Option<At>) {
        // The table names fewer than `At::MAX` entries.
        let stored = at.map_or(0, |at| at + 1);
        self.last_symbol.store(stored, Ordering::Relaxed);
    }

    /// Records the handle the vendor runtime returned for this fat binary.
    pub(crate) fn set_vendor(&self, theirs: usize) {
        self.vendor.store(theirs, Ordering::Relaxed);
        self.handed.store(true, Ordering::Release);
    }

    /// The vendor runtime's handle for this fat binary, from when the
    /// registration was handed on until it is taken.
    pub(crate) fn vendor(&self) -> Option<usize> {
        self.handed
            .load(Ordering::Acquire)
            .then(|| self.vendor.load(Ordering::Relaxed))
    }

    /// Takes the vendor runtime's handle, for its unregistration: once.
    pub(crate) fn take_vendor(&self) -> Option<usize> {
        self.handed
            .swap(false, Ordering::AcqRel)
            .then(|| self.vendor.load(Ordering::Relaxed))
    }

    /// Moves the slot from `from` to released; false if it was not in `from`.
    pub(crate) fn release(&self, from: State) -> bool {
        self.state
            .compare_exchange(
                from as u8,
                State::Released as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }
}

/// Chunk `k` holds `FIRST << k` slots ([`crate::chunked`]); 48 chunks are
/// more than an address space holds.
const CHUNKS: usize = 48;

static TABLE: [OnceBox<Vec<Slot>>; CHUNKS] = [const { OnceBox::new() }; CHUNKS];
static NEXT: AtomicUsize = AtomicUsize::new(0);

/// Appends a slot and returns its id: a fat binary's (`Fatbin`, or `Failed`
/// with an empty range) or a descriptor's (`fatbin` is then `None`).
pub(crate) fn push(state: State, fatbin: Option<Fatbin>) -> usize {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let (chunk, at) = place(id);
    let slots = TABLE[chunk].get_or_init(|| {
        // Zeroed by the allocator (calloc): fresh pages the kernel maps
        // only when a slot on them is written, where writing each slot's
        // zeros would touch the whole chunk at once.
        let chunk = <[Slot]>::new_box_zeroed_with_elems(FIRST << chunk)
            .unwrap_or_else(|_| std::alloc::handle_alloc_error(Layout::new::<Slot>()));
        Box::new(chunk.into_vec())
    });
    let slot = &slots[at];
    if let Some(f) = fatbin {
        let runtime = match f.runtime {
            Runtime::Hip => 1,
            Runtime::Cuda => 2,
            Runtime::OpenMp => 0,
        };
        slot.runtime.store(runtime, Ordering::Relaxed);
        slot.object.store(f.object, Ordering::Relaxed);
        slot.start.store(f.start, Ordering::Relaxed);
        slot.pin.store(f.pin, Ordering::Relaxed);
        slot.linked.store(f.linked, Ordering::Relaxed);
    }
    slot.state.store(state as u8, Ordering::Release);
    id
}

/// Slot `id`, if it was reserved.
pub(crate) fn get(id: usize) -> Option<&'static Slot> {
    if id >= NEXT.load(Ordering::Acquire) {
        return None;
    }
    let (chunk, at) = place(id);
    TABLE.get(chunk)?.get()?.get(at)
}

/// Number of slots reserved: every id issued so far.
pub(crate) fn len() -> usize {
    NEXT.load(Ordering::Acquire)
}

/// Where handles start: a non-canonical x86-64 address, so that a caller that
/// dereferences one faults at once; the library never dereferences them.
const HANDLE_BASE: usize = 0x0ff1_0ad0_0000_0000;

/// The handle of slot `id`.
pub(crate) fn handle(id: usize) -> usize {
    HANDLE_BASE + ((id + 1) << 4)
}

/// The slot a handle names, if this library issued it; its state says
/// whether it is still live.
pub(crate) fn from_handle(handle: usize) -> Option<(usize, &'static Slot)> {
    let offset = handle.checked_sub(HANDLE_BASE)?;
    if offset & 0xf != 0 {
        return None;
    }
    let id = (offset >> 4).checked_sub(1)?;
    let slot = get(id)?;
    slot.fatbin().is_some().then_some((id, slot))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_the_48_bytes_the_cycles_test_and_benchmarks_count() {
        assert_eq!(std::mem::size_of::<Slot>(), 48);
    }

    #[test]
    fn the_last_chunk_ends_past_any_number_of_registrations() {
        assert_eq!(place(FIRST * ((1 << CHUNKS) - 1) - 1).0, CHUNKS - 1);
    }
}
