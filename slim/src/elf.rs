//! Compacting an ELF file around one rewritten offload section: the kept
//! containers packed from the section's start, the bytes they no longer
//! need given no file space, every other address left where it was.
//!
//! A narrow patcher over `object`'s ELF types rather than `object`'s
//! `build::elf` editor: the editor lays a file out anew (new offsets, new
//! segment layout), while what must hold here is the opposite, that every
//! address outside the section stays and every byte outside it is the
//! original's but for the fields that point into it. So the file is written
//! as the original's bytes, with patches, around the section's new bytes:
//!
//! - Shared objects and executables: the section's segment ends with the
//!   kept containers; what followed the section in that segment (in every
//!   real library measured, `.eh_frame_hdr` and `.eh_frame`; in cuSPARSE's,
//!   `.text` too) becomes a segment of its own at the same addresses, and
//!   everything after it in the file moves back by the removed bytes rounded
//!   down to the segments' alignment (so offsets stay congruent to
//!   addresses). The new program header goes after the table, which stays
//!   right after the ELF header where binutils and elfutils expect it: when
//!   sections follow the table there, those that only headers find (notes,
//!   `.interp`, the dynamic loader's tables) move after the kept containers,
//!   and the section headers are renumbered in address order (module
//!   `room`).
//! - Relocatable objects: the sections after it move back, nothing else.
//!
//! What points into the section is rewritten: relocations of every type
//! the loader applies (`R_*_RELATIVE` addends and the words the linker also
//! wrote in place, ld.bfd does, lld does not; symbol + addend against a
//! symbol of the section), RELR words, relocations of objects against the
//! section's symbols, the fat-binary wrappers (`.hipFatBinSegment`,
//! `.nvFatBinSegment`, whose pointers a non-PIE executable holds with no
//! relocation), symbols, section and program headers. What refers to the
//! section without a relocation (module `refs`: code, a position-dependent
//! file's data, other sections' symbols), a pointer into the middle of a
//! container that was rewritten, a segment layout this does not know, or a
//! relocation it does not rewrite makes the file [`Unsafe`], never silently
//! wrong.

use std::collections::BTreeMap;

use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, Rela, SectionHeader, Sym};
use object::LittleEndian as LE;
use offload_loader::registration::FatbinWrapper;

use crate::pieces::{Output, Piece};
use crate::{refs, room};

type Header = elf::FileHeader64<LE>;

/// Why a file cannot be compacted safely.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot be compacted safely: {why}")]
pub struct Unsafe {
    /// Why.
    pub why: String,
    /// Whether rewriting the section's containers where they stand (nothing
    /// kept moves inside a bundle, nothing starts elsewhere) is still safe:
    /// false when something is known to point inside what would change.
    pub in_place: bool,
}

impl Unsafe {
    /// A layout that cannot be compacted, for `why`.
    pub(crate) fn new(why: impl Into<String>) -> Unsafe {
        Unsafe {
            why: why.into(),
            in_place: true,
        }
    }
}

fn unsafe_(why: impl Into<String>) -> Unsafe {
    Unsafe::new(why)
}

/// One container of the section: where it was, and its new bytes.
#[derive(Debug)]
pub struct Placed<'a> {
    /// Offset from the section's start.
    pub old: u64,
    /// Its old length.
    pub old_len: u64,
    /// Its new bytes (empty: removed).
    pub output: Output<'a>,
    /// Whether the new bytes are the old ones (so a pointer anywhere into it
    /// moves with it).
    pub same: bool,
}

/// Where each container went, in section-relative offsets.
struct Map {
    /// (old start, old length, new start, new length, same bytes).
    moves: Vec<(u64, u64, u64, u64, bool)>,
    /// (old start, old length) of the containers that go.
    removed: Vec<(u64, u64)>,
    old_size: u64,
    new_size: u64,
    /// Whether another section starts where this one ends, so that a pointer
    /// to the end could as well be a pointer to that section's start.
    shared_end: bool,
}

/// What a pointer is known to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Point {
    /// The start of something (an image, a symbol).
    Start,
    /// The end of something (an image's end).
    End,
    /// Either: a boundary between two containers must move the same way.
    Unknown,
}

impl Map {
    /// The new offset of old section offset `at`: a container's start or end,
    /// anywhere in a container kept as it was, or the section's end. `None`
    /// for a place that has no new one (inside a rewritten container, in or at
    /// the start of one that goes), or a boundary whose two readings differ.
    fn map(&self, at: u64, point: Point) -> Option<u64> {
        let start = self.moves.iter().find(|m| m.0 == at).map(|m| m.2);
        let end = self
            .moves
            .iter()
            .find(|m| m.0.checked_add(m.1) == Some(at))
            .map(|m| m.2 + m.3)
            .or((at == self.old_size && !self.shared_end).then_some(self.new_size));
        let inside = self
            .moves
            .iter()
            .find(|m| m.4 && at > m.0 && at - m.0 < m.1)
            .map(|m| m.2 + (at - m.0));
        let removed_start = self.removed.iter().any(|r| r.0 == at);
        match point {
            Point::Start if removed_start => None,
            Point::Start => start.or(inside),
            Point::End => end.or(inside),
            Point::Unknown => match (start, end) {
                (Some(s), Some(e)) if s != e => None,
                (Some(s), _) => Some(s),
                (None, _) if removed_start => None,
                (None, Some(e)) => Some(e),
                (None, None) => inside,
            },
        }
    }
}

impl Map {
    /// Whether section offset `at` means the same place when the section is
    /// rewritten where it stands (holes): a kept container's start or end,
    /// a place inside one kept as it was, or the section's bounds.
    fn stays_in_place(&self, at: u64) -> bool {
        at == 0
            || at == self.old_size
            || self
                .moves
                .iter()
                .any(|m| at == m.0 || at == m.0 + m.1 || (m.4 && at > m.0 && at - m.0 < m.1))
    }
}

/// Patches to the original's bytes, by original file offset.
#[derive(Default)]
struct Patches(BTreeMap<u64, Vec<u8>>);

impl Patches {
    fn put(&mut self, at: u64, bytes: &[u8]) {
        self.0.insert(at, bytes.to_vec());
    }
    fn u64(&mut self, at: u64, v: u64) {
        self.put(at, &v.to_le_bytes());
    }
    fn u16(&mut self, at: u64, v: u16) {
        self.put(at, &v.to_le_bytes());
    }
    /// Whether a patch covers file offset `at`.
    fn covers(&self, at: u64) -> bool {
        self.0
            .range(..=at)
            .next_back()
            .is_some_and(|(&p, b)| at - p < b.len() as u64)
    }

