//! Offload sections in files: ELF executables, shared objects and relocatable
//! objects, static archives of them (including heterogeneous device archives),
//! and raw bundle, `CCOB` or offload-binary files.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use object::elf::FileHeader64;
use object::read::archive::ArchiveFile;
use object::read::elf::{FileHeader, SectionHeader};
use object::{Endianness, FileKind};

use super::holes::Holes;
use super::{
    quick, section_role, FileError, FileErrorKind, OffloadSection, SectionRole,
    OBJECT_BUNDLE_PREFIX,
};
use crate::container::{self, Container, Format, Scope};
use crate::image::CodeKind;
use crate::limits::Limits;

/// Files larger than this are mapped for random access (the kernel's largest
/// read-ahead window seen here is 8 MiB).
const READ_AHEAD: u64 = 8 << 20;

/// A file mapped read-only into memory.
pub struct MappedFile {
    path: PathBuf,
    map: Option<memmap2::Mmap>,
    /// Its holes when mapped, which scans pass over.
    holes: Holes,
}

impl MappedFile {
    /// Maps `path` read-only. An empty file maps to no bytes.
    pub fn open(path: impl AsRef<Path>) -> Result<MappedFile, FileError> {
        let path = path.as_ref().to_path_buf();
        let (file, meta) = open_regular(&path)?;
        map(path, &file, &meta, 0, meta.len())
    }

    /// Maps the `len` bytes of `path` from `offset` read-only: a file that
    /// lies inside another (a member of a tar stream), read as if it were
    /// whole, its offsets counted from its start. A part that runs past the
    /// file's end is an error.
    pub fn open_part(
        path: impl AsRef<Path>,
        offset: u64,
        len: u64,
    ) -> Result<MappedFile, FileError> {
        let path = path.as_ref().to_path_buf();
        let (file, meta) = open_regular(&path)?;
        if offset.checked_add(len).is_none_or(|end| end > meta.len()) {
            return Err(FileError {
                path,
                kind: FileErrorKind::Io(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "{len} bytes from offset {offset} run past its end ({} bytes)",
                        meta.len()
                    ),
                )),
            });
        }
        map(path, &file, &meta, offset, len)
    }

    /// Maps `path` only if it may hold offload code: a raw container or
    /// image (by its first bytes), an archive, text, or an ELF file with an
    /// offload section. Anything else is told from its headers, without mapping
    /// it: `Ok(None)` for an ELF file or archive without offload code, the
    /// [`FileErrorKind::Unrecognised`] error for other bytes. What a
    /// directory scan costs per file without GPU code: an open and two
    /// positioned reads (see `quick`). A device file read here is never mapped.
    pub fn open_if_offload(path: impl AsRef<Path>) -> Result<Option<MappedFile>, FileError> {
        let path = path.as_ref().to_path_buf();
        // A pipe or a directory fails the positioned read, and only then is
        // the file's type looked up.
        let file = open_nonblocking(&path)?;
        let mut head = [0u8; quick::HEAD];
        let n = match std::os::unix::fs::FileExt::read_at(&file, &mut head, 0) {
            Ok(n) => n,
            Err(e) => {
                regular(&path, &file)?;
                return Err(FileError {
                    path,
                    kind: FileErrorKind::Io(e),
                });
            }
        };
        let head = &head[..n];
        let kind = FileKind::parse(head);
        let maybe = quick::may_hold_offload_code(&file, head, &kind);
        if maybe {
            let meta = regular(&path, &file)?;
            return map(path, &file, &meta, 0, meta.len()).map(Some);
        }
        match kind {
            Ok(FileKind::Elf64 | FileKind::Archive) => Ok(None),
            _ => Err(FileError {
                path,
                kind: FileErrorKind::Unrecognised,
            }),
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or_default()
    }

    /// Tells the kernel that all of the file will be read: the file's
    /// read-ahead is on again (a file is mapped for a caller that reads its
    /// headers, page by page), so each fault reads ahead of it, and the
    /// first read-ahead window is read in the background (Linux clamps one
    /// `WILLNEED` to the larger of the device's read-ahead and its largest
    /// I/O: `force_page_cache_ra`, mm/readahead.c). For a caller that reads
    /// the whole file (slimming it). A hint: nothing changes where it is not
    /// taken.
    pub fn will_read_all(&self) {
        if let Some(map) = &self.map {
            let _ = map.advise(memmap2::Advice::Normal);
            let _ = map.advise(memmap2::Advice::WillNeed);
        }
    }

    /// Every offload section of the file, in file order.
    pub fn offload_sections(&self) -> Result<Vec<OffloadSection>, FileError> {
        offload_sections(self.bytes()).map_err(|kind| FileError {
            path: self.path.clone(),
            kind,
        })
    }

    /// Every container of every container section, with offsets relative to the
    /// file. A broken container is reported in place; the others are still listed.
    pub fn containers(&self, limits: &Limits) -> Result<Vec<SectionContainers<'_>>, FileError> {
        self.scan(limits, Each::InTurn)
    }

    /// [`MappedFile::containers`], the same list, its sections scanned on
    /// every core (rayon's pool): for a caller that reads a whole large
    /// file.
    #[cfg(feature = "parallel")]
    pub fn containers_in_parallel(
        &self,
        limits: &Limits,
    ) -> Result<Vec<SectionContainers<'_>>, FileError> {
        self.scan(limits, Each::InParallel)
    }

    /// [`MappedFile::containers`], its sections scanned as `each` says.
    fn scan(&self, limits: &Limits, each: Each) -> Result<Vec<SectionContainers<'_>>, FileError> {
        containers_around(self.bytes(), &self.holes, limits, each).map_err(|kind| FileError {
            path: self.path.clone(),
            kind,
        })
    }
}

