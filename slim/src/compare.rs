//! The result compared with its original, independently of the code that
//! wrote it: as the kernel and the dynamic loader would load both (every
//! `PT_LOAD` at its address, file bytes then zeros, with its permissions),
//! every byte outside the offload sections must be the same at the same
//! address (or, for a section that moved, at its new one), and every word
//! that differs must be a pointer whose old value maps to the new one
//! through the move, the move being learnt from the two files alone: the
//! containers the read-back paired image by image, and the sections found
//! by name at a new address. The program headers other than `PT_LOAD`
//! (`PT_INTERP`, `PT_DYNAMIC`, `PT_TLS`, `PT_GNU_RELRO`, `PT_GNU_EH_FRAME`,
//! `PT_NOTE`, ...), the section headers, the symbol tables and the
//! relocation tables are compared the same way. Objects and archive
//! members: every section outside the offload sections byte for byte, the
//! symbols and the relocations with their values mapped.
//!
//! What this does not model is refused, never passed: a result is only
//! used when it is proven to load as its original did.

use std::collections::HashMap;

use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, Rela, SectionHeader, Sym};
use object::LittleEndian as LE;
use offload_loader::discover::SectionRole;
use offload_loader::SectionContainers;
use rayon::prelude::*;

type Header = elf::FileHeader64<LE>;
type Shdr = elf::SectionHeader64<LE>;
type Phdr = elf::ProgramHeader64<LE>;

/// A container kept, where it was and where it is (file offsets), as the
/// read-back paired them by their images.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Kept {
    pub old: u64,
    pub new: u64,
}

