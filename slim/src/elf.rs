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

    /// A file that cannot be rewritten even in place, for `why`.
    pub(crate) fn not_in_place(why: impl Into<String>) -> Unsafe {
        Unsafe {
            why: why.into(),
            in_place: false,
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
    /// Whether `moves` and `removed` are each in order of their old starts,
    /// none empty and none overlapping another (what discovery finds): then
    /// a place is looked up by binary search, else in each of them.
    sorted: bool,
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
        let start = self.starting(at).map(|m| m.2);
        let end = self
            .ending(at)
            .map(|m| m.2 + m.3)
            .or((at == self.old_size && !self.shared_end).then_some(self.new_size));
        let inside = self.inside_same(at).map(|m| m.2 + (at - m.0));
        let removed_start = self.removed_at(at);
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
    /// The section offsets of the containers' bounds that compaction
    /// moves (a start or end whose new offset is not its old one, and the
    /// bounds of those that go), in order: where an exact pointer that no
    /// relocation describes would go stale.
    fn moving_bounds(&self) -> Vec<u64> {
        let mut bounds: Vec<u64> = Vec::new();
        for &(old, len, new, new_len, _) in &self.moves {
            if old != new {
                bounds.push(old);
            }
            if old + len != new + new_len {
                bounds.push(old + len);
            }
        }
        for &(old, len) in &self.removed {
            bounds.extend([old, old + len]);
        }
        bounds.sort_unstable();
        bounds.dedup();
        bounds
    }

    /// Whether section offset `at` means the same place when the section is
    /// rewritten where it stands (holes): a kept container's start or end,
    /// a place inside one kept as it was, or the section's bounds.
    fn stays_in_place(&self, at: u64) -> bool {
        at == 0
            || at == self.old_size
            || self.starting(at).is_some()
            || self.ending(at).is_some()
            || self.inside_same(at).is_some()
    }
}

/// A container's move: (old start, old length, new start, new length, same
/// bytes).
type Move = (u64, u64, u64, u64, bool);

impl Map {
    fn new(
        moves: Vec<Move>,
        removed: Vec<(u64, u64)>,
        old_size: u64,
        new_size: u64,
        shared_end: bool,
    ) -> Map {
        let sorted = apart(moves.iter().map(|m| (m.0, m.1))) && apart(removed.iter().copied());
        Map {
            moves,
            removed,
            old_size,
            new_size,
            shared_end,
            sorted,
        }
    }

    /// The first move that starts at `at`.
    fn starting(&self, at: u64) -> Option<&Move> {
        if !self.sorted {
            return self.moves.iter().find(|m| m.0 == at);
        }
        let i = self.moves.partition_point(|m| m.0 < at);
        self.moves.get(i).filter(|m| m.0 == at)
    }

    /// The first move that ends at `at`.
    fn ending(&self, at: u64) -> Option<&Move> {
        if !self.sorted {
            return self.moves.iter().find(|m| m.0.checked_add(m.1) == Some(at));
        }
        let i = self.moves.partition_point(|m| m.0 + m.1 < at);
        self.moves.get(i).filter(|m| m.0 + m.1 == at)
    }

    /// The first move of a container kept as it was with `at` inside it,
    /// past its start.
    fn inside_same(&self, at: u64) -> Option<&Move> {
        let inside = |m: &&Move| m.4 && at > m.0 && at - m.0 < m.1;
        if !self.sorted {
            return self.moves.iter().find(inside);
        }
        let i = self.moves.partition_point(|m| m.0 < at);
        i.checked_sub(1)
            .and_then(|i| self.moves.get(i))
            .filter(inside)
    }

    /// Whether a container that goes starts at `at`.
    fn removed_at(&self, at: u64) -> bool {
        if !self.sorted {
            return self.removed.iter().any(|r| r.0 == at);
        }
        self.removed.binary_search_by_key(&at, |r| r.0).is_ok()
    }
}

/// Whether the extents `(start, length)` are in order of their starts, none
/// empty, none past the end of the address space, and none overlapping the
/// next.
fn apart(extents: impl Iterator<Item = (u64, u64)>) -> bool {
    let mut end = 0u64;
    for (start, len) in extents {
        match start.checked_add(len) {
            Some(e) if len > 0 && start >= end => end = e,
            _ => return false,
        }
    }
    true
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
    t: &Target<'_>,
    map: &Map,
    patches: &mut Patches,
    at: u64,
    place: u64,
    new_value: u64,
    target: u64,
    point: Point,
) -> Result<bool, Unsafe> {
    let Some(new) = map.remap_as(target, t.addr, point)? else {
        return Ok(false);
    };
    patches.u64(at + 16, new.wrapping_sub(new_value));
    if let Some(w) = t.file_offset(place) {
        if t.word(w) == Some(target) {
            patches.u64(w, new);
        }
    }
    Ok(true)
}

/// `data` (a 64-bit little-endian ELF file) with its section of `size`
/// bytes at file `offset` replaced by `containers`, packed from its start at
/// the section's alignment; `Ok(None)` when that frees no whole page (nothing
/// to gain).
///
/// In three steps: the plan ([`Map`]: where each container goes;
/// [`Layout`]: where the segments, the program header table and what is
/// in its way go), the patches every reference into the moving bytes needs
/// (or the reason there is one that cannot be patched), and the bytes
/// written from both. The result is checked against the original by code
/// that shares none of this (`compare`).
pub fn compact<'a>(
    data: &'a [u8],
    offset: u64,
    size: u64,
    containers: &mut [Placed<'a>],
) -> Result<Option<Output<'a>>, Unsafe> {
    let t = Target::parse(data, offset, size)?;
    let Some(map) = Map::plan(&t, containers) else {
        return Ok(None);
    };
    if t.kind == elf::ET_REL || !t.alloc {
        return compact_unloaded(&t, &map, containers);
    }
    let Some(layout) = Layout::plan(&t, &map)? else {
        return Ok(None);
    };
    // What refers into the section, and into what moves out of the
    // program header table's way, is searched for at once.
    let mut together = vec![(t.addr, t.addr + t.size)];
    together.extend(layout.block.iter().map(|(b, _)| b.range()));
    let scan = t.scan(&together);
    let mut patches = Patches::default();
    patches.put(t.phoff, &program_header_table(&t, &map, &layout)?);
    if layout.split {
        patches.u16(0x38, (t.phnum + 1) as u16);
    }
    patch_sections(
        &mut patches,
        t.shdrs,
        t.endian,
        t.shoff,
        t.shentsize,
        t.index,
        map.new_size,
        layout.cut,
        layout.shift,
    )?;
    patch_references(&t, &map, &scan, &mut patches)?;
    patch_symbols(
        &mut patches,
        data,
        t.shdrs,
        t.endian,
        t.index,
        t.addr,
        &|v, b, p| map.remap_as(v, b, p),
        size,
        map.new_size,
        &|at| map.gone(at),
    )?;
    if let Some((block, to)) = &layout.block {
        move_block(&t, &layout, block, *to, &scan, &mut patches)?;
    }
    Ok(Some(write_loaded(&t, &layout, &patches, containers)))
}

