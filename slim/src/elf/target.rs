//! The file being compacted, as its headers say: the section, the tables,
//! and where the fat-binary wrappers' pointers are.

use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader};
use object::LittleEndian as LE;

use crate::refusal::{unsafe_, Unsafe};

use offload_loader::registration::FatbinWrapper;

use super::point::Point;
use crate::refs;

pub(super) type Header = elf::FileHeader64<LE>;

pub(super) const PHDR_SIZE: u64 = 56;

/// The size of the ELF64 file header (ELF gABI, "ELF Header").
const HEADER_SIZE: u64 = 64;

/// The page size compaction and holes are measured in.
pub(crate) const PAGE: u64 = 4096;

/// The file and its offload section, as the patcher reads them.
pub(super) struct Target<'a> {
    pub(super) data: &'a [u8],
    pub(super) endian: LE,
    pub(super) machine: u16,
    pub(super) kind: u16,
    pub(super) shdrs: &'a [elf::SectionHeader64<LE>],
    pub(super) phdrs: &'a [elf::ProgramHeader64<LE>],
    pub(super) names: Option<object::read::StringTable<'a>>,
    /// The program header table: offset, entries; the section header
    /// table: offset, entry size.
    pub(super) phoff: u64,
    pub(super) phnum: u64,
    pub(super) shoff: u64,
    pub(super) shentsize: u64,
    /// The offload section: index, file offset, size, address, alignment,
    /// whether it is loaded.
    pub(super) index: usize,
    pub(super) offset: u64,
    pub(super) size: u64,
    pub(super) addr: u64,
    pub(super) align: u64,
    pub(super) alloc: bool,
    /// The addresses of the fat-binary wrappers' two pointer fields, in
    /// order ([`Target::points_at`]).
    pub(super) wrapper_fields: Vec<u64>,
}

/// The addresses of the pointer fields (fat binary, and the prelinked
/// binaries of CUDA's version 2) of every wrapper in the loaded
/// `.hipFatBinSegment` and `.nvFatBinSegment` sections, in order.
pub(super) fn wrapper_fields(
    data: &[u8],
    shdrs: &[elf::SectionHeader64<LE>],
    e: LE,
    names: Option<object::read::StringTable<'_>>,
) -> Vec<u64> {
    let mut fields = Vec::new();
    for s in shdrs {
        let name = names.and_then(|n| s.name(e, n).ok()).unwrap_or_default();
        if (name != b".hipFatBinSegment" && name != b".nvFatBinSegment")
            || s.sh_flags(e) & u64::from(elf::SHF_ALLOC) == 0
        {
            continue;
        }
        let Ok(bytes) = s.data(e, data) else { continue };
        for (at, wrapper) in FatbinWrapper::all(bytes) {
            if wrapper.is_ok() {
                fields.extend([8, 16].map(|f| s.sh_addr(e).wrapping_add(at + f)));
            }
        }
    }
    fields.sort_unstable();
    fields
}

/// Why the file header, the program header table and the section header
/// table (offset, length; `tables` in that order) cannot each be rewritten on
/// its own: two of them share bytes. The ELF gABI gives each its own place
/// (`e_ehsize`, `e_phoff`, `e_shoff`); a file where one lies over another
/// (only a hostile or broken file) would have one patch write over another's
/// fields, so it is refused. Empty tables share nothing.
fn shared_bytes(tables: &[(u64, u64); 3]) -> Option<String> {
    const NAMES: [&str; 3] = [
        "the ELF header",
        "the program header table",
        "the section header table",
    ];
    for i in 0..tables.len() {
        for j in i + 1..tables.len() {
            let ((a, a_len), (b, b_len)) = (tables[i], tables[j]);
            if a_len > 0 && b_len > 0 && a < b.saturating_add(b_len) && b < a.saturating_add(a_len)
            {
                return Some(format!(
                    "{} ({a:#x}, {a_len} bytes) and {} ({b:#x}, {b_len} bytes) overlap",
                    NAMES[i], NAMES[j]
                ));
            }
        }
    }
    None
}

impl<'a> Target<'a> {
    /// What a pointer stored at address `place` is known to point at: a
    /// container's start in a fat-binary wrapper's pointer fields (the
    /// registration code clang and nvcc emit hands that pointer to
    /// `__hipRegisterFatBinary` / `__cudaRegisterFatBinary`, which read a
    /// container there), where one container may end as the next begins;
    /// anything else, unknown.
    pub(super) fn points_at(&self, place: u64) -> Point {
        if self.wrapper_fields.binary_search(&place).is_ok() {
            Point::Start
        } else {
            Point::Unknown
        }
    }

