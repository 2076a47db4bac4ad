//! Where offload code lives: sections of ELF files, archive members and raw
//! container files ([`mod@file`]). (The objects loaded in a process are the
//! runtime's business: `offload-loader-ffi` finds its registrations there.)
//!
//! Only section headers and container headers are read; files are memory-mapped
//! so the pages of images nobody asks for are never touched.

mod descriptor;
mod embedded;
pub mod file;
mod holes;
mod quick;

use std::fmt;
use std::path::PathBuf;

use crate::container::Format;
use crate::image::CodeKind;

/// Sections that hold offload containers (bundles, `CCOB`, offload binaries,
/// NVIDIA fat binaries).
pub const CONTAINER_SECTIONS: &[&str] = &[".hip_fatbin", ".llvm.offloading", ".nv_fatbin"];

/// Sections that hold registration data: fatbin wrappers, entry tables, AOMP's
/// target-ID list.
pub const REGISTRATION_SECTIONS: &[&str] = &[
    ".hipFatBinSegment",
    ".nvFatBinSegment",
    "llvm_offload_entries",
    "omp_offloading_entries",
    ".omp_offloading_entries",
    "cuda_offloading_entries",
    "hip_offloading_entries",
    ".offload_arch_list",
];

/// `SHT_LLVM_OFFLOADING`: the section type of `.llvm.offloading` (llvm/BinaryFormat/ELF.h).
pub const SHT_LLVM_OFFLOADING: u32 = 0x6fff_4c0b;

/// Prefix of the sections clang-offload-bundler writes into relocatable
/// objects (`-fgpu-rdc`, `-type=o`): one section per entry, named
/// `__CLANG_OFFLOAD_BUNDLE__<bundle entry ID>` (clang/lib/Driver/OffloadBundler.cpp
/// `ObjectFileHandler`).
pub const OBJECT_BUNDLE_PREFIX: &str = "__CLANG_OFFLOAD_BUNDLE__";

/// What a found section holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SectionRole {
    /// Offload containers: scan it with [`crate::container::scan`].
    Containers,
    /// One entry of an object-file bundle: the section's bytes are the code
    /// object, its name after [`OBJECT_BUNDLE_PREFIX`] the bundle entry ID.
    BundleEntry,
    /// Registration structures (wrappers, entry tables, arch list).
    Registration,
    /// One GPU image on its own (a whole file or archive member): an AMDGPU
    /// code object, a cubin, PTX text.
    Image,
    /// A section of host data (`.ldata`, `.rodata`, a library's own section)
    /// with containers found in it by their content, among bytes that are not
    /// theirs: the program loads them itself (as data, or through a
    /// registration wrapper that points there). Only the containers are GPU
    /// code; a rewriter keeps every other byte where it is.
    Embedded,
}

/// The section of relocatable device code in `nvcc -rdc=true -c` objects:
/// NVIDIA fat binaries. Linked files keep it too, and there it is live: each
/// object's `.nvFatBinSegment` wrapper points into it (what
/// `__cudaRegisterLinkedBinary` is handed; NCCL's 129 fat binaries for 8
/// architectures, 216 MB, are there), though `cuobjdump` reads it in
/// relocatable objects only.
pub const NV_RELFATBIN: &str = "__nv_relfatbin";

/// A section (or a whole raw file) that holds offload data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffloadSection {
    /// The archive member it is in, for archives.
    pub member: Option<String>,
    /// Section name; for a raw container file, the container format's name.
    pub name: String,
    /// What it holds.
    pub role: SectionRole,
    /// Offset of its bytes in the file.
    pub file_offset: u64,
    /// Size of its bytes in the file.
    pub size: u64,
    /// Its virtual address (`sh_addr`), 0 for raw files and relocatable objects.
    pub address: u64,
}

impl OffloadSection {
    /// The section that is the whole of `data` (at `offset` in the file): a
    /// raw container (by its magic, or a text bundle's first line), or one GPU
    /// image (an AMDGPU code object, a cubin, PTX text). Shared by the full
    /// read (`file`) and the quick look (`quick`), so both classify a file's
    /// bytes alike.
    pub(crate) fn whole(data: &[u8], offset: u64, member: Option<&str>) -> Option<OffloadSection> {
        let (name, role) = match Format::sniff(data) {
            Some(format) => (format.name(), SectionRole::Containers),
            None => match CodeKind::sniff(data) {
                kind @ (CodeKind::AmdgpuElf | CodeKind::Cubin | CodeKind::Ptx) => {
                    (kind.name(), SectionRole::Image)
                }
                _ => return None,
            },
        };
        Some(OffloadSection {
            member: member.map(Into::into),
            name: name.into(),
            role,
            file_offset: offset,
            size: data.len() as u64,
            address: 0,
        })
    }
}

/// An error about one file: its path, and the offset and what was wrong.
#[derive(Debug)]
pub struct FileError {
    /// The file.
    pub path: PathBuf,
    /// What went wrong.
    pub kind: FileErrorKind,
}

