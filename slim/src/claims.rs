//! Whether the bytes a rewrite changes belong to nothing else in the file.
//!
//! A well-formed file gives each byte one owner: the ELF header, the
//! program and section header tables, or one section. A crafted or damaged
//! file can give two: a section name table, a symbol table or another
//! section laid over an offload section, or the offload section itself
//! named as the table the section names or a symbol table's strings are
//! read from, so that rewriting the containers would also rename sections
//! or change code. Such a file is never
//! rewritten, neither compacted nor in place: what the rewrite promised
//! (the same file but for the images that go) would not hold.

use object::elf;
use object::read::elf::{FileHeader, SectionHeader};
use object::LittleEndian as LE;

use crate::refusal::Unsafe;

type Header = elf::FileHeader64<LE>;

/// `Ok` when each range of `ranges` (file offsets, start and length) of the
/// ELF file `data` lies in one section only, the one that holds it whole,
/// and in no header table.
pub(crate) fn sole_owner(data: &[u8], ranges: &[(u64, u64)]) -> Result<(), Unsafe> {
    let bad =
        |e: object::Error| Unsafe::not_in_place(format!("its ELF headers cannot be read: {e}"));
    let header = Header::parse(data).map_err(bad)?;
    let e = header.endian().map_err(bad)?;
    let shdrs = header.section_headers(e, data).map_err(bad)?;
    let names = header.section_strings(e, data, shdrs).ok();
    let shstrndx = header.shstrndx(e, data).ok();
    let phdr_table = (
        header.e_phoff(e),
        u64::from(header.e_phnum(e)) * u64::from(header.e_phentsize(e)),
    );
    let shdr_table = (
        header.e_shoff(e),
        shdrs.len() as u64 * u64::from(header.e_shentsize(e)),
    );
    let tables = [
        ("the ELF header", (0, u64::from(header.e_ehsize(e)))),
        ("the program header table", phdr_table),
        ("the section header table", shdr_table),
    ];
    for &range in ranges {
        if let Some((what, _)) = tables.iter().find(|(_, t)| meets(*t, range)) {
            return Err(Unsafe::not_in_place(format!(
                "the bytes at {:#x}..{:#x} that would change are also {what}'s",
                range.0,
                range.0.saturating_add(range.1)
            )));
        }
        // The section that holds the range whole is its owner; any other
        // that shares a byte with it is a second one.
        let meeting = || {
            shdrs.iter().enumerate().filter_map(|(i, s)| {
                let file = s.file_range(e)?;
                meets(file, range).then_some((i, s, file))
            })
        };
        let own = meeting().find(|m| holds(m.2, range)).map(|m| m.0);
        if let Some(what) = own.and_then(|i| role(shstrndx, shdrs, e, names, i)) {
            return Err(Unsafe::not_in_place(format!(
                "the bytes at {:#x}..{:#x} that would change are also {what}",
                range.0,
                range.0.saturating_add(range.1)
            )));
        }
        let Some((other, s, file)) = meeting().find(|m| Some(m.0) != own) else {
            continue;
        };
        let name = label(s, e, names);
        return Err(Unsafe::not_in_place(format!(
            "the bytes at {:#x}..{:#x} that would change are also section {other}{name}'s, at \
             {:#x}..{:#x}",
            range.0,
            range.0.saturating_add(range.1),
            file.0,
            file.0.saturating_add(file.1),
        )));
    }
    Ok(())
}

/// What section `i` is besides its own contents: the table the section
/// names are read from (`e_shstrndx`), or the table a section (itself too)
/// names by `sh_link` (a symbol table's strings, a relocation section's
/// symbols), so that a change to its bytes renames sections or symbols;
/// `None` for neither. A link that only orders sections (`SHF_LINK_ORDER`)
/// reads no byte of it.
fn role(
    shstrndx: Option<u32>,
    shdrs: &[elf::SectionHeader64<LE>],
    e: LE,
    names: Option<object::read::StringTable<'_>>,
    i: usize,
) -> Option<String> {
    if shstrndx == Some(i as u32) {
        return Some("the section name table's".into());
    }
    let (j, s) = shdrs.iter().enumerate().find(|(_, s)| {
        s.sh_link(e) as usize == i && s.sh_flags(e) & u64::from(elf::SHF_LINK_ORDER) == 0
    })?;
    Some(format!(
        "the table section {j}{} links to",
        label(s, e, names)
    ))
}

/// ` (name)` of section `s`, or nothing where its name cannot be read.
fn label(
    s: &elf::SectionHeader64<LE>,
    e: LE,
    names: Option<object::read::StringTable<'_>>,
) -> String {
    names
        .and_then(|n| s.name(e, n).ok())
        .map_or_else(String::new, |n| {
            format!(" ({})", String::from_utf8_lossy(n))
        })
}

/// Whether ranges `a` and `b` (start, length) share a byte.
fn meets(a: (u64, u64), b: (u64, u64)) -> bool {
    a.1 > 0 && b.1 > 0 && a.0 < b.0.saturating_add(b.1) && b.0 < a.0.saturating_add(a.1)
}