/// How the sections of a file are scanned.
#[derive(Clone, Copy)]
enum Each {
    /// One after the other, on the caller's thread.
    InTurn,
    /// On every core.
    #[cfg(feature = "parallel")]
    InParallel,
}

impl Each {
    /// `f` of each of `items`, in order.
    fn map<T: Send, U: Send>(self, items: Vec<T>, f: impl Fn(T) -> U + Sync + Send) -> Vec<U> {
        match self {
            Each::InTurn => items.into_iter().map(f).collect(),
            #[cfg(feature = "parallel")]
            Each::InParallel => {
                use rayon::prelude::*;
                items.into_par_iter().map(f).collect()
            }
        }
    }
}

/// Every container of every container section of `data` (a whole file), with
/// offsets relative to it ([`MappedFile::containers`]).
pub fn containers<'a>(
    data: &'a [u8],
    limits: &Limits,
) -> Result<Vec<SectionContainers<'a>>, FileErrorKind> {
    containers_around(data, &Holes::default(), limits, Each::InTurn)
}

/// [`containers`], the container sections' scans passing over `holes`.
fn containers_around<'a>(
    data: &'a [u8],
    holes: &Holes,
    limits: &Limits,
    each: Each,
) -> Result<Vec<SectionContainers<'a>>, FileErrorKind> {
    let sections = offload_sections(data)?;
    let object_bundles = object_bundles(data, &sections, limits);
    // A linked file of the clang-offload-wrapper generation keeps its
    // images behind a binary descriptor, not in a container section; it has
    // the descriptor's host entry table.
    let wrapped = !sections.iter().any(|s| s.role == SectionRole::Containers)
        && sections
            .iter()
            .any(|s| super::descriptor::ENTRY_SECTIONS.contains(&s.name.as_str()));
    let descriptor = if wrapped {
        super::descriptor::find(data, limits)
    } else {
        None
    };
    let descriptor = descriptor.map(|found| {
        let (file_offset, size) = match &found {
            Ok(c) => (c.offset(), c.len()),
            Err(e) => (e.offset, 0),
        };
        SectionContainers {
            section: OffloadSection {
                member: None,
                name: "__tgt_bin_desc".into(),
                role: SectionRole::Containers,
                file_offset,
                size,
                address: 0,
            },
            containers: vec![found],
        }
    });
    // Every section's scan is one piece of work: the container sections'
    // and those searched among other bytes alike, then put back in order.
    let scans: Vec<(bool, OffloadSection)> = sections
        .into_iter()
        .filter(|s| matches!(s.role, SectionRole::Containers | SectionRole::Image))
        .map(|s| (false, s))
        .chain(embedded_sections(data).into_iter().map(|s| (true, s)))
        .collect();
    let scanned = each.map(scans, |(embedded, section)| {
        let found = if embedded {
            embedded_scan(data, section, holes, limits)
        } else {
            Some(section_scan(data, section, holes, limits))
        };
        (embedded, found)
    });
    let (embedded, sections): (Vec<_>, Vec<_>) = scanned.into_iter().partition(|(e, _)| *e);
    Ok(sections
        .into_iter()
        .filter_map(|(_, s)| s)
        .chain(object_bundles)
        .chain(descriptor)
        .chain(embedded.into_iter().filter_map(|(_, s)| s))
        .collect())
}

