//! Containers found by what they are among other bytes: libraries that keep
//! GPU code outside the sections named for it and load it themselves, as
//! data (`cuModuleLoadData` of a fat binary, `hipModuleLoadData` of a
//! bundle), or register it from a section of their own. Seen in PyPI's CUDA
//! libraries: cuFFT keeps 24,453 fat binaries in `.ldata` (CUDA 13: `.data`),
//! cuBLASLt 469 in `.cask_resource`, NCCL 129 in a linked `__nv_relfatbin`
//! that its `.nvFatBinSegment` wrappers point to.
//!
//! Every byte-holding section that is neither code, nor a table the linker
//! or loader reads (symbols, strings, relocations, hashes, notes, dynamic),
//! nor debug information, nor already an offload section, is searched for the
//! four container magics. A match counts only when the whole container
//! parses: its header, and every entry of its table within its bytes and the
//! [`Limits`] (a random 4-byte match does not become a container). The
//! search resumes after each container found, so the bytes of the
//! containers themselves are never searched, only their headers read; and
//! overlapping section headers are searched once.

use object::elf::{self, FileHeader64};
use object::read::elf::{FileHeader, SectionHeader};
use object::Endianness;

use super::{section_role, OffloadSection, SectionRole};
use crate::container::{next_outside, Container, Format};
use crate::limits::Limits;

/// Sections of these types hold what the linker and the dynamic loader
/// read, never data a program loads as GPU code.
const STRUCTURAL: &[u32] = &[
    elf::SHT_NULL,
    elf::SHT_NOBITS,
    elf::SHT_SYMTAB,
    elf::SHT_DYNSYM,
    elf::SHT_STRTAB,
    elf::SHT_RELA,
    elf::SHT_REL,
    elf::SHT_RELR,
    elf::SHT_HASH,
    elf::SHT_GNU_HASH,
    elf::SHT_DYNAMIC,
    elf::SHT_NOTE,
    elf::SHT_GROUP,
    elf::SHT_SYMTAB_SHNDX,
    elf::SHT_INIT_ARRAY,
    elf::SHT_FINI_ARRAY,
    elf::SHT_PREINIT_ARRAY,
    elf::SHT_GNU_VERSYM,
    elf::SHT_GNU_VERDEF,
    elf::SHT_GNU_VERNEED,
];

/// Whether a section of type `sh_type` with `flags` is searched: data, not
/// code nor a table the linker or loader reads.
pub(super) fn searched(sh_type: u32, flags: u64) -> bool {
    !STRUCTURAL.contains(&sh_type) && flags & u64::from(elf::SHF_EXECINSTR) == 0
}

/// A file with a searched section this large may hold GPU code as data,
/// whatever its section names say: the quick look of a directory scan maps
/// it (CUDA 13's cuFFT names no offload section, and keeps 216 MB of fat
/// binaries in `.data`); smaller data is searched in files mapped anyway,
/// and in every file named. At 1 MiB, the scan of Debian's
/// `/usr/lib/x86_64-linux-gnu` mapped and searched dozens of libraries' data
/// (ICU's, LLVM's) and took 40 times as long.
pub(super) const LARGE_DATA: u64 = 64 << 20;

/// The smallest container: an NVIDIA fat binary's 16-byte header.
const SMALLEST: u64 = 16;

