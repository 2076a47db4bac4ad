//! The sections in the way of a program header table that must grow,
//! moved after the offload section: their headers, `.dynamic` pointers and
//! symbols follow them, and the section headers are put back in order.

use object::elf;
use object::read::elf::{SectionHeader, Sym};
use object::LittleEndian as LE;

use crate::refusal::{unsafe_, Unsafe};

use super::layout::Layout;
use super::patch::symbol_tables;
use super::patches::Patches;
use super::room;
use super::target::Target;
use crate::pieces::Output;
use crate::refs;

/// The sections in the program header table's way, moved to `to`: their
/// headers, `.dynamic`'s pointers to them and their symbols follow them,
/// and the section headers are renumbered in address order; anything else
/// that refers to them keeps the file as it is.
pub(super) fn move_block(
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

/// `.dynamic`'s pointers into the block moved by `delta`; the file offsets
/// of the words rewritten.
pub(super) fn move_dynamic_pointers(
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
pub(super) fn renumber(
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
pub(super) fn move_block_symbols(
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
