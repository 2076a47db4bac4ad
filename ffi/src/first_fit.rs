//! HIP fat binaries laid out for libamdhip64, which gives each device the
//! first compatible code object of the bundle in table order, by entry ID,
//! a processor's own code before its generic family's whatever the order
//! (clr `CodeObject::extractCodeObjectFromFatBinary`;
//! [`VendorRuntime::in_table_order`]).
//!
//! Where the table's own order would not give this library's choice on some
//! device that can be present (one KFD's topology lists: ROCr finds its
//! agents there) ([`offload_loader::first_fit_order_on`]: `gfx90a` "any"
//! before `gfx90a:xnack+` on a gfx90a), libamdhip64 is handed a copy of the
//! program's wrapper pointing to a table whose entries are in that order.
//! Where an entry that a present device would take over another is found,
//! by its code object's header, to be for another processor
//! ([`offload_loader::named_by_headers`]: a `gfx1100` entry holding gfx1101
//! code beside `gfx11-generic`), the table handed names that entry by its
//! header: clr, which goes by IDs and takes gfx1100's entry before the
//! generic one in any order, would otherwise hand a gfx1100 that code. It
//! lives until the fat binary is unregistered. A table whose order already
//! gives the choice, as clang's (`gfx11-generic`, `gfx1100`, `gfx90a`), is
//! handed on as it is.
//!
//! Cost: none where no AMD GPU can be found (the bundle is not read).
//! Else reading the table, and deciding once per distinct list of entry
//! IDs (a library repeats one list in every bundle; deciding parses each
//! target ID, some microseconds): a table with the IDs decided last is
//! compared with them where it lies, not parsed, word by word at the places
//! those IDs give ([`IdsPattern`]); for a table where one
//! entry would be taken over another on a present device (`gfx1100` and
//! `gfx11-generic` on a gfx1100), the header of that entry's code object is
//! read each time, its first page. A new table is written over the
//! program's own code objects ([`crate::view`]): no code object is copied
//! unless the object's file cannot be mapped again. A compressed bundle (`CCOB`) is handed on
//! as it is: reading its table would inflate the start of every one at
//! registration (90 µs each with zstd), and the runtimes that read
//! compressed bundles (clr with comgr, ROCm 6.2 on) look for a specific
//! processor before its generic family themselves, while clang never puts
//! a processor's "any" and stated-feature code in one bundle.

use std::ffi::c_void;
use std::sync::Arc;

use offload_loader::bundle::{write, Bundle, IdsPattern};
use offload_loader::registration::{FatbinWrapper, WrapperKind, WRAPPER_SIZE};
use offload_loader::target::Processor;
use offload_loader::{Container, Content, Image, ImageSource, Limits, Present, VendorRuntime};
use once_cell::race::OnceBox;

use crate::library::fatbin_bytes;
use crate::objects::Pin;
use crate::registry::{self, FirstFit, HandleState};
use crate::view::{Handed, ObjectView, View};
use crate::{process, slots};

/// The copied bundle's alignment: clang aligns `.hip_fatbin` to 4096, and
/// so each code object in it (the bundler's `-bundle-align` for HIP).
const BUNDLE_ALIGN: usize = 4096;

/// The wrapper to hand libamdhip64 for the program's `wrapper`, which this
/// library registered as `handle`: the program's own, or a reordered copy
/// kept until [`release`].
pub(crate) fn wrapper_for(wrapper: *const c_void, handle: usize) -> *const c_void {
    let Some(handed) = reordered(wrapper as usize, handle) else {
        return wrapper;
    };
    let wrapper = handed.wrapper();
    registry::with(|r| r.reordered_bundles.insert(handle, handed));
    wrapper
}

/// Frees the view or copy made for `handle`, if any, once libamdhip64 has
/// unregistered it.
pub(crate) fn release(handle: usize) {
    let copy = registry::with(|r| r.reordered_bundles.remove(&handle));
    // Freed outside the registry's lock.
    drop(copy);
}