/// The file and its offload section, as the patcher reads them.
struct Target<'a> {
    data: &'a [u8],
    endian: LE,
    machine: u16,
    kind: u16,
    shdrs: &'a [elf::SectionHeader64<LE>],
    phdrs: &'a [elf::ProgramHeader64<LE>],
    names: Option<object::read::StringTable<'a>>,
    /// The program header table: offset, entries; the section header
    /// table: offset, entry size.
    phoff: u64,
    phnum: u64,
    shoff: u64,
    shentsize: u64,
    /// The offload section: index, file offset, size, address, alignment,
    /// whether it is loaded.
    index: usize,
    offset: u64,
    size: u64,
    addr: u64,
    align: u64,
    alloc: bool,
    /// The addresses of the fat-binary wrappers' two pointer fields, in
    /// order ([`Target::points_at`]).
    wrapper_fields: Vec<u64>,
}

/// The addresses of the pointer fields (fat binary, and the prelinked
/// binaries of CUDA's version 2) of every wrapper in the loaded
/// `.hipFatBinSegment` and `.nvFatBinSegment` sections, in order.
fn wrapper_fields(
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

impl<'a> Target<'a> {
    /// What a pointer stored at address `place` is known to point at: a
    /// container's start in a fat-binary wrapper's pointer fields (the
    /// registration code clang and nvcc emit hands that pointer to
    /// `__hipRegisterFatBinary` / `__cudaRegisterFatBinary`, which read a
    /// container there), where one container may end as the next begins;
    /// anything else, unknown.
    fn points_at(&self, place: u64) -> Point {
        if self.wrapper_fields.binary_search(&place).is_ok() {
            Point::Start
        } else {
            Point::Unknown
        }
    }

    fn parse(data: &'a [u8], offset: u64, size: u64) -> Result<Target<'a>, Unsafe> {
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
        Ok(Target {
            wrapper_fields: wrapper_fields(data, shdrs, endian, names),
            data,
            endian,
            machine: header.e_machine(endian),
            kind: header.e_type(endian),
            shdrs,
            phdrs,
            names,
            phoff: header.e_phoff(endian),
            phnum: u64::from(header.e_phnum(endian)),
            shoff: header.e_shoff(endian),
            shentsize: u64::from(header.e_shentsize(endian)),
            index,
            offset,
            size,
            addr: section.sh_addr(endian),
            align: section.sh_addralign(endian).clamp(1, PAGE),
            alloc: section.sh_flags(endian) & u64::from(elf::SHF_ALLOC) != 0,
        })
    }

    /// The file offset of the 8 bytes at address `vaddr`, if loaded from the file.
    fn file_offset(&self, vaddr: u64) -> Option<u64> {
        let e = self.endian;
        self.phdrs.iter().find_map(|p| {
            (p.p_type(e) == elf::PT_LOAD
                && vaddr >= p.p_vaddr(e)
                && vaddr.saturating_add(8) <= p.p_vaddr(e).saturating_add(p.p_filesz(e)))
            .then(|| p.p_offset(e) + (vaddr - p.p_vaddr(e)))
        })
    }

    /// The 8-byte word at file offset `at`.
    fn word(&self, at: u64) -> Option<u64> {
        self.data
            .get(at as usize..(at as usize).checked_add(8)?)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
    }

    /// The scan for references no relocation describes, into the
    /// `together` ranges (searched for at once) or any other.
    fn scan(&self, together: &[(u64, u64)]) -> refs::Scan<'a> {
        let file = refs::File {
            data: self.data,
            shdrs: self.shdrs,
            endian: self.endian,
            machine: self.machine,
            fixed: self.kind == elf::ET_EXEC,
            index: self.index,
        };
        refs::Scan::new(file, together)
    }
}

impl Map {
    /// Where each container goes: packed from the section's start at its
    /// alignment; `None` when the section would not shrink.
    fn plan(t: &Target<'_>, containers: &[Placed<'_>]) -> Option<Map> {
        let mut new_size = 0u64;
        let mut moves = Vec::new();
        let mut removed = Vec::new();
        for c in containers {
            if c.output.is_empty() {
                removed.push((c.old, c.old_len));
                continue;
            }
            let at = new_size.next_multiple_of(t.align);
            moves.push((c.old, c.old_len, at, c.output.len(), c.same));
            new_size = at + c.output.len();
        }
        if new_size >= t.size {
            return None;
        }
        let e = t.endian;
        let shared_end = t.kind != elf::ET_REL
            && t.shdrs.iter().enumerate().any(|(i, s)| {
                i != t.index
                    && s.sh_flags(e) & u64::from(elf::SHF_ALLOC) != 0
                    && s.sh_size(e) > 0
                    && Some(s.sh_addr(e)) == t.addr.checked_add(t.size)
            });
        Some(Map::new(moves, removed, t.size, new_size, shared_end))
    }

    /// Whether section offset `at` lies in a container that goes.
    fn gone(&self, at: u64) -> bool {
        let holds = |&(old, len): &(u64, u64)| at >= old && at - old < len;
        if !self.sorted {
            return self.removed.iter().any(holds);
        }
        let i = self.removed.partition_point(|r| r.0 <= at);
        i.checked_sub(1)
            .and_then(|i| self.removed.get(i))
            .is_some_and(holds)
    }

    /// An address (or section offset, for objects: `base` 0) into the
    /// section, moved; `None` for one outside it; an error for one that has
    /// no place in the result.
    fn remap_as(&self, value: u64, base: u64, point: Point) -> Result<Option<u64>, Unsafe> {
        if value < base || value - base > self.old_size {
            return Ok(None);
        }
        // The section's end is where the next section starts: a pointer of
        // unknown kind there is that section's, which keeps its address (a
        // function at the start of `.text` right after `.nv_fatbin`).
        if value - base == self.old_size && self.shared_end && point == Point::Unknown {
            return Ok(None);
        }
        self.map(value - base, point)
            .map(|v| Some(base + v))
            .ok_or_else(|| {
                Unsafe::not_in_place(format!(
                    "something points to {value:#x}, which has no place in the result (inside a rewritten container, in one that goes, or where two places meet)"
                ))
            })
    }

    fn remap(&self, value: u64, base: u64) -> Result<Option<u64>, Unsafe> {
        self.remap_as(value, base, Point::Unknown)
    }
}