/// Compares `result` with `original` (whole files; `before` and `after`
/// their offload sections, `kept` the containers paired between them).
pub(crate) fn same_behaviour(
    original: &[u8],
    before: &[SectionContainers<'_>],
    result: &[u8],
    after: &[SectionContainers<'_>],
    kept: &[Kept],
) -> Result<(), String> {
    // Rewritten where it stood (holes, or a raw container file of one
    // size): every byte outside the offload sections is the original's.
    if original.len() == result.len() && same_outside(original, result, before) {
        return Ok(());
    }
    if original.starts_with(b"!<arch>\n") {
        return archives(original, before, result, after, kept);
    }
    if !original.starts_with(b"\x7fELF") {
        // A raw container file: it is all offload code, which the read-back
        // checked image by image.
        return Ok(());
    }
    elf_file(original, before, result, after, kept, 0, 0)
}

/// Whether every byte outside the offload sections' file ranges is the
/// same (the files being of one length).
fn same_outside(original: &[u8], result: &[u8], before: &[SectionContainers<'_>]) -> bool {
    // An offload section is all offload code; in a section of host data
    // only its containers are.
    let mut ranges: Vec<(u64, u64)> = before
        .iter()
        .flat_map(|s| match s.section.role {
            SectionRole::Embedded => s
                .containers
                .iter()
                .flatten()
                .map(|c| (c.offset(), c.offset() + c.len()))
                .collect(),
            _ => vec![(
                s.section.file_offset,
                s.section.file_offset + s.section.size,
            )],
        })
        .collect();
    ranges.sort_unstable();
    let mut at = 0u64;
    for (start, end) in ranges.into_iter().chain([(original.len() as u64, 0)]) {
        let start = start.min(original.len() as u64);
        if start > at
            && original[at as usize..start as usize] != result[at as usize..start as usize]
        {
            return false;
        }
        at = at.max(end);
    }
    true
}

/// Archives: the same members in the same order, each compared.
fn archives(
    original: &[u8],
    before: &[SectionContainers<'_>],
    result: &[u8],
    after: &[SectionContainers<'_>],
    kept: &[Kept],
) -> Result<(), String> {
    let bad = |e: crate::Unsafe| format!("an archive cannot be read: {e}");
    let (old, new) = (
        crate::archive::members(original).map_err(bad)?,
        crate::archive::members(result).map_err(bad)?,
    );
    if old.len() != new.len() {
        return Err("the archive does not have its original's members".into());
    }
    for (o, n) in old.iter().zip(&new) {
        let name = String::from_utf8_lossy(o.name(original)).into_owned();
        if o.name(original) != n.name(result) {
            return Err(format!("archive member {name} was renamed"));
        }
        let (ob, nb) = (
            &original[o.data as usize..(o.data + o.size) as usize],
            &result[n.data as usize..(n.data + n.size) as usize],
        );
        if o.size == n.size && ob == nb {
            continue;
        }
        // The symbol index: what the linker reads of it is which member
        // defines each symbol; the offsets that say so move with the members.
        if let Some(width) = crate::archive::index_width(o.name(original)) {
            let (was, is) = (
                crate::archive::symbol_map(ob, width, &old).map_err(bad)?,
                crate::archive::symbol_map(nb, width, &new).map_err(bad)?,
            );
            if was != is {
                return Err(format!(
                    "the archive's symbol index ({name}) names other members or symbols"
                ));
            }
            continue;
        }
        if !ob.starts_with(b"\x7fELF") {
            return Err(format!("archive member {name} changed"));
        }
        elf_file(ob, before, nb, after, kept, o.data, n.data)?;
    }
    Ok(())
}

/// One ELF file (or archive member at `base_old`/`base_new` in its archive).
fn elf_file(
    original: &[u8],
    before: &[SectionContainers<'_>],
    result: &[u8],
    after: &[SectionContainers<'_>],
    kept: &[Kept],
    base_old: u64,
    base_new: u64,
) -> Result<(), String> {
    let old = Elf::parse(original).map_err(|e| format!("the original: {e}"))?;
    let new = Elf::parse(result).map_err(|e| format!("the result: {e}"))?;
    let eh = |f: &Elf<'_>| {
        let h = f.header;
        (
            h.e_ident.class,
            h.e_ident.data,
            h.e_type(LE),
            h.e_machine(LE),
            h.e_entry(LE),
            h.e_flags(LE),
            h.e_phoff(LE),
        )
    };
    let pairs = old.pair_sections(&new)?;
    let map = Map::new(&old, &new, &pairs, before, after, kept, base_old, base_new)?;
    let (o, n) = (eh(&old), eh(&new));
    if (o.0, o.1, o.2, o.3, o.5, o.6) != (n.0, n.1, n.2, n.3, n.5, n.6) {
        return Err("the ELF header changed".into());
    }
    if !map.follows(o.4, n.4) {
        return Err(format!("the entry point {:#x} is now {:#x}", o.4, n.4));
    }
    sections(&old, &new, &pairs, &map)?;
    symbols(&old, &new, &pairs, &map)?;
    if old.header.e_type(LE) == elf::ET_REL {
        relocations(&old, &new, &pairs, &map, None)?;
        return object_sections(&old, &new, &pairs, &map);
    }
    let table = omp_table(&old, &new, &map)?;
    relocations(&old, &new, &pairs, &map, table.as_ref())?;
    program_headers(&old, &new, &map)?;
    memory(&old, &new, &pairs, &map, table.as_ref())
}

/// OpenMP's device-image table (`__tgt_device_image` entries of 32 bytes:
/// ImageStart, ImageEnd, EntriesBegin, EntriesEnd, each relocated) and the
/// `__tgt_bin_desc` that counts them: where they are in the original.
struct OmpTable {
    start: u64,
    entries: u64,
    /// The address of the descriptor's count.
    count: u64,
}

impl OmpTable {
    fn holds(&self, a: u64) -> bool {
        a >= self.start && a - self.start < self.entries.saturating_mul(32)
    }
}

/// Every relative relocation of a loaded file: place -> addend (the last
/// one, where two relocate one place).
fn relative_words(f: &Elf<'_>) -> Words {
    let relative = match f.header.e_machine(LE) {
        elf::EM_X86_64 => elf::R_X86_64_RELATIVE,
        elf::EM_AARCH64 => elf::R_AARCH64_RELATIVE,
        _ => return Words(Vec::new()),
    };
    let mut words = Vec::new();
    for (i, s) in f.shdrs.iter().enumerate() {
        if s.sh_type(LE) != elf::SHT_RELA || s.sh_flags(LE) & u64::from(elf::SHF_ALLOC) == 0 {
            continue;
        }
        for r in f.table::<elf::Rela64<LE>>(i).unwrap_or(&[]) {
            if r.r_type(LE, false) == relative && r.r_sym(LE, false) == 0 {
                words.push((r.r_offset(LE), r.r_addend(LE) as u64));
            }
        }
    }
    // Sorted by place, the last of each place first, then only it kept.
    words.reverse();
    words.sort_by_key(|&(at, _)| at);
    words.dedup_by_key(|&mut (at, _)| at);
    Words(words)
}

/// Relative relocations by place, ascending: a sorted table rather than a
/// map (a library has hundreds of thousands).
struct Words(Vec<(u64, u64)>);

impl Words {
    fn get(&self, at: u64) -> Option<u64> {
        let i = self.0.binary_search_by_key(&at, |&(a, _)| a).ok()?;
        Some(self.0[i].1)
    }
    fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.0.iter().copied()
    }
}

/// The original's device-image table, if its images lie in the offload
/// sections, checked against the result's: the result's descriptor counts
/// exactly the entries whose images were kept, in order, their image
/// pointers mapped and their entry-table pointers the same.
fn omp_table(old: &Elf<'_>, new: &Elf<'_>, map: &Map) -> Result<Option<OmpTable>, String> {
    let (ow, nw) = (relative_words(old), relative_words(new));
    // OpenMP's images are in its offload sections, not among host data.
    let into = |v: u64| map.inside(v).is_some() && !map.among_host_data(v);
    let slots: Vec<u64> = ow
        .iter()
        .filter(|&(at, v)| into(v) && ow.get(at.wrapping_add(8)).is_some_and(|e| into(e) && e > v))
        .map(|(at, _)| at)
        .collect();
    let Some(&start) = slots.first() else {
        return Ok(None);
    };
    let entries = slots.len() as u64;
    if slots
        .iter()
        .enumerate()
        .any(|(i, &at)| at != start.wrapping_add(32 * i as u64))
    {
        return Err("the OpenMP device images are not one table".into());
    }
    let desc = ow
        .iter()
        .find(|&(at, v)| v == start && at >= 8)
        .map(|(at, _)| at - 8)
        .ok_or("no descriptor points at the OpenMP device images")?;
    let count = |f: &Elf<'_>| -> Result<u64, String> {
        let segs = segments(f)?;
        let (file, _, _) = at(&segs, desc).ok_or("the descriptor is not loaded")?;
        let b = file
            .get(..4)
            .ok_or("the descriptor's count is not in the file")?;
        Ok(u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
    };
    if count(old)? != entries {
        return Err("the descriptor does not count the OpenMP device images".into());
    }
    let field = |w: &Words, e: u64, k: u64| w.get(start.wrapping_add(32 * e + 8 * k));
    let mut next = 0u64;
    for e in 0..entries {
        let image = field(&ow, e, 0).unwrap_or(0);
        if map.went(image).is_some() {
            continue;
        }
        for k in 0..4 {
            let (o, n) = (field(&ow, e, k), field(&nw, next, k));
            let ok = match (o, n) {
                (Some(o), Some(n)) if k < 2 => map.follows(o, n),
                (o, n) => o == n,
            };
            if !ok {
                return Err(format!(
                    "OpenMP device image {e} is not entry {next} of the result's table"
                ));
            }
        }
        next += 1;
    }
    if count(new)? != next {
        return Err("the result's descriptor does not count the kept OpenMP device images".into());
    }
    Ok(Some(OmpTable {
        start,
        entries,
        count: desc,
    }))
}

/// A parsed ELF64 little-endian file.
struct Elf<'d> {
    data: &'d [u8],
    header: &'d Header,
    shdrs: &'d [Shdr],
    phdrs: &'d [Phdr],
    names: Vec<&'d [u8]>,
}

impl<'d> Elf<'d> {
    fn parse(data: &'d [u8]) -> Result<Elf<'d>, String> {
        let bad = |e: object::Error| format!("its ELF headers cannot be read: {e}");
        let header = Header::parse(data).map_err(bad)?;
        let shdrs = header.section_headers(LE, data).map_err(bad)?;
        let phdrs = header.program_headers(LE, data).map_err(bad)?;
        let strings = header.section_strings(LE, data, shdrs).map_err(bad)?;
        let names = shdrs
            .iter()
            .map(|s| s.name(LE, strings).unwrap_or_default())
            .collect();
        Ok(Elf {
            data,
            header,
            shdrs,
            phdrs,
            names,
        })
    }

    /// Section `i`'s bytes (empty for `SHT_NOBITS`).
    fn bytes(&self, i: usize) -> Result<&'d [u8], String> {
        self.shdrs[i]
            .data(LE, self.data)
            .map_err(|_| format!("section {} lies outside the file", self.name(i)))
    }

    /// The section a symbol names: its name, or the special index.
    fn symbol_section(&self, s: &elf::Sym64<LE>) -> Result<Option<&'d [u8]>, u16> {
        let x = s.st_shndx(LE);
        if x == elf::SHN_UNDEF || x >= elf::SHN_LORESERVE {
            Err(x)
        } else {
            Ok(self.names.get(usize::from(x)).copied())
        }
    }

    /// The name of the section `s` links to.
    fn link_name(&self, s: &Shdr) -> Option<&'d [u8]> {
        self.names.get(s.sh_link(LE) as usize).copied()
    }

    /// The symbols of the table relocation section `i` links to (none for
    /// a dynamic loader's table without one).
    fn linked_symbols(&self, i: usize) -> &'d [elf::Sym64<LE>] {
        let link = self.shdrs[i].sh_link(LE) as usize;
        self.shdrs
            .get(link)
            .filter(|_| link != 0)
            .and_then(|t| t.data_as_array::<elf::Sym64<LE>, _>(LE, self.data).ok())
            .unwrap_or(&[])
    }

    /// Section `i` as an array of `T`.
    fn table<T: object::Pod>(&self, i: usize) -> Result<&'d [T], String> {
        self.shdrs[i]
            .data_as_array::<T, _>(LE, self.data)
            .map_err(|_| format!("table {} cannot be read", self.name(i)))
    }

    fn name(&self, i: usize) -> String {
        String::from_utf8_lossy(self.names[i]).into_owned()
    }

    /// Each of this file's sections paired with the result's of the same
    /// name and type (the k-th of a name with the k-th): `pairs[i]`, the
    /// result's index of section `i`.
    fn pair_sections(&self, new: &Elf<'_>) -> Result<Vec<usize>, String> {
        if self.shdrs.len() != new.shdrs.len() {
            return Err("the result does not have its original's sections".into());
        }
        let mut seen: HashMap<(&[u8], u32), Vec<usize>> = HashMap::new();
        for (i, s) in new.shdrs.iter().enumerate().rev() {
            seen.entry((new.names[i], s.sh_type(LE)))
                .or_default()
                .push(i);
        }
        self.shdrs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                seen.get_mut(&(self.names[i], s.sh_type(LE)))
                    .and_then(Vec::pop)
                    .ok_or_else(|| format!("section {} is missing from the result", self.name(i)))
            })
            .collect()
    }
}

