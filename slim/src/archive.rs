//! Static archives (System V / GNU `ar`): members rewritten, each header's
//! size field restated, and the symbol index's member offsets moved to
//! where the members now start. Thin archives and BSD archives (`#1/`
//! names, `__.SYMDEF`) are left alone, with the reason.

use std::collections::BTreeMap;

use crate::pieces::{Output, Piece};
use crate::refusal::Unsafe;

const MAGIC: &[u8] = b"!<arch>\n";
const HEADER: u64 = 60;

/// One member: where its 60-byte header and its data are.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Member {
    pub header: u64,
    pub data: u64,
    pub size: u64,
}

impl Member {
    pub(crate) fn name<'a>(&self, data: &'a [u8]) -> &'a [u8] {
        let h = &data[self.header as usize..self.header as usize + 16];
        let end = h.iter().rposition(|&b| b != b' ').map_or(0, |p| p + 1);
        &h[..end]
    }
}

/// Whether `data` is an archive this module rewrites.
pub(crate) fn is_archive(data: &[u8]) -> bool {
    data.starts_with(MAGIC)
}

/// The members of `data`, in order; `Err` for a layout this module does not
/// rewrite.
pub(crate) fn members(data: &[u8]) -> Result<Vec<Member>, Unsafe> {
    let mut out = Vec::new();
    let mut at = MAGIC.len() as u64;
    while at < data.len() as u64 {
        let h = data
            .get(at as usize..(at + HEADER) as usize)
            .ok_or_else(|| Unsafe::new(format!("the member header at {at:#x} is cut short")))?;
        if &h[58..60] != b"`\n" {
            return Err(Unsafe::new(format!(
                "the member header at {at:#x} has no end marker"
            )));
        }
        if h.starts_with(b"#1/") || h.starts_with(b"__.SYMDEF") {
            return Err(Unsafe::new("BSD archives are not rewritten"));
        }
        let size: u64 = std::str::from_utf8(&h[48..58])
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| Unsafe::new(format!("the member header at {at:#x} states no size")))?;
        let data_at = at + HEADER;
        if data_at + size > data.len() as u64 {
            return Err(Unsafe::new(format!(
                "the member at {at:#x} runs past the end"
            )));
        }
        out.push(Member {
            header: at,
            data: data_at,
            size,
        });
        at = data_at + size + (size & 1);
    }
    Ok(out)
}

/// The archive with members `new` (by index) replaced.
pub(crate) fn rewrite<'a>(
    data: &'a [u8],
    members: &[Member],
    mut new: BTreeMap<usize, Output<'a>>,
) -> Result<Output<'a>, Unsafe> {
    // Where each member's header goes.
    let mut at = MAGIC.len() as u64;
    let mut moved = BTreeMap::new();
    let sizes: Vec<u64> = members
        .iter()
        .enumerate()
        .map(|(i, m)| new.get(&i).map_or(m.size, |o| o.len()))
        .collect();
    for (m, &size) in members.iter().zip(&sizes) {
        moved.insert(m.header, at);
        at += HEADER + size + (size & 1);
    }
    let mut out = Output::default();
    out.push(Piece::Copy(MAGIC));
    for (i, (m, &size)) in members.iter().zip(&sizes).enumerate() {
        let header = &data[m.header as usize..m.data as usize];
        let name = m.name(data);
        let index_width = index_width(name);
        if let Some(o) = new.remove(&i) {
            let mut h = header.to_vec();
            let field = format!("{size:<10}");
            if field.len() != 10 {
                return Err(Unsafe::new("a member is too large for its header"));
            }
            h[48..58].copy_from_slice(field.as_bytes());
            out.push(Piece::Owned(h));
            out.extend(o);
        } else if let Some(width) = index_width {
            out.push(Piece::Copy(header));
            let body = &data[m.data as usize..(m.data + m.size) as usize];
            out.push(Piece::Owned(symbol_index(body, width, &moved)?));
        } else {
            out.push(Piece::Copy(header));
            out.push(Piece::Copy(
                &data[m.data as usize..(m.data + m.size) as usize],
            ));
        }
        if size & 1 == 1 {
            out.push(Piece::Owned(b"\n".to_vec()));
        }
    }
    Ok(out)
}

/// The width of a member's offsets when it is a symbol index (`/`: 32-bit,
/// `/SYM64/`: 64-bit, big-endian; System V ABI, "Archive File"; GNU ar).
pub(crate) fn index_width(name: &[u8]) -> Option<usize> {
    match name {
        b"/" => Some(4),
        b"/SYM64/" => Some(8),
        _ => None,
    }
}

