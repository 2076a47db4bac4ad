//! OpenMP binary descriptors in files of the clang-offload-wrapper generation
//! (LLVM ≤ 14, AOMP: seed 000, "Clang Offload Wrapper").
//!
//! Those files have no offload section: the wrapper emitted each device image
//! as a constant (in `.rodata` once linked), an array of `__tgt_device_image`
//! and one `__tgt_bin_desc` (in `.data.rel.ro`), and the host entries in
//! `omp_offloading_entries` (`.omp_offloading_entries` for AOMP). The
//! descriptor is found from the file alone: its host-entries pointers are
//! the bounds of the entries section. In a position-independent file the
//! pointers are zero in the file's bytes and filled at load time by
//! `R_*_RELATIVE` dynamic relocations, whose addends are the addresses; they
//! are read from there.

use std::collections::HashMap;

use object::read::elf::{ElfFile64, FileHeader, ProgramHeader};
use object::{elf, Endianness, Object, ObjectSection, RelocationFlags};

use crate::container::Container;
use crate::error::{Error, ErrorKind, Result};
use crate::limits::Limits;
use crate::registration::{offload_arch_list, BinaryDescriptor, DeviceImage, DEVICE_IMAGE_SIZE};

/// Sections that hold the host entry table a descriptor points at.
pub(super) const ENTRY_SECTIONS: &[&str] = &["omp_offloading_entries", ".omp_offloading_entries"];
/// Sections a descriptor and its image array are written to: `.data.rel.ro`
/// in a position-independent file, `.rodata` in a position-dependent one
/// (`-fno-pic -no-pie`: the pointers are constants in the file), `.data`
/// where AOMP puts them.
const DATA_SECTIONS: &[&str] = &[".data.rel.ro", ".rodata", ".data"];

/// A 64-bit ELF file's bytes as its loaded image would hold them at an
/// address: file bytes through the `PT_LOAD` segments, with relative dynamic
/// relocations applied.
struct Loaded<'a> {
    data: &'a [u8],
    /// (virtual address, file offset, size in the file) of each `PT_LOAD`.
    segments: Vec<(u64, u64, u64)>,
    /// Address → addend of the `R_X86_64_RELATIVE` / `R_AARCH64_RELATIVE`
    /// relocations (llvm/BinaryFormat/ELFRelocs).
    relative: HashMap<u64, u64>,
}

impl<'a> Loaded<'a> {
    fn new(elf: &ElfFile64<'a, Endianness>, data: &'a [u8]) -> Loaded<'a> {
        let endian = elf.endian();
        let segments = elf
            .elf_program_headers()
            .iter()
            .filter(|p| p.p_type(endian) == elf::PT_LOAD)
            .map(|p| (p.p_vaddr(endian), p.p_offset(endian), p.p_filesz(endian)))
            .collect();
        let relative = elf
            .dynamic_relocations()
            .into_iter()
            .flatten()
            .filter(|(_, r)| {
                matches!(
                    r.flags(),
                    RelocationFlags::Elf {
                        r_type: elf::R_X86_64_RELATIVE | elf::R_AARCH64_RELATIVE
                    }
                )
            })
            .map(|(at, r)| (at, r.addend() as u64))
            .collect();
        Loaded {
            data,
            segments,
            relative,
        }
    }

    /// The file offset of address `addr`, when `len` bytes from it are in the file.
    fn file_offset(&self, addr: u64, len: u64) -> Option<u64> {
        self.segments.iter().find_map(|&(vaddr, offset, size)| {
            let rel = addr.checked_sub(vaddr)?;
            (rel.checked_add(len)? <= size).then(|| offset.checked_add(rel))?
        })
    }

    /// The `len` bytes at `addr` with relative relocations applied to every
    /// 8-byte word they cover.
    fn read(&self, addr: u64, len: u64) -> Option<Vec<u8>> {
        let at = usize::try_from(self.file_offset(addr, len)?).ok()?;
        let mut bytes = self
            .data
            .get(at..at.checked_add(usize::try_from(len).ok()?)?)?
            .to_vec();
        for word in (0..len).step_by(8) {
            if let Some(value) = self.relative.get(&addr.wrapping_add(word)) {
                let w = word as usize;
                if let Some(slot) = bytes.get_mut(w..w + 8) {
                    slot.copy_from_slice(&value.to_le_bytes());
                }
            }
        }
        Some(bytes)
    }

    /// The pointer-sized word at `addr`.
    fn word(&self, addr: u64) -> Option<u64> {
        let b = self.read(addr, 8)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }
}

