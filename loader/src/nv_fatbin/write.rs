//! Writing NVIDIA fat binaries: the container header as it was, with the
//! size of what follows it restated, then the kept entries byte for byte
//! (header, payload and its padding: compressed entries are never
//! re-encoded), then the padding the original had after its last entry.
//! Keeping every entry gives back the same bytes.
//!
//! A `--concat` group whose members are all kept is copied byte for byte;
//! one with none kept goes. One with some kept is written again: its kept
//! members' padded slices of the inflated payload back to back, their
//! headers (options blocks and all) with the new offsets, the table's count
//! and length, and the group header's header size, sizes and uncompressed
//! size restated; compressed with the group's method. `nvcc` compresses with
//! zstd at level 5 without a checksum: a group rebuilt with every member
//! is byte for byte the one `nvcc` wrote (tested below on its 8-target
//! build). `tests/writers.rs` checks what `cuobjdump` lists and extracts
//! from the results.

use super::{kind, Compression, Entry, NvFatbin, MIN_ENTRY_HEADER};
use crate::error::{Error, ErrorKind, Result};
use crate::limits::Limits;

/// The zstd level `nvcc` compresses fat binary entries with (CUDA 13.5:
/// its entries and groups are byte for byte what level 5 writes).
const NVCC_ZSTD_LEVEL: i32 = 5;

/// `fatbin` with only the entries `keep` says yes to, by index in
/// [`NvFatbin::entries`]. Every entry that is not a group is asked, group
/// members included; a group is kept when any of its members is (and
/// written again without the others). An error when a group that loses
/// members does not inflate.
pub fn keep(
    fatbin: &NvFatbin<'_>,
    keep: impl Fn(usize) -> bool,
    limits: &Limits,
) -> Result<Vec<u8>> {
    let data = fatbin.data;
    let entries = fatbin.entries();
    let header_len = u16::from_le_bytes([data[6], data[7]]) as usize;
    // What lies between the last entry and the stated end: zero padding.
    let entries_end = entries
        .iter()
        .rev()
        .find(|e| e.group.is_none())
        .map_or(header_len, |e| (e.offset + e.stored_size) as usize);
    let mut out = data[..header_len].to_vec();
    for (i, entry) in entries.iter().enumerate() {
        if entry.group.is_some() {
            continue;
        }
        let whole =
            &data[entry.header_offset as usize..(entry.offset + entry.stored_size) as usize];
        if entry.kind != kind::CONCAT {
            if keep(i) {
                out.extend_from_slice(whole);
            }
            continue;
        }
        let members: Vec<usize> = (i + 1..entries.len())
            .take_while(|&m| entries[m].group == Some(i))
            .collect();
        let kept: Vec<usize> = members.iter().copied().filter(|&m| keep(m)).collect();
        if kept.len() == members.len() {
            out.extend_from_slice(whole);
        } else if !kept.is_empty() {
            regroup(fatbin, i, &members, &kept, limits, &mut out)?;
        }
    }
    out.extend_from_slice(&data[entries_end..]);
    let size = (out.len() - header_len) as u64;
    out[8..16].copy_from_slice(&size.to_le_bytes());
    Ok(out)
}