    /// `data[range]` as pieces with the patches inside it applied (where two
    /// overlap, the one that starts first wins; each byte is written once).
    fn copy<'a>(&self, data: &'a [u8], start: u64, end: u64, out: &mut Output<'a>) {
        let mut at = start;
        for (&p, bytes) in self.0.range(start..end) {
            let p_end = p.saturating_add(bytes.len() as u64).min(end);
            if p > at {
                out.push(Piece::Copy(&data[at as usize..p as usize]));
                at = p;
            }
            if p_end > at {
                out.push(Piece::Owned(
                    bytes[(at - p) as usize..(p_end - p) as usize].to_vec(),
                ));
                at = p_end;
            }
        }
        if end > at {
            out.push(Piece::Copy(&data[at as usize..end as usize]));
        }
    }
}

const PHDR_SIZE: u64 = 56;
/// The page size compaction and holes are measured in.
pub(crate) const PAGE: u64 = 4096;

fn relative_type(machine: u16) -> Option<u32> {
    match machine {
        elf::EM_X86_64 => Some(elf::R_X86_64_RELATIVE),
        elf::EM_AARCH64 => Some(elf::R_AARCH64_RELATIVE),
        _ => None,
    }
}

/// Whether relocation `ty` of `machine` writes S + A to a 64-bit word (so
/// that a new addend keeps its target when the symbol moves).
fn absolute_type(machine: u16, ty: u32) -> bool {
    match machine {
        elf::EM_X86_64 => matches!(
            ty,
            elf::R_X86_64_64 | elf::R_X86_64_GLOB_DAT | elf::R_X86_64_JUMP_SLOT
        ),
        elf::EM_AARCH64 => matches!(
            ty,
            elf::R_AARCH64_ABS64 | elf::R_AARCH64_GLOB_DAT | elf::R_AARCH64_JUMP_SLOT
        ),
        _ => false,
    }
}

/// A relocation (its entry at file offset `at`, applied at address
/// `place`) whose target `target` (symbol value + addend, the symbol's new
/// value `new_value`; 0 for a relative one) may lie in the section: its
/// addend made `new target - new_value`, and the word the linker also wrote
/// at `place` (ld.bfd does, lld does not) when it held the old target.
/// Whether it pointed into the section.
#[allow(clippy::too_many_arguments)]
fn relocate(
    patches: &mut Patches,
    at: u64,
    place: u64,
    new_value: u64,
    target: u64,
    remap: &dyn Fn(u64, u64) -> Result<Option<u64>, Unsafe>,
    addr: u64,
    file_offset: &dyn Fn(u64) -> Option<u64>,
    word: &dyn Fn(u64) -> Option<u64>,
) -> Result<bool, Unsafe> {
    let Some(new) = remap(target, addr)? else {
        return Ok(false);
    };
    patches.u64(at + 16, new.wrapping_sub(new_value));
    if let Some(w) = file_offset(place) {
        if word(w) == Some(target) {
            patches.u64(w, new);
        }
    }
    Ok(true)
}