/// What went wrong with a file.
#[derive(Debug)]
pub enum FileErrorKind {
    /// It could not be opened or mapped.
    Io(std::io::Error),
    /// Its ELF or archive structure is broken (offset of the structure).
    Object {
        /// Offset in the file.
        offset: u64,
        /// The `object` crate's message.
        message: String,
    },
    /// An offload structure in it is broken (offset relative to the file).
    Format(crate::error::Error),
    /// It is not an ELF file, an archive or an offload container.
    Unrecognised,
    /// It is not a regular file (a directory, pipe, socket or device), so it
    /// is not opened: opening a pipe would wait for a writer.
    NotRegular(&'static str),
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The path as `Path::display` writes it, without its work per
        // character where the path is UTF-8: a directory scan formats this
        // for each file that is not ELF.
        let (display, text) = (self.path.display(), self.path.to_str());
        let path: &dyn fmt::Display = match &text {
            Some(text) => text,
            None => &display,
        };
        match &self.kind {
            FileErrorKind::Io(e) => write!(f, "{path}: {e}"),
            FileErrorKind::Object { offset, message } => {
                write!(f, "{path}: at offset {offset:#x}: {message}")
            }
            FileErrorKind::Format(e) => write!(f, "{path}: {e}"),
            FileErrorKind::Unrecognised => write!(
                f,
                "{path}: not an ELF file, an archive or an offload container"
            ),
            FileErrorKind::NotRegular(what) => write!(f, "{path}: is a {what}, not a regular file"),
        }
    }
}

impl std::error::Error for FileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            FileErrorKind::Io(e) => Some(e),
            FileErrorKind::Format(e) => Some(e),
            _ => None,
        }
    }
}

/// The addresses the version 2 CUDA wrappers (`FATBINC_LINK_VERSION`, what
/// crt/link.stub writes for an `-rdc` program's device-link stub) in the
/// `.nvFatBinSegment` of `data` (a whole file) point at: where each stub's
/// fat binary is (see [`crate::verdict::Link`]). None for a file that is
/// not ELF.
pub fn link_stubs(data: &[u8]) -> Vec<u64> {
    let Ok(sections) = file::offload_sections(data) else {
        return Vec::new();
    };
    sections
        .iter()
        .filter(|s| s.role == SectionRole::Registration && s.name == ".nvFatBinSegment")
        .filter_map(|s| {
            let start = usize::try_from(s.file_offset).ok()?;
            data.get(start..start.checked_add(usize::try_from(s.size).ok()?)?)
        })
        .flat_map(crate::registration::FatbinWrapper::all)
        .filter_map(|(_, w)| w.ok())
        .filter(|w| w.kind == crate::registration::WrapperKind::Cuda && w.version == 2)
        .map(|w| w.fatbin)
        .collect()
}

/// What the section whose name starts at `name_at` in the section names
/// `names`, of type `sh_type`, holds. Names are compared
/// in place, without finding their end first: most sections of a library or
/// an archive member are not offload sections, and this is run on each.
pub(crate) fn section_role(names: &[u8], name_at: u32, sh_type: u32) -> Option<SectionRole> {
    let name = names.get(usize::try_from(name_at).ok()?..)?;
    // Every name below starts with one of these: other sections (`.text`,
    // `.rela.data`, `.note.gnu.build-id`, `.hash`) are told apart by their
    // first two or three bytes.
    if sh_type != SHT_LLVM_OFFLOADING
        && !matches!(
            name,
            [b'.', b'h', b'i', ..]
                | [b'.', b'l', b'l', ..]
                | [b'.', b'n', b'v', ..]
                | [b'.', b'o', b'f' | b'm', ..]
                | [b'_', b'_', ..]
                | [b'c', b'u', ..]
                | [b'h', b'i', ..]
                | [b'l', b'l', ..]
                | [b'o', b'm', ..]
        )
    {
        return None;
    }
    let is = |s: &str| name.starts_with(s.as_bytes()) && name.get(s.len()) == Some(&0);
    if sh_type == SHT_LLVM_OFFLOADING
        || CONTAINER_SECTIONS.iter().any(|s| is(s))
        || is(NV_RELFATBIN)
    {
        Some(SectionRole::Containers)
    } else if REGISTRATION_SECTIONS.iter().any(|s| is(s)) {
        Some(SectionRole::Registration)
    } else if name.starts_with(OBJECT_BUNDLE_PREFIX.as_bytes()) {
        Some(SectionRole::BundleEntry)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_errors_name_the_path_as_display_does() {
        use std::os::unix::ffi::OsStrExt;
        for bytes in [&b"/lib/libx.so"[..], b"/lib/\xffx.so"] {
            let path = std::path::Path::new(std::ffi::OsStr::from_bytes(bytes));
            let error = FileError {
                path: path.to_path_buf(),
                kind: FileErrorKind::Unrecognised,
            };
            let expected = format!(
                "{}: not an ELF file, an archive or an offload container",
                path.display()
            );
            assert_eq!(error.to_string(), expected);
        }
    }

    #[test]
    fn every_offload_section_name_has_a_role() {
        let bundle = format!("{OBJECT_BUNDLE_PREFIX}hip-amdgcn-amd-amdhsa--gfx90a");
        let extra = [NV_RELFATBIN, bundle.as_str()];
        let names = CONTAINER_SECTIONS
            .iter()
            .chain(REGISTRATION_SECTIONS)
            .chain(&extra);
        for name in names {
            let table = format!("\0{name}\0");
            assert!(
                section_role(table.as_bytes(), 1, object::elf::SHT_PROGBITS).is_some(),
                "{name}"
            );
        }
        for name in [".text", ".rela.text", ".hash", ".note.gnu.build-id", "_x"] {
            let table = format!("\0{name}\0");
            assert_eq!(
                section_role(table.as_bytes(), 1, object::elf::SHT_PROGBITS),
                None
            );
        }
        assert!(section_role(b"\0.x\0", 1, SHT_LLVM_OFFLOADING).is_some());
    }
}