/// The containers of a container section (or the image a section is).
fn section_scan<'a>(
    data: &'a [u8],
    section: OffloadSection,
    holes: &Holes,
    limits: &Limits,
) -> SectionContainers<'a> {
    let start = section.file_offset as usize;
    let bytes = &data[start..start + section.size as usize];
    let containers = if section.role == SectionRole::Image {
        vec![Container::from_image(bytes, limits)]
    } else {
        let holes = holes.within(section.file_offset, section.size);
        container::scan_around(bytes, &holes, limits)
    };
    let containers = containers
        .into_iter()
        .map(|c| {
            c.map(|mut c| {
                c.rebase(section.file_offset);
                c
            })
            .map_err(|e| e.at(section.file_offset))
        })
        .collect();
    SectionContainers {
        section,
        containers,
    }
}

/// The containers found among the other bytes of a section, if any, its
/// `holes` passed over.
fn embedded_scan<'a>(
    data: &'a [u8],
    section: OffloadSection,
    holes: &Holes,
    limits: &Limits,
) -> Option<SectionContainers<'a>> {
    let start = section.file_offset as usize;
    let bytes = &data[start..start + section.size as usize];
    let holes = holes.within(section.file_offset, section.size);
    let found = super::embedded::find(bytes, &holes, limits);
    (!found.is_empty()).then(|| SectionContainers {
        containers: found
            .into_iter()
            .map(|mut c| {
                c.rebase(section.file_offset);
                Ok(c)
            })
            .collect(),
        section,
    })
}

/// The sections of `data` (a whole file) searched for containers among other
/// bytes (see `embedded`): those of an ELF file, or of each ELF member of an
/// archive.
fn embedded_sections(data: &[u8]) -> Vec<OffloadSection> {
    match FileKind::parse(data) {
        Ok(FileKind::Elf64) => super::embedded::sections(data, 0, None),
        Ok(FileKind::Archive) => {
            let Ok(archive) = ArchiveFile::parse(data) else {
                return Vec::new();
            };
            let mut out = Vec::new();
            for member in archive.members().flatten() {
                let Ok(bytes) = member.data(data) else {
                    continue;
                };
                if bytes.starts_with(crate::magic::ELF) {
                    let name = String::from_utf8_lossy(member.name());
                    let offset = member.file_range().0;
                    out.extend(super::embedded::sections(bytes, offset, Some(&name)));
                }
            }
            out
        }
        _ => Vec::new(),
    }
}

/// `path` opened without blocking (a named pipe would wait for a writer),
/// refused unless it is a regular file, with its metadata: one open, one
/// fstat.
fn open_regular(path: &Path) -> Result<(std::fs::File, std::fs::Metadata), FileError> {
    let file = open_nonblocking(path)?;
    let meta = regular(path, &file)?;
    Ok((file, meta))
}

/// `path` opened for reading without blocking (a named pipe would wait for a
/// writer), and without updating its access time where this process may ask
/// that (`O_NOATIME`: the file's owner, or root), as `tar` and `rsync` do: a
/// scan leaves the files it reads as they were, and the kernel skips the
/// access-time check on each read.
fn open_nonblocking(path: &Path) -> Result<std::fs::File, FileError> {
    /// Cleared at the first file this process may not open so (`EPERM`):
    /// from then on every open is a plain one, not two.
    static NOATIME: AtomicBool = AtomicBool::new(true);
    let open = |flags| {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | flags)
            .open(path)
    };
    let opened = if NOATIME.load(Ordering::Relaxed) {
        match open(libc::O_NOATIME) {
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                NOATIME.store(false, Ordering::Relaxed);
                open(0)
            }
            opened => opened,
        }
    } else {
        open(0)
    };
    opened.map_err(|e| FileError {
        path: path.to_path_buf(),
        kind: FileErrorKind::Io(e),
    })
}

