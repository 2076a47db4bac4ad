//! The objects loaded in this process, as the runtime meets them: which
//! loaded segment (and object) an address lies in, and the bytes there.
//!
//! glibc's `_dl_find_object` answers without a lock; the fallback walks the
//! objects with `dl_iterate_phdr`, which takes the dynamic loader's lock (see
//! `loader_lock`: never while a library is entered or the registry is held).
//! Section headers are not mapped at run time: a structure's bytes are read
//! where the loader mapped them, checked to lie inside a loaded segment.

use std::ffi::CStr;
use std::ops::Range;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// The `PT_LOAD` segments, in memory, of the object `info` describes.
///
/// # Safety
/// `info` must be one `dl_iterate_phdr` passed to its callback, used during
/// that call (its program headers are the loader's).
unsafe fn load_segments(info: &libc::dl_phdr_info) -> impl Iterator<Item = Range<usize>> + '_ {
    let base = info.dlpi_addr as usize;
    let phdrs = if info.dlpi_phdr.is_null() {
        &[][..]
    } else {
        // SAFETY: the loader guarantees `dlpi_phnum` headers at `dlpi_phdr`
        // (the caller's promise).
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) }
    };
    phdrs
        .iter()
        .filter(|p| p.p_type == libc::PT_LOAD)
        .filter_map(move |p| {
            let start = base.checked_add(p.p_vaddr as usize)?;
            Some(start..start.checked_add(p.p_memsz as usize)?)
        })
}

/// The loaded segment an address lies in, and its object, found without
/// allocating: what the runtime needs per registration call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Located {
    /// The object's name as the dynamic loader holds it (see [`ObjectName`]).
    pub object: ObjectName,
    /// The `PT_LOAD` segment that contains the address, in memory.
    pub segment: Range<usize>,
    /// All of the object's `PT_LOAD` segments, in memory: a caller that keeps
    /// them can check later addresses in the same object without a lookup.
    pub segments: Segments,
}

/// The `PT_LOAD` segments of one loaded object, in memory, in program-header
/// order: the first [`Segments::CAPACITY`] of them, without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Segments {
    ranges: [(usize, usize); Segments::CAPACITY],
    len: u8,
    complete: bool,
}

impl Segments {
    /// How many segments are kept (linkers emit four or five).
    pub(crate) const CAPACITY: usize = 8;

    const EMPTY: Segments = Segments {
        ranges: [(0, 0); Segments::CAPACITY],
        len: 0,
        complete: true,
    };

    fn push(&mut self, range: Range<usize>) {
        match self.ranges.get_mut(usize::from(self.len)) {
            Some(slot) => {
                *slot = (range.start, range.end);
                self.len += 1;
            }
            None => self.complete = false,
        }
    }

    /// The segments kept.
    pub(crate) fn iter(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        self.ranges[..usize::from(self.len)]
            .iter()
            .map(|&(start, end)| start..end)
    }

    /// Whether these are all of the object's segments.
    pub(crate) fn is_complete(&self) -> bool {
        self.complete
    }
}

/// The dynamic loader's name for a loaded object: a pointer to its
/// NUL-terminated `l_name` (`dlpi_name`), empty for the main executable. It is
/// read only when a message needs it, and is valid only while the object
/// stays loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ObjectName(usize);

impl ObjectName {
    /// The name as one word, to store in an atomic.
    #[inline]
    pub(crate) fn to_raw(self) -> usize {
        self.0
    }

    /// The name [`ObjectName::to_raw`] gave (any other word names no object,
    /// and [`ObjectName::path`] must not be called on it).
    #[inline]
    pub(crate) fn from_raw(raw: usize) -> ObjectName {
        ObjectName(raw)
    }

    /// The object's path: its loader name, or this executable's path for the
    /// main program (whose loader name is empty).
    ///
    /// # Safety
    /// The object this name came from must still be loaded.
    pub(crate) unsafe fn path(self) -> PathBuf {
        let name = if self.0 == 0 {
            &[][..]
        } else {
            // SAFETY: a non-null name is the loader's NUL-terminated `l_name`,
            // valid while the object is loaded (the caller's promise).
            unsafe { CStr::from_ptr(self.0 as *const libc::c_char) }.to_bytes()
        };
        if name.is_empty() {
            std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe"))
        } else {
            PathBuf::from(std::ffi::OsStr::from_bytes(name))
        }
    }
}

