//! Offload sections of the objects loaded in this process.
//!
//! `dl_iterate_phdr` lists the executable and every shared library (including
//! ones `dlopen`ed since the last call) with their load base and `PT_LOAD`
//! segments. Section headers are not mapped at run time, so they are read from
//! each object's file (memory-mapped, headers only); a section's bytes are then
//! read where the loader mapped them: `base + sh_addr`, checked to lie inside a
//! loaded segment.

use std::ffi::CStr;
use std::ops::Range;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use super::file::MappedFile;
use super::OffloadSection;

/// An object loaded in this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedObject {
    /// Its file (the main executable's own path for the first one).
    pub path: PathBuf,
    /// The load bias added to its virtual addresses.
    pub base: usize,
    /// Its `PT_LOAD` segments in memory.
    pub segments: Vec<Range<usize>>,
}

impl LoadedObject {
    /// The loaded segment that contains `addr`, from `addr` to the segment's end.
    pub fn span_from(&self, addr: usize) -> Option<Range<usize>> {
        self.segments
            .iter()
            .find(|s| s.contains(&addr))
            .map(|s| addr..s.end)
    }

    /// This object's offload sections, each with its range in memory. Sections
    /// that are not loaded (relocatable data, non-`SHF_ALLOC`) are left out.
    pub fn offload_sections(
        &self,
    ) -> Result<Vec<(OffloadSection, Range<usize>)>, super::FileError> {
        let file = MappedFile::open(&self.path)?;
        Ok(file
            .offload_sections()?
            .into_iter()
            .filter_map(|s| {
                let start = self.base.checked_add(usize::try_from(s.address).ok()?)?;
                let end = start.checked_add(usize::try_from(s.size).ok()?)?;
                let span = self.span_from(start)?;
                (s.address != 0 && end <= span.end).then_some((s, start..end))
            })
            .collect())
    }
}

/// Every object loaded in this process, the main executable first.
pub fn loaded_objects() -> Vec<LoadedObject> {
    let mut objects: Vec<LoadedObject> = Vec::new();
    // SAFETY: `collect` matches the callback type `dl_iterate_phdr` expects and
    // only reads the `dl_phdr_info` it is handed, during the call; `data` is a
    // valid `&mut Vec<LoadedObject>` for the whole call.
    unsafe {
        libc::dl_iterate_phdr(
            Some(collect),
            (&mut objects as *mut Vec<LoadedObject>).cast(),
        );
    }
    objects
}

unsafe extern "C" fn collect(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: `dl_iterate_phdr` passes a valid `info` for the duration of this
    // call and `data` is the vector passed by `loaded_objects`.
    let (info, objects) = unsafe { (&*info, &mut *data.cast::<Vec<LoadedObject>>()) };
    let base = info.dlpi_addr as usize;
    let name = if info.dlpi_name.is_null() {
        &[][..]
    } else {
        // SAFETY: a non-null `dlpi_name` is a NUL-terminated string owned by the loader.
        unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes()
    };
    let path = match name {
        [] if objects.is_empty() => {
            std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe"))
        }
        // The vDSO and other unnamed objects have no file to read.
        [] => return 0,
        n => PathBuf::from(std::ffi::OsStr::from_bytes(n)),
    };
    let phdrs = if info.dlpi_phdr.is_null() {
        &[][..]
    } else {
        // SAFETY: the loader guarantees `dlpi_phnum` headers at `dlpi_phdr`.
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) }
    };
    let segments = phdrs
        .iter()
        .filter(|p| p.p_type == libc::PT_LOAD)
        .filter_map(|p| {
            let start = base.checked_add(p.p_vaddr as usize)?;
            Some(start..start.checked_add(p.p_memsz as usize)?)
        })
        .collect();
    objects.push(LoadedObject {
        path,
        base,
        segments,
    });
    0
}

/// The loaded object whose segments contain `addr`, and the span from `addr`
/// to the end of its segment: the most bytes a structure at `addr` can occupy.
pub fn span_containing(addr: usize) -> Option<(LoadedObject, Range<usize>)> {
    loaded_objects().into_iter().find_map(|o| {
        let span = o.span_from(addr)?;
        Some((o, span))
    })
}

/// The bytes of `range` in this process's memory.
///
/// # Safety
/// `range` must lie inside a segment of an object that stays loaded while the
/// slice is used (as the ranges returned by this module do, until `dlclose`).
pub unsafe fn memory(range: Range<usize>) -> &'static [u8] {
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
    fn lists_this_test_binary_and_libc() {
        let objects = loaded_objects();
        assert_eq!(objects[0].path, std::env::current_exe().unwrap());
        assert!(objects
            .iter()
            .any(|o| o.path.to_string_lossy().contains("libc.so")));
        let here = lists_this_test_binary_and_libc as fn() as usize;
        let (obj, span) = span_containing(here).unwrap();
        assert_eq!(obj.path, objects[0].path);
        assert!(span.start == here && span.end > here);
    }
}