/// The metadata of `file` (opened from `path`), or the error that it is not
/// a regular file: one fstat.
fn regular(path: &Path, file: &std::fs::File) -> Result<std::fs::Metadata, FileError> {
    let error = |kind| FileError {
        path: path.to_path_buf(),
        kind,
    };
    let meta = file.metadata().map_err(|e| error(FileErrorKind::Io(e)))?;
    if !meta.is_file() {
        return Err(error(FileErrorKind::NotRegular(file_type_name(
            meta.file_type(),
        ))));
    }
    Ok(meta)
}

/// Maps the `len` bytes of `file` (of metadata `meta`) from `offset`,
/// which lie in it, read-only.
fn map(
    path: PathBuf,
    file: &std::fs::File,
    meta: &std::fs::Metadata,
    offset: u64,
    len: u64,
) -> Result<MappedFile, FileError> {
    let map = if len == 0 {
        None
    } else {
        // SAFETY: the map is read-only and private to this process. Another
        // process truncating the file while it is mapped would fault on
        // access; that is the accepted risk of mapping, as for any
        // memory-mapped reader (the dynamic loader takes the same one).
        // (memmap2 maps from the page the offset is in.)
        let map = unsafe {
            memmap2::MmapOptions::new()
                .offset(offset)
                .len(len as usize)
                .map(file)
        };
        let map = map.map_err(|e| FileError {
            path: path.clone(),
            kind: FileErrorKind::Io(e),
        })?;
        // Only headers are read, scattered over the file: without this
        // hint each page fault reads ahead (8 MiB on this project's
        // machines), which made half of rocSPARSE's 1.3 GB resident to
        // list it. Random access faults in the touched pages only; a file
        // smaller than the read-ahead gains nothing from the call.
        if len > READ_AHEAD {
            let _ = map.advise(memmap2::Advice::Random);
        }
        Some(map)
    };
    Ok(MappedFile {
        path,
        map,
        holes: Holes::of(file, meta).part(offset, len),
    })
}

/// What a file that is not a regular one is.
fn file_type_name(kind: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_dir() {
        "directory"
    } else if kind.is_fifo() {
        "named pipe"
    } else if kind.is_socket() {
        "socket"
    } else if kind.is_block_device() || kind.is_char_device() {
        "device"
    } else {
        "special file"
    }
}

/// A bundle entry ID with its section's file offset and size.
type ObjectBundleEntry<'a> = (&'a str, u64, u64);

/// The `__CLANG_OFFLOAD_BUNDLE__<id>` sections of each object (or archive
/// member), gathered into one container per object.
fn object_bundles<'a>(
    data: &'a [u8],
    sections: &[OffloadSection],
    limits: &Limits,
) -> Vec<SectionContainers<'a>> {
    let mut out: Vec<SectionContainers<'a>> = Vec::new();
    let entries = sections
        .iter()
        .filter(|s| s.role == SectionRole::BundleEntry);
    // Per archive member (or the file itself): its (ID, offset, size) entries.
    let mut groups: Vec<(Option<String>, Vec<ObjectBundleEntry<'_>>)> = Vec::new();
    for s in entries {
        let id = &s.name[OBJECT_BUNDLE_PREFIX.len()..];
        match groups.iter_mut().find(|(m, _)| *m == s.member) {
            Some((_, list)) => list.push((id, s.file_offset, s.size)),
            None => groups.push((s.member.clone(), vec![(id, s.file_offset, s.size)])),
        }
    }
    for (member, list) in groups {
        let start = list.iter().map(|e| e.1).min().unwrap_or(0);
        let end = list
            .iter()
            .map(|e| e.1.saturating_add(e.2))
            .max()
            .unwrap_or(0);
        out.push(SectionContainers {
            section: OffloadSection {
                member,
                name: OBJECT_BUNDLE_PREFIX.trim_end_matches('_').to_string() + "__*",
                role: SectionRole::BundleEntry,
                file_offset: start,
                size: end.saturating_sub(start),
                address: 0,
            },
            containers: vec![Container::from_object_bundle(data, &list, limits)],
        });
    }
    out
}

/// A container section with what was found in it.
#[derive(Debug)]
pub struct SectionContainers<'a> {
    /// The section.
    pub section: OffloadSection,
    /// Its containers (offsets relative to the file), or the error in place of one.
    pub containers: Vec<crate::error::Result<Container<'a>>>,
}