/// What a symbol index states: its symbol names (the string table, as it
/// is) and, for each symbol in order, the index of the member that defines
/// it among `members` of `data`, which the linker reads through the
/// member's header offset.
pub(crate) fn symbol_map(
    body: &[u8],
    width: usize,
    data_members: &[Member],
) -> Result<(Vec<usize>, Vec<u8>), Unsafe> {
    let read = |at: usize| -> Option<u64> {
        let b = body.get(at..at + width)?;
        Some(b.iter().fold(0u64, |v, &x| v << 8 | u64::from(x)))
    };
    let short = || Unsafe::new("the symbol index is cut short");
    let count = read(0).ok_or_else(short)?;
    let names_at = (count as usize)
        .checked_add(1)
        .and_then(|n| n.checked_mul(width))
        .filter(|&n| n <= body.len())
        .ok_or_else(short)?;
    let mut map = Vec::with_capacity(count as usize);
    for i in 0..count as usize {
        let offset = read(width * (1 + i)).ok_or_else(short)?;
        let member = data_members
            .binary_search_by_key(&offset, |m| m.header)
            .map_err(|_| Unsafe::new(format!("the symbol index names no member at {offset:#x}")))?;
        map.push(member);
    }
    Ok((map, body[names_at..].to_vec()))
}

/// The symbol index with each member offset moved.
fn symbol_index(body: &[u8], width: usize, moved: &BTreeMap<u64, u64>) -> Result<Vec<u8>, Unsafe> {
    let read = |at: usize| -> Option<u64> {
        let b = body.get(at..at + width)?;
        Some(b.iter().fold(0u64, |v, &x| v << 8 | u64::from(x)))
    };
    let count = read(0).ok_or_else(|| Unsafe::new("the symbol index is cut short"))?;
    let mut out = body.to_vec();
    for i in 0..count as usize {
        let at = width * (1 + i);
        let old = read(at).ok_or_else(|| Unsafe::new("the symbol index is cut short"))?;
        let new = *moved
            .get(&old)
            .ok_or_else(|| Unsafe::new(format!("the symbol index names no member at {old:#x}")))?;
        let bytes = new.to_be_bytes();
        out[at..at + width].copy_from_slice(&bytes[8 - width..]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, body: &[u8]) -> Vec<u8> {
        let mut h = format!(
            "{name:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n",
            0,
            0,
            0,
            644,
            body.len()
        )
        .into_bytes();
        h.extend(body);
        if body.len() % 2 == 1 {
            h.push(b'\n');
        }
        h
    }

    #[test]
    fn members_move_and_the_index_follows() {
        // Index: two symbols, in the members at 68+? (computed below).
        let a = member("a.o/", b"AAAAAAAAA");
        let b = member("b.o/", b"BB");
        let index_len = 4 + 2 * 4 + 4;
        let first = 8 + 60 + index_len as u64;
        let second = first + a.len() as u64;
        let mut index = 2u32.to_be_bytes().to_vec();
        index.extend((first as u32).to_be_bytes());
        index.extend((second as u32).to_be_bytes());
        index.extend(b"x\0y\0");
        let mut data = MAGIC.to_vec();
        data.extend(member("/", &index));
        data.extend(&a);
        data.extend(&b);
        let ms = members(&data).unwrap();
        assert_eq!(ms.len(), 3);
        let mut new = BTreeMap::new();
        let mut o = Output::default();
        o.push(Piece::Owned(b"A".to_vec()));
        new.insert(1, o);
        let out = rewrite(&data, &ms, new).unwrap().to_vec();
        let ms2 = members(&out).unwrap();
        assert_eq!(ms2[1].size, 1);
        assert_eq!(&out[ms2[2].data as usize..][..2], b"BB");
        // The index points at the members' new headers.
        let idx = &out[ms2[0].data as usize..];
        assert_eq!(
            u32::from_be_bytes(idx[4..8].try_into().unwrap()) as u64,
            ms2[1].header
        );
        assert_eq!(
            u32::from_be_bytes(idx[8..12].try_into().unwrap()) as u64,
            ms2[2].header
        );
    }

    #[test]
    fn an_index_states_the_same_map_after_its_members_move() {
        let mut index = 2u32.to_be_bytes().to_vec();
        let first = 8 + 60 + 16u64;
        index.extend((first as u32).to_be_bytes());
        index.extend(((first + 60 + 10) as u32).to_be_bytes());
        index.extend(b"x\0y\0");
        let mut data = MAGIC.to_vec();
        data.extend(member("/", &index));
        data.extend(member("a.o/", b"AAAAAAAAAA"));
        data.extend(member("b.o/", b"BB"));
        let ms = members(&data).unwrap();
        let mut o = Output::default();
        o.push(Piece::Owned(b"A".to_vec()));
        let out = rewrite(&data, &ms, BTreeMap::from([(1, o)]))
            .unwrap()
            .to_vec();
        let ms2 = members(&out).unwrap();
        let map = |d: &[u8], m: &[Member]| symbol_map(&d[m[0].data as usize..][..16], 4, m);
        assert_eq!(map(&data, &ms).unwrap(), (vec![1, 2], b"x\0y\0".to_vec()));
        assert_eq!(map(&out, &ms2).unwrap(), map(&data, &ms).unwrap());
        // An offset that is no member's header is an error, not a guess.
        let mut bad = data.clone();
        bad[8 + 60 + 4..8 + 60 + 8].copy_from_slice(&7u32.to_be_bytes());
        assert!(map(&bad, &ms).is_err());
        // A count past the body is cut short.
        assert!(symbol_map(&u32::MAX.to_be_bytes(), 4, &ms).is_err());
    }
}