/// The sections of the ELF file `data` (at `base` in the file) that may hold
/// containers among other bytes, as [`SectionRole::Embedded`] sections, in
/// file order, each range searched once (a section overlapping one before it
/// keeps only its bytes past it). Offload sections, known by name, are not
/// among them.
pub(super) fn sections(data: &[u8], base: u64, member: Option<&str>) -> Vec<OffloadSection> {
    let Ok(header) = FileHeader64::<Endianness>::parse(data) else {
        return Vec::new();
    };
    let Ok(endian) = header.endian() else {
        return Vec::new();
    };
    let (Ok(table), Ok(names_index)) =
        (header.sections(endian, data), header.shstrndx(endian, data))
    else {
        return Vec::new();
    };
    let names = table
        .section(object::SectionIndex(names_index as usize))
        .and_then(|h| h.data(endian, data))
        .unwrap_or_default();
    let mut out: Vec<OffloadSection> = Vec::new();
    for s in table.iter() {
        let sh_type = s.sh_type(endian);
        if !searched(sh_type, s.sh_flags(endian))
            || section_role(names, s.sh_name(endian), sh_type).is_some()
        {
            continue;
        }
        let name = table.section_name(endian, s).unwrap_or_default();
        if name.starts_with(b".debug") || name.starts_with(b".zdebug") {
            continue;
        }
        let Some((offset, size)) = s.file_range(endian) else {
            continue;
        };
        let Some(end) = offset.checked_add(size).filter(|&e| e <= data.len() as u64) else {
            continue;
        };
        if size >= SMALLEST {
            out.push(OffloadSection {
                member: member.map(Into::into),
                name: String::from_utf8_lossy(name).into_owned(),
                role: SectionRole::Embedded,
                file_offset: base + offset,
                size: end - offset,
                address: s.sh_addr(endian),
            });
        }
    }
    out.sort_by_key(|s| s.file_offset);
    searched_once(out)
}

/// `sections` (sorted by offset) with each byte in one of them only: a
/// section that starts inside an earlier one keeps its part past it, or is
/// dropped. Bounds the search by the file's length, whatever the headers say.
fn searched_once(sections: Vec<OffloadSection>) -> Vec<OffloadSection> {
    let mut out: Vec<OffloadSection> = Vec::with_capacity(sections.len());
    let mut covered = 0u64;
    for mut s in sections {
        let end = s.file_offset + s.size;
        if end <= covered {
            continue;
        }
        if s.file_offset < covered {
            s.address = s.address.saturating_add(covered - s.file_offset);
            s.size = end - covered;
            s.file_offset = covered;
        }
        covered = end;
        if s.size >= SMALLEST {
            out.push(s);
        }
    }
    out
}

/// Every whole container in `bytes`, with offsets relative to `bytes`.
///
/// The four magics are searched for together, in one pass (Aho-Corasick,
/// SIMD where the processor has it), from one container's end to the next
/// match: the bytes of a container found are not searched. cuFFT's 280 MB
/// `.ldata` is so searched in its gaps only. `holes` (ranges of `bytes`, in
/// order, apart, known to read as zeros: a sparse file's holes) are passed
/// over, not read: no magic has a zero byte, so none starts or ends in
/// one. Where `slim` empties containers among host data (cuBLASLt's
/// `.cask_resource`), they are holes: reading them back page by page had
/// the kernel make 28,000 pages of zeros, a third of a second.
pub(super) fn find<'a>(
    bytes: &'a [u8],
    holes: &[(usize, usize)],
    limits: &Limits,
) -> Vec<Container<'a>> {
    let mut found = Vec::new();
    let mut pos = 0usize;
    // What failed parses may read in all: a few times the bytes. Within it,
    // the search resumes right after a failed match, so a truncated copy
    // does not hide the whole container after it; past it, beyond what
    // each failed parse read, so bytes full of magics whose tables run on
    // are not read once per magic (quadratic in the section, as `scan`
    // guards against).
    let mut budget = bytes.len().saturating_mul(4).max(1 << 20);
    while pos < bytes.len() {
        let Some(start) = next_outside(bytes, pos, holes) else {
            break;
        };
        pos = match whole(&bytes[start..], limits) {
            Ok(mut c) => {
                c.rebase(start as u64);
                let end = start + c.len() as usize;
                found.push(c);
                end
            }
            Err(read) => {
                budget = budget.saturating_sub(read);
                let skip = if budget > 0 { 1 } else { read.max(1) };
                start.saturating_add(skip).min(bytes.len())
            }
        };
    }
    found
}