/// A relocatable object, or a section that is not loaded: only file offsets
/// move (the sections after this one, by the freed bytes rounded down to
/// their largest alignment), and an object's section-relative symbols and
/// relocations against the section.
fn compact_unloaded<'a>(
    t: &Target<'a>,
    map: &Map,
    containers: &mut [Placed<'a>],
) -> Result<Option<Output<'a>>, Unsafe> {
    let e = t.endian;
    let cut = t.offset + t.size;
    let later_align = t
        .shdrs
        .iter()
        .filter(|s| s.sh_offset(e) >= cut && s.sh_type(e) != elf::SHT_NOBITS)
        .map(|s| s.sh_addralign(e).max(1))
        .chain([8])
        .max()
        .unwrap_or(8);
    if t.phdrs
        .iter()
        .any(|p| p.p_type(e) == elf::PT_LOAD && p.p_offset(e).saturating_add(p.p_filesz(e)) > cut)
    {
        return Err(unsafe_(
            "loaded segments follow a section that is not loaded",
        ));
    }
    let shift = ((t.size - map.new_size) / later_align) * later_align;
    if shift == 0 {
        return Ok(None);
    }
    if t.kind == elf::ET_REL {
        differences_unseen(t)?;
    }
    let mut patches = Patches::default();
    patch_sections(
        &mut patches,
        t.shdrs,
        e,
        t.shoff,
        t.shentsize,
        t.index,
        map.new_size,
        cut,
        shift,
    )?;
    let remap_as = |v, b, p| map.remap_as(v, b, p);
    // Relocations and symbols of an object: section-relative.
    let base = if t.kind == elf::ET_REL { 0 } else { t.addr };
    patch_symbols(
        &mut patches,
        t.data,
        t.shdrs,
        e,
        t.index,
        base,
        &remap_as,
        t.size,
        map.new_size,
        &|at| map.gone(at),
    )?;
    if t.kind == elf::ET_REL {
        patch_object_relocations(&mut patches, t.data, t.shdrs, e, t.index, &remap_as)?;
    }
    let mut out = Output::default();
    patches.copy(t.data, 0, t.offset, &mut out);
    out.extend(packed(containers, t.align));
    out.pad_to(cut - shift);
    patches.copy(t.data, cut, t.data.len() as u64, &mut out);
    Ok(Some(out))
}

/// Where a loaded file's pieces go: the section's segment ends with the
/// kept containers (and the sections moved out of the program header
/// table's way); what followed the section in it becomes a segment of its
/// own at its addresses; the file from `cut` on moves back by `shift`.
struct Layout {
    /// The segment holding the section: its index, address, file offset,
    /// sizes in the file and in memory, flags.
    load: usize,
    lv: u64,
    lo: u64,
    lf: u64,
    lm: u64,
    flags: u32,
    /// Whether what follows the section in its segment becomes a segment of
    /// its own.
    split: bool,
    /// The sections in the program header table's way, and their new address.
    block: Option<(room::Block, u64)>,
    /// Where the first part of the segment ends.
    seg1_end: u64,
    /// Where the second part starts, in the original file and in memory.
    cut: u64,
    v2: u64,
    /// How far back everything from `cut` on moves in the file.
    shift: u64,
    /// The original's code, by address: where a part keeps execute.
    code: Vec<(u64, u64)>,
}

/// Why compaction frees nothing though `removable` bytes could go: `None`
/// (nothing to gain) when they are less than a 4 KiB page; else an error
/// that says so in the segment's own page, `granule` bytes (up to 2 MiB:
/// a segment moves in the file by whole multiples of its alignment), after
/// which they are left as holes instead.
fn too_little(removable: u64, granule: u64) -> Result<Option<Layout>, Unsafe> {
    if removable < PAGE {
        return Ok(None);
    }
    Err(unsafe_(format!(
        "the {removable} bytes that could go do not free one of the {granule}-byte pages its \
         segment is aligned to"
    )))
}