/// An offload section: (old start, old size, new start, new size).
type Span = (u64, u64, u64, u64);

/// A kept container: (old start, old length, new start, new length, the
/// same bytes).
type Moved = (u64, u64, u64, u64, bool);

/// Where each place of the original is in the result: addresses (file
/// offsets in an object) in the offload sections through the kept
/// containers, in a moved section by its move, elsewhere the same.
struct Map {
    /// Offload sections and their kept containers.
    offload: Vec<(Span, Vec<Moved>)>,
    /// Moved sections: (old address, size, new address).
    moved: Vec<(u64, u64, u64)>,
    /// The original's offload sections, by index.
    sections: Vec<usize>,
    /// The old places of the containers among host data: (address, size).
    among_host_data: Vec<(u64, u64)>,
    /// The original's fat-binary wrapper pointer fields, by address: a
    /// pointer there is a container's start (the registration calls read
    /// a container where it points).
    wrapper_fields: Vec<u64>,
}

impl Map {
    #[allow(clippy::too_many_arguments)]
    fn new(
        old: &Elf<'_>,
        new: &Elf<'_>,
        pairs: &[usize],
        before: &[SectionContainers<'_>],
        after: &[SectionContainers<'_>],
        kept: &[Kept],
        base_old: u64,
        base_new: u64,
    ) -> Result<Map, String> {
        let object = old.header.e_type(LE) == elf::ET_REL;
        // A section's place: its address, or in an object its file offset
        // (relocations and symbols of an object are section-relative, and
        // only the offload sections' insides move).
        let place = |f: &Elf<'_>, i: usize| {
            if object {
                0
            } else {
                f.shdrs[i].sh_addr(LE)
            }
        };
        let mut offload = Vec::new();
        let mut among_host_data = Vec::new();
        let mut moved = Vec::new();
        let mut sections = Vec::new();
        // Thousands of containers, each looked up by its offset (the first
        // of an offset, as a search in order finds it).
        let mut new_at: HashMap<u64, u64> = HashMap::new();
        for k in kept {
            new_at.entry(k.old).or_insert(k.new);
        }
        let read_back = by_offset(after.iter().flat_map(|s| s.containers.iter().flatten()));
        for (i, &j) in pairs.iter().enumerate() {
            let (os, ns) = (&old.shdrs[i], &new.shdrs[j]);
            // A section of host data with containers in it is compared as
            // host data: it is rewritten only where it stands, in a pass of
            // its own (see `same_outside`).
            let b = before.iter().find(|s| {
                s.section.role != SectionRole::Embedded
                    && s.section.file_offset == base_old.wrapping_add(os.sh_offset(LE))
                    && s.section.size == os.sh_size(LE)
                    && os.sh_type(LE) != elf::SHT_NOBITS
                    && os.sh_size(LE) > 0
            });
            let Some(b) = b else {
                // Containers among host data: each its own offload range.
                let (of, nf) = (
                    base_old.wrapping_add(os.sh_offset(LE)),
                    base_new.wrapping_add(ns.sh_offset(LE)),
                );
                // A `SHT_NOBITS` section occupies no file bytes (gABI,
                // "Sections"): its offset range holds other sections' bytes.
                let file_size = if os.sh_type(LE) == elf::SHT_NOBITS {
                    0
                } else {
                    os.sh_size(LE)
                };
                for c in embedded_in(before, of, file_size) {
                    let k = Kept {
                        old: c.offset(),
                        new: *new_at
                            .get(&c.offset())
                            .ok_or("a container among host data is not in the result")?,
                    };
                    let nc = read_back
                        .get(&k.new)
                        .ok_or("a container among host data was not read back")?;
                    let (oa, na) = (
                        place(old, i).wrapping_add(c.offset().wrapping_sub(of)),
                        place(new, j).wrapping_add(k.new.wrapping_sub(nf)),
                    );
                    // Rewritten where it stands: its new bytes, then zeros to
                    // its old end, where a pointer to its end still points.
                    let ol = c.len();
                    let same = ol == nc.len()
                        && span(old.data, k.old, base_old, ol)
                            == span(new.data, k.new, base_new, ol);
                    offload.push(((oa, ol, na, ol), vec![(oa, ol, na, ol, same)]));
                    among_host_data.push((oa, ol));
                }
                if !object && os.sh_addr(LE) != ns.sh_addr(LE) {
                    moved.push((os.sh_addr(LE), os.sh_size(LE), ns.sh_addr(LE)));
                }
                continue;
            };
            let a = after
                .iter()
                .find(|s| s.section.file_offset == base_new.wrapping_add(ns.sh_offset(LE)))
                .ok_or("an offload section of the result was not read back")?;
            sections.push(i);
            let (ob, nb) = (place(old, i), place(new, j));
            let (of, nf) = (b.section.file_offset, a.section.file_offset);
            let mut containers = Vec::new();
            let (ours, here) = (
                by_offset(b.containers.iter().flatten()),
                by_offset(a.containers.iter().flatten()),
            );
            for k in kept {
                let Some(oc) = ours.get(&k.old) else {
                    continue;
                };
                let nc = here
                    .get(&k.new)
                    .ok_or("a kept container is not in the result")?;
                let (ol, nl) = (oc.len(), nc.len());
                let same = ol == nl
                    && span(old.data, k.old, base_old, ol).is_some()
                    && span(old.data, k.old, base_old, ol) == span(new.data, k.new, base_new, nl);
                containers.push((
                    ob.wrapping_add(k.old.wrapping_sub(of)),
                    ol,
                    nb.wrapping_add(k.new.wrapping_sub(nf)),
                    nl,
                    same,
                ));
            }
            offload.push(((ob, os.sh_size(LE), nb, ns.sh_size(LE)), containers));
        }
        // Looked up by address (`near`): thousands of containers, a lookup
        // for each relocation and differing word.
        offload.sort_by_key(|e| e.0 .0);
        for (_, cs) in &mut offload {
            cs.sort_by_key(|c| c.0);
        }
        among_host_data.sort_unstable();
        Ok(Map {
            offload,
            among_host_data,
            moved,
            sections,
            wrapper_fields: if object {
                Vec::new()
            } else {
                wrapper_fields(old)
            },
        })
    }

    /// Where a pointer to old place `v` inside an offload section points
    /// now: `None` where it has none (inside a rewritten container, in one
    /// that went), or `v` is not in one.
    fn inside(&self, v: u64) -> Option<Option<u64>> {
        let &((start, size, new_start, new_size), ref cs) = near(&self.offload, |e| e.0 .0, v)
            .iter()
            .find(|&&((s, l, _, _), _)| v >= s && v <= s.saturating_add(l))?;
        if v == start {
            return Some(Some(new_start));
        }
        for &(o, l, n, nl, same) in near(cs, |c| c.0, v) {
            if v == o {
                return Some(Some(n));
            }
            if v == o.wrapping_add(l) {
                return Some(Some(n.wrapping_add(nl)));
            }
            if same && v > o && v - o < l {
                return Some(Some(n.wrapping_add(v - o)));
            }
        }
        Some((v == start.wrapping_add(size)).then_some(new_start.wrapping_add(new_size)))
    }

    /// Where old place `v`, outside the offload sections, is now: moved
    /// with its section, or where it was.
    fn place(&self, v: u64) -> u64 {
        self.moved
            .iter()
            .find(|&&(o, l, _)| v >= o && v - o < l)
            .map_or(v, |&(o, _, n)| n.wrapping_add(v - o))
    }

    /// Whether `new` is what a pointer holding `old` must hold now. At an
    /// offload section's end, where another section may start, either
    /// reading is one.
    fn follows(&self, old: u64, new: u64) -> bool {
        match self.inside(old) {
            Some(mapped) => mapped == Some(new) || (self.at_end(old) && new == self.place(old)),
            None => new == self.place(old),
        }
    }

    /// For old place `v` in a container that went (in no kept one), its
    /// section's new end: where the patcher points what named it.
    fn went(&self, v: u64) -> Option<u64> {
        let &((start, size, new_start, new_size), ref cs) = near(&self.offload, |e| e.0 .0, v)
            .iter()
            .find(|&&((s, l, _, _), _)| v >= s && v - s < l)?;
        let kept = near(cs, |c| c.0, v)
            .iter()
            .any(|&(o, l, _, _, _)| v >= o && v - o < l);
        (!kept && size > 0 && v >= start).then_some(new_start.wrapping_add(new_size))
    }

    /// As [`Map::follows`], for a pointer stored at old address `at`: in
    /// a fat-binary wrapper's field, where a container starts at `old`
    /// (and the one before may end), only its new start.
    fn follows_from(&self, at: u64, old: u64, new: u64) -> bool {
        if self.wrapper_fields.binary_search(&at).is_ok() {
            if let Some(start) = self.start_of(old) {
                return start == new;
            }
        }
        self.follows(old, new)
    }

    /// The new start of the kept container that starts at old place `v`.
    fn start_of(&self, v: u64) -> Option<u64> {
        let (_, cs) = near(&self.offload, |e| e.0 .0, v)
            .iter()
            .find(|&&((s, l, _, _), _)| v >= s && v <= s.saturating_add(l))?;
        near(cs, |c| c.0, v).iter().find(|c| c.0 == v).map(|c| c.2)
    }

    fn at_end(&self, v: u64) -> bool {
        near(&self.offload, |e| e.0 .0, v)
            .iter()
            .any(|&((s, l, _, _), _)| v == s.wrapping_add(l))
    }

    /// Whether old place `v` lies in an offload section.
    fn in_offload(&self, v: u64) -> bool {
        near(&self.offload, |e| e.0 .0, v)
            .iter()
            .any(|&((s, l, _, _), _)| v >= s && v - s < l)
    }

    /// Whether old place `v` lies in or at the end of a container among
    /// host data.
    fn among_host_data(&self, v: u64) -> bool {
        near(&self.among_host_data, |e| e.0, v)
            .iter()
            .any(|&(s, l)| v >= s && v - s <= l)
    }
}

/// The addresses of the two pointer fields (at 8 and 16) of every
/// wrapper in `f`'s loaded `.hipFatBinSegment` and `.nvFatBinSegment`
/// sections, in order.
fn wrapper_fields(f: &Elf<'_>) -> Vec<u64> {
    let mut fields = Vec::new();
    for (i, s) in f.shdrs.iter().enumerate() {
        let name = f.names[i];
        if (name != b".hipFatBinSegment" && name != b".nvFatBinSegment")
            || s.sh_flags(LE) & u64::from(elf::SHF_ALLOC) == 0
        {
            continue;
        }
        let Ok(bytes) = f.bytes(i) else { continue };
        for (at, w) in offload_loader::registration::FatbinWrapper::all(bytes) {
            if w.is_ok() {
                let base = s.sh_addr(LE).wrapping_add(at);
                fields.push(base.wrapping_add(8));
                fields.push(base.wrapping_add(16));
            }
        }
    }
    fields.sort_unstable();
    fields
}

/// The entries of `list` (sorted by `start`, disjoint but for a shared
/// end) that may hold `v`: the two, at most, that start at or before it, in
/// order, so that the first that holds it is the one a walk from the start
/// would find.
fn near<T>(list: &[T], start: impl Fn(&T) -> u64, v: u64) -> &[T] {
    let i = list.partition_point(|e| start(e) <= v);
    &list[i.saturating_sub(2)..i]
}

/// The containers found among host data in the file range `at..at + size`.
fn embedded_in<'s, 'a>(
    sections: &'s [SectionContainers<'a>],
    at: u64,
    size: u64,
) -> impl Iterator<Item = &'s offload_loader::Container<'a>> {
    sections
        .iter()
        .filter(move |s| {
            s.section.role == SectionRole::Embedded
                && s.section.file_offset >= at
                && s.section.file_offset + s.section.size <= at.saturating_add(size)
        })
        .flat_map(|s| s.containers.iter().flatten())
}