/// `data` (a 64-bit little-endian ELF file) with its section of `size`
/// bytes at file `offset` replaced by `containers`, packed from its start at
/// the section's alignment; `Ok(None)` when that frees no whole page (nothing
/// to gain).
pub fn compact<'a>(
    data: &'a [u8],
    offset: u64,
    size: u64,
    containers: &mut [Placed<'a>],
) -> Result<Option<Output<'a>>, Unsafe> {
    let bad = |e: object::Error| unsafe_(format!("its ELF headers cannot be read: {e}"));
    let header = Header::parse(data).map_err(bad)?;
    let endian = header.endian().map_err(bad)?;
    let machine = header.e_machine(endian);
    let kind = header.e_type(endian);
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
    let addr = section.sh_addr(endian);
    let align = section.sh_addralign(endian);
    let alloc = section.sh_flags(endian) & u64::from(elf::SHF_ALLOC) != 0;

    // The new section: containers packed, each at the section's alignment
    // (its bytes are taken from `containers` only once the file is known
    // to be safe to compact: see [`packed`]).
    let align = align.clamp(1, PAGE);
    let mut new_size = 0u64;
    let mut moves = Vec::new();
    let mut removed: Vec<(u64, u64)> = Vec::new();
    for c in containers.iter() {
        if c.output.is_empty() {
            removed.push((c.old, c.old_len));
            continue;
        }
        let at = new_size.next_multiple_of(align);
        moves.push((c.old, c.old_len, at, c.output.len(), c.same));
        new_size = at + c.output.len();
    }
    if new_size >= size {
        return Ok(None);
    }
    let shared_end = kind != elf::ET_REL
        && shdrs.iter().enumerate().any(|(i, s)| {
            i != index
                && s.sh_flags(endian) & u64::from(elf::SHF_ALLOC) != 0
                && s.sh_size(endian) > 0
                && Some(s.sh_addr(endian)) == addr.checked_add(size)
        });
    let map = Map {
        moves,
        removed: removed.clone(),
        old_size: size,
        new_size,
        shared_end,
    };
    // Whether section offset `at` lies in a container that goes.
    let gone = |at: u64| {
        removed
            .iter()
            .any(|&(old, len)| at >= old && at - old < len)
    };
    // An address (or section offset, for objects) into the section, moved.
    let remap_as = |value: u64, base: u64, point: Point| -> Result<Option<u64>, Unsafe> {
        if value < base || value - base > size {
            return Ok(None);
        }
        // The section's end is where the next section starts: a pointer of
        // unknown kind there is that section's, which keeps its address (a
        // function at the start of `.text` right after `.nv_fatbin`).
        if value - base == size && shared_end && point == Point::Unknown {
            return Ok(None);
        }
        map.map(value - base, point)
            .map(|v| Some(base + v))
            .ok_or_else(|| Unsafe {
                why: format!(
                    "something points to {value:#x}, which has no place in the result (inside a rewritten container, in one that goes, or where two places meet)"
                ),
                in_place: false,
            })
    };
    let remap = |value: u64, base: u64| remap_as(value, base, Point::Unknown);

    let mut patches = Patches::default();
    let mut out = Output::default();
    let shoff = header.e_shoff(endian);
    let shentsize = u64::from(header.e_shentsize(endian));

    if kind == elf::ET_REL || !alloc {
        // Only file offsets move: the sections after this one, by the freed
        // bytes rounded down to their largest alignment.
        let cut = offset + size;
        let later_align = shdrs
            .iter()
            .filter(|s| s.sh_offset(endian) >= cut && s.sh_type(endian) != elf::SHT_NOBITS)
            .map(|s| s.sh_addralign(endian).max(1))
            .chain([8])
            .max()
            .unwrap_or(8);
        if phdrs.iter().any(|p| {
            p.p_type(endian) == elf::PT_LOAD
                && p.p_offset(endian).saturating_add(p.p_filesz(endian)) > cut
        }) {
            return Err(unsafe_(
                "loaded segments follow a section that is not loaded",
            ));
        }
        let shift = ((size - new_size) / later_align) * later_align;
        if shift == 0 {
            return Ok(None);
        }
        patch_sections(
            &mut patches,
            shdrs,
            endian,
            shoff,
            shentsize,
            index,
            new_size,
            cut,
            shift,
        )?;
        // Relocations and symbols of an object: section-relative.
        let base = if kind == elf::ET_REL { 0 } else { addr };
        patch_symbols(
            &mut patches,
            data,
            shdrs,
            endian,
            index,
            base,
            &remap_as,
            size,
            new_size,
            &gone,
        )?;
        if kind == elf::ET_REL {
            patch_object_relocations(&mut patches, data, shdrs, endian, index, &remap_as)?;
        }
        patches.copy(data, 0, offset, &mut out);
        out.extend(packed(containers, align));
        out.pad_to(cut - shift);
        patches.copy(data, cut, data.len() as u64, &mut out);
        return Ok(Some(out));
    }

    // A shared object or executable: the segment that holds the section.
    let load = phdrs
        .iter()
        .position(|p| {
            p.p_type(endian) == elf::PT_LOAD
                && p.p_offset(endian) <= offset
                && offset.saturating_add(size)
                    <= p.p_offset(endian).saturating_add(p.p_filesz(endian))
        })
        .ok_or_else(|| unsafe_("the offload section is in no loaded segment"))?;
    let seg = &phdrs[load];
    let (lv, lo, lf, lm) = (
        seg.p_vaddr(endian),
        seg.p_offset(endian),
        seg.p_filesz(endian),
        seg.p_memsz(endian),
    );
    if lv.wrapping_sub(lo) != addr.wrapping_sub(offset) {
        return Err(unsafe_(
            "the section's address and offset disagree with its segment's",
        ));
    }
    let page = seg.p_align(endian).clamp(PAGE, 1 << 21);
    // Offsets after the cut move by a multiple of every later segment's
    // alignment, so each stays congruent to its address.
    let step = phdrs
        .iter()
        .filter(|p| p.p_type(endian) == elf::PT_LOAD && p.p_offset(endian) > offset)
        .map(|p| p.p_align(endian).max(1))
        .chain([page])
        .max()
        .unwrap_or(page);
    if lv.checked_add(lm).is_none() || addr.checked_add(size).is_none() {
        return Err(unsafe_("the section's segment runs past the end of memory"));
    }
    if lm < lf {
        return Err(unsafe_(
            "the section's segment is smaller in memory than in the file",
        ));
    }
    // Other machines' relocations are not read: nothing may point in unseen.
    if relative_type(machine).is_none()
        && shdrs.iter().any(|s| {
            matches!(
                s.sh_type(endian),
                elf::SHT_RELA | elf::SHT_REL | elf::SHT_RELR
            ) && s.sh_size(endian) > 0
        })
    {
        return Err(unsafe_(format!(
            "the relocations of machine {machine} are not rewritten"
        )));
    }
    let tail = lv
        .saturating_add(lm)
        .saturating_sub(addr.saturating_add(size));
    let split = tail > 0;
    // The program header table: one more entry when the segment splits. It
    // must lie before the section (it is rewritten in place or moved there).
    let phoff = header.e_phoff(endian);
    let phnum = u64::from(header.e_phnum(endian));
    let table_end = phoff.saturating_add(phnum * PHDR_SIZE);
    if table_end > offset || phnum + 1 > u64::from(u16::MAX) {
        return Err(unsafe_(
            "the program header table does not lie before the section",
        ));
    }
    // What follows the table: the first section, the section header table or
    // the first segment content after it.
    let first_content = shdrs
        .iter()
        .filter(|s| s.sh_type(endian) != elf::SHT_NULL)
        .map(|s| s.sh_offset(endian))
        .chain([header.e_shoff(endian)])
        .chain(
            phdrs
                .iter()
                .filter(|p| p.p_filesz(endian) > 0 && p.p_offset(endian) > 0)
                .map(|p| p.p_offset(endian)),
        )
        .filter(|&o| o >= table_end)
        .min()
        .unwrap_or(u64::MAX);
    let room = split && first_content - table_end >= PHDR_SIZE;
    // No room: the sections in the table's way move to the freed bytes.
    let block = if split && !room {
        let b = room::block(data, shdrs, phdrs, endian, table_end)?;
        if b.offset + b.len > offset {
            return Err(unsafe_(
                "the sections in the program header table's way reach the offload section",
            ));
        }
        Some(b)
    } else {
        None
    };
    let kept_end = addr + new_size;
    // Where the block goes: after the kept containers, at an address
    // congruent to its own modulo its alignment.
    let moved_to = match &block {
        Some(b) if kept_end > b.addr => Some(
            (kept_end - b.addr)
                .checked_next_multiple_of(b.align)
                .and_then(|d| b.addr.checked_add(d))
                .filter(|n| n.checked_add(b.len).is_some_and(|e| e <= lv.saturating_add(lm)))
                .ok_or_else(|| unsafe_("the sections in the program header table's way do not fit after the kept containers"))?,
        ),
        Some(_) => return Err(unsafe_("the sections in the program header table's way lie after the offload section")),
        None => None,
    };
    let seg1_end = match (&block, moved_to) {
        (Some(b), Some(n)) => n + b.len,
        _ => kept_end,
    };
    let (cut, v2) = if split {
        let v2 = (addr + size) / page * page;
        if v2 <= lv {
            return Ok(None);
        }
        (lo + (v2 - lv), v2)
    } else {
        (offset + size, addr + size)
    };
    let free = if split {
        v2.saturating_sub(seg1_end.next_multiple_of(page))
    } else {
        (addr + size).saturating_sub(seg1_end)
    };
    let shift = free / step * step;
    if shift == 0 {
        return Ok(None);
    }

    // A part of the split segment that holds no code is not executable (its
    // flags are the segment's, which held `.text` beside the section).
    let code_in = |from: u64, to: u64| {
        shdrs.iter().any(|s| {
            s.sh_flags(endian) & u64::from(elf::SHF_EXECINSTR) != 0
                && s.sh_addr(endian) < to
                && s.sh_addr(endian).saturating_add(s.sh_size(endian)) > from
        })
    };
    let flags_for = |from: u64, to: u64| {
        let flags = seg.p_flags(endian);
        if split && !code_in(from, to) {
            flags & !elf::PF_X
        } else {
            flags
        }
    };

    if phoff < cut && phoff + phnum * PHDR_SIZE > offset {
        return Err(unsafe_(
            "the program header table lies in the bytes that change",
        ));
    }

    // Program headers.
    let mut table = Vec::with_capacity(((phnum + 1) * PHDR_SIZE) as usize);
    for (i, p) in phdrs.iter().enumerate() {
        let mut h = *p;
        let (ty, off, filesz) = (p.p_type(endian), p.p_offset(endian), p.p_filesz(endian));
        if i == load {
            h.p_filesz.set(endian, seg1_end - lv);
            h.p_memsz.set(endian, seg1_end - lv);
            h.p_flags.set(endian, flags_for(lv, seg1_end));
            table.extend_from_slice(object::bytes_of(&h));
            if split {
                let mut second = *p;
                second.p_offset.set(endian, cut - shift);
                second.p_vaddr.set(endian, v2);
                second.p_paddr.set(endian, v2);
                second.p_filesz.set(endian, lv + lf - v2);
                second.p_memsz.set(endian, lv + lm - v2);
                second.p_flags.set(endian, flags_for(v2, lv + lm));
                table.extend_from_slice(object::bytes_of(&second));
            }
            continue;
        }
        let in_block = block.as_ref().zip(moved_to).filter(|(b, _)| {
            ty != elf::PT_LOAD
                && filesz > 0
                && off >= b.offset
                && off
                    .checked_add(filesz)
                    .is_some_and(|e| e <= b.offset + b.len)
        });
        if ty == elf::PT_PHDR {
            if split {
                h.p_filesz.set(endian, (phnum + 1) * PHDR_SIZE);
                h.p_memsz.set(endian, (phnum + 1) * PHDR_SIZE);
            }
        } else if let Some((b, n)) = in_block {
            // A note or the interpreter's name, moved with its sections.
            let new_off = lo.wrapping_add(n - lv).wrapping_add(off - b.offset);
            let new_addr = n.wrapping_add(off - b.offset);
            h.p_offset.set(endian, new_off);
            h.p_vaddr.set(endian, new_addr);
            h.p_paddr.set(endian, new_addr);
        } else if off >= cut {
            h.p_offset.set(endian, off - shift);
        } else if filesz > 0 && off + filesz > offset + new_size && off < cut {
            return Err(unsafe_(format!(
                "a program header (type {ty:#x}) covers the bytes that would go"
            )));
        }
        table.extend_from_slice(object::bytes_of(&h));
    }
    if split {
        patches.u16(0x38, (phnum + 1) as u16);
    }
    patches.put(phoff, &table);

    // Section headers and the ELF header's section table offset.
    patch_sections(
        &mut patches,
        shdrs,
        endian,
        shoff,
        shentsize,
        index,
        new_size,
        cut,
        shift,
    )?;

    // What points into the section: relocations, RELR words, wrappers, symbols.
    let file_offset = |vaddr: u64| -> Option<u64> {
        phdrs.iter().find_map(|p| {
            (p.p_type(endian) == elf::PT_LOAD
                && vaddr >= p.p_vaddr(endian)
                && vaddr.saturating_add(8) <= p.p_vaddr(endian).saturating_add(p.p_filesz(endian)))
            .then(|| p.p_offset(endian) + (vaddr - p.p_vaddr(endian)))
        })
    };
    let word = |at: u64| -> Option<u64> {
        data.get(at as usize..at as usize + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
    };
    let relative = relative_type(machine);
    let mut referenced = 0usize;
    // OpenMP's device-image table, when an image of it goes.
    let in_removed = |value: u64| value >= addr && gone(value - addr);
    let omp = omp_table(
        data,
        shdrs,
        endian,
        relative,
        addr,
        size,
        &file_offset,
        &in_removed,
    )?;
    if let Some(t) = &omp {
        t.patch(&mut patches, data, &remap_as, addr)?;
        referenced += 1;
    }
    for s in shdrs.iter() {
        match s.sh_type(endian) {
            elf::SHT_REL if s.sh_size(endian) > 0 => {
                return Err(unsafe_(
                    "REL relocations (without addends) are not rewritten",
                ));
            }
            // Relocations the dynamic loader applies; a non-loaded table
            // (`--emit-relocs`) describes code and data already linked, whose
            // references the scan below finds.
            elf::SHT_RELA if s.sh_flags(endian) & u64::from(elf::SHF_ALLOC) != 0 => {
                let Ok(relas) = s.data_as_array::<elf::Rela64<LE>, _>(endian, data) else {
                    return Err(unsafe_("a relocation section cannot be read"));
                };
                let syms = shdrs
                    .get(s.sh_link(endian) as usize)
                    .filter(|t| s.sh_link(endian) != 0 && t.sh_type(endian) == elf::SHT_DYNSYM)
                    .map(|t| t.data_as_array::<elf::Sym64<LE>, _>(endian, data))
                    .transpose()
                    .map_err(|_| unsafe_("a symbol table cannot be read"))?
                    .unwrap_or(&[]);
                for (i, r) in relas.iter().enumerate() {
                    let at = s.sh_offset(endian) + i as u64 * 24;
                    let (ty, sym) = (r.r_type(endian, false), r.r_sym(endian, false));
                    let addend = r.r_addend(endian) as u64;
                    if let Some(t) = omp.as_ref().filter(|t| t.holds(r.r_offset(endian))) {
                        // A slot of the table: it moves with its entry.
                        t.move_relocation(
                            &mut patches,
                            at,
                            r.r_offset(endian),
                            addend,
                            &remap_as,
                            addr,
                        )?;
                        continue;
                    }
                    let place = r.r_offset(endian);
                    let rewritten = if Some(ty) == relative && sym == 0 {
                        relocate(
                            &mut patches,
                            at,
                            place,
                            0,
                            addend,
                            &remap,
                            addr,
                            &file_offset,
                            &word,
                        )?
                    } else if sym == 0 {
                        // An addend alone (IRELATIVE: a resolver's address).
                        if remap(addend, addr)?.is_some() {
                            return Err(unsafe_(format!(
                                "a relocation of type {ty} at {place:#x} refers to {addend:#x} in the section, and is not rewritten"
                            )));
                        }
                        false
                    } else {
                        let symbol = syms.get(sym as usize).ok_or_else(|| {
                            unsafe_(format!(
                                "a relocation at {place:#x} names a symbol that does not exist"
                            ))
                        })?;
                        let value = symbol.st_value(endian);
                        let own = usize::from(symbol.st_shndx(endian)) == index;
                        let target = value.wrapping_add(addend);
                        if symbol.st_shndx(endian) == elf::SHN_UNDEF
                            || (!own && remap(target, addr)?.is_none())
                        {
                            false
                        } else if absolute_type(machine, ty) {
                            // S + A: the symbol moves (its entry is patched
                            // with the others), the addend keeps the target.
                            let new_value = if own {
                                remap_as(value, addr, Point::Start)?.unwrap_or(value)
                            } else {
                                value
                            };
                            relocate(
                                &mut patches,
                                at,
                                place,
                                new_value,
                                target,
                                &remap,
                                addr,
                                &file_offset,
                                &word,
                            )?
                        } else {
                            return Err(unsafe_(format!(
                                "a relocation of type {ty} at {place:#x} refers to {target:#x} in the section, and is not rewritten"
                            )));
                        }
                    };
                    referenced += usize::from(rewritten);
                }
            }
            elf::SHT_RELR => {
                let Ok(words) = s.data_as_array::<object::U64<LE>, _>(endian, data) else {
                    return Err(unsafe_("a RELR section cannot be read"));
                };
                let mut next = 0u64;
                for w in words {
                    let w = w.get(endian);
                    let mut places = Vec::new();
                    if w & 1 == 0 {
                        places.push(w);
                        next = w.saturating_add(8);
                    } else {
                        for bit in 1..64 {
                            if w >> bit & 1 == 1 {
                                places.push(next.saturating_add((bit - 1) * 8));
                            }
                        }
                        next = next.saturating_add(63 * 8);
                    }
                    for place in places {
                        if omp.as_ref().is_some_and(|t| t.holds(place)) {
                            return Err(unsafe_(
                                "OpenMP's device-image table is relocated by RELR, which is not rewritten",
                            ));
                        }
                        let Some(f) = file_offset(place) else {
                            continue;
                        };
                        if let Some(value) = word(f) {
                            if let Some(new) = remap(value, addr)? {
                                patches.u64(f, new);
                                referenced += 1;
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }
    // The wrappers' pointers: a non-PIE executable has no relocation for them.
    let names = header.section_strings(endian, data, shdrs).ok();
    for s in shdrs.iter() {
        let name = names
            .and_then(|n| s.name(endian, n).ok())
            .unwrap_or_default();
        if name != b".hipFatBinSegment" && name != b".nvFatBinSegment" {
            continue;
        }
        let (so, sz) = (s.sh_offset(endian), s.sh_size(endian));
        let Some(bytes) = data.get(so as usize..so.saturating_add(sz) as usize) else {
            return Err(unsafe_(
                "a fat-binary wrapper section lies outside the file",
            ));
        };
        // Both pointers: the fat binary, and (CUDA version 2) the
        // prelinked fat binaries.
        for (at, wrapper) in FatbinWrapper::all(bytes) {
            let mut w = wrapper.map_err(|e| {
                unsafe_(format!(
                    "a fat-binary wrapper at {:#x} cannot be read, so where it points is unknown: {e}",
                    so + at
                ))
            })?;
            let (fatbin, aux) = (remap(w.fatbin, addr)?, remap(w.aux, addr)?);
            if fatbin.is_some() || aux.is_some() {
                w.fatbin = fatbin.unwrap_or(w.fatbin);
                w.aux = aux.unwrap_or(w.aux);
                patches.put(so + at, &w.to_bytes());
                referenced += 1;
            }
        }
    }
    // What refers into the section with no relocation (code, the data of
    // a position-dependent file, other sections' symbols): nothing of it is
    // rewritten, so nothing may move.
    let scan = refs::Scan {
        data,
        shdrs,
        endian,
        machine,
        fixed: kind == elf::ET_EXEC,
        index,
    };
    // The section's end included, though another section may start there:
    // code cannot say which of the two it means.
    let unseen = scan.references(addr, addr + size, &|at| patches.covers(at));
    if let Some(first) = unseen.first() {
        return Err(Unsafe {
            why: format!("{first}: compaction would move what it refers to"),
            in_place: unseen
                .iter()
                .all(|r| r.kind != refs::Kind::Page && map.stays_in_place(r.to - addr)),
        });
    }
    if referenced == 0 {
        return Err(unsafe_(
            "no relocation or fat-binary wrapper points into the section, so what refers to it is unknown",
        ));
    }
    patch_symbols(
        &mut patches,
        data,
        shdrs,
        endian,
        index,
        addr,
        &remap_as,
        size,
        new_size,
        &gone,
    )?;

    // The sections in the table's way: their headers, `.dynamic`'s
    // pointers to them and their symbols follow them; anything else that
    // refers to them keeps the file as it is.
    if let (Some(b), Some(n)) = (&block, moved_to) {
        let file_delta = (lo.wrapping_add(n - lv)).wrapping_sub(b.offset);
        let delta = n - b.addr;
        let dynamic = move_dynamic_pointers(&mut patches, data, shdrs, endian, b, delta)?;
        if let Some(why) = room::referenced(&scan, b, &|at| dynamic.contains(&at)) {
            return Err(unsafe_(format!(
                "the program header table has no room for one more entry, and what is in its way cannot move: {why}"
            )));
        }
        for &i in &b.sections {
            let at = shoff + i as u64 * shentsize;
            patches.u64(at + 0x10, shdrs[i].sh_addr(endian).wrapping_add(delta));
            patches.u64(
                at + 0x18,
                shdrs[i].sh_offset(endian).wrapping_add(file_delta),
            );
        }
        move_block_symbols(&mut patches, data, shdrs, endian, b, delta)?;
        renumber(
            &mut patches,
            data,
            shdrs,
            endian,
            shoff,
            shentsize,
            index,
            b,
        )?;
    }

    // The file: up to the section, its new bytes, the moved sections, the rest.
    patches.copy(data, 0, offset, &mut out);
    out.extend(packed(containers, align));
    if let (Some(b), Some(n)) = (&block, moved_to) {
        out.pad_to(lo + (n - lv));
        patches.copy(data, b.offset, b.offset + b.len, &mut out);
    }
    out.pad_to(cut - shift);
    patches.copy(data, cut, data.len() as u64, &mut out);
    Ok(Some(out))
}

/// `.dynamic`'s pointers into the block moved by `delta`; the file offsets
/// of the words rewritten.
fn move_dynamic_pointers(
    patches: &mut Patches,
    data: &[u8],
    shdrs: &[elf::SectionHeader64<LE>],
    endian: LE,
    block: &room::Block,
    delta: u64,
) -> Result<Vec<u64>, Unsafe> {
    let mut rewritten = Vec::new();
    for s in shdrs
        .iter()
        .filter(|s| s.sh_type(endian) == elf::SHT_DYNAMIC)
    {
        let Ok(entries) = s.data_as_array::<elf::Dyn64<LE>, _>(endian, data) else {
            return Err(unsafe_("the dynamic section cannot be read"));
        };
        for (i, d) in entries.iter().enumerate() {
            let (tag, value) = (d.d_tag.get(endian), d.d_val.get(endian));
            if tag == u64::from(elf::DT_NULL) {
                break;
            }
            if room::is_pointer_tag(tag) && block.holds(value) {
                let at = s.sh_offset(endian) + i as u64 * 16 + 8;
                patches.u64(at, value.wrapping_add(delta));
                rewritten.push(at);
            }
        }
    }
    Ok(rewritten)
}

/// The section headers put back in address order once the block's
/// sections moved after section `index` (patchelf, for one, reads the
/// table as if sorted, and writes over what it misplaces): the headers
/// permuted, as they stand after the other patches, and every section
/// index that names them, `sh_link`, `sh_info` where it is one, symbols'
/// `st_shndx` and `e_shstrndx`, renumbered.
#[allow(clippy::too_many_arguments)]
fn renumber(
    patches: &mut Patches,
    data: &[u8],
    shdrs: &[elf::SectionHeader64<LE>],
    endian: LE,
    shoff: u64,
    shentsize: u64,
    index: usize,
    block: &room::Block,
) -> Result<(), Unsafe> {
    if shentsize != 64 {
        return Err(unsafe_("the section headers are not of the ELF64 size"));
    }
    if shdrs
        .iter()
        .any(|s| matches!(s.sh_type(endian), elf::SHT_GROUP | elf::SHT_SYMTAB_SHNDX))
    {
        return Err(unsafe_(
            "section groups or extended section indices are not renumbered",
        ));
    }
    // The new order: the block's sections right after the offload section.
    let mut order: Vec<usize> = (0..shdrs.len())
        .filter(|i| !block.sections.contains(i))
        .collect();
    let at = order
        .iter()
        .position(|&i| i == index)
        .map_or(order.len(), |p| p + 1);
    order.splice(at..at, block.sections.iter().copied());
    let mut new_index = vec![0u16; shdrs.len()];
    for (new, &old) in order.iter().enumerate() {
        new_index[old] = u16::try_from(new).map_err(|_| unsafe_("too many sections"))?;
    }
    let renamed = |i: u32| -> u32 { new_index.get(i as usize).map_or(i, |&n| u32::from(n)) };
    // The table as the other patches left it, permuted.
    let len = shdrs.len() as u64 * 64;
    let mut current = Output::default();
    patches.copy(data, shoff, shoff + len, &mut current);
    let current = current.to_vec();
    let mut table = Vec::with_capacity(current.len());
    for &old in &order {
        let mut h = current[old * 64..old * 64 + 64].to_vec();
        let s = &shdrs[old];
        let link = s.sh_link(endian);
        h[0x28..0x2c].copy_from_slice(&renamed(link).to_le_bytes());
        let info_is_index = s.sh_flags(endian) & u64::from(elf::SHF_INFO_LINK) != 0
            || matches!(s.sh_type(endian), elf::SHT_REL | elf::SHT_RELA) && s.sh_info(endian) != 0;
        if info_is_index {
            h[0x2c..0x30].copy_from_slice(&renamed(s.sh_info(endian)).to_le_bytes());
        }
        table.extend_from_slice(&h);
    }
    patches.put(shoff, &table);
    let shstrndx = u16::from_le_bytes([data[0x3e], data[0x3f]]);
    patches.u16(0x3e, renamed(u32::from(shstrndx)) as u16);
    for s in shdrs {
        if !matches!(s.sh_type(endian), elf::SHT_SYMTAB | elf::SHT_DYNSYM) {
            continue;
        }
        let Ok(syms) = s.data_as_array::<elf::Sym64<LE>, _>(endian, data) else {
            return Err(unsafe_("a symbol table cannot be read"));
        };
        for (i, sym) in syms.iter().enumerate() {
            let shndx = sym.st_shndx(endian);
            if shndx != elf::SHN_UNDEF && shndx < elf::SHN_LORESERVE {
                let new = renamed(u32::from(shndx)) as u16;
                if new != shndx {
                    patches.u16(s.sh_offset(endian) + i as u64 * 24 + 6, new);
                }
            }
        }
    }
    Ok(())
}

/// Symbols in the block moved by `delta` (what refers to them otherwise,
/// [`room::referenced`] has found nothing of).
fn move_block_symbols(
    patches: &mut Patches,
    data: &[u8],
    shdrs: &[elf::SectionHeader64<LE>],
    endian: LE,
    block: &room::Block,
    delta: u64,
) -> Result<(), Unsafe> {
    for s in shdrs {
        if !matches!(s.sh_type(endian), elf::SHT_SYMTAB | elf::SHT_DYNSYM) {
            continue;
        }
        let Ok(syms) = s.data_as_array::<elf::Sym64<LE>, _>(endian, data) else {
            return Err(unsafe_("a symbol table cannot be read"));
        };
        for (i, sym) in syms.iter().enumerate() {
            // By value: a linker may name a section for a symbol outside
            // it (lld's `__preinit_array_end` in `.note.ABI-tag`, at the
            // ELF header), which stays.
            if block.holds(sym.st_value(endian)) {
                let at = s.sh_offset(endian) + i as u64 * 24 + 8;
                patches.u64(at, sym.st_value(endian).wrapping_add(delta));
            }
        }
    }
    Ok(())
}

/// The new section's bytes, taken from `containers`: each container's new
/// bytes at the section's alignment `align`, as [`compact`] laid them out.
fn packed<'a>(containers: &mut [Placed<'a>], align: u64) -> Output<'a> {
    let mut body = Output::default();
    for c in containers.iter_mut().filter(|c| !c.output.is_empty()) {
        body.pad_to(body.len().next_multiple_of(align));
        body.extend(std::mem::take(&mut c.output));
    }
    body
}

/// OpenMP's device-image table (clang-linker-wrapper's
/// `.omp_offloading.device_images`): `__tgt_device_image` entries of 32
/// bytes (ImageStart, ImageEnd, EntriesBegin, EntriesEnd) whose image
/// pointers point into the section, and the `__tgt_bin_desc` that counts
/// them (u32 NumDeviceImages at 0, the array's address at 8), found from
/// their `R_*_RELATIVE` relocations. When an image goes, its entry goes:
/// the later entries move down, the count drops, and the relocations of a
/// removed entry are pointed at the table's unused tail (glibc applies the
/// first `DT_RELACOUNT` relocations as relative whatever their type, so
/// they cannot simply become `R_*_NONE`).
struct OmpTable {
    /// The array's address, its entries, and the file offset of the count.
    array: u64,
    entries: u64,
    count_at: u64,
    array_at: u64,
    /// Each entry's new slot.
    slots: Vec<u64>,
    kept: u64,
    /// Which entries go.
    gone: Vec<bool>,
}

const IMAGE_ENTRY: u64 = 32;

#[allow(clippy::too_many_arguments)]
fn omp_table(
    data: &[u8],
    shdrs: &[elf::SectionHeader64<LE>],
    endian: LE,
    relative: Option<u32>,
    addr: u64,
    size: u64,
    file_offset: &dyn Fn(u64) -> Option<u64>,
    in_removed: &dyn Fn(u64) -> bool,
) -> Result<Option<OmpTable>, Unsafe> {
    let Some(relative) = relative else {
        return Ok(None);
    };
    // Every relative relocation: where, and what it points to.
    let mut words: BTreeMap<u64, u64> = BTreeMap::new();
    for s in shdrs.iter().filter(|s| s.sh_type(endian) == elf::SHT_RELA) {
        let Ok(relas) = s.data_as_array::<elf::Rela64<LE>, _>(endian, data) else {
            continue;
        };
        for r in relas {
            if r.r_type(endian, false) == relative && r.r_sym(endian, false) == 0 {
                words.insert(r.r_offset(endian), r.r_addend(endian) as u64);
            }
        }
    }
    let into = |v: u64| v >= addr && v <= addr + size;
    // Slots: ImageStart and ImageEnd both into the section.
    let slots: Vec<u64> = words
        .iter()
        .filter(|(&at, &v)| into(v) && words.get(&(at + 8)).is_some_and(|&e| into(e) && e > v))
        .map(|(&at, _)| at)
        .collect();
    if slots.is_empty() || !slots.iter().any(|at| in_removed(words[at])) {
        return Ok(None);
    }
    let array = slots[0];
    let entries = slots.len() as u64;
    if slots
        .iter()
        .enumerate()
        .any(|(i, &at)| at != array + i as u64 * IMAGE_ENTRY)
    {
        return Err(unsafe_("the OpenMP device images are not one table"));
    }
    // The descriptor: a pointer to the array, after the count.
    let desc = words
        .iter()
        .filter(|(_, &v)| v == array)
        .filter(|(&at, _)| at >= 8)
        .map(|(&at, _)| at - 8)
        .find(|&d| {
            file_offset(d)
                .and_then(|f| data.get(f as usize..f as usize + 4))
                .is_some_and(|b| u64::from(u32::from_le_bytes(b.try_into().unwrap())) == entries)
        })
        .ok_or_else(|| unsafe_("no __tgt_bin_desc counts the OpenMP device images"))?;
    let gone: Vec<bool> = slots.iter().map(|at| in_removed(words[at])).collect();
    let kept = gone.iter().filter(|g| !**g).count() as u64;
    let mut next_kept = 0;
    let mut next_gone = kept;
    let new_slots = gone
        .iter()
        .map(|&g| {
            let slot = if g { &mut next_gone } else { &mut next_kept };
            *slot += 1;
            *slot - 1
        })
        .collect();
    Ok(Some(OmpTable {
        array,
        entries,
        count_at: file_offset(desc).ok_or_else(|| unsafe_("the descriptor is not in the file"))?,
        array_at: file_offset(array)
            .ok_or_else(|| unsafe_("the device images are not in the file"))?,
        slots: new_slots,
        kept,
        gone,
    }))
}

impl OmpTable {
    fn holds(&self, vaddr: u64) -> bool {
        vaddr >= self.array && vaddr < self.array + self.entries * IMAGE_ENTRY
    }

    /// The table's bytes with the entries moved (image pointers written in
    /// place remapped), and the count.
    fn patch(
        &self,
        patches: &mut Patches,
        data: &[u8],
        remap: &dyn Fn(u64, u64, Point) -> Result<Option<u64>, Unsafe>,
        addr: u64,
    ) -> Result<(), Unsafe> {
        let len = (self.entries * IMAGE_ENTRY) as usize;
        let old = data
            .get(self.array_at as usize..self.array_at as usize + len)
            .ok_or_else(|| unsafe_("the device images lie past the end"))?;
        let mut new = vec![0u8; len];
        for (i, &slot) in self.slots.iter().enumerate() {
            let mut entry = old[i * 32..i * 32 + 32].to_vec();
            if !self.gone[i] {
                for (field, point) in [(0, Point::Start), (8, Point::End)] {
                    let w = u64::from_le_bytes(entry[field..field + 8].try_into().unwrap());
                    if let Some(v) = remap(w, addr, point)? {
                        entry[field..field + 8].copy_from_slice(&v.to_le_bytes());
                    }
                }
            }
            new[slot as usize * 32..slot as usize * 32 + 32].copy_from_slice(&entry);
        }
        patches.put(self.array_at, &new);
        patches.put(self.count_at, &(self.kept as u32).to_le_bytes());
        Ok(())
    }

    /// A relocation of a slot (at `at` in the file, of address `place`):
    /// moved with its entry, its image pointer remapped unless it goes.
    fn move_relocation(
        &self,
        patches: &mut Patches,
        at: u64,
        place: u64,
        addend: u64,
        remap: &dyn Fn(u64, u64, Point) -> Result<Option<u64>, Unsafe>,
        addr: u64,
    ) -> Result<(), Unsafe> {
        let i = ((place - self.array) / IMAGE_ENTRY) as usize;
        let field = (place - self.array) % IMAGE_ENTRY;
        patches.u64(at, self.array + self.slots[i] * IMAGE_ENTRY + field);
        if !self.gone[i] && field < 16 {
            let point = if field < 8 { Point::Start } else { Point::End };
            if let Some(v) = remap(addend, addr, point)? {
                patches.u64(at + 16, v);
            }
        }
        Ok(())
    }
}

/// Section headers: the section's new size; the offsets of those after the
/// cut moved back, and the table's own offset (`e_shoff`) when it follows the
/// cut. A section other than this one inside the freed bytes is unsafe.
#[allow(clippy::too_many_arguments)]
fn patch_sections(
    patches: &mut Patches,
    shdrs: &[elf::SectionHeader64<LE>],
    endian: LE,
    shoff: u64,
    shentsize: u64,
    index: usize,
    new_size: u64,
    cut: u64,
    shift: u64,
) -> Result<(), Unsafe> {
    // The table itself must not lie in the bytes that change.
    let section_start = shdrs[index].sh_offset(endian);
    let table_end = shoff + shdrs.len() as u64 * shentsize;
    if shoff < cut && table_end > section_start {
        return Err(unsafe_(
            "the section header table lies in the bytes that change",
        ));
    }
    if shoff >= cut {
        patches.u64(0x28, shoff - shift);
    }
    let (start, end) = (section_start + new_size, cut);
    for (i, s) in shdrs.iter().enumerate() {
        let at = shoff + i as u64 * shentsize;
        let off = s.sh_offset(endian);
        if i == index {
            patches.u64(at + 0x20, new_size);
        } else if off >= cut {
            patches.u64(at + 0x18, off - shift);
        } else if s.sh_type(endian) != elf::SHT_NOBITS
            && s.sh_type(endian) != elf::SHT_NULL
            && s.sh_size(endian) > 0
            && off < end
            && off.saturating_add(s.sh_size(endian)) > start
        {
            return Err(unsafe_(format!(
                "section {i} lies in the bytes that would go"
            )));
        }
    }
    Ok(())
}

/// Symbols defined in the section: their values moved (`base` is the
/// section's address, 0 in an object), a size that covered a whole
/// container or the section made the new one.
#[allow(clippy::too_many_arguments)]
fn patch_symbols(
    patches: &mut Patches,
    data: &[u8],
    shdrs: &[elf::SectionHeader64<LE>],
    endian: LE,
    index: usize,
    base: u64,
    remap: &dyn Fn(u64, u64, Point) -> Result<Option<u64>, Unsafe>,
    size: u64,
    new_size: u64,
    gone: &dyn Fn(u64) -> bool,
) -> Result<(), Unsafe> {
    for s in shdrs {
        if !matches!(s.sh_type(endian), elf::SHT_SYMTAB | elf::SHT_DYNSYM) {
            continue;
        }
        let Ok(syms) = s.data_as_array::<elf::Sym64<LE>, _>(endian, data) else {
            return Err(unsafe_("a symbol table cannot be read"));
        };
        for (i, sym) in syms.iter().enumerate() {
            if usize::from(sym.st_shndx(endian)) != index || sym.st_type() == elf::STT_SECTION {
                continue;
            }
            let at = s.sh_offset(endian) + i as u64 * 24;
            let value = sym.st_value(endian);
            // The section's own end, by the symbol's own word.
            let own_end = (value == base + size).then_some(Ok(Some(base + new_size)));
            let new = match own_end.unwrap_or_else(|| remap(value, base, Point::Start)) {
                Ok(Some(new)) => new,
                Ok(None) => continue,
                // A static symbol of an image that goes (clang-linker-wrapper
                // names each one): it names the section's end, empty. A
                // dynamic one could be used from outside: unsafe.
                Err(_) if s.sh_type(endian) == elf::SHT_SYMTAB && gone(value - base) => {
                    patches.u64(at + 8, base + new_size);
                    patches.u64(at + 16, 0);
                    continue;
                }
                Err(e) => return Err(e),
            };
            patches.u64(at + 8, new);
            let sz = sym.st_size(endian);
            if value == base && sz == size {
                patches.u64(at + 16, new_size);
            } else if sz > 0 {
                let end = remap(value.saturating_add(sz), base, Point::End)?.unwrap_or(new);
                patches.u64(at + 16, end.saturating_sub(new));
            }
        }
    }
    Ok(())
}

/// An object's relocations against the section (its section symbol with an
/// offset, or a symbol defined in it): the target moved.
fn patch_object_relocations(
    patches: &mut Patches,
    data: &[u8],
    shdrs: &[elf::SectionHeader64<LE>],
    endian: LE,
    index: usize,
    remap: &dyn Fn(u64, u64, Point) -> Result<Option<u64>, Unsafe>,
) -> Result<(), Unsafe> {
    for s in shdrs {
        if s.sh_type(endian) != elf::SHT_RELA {
            continue;
        }
        let Some(symtab) = shdrs.get(s.sh_link(endian) as usize) else {
            continue;
        };
        let Ok(syms) = symtab.data_as_array::<elf::Sym64<LE>, _>(endian, data) else {
            return Err(unsafe_("a symbol table cannot be read"));
        };
        let Ok(relas) = s.data_as_array::<elf::Rela64<LE>, _>(endian, data) else {
            return Err(unsafe_("a relocation section cannot be read"));
        };
        for (i, r) in relas.iter().enumerate() {
            let Some(sym) = syms.get(r.r_sym(endian, false) as usize) else {
                continue;
            };
            if usize::from(sym.st_shndx(endian)) != index {
                continue;
            }
            let value = sym.st_value(endian);
            let target = value.wrapping_add(r.r_addend(endian) as u64);
            if let Some(new_target) = remap(target, 0, Point::Unknown)? {
                let new_value = remap(value, 0, Point::Start)?.unwrap_or(value);
                let at = s.sh_offset(endian) + i as u64 * 24 + 16;
                patches.u64(at, new_target.wrapping_sub(new_value));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_ends_and_unchanged_insides_move() {
        // A (0..100) rewritten to 40 bytes at 0; B (100..150) removed; C
        // (4096..4146) kept as it was, now at 64; the section 5000 -> 114.
        let map = Map {
            moves: vec![(0, 100, 0, 40, false), (4096, 50, 64, 50, true)],
            removed: vec![(100, 50)],
            old_size: 5000,
            new_size: 114,
            shared_end: false,
        };
        assert_eq!(map.map(0, Point::Start), Some(0));
        assert_eq!(map.map(100, Point::End), Some(40));
        assert_eq!(
            map.map(50, Point::Unknown),
            None,
            "inside a rewritten container"
        );
        assert_eq!(map.map(4096, Point::Unknown), Some(64));
        assert_eq!(map.map(4100, Point::Unknown), Some(68));
        assert_eq!(map.map(5000, Point::Unknown), Some(114));
        // The start of a container that goes has no place; the end before it does.
        assert_eq!(map.map(100, Point::Start), None);
        assert_eq!(map.map(100, Point::Unknown), None);
        // Where two containers meet and move apart, an unknown pointer is refused.
        let meet = Map {
            moves: vec![
                (0, 0x3000, 0, 0x1234, false),
                (0x3000, 0x10, 0x2000, 0x10, true),
            ],
            removed: vec![],
            old_size: 0x3010,
            new_size: 0x2010,
            shared_end: true,
        };
        assert_eq!(meet.map(0x3000, Point::Start), Some(0x2000));
        assert_eq!(meet.map(0x3000, Point::End), Some(0x1234));
        assert_eq!(meet.map(0x3000, Point::Unknown), None);
        // A container's end at the section's end is known; the bare section
        // end, shared with the next section, is not.
        assert_eq!(meet.map(0x3010, Point::End), Some(0x2010));
    }

    #[test]
    fn overlapping_patches_are_applied_once() {
        let data: Vec<u8> = (0..16).collect();
        let mut p = Patches::default();
        p.put(2, &[0xaa; 6]);
        p.put(4, &[0xbb; 2]);
        let mut out = Output::default();
        p.copy(&data, 0, 16, &mut out);
        let v = out.to_vec();
        assert_eq!(v.len(), 16);
        assert_eq!(&v[..8], &[0, 1, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa]);
    }

    #[test]
    fn patches_overlay_the_copied_bytes() {
        let data: Vec<u8> = (0..32).collect();
        let mut p = Patches::default();
        p.put(4, &[0xff; 4]);
        p.put(30, &[7, 7, 7, 7]);
        let mut out = Output::default();
        p.copy(&data, 2, 32, &mut out);
        let v = out.to_vec();
        assert_eq!(&v[..2], &[2, 3]);
        assert_eq!(&v[2..6], &[0xff; 4]);
        assert_eq!(&v[28..], &[7, 7]);
        assert_eq!(v.len(), 30);
    }
}
