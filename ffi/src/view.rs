//! A reordered HIP bundle that copies no code object: a wrapper and a new
//! table in anonymous memory, followed by a second read-only mapping of the
//! loaded object's own file bytes that hold the code objects (the same
//! page-cache pages the program maps: no anonymous memory, nothing read
//! until libamdhip64 reads it). The table's offsets, from its own start,
//! land on the program's code objects in that mapping. One such view is
//! made per loaded file mapping and shared by its bundles.
//!
//! The file is the one the loader mapped: found in `/proc/self/maps` with
//! its offset, device and inode, and opened again only when its device and
//! inode are those of the mapping (a library replaced on disk since it was
//! loaded is a new inode). Each code object's ELF header is compared in
//! the two mappings. Where anything does not hold, the caller copies the
//! bundle as before ([`crate::first_fit`]).

use std::ffi::c_void;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use offload_loader::bundle::{write, Bundle};
use offload_loader::registration::{FatbinWrapper, WRAPPER_SIZE};

/// Where a new table starts after its wrapper: right after it, 8-byte
/// aligned as the bundle header is read.
const TABLE_AT: usize = (WRAPPER_SIZE as usize).next_multiple_of(8);

/// What libamdhip64 is handed in the program's place for a bundle that
/// needs reordering, kept until the fat binary is unregistered.
pub(crate) enum Handed {
    /// A new table over the program's own code objects.
    View(View),
    /// A wrapper and a copy of the bundle, reordered (words, so that the
    /// wrapper is aligned as the struct is), where no view could be made.
    Copy(Vec<u64>),
}

impl Handed {
    /// The wrapper to hand libamdhip64.
    pub(crate) fn wrapper(&self) -> *const c_void {
        match self {
            Handed::View(view) => view.wrapper(),
            Handed::Copy(words) => words.as_ptr().cast(),
        }
    }
}

/// A table handed to libamdhip64: where it lies in its object's view,
/// which it keeps mapped.
pub(crate) struct View {
    object: Arc<ObjectView>,
    /// The wrapper's offset in the view (the table follows it).
    at: usize,
}

impl View {
    /// The table for `bundle` (parsed from `data`, the program's bytes in a
    /// loaded object, starting at the bundle) with its entries in `order`,
    /// entry `i` under the ID `ids[i]`, behind a copy of `wrapper` pointing
    /// to it, in `object`'s view; `None` where the view has no room left or
    /// does not hold the bundle.
    pub(crate) fn new(
        object: &Arc<ObjectView>,
        data: &[u8],
        bundle: &Bundle<'_>,
        order: &[usize],
        ids: &[&str],
        wrapper: FatbinWrapper,
    ) -> Option<View> {
        let entries = bundle.entries();
        if order.len() != entries.len() || ids.len() != entries.len() {
            return None;
        }
        let start = data.as_ptr() as usize;
        let span = entries
            .iter()
            .map(|e| e.offset.checked_add(e.size))
            .try_fold(0u64, |end, e| Some(end.max(e?)))?;
        let span = usize::try_from(span).ok().filter(|&s| s <= data.len())?;
        let end = start.checked_add(span)?;
        if start < object.start || end > object.end {
            return None;
        }
        let ids: Vec<&str> = order.iter().map(|&i| ids[i]).collect();
        let sizes: Vec<u64> = order.iter().map(|&i| entries[i].size).collect();
        let table_len = usize::try_from(write::table_len(&ids)).ok()?;
        let at = object.allocate(TABLE_AT + table_len)?;
        let table_at = at + TABLE_AT;
        // The program's bundle, in the view: after the head.
        let bundle_at = object.head + (start - object.start);
        let offsets: Vec<u64> = order
            .iter()
            .map(|&i| (bundle_at - table_at) as u64 + entries[i].offset)
            .collect();
        let table = write::table(&ids, &sizes, &offsets);
        let base = object.base as usize;
        let fatbin = (base + table_at) as u64;
        let wrapper = FatbinWrapper { fatbin, ..wrapper }.to_bytes();
        // SAFETY: `allocate` gave this call `TABLE_AT + table_len` bytes of
        // the view's writable head at `at`, which no one else writes.
        unsafe {
            let dst = object.base.add(at);
            std::ptr::copy_nonoverlapping(wrapper.as_ptr(), dst, WRAPPER_SIZE as usize);
            std::ptr::copy_nonoverlapping(table.as_ptr(), dst.add(TABLE_AT), table.len());
        }
        Some(View {
            object: object.clone(),
            at,
        })
    }

