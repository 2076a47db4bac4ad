//! Offload sections in files: ELF executables, shared objects and relocatable
//! objects, static archives of them (including heterogeneous device archives),
//! and raw bundle, `CCOB` or offload-binary files.

use std::fs::File;
use std::path::{Path, PathBuf};

use object::read::archive::ArchiveFile;
use object::read::elf::{ElfFile64, SectionHeader};
use object::{Endianness, FileKind};

use super::{
    FileError, FileErrorKind, OffloadSection, SectionRole, CONTAINER_SECTIONS,
    OBJECT_BUNDLE_PREFIX, REGISTRATION_SECTIONS, SHT_LLVM_OFFLOADING,
};
use crate::container::{self, Container, Format};
use crate::limits::Limits;

/// A file mapped read-only into memory.
pub struct MappedFile {
    path: PathBuf,
    map: Option<memmap2::Mmap>,
}

impl MappedFile {
    /// Maps `path` read-only. An empty file maps to no bytes.
    pub fn open(path: impl AsRef<Path>) -> Result<MappedFile, FileError> {
        let path = path.as_ref().to_path_buf();
        let io = |e| FileError {
            path: path.clone(),
            kind: FileErrorKind::Io(e),
        };
        let file = File::open(&path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let map = if len == 0 {
            None
        } else {
            // SAFETY: the map is read-only and private to this process. Another
            // process truncating the file while it is mapped would fault on
            // access; that is the accepted risk of mapping, as for any
            // memory-mapped reader (the dynamic loader takes the same one).
            let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
            // Only headers are read, scattered over the file: without this
            // hint each page fault reads ahead (8 MiB on this project's
            // machines), which made half of rocSPARSE's 1.3 GB resident to
            // list it. Random access faults in the touched pages only.
            let _ = map.advise(memmap2::Advice::Random);
            Some(map)
        };
        Ok(MappedFile { path, map })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or_default()
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
        let sections = self.offload_sections()?;
        let object_bundles = object_bundles(self.bytes(), &sections, limits);
        Ok(sections
            .into_iter()
            .filter(|s| s.role == SectionRole::Containers)
            .map(|section| {
                let start = section.file_offset as usize;
                let bytes = &self.bytes()[start..start + section.size as usize];
                let containers = container::scan(bytes, limits)
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
            })
            .chain(object_bundles)
            .collect())
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
    pub containers: Vec<crate::Result<Container<'a>>>,
}

/// Every offload section in `data` (a whole file), in file order.
pub fn offload_sections(data: &[u8]) -> Result<Vec<OffloadSection>, FileErrorKind> {
    if let Some(format) = Format::sniff(data) {
        return Ok(vec![OffloadSection {
            member: None,
            name: format.name().into(),
            role: SectionRole::Containers,
            file_offset: 0,
            size: data.len() as u64,
            address: 0,
        }]);
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
    let elf = ElfFile64::<Endianness>::parse(data).map_err(object_error(base))?;
    let endian = elf.endian();
    let sections = elf.elf_section_table();
    let mut out = Vec::new();
    for header in sections.iter() {
        let name = sections
            .section_name(endian, header)
            .map_err(object_error(base))?;
        let name = String::from_utf8_lossy(name);
        let role = if CONTAINER_SECTIONS.contains(&name.as_ref())
            || header.sh_type(endian) == SHT_LLVM_OFFLOADING
        {
            SectionRole::Containers
        } else if REGISTRATION_SECTIONS.contains(&name.as_ref()) {
            SectionRole::Registration
        } else if name.starts_with(OBJECT_BUNDLE_PREFIX) {
            SectionRole::BundleEntry
        } else {
            continue;
        };
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
        let name = String::from_utf8_lossy(member.name()).into_owned();
        let (offset, size) = member.file_range();
        let bytes = member.data(data).map_err(object_error(offset))?;
        if let Some(format) = Format::sniff(bytes) {
            out.push(OffloadSection {
                member: Some(name),
                name: format.name().into(),
                role: SectionRole::Containers,
                file_offset: offset,
                size,
                address: 0,
            });
        } else if let Ok(FileKind::Elf64) = FileKind::parse(bytes) {
            out.extend(elf_sections(bytes, offset, Some(&name))?);
        }
    }
    Ok(out)
}