impl Layout {
    /// The layout of the compacted file; `None` when it frees no page.
    fn plan(t: &Target<'_>, map: &Map) -> Result<Option<Layout>, Unsafe> {
        let e = t.endian;
        let (offset, size, addr) = (t.offset, t.size, t.addr);
        let load = t
            .phdrs
            .iter()
            .position(|p| {
                p.p_type(e) == elf::PT_LOAD
                    && p.p_offset(e) <= offset
                    && offset.saturating_add(size) <= p.p_offset(e).saturating_add(p.p_filesz(e))
            })
            .ok_or_else(|| unsafe_("the offload section is in no loaded segment"))?;
        let seg = &t.phdrs[load];
        let (lv, lo, lf, lm) = (
            seg.p_vaddr(e),
            seg.p_offset(e),
            seg.p_filesz(e),
            seg.p_memsz(e),
        );
        if lv.wrapping_sub(lo) != addr.wrapping_sub(offset) {
            return Err(unsafe_(
                "the section's address and offset disagree with its segment's",
            ));
        }
        let page = seg.p_align(e).clamp(PAGE, 1 << 21);
        // Offsets after the cut move by a multiple of every later segment's
        // alignment, so each stays congruent to its address.
        let step = t
            .phdrs
            .iter()
            .filter(|p| p.p_type(e) == elf::PT_LOAD && p.p_offset(e) > offset)
            .map(|p| p.p_align(e).max(1))
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
        if relative_type(t.machine).is_none()
            && t.shdrs.iter().any(|s| {
                matches!(s.sh_type(e), elf::SHT_RELA | elf::SHT_REL | elf::SHT_RELR)
                    && s.sh_size(e) > 0
            })
        {
            return Err(unsafe_(format!(
                "the relocations of machine {} are not rewritten",
                t.machine
            )));
        }
        let split = lv.saturating_add(lm) > addr.saturating_add(size);
        // The program header table: one more entry when the segment splits,
        // in place, where binutils and elfutils look for it.
        let table_end = t.phoff.saturating_add(t.phnum * PHDR_SIZE);
        if table_end > offset || t.phnum + 1 > u64::from(u16::MAX) {
            return Err(unsafe_(
                "the program header table does not lie before the section",
            ));
        }
        if t.phoff < offset + size && table_end > offset {
            return Err(unsafe_(
                "the program header table lies in the bytes that change",
            ));
        }
        let block = if split && !room_after(t, table_end) {
            // No room: the sections in the table's way move to the freed bytes.
            let b = room::block(t.shdrs, t.phdrs, t.names, e, table_end)?;
            if b.offset + b.len > offset {
                return Err(unsafe_(
                    "the sections in the program header table's way reach the offload section",
                ));
            }
            Some(b)
        } else {
            None
        };
        let kept_end = addr + map.new_size;
        // Where the block goes: after the kept containers, at an address
        // congruent to its own modulo its alignment.
        let block = match block {
            Some(b) if kept_end > b.addr => {
                let to = (kept_end - b.addr)
                    .checked_next_multiple_of(b.align)
                    .and_then(|d| b.addr.checked_add(d))
                    .filter(|n| n.checked_add(b.len).is_some_and(|end| end <= lv + lm))
                    .ok_or_else(|| {
                        unsafe_("the sections in the program header table's way do not fit after the kept containers")
                    })?;
                Some((b, to))
            }
            Some(_) => {
                return Err(unsafe_(
                    "the sections in the program header table's way lie after the offload section",
                ))
            }
            None => None,
        };
        let seg1_end = block.as_ref().map_or(kept_end, |(b, to)| to + b.len);
        let (cut, v2) = if split {
            let v2 = (addr + size) / page * page;
            if v2 <= lv {
                return too_little(size - map.new_size, page);
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
        if shift == 0 && free >= PAGE {
            // Offsets after the cut move by whole alignments: the bytes that
            // could go are left as holes instead (module `lib`'s fallback).
            return Err(unsafe_(format!(
                "the {free} bytes it would free are less than the {step}-byte alignment its \
                 segments keep between file offsets and addresses"
            )));
        }
        if shift == 0 {
            return too_little(size - map.new_size, page);
        }
        let code = t
            .shdrs
            .iter()
            .filter(|s| s.sh_flags(e) & u64::from(elf::SHF_EXECINSTR) != 0)
            .map(|s| (s.sh_addr(e), s.sh_addr(e).saturating_add(s.sh_size(e))))
            .collect();
        Ok(Some(Layout {
            load,
            lv,
            lo,
            lf,
            lm,
            flags: seg.p_flags(e),
            split,
            block,
            seg1_end,
            cut,
            v2,
            shift,
            code,
        }))
    }

    /// The flags of the part of the split segment from `from` to `to`: the
    /// segment's, but a part that holds no code is not executable (the
    /// segment held `.text` beside the section).
    fn flags(&self, from: u64, to: u64) -> u32 {
        let code = self.code.iter().any(|&(s, e)| s < to && e > from);
        if self.split && !code {
            self.flags & !elf::PF_X
        } else {
            self.flags
        }
    }

    /// Where the block's bytes go in the file.
    fn block_offset(&self, to: u64) -> u64 {
        self.lo.wrapping_add(to - self.lv)
    }
}

/// Whether the program header table, ending at `table_end`, has room for
/// one more entry before what follows it: the first section, the section
/// header table or the first segment content after it.
fn room_after(t: &Target<'_>, table_end: u64) -> bool {
    let e = t.endian;
    let first = t
        .shdrs
        .iter()
        .filter(|s| s.sh_type(e) != elf::SHT_NULL)
        .map(|s| s.sh_offset(e))
        .chain([t.shoff])
        .chain(
            t.phdrs
                .iter()
                .filter(|p| p.p_filesz(e) > 0 && p.p_offset(e) > 0)
                .map(|p| p.p_offset(e)),
        )
        .filter(|&o| o >= table_end)
        .min()
        .unwrap_or(u64::MAX);
    first - table_end >= PHDR_SIZE
}

/// The new program header table: the section's segment cut to its first
/// part, the second part after it, the headers of the block moved with it,
/// `PT_PHDR` one entry longer, every offset after the cut moved back.
fn program_header_table(t: &Target<'_>, map: &Map, l: &Layout) -> Result<Vec<u8>, Unsafe> {
    let e = t.endian;
    let mut table = Vec::with_capacity(((t.phnum + 1) * PHDR_SIZE) as usize);
    for (i, p) in t.phdrs.iter().enumerate() {
        let mut h = *p;
        let (ty, off, filesz) = (p.p_type(e), p.p_offset(e), p.p_filesz(e));
        if i == l.load {
            h.p_filesz.set(e, l.seg1_end - l.lv);
            h.p_memsz.set(e, l.seg1_end - l.lv);
            h.p_flags.set(e, l.flags(l.lv, l.seg1_end));
            table.extend_from_slice(object::bytes_of(&h));
            if l.split {
                let mut second = *p;
                second.p_offset.set(e, l.cut - l.shift);
                second.p_vaddr.set(e, l.v2);
                second.p_paddr.set(e, l.v2);
                second.p_filesz.set(e, l.lv + l.lf - l.v2);
                second.p_memsz.set(e, l.lv + l.lm - l.v2);
                second.p_flags.set(e, l.flags(l.v2, l.lv + l.lm));
                table.extend_from_slice(object::bytes_of(&second));
            }
            continue;
        }
        let in_block = l.block.as_ref().filter(|(b, _)| {
            ty != elf::PT_LOAD
                && filesz > 0
                && off >= b.offset
                && off
                    .checked_add(filesz)
                    .is_some_and(|end| end <= b.offset + b.len)
        });
        if ty == elf::PT_PHDR {
            if l.split {
                h.p_filesz.set(e, (t.phnum + 1) * PHDR_SIZE);
                h.p_memsz.set(e, (t.phnum + 1) * PHDR_SIZE);
            }
        } else if let Some((b, to)) = in_block {
            // A note or the interpreter's name, moved with its sections.
            let new_addr = to.wrapping_add(off - b.offset);
            h.p_offset
                .set(e, l.block_offset(*to).wrapping_add(off - b.offset));
            h.p_vaddr.set(e, new_addr);
            h.p_paddr.set(e, new_addr);
        } else if off >= l.cut {
            h.p_offset.set(e, off - l.shift);
        } else if filesz > 0 && off + filesz > t.offset + map.new_size && off < l.cut {
            return Err(unsafe_(format!(
                "a program header (type {ty:#x}) covers the bytes that would go"
            )));
        }
        table.extend_from_slice(object::bytes_of(&h));
    }
    Ok(table)
}

/// Every reference into the section that compaction moves, patched:
/// OpenMP's device-image table, the dynamic relocations (relative ones,
/// symbol + addend), RELR words, the fat-binary wrappers. Then what refers
/// into it with no relocation ([`refs`]) refuses the move, and so does a
/// section nothing was found to refer to (what does is unknown).
fn patch_references(
    t: &Target<'_>,
    map: &Map,
    scan: &refs::Scan<'_>,
    patches: &mut Patches,
) -> Result<(), Unsafe> {
    let (e, addr) = (t.endian, t.addr);
    let remap_as = |v, b, p| map.remap_as(v, b, p);
    let file_offset = |v| t.file_offset(v);
    let word = |at| t.word(at);
    let relative = relative_type(t.machine);
    let mut referenced = 0usize;
    // OpenMP's device-image table, when an image of it goes.
    let in_removed = |value: u64| value >= addr && map.gone(value - addr);
    let omp = omp_table(
        t.data,
        t.shdrs,
        e,
        relative,
        addr,
        t.size,
        &file_offset,
        &in_removed,
    )?;
    if let Some(table) = &omp {
        table.patch(patches, t.data, &remap_as, addr)?;
        referenced += 1;
    }
    for s in t.shdrs {
        match s.sh_type(e) {
            elf::SHT_REL if s.sh_size(e) > 0 => {
                return Err(unsafe_(
                    "REL relocations (without addends) are not rewritten",
                ));
            }
            // Relocations the dynamic loader applies; a non-loaded table
            // (`--emit-relocs`) describes code and data already linked, whose
            // references the scan below finds.
            elf::SHT_RELA if s.sh_flags(e) & u64::from(elf::SHF_ALLOC) != 0 => {
                referenced += patch_relocations(t, map, s, omp.as_ref(), patches)?;
            }
            elf::SHT_RELR => {
                let Ok(words) = s.data_as_array::<object::U64<LE>, _>(e, t.data) else {
                    return Err(unsafe_("a RELR section cannot be read"));
                };
                for place in relr_places(words, e) {
                    if omp.as_ref().is_some_and(|table| table.holds(place)) {
                        return Err(unsafe_(
                            "OpenMP's device-image table is relocated by RELR, which is not rewritten",
                        ));
                    }
                    let Some(f) = file_offset(place) else {
                        continue;
                    };
                    if let Some(value) = word(f) {
                        if let Some(new) = map.remap_as(value, addr, t.points_at(place))? {
                            patches.u64(f, new);
                            referenced += 1;
                        }
                    }
                }
            }
            _ => {}
        }
    }
    referenced += patch_wrappers(t, map, patches)?;
    // What refers into the section with no relocation (code, the data of
    // a position-dependent file, other sections' symbols): nothing of it is
    // rewritten, so nothing may move. The section's end included, though
    // another section may start there: code cannot say which it means.
    let mut unseen = scan.references(addr, addr + t.size, &|at| patches.covers(at));
    if unseen.is_empty() {
        let bounds: Vec<u64> = map.moving_bounds().iter().map(|b| addr + b).collect();
        unseen = scan.exact_words(&bounds, &|at| patches.covers(at));
    }
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
    Ok(())
}

/// The places a RELR table relocates.
fn relr_places(words: &[object::U64<LE>], e: LE) -> Vec<u64> {
    let mut places = Vec::new();
    let mut next = 0u64;
    for w in words {
        let w = w.get(e);
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
    }
    places
}

/// One table of dynamic relocations (`s`): each that reaches the section
/// rewritten, or the reason it cannot be; how many were.
fn patch_relocations(
    t: &Target<'_>,
    map: &Map,
    s: &elf::SectionHeader64<LE>,
    omp: Option<&OmpTable>,
    patches: &mut Patches,
) -> Result<usize, Unsafe> {
    let (e, addr) = (t.endian, t.addr);
    let remap_as = |v, b, p| map.remap_as(v, b, p);
    let relative = relative_type(t.machine);
    let Ok(relas) = s.data_as_array::<elf::Rela64<LE>, _>(e, t.data) else {
        return Err(unsafe_("a relocation section cannot be read"));
    };
    let syms = t
        .shdrs
        .get(s.sh_link(e) as usize)
        .filter(|l| s.sh_link(e) != 0 && l.sh_type(e) == elf::SHT_DYNSYM)
        .map(|l| l.data_as_array::<elf::Sym64<LE>, _>(e, t.data))
        .transpose()
        .map_err(|_| unsafe_("a symbol table cannot be read"))?
        .unwrap_or(&[]);
    let mut referenced = 0;
    for (i, r) in relas.iter().enumerate() {
        let at = s.sh_offset(e) + i as u64 * 24;
        let (ty, sym) = (r.r_type(e, false), r.r_sym(e, false));
        let addend = r.r_addend(e) as u64;
        let place = r.r_offset(e);
        if let Some(table) = omp.filter(|table| table.holds(place)) {
            // A slot of the table: it moves with its entry.
            table.move_relocation(patches, at, place, addend, &remap_as, addr)?;
            continue;
        }
        let rewritten = if Some(ty) == relative && sym == 0 {
            relocate(t, map, patches, at, place, 0, addend, t.points_at(place))?
        } else if sym == 0 {
            // An addend alone (IRELATIVE: a resolver's address).
            if map.remap(addend, addr)?.is_some() {
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
            let value = symbol.st_value(e);
            let own = usize::from(symbol.st_shndx(e)) == t.index;
            let target = value.wrapping_add(addend);
            if symbol.st_shndx(e) == elf::SHN_UNDEF || (!own && map.remap(target, addr)?.is_none())
            {
                false
            } else if absolute_type(t.machine, ty) {
                // S + A: the symbol moves (its entry is patched with the
                // others), the addend keeps the target.
                let new_value = if own {
                    map.remap_as(value, addr, Point::Start)?.unwrap_or(value)
                } else {
                    value
                };
                relocate(
                    t,
                    map,
                    patches,
                    at,
                    place,
                    new_value,
                    target,
                    t.points_at(place),
                )?
            } else {
                return Err(unsafe_(format!(
                    "a relocation of type {ty} at {place:#x} refers to {target:#x} in the section, and is not rewritten"
                )));
            }
        };
        referenced += usize::from(rewritten);
    }
    Ok(referenced)
}

/// The fat-binary wrappers' pointers (a non-PIE executable has no
/// relocation for them); how many point into the section.
fn patch_wrappers(t: &Target<'_>, map: &Map, patches: &mut Patches) -> Result<usize, Unsafe> {
    let e = t.endian;
    let mut referenced = 0;
    for s in t.shdrs {
        let name = t.names.and_then(|n| s.name(e, n).ok()).unwrap_or_default();
        if name != b".hipFatBinSegment" && name != b".nvFatBinSegment" {
            continue;
        }
        let (so, sz) = (s.sh_offset(e), s.sh_size(e));
        let Some(bytes) = t.data.get(so as usize..so.saturating_add(sz) as usize) else {
            return Err(unsafe_(
                "a fat-binary wrapper section lies outside the file",
            ));
        };
        // Both pointers: the fat binary, and (CUDA version 2) the
        // prelinked fat binaries.
        for (at, wrapper) in FatbinWrapper::all(bytes) {
            let mut w = wrapper.map_err(|err| {
                unsafe_(format!(
                    "a fat-binary wrapper at {:#x} cannot be read, so where it points is unknown: {err}",
                    so + at
                ))
            })?;
            let (fatbin, aux) = (
                map.remap_as(w.fatbin, t.addr, Point::Start)?,
                map.remap_as(w.aux, t.addr, Point::Start)?,
            );
            if fatbin.is_some() || aux.is_some() {
                w.fatbin = fatbin.unwrap_or(w.fatbin);
                w.aux = aux.unwrap_or(w.aux);
                patches.put(so + at, &w.to_bytes());
                referenced += 1;
            }
        }
    }
    Ok(referenced)
}

/// The sections in the program header table's way, moved to `to`: their
/// headers, `.dynamic`'s pointers to them and their symbols follow them,
/// and the section headers are renumbered in address order; anything else
/// that refers to them keeps the file as it is.
fn move_block(
    t: &Target<'_>,
    l: &Layout,
    b: &room::Block,
    to: u64,
    scan: &refs::Scan<'_>,
    patches: &mut Patches,
) -> Result<(), Unsafe> {
    let e = t.endian;
    let file_delta = l.block_offset(to).wrapping_sub(b.offset);
    let delta = to - b.addr;
    let dynamic = move_dynamic_pointers(patches, t.data, t.shdrs, e, b, delta)?;
    if let Some(why) = room::referenced(scan, b, &|at| dynamic.contains(&at)) {
        return Err(unsafe_(format!(
            "the program header table has no room for one more entry, and what is in its way cannot move: {why}"
        )));
    }
    for &i in &b.sections {
        let at = t.shoff + i as u64 * t.shentsize;
        patches.u64(at + 0x10, t.shdrs[i].sh_addr(e).wrapping_add(delta));
        patches.u64(at + 0x18, t.shdrs[i].sh_offset(e).wrapping_add(file_delta));
    }
    move_block_symbols(patches, t.data, t.shdrs, e, b, delta)?;
    renumber(
        patches,
        t.data,
        t.shdrs,
        e,
        t.shoff,
        t.shentsize,
        t.index,
        b,
    )
}

/// The file: up to the section, its new bytes, the moved sections, the
/// rest moved back, each with its patches.
fn write_loaded<'a>(
    t: &Target<'a>,
    l: &Layout,
    patches: &Patches,
    containers: &mut [Placed<'a>],
) -> Output<'a> {
    let mut out = Output::default();
    patches.copy(t.data, 0, t.offset, &mut out);
    out.extend(packed(containers, t.align));
    if let Some((b, to)) = &l.block {
        out.pad_to(l.block_offset(*to));
        patches.copy(t.data, b.offset, b.offset + b.len, &mut out);
    }
    out.pad_to(l.cut - l.shift);
    patches.copy(t.data, l.cut, t.data.len() as u64, &mut out);
    out
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
    for table in symbol_tables(data, shdrs, endian)? {
        for (i, sym) in table.syms.iter().enumerate() {
            let shndx = sym.st_shndx(endian);
            if shndx != elf::SHN_UNDEF && shndx < elf::SHN_LORESERVE {
                let new = renamed(u32::from(shndx)) as u16;
                if new != shndx {
                    patches.u16(table.at(i) + 6, new);
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
    for table in symbol_tables(data, shdrs, endian)? {
        for (i, sym) in table.syms.iter().enumerate() {
            // By value: a linker may name a section for a symbol outside
            // it (lld's `__preinit_array_end` in `.note.ABI-tag`, at the
            // ELF header), which stays. A TLS symbol's value is an offset
            // in the TLS template, which does not move.
            if sym.st_type() != elf::STT_TLS && block.holds(sym.st_value(endian)) {
                patches.u64(table.at(i) + 8, sym.st_value(endian).wrapping_add(delta));
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

/// Every relative relocation of a file's `SHT_RELA` tables: where, and what
/// it points to, sorted by where (of two at one place, the later).
struct Words(Vec<(u64, u64)>);

impl Words {
    fn relative(
        data: &[u8],
        shdrs: &[elf::SectionHeader64<LE>],
        endian: LE,
        relative: u32,
    ) -> Words {
        let mut words = Vec::new();
        for s in shdrs.iter().filter(|s| s.sh_type(endian) == elf::SHT_RELA) {
            let Ok(relas) = s.data_as_array::<elf::Rela64<LE>, _>(endian, data) else {
                continue;
            };
            words.extend(
                relas
                    .iter()
                    .filter(|r| r.r_type(endian, false) == relative && r.r_sym(endian, false) == 0)
                    .map(|r| (r.r_offset(endian), r.r_addend(endian) as u64)),
            );
        }
        // Stable, and linear on tables already sorted, as linkers write them.
        words.sort_by_key(|&(at, _)| at);
        let mut last: Vec<(u64, u64)> = Vec::with_capacity(words.len());
        for w in words {
            match last.last_mut() {
                Some(l) if l.0 == w.0 => *l = w,
                _ => last.push(w),
            }
        }
        Words(last)
    }

    fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.0.iter().copied()
    }

    /// What the relocation at `at` points to.
    fn get(&self, at: u64) -> Option<u64> {
        let i = self.0.binary_search_by_key(&at, |&(a, _)| a).ok()?;
        Some(self.0[i].1)
    }
}

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
    let words = Words::relative(data, shdrs, endian, relative);
    let into = |v: u64| v >= addr && v <= addr + size;
    // Slots: ImageStart and ImageEnd both into the section.
    let slots: Vec<u64> = words
        .iter()
        .filter(|&(at, v)| into(v) && words.get(at + 8).is_some_and(|e| into(e) && e > v))
        .map(|(at, _)| at)
        .collect();
    let value = |at: u64| words.get(at).unwrap_or_default();
    if slots.is_empty() || !slots.iter().any(|&at| in_removed(value(at))) {
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
        .filter(|&(at, v)| v == array && at >= 8)
        .map(|(at, _)| at - 8)
        .find(|&d| {
            file_offset(d)
                .and_then(|f| data.get(f as usize..f as usize + 4))
                .is_some_and(|b| u64::from(u32::from_le_bytes(b.try_into().unwrap())) == entries)
        })
        .ok_or_else(|| unsafe_("no __tgt_bin_desc counts the OpenMP device images"))?;
    let gone: Vec<bool> = slots.iter().map(|&at| in_removed(value(at))).collect();
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
    for table in symbol_tables(data, shdrs, endian)? {
        for (i, sym) in table.syms.iter().enumerate() {
            if usize::from(sym.st_shndx(endian)) != index || sym.st_type() == elf::STT_SECTION {
                continue;
            }
            let at = table.at(i);
            let value = sym.st_value(endian);
            // The section's own end, by the symbol's own word.
            let own_end = (value == base + size).then_some(Ok(Some(base + new_size)));
            let new = match own_end.unwrap_or_else(|| remap(value, base, Point::Start)) {
                Ok(Some(new)) => new,
                Ok(None) => continue,
                // A static symbol of an image that goes (clang-linker-wrapper
                // names each one): it names the section's end, empty. A
                // dynamic one could be used from outside: unsafe.
                Err(_) if !table.dynamic && gone(value - base) => {
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

/// In an object, the assembler resolves the difference of two symbols of
/// one section (`.quad end - start`) itself, leaving no relocation: a
/// section with two symbols or more (beyond its section symbol) may have
/// one such word somewhere, which a move would make stale, so it is
/// rewritten in place. nvcc's and clang's objects name their fat binary
/// with one symbol.
fn differences_unseen(t: &Target<'_>) -> Result<(), Unsafe> {
    let mut named = 0usize;
    for table in symbol_tables(t.data, t.shdrs, t.endian)? {
        named += table
            .syms
            .iter()
            .filter(|s| {
                usize::from(s.st_shndx(t.endian)) == t.index
                    && !matches!(s.st_type(), elf::STT_SECTION | elf::STT_FILE)
            })
            .count();
    }
    if named >= 2 {
        return Err(unsafe_(format!(
            "{named} symbols name places in the section, and the assembler resolves the difference of two of them with no relocation"
        )));
    }
    Ok(())
}

/// A symbol table (`.symtab` or `.dynsym`): its symbols and where they are.
struct Symbols<'d> {
    syms: &'d [elf::Sym64<LE>],
    offset: u64,
    dynamic: bool,
}

impl Symbols<'_> {
    /// The file offset of symbol `i`.
    fn at(&self, i: usize) -> u64 {
        self.offset + i as u64 * 24
    }
}

/// The file's symbol tables.
fn symbol_tables<'d>(
    data: &'d [u8],
    shdrs: &[elf::SectionHeader64<LE>],
    endian: LE,
) -> Result<Vec<Symbols<'d>>, Unsafe> {
    shdrs
        .iter()
        .filter(|s| matches!(s.sh_type(endian), elf::SHT_SYMTAB | elf::SHT_DYNSYM))
        .map(|s| {
            let syms = s
                .data_as_array::<elf::Sym64<LE>, _>(endian, data)
                .map_err(|_| unsafe_("a symbol table cannot be read"))?;
            Ok(Symbols {
                syms,
                offset: s.sh_offset(endian),
                dynamic: s.sh_type(endian) == elf::SHT_DYNSYM,
            })
        })
        .collect()
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
        let map = Map::new(
            vec![(0, 100, 0, 40, false), (4096, 50, 64, 50, true)],
            vec![(100, 50)],
            5000,
            114,
            false,
        );
        assert!(map.sorted);
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
        let meet = Map::new(
            vec![
                (0, 0x3000, 0, 0x1234, false),
                (0x3000, 0x10, 0x2000, 0x10, true),
            ],
            vec![],
            0x3010,
            0x2010,
            true,
        );
        assert_eq!(meet.map(0x3000, Point::Start), Some(0x2000));
        assert_eq!(meet.map(0x3000, Point::End), Some(0x1234));
        assert_eq!(meet.map(0x3000, Point::Unknown), None);
        // A container's end at the section's end is known; the bare section
        // end, shared with the next section, is not.
        assert_eq!(meet.map(0x3010, Point::End), Some(0x2010));
    }

    /// Lookups by binary search give what looking at every container
    /// gives, for containers apart, adjacent, kept as they were or not, and
    /// removed among them: at every offset near each edge.
    #[test]
    fn sorted_lookups_are_those_of_every_container() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for _ in 0..200 {
            let (mut moves, mut removed) = (Vec::new(), Vec::new());
            let (mut at, mut new) = (0u64, 0u64);
            for _ in 0..next(12) {
                at += next(3) * next(64);
                let len = 1 + next(100);
                if next(3) == 0 {
                    removed.push((at, len));
                } else {
                    let same = next(2) == 0;
                    let new_len = if same { len } else { 1 + next(len) };
                    moves.push((at, len, new, new_len, same));
                    new += new_len;
                }
                at += len;
            }
            let map = Map::new(moves, removed, at + next(3), new, next(2) == 0);
            assert!(map.sorted);
            let every = Map {
                sorted: false,
                moves: map.moves.clone(),
                removed: map.removed.clone(),
                ..map
            };
            let edges: Vec<u64> = map
                .moves
                .iter()
                .map(|m| (m.0, m.1))
                .chain(map.removed.iter().copied())
                .flat_map(|(a, l)| [a, a + l])
                .chain([0, map.old_size])
                .collect();
            for e in edges {
                for at in e.saturating_sub(2)..e + 3 {
                    for point in [Point::Start, Point::End, Point::Unknown] {
                        assert_eq!(map.map(at, point), every.map(at, point), "{at} {point:?}");
                    }
                    assert_eq!(map.gone(at), every.gone(at), "{at}");
                    assert_eq!(map.stays_in_place(at), every.stays_in_place(at), "{at}");
                }
            }
        }
        // Overlapping or out of order: every container is looked at.
        assert!(
            !Map::new(
                vec![(10, 5, 0, 5, true), (0, 5, 5, 5, true)],
                vec![],
                20,
                10,
                false
            )
            .sorted
        );
        assert!(!Map::new(vec![], vec![(0, 10), (5, 10)], 20, 0, false).sorted);
        assert!(!Map::new(vec![(0, 0, 0, 0, true)], vec![], 20, 0, false).sorted);
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