/// `len` bytes of `data` at `at` (an offset in the archive `data` is a
/// member of, at `base`).
fn span(data: &[u8], at: u64, base: u64, len: u64) -> Option<&[u8]> {
    let start = usize::try_from(at.checked_sub(base)?).ok()?;
    data.get(start..start.checked_add(usize::try_from(len).ok()?)?)
}

/// Section headers: same type, flags, size (an offload section no larger),
/// alignment, entry size and links; the address mapped.
fn sections(old: &Elf<'_>, new: &Elf<'_>, pairs: &[usize], map: &Map) -> Result<(), String> {
    for (i, &j) in pairs.iter().enumerate() {
        let (o, n) = (&old.shdrs[i], &new.shdrs[j]);
        let name = old.name(i);
        let offload = map.sections.contains(&i);
        if o.sh_type(LE) != n.sh_type(LE)
            || o.sh_flags(LE) != n.sh_flags(LE)
            || o.sh_addralign(LE) != n.sh_addralign(LE)
            || o.sh_entsize(LE) != n.sh_entsize(LE)
            || old.link_name(o) != new.link_name(n)
            || (!offload && o.sh_size(LE) != n.sh_size(LE))
            || (offload && o.sh_size(LE) < n.sh_size(LE))
        {
            return Err(format!("the header of section {name} changed"));
        }
        if old.header.e_type(LE) != elf::ET_REL
            && o.sh_flags(LE) & u64::from(elf::SHF_ALLOC) != 0
            && !map.follows(o.sh_addr(LE), n.sh_addr(LE))
        {
            return Err(format!("section {name} is not where its move puts it"));
        }
    }
    Ok(())
}

