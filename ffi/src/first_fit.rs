//! HIP fat binaries laid out for libamdhip64, which gives each device the
//! first compatible code object of the bundle in table order (clr
//! `CodeObject::extractCodeObjectFromFatBinary`; newer clr looks for a
//! specific processor before a generic one).
//!
//! Where the table's own order would not give this library's choice on some
//! device that can be present (one KFD's topology lists: ROCr finds its
//! agents there) ([`offload_loader::first_fit_order_checked`]: `gfx11-generic`
//! before `gfx1100`, `gfx90a` "any" before `gfx90a:xnack+`, or a `gfx1100`
//! entry whose code object's header says it is for another processor, which
//! clr would hand a gfx1100 by its ID), libamdhip64 is handed
//! a copy of the program's wrapper pointing to a copy of the bundle whose
//! entries are in that order. The copy lives until the fat binary is
//! unregistered. A table whose order already gives the choice is handed on
//! as it is.
//!
//! Cost: reading the table, and deciding once per distinct list of entry
//! IDs (a library repeats one list in every bundle; deciding parses each
//! target ID, some microseconds), but for a table where one entry would be
//! taken over another on some device (`gfx1100` and `gfx11-generic`): the
//! header of that entry's code object is read each time, its first page. A compressed bundle (`CCOB`) is handed on
//! as it is: reading its table would inflate the start of every one at
//! registration (90 µs each with zstd), and the runtimes that read
//! compressed bundles (clr with comgr, ROCm 6.2 on) look for a specific
//! processor before its generic family themselves, while clang never puts
//! a processor's "any" and stated-feature code in one bundle.

use std::ffi::c_void;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use offload_loader::bundle::{write, Bundle};
use offload_loader::registration::{FatbinWrapper, WRAPPER_SIZE};
use offload_loader::target::Processor;
use offload_loader::{Container, Limits, Present};
use once_cell::race::OnceBox;

use crate::library::fatbin_bytes;
use crate::registry::{self, HandleState};
use crate::{process, slots};

/// The copied bundle's alignment: clang aligns `.hip_fatbin` to 4096, and
/// so each code object in it (the bundler's `-bundle-align` for HIP).
const BUNDLE_ALIGN: usize = 4096;

/// The wrapper to hand libamdhip64 for the program's `wrapper`, which this
/// library registered as `handle`: the program's own, or a reordered copy
/// kept until [`release`].
pub(crate) fn wrapper_for(wrapper: *const c_void, handle: usize) -> *const c_void {
    let Some(copy) = reordered(wrapper as usize, handle) else {
        return wrapper;
    };
    let handed = copy.as_ptr().cast();
    registry::with(|r| r.reordered_bundles.insert(handle, copy));
    handed
}

/// Frees the copy made for `handle`, if any, once libamdhip64 has
/// unregistered it.
pub(crate) fn release(handle: usize) {
    let copy = registry::with(|r| r.reordered_bundles.remove(&handle));
    // Freed outside the registry's lock.
    drop(copy);
}

/// The wrapper and bundle copy for the program's `wrapper`, registered as
/// `handle`, when its bundle needs reordering and can be read: where
/// registration found them (its record, which pins their object).
fn reordered(wrapper: usize, handle: usize) -> Option<Vec<u64>> {
    let HandleState::Library(id) = registry::handle(handle) else {
        return None;
    };
    // No AMD GPU can be found here: no device would take any code object,
    // and the bundle is not read (its table lies on a page of its own,
    // which a registration would otherwise fault in).
    if present().is_empty() {
        return None;
    }
    let fatbin = slots::get(id)?.fatbin()?;
    // SAFETY: registration parsed these bytes of the wrapper in a loaded
    // segment of the object its record pins until unregistration.
    let info =
        FatbinWrapper::parse(unsafe { process::memory(wrapper..wrapper + WRAPPER_SIZE as usize) })
            .ok()?;
    let data = fatbin_bytes(&fatbin, process::locate)?;
    let limits = Limits::default();
    // Uncompressed bundles only (see above).
    let bundle = Bundle::parse(data, &limits).ok()?;
    let ids = table_key(&bundle);
    if AGREEING.load(Ordering::Relaxed) == ids {
        return None;
    }
    let container = Container::parse(data, &limits).ok()?;
    let present = Present::Only(present());
    // Where a header can change the order, it is read each time: the
    // table's IDs alone do not decide.
    let by_ids = offload_loader::first_fit_contested(container.images(), present).is_empty();
    let Some(order) = offload_loader::first_fit_order_checked(&container, present) else {
        if by_ids {
            AGREEING.store(ids, Ordering::Relaxed);
        }
        return None;
    };
    let bundle = write::reordered(&bundle, &order)?;
    Some(laid_out(info, &bundle))
}

/// The AMD processors libamdhip64 can find here
/// ([`offload_detect::kfd_processors`]), read once, at the first
/// registration handed to it: a table is reordered only where one of them
/// would otherwise take another code object than this library's choice.
fn present() -> &'static [&'static Processor] {
    static PRESENT: OnceBox<Vec<&'static Processor>> = OnceBox::new();
    PRESENT.get_or_init(|| Box::new(offload_detect::kfd_processors()))
}

/// The key of the last list of entry IDs whose own order gives this
/// library's choice.
static AGREEING: AtomicU64 = AtomicU64::new(0);

/// A 64-bit hash of `bundle`'s entry IDs in order (never 0, the empty
/// cache).
fn table_key(bundle: &Bundle<'_>) -> u64 {
    let mut hasher = DefaultHasher::new();
    for entry in bundle.entries() {
        entry.id.hash(&mut hasher);
    }
    hasher.finish().max(1)
}

/// One buffer holding `wrapper` pointed at `bundle`, which follows at the
/// next [`BUNDLE_ALIGN`] boundary. Words, so that the wrapper is aligned as
/// the struct is; the buffer is never grown, so the addresses hold while it
/// lives.
fn laid_out(wrapper: FatbinWrapper, bundle: &[u8]) -> Vec<u64> {
    let size = WRAPPER_SIZE as usize;
    let mut buffer = vec![0u64; (size + BUNDLE_ALIGN + bundle.len()).div_ceil(8)];
    let base = buffer.as_ptr() as usize;
    // A multiple of 8: `base` is 8-aligned, the boundary 4096-aligned.
    let at = (base + size).next_multiple_of(BUNDLE_ALIGN) - base;
    let mut put = |offset: usize, bytes: &[u8]| {
        for (i, chunk) in bytes.chunks(8).enumerate() {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            buffer[offset / 8 + i] = u64::from_ne_bytes(word);
        }
    };
    let fatbin = (base + at) as u64;
    put(0, &FatbinWrapper { fatbin, ..wrapper }.to_bytes());
    put(at, bundle);
    buffer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copy_points_to_the_aligned_bundle() {
        let wrapper = [
            0x46, 0x50, 0x49, 0x48, 1, 0, 0, 0, 9, 9, 9, 9, 9, 9, 9, 9, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        let bundle: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        let buffer = laid_out(FatbinWrapper::parse(&wrapper).unwrap(), &bundle);
        let bytes: Vec<u8> = buffer.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(bytes[..8], wrapper[..8]);
        assert_eq!(bytes[16..24], wrapper[16..24]);
        let pointer = u64::from_ne_bytes(bytes[8..16].try_into().unwrap()) as usize;
        assert_eq!(pointer % BUNDLE_ALIGN, 0);
        let at = pointer - buffer.as_ptr() as usize;
        assert_eq!(&bytes[at..at + bundle.len()], &bundle[..]);
    }
}