/// Appends group `g` (whose members are `members`) written again with only
/// the members `kept`.
fn regroup(
    fatbin: &NvFatbin<'_>,
    g: usize,
    members: &[usize],
    kept: &[usize],
    limits: &Limits,
    out: &mut Vec<u8>,
) -> Result<()> {
    let data = fatbin.data;
    let entries = fatbin.entries();
    let group: &Entry = &entries[g];
    let blob = fatbin.inflate(group, limits)?;
    let start = group.header_offset as usize;
    let count_at = start + MIN_ENTRY_HEADER as usize;
    let table_end = count_at
        + u32::from_le_bytes(
            data[count_at + 4..count_at + 8]
                .try_into()
                .unwrap_or_default(),
        ) as usize;
    // A member header runs to the next one's, the last to the table's end.
    let header = |m: usize| -> &[u8] {
        let from = entries[m].header_offset as usize;
        let to = match members.iter().position(|&x| x == m) {
            Some(k) if k + 1 < members.len() => entries[members[k + 1]].header_offset as usize,
            _ => table_end,
        };
        &data[from..to]
    };
    let mut inflated = Vec::new();
    let mut table = Vec::new();
    for &m in kept {
        let member = &entries[m];
        let mut h = header(m).to_vec();
        let offset = u32::try_from(inflated.len())
            .map_err(|_| too_large(member, "concat group member offset", inflated.len()))?;
        h[4..8].copy_from_slice(&offset.to_le_bytes());
        table.extend_from_slice(&h);
        // In bounds: the reader checked each member against the size the
        // group declares, and `inflate` gave exactly that size.
        inflated.extend_from_slice(
            &blob[member.offset as usize..(member.offset + member.stored_size) as usize],
        );
    }
    let stored = match group.compression() {
        Compression::None => inflated.clone(),
        Compression::Zstd => zstd::bulk::compress(&inflated, NVCC_ZSTD_LEVEL).map_err(|e| {
            Error::new(
                group.offset,
                ErrorKind::Decompress {
                    method: "zstd",
                    message: format!("compressing the group again: {e}"),
                },
            )
        })?,
        Compression::Lz4 => lz4_flex::block::compress(&inflated),
        // `inflate` refuses it before this.
        Compression::Old => return Err(unsupported(group)),
    };
    let table_len = 8 + table.len();
    // Whatever the original had between its table and its payload.
    let after_table = &data[table_end..group.offset as usize];
    let header_size = MIN_ENTRY_HEADER as usize + table_len + after_table.len();
    let padded = stored.len().next_multiple_of(8);
    let header_size = u32::try_from(header_size)
        .map_err(|_| too_large(group, "concat group header size", header_size))?;
    let stored_len = u32::try_from(stored.len())
        .map_err(|_| too_large(group, "concat group payload size", stored.len()))?;
    let mut h = data[start..count_at].to_vec();
    h[4..8].copy_from_slice(&header_size.to_le_bytes());
    h[8..16].copy_from_slice(&(padded as u64).to_le_bytes());
    if group.compression() != Compression::None {
        h[16..20].copy_from_slice(&stored_len.to_le_bytes());
        h[56..64].copy_from_slice(&(inflated.len() as u64).to_le_bytes());
    } else {
        // A stored group: whatever sizes it states, restated.
        if h[16..20] != [0; 4] {
            h[16..20].copy_from_slice(&stored_len.to_le_bytes());
        }
        if h[56..64] != [0; 8] {
            h[56..64].copy_from_slice(&(inflated.len() as u64).to_le_bytes());
        }
    }
    out.extend_from_slice(&h);
    out.extend_from_slice(&(kept.len() as u32).to_le_bytes());
    out.extend_from_slice(&(table_len as u32).to_le_bytes());
    out.extend_from_slice(&table);
    out.extend_from_slice(after_table);
    out.extend_from_slice(&stored);
    out.resize(out.len() + padded - stored.len(), 0);
    Ok(())
}

/// A field of `entry` that would not hold `value`.
fn too_large(entry: &Entry, what: &'static str, value: usize) -> Error {
    Error::new(
        entry.header_offset,
        ErrorKind::TooLarge {
            what,
            value: value as u64,
            limit: u32::MAX.into(),
        },
    )
}

