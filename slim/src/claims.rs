//! Whether the bytes a rewrite changes belong to nothing else in the file.
//!
//! A well-formed file gives each byte one owner: the ELF header, the
//! program and section header tables, or one section. A crafted or damaged
//! file can give two: a section name table, a symbol table or another
//! section laid over an offload section, so that rewriting the containers
//! would also rename sections or change code. Such a file is never
//! rewritten, neither compacted nor in place: what the rewrite promised
//! (the same file but for the images that go) would not hold.

use object::elf;
use object::read::elf::{FileHeader, SectionHeader};
use object::LittleEndian as LE;

use crate::elf::Unsafe;

type Header = elf::FileHeader64<LE>;

/// `Ok` when each range of `ranges` (file offsets, start and length) of the
/// ELF file `data` lies in one section only, the one that holds it whole,
/// and in no header table.
pub(crate) fn sole_owner(data: &[u8], ranges: &[(u64, u64)]) -> Result<(), Unsafe> {
    let refuse = |why: String| Unsafe {
        why,
        in_place: false,
    };
    let bad = |e: object::Error| refuse(format!("its ELF headers cannot be read: {e}"));
    let header = Header::parse(data).map_err(bad)?;
    let e = header.endian().map_err(bad)?;
    let shdrs = header.section_headers(e, data).map_err(bad)?;
    let names = header.section_strings(e, data, shdrs).ok();
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
            return Err(refuse(format!(
                "the bytes at {:#x}..{:#x} that would change are also {what}'s",
                range.0,
                range.0.saturating_add(range.1)
            )));
        }
        let mut owners = shdrs.iter().enumerate().filter_map(|(i, s)| {
            let file = s.file_range(e)?;
            meets(file, range).then_some((i, file))
        });
        let first = owners.next();
        let second = owners.next();
        let other = match (first, second) {
            (Some((_, file)), None) if holds(file, range) => continue,
            (Some((i, file)), None) => (i, file),
            (_, Some(other)) => other,
            (None, None) => continue,
        };
        let name = names
            .and_then(|n| n.get(shdrs[other.0].sh_name(e)).ok())
            .map_or_else(String::new, |n| {
                format!(" ({})", String::from_utf8_lossy(n))
            });
        return Err(refuse(format!(
            "the bytes at {:#x}..{:#x} that would change are also section {}{name}'s, at \
             {:#x}..{:#x}",
            range.0,
            range.0.saturating_add(range.1),
            other.0,
            other.1 .0,
            other.1 .0.saturating_add(other.1 .1),
        )));
    }
    Ok(())
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