    fn wrapper(&self) -> *const c_void {
        // SAFETY: `at` lies inside the view's head.
        unsafe { self.object.base.add(self.at) }.cast()
    }
}

/// One loaded object's file mapping seen again: a head of anonymous pages
/// for the tables handed on, then a second private read-only mapping of
/// the same file bytes as the loader's mapping `start..end`. Shared by the
/// object's bundles, unmapped when the last is released.
pub(crate) struct ObjectView {
    base: *mut u8,
    len: usize,
    /// The head's length; the file mapping follows.
    head: usize,
    /// Where the next table goes in the head.
    next: AtomicUsize,
    /// The loader's mapping this one repeats, in memory.
    start: usize,
    end: usize,
}

// SAFETY: the mapping is owned by this value and unmapped once, by `Drop`;
// the head is written only in ranges `allocate` hands out once each.
unsafe impl Send for ObjectView {}
// SAFETY: as above.
unsafe impl Sync for ObjectView {}

impl ObjectView {
    /// The view of the file mapping that holds `data` (a loaded object's
    /// bytes), when that is a file the process can open again as the same
    /// file (device and inode) and the view shows the same first bytes of
    /// `data`: `/proc/self/maps` is read, the file opened and mapped.
    pub(crate) fn of(data: &[u8]) -> Option<ObjectView> {
        let address = data.as_ptr() as usize;
        let mapping = Mapping::containing(address)?;
        let file = std::fs::File::open(&mapping.path).ok()?;
        let meta = file.metadata().ok()?;
        let dev = meta.dev();
        if meta.ino() != mapping.inode
            || (libc::major(dev) as u64, libc::minor(dev) as u64) != mapping.dev
        {
            return None;
        }
        let page = page_size();
        let len = mapping.end - mapping.start;
        // Room for every table: no more than the bundles' own, which lie
        // in the mapping, plus a wrapper for every page.
        let head = (len + TABLE_AT * (len / page + 1)).next_multiple_of(page);
        // SAFETY: a new private anonymous reservation; nothing else maps it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                head + len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        let view = ObjectView {
            base: base.cast(),
            len: head + len,
            head,
            next: AtomicUsize::new(0),
            start: mapping.start,
            end: mapping.end,
        };
        // SAFETY: replaces the reservation's tail, which this view owns,
        // with a private read-only mapping of the file at the loader's
        // mapping's (page-aligned) offset.
        let mapped = unsafe {
            libc::mmap(
                base.cast::<u8>().add(head).cast::<c_void>(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_FIXED,
                file.as_raw_fd(),
                libc::off_t::try_from(mapping.offset).ok()?,
            )
        };
        if mapped == libc::MAP_FAILED {
            return None;
        }
        let n = data.len().min(64).min(mapping.end - address);
        // SAFETY: the file mapping after the head repeats
        // `mapping.start..mapping.end`, which holds `address..address + n`.
        let seen = unsafe {
            std::slice::from_raw_parts(view.base.add(head + (address - mapping.start)), n)
        };
        (seen == &data[..n]).then_some(view)
    }

    /// The loader's mapping this view repeats, in memory.
    pub(crate) fn repeats(&self) -> std::ops::Range<usize> {
        self.start..self.end
    }

