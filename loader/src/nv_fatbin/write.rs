//! Writing NVIDIA fat binaries: the container header as it was, with the
//! size of what follows it restated, then the kept entries byte for byte
//! (header, payload and its padding: compressed entries are never
//! re-encoded), then the padding the original had after its last entry.
//! A `--concat` group is one entry: it is kept or dropped whole. Keeping
//! every entry gives back the same bytes. `tests/writers.rs` checks what
//! `cuobjdump` lists and extracts from the result.

use super::NvFatbin;

/// `fatbin` with only the top-level entries `keep` says yes to (by index in
/// [`NvFatbin::entries`]; group members are never asked, their group is).
pub fn keep(fatbin: &NvFatbin<'_>, keep: impl Fn(usize) -> bool) -> Vec<u8> {
    let data = fatbin.data;
    let header_len = u16::from_le_bytes([data[6], data[7]]) as usize;
    let top: Vec<(usize, &super::Entry)> = fatbin
        .entries()
        .iter()
        .enumerate()
        .filter(|(_, e)| e.group.is_none())
        .collect();
    // What lies between the last entry and the stated end: zero padding.
    let entries_end = top
        .last()
        .map_or(header_len, |(_, e)| (e.offset + e.stored_size) as usize);
    let mut out = data[..header_len].to_vec();
    for (i, entry) in top {
        if keep(i) {
            let start = entry.header_offset as usize;
            let end = (entry.offset + entry.stored_size) as usize;
            out.extend_from_slice(&data[start..end]);
        }
    }
    out.extend_from_slice(&data[entries_end..]);
    let size = (out.len() - header_len) as u64;
    out[8..16].copy_from_slice(&size.to_le_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::Limits;

    #[test]
    fn keeps_entries_byte_for_byte() {
        let data = include_bytes!("../../../fuzz/corpus/nv_fatbin/nvcc13-concat8");
        let fatbin = NvFatbin::parse(data, &Limits::default()).unwrap();
        assert_eq!(keep(&fatbin, |_| true), &data[..fatbin.len() as usize]);
        let top: Vec<usize> = (0..fatbin.entries().len())
            .filter(|&i| fatbin.entries()[i].group.is_none())
            .collect();
        for &drop in &top {
            let out = keep(&fatbin, |i| i != drop);
            let fewer = NvFatbin::parse(&out, &Limits::default()).unwrap();
            let kinds = |f: &NvFatbin<'_>| -> Vec<(u16, u32, u64)> {
                f.entries()
                    .iter()
                    .filter(|e| e.group.is_none())
                    .map(|e| (e.kind, e.sm, e.flags))
                    .collect()
            };
            let mut want = kinds(&fatbin);
            want.remove(top.iter().position(|&t| t == drop).unwrap());
            assert_eq!(kinds(&fewer), want);
        }
    }
}