/// Symbol tables: the same symbols, in order, each naming the same
/// section, its value mapped, its size the same (or, spanning an offload
/// container or section, that of what it spans now).
fn symbols(old: &Elf<'_>, new: &Elf<'_>, pairs: &[usize], map: &Map) -> Result<(), String> {
    for (i, &j) in pairs.iter().enumerate() {
        if !matches!(old.shdrs[i].sh_type(LE), elf::SHT_SYMTAB | elf::SHT_DYNSYM) {
            continue;
        }
        let (os, ns) = (
            old.table::<elf::Sym64<LE>>(i)?,
            new.table::<elf::Sym64<LE>>(j)?,
        );
        if os.len() != ns.len() {
            return Err(format!(
                "symbol table {} lost or gained symbols",
                old.name(i)
            ));
        }
        for (k, (o, n)) in os.iter().zip(ns).enumerate() {
            let (ov, nv) = (o.st_value(LE), n.st_value(LE));
            let object = old.header.e_type(LE) == elf::ET_REL;
            // An object's symbols are section-relative: only those of an
            // offload section move.
            let offload = if object {
                offload_symbol(o, map)
            } else {
                map.in_offload(ov)
            };
            // A TLS symbol's value is an offset in the TLS template (gABI,
            // "Symbol Values"): what the dynamic linker reads, unmoved.
            let tls = o.st_type() == elf::STT_TLS;
            let value_ok = if (object && !offload) || tls {
                ov == nv
            } else {
                map.follows(ov, nv)
                    // A symbol names the start of what it labels: where one
                    // container ends as the next starts, the later one's.
                    || map.start_of(ov) == Some(nv)
                    // A symbol of an image that went: the section's end, empty.
                    || (n.st_size(LE) == 0 && map.went(ov) == Some(nv))
            };
            let field = if o.st_name(LE) != n.st_name(LE) {
                "st_name"
            } else if o.st_info != n.st_info {
                "st_info"
            } else if o.st_other != n.st_other {
                "st_other"
            } else if old.symbol_section(o) != new.symbol_section(n) {
                "st_shndx"
            } else if !value_ok {
                "st_value"
            } else if !offload && o.st_size(LE) != n.st_size(LE) {
                "st_size"
            } else {
                continue;
            };
            return Err(format!(
                "symbol {k} of {} changed beyond its move ({field}; value {ov:#x} -> {nv:#x}, \
                 size {} -> {})",
                old.name(i),
                o.st_size(LE),
                n.st_size(LE),
            ));
        }
    }
    Ok(())
}

