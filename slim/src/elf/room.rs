//! Room for one more program header, made the way patchelf makes it for a
//! shared library (`rewriteSectionsLibrary`, `canReplaceSection`): the
//! table stays where the ELF header says, at the start of the first loaded
//! segment, where binutils (which always writes it right after the ELF
//! header when it rewrites a file) and elfutils expect it; the sections
//! that follow it and stand in the way move instead.
//!
//! Only sections that nothing but headers find may move: `.interp`
//! (`PT_INTERP`), notes (`PT_NOTE`, `PT_GNU_PROPERTY`) and the dynamic
//! loader's tables (`.hash`, `.gnu.hash`, `.dynsym`, `.dynstr`, the
//! version tables, relocation tables), found through `.dynamic`. They move
//! as one block, its inner layout kept, to an address congruent modulo its
//! largest alignment; every header and symbol that names them follows, and
//! anything else that refers into the block (code, data, relocations) keeps
//! the file from being compacted.

use object::elf;
use object::read::elf::{ProgramHeader, SectionHeader};
use object::read::StringTable;
use object::LittleEndian as LE;

use crate::refs;
use crate::refusal::Unsafe;

const PHDR_SIZE: u64 = 56;

/// The sections that move out of the table's way, as one block.
#[derive(Debug, Clone)]
pub(crate) struct Block {
    /// Its file offset and address (in the first loaded segment) and length.
    pub offset: u64,
    pub addr: u64,
    pub len: u64,
    /// Its largest alignment: the move is a multiple of it.
    pub align: u64,
    /// Its sections, by index.
    pub sections: Vec<usize>,
}

impl Block {
    /// Whether address `a` lies in the block.
    pub(crate) fn holds(&self, a: u64) -> bool {
        a >= self.addr && a - self.addr < self.len
    }

    /// Its first and last address.
    pub(crate) fn range(&self) -> (u64, u64) {
        let end = self.addr.saturating_add(self.len).saturating_sub(1);
        (self.addr, end)
    }
}

/// The block of sections that must move so that the program header table
/// (ending at `table_end` in the file) can grow by one entry.
/// `names` is the section name string table.
pub(crate) fn block(
    shdrs: &[elf::SectionHeader64<LE>],
    phdrs: &[elf::ProgramHeader64<LE>],
    names: Option<StringTable<'_>>,
    endian: LE,
    table_end: u64,
) -> Result<Block, Unsafe> {
    let first = phdrs
        .iter()
        .find(|p| p.p_type(endian) == elf::PT_LOAD)
        .filter(|p| p.p_offset(endian) == 0)
        .ok_or_else(|| Unsafe::new("the first loaded segment does not start the file"))?;
    // The window the new entry needs, then whatever a note header or a
    // section that overlaps it drags in, until nothing more does.
    let (mut start, mut end) = (table_end, table_end.saturating_add(PHDR_SIZE));
    loop {
        let (s0, e0) = (start, end);
        for s in shdrs.iter().filter(|s| in_file(s, endian)) {
            let (o, n) = (s.sh_offset(endian), s.sh_size(endian));
            if o < end && o.saturating_add(n) > start {
                start = start.min(o);
                end = end.max(o.saturating_add(n));
            }
        }
        for p in phdrs
            .iter()
            .filter(|p| is_header_of_sections(p.p_type(endian)))
        {
            let (o, n) = (p.p_offset(endian), p.p_filesz(endian));
            if o < end && o.saturating_add(n) > start {
                start = start.min(o);
                end = end.max(o.saturating_add(n));
            }
        }
        if (start, end) == (s0, e0) {
            break;
        }
    }
    if start < table_end {
        return Err(Unsafe::new(
            "a section lies in the program header table's own bytes",
        ));
    }
    let (fo, fv, ff) = (
        first.p_offset(endian),
        first.p_vaddr(endian),
        first.p_filesz(endian),
    );
    if end > fo.saturating_add(ff) {
        return Err(Unsafe::new(
            "the program header table cannot grow inside the first loaded segment",
        ));
    }
    let mut sections = Vec::new();
    let mut align = 8u64;
    for (i, s) in shdrs.iter().enumerate().filter(|(_, s)| in_file(s, endian)) {
        let o = s.sh_offset(endian);
        if o < start || o >= end {
            continue;
        }
        if !movable(names, endian, s) {
            return Err(Unsafe::new(format!(
                "section {i} follows the program header table, which has no room for one more entry, and only headers may point at what moves out of its way"
            )));
        }
        if s.sh_addr(endian).wrapping_sub(o) != fv.wrapping_sub(fo) {
            return Err(Unsafe::new(format!(
                "section {i}'s address and offset disagree with the first segment's"
            )));
        }
        align = align.max(s.sh_addralign(endian));
        sections.push(i);
    }
    if sections.is_empty() {
        // Only padding or non-section bytes: nothing can be sure to be free.
        return Err(Unsafe::new(
            "the program header table has no room for one more entry",
        ));
    }
    let addr = fv
        .checked_add(start - fo)
        .filter(|a| a.checked_add(end - start).is_some())
        .ok_or_else(|| Unsafe::new("the first segment runs past the end of memory"))?;
    Ok(Block {
        offset: start,
        addr,
        len: end - start,
        align: align.clamp(1, crate::elf::PAGE),
        sections,
    })
}