/// The wrapper and bundle copy for the program's `wrapper`, registered as
/// `handle`, when its bundle needs reordering and can be read: where
/// registration found them (its record, which pins their object).
fn reordered(wrapper: usize, handle: usize) -> Option<Handed> {
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
    let data = fatbin_bytes(&fatbin, process::locate)?;
    // Uncompressed bundles only (see above).
    if !data.starts_with(offload_loader::magic::BUNDLE) {
        return None;
    }
    let limits = Limits::default();
    let present = Present::Only(present());
    // Decided once per list of entry IDs (the last list decided is kept,
    // and its pattern compared with the table where it lies): which
    // entries' headers can change the order, and the order when none
    // contradicts its ID.
    let kept = registry::with(|r| r.first_fit.clone()).filter(|d| d.ids.matches(data));
    prefetch_next_table(wrapper, fatbin.pin);
    let decided = match kept {
        Some(decided) => decided,
        None => {
            let container = Container::parse(data, &limits).ok()?;
            let images = container.images();
            let ids = images.iter().map(|i| i.id.as_bytes());
            let decided = Arc::new(FirstFit {
                contested: offload_loader::first_fit_contested(images, present),
                order: offload_loader::first_fit_order_on(images, present, VendorRuntime::Hip),
                ids: IdsPattern::new(ids, &limits)?,
                images: images.to_vec(),
            });
            registry::with(|r| r.first_fit = Some(decided.clone()));
            decided
        }
    };
    // The common case: a table whose own order gives the choice whatever
    // its headers say. Decided before, the bundle is not parsed: its table
    // is read once, compared where it lies.
    if decided.order.is_none() && decided.contested.is_empty() {
        return None;
    }
    // Each time, the headers that can change it (their first page), read
    // from this bundle's code objects where their records say (the table
    // is not parsed); where one contradicts its ID, the bundle is read
    // whole, that entry named by its header and the order decided again.
    let source = DecidedBundle {
        images: &decided.images,
        ids: &decided.ids,
        data,
    };
    let (order, named) = if offload_loader::headers_agree(&source, &decided.contested) {
        (decided.order.clone()?, None)
    } else {
        let container = Container::parse(data, &limits).ok()?;
        let named = offload_loader::named_by_headers(&container, &decided.contested);
        let order = offload_loader::first_fit_order_on(&named, present, VendorRuntime::Hip);
        // Nothing renamed (an ID with no target to replace) and nothing to
        // move: the program's own table says the same.
        let renamed = named.iter().zip(&decided.images).any(|(n, i)| n.id != i.id);
        if order.is_none() && !renamed {
            return None;
        }
        (
            order.unwrap_or_else(|| (0..named.len()).collect()),
            Some(named),
        )
    };
    let bundle = Bundle::parse(data, &limits).ok()?;
    let ids: Vec<&str> = match &named {
        Some(named) => named.iter().map(|i| i.id.as_str()).collect(),
        None => bundle.entries().iter().map(|e| e.id).collect(),
    };
    // SAFETY: registration parsed these bytes of the wrapper in a loaded
    // segment of the object its record pins until unregistration.
    let info =
        FatbinWrapper::parse(unsafe { process::memory(wrapper..wrapper + WRAPPER_SIZE as usize) })
            .ok()?;
    let view =
        object_view(data).and_then(|object| View::new(&object, data, &bundle, &order, &ids, info));
    if let Some(view) = view {
        return Some(Handed::View(view));
    }
    let bundle = write::reordered(&bundle, &order, &ids)?;
    Some(Handed::Copy(laid_out(info, &bundle)))
}

/// The AMD processors libamdhip64 can find here
/// ([`offload_detect::kfd_processors`]), read once, at the first
/// registration handed to it: a table is reordered only where one of them
/// would otherwise take another code object than this library's choice.
fn present() -> &'static [&'static Processor] {
    static PRESENT: OnceBox<Vec<&'static Processor>> = OnceBox::new();
    PRESENT.get_or_init(|| Box::new(offload_detect::kfd_processors()))
}

