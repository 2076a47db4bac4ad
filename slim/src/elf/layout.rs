//! Where the segments go when the section shrinks: what is cut, how far the
//! rest moves, and whether the program header table grows (and what moves
//! out of its way).

use object::elf;
use object::read::elf::{ProgramHeader, SectionHeader};

use crate::refusal::{unsafe_, Unsafe};

use super::map::Map;
use super::patch::relative_type;
use super::room;
use super::target::{Target, PAGE, PHDR_SIZE};

/// Where a loaded file's pieces go: the section's segment ends with the
/// kept containers (and the sections moved out of the program header
/// table's way); what followed the section in it becomes a segment of its
/// own at its addresses; the file from `cut` on moves back by `shift`.
pub(super) struct Layout {
    /// The segment holding the section: its index, address, file offset,
    /// sizes in the file and in memory, flags.
    pub(super) load: usize,
    pub(super) lv: u64,
    pub(super) lo: u64,
    pub(super) lf: u64,
    pub(super) lm: u64,
    pub(super) flags: u32,
    /// Whether what follows the section in its segment becomes a segment of
    /// its own.
    pub(super) split: bool,
    /// The sections in the program header table's way, and their new address.
    pub(super) block: Option<(room::Block, u64)>,
    /// Where the first part of the segment ends.
    pub(super) seg1_end: u64,
    /// Where the second part starts, in the original file and in memory.
    pub(super) cut: u64,
    pub(super) v2: u64,
    /// How far back everything from `cut` on moves in the file.
    pub(super) shift: u64,
    /// The original's code, by address: where a part keeps execute.
    pub(super) code: Vec<(u64, u64)>,
}

/// Why compaction frees nothing though `removable` bytes could go: `None`
/// (nothing to gain) when they are less than a 4 KiB page; else an error
/// that says so in the segment's own page, `granule` bytes (up to 2 MiB:
/// a segment moves in the file by whole multiples of its alignment), after
/// which they are left as holes instead.
pub(super) fn too_little(removable: u64, granule: u64) -> Result<Option<Layout>, Unsafe> {
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
    pub(super) fn plan(t: &Target<'_>, map: &Map) -> Result<Option<Layout>, Unsafe> {
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
    pub(super) fn flags(&self, from: u64, to: u64) -> u32 {
        let code = self.code.iter().any(|&(s, e)| s < to && e > from);
        if self.split && !code {
            self.flags & !elf::PF_X
        } else {
            self.flags
        }
    }

    /// Where the block's bytes go in the file.
    pub(super) fn block_offset(&self, to: u64) -> u64 {
        self.lo.wrapping_add(to - self.lv)
    }
}

/// Whether the program header table, ending at `table_end`, has room for
/// one more entry before what follows it: the first section, the section
/// header table or the first segment content after it.
pub(super) fn room_after(t: &Target<'_>, table_end: u64) -> bool {
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
pub(super) fn program_header_table(
    t: &Target<'_>,
    map: &Map,
    l: &Layout,
) -> Result<Vec<u8>, Unsafe> {
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