/// The segment that contains `addr` and its object, or `None` when no loaded
/// object maps `addr`.
///
/// Uses glibc's `_dl_find_object` (2.35 and later, looked up at run time):
/// no lock, no walk over the loaded objects, no allocation, so the cost does
/// not grow with the number of objects and a forked child never waits on the
/// loader lock another thread held. The object's segments are read from its
/// program headers in memory. Falls back to one `dl_iterate_phdr` walk (which
/// takes the loader's lock) on older C libraries or unusual layouts.
pub(crate) fn locate(addr: usize) -> Option<Located> {
    match find_object::locate(addr) {
        find_object::Answer::Found(located) => Some(located),
        find_object::Answer::NotMapped => None,
        find_object::Answer::Unavailable => locate_by_walk(addr),
    }
}

/// Whether the object that maps `addr` is never unloaded (the main program,
/// or one linked `-z nodelete`); `None` when glibc's lock-free
/// `_dl_find_object` cannot tell.
pub(crate) fn stays(addr: usize) -> Option<bool> {
    find_object::stays(addr)
}

/// [`locate`] without the walk: `Ok` with glibc's lock-free answer, or
/// `Err(())` when only a walk (which takes the loader's lock) could answer.
/// Safe to call with the registry's lock held.
pub(crate) fn locate_without_walk(addr: usize) -> Result<Option<Located>, ()> {
    // Not looked up yet (the constructor that does it did not run): the
    // `dlsym` that looks it up takes the loader's lock too.
    if !find_object::resolved() {
        return Err(());
    }
    match find_object::locate(addr) {
        find_object::Answer::Found(located) => Ok(Some(located)),
        find_object::Answer::NotMapped => Ok(None),
        find_object::Answer::Unavailable => Err(()),
    }
}

/// Looks `_dl_find_object` up now. `dlsym` takes the dynamic loader's lock:
/// a library that registers from constructors calls this from its own
/// constructor, so that no later registration calls `dlsym` while another
/// thread may `fork` (a child would inherit that lock held).
pub(crate) fn prepare_locate() {
    find_object::resolve();
}

/// [`locate`] by walking every loaded object with `dl_iterate_phdr`.
pub(crate) fn locate_by_walk(addr: usize) -> Option<Located> {
    crate::loader_lock::check("dl_iterate_phdr");
    struct Search {
        addr: usize,
        first: bool,
        found: Option<Located>,
    }
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: `dl_iterate_phdr` passes a valid `info` for the duration of
        // this call, and `data` is the `Search` passed by `locate_by_walk`.
        let (info, search) = unsafe { (&*info, &mut *data.cast::<Search>()) };
        let first = std::mem::replace(&mut search.first, false);
        let mut segments = Segments::EMPTY;
        let mut segment = None;
        // SAFETY: `info` is the loader's, for the duration of this call.
        for s in unsafe { load_segments(info) } {
            if segment.is_none() && s.contains(&search.addr) {
                segment = Some(s.clone());
            }
            segments.push(s);
        }
        let Some(segment) = segment else { return 0 };
        // The main executable is listed first, with an empty name.
        let name = if first { 0 } else { info.dlpi_name as usize };
        search.found = Some(Located {
            object: ObjectName(name),
            segment,
            segments,
        });
        1
    }
    let mut search = Search {
        addr,
        first: true,
        found: None,
    };
    // SAFETY: `visit` matches the callback type and only reads the
    // `dl_phdr_info` it is handed, during the call; `search` outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&mut search as *mut Search).cast()) };
    search.found
}

mod find_object {
    use std::ffi::{c_int, c_void};
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::{Located, ObjectName, Segments};

    /// glibc's `struct dl_find_object` (x86-64 and most targets; the
    /// reserved tail is larger than glibc's, which only writes its own fields).
    #[repr(C)]
    struct DlFindObject {
        flags: u64,
        map_start: usize,
        map_end: usize,
        link_map: *const LinkMap,
        eh_frame: usize,
        reserved: [u64; 16],
    }

    /// The public head of glibc's `struct link_map` (link.h).
    #[repr(C)]
    struct LinkMap {
        l_addr: usize,
        l_name: *const libc::c_char,
        /// The object's dynamic section, in memory.
        l_ld: *const [u64; 2],
    }

    type FindObject = unsafe extern "C" fn(*mut c_void, *mut DlFindObject) -> c_int;

    /// 0: not looked up yet; 1: absent; otherwise the function's address.
    static FUNCTION: AtomicUsize = AtomicUsize::new(0);
    static PAGE: AtomicUsize = AtomicUsize::new(0);

    pub(super) enum Answer {
        Found(Located),
        NotMapped,
        Unavailable,
    }