/// A group compressed with a scheme that is not written.
fn unsupported(group: &Entry) -> Error {
    Error::new(
        group.header_offset + 40,
        ErrorKind::Malformed {
            what: "NVIDIA fat binary entry",
            why: "compressed with flag 0x1000, a scheme not supported",
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONCAT8: &[u8] = include_bytes!("../../../fuzz/corpus/nv_fatbin/nvcc13-concat8");

    /// (arch, group index, code) of every entry that is code.
    fn listing(f: &NvFatbin<'_>) -> Vec<(String, Option<usize>, Vec<u8>)> {
        let limits = Limits::default();
        (0..f.entries().len())
            .filter(|&i| f.entries()[i].kind != kind::CONCAT)
            .map(|i| {
                let e = &f.entries()[i];
                let arch = e.arch().map_or("?".into(), |a| a.to_string());
                (arch, e.group, f.code(i, &limits).unwrap().into_owned())
            })
            .collect()
    }

    #[test]
    fn keeping_everything_gives_the_same_bytes() {
        let limits = Limits::default();
        let fatbin = NvFatbin::parse(CONCAT8, &limits).unwrap();
        assert_eq!(
            keep(&fatbin, |_| true, &limits).unwrap(),
            &CONCAT8[..fatbin.len() as usize]
        );
    }

    /// Rebuilt with every member, each of nvcc's two groups is the bytes nvcc
    /// wrote: the layout and the compression are nvcc's.
    #[test]
    fn a_group_rebuilt_whole_is_what_nvcc_wrote() {
        let limits = Limits::default();
        let fatbin = NvFatbin::parse(CONCAT8, &limits).unwrap();
        let entries = fatbin.entries();
        for g in (0..entries.len()).filter(|&g| entries[g].kind == kind::CONCAT) {
            let members: Vec<usize> = (0..entries.len())
                .filter(|&m| entries[m].group == Some(g))
                .collect();
            let mut out = Vec::new();
            regroup(&fatbin, g, &members, &members, &limits, &mut out).unwrap();
            let e = &entries[g];
            assert!(
                out == CONCAT8[e.header_offset as usize..(e.offset + e.stored_size) as usize],
                "group {g}"
            );
        }
    }

    /// Any one entry or member dropped: the others are listed, in order,
    /// with the same code; a group left with no member goes.
    #[test]
    fn dropping_any_entry_or_member_keeps_the_others_code() {
        let limits = Limits::default();
        let fatbin = NvFatbin::parse(CONCAT8, &limits).unwrap();
        let all = listing(&fatbin);
        let code: Vec<usize> = (0..fatbin.entries().len())
            .filter(|&i| fatbin.entries()[i].kind != kind::CONCAT)
            .collect();
        for (k, &drop) in code.iter().enumerate() {
            let out = keep(&fatbin, |i| i != drop, &limits).unwrap();
            let fewer = NvFatbin::parse(&out, &limits).unwrap();
            let got: Vec<(String, Vec<u8>)> = listing(&fewer)
                .into_iter()
                .map(|(a, _, c)| (a, c))
                .collect();
            let mut want: Vec<(String, Vec<u8>)> =
                all.iter().map(|(a, _, c)| (a.clone(), c.clone())).collect();
            want.remove(k);
            assert!(got == want, "dropping entry {drop}");
        }
        // Only sm_80 (a member of the first group) and sm_120 (of the second).
        let out = keep(
            &fatbin,
            |i| matches!(fatbin.entries()[i].sm, 80 | 120),
            &limits,
        )
        .unwrap();
        let fewer = NvFatbin::parse(&out, &limits).unwrap();
        let got: Vec<(String, Option<usize>)> = listing(&fewer)
            .into_iter()
            .map(|(a, g, _)| (a, g))
            .collect();
        assert_eq!(
            got,
            [
                ("sm_80".to_string(), Some(0)),
                ("sm_120".to_string(), Some(2))
            ]
        );
        assert!(out.len() < CONCAT8.len());
        // Nothing kept: the header alone.
        let none = keep(&fatbin, |_| false, &limits).unwrap();
        assert_eq!(none.len(), 16);
        assert!(NvFatbin::parse(&none, &limits).unwrap().is_empty());
    }

    /// A group that does not inflate is an error, not a guess.
    #[test]
    fn a_group_that_does_not_inflate_is_an_error() {
        let limits = Limits::default();
        let mut bad = CONCAT8.to_vec();
        // The first group's zstd payload starts at 0x2a8.
        bad[0x2a8 + 8..0x2a8 + 40].fill(0xff);
        let fatbin = NvFatbin::parse(&bad, &limits).unwrap();
        assert!(keep(&fatbin, |i| fatbin.entries()[i].sm != 80, &limits).is_err());
        // Kept whole, it is copied as it is.
        assert!(keep(&fatbin, |_| true, &limits).is_ok());
    }
}