/// Sections with bytes in the file.
fn in_file(s: &elf::SectionHeader64<LE>, endian: LE) -> bool {
    !matches!(s.sh_type(endian), elf::SHT_NULL | elf::SHT_NOBITS) && s.sh_size(endian) > 0
}

/// Program headers that name sections the block may hold.
fn is_header_of_sections(ty: u32) -> bool {
    matches!(ty, elf::PT_INTERP | elf::PT_NOTE | elf::PT_GNU_PROPERTY)
}

/// Whether a section is found only through headers (patchelf's rule:
/// `.interp`, or any allocated section that is not program data), and is
/// neither code nor writable.
fn movable(names: Option<StringTable<'_>>, endian: LE, s: &elf::SectionHeader64<LE>) -> bool {
    let flags = s.sh_flags(endian);
    let alloc = flags & u64::from(elf::SHF_ALLOC) != 0;
    let plain = flags & u64::from(elf::SHF_WRITE | elf::SHF_EXECINSTR) == 0;
    let interp = names.and_then(|n| s.name(endian, n).ok()) == Some(&b".interp"[..]);
    alloc
        && plain
        && (interp
            || matches!(
                s.sh_type(endian),
                elf::SHT_NOTE
                    | elf::SHT_HASH
                    | elf::SHT_GNU_HASH
                    | elf::SHT_DYNSYM
                    | elf::SHT_STRTAB
                    | elf::SHT_GNU_VERSYM
                    | elf::SHT_GNU_VERNEED
                    | elf::SHT_GNU_VERDEF
                    | elf::SHT_RELA
                    | elf::SHT_RELR
            ))
}

/// What besides headers refers into the block, as a reason; `None` when
/// nothing does. `patched` says which file offsets the caller rewrites (the
/// `.dynamic` entries that point into the block).
pub(crate) fn referenced(
    scan: &refs::Scan<'_>,
    block: &Block,
    patched: &dyn Fn(u64) -> bool,
) -> Option<String> {
    let (start, end) = block.range();
    if let Some(r) = scan.references(start, end, patched).first() {
        return Some(format!("{r}"));
    }
    let f = &scan.file;
    for s in f.shdrs {
        let ty = s.sh_type(f.endian);
        if ty == elf::SHT_RELA && s.sh_flags(f.endian) & u64::from(elf::SHF_ALLOC) != 0 {
            let Ok(relas) = s.data_as_array::<elf::Rela64<LE>, _>(f.endian, f.data) else {
                return Some("a relocation section cannot be read".into());
            };
            for r in relas {
                let place = r.r_offset.get(f.endian);
                let addend = r.r_addend.get(f.endian) as u64;
                if block.holds(place) || block.holds(addend) {
                    return Some(format!(
                        "a relocation at {place:#x} refers to a section in the way"
                    ));
                }
            }
        }
    }
    None
}

/// The `.dynamic` tags whose value is an address (the gABI's "d_ptr"
/// entries, and the GNU ones in the DT_ADDRRNGLO..DT_ADDRRNGHI range and
/// the version tables).
pub(crate) fn is_pointer_tag(tag: u64) -> bool {
    const DT_RELR: u64 = 36;
    matches!(
        tag as u32,
        elf::DT_PLTGOT
            | elf::DT_HASH
            | elf::DT_STRTAB
            | elf::DT_SYMTAB
            | elf::DT_RELA
            | elf::DT_INIT
            | elf::DT_FINI
            | elf::DT_REL
            | elf::DT_JMPREL
            | elf::DT_INIT_ARRAY
            | elf::DT_FINI_ARRAY
            | elf::DT_PREINIT_ARRAY
            | elf::DT_VERSYM
            | elf::DT_VERDEF
            | elf::DT_VERNEED
    ) && tag <= u64::from(u32::MAX)
        || tag == DT_RELR
        || (0x6fff_fe00..=0x6fff_feff).contains(&tag)
}