    pub(super) fn resolve() {
        let _ = function();
    }

    /// Whether `_dl_find_object` was looked up (found or not).
    pub(super) fn resolved() -> bool {
        FUNCTION.load(Ordering::Acquire) != 0
    }

    fn function() -> Option<FindObject> {
        let mut f = FUNCTION.load(Ordering::Acquire);
        if f == 0 {
            if std::env::var_os("OFFLOAD_LOADER_NO_FIND_OBJECT").is_some() {
                f = 1;
            } else {
                crate::loader_lock::check("dlsym");
                // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name.
                let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_dl_find_object".as_ptr()) };
                f = if p.is_null() { 1 } else { p as usize };
            }
            // SAFETY: sysconf has no preconditions.
            let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            PAGE.store(
                usize::try_from(page).unwrap_or(4096).max(4096),
                Ordering::Relaxed,
            );
            FUNCTION.store(f, Ordering::Release);
        }
        // SAFETY: a non-sentinel value is the address dlsym gave for
        // `_dl_find_object`, whose C signature is `FindObject`.
        (f > 1).then(|| unsafe { std::mem::transmute::<usize, FindObject>(f) })
    }

    fn le_u16(b: &[u8], at: usize) -> u16 {
        u16::from_le_bytes([b[at], b[at + 1]])
    }

    fn le_u64(b: &[u8], at: usize) -> u64 {
        let mut v = [0; 8];
        v.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(v)
    }

    /// Whether the object that maps `addr` is never unloaded: the main
    /// program, or an object linked `-z nodelete` (`DF_1_NODELETE` in its
    /// `DT_FLAGS_1`). `None` when glibc's `_dl_find_object` cannot tell.
    pub(super) fn stays(addr: usize) -> Option<bool> {
        const DT_NULL: u64 = 0;
        const DT_FLAGS_1: u64 = 0x6fff_fffb;
        const DF_1_NODELETE: u64 = 0x8;
        let find = function()?;
        // SAFETY: as in `locate`.
        let mut result: DlFindObject = unsafe { std::mem::zeroed() };
        // SAFETY: as in `locate`.
        if unsafe { find(addr as *mut c_void, &mut result) } != 0 || result.link_map.is_null() {
            return None;
        }
        if result.map_start == main_start() {
            return Some(true);
        }
        // SAFETY: the object's live link map (as in `locate`).
        let mut entry = unsafe { (*result.link_map).l_ld };
        // The dynamic section ends at DT_NULL; no object has hundreds of
        // entries, so the walk is bounded all the same.
        for _ in 0..1024 {
            if entry.is_null() {
                return None;
            }
            // SAFETY: `l_ld` points to the loaded object's dynamic section,
            // an array of (tag, value) pairs ending in DT_NULL, read up to it.
            let [tag, value] = unsafe { entry.read() };
            match tag {
                DT_NULL => return Some(false),
                DT_FLAGS_1 => return Some(value & DF_1_NODELETE != 0),
                // SAFETY: the next pair, before DT_NULL is reached.
                _ => entry = unsafe { entry.add(1) },
            }
        }
        None
    }

