//! The patches a compaction writes: relocations, RELR words, the
//! fat-binary wrappers, symbols and section headers, and what refers into
//! the section with none of them (the scan), which refuses the move.

use object::elf;
use object::read::elf::{Rela, SectionHeader, Sym};
use object::LittleEndian as LE;

use crate::refusal::{unsafe_, Unsafe};

use offload_loader::registration::FatbinWrapper;

use super::map::Map;
use super::omp::{omp_table, OmpTable};
use super::patches::Patches;
use super::point::Point;
use super::target::Target;
use crate::refs;

pub(super) fn relative_type(machine: u16) -> Option<u32> {
    match machine {
        elf::EM_X86_64 => Some(elf::R_X86_64_RELATIVE),
        elf::EM_AARCH64 => Some(elf::R_AARCH64_RELATIVE),
        _ => None,
    }
}

/// Whether relocation `ty` of `machine` writes S + A to a 64-bit word (so
/// that a new addend keeps its target when the symbol moves).
pub(super) fn absolute_type(machine: u16, ty: u32) -> bool {
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
/// Whether it pointed into the section. What `place` is (a wrapper's
/// field, [`Target::points_at`]) is looked up only for a target in the
/// section: most of a library's relocations are elsewhere.
pub(super) fn relocate(
    t: &Target<'_>,
    map: &Map,
    patches: &mut Patches,
    at: u64,
    place: u64,
    new_value: u64,
    target: u64,
) -> Result<bool, Unsafe> {
    if !map.covers(target, t.addr) {
        return Ok(false);
    }
    let Some(new) = map.remap_as(target, t.addr, t.points_at(place))? else {
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

/// Every reference into the section that compaction moves, patched:
/// OpenMP's device-image table, the dynamic relocations (relative ones,
/// symbol + addend), RELR words, the fat-binary wrappers. How many there
/// were: a section nothing was found to refer to cannot move (what does
/// is unknown).
pub(super) fn patch_references(
    t: &Target<'_>,
    map: &Map,
    patches: &mut Patches,
) -> Result<usize, Unsafe> {
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
                    if let Some(value) = word(f).filter(|&v| map.covers(v, addr)) {
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
    Ok(referenced)
}

/// What refers into the section with no relocation (code, the data of a
/// position-dependent file, a PIE's self-relative words, other sections'
/// symbols) to a place compaction moves: nothing of it is rewritten. The
/// section's end included, though another section may start there: code
/// cannot say which it means.
pub(super) fn unseen(
    t: &Target<'_>,
    map: &Map,
    scan: &refs::Scan<'_>,
    patches: &Patches,
) -> Vec<refs::Reference> {
    let addr = t.addr;
    // An exact reference to a boundary of kept containers that stays (the
    // first start, or a pinned one) stays true, whichever container it
    // names: the one that starts or the one that ends there.
    let stays = |r: &refs::Reference| {
        r.is_exact()
            && r.to
                .checked_sub(addr)
                .is_some_and(|at| at < map.old_size && map.map(at, Point::Unknown) == Some(at))
    };
    let mut unseen = scan.references(addr, addr + t.size, &|at| patches.covers(at));
    unseen.retain(|r| !stays(r));
    if !unseen.is_empty() {
        return unseen;
    }
    let (bounds, starts) = map.moving_bounds();
    let (all_bounds, all_starts) = map.all_bounds();
    let at = |v: Vec<u64>| v.into_iter().map(|b| addr + b).collect::<Vec<u64>>();
    scan.exact_words(
        (&at(all_bounds), &at(all_starts)),
        &at(bounds),
        &at(starts),
        &|at| patches.covers(at),
    )
}

/// The section offsets `unseen` name, when every reference is an exact one
/// (an instruction's operand, a word in data) to a boundary of kept
/// containers inside the section (a start, an end, or both where two meet):
/// pinned ([`Map::plan`]), the container that starts there keeps its
/// address and the one that ends there is placed to end there still, so
/// the references stay true whichever they mean. `None` when one of them
/// cannot be kept true so (an `ADRP` page, the section's end, a place
/// inside a container, another section's symbol).
pub(super) fn pins(unseen: &[refs::Reference], map: &Map, addr: u64) -> Option<Vec<u64>> {
    let mut pins: Vec<u64> = unseen
        .iter()
        .map(|r| {
            let at = r.to.checked_sub(addr)?;
            let boundary = map.starting(at).is_some() || map.ending(at).is_some();
            (r.is_exact() && at < map.old_size && boundary).then_some(at)
        })
        .collect::<Option<_>>()?;
    pins.sort_unstable();
    pins.dedup();
    Some(pins)
}

/// The refusal `unseen` (not empty) makes: compaction would move what they
/// refer to; holes remain where each names a place that stays when the
/// section is rewritten where it stands.
pub(super) fn refusal(unseen: &[refs::Reference], map: &Map, addr: u64) -> Unsafe {
    Unsafe {
        why: format!("{}: compaction would move what it refers to", unseen[0]),
        in_place: unseen
            .iter()
            .all(|r| r.kind != refs::Kind::Page && map.stays_in_place(r.to - addr)),
    }
}

/// The places a RELR table relocates.
pub(super) fn relr_places(words: &[object::U64<LE>], e: LE) -> Vec<u64> {
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
pub(super) fn patch_relocations(
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
            relocate(t, map, patches, at, place, 0, addend)?
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
                relocate(t, map, patches, at, place, new_value, target)?
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
pub(super) fn patch_wrappers(
    t: &Target<'_>,
    map: &Map,
    patches: &mut Patches,
) -> Result<usize, Unsafe> {
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

/// Section headers: the section's new size; the offsets of those after the
/// cut moved back, and the table's own offset (`e_shoff`) when it follows the
/// cut. A section other than this one inside the freed bytes is unsafe.
#[allow(clippy::too_many_arguments)]
pub(super) fn patch_sections(
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
pub(super) fn patch_symbols(
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
pub(super) fn differences_unseen(t: &Target<'_>) -> Result<(), Unsafe> {
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
pub(super) struct Symbols<'d> {
    pub(super) syms: &'d [elf::Sym64<LE>],
    pub(super) offset: u64,
    pub(super) dynamic: bool,
}

impl Symbols<'_> {
    /// The file offset of symbol `i`.
    pub(super) fn at(&self, i: usize) -> u64 {
        self.offset + i as u64 * 24
    }
}

/// The file's symbol tables.
pub(super) fn symbol_tables<'d>(
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
pub(super) fn patch_object_relocations(
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