/// Whether range `outer` holds all of range `inner`.
fn holds(outer: (u64, u64), inner: (u64, u64)) -> bool {
    outer.0 <= inner.0 && inner.0.saturating_add(inner.1) <= outer.0.saturating_add(outer.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ELF64 file of 0x400 bytes with a null section, a name table and
    /// `sections` (name offset, file offset, size), their headers at 0x300.
    fn file(sections: &[(u32, u64, u64)]) -> Vec<u8> {
        let mut data = vec![0u8; 0x400];
        data[..4].copy_from_slice(b"\x7fELF");
        data[4..7].copy_from_slice(&[2, 1, 1]);
        data[0x10..0x12].copy_from_slice(&1u16.to_le_bytes());
        data[0x12..0x14].copy_from_slice(&62u16.to_le_bytes());
        data[0x14..0x18].copy_from_slice(&1u32.to_le_bytes());
        data[0x28..0x30].copy_from_slice(&0x300u64.to_le_bytes());
        data[0x34..0x36].copy_from_slice(&64u16.to_le_bytes());
        data[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        let count = 2 + sections.len() as u16;
        data[0x3c..0x3e].copy_from_slice(&count.to_le_bytes());
        data[0x3e..0x40].copy_from_slice(&1u16.to_le_bytes());
        // The name table at 0x40.
        data[0x40..0x4c].copy_from_slice(b"\0.big\0.kern\0");
        let all = [(0, 0x40, 12)].into_iter().chain(sections.iter().copied());
        for (i, (name, offset, size)) in all.enumerate() {
            let h = 0x340 + 64 * i;
            data[h..h + 4].copy_from_slice(&name.to_le_bytes());
            let kind: u32 = if i == 0 { 3 } else { 1 };
            data[h + 4..h + 8].copy_from_slice(&kind.to_le_bytes());
            data[h + 0x18..h + 0x20].copy_from_slice(&offset.to_le_bytes());
            data[h + 0x20..h + 0x28].copy_from_slice(&size.to_le_bytes());
        }
        data
    }

    #[test]
    fn a_second_owner_is_named_whichever_comes_first() {
        // `.kern` (section 3) alone holds its bytes.
        let alone = file(&[(6, 0x100, 0x10), (6, 0x200, 0x80)]);
        assert_eq!(sole_owner(&alone, &[(0x200, 0x80)]), Ok(()));
        assert_eq!(sole_owner(&alone, &[(0x210, 0x10)]), Ok(()));
        // `.big` over the start of `.kern`, before it in the table or after:
        // named, not `.kern`.
        for (sections, big) in [
            ([(1, 0x100, 0x140), (6, 0x200, 0x80)], 2),
            ([(6, 0x200, 0x80), (1, 0x100, 0x140)], 3),
        ] {
            let why = sole_owner(&file(&sections), &[(0x200, 0x80)]).unwrap_err();
            assert!(!why.in_place);
            assert!(
                why.why.contains(&format!("section {big} (.big)'s")),
                "{}",
                why.why
            );
        }
        // Part of a section, part outside it; a header table.
        let why = sole_owner(&alone, &[(0x270, 0x20)]).unwrap_err();
        assert!(why.why.contains("section 3 (.kern)'s"), "{}", why.why);
        let why = sole_owner(&alone, &[(0x2f0, 0x20)]).unwrap_err();
        assert!(
            why.why.contains("the section header table's"),
            "{}",
            why.why
        );
    }

    /// A section that the others' names are read from, or that another
    /// section's `sh_link` names, is refused even when it alone holds the
    /// bytes; a link that only orders sections is no claim.
    #[test]
    fn a_table_others_read_is_a_second_owner() {
        let kern = &[(0x200, 0x80)];
        // `e_shstrndx` names `.kern` (section 2).
        let mut names_here = file(&[(6, 0x200, 0x80)]);
        names_here[0x3e..0x40].copy_from_slice(&2u16.to_le_bytes());
        let why = sole_owner(&names_here, kern).unwrap_err();
        assert!(why.why.contains("the section name table's"), "{}", why.why);
        // The name table itself.
        let why = sole_owner(&file(&[(6, 0x200, 0x80)]), &[(0x40, 12)]).unwrap_err();
        assert!(why.why.contains("the section name table's"), "{}", why.why);
        // `.big` (section 3, elsewhere) links to `.kern`: as its string
        // table, refused; with SHF_LINK_ORDER, not.
        for (flags, refused) in [(0u64, true), (0x80, false)] {
            let mut linked = file(&[(6, 0x200, 0x80), (1, 0x100, 0x10)]);
            let h = 0x300 + 3 * 64;
            linked[h + 0x08..h + 0x10].copy_from_slice(&flags.to_le_bytes());
            linked[h + 0x28..h + 0x2c].copy_from_slice(&2u32.to_le_bytes());
            match sole_owner(&linked, kern) {
                Err(why) => {
                    assert!(refused, "{}", why.why);
                    assert!(
                        why.why.contains("the table section 3 (.big) links to"),
                        "{}",
                        why.why
                    );
                }
                Ok(()) => assert!(!refused),
            }
        }
    }

    #[test]
    fn ranges_meet_when_they_share_a_byte() {
        assert!(meets((0, 10), (9, 1)));
        assert!(!meets((0, 10), (10, 5)));
        assert!(!meets((0, 0), (0, 5)));
        assert!(meets((u64::MAX - 1, 5), (u64::MAX - 1, 1)));
        assert!(holds((0, 10), (2, 8)));
        assert!(!holds((0, 10), (2, 9)));
    }
}