    pub(super) fn locate(addr: usize) -> Answer {
        let Some(find) = function() else {
            return Answer::Unavailable;
        };
        // SAFETY: all-zero is a valid `DlFindObject` (integers and a null pointer).
        let mut result: DlFindObject = unsafe { std::mem::zeroed() };
        // SAFETY: `_dl_find_object` reads no memory at `addr`, only compares it,
        // and fills `result`, which is at least as large as glibc's struct.
        if unsafe { find(addr as *mut c_void, &mut result) } != 0 {
            return Answer::NotMapped;
        }
        if result.link_map.is_null()
            || !cfg!(all(target_endian = "little", target_pointer_width = "64"))
        {
            return Answer::Unavailable;
        }
        // SAFETY: `dlfo_link_map` points to the object's live link map, whose
        // public head is `LinkMap`.
        let (base, name) = unsafe { ((*result.link_map).l_addr, (*result.link_map).l_name) };
        let page = PAGE.load(Ordering::Relaxed);
        let (start, end) = (result.map_start, result.map_end);
        if end.saturating_sub(start) < page {
            return Answer::Unavailable;
        }
        // SAFETY: `dlfo_map_start` is where glibc mapped the object's first
        // PT_LOAD segment, at least one page long; the first segment of an
        // ELF object holds its ELF and program headers and is readable (glibc
        // itself reads the program headers there through PT_PHDR). What is
        // read is checked below before it is trusted.
        let head = unsafe { std::slice::from_raw_parts(start as *const u8, page) };
        if head[..4] != *b"\x7fELF" || head[4] != 2 {
            return Answer::Unavailable;
        }
        let (phoff, phentsize, phnum) = (
            le_u64(head, 32) as usize,
            usize::from(le_u16(head, 54)),
            usize::from(le_u16(head, 56)),
        );
        let Some(phdrs) = phnum
            .checked_mul(56)
            .and_then(|n| phoff.checked_add(n))
            .filter(|&e| phentsize == 56 && e <= page)
            .map(|e| &head[phoff..e])
        else {
            return Answer::Unavailable;
        };
        // One pass over the program headers: the lowest PT_LOAD (which must
        // map file offset 0 at `map_start` for the headers to be this
        // object's) and the one that contains `addr`.
        let mut lowest: Option<(u64, usize)> = None;
        let mut segment = None;
        let mut segments = Segments::EMPTY;
        for p in phdrs.chunks_exact(56) {
            if u32::from_le_bytes([p[0], p[1], p[2], p[3]]) != libc::PT_LOAD {
                continue;
            }
            let (offset, vaddr, memsz) =
                (le_u64(p, 8), le_u64(p, 16) as usize, le_u64(p, 40) as usize);
            if lowest.is_none_or(|(_, v)| vaddr < v) {
                lowest = Some((offset, vaddr));
            }
            let s = base.wrapping_add(vaddr);
            let Some(end) = s.checked_add(memsz) else {
                return Answer::Unavailable;
            };
            if segment.is_none() && addr >= s && addr < end {
                segment = Some(s..end);
            }
            segments.push(s..end);
        }
        let Some((offset, vaddr)) = lowest else {
            return Answer::Unavailable;
        };
        if offset != 0 || base.wrapping_add(vaddr) & !(page - 1) != start {
            return Answer::Unavailable;
        }
        match segment {
            Some(segment) => Answer::Found(Located {
                object: ObjectName(if start == main_start() {
                    0
                } else {
                    name as usize
                }),
                segment,
                segments,
            }),
            // In the object's mapping but in a gap between its segments.
            None => Answer::NotMapped,
        }
    }

    /// Where the main executable's mapping starts.
    fn main_start() -> usize {
        static MAIN: AtomicUsize = AtomicUsize::new(0);
        let m = MAIN.load(Ordering::Relaxed);
        if m != 0 {
            return m;
        }
        // SAFETY: AT_PHDR is read from the auxiliary vector, no preconditions.
        let phdr = unsafe { libc::getauxval(libc::AT_PHDR) } as usize;
        let page = PAGE.load(Ordering::Relaxed).max(4096);
        let m = phdr & !(page - 1);
        MAIN.store(m, Ordering::Relaxed);
        m
    }
}

/// The bytes of `range` in this process's memory.
///
/// # Safety
/// `range` must lie inside a segment of an object that stays loaded while the
/// slice is used (as the ranges returned by this module do, until `dlclose`).
#[inline]
pub(crate) unsafe fn memory(range: Range<usize>) -> &'static [u8] {
    if range.is_empty() {
        return &[];
    }
    // SAFETY: the caller guarantees the range is mapped and stays mapped.
    unsafe { std::slice::from_raw_parts(range.start as *const u8, range.len()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_agrees_with_the_walk() {
        let here = locate_agrees_with_the_walk as fn() as usize;
        let libc_fn = libc::getpid as *const () as usize;
        let data = &DATA as *const u8 as usize;
        static DATA: u8 = 7;
        for addr in [here, libc_fn, data] {
            let fast = locate(addr).unwrap();
            let walk = locate_by_walk(addr).unwrap();
            assert_eq!(fast.segment, walk.segment, "{addr:#x}");
            assert_eq!(fast.segments, walk.segments, "{addr:#x}");
            assert!(fast.segments.is_complete());
            assert!(fast.segments.iter().any(|s| s == fast.segment));
            // SAFETY: both objects stay loaded for the whole test.
            let (a, b) = unsafe { (fast.object.path(), walk.object.path()) };
            assert_eq!(a, b);
        }
        // SAFETY: this test binary is loaded.
        assert_eq!(
            unsafe { locate(here).unwrap().object.path() },
            std::env::current_exe().unwrap()
        );
        assert_eq!(locate(0), None);
        assert_eq!(locate_by_walk(0), None);
        // glibc 2.35 and later: the lock-free lookup is the one used.
        assert!(matches!(
            find_object::locate(here),
            find_object::Answer::Found(_)
        ));
    }
}