/// Whether an object's symbol is one of an offload section's.
fn offload_symbol(s: &elf::Sym64<LE>, map: &Map) -> bool {
    s.st_shndx(LE) < elf::SHN_LORESERVE && map.sections.contains(&usize::from(s.st_shndx(LE)))
}

/// Relocation tables: the same relocations, in order: the same type and
/// symbol, the place and the addend mapped. In a loaded file an addend
/// that is a pointer maps through the move (relative relocations, and
/// symbol + addend against an offload section's symbol); OpenMP's device
/// image table, whose entries move when an image goes, is the exception
/// its relocations may take (checked: the moved places stay in the table).
fn relocations(
    old: &Elf<'_>,
    new: &Elf<'_>,
    pairs: &[usize],
    map: &Map,
    table: Option<&OmpTable>,
) -> Result<(), String> {
    let object = old.header.e_type(LE) == elf::ET_REL;
    for (i, &j) in pairs.iter().enumerate() {
        if old.shdrs[i].sh_type(LE) != elf::SHT_RELA {
            continue;
        }
        let (or, nr) = (
            old.table::<elf::Rela64<LE>>(i)?,
            new.table::<elf::Rela64<LE>>(j)?,
        );
        if or.len() != nr.len() {
            return Err(format!("relocation table {} changed size", old.name(i)));
        }
        let (osyms, nsyms) = (old.linked_symbols(i), new.linked_symbols(j));
        // The place in an object is section-relative to the section it
        // relocates, which does not move (only offload sections' insides do).
        let target_moves = object && map.sections.contains(&(old.shdrs[i].sh_info(LE) as usize));
        if target_moves {
            return Err(format!(
                "relocations of an offload section ({}) are not compared",
                old.name(i)
            ));
        }
        for (o, n) in or.iter().zip(nr) {
            let (ot, os) = (o.r_type(LE, false), o.r_sym(LE, false));
            if (ot, os) != (n.r_type(LE, false), n.r_sym(LE, false)) {
                return Err(format!(
                    "a relocation of {} changed its type or symbol",
                    old.name(i)
                ));
            }
            let (oa, na) = (o.r_addend(LE) as u64, n.r_addend(LE) as u64);
            let (op, np) = (o.r_offset(LE), n.r_offset(LE));
            // The device-image table's slots move with their entries,
            // checked entry by entry in [`omp_table`].
            if table.is_some_and(|t| t.holds(op) && t.holds(np) && (np.wrapping_sub(op)) % 32 == 0)
            {
                continue;
            }
            let against_offload = |syms: &[elf::Sym64<LE>]| {
                syms.get(os as usize)
                    .filter(|_| os != 0)
                    .is_some_and(|s| offload_symbol(s, map))
            };
            let target = |syms: &[elf::Sym64<LE>], addend: u64| {
                syms.get(os as usize)
                    .filter(|_| os != 0)
                    .map_or(addend, |s| s.st_value(LE).wrapping_add(addend))
            };
            let (ot_, nt_) = (target(osyms, oa), target(nsyms, na));
            let place_ok = object || map.follows(op, np);
            let addend_ok = if object && !against_offload(osyms) {
                oa == na
            } else {
                oa == na && ot_ == nt_ || map.follows_from(op, ot_, nt_)
            };
            if !(place_ok && addend_ok) {
                return Err(format!(
                    "the relocation at {op:#x} of {} does not follow the move",
                    old.name(i)
                ));
            }
        }
    }
    Ok(())
}