    pub(super) fn parse(data: &'a [u8], offset: u64, size: u64) -> Result<Target<'a>, Unsafe> {
        let bad = |e: object::Error| unsafe_(format!("its ELF headers cannot be read: {e}"));
        let header = Header::parse(data).map_err(bad)?;
        let endian = header.endian().map_err(bad)?;
        let shdrs = header.section_headers(endian, data).map_err(bad)?;
        let phdrs = header.program_headers(endian, data).map_err(bad)?;
        let index = shdrs
            .iter()
            .position(|s| {
                s.sh_offset(endian) == offset
                    && s.sh_size(endian) == size
                    && s.sh_type(endian) != elf::SHT_NOBITS
            })
            .ok_or_else(|| unsafe_("the offload section is not in the section table"))?;
        let section = &shdrs[index];
        let names = header.section_strings(endian, data, shdrs).ok();
        let (phoff, phnum) = (header.e_phoff(endian), u64::from(header.e_phnum(endian)));
        let (shoff, shentsize) = (
            header.e_shoff(endian),
            u64::from(header.e_shentsize(endian)),
        );
        let tables = [
            (0, u64::from(header.e_ehsize(endian)).max(HEADER_SIZE)),
            (phoff, phnum.saturating_mul(PHDR_SIZE)),
            (shoff, (shdrs.len() as u64).saturating_mul(shentsize)),
        ];
        if let Some(why) = shared_bytes(&tables) {
            return Err(unsafe_(why));
        }
        Ok(Target {
            wrapper_fields: wrapper_fields(data, shdrs, endian, names),
            data,
            endian,
            machine: header.e_machine(endian),
            kind: header.e_type(endian),
            shdrs,
            phdrs,
            names,
            phoff,
            phnum,
            shoff,
            shentsize,
            index,
            offset,
            size,
            addr: section.sh_addr(endian),
            align: section.sh_addralign(endian).clamp(1, PAGE),
            alloc: section.sh_flags(endian) & u64::from(elf::SHF_ALLOC) != 0,
        })
    }

    /// The file offset of the 8 bytes at address `vaddr`, if loaded from the file.
    pub(super) fn file_offset(&self, vaddr: u64) -> Option<u64> {
        let e = self.endian;
        self.phdrs.iter().find_map(|p| {
            (p.p_type(e) == elf::PT_LOAD
                && vaddr >= p.p_vaddr(e)
                && vaddr.saturating_add(8) <= p.p_vaddr(e).saturating_add(p.p_filesz(e)))
            .then(|| p.p_offset(e) + (vaddr - p.p_vaddr(e)))
        })
    }

    /// The 8-byte word at file offset `at`.
    pub(super) fn word(&self, at: u64) -> Option<u64> {
        self.data
            .get(at as usize..(at as usize).checked_add(8)?)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
    }

    /// The scan for references no relocation describes, into the
    /// `together` ranges (searched for at once) or any other; `gpu`: the
    /// file ranges of containers in other sections ([`refs::File::gpu`]).
    pub(super) fn scan(&self, together: &[(u64, u64)], gpu: &[(u64, u64)]) -> refs::Scan<'a> {
        let file = refs::File {
            data: self.data,
            shdrs: self.shdrs,
            endian: self.endian,
            machine: self.machine,
            fixed: self.kind == elf::ET_EXEC,
            index: self.index,
            gpu: gpu.to_vec(),
            names: self.names,
        };
        refs::Scan::new(file, together)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_tables_that_share_bytes_are_named() {
        // As linkers lay them out: the header, the program headers after it,
        // the section headers at the end.
        assert_eq!(shared_bytes(&[(0, 64), (64, 560), (90240, 1792)]), None);
        // Touching, not overlapping.
        assert_eq!(shared_bytes(&[(0, 64), (64, 56), (120, 64)]), None);
        // No program header table (an object): nothing to share.
        assert_eq!(shared_bytes(&[(0, 64), (0, 0), (1000, 640)]), None);
        // A fuzzed file: the program header table begins inside the header.
        let why = shared_bytes(&[(0, 64), (8, 560), (90240, 1792)]).unwrap();
        assert!(
            why.starts_with("the ELF header (0x0, 64 bytes) and the program header table (0x8"),
            "{why}"
        );
        // The section header table over the program header table's end.
        let why = shared_bytes(&[(0, 64), (64, 560), (600, 640)]).unwrap();
        assert!(
            why.starts_with("the program header table") && why.contains("section header table"),
            "{why}"
        );
        // Over the header; and an offset near the end of the address space.
        assert!(shared_bytes(&[(0, 64), (64, 56), (0x20, 64)]).is_some());
        assert_eq!(shared_bytes(&[(0, 64), (u64::MAX - 8, 56), (64, 64)]), None);
        assert!(shared_bytes(&[(0, 64), (u64::MAX - 8, 56), (u64::MAX - 4, 64)]).is_some());
    }
}