/// The images of the binary descriptor in the linked ELF file `data`, as
/// one container (its images where they lie in the file), or `None` when the
/// file has no host entry table or no descriptor points at it. A descriptor
/// that points at images outside the file is an error naming it.
pub(crate) fn find<'a>(data: &'a [u8], limits: &Limits) -> Option<Result<Container<'a>>> {
    let elf = ElfFile64::<Endianness>::parse(data).ok()?;
    if elf.elf_header().e_type(elf.endian()) == elf::ET_REL {
        return None;
    }
    let entries = elf
        .sections()
        .find(|s| s.name().is_ok_and(|n| ENTRY_SECTIONS.contains(&n)))?;
    let (begin, end) = (
        entries.address(),
        entries.address().wrapping_add(entries.size()),
    );
    let loaded = Loaded::new(&elf, data);
    let names: Vec<String> = elf
        .section_by_name(".offload_arch_list")
        .and_then(|s| s.data().ok())
        .map(|d| {
            offload_arch_list(d)
                .filter_map(|(_, s)| s.ok().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    // The descriptor: {i32 count, ptr images, ptr entries begin, ptr entries
    // end}. Each `__tgt_device_image` {ptr start, ptr end, ptr entries begin,
    // ptr entries end} ends the same way: the descriptor is the candidate
    // whose image array's first record points at the same entries.
    let at_offset = |a: u64, offset| a.checked_add(offset).and_then(|a| loaded.word(a));
    let points_at_entries =
        |a: u64| at_offset(a, 16) == Some(begin) && at_offset(a, 24) == Some(end);
    let at = elf
        .sections()
        .filter(|s| s.name().is_ok_and(|n| DATA_SECTIONS.contains(&n)))
        .flat_map(|s| {
            // Only the part of the section the file holds: its declared
            // size is the file's word, and 2^52 bytes made this a search of
            // 2^49 addresses (a fuzzer's find).
            let in_file = s.file_range().map_or(0, |(offset, size)| {
                size.min((data.len() as u64).saturating_sub(offset))
            });
            let start = s.address().checked_next_multiple_of(8).unwrap_or(u64::MAX);
            (start..s.address().saturating_add(in_file).saturating_sub(31)).step_by(8)
        })
        .find(|&a| {
            points_at_entries(a)
                && loaded.word(a).is_some_and(|count| {
                    let count = count as u32;
                    count == 0
                        || (u64::from(count) <= limits.max_entries
                            && at_offset(a, 8).is_some_and(points_at_entries))
                })
        })?;
    Some(images(&loaded, at, &names, limits))
}

fn images<'a>(
    loaded: &Loaded<'a>,
    at: u64,
    names: &[String],
    limits: &Limits,
) -> Result<Container<'a>> {
    let file_at = loaded.file_offset(at, 32).unwrap_or(0);
    let outside = |what| {
        Error::new(
            file_at,
            ErrorKind::Malformed {
                what,
                why: "points outside the file's loaded segments",
            },
        )
    };
    let bytes = loaded.read(at, 32).ok_or(outside("__tgt_bin_desc"))?;
    let max = u32::try_from(limits.max_entries).unwrap_or(u32::MAX);
    let desc = BinaryDescriptor::parse(&bytes, max).map_err(|e| e.at(file_at))?;
    let count = u64::from(desc.image_count);
    let array = loaded
        .read(desc.images, count * DEVICE_IMAGE_SIZE)
        .ok_or(outside("__tgt_device_image array"))?;
    let mut found = Vec::new();
    for i in 0..count {
        let record = &array[(i * DEVICE_IMAGE_SIZE) as usize..];
        let image = DeviceImage::parse(record).map_err(|e| e.at(file_at))?.image;
        let offset = loaded
            .file_offset(image.start, image.len())
            .ok_or(outside("device image"))?;
        found.push((offset, image.len(), names.get(i as usize).cloned()));
    }
    Container::from_descriptor(loaded.data, &found, limits)
}