/// An object's sections other than the offload sections and the tables
/// compared above: byte for byte.
fn object_sections(old: &Elf<'_>, new: &Elf<'_>, pairs: &[usize], map: &Map) -> Result<(), String> {
    for (i, &j) in pairs.iter().enumerate() {
        let s = &old.shdrs[i];
        if map.sections.contains(&i)
            || matches!(
                s.sh_type(LE),
                elf::SHT_SYMTAB | elf::SHT_DYNSYM | elf::SHT_RELA | elf::SHT_NOBITS
            )
        {
            continue;
        }
        if old.bytes(i)? != new.bytes(j)? {
            return Err(format!("section {} changed", old.name(i)));
        }
    }
    Ok(())
}

/// Program headers other than `PT_LOAD` and `PT_PHDR`: each of the
/// original's, in order, with its type, flags, alignment and sizes, at its
/// mapped address, the same bytes in the file where it says.
fn program_headers(old: &Elf<'_>, new: &Elf<'_>, map: &Map) -> Result<(), String> {
    let others = |f: &Elf<'_>| -> Vec<Phdr> {
        f.phdrs
            .iter()
            .filter(|p| !matches!(p.p_type(LE), elf::PT_LOAD | elf::PT_PHDR))
            .copied()
            .collect()
    };
    let (o, n) = (others(old), others(new));
    if o.len() != n.len() {
        return Err("the program headers changed".into());
    }
    for (a, b) in o.iter().zip(&n) {
        let ty = a.p_type(LE);
        if ty != b.p_type(LE)
            || a.p_flags(LE) != b.p_flags(LE)
            || a.p_align(LE) != b.p_align(LE)
            || a.p_filesz(LE) != b.p_filesz(LE)
            || a.p_memsz(LE) != b.p_memsz(LE)
            || (a.p_filesz(LE) > 0 && map.place(a.p_vaddr(LE)) != b.p_vaddr(LE))
        {
            return Err(format!("a program header of type {ty:#x} changed"));
        }
        // What the loader reads through the file offset (the interpreter's
        // name, notes); the rest is in the loaded image, compared there.
        let by_offset = matches!(ty, elf::PT_INTERP | elf::PT_NOTE | elf::PT_GNU_PROPERTY);
        if by_offset && a.data(LE, old.data).ok() != b.data(LE, new.data).ok() {
            return Err(format!(
                "what the program header of type {ty:#x} names changed"
            ));
        }
    }
    Ok(())
}

/// One loaded segment: its addresses, its file bytes, its permissions.
struct Segment<'d> {
    vaddr: u64,
    memsz: u64,
    bytes: &'d [u8],
    flags: u32,
}

fn segments<'d>(f: &Elf<'d>) -> Result<Vec<Segment<'d>>, String> {
    let mut v: Vec<Segment<'d>> = f
        .phdrs
        .iter()
        .filter(|p| p.p_type(LE) == elf::PT_LOAD)
        .map(|p| {
            Ok(Segment {
                vaddr: p.p_vaddr(LE),
                memsz: p.p_memsz(LE),
                bytes: p
                    .data(LE, f.data)
                    .map_err(|_| "a loaded segment lies outside the file")?,
                flags: p.p_flags(LE),
            })
        })
        .collect::<Result<_, &str>>()?;
    v.sort_by_key(|s| s.vaddr);
    Ok(v)
}

/// The loaded image at `addr` in `segs`: the bytes from there to its
/// segment's end of file, the zeros after them, and the permissions.
fn at<'s>(segs: &'s [Segment<'_>], addr: u64) -> Option<(&'s [u8], u64, u32)> {
    let s = segs
        .iter()
        .find(|s| addr >= s.vaddr && addr - s.vaddr < s.memsz)?;
    let off = addr - s.vaddr;
    let file = s.bytes.get(off as usize..).unwrap_or(&[]);
    let zeros = s
        .memsz
        .saturating_sub(off)
        .saturating_sub(file.len() as u64);
    Some((file, zeros, s.flags))
}

/// The loaded images: every original address outside the offload sections
/// and the ELF and program headers is loaded in the result at its mapped
/// address, with the same permissions (or fewer: a split part that holds no
/// code loses execute) and the same byte, but for the words that are
/// pointers mapped through the move, and for the symbol and relocation
/// tables, compared above.
fn memory(
    old: &Elf<'_>,
    new: &Elf<'_>,
    pairs: &[usize],
    map: &Map,
    table: Option<&OmpTable>,
) -> Result<(), String> {
    let (os, ns) = (segments(old)?, segments(new)?);
    // Places not compared byte for byte: the headers (the table grew), the
    // offload sections, the tables compared structurally.
    let mut skip: Vec<(u64, u64)> = Vec::new();
    let first = os.first().map_or(0, |s| s.vaddr);
    let headers = old
        .header
        .e_phoff(LE)
        .saturating_add(u64::from(new.header.e_phnum(LE)) * 56);
    skip.push((first, first.saturating_add(headers)));
    // A section header table a tool put inside a loaded segment (patchelf
    // and auditwheel do, at the start of the segment they add): loaded
    // bytes, but compared as the table it is (`sections`), when the
    // result's table is loaded where the original's moved to.
    if let Some((at, len)) = loaded_section_headers(old) {
        if loaded_section_headers(new).is_some_and(|(n, l)| n == map.place(at) && l == len) {
            skip.push((at, at.saturating_add(len)));
        }
    }
    for (i, s) in old.shdrs.iter().enumerate().take(pairs.len()) {
        let a = s.sh_addr(LE);
        if s.sh_flags(LE) & u64::from(elf::SHF_ALLOC) == 0 {
            continue;
        }
        if map.sections.contains(&i)
            || matches!(
                s.sh_type(LE),
                elf::SHT_SYMTAB | elf::SHT_DYNSYM | elf::SHT_RELA
            )
        {
            skip.push((a, a.saturating_add(s.sh_size(LE))));
        }
    }
    // Containers among host data: the containers only.
    for &(a, l) in &map.among_host_data {
        skip.push((a, a.saturating_add(l)));
    }
    if let Some(t) = table {
        skip.push((t.start, t.start.saturating_add(t.entries * 32)));
        skip.push((t.count, t.count.saturating_add(4)));
    }
    skip.sort_unstable();
    // The original's code: where execute must stay.
    let code: Vec<(u64, u64)> = old
        .shdrs
        .iter()
        .filter(|s| {
            s.sh_flags(LE) & u64::from(elf::SHF_EXECINSTR | elf::SHF_ALLOC)
                == u64::from(elf::SHF_EXECINSTR | elf::SHF_ALLOC)
        })
        .map(|s| (s.sh_addr(LE), s.sh_addr(LE).saturating_add(s.sh_size(LE))))
        .collect();
    for seg in &os {
        let mut addr = seg.vaddr;
        let end = seg.vaddr.saturating_add(seg.memsz);
        while addr < end {
            if let Some(&(_, e)) = skip.iter().find(|&&(s, e)| addr >= s && addr < e) {
                addr = e.min(end).max(addr.saturating_add(1));
                continue;
            }
            // Runs stop where a skipped range or a moved section begins or
            // ends: the mapping may change there.
            let next_skip = skip
                .iter()
                .map(|&(s, _)| s)
                .chain(
                    map.moved
                        .iter()
                        .flat_map(|&(o, l, _)| [o, o.saturating_add(l)]),
                )
                .filter(|&s| s > addr)
                .min()
                .unwrap_or(u64::MAX)
                .min(end);
            addr = compare_run(&os, &ns, addr, next_skip, map, &code)?;
        }
    }
    Ok(())
}