impl<'a> SectionContainers<'a> {
    /// The selection scopes of the section's readable containers: its
    /// offload binaries together, one scope at the place of the first (what
    /// libomptarget sees in the program's descriptor, and what
    /// clang-linker-wrapper bundles for HIP), every other container on its
    /// own (HIP's bundle, CUDA's fat binary).
    pub fn scopes(&self) -> Vec<Scope<'_, 'a>> {
        // Each other container, or the place of the offload binaries' scope.
        let mut order: Vec<Option<&Container<'a>>> = Vec::new();
        let mut binaries = Vec::new();
        for c in self.containers.iter().flatten() {
            if c.format() != Format::OffloadBinary {
                order.push(Some(c));
            } else {
                if binaries.is_empty() {
                    order.push(None);
                }
                binaries.push(c);
            }
        }
        let mut binaries = Some(binaries);
        order
            .into_iter()
            .filter_map(|c| match c {
                Some(c) => Some(Scope::single(c)),
                None => binaries.take().map(Scope::of),
            })
            .collect()
    }
}

/// Every offload section in `data` (a whole file), in file order.
pub fn offload_sections(data: &[u8]) -> Result<Vec<OffloadSection>, FileErrorKind> {
    if let Some(section) = OffloadSection::whole(data, 0, None) {
        return Ok(vec![section]);
    }
    match FileKind::parse(data) {
        Ok(FileKind::Elf64) => elf_sections(data, 0, None),
        Ok(FileKind::Archive) => archive_sections(data),
        _ if data.starts_with(b"\x7fELF") => Err(FileErrorKind::Object {
            offset: 0,
            message: "truncated or unsupported ELF header (only 64-bit ELF is read)".into(),
        }),
        _ => Err(FileErrorKind::Unrecognised),
    }
}

fn object_error(offset: u64) -> impl Fn(object::Error) -> FileErrorKind {
    move |e| FileErrorKind::Object {
        offset,
        message: e.to_string(),
    }
}

/// The offload sections of the ELF file `data`, which starts at `base` in the file.
fn elf_sections(
    data: &[u8],
    base: u64,
    member: Option<&str>,
) -> Result<Vec<OffloadSection>, FileErrorKind> {
    // The file header and section table only: no symbol tables, which the
    // full `ElfFile64` parse would read too.
    let header = FileHeader64::<Endianness>::parse(data).map_err(object_error(base))?;
    let endian = header.endian().map_err(object_error(base))?;
    let sections = header.sections(endian, data).map_err(object_error(base))?;
    let names_index = header.shstrndx(endian, data).map_err(object_error(base))?;
    let names = sections
        .section(object::SectionIndex(names_index as usize))
        .and_then(|h| h.data(endian, data))
        .map_err(object_error(base))?;
    let mut out = Vec::new();
    for header in sections.iter() {
        let Some(role) = section_role(names, header.sh_name(endian), header.sh_type(endian)) else {
            continue;
        };
        let name = sections
            .section_name(endian, header)
            .map_err(object_error(base))?;
        let name = String::from_utf8_lossy(name);
        // NOBITS sections have no bytes in the file.
        let Some((offset, size)) = header.file_range(endian) else {
            continue;
        };
        if offset
            .checked_add(size)
            .is_none_or(|end| end > data.len() as u64)
        {
            return Err(FileErrorKind::Object {
                offset: base.saturating_add(offset),
                message: format!("section {name} lies past the end of the file"),
            });
        }
        out.push(OffloadSection {
            member: member.map(Into::into),
            name: name.into_owned(),
            role,
            file_offset: base + offset,
            size,
            address: header.sh_addr(endian),
        });
    }
    Ok(out)
}