    /// `len` bytes of the head, 8-aligned, for one table; `None` when full.
    fn allocate(&self, len: usize) -> Option<usize> {
        let len = len.next_multiple_of(8);
        let mut at = self.next.load(Ordering::Relaxed);
        loop {
            let end = at.checked_add(len).filter(|&end| end <= self.head)?;
            match self
                .next
                .compare_exchange_weak(at, end, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some(at),
                Err(now) => at = now,
            }
        }
    }
}

impl Drop for ObjectView {
    fn drop(&mut self) {
        // SAFETY: the whole reservation, owned by this view, unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

fn page_size() -> usize {
    // SAFETY: `sysconf` reads a constant.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .ok()
        .filter(|&p| p.is_power_of_two())
        .unwrap_or(4096)
}

/// A file mapping of this process, from `/proc/self/maps`.
struct Mapping {
    start: usize,
    end: usize,
    offset: u64,
    /// Major and minor device numbers.
    dev: (u64, u64),
    inode: u64,
    path: String,
}

impl Mapping {
    /// The file mapping holding `address`.
    fn containing(address: usize) -> Option<Mapping> {
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        maps.lines()
            .filter_map(Mapping::parse)
            .find(|m| m.start <= address && address < m.end)
    }

    /// `start-end perms offset major:minor inode path` (proc(5)); `None`
    /// for an anonymous mapping, a deleted file or a path with spaces.
    fn parse(line: &str) -> Option<Mapping> {
        let mut fields = line.split_ascii_whitespace();
        let (start, end) = fields.next()?.split_once('-')?;
        let _perms = fields.next()?;
        let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
        let (major, minor) = fields.next()?.split_once(':')?;
        let inode: u64 = fields.next()?.parse().ok()?;
        let path = fields.next()?;
        if inode == 0 || !path.starts_with('/') || fields.next().is_some() {
            return None;
        }
        Some(Mapping {
            start: usize::from_str_radix(start, 16).ok()?,
            end: usize::from_str_radix(end, 16).ok()?,
            offset,
            dev: (
                u64::from_str_radix(major, 16).ok()?,
                u64::from_str_radix(minor, 16).ok()?,
            ),
            inode,
            path: path.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_are_read_as_proc5_writes_them() {
        let m = Mapping::parse(
            "7f1c2a000000-7f1c2a400000 r--p 00200000 fd:01 1234567                    /usr/lib/x86_64-linux-gnu/librocsparse.so.0.1",
        )
        .unwrap();
        assert_eq!(
            (m.start, m.end, m.offset),
            (0x7f1c2a000000, 0x7f1c2a400000, 0x200000)
        );
        assert_eq!((m.dev, m.inode), ((0xfd, 1), 1234567));
        assert_eq!(m.path, "/usr/lib/x86_64-linux-gnu/librocsparse.so.0.1");
        // Anonymous, special and deleted mappings are not files to map again.
        for line in [
            "7ffd4c1e0000-7ffd4c201000 rw-p 00000000 00:00 0                          [stack]",
            "55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0",
            "7f1c2a000000-7f1c2a400000 r--p 00000000 fd:01 42 /tmp/libx.so (deleted)",
        ] {
            assert!(Mapping::parse(line).is_none(), "{line}");
        }
    }

    #[test]
    fn a_view_repeats_this_test_binarys_own_bytes() {
        // The bytes of this function's code, in this test binary's mapping.
        let address = maps_lines_are_read_as_proc5_writes_them as *const () as usize;
        // SAFETY: 64 bytes of this function's code, mapped while it runs.
        let data = unsafe { std::slice::from_raw_parts(address as *const u8, 64) };
        let view = ObjectView::of(data).expect("the test binary's text can be mapped again");
        assert!(view.repeats().contains(&address));
        assert!(view.allocate(view.head + 1).is_none());
        assert_eq!(view.allocate(10), Some(0));
        assert_eq!(view.allocate(1), Some(16));
    }
}