/// `containers` by their offsets, the first of each offset kept.
fn by_offset<'c, 'a: 'c>(
    containers: impl Iterator<Item = &'c offload_loader::Container<'a>>,
) -> HashMap<u64, &'c offload_loader::Container<'a>> {
    let mut at = HashMap::new();
    for c in containers {
        at.entry(c.offset()).or_insert(c);
    }
    at
}

/// Where the section header table of `f` is loaded (address and length),
/// when a `PT_LOAD` segment's file bytes hold it whole.
fn loaded_section_headers(f: &Elf<'_>) -> Option<(u64, u64)> {
    let (off, len) = (
        f.header.e_shoff(LE),
        f.shdrs.len() as u64 * u64::from(f.header.e_shentsize(LE)),
    );
    f.phdrs
        .iter()
        .filter(|p| p.p_type(LE) == elf::PT_LOAD)
        .find(|p| {
            off >= p.p_offset(LE)
                && off.saturating_add(len) <= p.p_offset(LE).saturating_add(p.p_filesz(LE))
        })
        .map(|p| (p.p_vaddr(LE).wrapping_add(off - p.p_offset(LE)), len))
}

/// Compares the original's image from `addr` up to `stop` with the
/// result's at the mapped address, as far as one segment of each goes;
/// where it stopped.
fn compare_run(
    os: &[Segment<'_>],
    ns: &[Segment<'_>],
    addr: u64,
    stop: u64,
    map: &Map,
    code: &[(u64, u64)],
) -> Result<u64, String> {
    let (ofile, ozeros, oflags) = at(os, addr).ok_or("the original's image has a gap")?;
    let to = map.place(addr);
    let (nfile, nzeros, nflags) = at(ns, to)
        .ok_or_else(|| format!("{addr:#x} of the original is not loaded in the result"))?;
    if nflags & !oflags != 0 || (oflags & !nflags) & !elf::PF_X != 0 {
        return Err(format!("{addr:#x} is loaded with other permissions"));
    }
    let dropped_x = oflags & elf::PF_X != 0 && nflags & elf::PF_X == 0;
    let span = (stop - addr)
        .min((ofile.len() as u64).saturating_add(ozeros))
        .min((nfile.len() as u64).saturating_add(nzeros));
    if span == 0 {
        return Err(format!("{addr:#x}: nothing to compare"));
    }
    // Execute dropped: only where no code is.
    if dropped_x
        && code
            .iter()
            .any(|&(s, e)| s < addr.saturating_add(span) && e > addr)
    {
        return Err(format!("code at {addr:#x} is no longer executable"));
    }
    let byte = |file: &[u8], k: u64| file.get(k as usize).copied().unwrap_or(0);
    // Past both files' bytes, both images are zeros to the end of the run.
    let files = (ofile.len() as u64).max(nfile.len() as u64);
    let len = span.min(files);
    // Blocks of file bytes that are not equal, found on every core; only
    // they are looked at byte by byte.
    const BLOCK: u64 = 4096;
    let block = |k: u64| (k, (len - k).min(BLOCK));
    let blocks = usize::try_from(len.div_ceil(BLOCK)).map_err(|_| "an image too large")?;
    let unequal: Vec<(u64, u64)> = (0..blocks)
        .into_par_iter()
        .with_min_len(256)
        .map(|i| block(i as u64 * BLOCK))
        .filter(|&(k, run)| {
            let (a, b) = (
                ofile.get(k as usize..(k + run) as usize),
                nfile.get(k as usize..(k + run) as usize),
            );
            !(a.is_some() && a == b)
        })
        .collect();
    for (k, run) in unequal {
        for x in k..k + run {
            if byte(ofile, x) == byte(nfile, x) {
                continue;
            }
            // A differing byte: its aligned word must be a pointer moved.
            let w = (addr + x) & !7;
            let word = |file: &[u8], base: u64| -> Option<u64> {
                let off = w.checked_sub(base)?;
                let b: Vec<u8> = (0..8).map(|i| byte(file, off + i)).collect();
                Some(u64::from_le_bytes(b.try_into().ok()?))
            };
            let (ow, nw) = (word(ofile, addr), word(nfile, addr));
            let moved =
                matches!((ow, nw), (Some(o), Some(n)) if o != n && map.follows_from(w, o, n));
            if !moved {
                return Err(format!(
                    "the byte at {:#x} differs and is not a pointer that moved",
                    addr + x
                ));
            }
        }
    }
    Ok(addr + span)
}