/// The offload sections of every member of an `ar` archive: ELF members by
/// section, container members (device archives) whole.
fn archive_sections(data: &[u8]) -> Result<Vec<OffloadSection>, FileErrorKind> {
    let archive = ArchiveFile::parse(data).map_err(object_error(0))?;
    let mut out = Vec::new();
    for member in archive.members() {
        let member = member.map_err(object_error(0))?;
        let (offset, _) = member.file_range();
        let bytes = member.data(data).map_err(object_error(offset))?;
        let name = || String::from_utf8_lossy(member.name()).into_owned();
        // A host object (most members) is read by its sections; anything
        // else may be a container or an image on its own.
        let host_object = matches!(
            CodeKind::sniff(bytes),
            CodeKind::OtherElf | CodeKind::Unknown
        ) && bytes.starts_with(crate::magic::ELF);
        if host_object {
            if let Ok(FileKind::Elf64) = FileKind::parse(bytes) {
                let mut sections = elf_sections(bytes, offset, None)?;
                if !sections.is_empty() {
                    let name = name();
                    for s in &mut sections {
                        s.member = Some(name.clone());
                    }
                    out.extend(sections);
                }
            }
        } else if let Some(section) = OffloadSection::whole(bytes, offset, Some(&name())) {
            out.push(section);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::os::unix::fs::FileExt;

    #[test]
    fn sections_far_past_the_end_are_errors_not_panics() {
        // A fuzzer's find: a section offset near 2^64 overflowed the error's offset.
        let data =
            include_bytes!("../../../fuzz/regressions/discover_file/panic-section-offset-overflow");
        assert!(offload_sections(data).is_err());
    }

    /// The sections scanned on every core give the list scanned in turn,
    /// in its order, on every file of the discovery corpus (container
    /// sections, data with embedded fat binaries, archives, objects).
    #[cfg(feature = "parallel")]
    #[test]
    fn a_parallel_scan_lists_what_a_scan_in_turn_does() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/corpus/discover_file");
        let mut files = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let data = std::fs::read(entry.unwrap().path()).unwrap();
            let scan = |each| {
                containers_around(&data, &Holes::default(), &Limits::default(), each)
                    .map(|list| format!("{list:?}"))
                    .map_err(|e| format!("{e:?}"))
            };
            let in_turn = scan(Each::InTurn);
            assert_eq!(in_turn, scan(Each::InParallel));
            files += usize::from(in_turn.is_ok_and(|l| l.contains("containers")));
        }
        assert!(files >= 8, "{files}");
    }

    #[test]
    fn raw_cubin_and_ptx_files_are_images() {
        let ptx = b"//\n.version 9.5\n.target sm_80\n.address_size 64\n";
        let s = offload_sections(ptx).unwrap();
        assert_eq!((s[0].role, s[0].name.as_str()), (SectionRole::Image, "ptx"));
        let c = Container::from_image(ptx, &Limits::default()).unwrap();
        assert_eq!(c.images()[0].arch.to_string(), "sm_80");
        // The driver gets the text with its NUL.
        assert_eq!(c.image_bytes(0).unwrap().last(), Some(&0));
        assert!(offload_sections(b"just text").is_err());
    }

    /// A part of a file (a tar member: at an offset that is not a page's)
    /// maps to its own bytes, its holes as its own, and is scanned as those
    /// bytes read whole; a part past the end is an error.
    #[test]
    fn a_part_of_a_file_is_mapped_and_scanned_as_its_bytes() {
        let section = crate::container::tests::sparse_section();
        let path = std::env::temp_dir().join(format!("part-{}.tar", std::process::id()));
        let file = File::create(&path).unwrap();
        // 41 512-byte blocks before it (as tar headers and their extensions
        // put them: more than a page, not on one), zeros after it.
        let at = 41 * 512;
        file.write_all_at(&[0x55; 41 * 512], 0).unwrap();
        let len = section.len() as u64;
        file.set_len(at + len + 70_000).unwrap();
        for (i, chunk) in section.chunks(4096).enumerate() {
            if chunk.iter().any(|&b| b != 0) {
                file.write_all_at(chunk, at + (i * 4096) as u64).unwrap();
            }
        }
        file.sync_all().unwrap();
        let part = MappedFile::open_part(&path, at, len).unwrap();
        assert_eq!(part.bytes(), &section[..]);
        let holes = part.holes.within(0, len);
        for &(a, b) in &holes {
            assert!(a < b && b <= section.len(), "{holes:?}");
            assert!(section[a..b].iter().all(|&x| x == 0));
        }
        let limits = Limits::default();
        let read = containers(&section, &limits).unwrap();
        let scanned = part.containers(&limits).unwrap();
        assert_eq!(format!("{scanned:?}"), format!("{read:?}"));
        assert_eq!(scanned[0].containers.len(), 4);
        let whole = MappedFile::open(&path).unwrap();
        assert_eq!(
            &whole.bytes()[at as usize..(at + len) as usize],
            &section[..]
        );
        assert!(MappedFile::open_part(&path, at, len + 70_001).is_err());
        assert!(MappedFile::open_part(&path, u64::MAX, 2).is_err());
        assert!(MappedFile::open_part(&path, at + len + 70_000, 0)
            .unwrap()
            .bytes()
            .is_empty());
        drop((part, whole));
        std::fs::remove_file(&path).unwrap();
    }
}