/// The container at the start of `bytes`, if all of it reads: its header and
/// table, with at least one image; or an empty NVIDIA fat binary (16 bytes
/// no other data has by chance: what `slim` leaves of a module no device
/// loads). Else how many bytes the attempt read (where its error is).
fn whole<'a>(bytes: &'a [u8], limits: &Limits) -> Result<Container<'a>, usize> {
    let c = Container::parse(bytes, limits)
        .map_err(|e| usize::try_from(e.offset).unwrap_or(usize::MAX))?;
    let fits = c.len() >= SMALLEST && c.len() <= bytes.len() as u64;
    let empty_fatbin = c.format() == Format::NvFatbin && c.len() == SMALLEST;
    if fits && (!c.images().is_empty() || empty_fatbin) {
        Ok(c)
    } else {
        Err(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::magic;

    /// A one-entry fat binary holding `payload` as a cubin for sm_`sm`.
    fn fatbin(sm: u32, payload: &[u8]) -> Vec<u8> {
        let mut entry = Vec::new();
        entry.extend(2u16.to_le_bytes()); // kind: ELF
        entry.extend(0x0101u16.to_le_bytes()); // version
        entry.extend(64u32.to_le_bytes()); // header size
        entry.extend((payload.len() as u64).to_le_bytes()); // padded size
        entry.extend((payload.len() as u32).to_le_bytes()); // stored size
        entry.extend(0u32.to_le_bytes()); // no options block
        entry.extend([0, 0, 8, 0]); // code version: u16 minor 0, u16 major 8
        entry.extend(sm.to_le_bytes());
        entry.extend([0u8; 8]); // object name offset, length
        entry.extend(0u64.to_le_bytes()); // flags: not compressed
        entry.extend(0u64.to_le_bytes());
        entry.extend(0u64.to_le_bytes()); // uncompressed size
        entry.resize(64, 0);
        entry.extend(payload);
        let mut out = magic::NV_FATBIN.to_vec();
        out.extend(1u16.to_le_bytes());
        out.extend(16u16.to_le_bytes());
        out.extend((entry.len() as u64).to_le_bytes());
        out.extend(entry);
        out
    }

    #[test]
    fn containers_among_other_bytes_are_found_and_stray_magics_are_not() {
        let one = fatbin(80, &[0xaa; 32]);
        let two = fatbin(90, &[0xbb; 48]);
        let mut data = b"host data \x50\xed\x55\xba and more".to_vec();
        let at_one = data.len();
        data.extend(&one);
        data.extend(b"\x50\xed\x55\xba\x01\x00\x10\x00\xff\xff\xff\xff\xff\xff\xff\x7f");
        data.extend(b"CCOB__CLANG_OFFLOAD_BUNDLE__\x10\xff\x10\xad");
        let at_two = data.len();
        data.extend(&two);
        data.extend(b"tail");
        let found = find(&data, &[], &Limits::default());
        let at: Vec<(u64, u64)> = found.iter().map(|c| (c.offset(), c.len())).collect();
        assert_eq!(
            at,
            [
                (at_one as u64, one.len() as u64),
                (at_two as u64, two.len() as u64)
            ]
        );
        assert_eq!(found[1].images()[0].arch.to_string(), "sm_90");
    }

    /// The search over gaps finds what trying every offset finds, on
    /// bytes full of the magics' first bytes, stray magics and containers.
    #[test]
    fn the_search_finds_what_trying_every_offset_finds() {
        let limits = Limits::default();
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let pieces: [&[u8]; 6] = [
            magic::NV_FATBIN,
            magic::BUNDLE,
            magic::COMPRESSED_BUNDLE,
            magic::OFFLOAD_BINARY,
            b"\x50\xed\x55",
            b"_CC\x10",
        ];
        for round in 0..50 {
            let mut data = Vec::new();
            while data.len() < 20_000 {
                match next() % 8 {
                    0 => data.extend(fatbin(50 + (next() % 60) as u32, &[round as u8; 24])),
                    1..=3 => data.extend(pieces[(next() % 6) as usize]),
                    _ => data.extend((0..next() % 64).map(|_| next() as u8)),
                }
            }
            let mut naive = Vec::new();
            let mut pos = 0;
            while pos < data.len() {
                let here = &data[pos..];
                match pieces[..4]
                    .iter()
                    .any(|m| here.starts_with(m))
                    .then(|| whole(here, &limits))
                {
                    Some(Ok(c)) => {
                        naive.push((pos as u64, c.len()));
                        pos += c.len() as usize;
                    }
                    _ => pos += 1,
                }
            }
            let fast: Vec<(u64, u64)> = find(&data, &[], &limits)
                .iter()
                .map(|c| (c.offset(), c.len()))
                .collect();
            assert!(!naive.is_empty());
            assert_eq!(fast, naive, "round {round}");
        }
    }

    /// Passing over holes finds what reading them finds, wherever the
    /// holes start and end among runs of zeros; and a range listed as a
    /// hole is not read: a container there (which a real hole cannot hold)
    /// is not found.
    #[test]
    fn holes_are_passed_over_not_read() {
        let limits = Limits::default();
        let mut data = b"host data".to_vec();
        for (i, gap) in [70_000usize, 5, 4096, 130_001].into_iter().enumerate() {
            data.extend(fatbin(80 + i as u32, &[0xee; 40]));
            data.resize(data.len() + gap, 0);
            data.extend(b"\x50\xed\x55\xba stray");
        }
        let read = |holes: &[(usize, usize)]| -> Vec<(u64, u64)> {
            find(&data, holes, &limits)
                .iter()
                .map(|c| (c.offset(), c.len()))
                .collect()
        };
        let plain = read(&[]);
        assert_eq!(plain.len(), 4);
        let mut runs = Vec::new();
        let mut at = 0;
        while at < data.len() {
            let len = data[at..].iter().take_while(|&&b| b == 0).count();
            if len > 0 {
                runs.push((at, at + len));
            }
            at += len.max(1);
        }
        let inner: Vec<(usize, usize)> = runs
            .iter()
            .filter(|(a, b)| b - a > 2)
            .map(|&(a, b)| (a + 1, b - 1))
            .collect();
        assert_eq!(read(&runs), plain);
        assert_eq!(read(&inner), plain);
        let (second, len) = (plain[1].0 as usize, plain[1].1 as usize);
        assert_eq!(
            read(&[(second - 1, second + len)]),
            [plain[0], plain[2], plain[3]]
        );
    }

    /// A truncated copy (its header promising bytes that are another
    /// container's) does not hide the whole container after it.
    #[test]
    fn a_truncated_copy_does_not_hide_the_container_after_it() {
        let big = fatbin(80, &[0xcc; 1024]);
        let whole_one = fatbin(90, &[0xdd; 32]);
        let mut data = big[..40].to_vec();
        let at = data.len();
        data.extend(&whole_one);
        let found = find(&data, &[], &Limits::default());
        let at_len: Vec<(u64, u64)> = found.iter().map(|c| (c.offset(), c.len())).collect();
        assert_eq!(at_len, [(at as u64, whole_one.len() as u64)]);
    }

    #[test]
    fn overlapping_sections_are_searched_once() {
        let s = |file_offset, size| OffloadSection {
            member: None,
            name: String::new(),
            role: SectionRole::Embedded,
            file_offset,
            size,
            address: 0x1000 + file_offset,
        };
        let kept = searched_once(vec![s(0, 100), s(0, 100), s(50, 100), s(60, 20), s(200, 8)]);
        let ranges: Vec<(u64, u64, u64)> = kept
            .iter()
            .map(|s| (s.file_offset, s.size, s.address))
            .collect();
        assert_eq!(ranges, [(0, 100, 0x1000), (100, 50, 0x1064)]);
    }
}