/// The view of the loaded file mapping that holds `data`, shared by its
/// bundles: made the first time (outside the registry's lock: it reads
/// `/proc/self/maps` and maps the file), then found by its range.
fn object_view(data: &[u8]) -> Option<Arc<ObjectView>> {
    let address = data.as_ptr() as usize;
    let find = |r: &mut registry::Registry| {
        r.views.retain(|(_, view)| view.strong_count() > 0);
        r.views
            .iter()
            .find(|(range, _)| range.contains(&address))
            .and_then(|(_, view)| view.upgrade())
    };
    if let Some(view) = registry::with(find) {
        return Some(view);
    }
    let made = Arc::new(ObjectView::of(data)?);
    let (view, unused) = registry::with(|r| match find(r) {
        // Another thread made one first: it is used, this one dropped
        // (unmapped) outside the lock.
        Some(theirs) => (theirs, Some(made)),
        None => {
            r.views.push((made.repeats(), Arc::downgrade(&made)));
            (made, None)
        }
    });
    drop(unused);
    Some(view)
}

/// The bytes of a table [`IdsPattern::matches`] reads for clang's usual three or four
/// entries: its header and IDs, five cache lines.
const TABLE_PREFETCH: usize = 320;

/// Asks the processor to load the table of the next registration while
/// this one goes on (the vendor's registration, the kernels'): clang lays a
/// library's wrappers out in `.hipFatBinSegment` in the order their
/// constructors register them, so the next wrapper in the segment is, most
/// often, the next registration. Its table's lines would otherwise be
/// waited for when it is compared, after its page is faulted in (5,000
/// bundles beside libamdhip64 with a gfx90a, the library read from disk:
/// 4.3 ms without, 3.5 ms with, against 1.6–1.8 ms without this library;
/// with the comparison by [`IdsPattern`], whose loads do not wait for one
/// another, 4.5 ms without and 3.5 ms with, 1.75 ms without this library). Only a
/// hint: the next wrapper is read where it lies in the pinned object `pin`
/// holds, and nothing is prefetched unless it is a HIP wrapper whose table
/// lies in that object too; a prefetch never faults, and a table not yet
/// mapped is simply not loaded.
fn prefetch_next_table(wrapper: usize, pin: u64) {
    let Some(pin) = Pin::from_raw(pin) else {
        return;
    };
    let next = wrapper.saturating_add(WRAPPER_SIZE as usize);
    let Some(segment) = pin.segment(next) else {
        return;
    };
    if next.saturating_add(WRAPPER_SIZE as usize) > segment.end {
        return;
    }
    // SAFETY: 24 bytes inside a loaded segment of the object the
    // registration's pin keeps loaded.
    let bytes = unsafe { process::memory(next..next + WRAPPER_SIZE as usize) };
    let info = FatbinWrapper::parse(bytes).ok();
    let Some(table) = info
        .filter(|i| i.kind == WrapperKind::Hip)
        .map(|i| i.fatbin as usize)
    else {
        return;
    };
    let Some(table_segment) = pin.segment(table) else {
        return;
    };
    let end = table_segment.end.min(table.saturating_add(TABLE_PREFETCH));
    (table..end).step_by(64).for_each(prefetch);
}

/// Hints the processor to load the cache line at `address`.
#[cfg(target_arch = "x86_64")]
fn prefetch(address: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    // SAFETY: SSE, which `_mm_prefetch` needs, is part of x86-64; a prefetch
    // reads nothing the program sees and never faults, whatever the address.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(address as *const i8) }
}

#[cfg(not(target_arch = "x86_64"))]
fn prefetch(_address: usize) {}

/// A bundle whose entry IDs are those a decision was made for (its table
/// matches `ids`): the decision's images (their IDs parsed once) over this
/// bundle's code objects, found where the pattern places their records,
/// whose headers are read as a [`Container`]'s are ([`Content::read_head`]).
struct DecidedBundle<'a> {
    images: &'a [Image],
    ids: &'a IdsPattern,
    data: &'a [u8],
}

impl ImageSource for DecidedBundle<'_> {
    fn images(&self) -> &[Image] {
        self.images
    }

    fn read_content(&self, index: usize) -> Option<Content> {
        let code = self.ids.code_object(self.data, index)?;
        Some(Content::read_head(code))
    }
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
