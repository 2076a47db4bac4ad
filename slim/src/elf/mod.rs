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
//!
//! The modules, each depending only on those before it: `point` (what a
//! pointer means), `target` (the file's headers), `map` (where each
//! container goes), `patches` (bytes over the input's), `omp` (OpenMP's
//! device-image table), `patch` (every reference rewritten, or the reason
//! none can be), `room` (what sits after the program header table),
//! `layout` (where the segments go), `block` (what moves out of the
//! table's way); this file puts them together.

use object::elf;
use object::read::elf::{ProgramHeader, SectionHeader};

use crate::pieces::Output;
use crate::refs;
use crate::refusal::{unsafe_, Unsafe};

mod block;
mod layout;
mod map;
mod omp;
mod patch;
mod patches;
mod point;
mod room;
mod target;

use block::*;
use layout::*;
pub(crate) use map::Placed;
use map::*;
use patch::*;
use patches::Patches;
use target::*;

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
/// that shares none of this (`compare`). `gpu`: the file ranges of the
/// containers in other sections, in order (no host data word lies there).
pub fn compact<'a>(
    data: &'a [u8],
    offset: u64,
    size: u64,
    containers: &mut [Placed<'a>],
    gpu: &[(u64, u64)],
) -> Result<Option<(Output<'a>, Option<Pinned>)>, Unsafe> {
    let t = Target::parse(data, offset, size)?;
    let Some(map) = Map::plan(&t, containers, &[]) else {
        return Ok(None);
    };
    if t.kind == elf::ET_REL || !t.alloc {
        return Ok(compact_unloaded(&t, &map, containers)?.map(|out| (out, None)));
    }
    let packed_size = map.new_size;
    let mut first_pin: Option<String> = None;
    // Exact references no relocation describes, to kept containers'
    // starts, pin those containers at their places; each try pins more,
    // until none is left or one cannot be kept true so (see `pins`).
    let mut pinned: Vec<u64> = Vec::new();
    let mut map = map;
    let mut scan: Option<(Vec<(u64, u64)>, refs::Scan<'_>)> = None;
    loop {
        let Some(layout) = Layout::plan(&t, &map)? else {
            return Ok(None);
        };
        // What refers into the section, and into what moves out of the
        // program header table's way, is searched for at once (and again
        // only where that block differs).
        let mut together = vec![(t.addr, t.addr + t.size)];
        together.extend(layout.block.iter().map(|(b, _)| b.range()));
        if scan.as_ref().is_none_or(|(asked, _)| *asked != together) {
            // What does not depend on the ranges asked about together is
            // kept from the last plan's scan.
            let next = match scan.take() {
                Some((_, last)) => last.for_ranges(&together),
                None => t.scan(&together, gpu),
            };
            scan = Some((together.clone(), next));
        }
        let Some((_, scan)) = scan.as_ref() else {
            unreachable!("made above")
        };
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
        let referenced = patch_references(&t, &map, &mut patches)?;
        let unseen = unseen(&t, &map, scan, &patches);
        if !unseen.is_empty() {
            let more =
                pins(&unseen, &map, t.addr).filter(|p| p.iter().any(|a| !pinned.contains(a)));
            let Some(more) = more else {
                return Err(refusal(&unseen, &map, t.addr));
            };
            first_pin.get_or_insert_with(|| unseen[0].to_string());
            pinned.extend(more);
            map = match Map::plan(&t, containers, &pinned) {
                Some(map) => map,
                None => return Ok(None),
            };
            continue;
        }
        if referenced == 0 {
            return Err(unsafe_(
                "no relocation or fat-binary wrapper points into the section, so what refers to it is unknown",
            ));
        }
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
            move_block(&t, &layout, block, *to, scan, &mut patches)?;
        }
        let pins = first_pin.map(|first| Pinned {
            why: format!(
                "{} container boundaries keep their addresses for what refers to them with no \
                 relocation (the first: {first})",
                pinned.len()
            ),
            gaps: map.new_size - packed_size,
        });
        return Ok(Some((
            write_loaded(&t, &layout, &map, &patches, containers),
            pins,
        )));
    }
}

/// Containers a compaction kept at their addresses ([`compact`]): why, and
/// the bytes of zeros left before them (holes on disk).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pinned {
    /// What refers to them, said.
    pub why: String,
    /// The gaps' bytes.
    pub gaps: u64,
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
    out.extend(packed(containers, map));
    out.pad_to(cut - shift);
    patches.copy(t.data, cut, t.data.len() as u64, &mut out);
    Ok(Some(out))
}

/// The file: up to the section, its new bytes, the moved sections, the
/// rest moved back, each with its patches.
fn write_loaded<'a>(
    t: &Target<'a>,
    l: &Layout,
    map: &Map,
    patches: &Patches,
    containers: &mut [Placed<'a>],
) -> Output<'a> {
    let mut out = Output::default();
    patches.copy(t.data, 0, t.offset, &mut out);
    out.extend(packed(containers, map));
    if let Some((b, to)) = &l.block {
        out.pad_to(l.block_offset(*to));
        patches.copy(t.data, b.offset, b.offset + b.len, &mut out);
    }
    out.pad_to(l.cut - l.shift);
    patches.copy(t.data, l.cut, t.data.len() as u64, &mut out);
    out
}

/// The new section's bytes, taken from `containers`: each container's new
/// bytes at the place `map` gives it (the section's alignment, or a
/// pinned container's own place), zeros between.
fn packed<'a>(containers: &mut [Placed<'a>], map: &Map) -> Output<'a> {
    let mut body = Output::default();
    let kept = containers.iter_mut().filter(|c| !c.output.is_empty());
    for (c, m) in kept.zip(&map.moves) {
        body.pad_to(m.2);
        body.extend(std::mem::take(&mut c.output));
    }
    body
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
