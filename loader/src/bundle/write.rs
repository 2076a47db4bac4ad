//! Writing clang offload bundles, laid out byte for byte as
//! `clang-offload-bundler`'s binary handler lays them out
//! (clang/lib/Driver/OffloadBundler.cpp, `BinaryFileHandler::WriteHeader` and
//! `WriteBundle`): the table in entry order, the first code object at the
//! end of the table rounded up to the bundle alignment, each next one at the
//! end of the previous rounded up again, zeros in between, nothing after the
//! last. `tests/writers.rs` compares the output with the bundler's.

use super::{Bundle, ENTRY_FIXED_LEN, HEADER_LEN};
use crate::magic;

/// The largest alignment [`alignment`] considers: 64 KiB (HIP's is 4096).
const MAX_ALIGN: u64 = 1 << 16;

/// Where the bundler puts each code object of sizes `sizes` after a table
/// of IDs `ids`, aligned to `align` (a power of two).
fn offsets<'a>(ids: impl Iterator<Item = &'a str>, sizes: &[u64], align: u64) -> Vec<u64> {
    let table: u64 = ids.map(|id| ENTRY_FIXED_LEN + id.len() as u64).sum();
    let mut next = HEADER_LEN + table;
    sizes
        .iter()
        .map(|&size| {
            let at = next.next_multiple_of(align);
            next = at + size;
            at
        })
        .collect()
}

/// Where everything of a bundle goes: the header and table as bytes, then
/// each code object at its offset. Lets a caller write the code objects
/// from where they already are ([`write()`] copies them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Magic, count and table.
    pub header: Vec<u8>,
    /// Each entry's code object offset, in entry order.
    pub offsets: Vec<u64>,
    /// The bundle's length: the end of the last code object (or of the
    /// table).
    pub len: u64,
}

impl Layout {
    /// The layout of entries with `ids` and code objects of `sizes`, aligned
    /// to `align` (a power of two; the bundler's `-bundle-align`, 4096 for
    /// HIP).
    pub fn new(ids: &[&str], sizes: &[u64], align: u64) -> Layout {
        let align = align.max(1);
        let offsets = offsets(ids.iter().copied(), sizes, align);
        let header = table(ids, sizes, &offsets);
        let len = offsets
            .iter()
            .zip(sizes)
            .map(|(a, s)| a + s)
            .fold(header.len() as u64, u64::max);
        Layout {
            header,
            offsets,
            len,
        }
    }
}

/// The length of [`table`]'s bytes for entries `ids`: magic, count and
/// each entry's record.
pub fn table_len(ids: &[&str]) -> u64 {
    HEADER_LEN
        + ids
            .iter()
            .map(|id| ENTRY_FIXED_LEN + id.len() as u64)
            .sum::<u64>()
}

/// The magic, count and table of a bundle whose entries `ids` have code
/// objects of `sizes` at `offsets` (from the bundle's start), in that order.
pub fn table(ids: &[&str], sizes: &[u64], offsets: &[u64]) -> Vec<u8> {
    let mut header = Vec::with_capacity(table_len(ids) as usize);
    header.extend_from_slice(magic::BUNDLE);
    header.extend((ids.len() as u64).to_le_bytes());
    for ((id, size), offset) in ids.iter().zip(sizes).zip(offsets) {
        header.extend(offset.to_le_bytes());
        header.extend(size.to_le_bytes());
        header.extend((id.len() as u64).to_le_bytes());
        header.extend(id.as_bytes());
    }
    header
}

/// The bundle of `entries` (ID, code object), in that order, aligned to
/// `align` (a power of two; the bundler's `-bundle-align`, 4096 for HIP).
pub fn write(entries: &[(&str, &[u8])], align: u64) -> Vec<u8> {
    let ids: Vec<&str> = entries.iter().map(|(id, _)| *id).collect();
    let sizes: Vec<u64> = entries.iter().map(|(_, o)| o.len() as u64).collect();
    let layout = Layout::new(&ids, &sizes, align);
    let mut out = Vec::with_capacity(layout.len as usize);
    out.extend_from_slice(&layout.header);
    for ((_, object), &offset) in entries.iter().zip(&layout.offsets) {
        // The bundler pads only forwards: an empty entry may sit before the
        // current end (its offset is still the aligned next position).
        if (out.len() as u64) < offset {
            out.resize(offset as usize, 0);
        }
        out.extend_from_slice(object);
    }
    out
}

/// The alignment the bundler was given when it wrote `bundle`: the largest
/// power of two up to 64 KiB with which [`write()`] puts every code object
/// where `bundle` has it; `None` when none does (a bundle the bundler did
/// not lay out, which a writer cannot reproduce).
pub fn alignment(bundle: &Bundle<'_>) -> Option<u64> {
    let entries = bundle.entries();
    let sizes: Vec<u64> = entries.iter().map(|e| e.size).collect();
    let found: Vec<u64> = entries.iter().map(|e| e.offset).collect();
    let mut align = MAX_ALIGN;
    while align >= 1 {
        if offsets(entries.iter().map(|e| e.id), &sizes, align) == found {
            return Some(align);
        }
        align /= 2;
    }
    None
}

/// `bundle` with only the entries `keep` says yes to, in their order and
/// with the bundle's own alignment ([`alignment`]); `None` when that
/// alignment cannot be told. Keeping every entry gives back the same bytes.
pub fn keep(bundle: &Bundle<'_>, keep: impl Fn(usize) -> bool) -> Option<Vec<u8>> {
    let align = alignment(bundle)?;
    let mut kept = Vec::new();
    for (i, entry) in bundle.entries().iter().enumerate() {
        if keep(i) {
            kept.push((entry.id, bundle.code_object(entry).ok()?));
        }
    }
    Some(write(&kept, align))
}

/// `bundle` with its entries in `order` (indices into its table, each
/// once), entry `i` under the ID `ids[i]` (its own, or another name for the
/// same code object), laid out with the bundle's own alignment, else HIP's
/// 4096 (the bundler's `-bundle-align` for HIP). `None` when `order` is not
/// a permutation of the table, `ids` does not name each entry, or a code
/// object lies outside the bundle.
pub fn reordered(bundle: &Bundle<'_>, order: &[usize], ids: &[&str]) -> Option<Vec<u8>> {
    let entries = bundle.entries();
    let mut seen = vec![false; entries.len()];
    if order.len() != entries.len() || ids.len() != entries.len() {
        return None;
    }
    let mut listed = Vec::with_capacity(order.len());
    for &i in order {
        if std::mem::replace(seen.get_mut(i)?, true) {
            return None;
        }
        listed.push((ids[i], bundle.code_object(&entries[i]).ok()?));
    }
    Some(write(&listed, alignment(bundle).unwrap_or(4096)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::Limits;

    #[test]
    fn writes_what_it_reads_at_every_alignment() {
        let host = ("host-x86_64-unknown-linux-gnu-", &b""[..]);
        let a = ("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+", &b"AAAAAAAAA"[..]);
        let b = ("hipv4-amdgcn-amd-amdhsa--gfx1100", &b"BBB"[..]);
        for align in [1, 8, 4096] {
            for entries in [vec![host, a, b], vec![a, host, b], vec![a, b], vec![host]] {
                let bytes = write(&entries, align);
                let bundle = Bundle::parse(&bytes, &Limits::default()).unwrap();
                let got: Vec<(&str, &[u8])> = bundle
                    .entries()
                    .iter()
                    .map(|e| (e.id, bundle.code_object(e).unwrap()))
                    .collect();
                assert_eq!(got, entries);
                assert_eq!(keep(&bundle, |_| true).unwrap(), bytes);
                // The largest alignment that lays it out the same.
                assert!(alignment(&bundle).unwrap() >= align);
                // Dropping an entry keeps the others, re-laid.
                let fewer = keep(&bundle, |i| i != 0).unwrap();
                let fewer = Bundle::parse(&fewer, &Limits::default()).unwrap();
                assert_eq!(fewer.entries().len(), entries.len() - 1);
            }
        }
    }

    #[test]
    fn the_table_length_is_that_of_the_table_written() {
        let ids = [
            "host-x86_64-unknown-linux-gnu-",
            "hipv4-amdgcn-amd-amdhsa--gfx90a",
            "",
        ];
        for n in 0..=ids.len() {
            let ids = &ids[..n];
            let zeros = vec![0; n];
            let table = table(ids, &zeros, &zeros);
            assert_eq!(table_len(ids), table.len() as u64);
            // The table as the reader reads it ends there.
            let bundle =
                Bundle::parse_table(&table, table.len() as u64, &Limits::default()).unwrap();
            assert_eq!(bundle.len(), table.len() as u64);
        }
    }

    #[test]
    fn reordering_moves_entries_with_their_code_objects() {
        let host = ("host-x86_64-unknown-linux-gnu-", &b""[..]);
        let a = ("hipv4-amdgcn-amd-amdhsa--gfx90a", &b"AAAAAAAAA"[..]);
        let b = ("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+", &b"BBB"[..]);
        let bytes = write(&[host, a, b], 4096);
        let bundle = Bundle::parse(&bytes, &Limits::default()).unwrap();
        let ids = [host.0, a.0, b.0];
        let moved = reordered(&bundle, &[0, 2, 1], &ids).unwrap();
        assert_eq!(moved, write(&[host, b, a], 4096));
        assert_eq!(reordered(&bundle, &[0, 1, 2], &ids).unwrap(), bytes);
        for bad in [&[0, 1][..], &[0, 1, 1], &[0, 1, 3]] {
            assert_eq!(reordered(&bundle, bad, &ids), None, "{bad:?}");
        }
        assert_eq!(reordered(&bundle, &[0, 1, 2], &ids[..2]), None);
        // Renamed: the same code object under another ID.
        let renamed = [host.0, "hipv4-amdgcn-amd-amdhsa--gfx1101", b.0];
        let moved = reordered(&bundle, &[0, 2, 1], &renamed).unwrap();
        assert_eq!(moved, write(&[host, b, (renamed[1], a.1)], 4096));
    }

    #[test]
    fn a_layout_the_bundler_never_writes_has_no_alignment() {
        let mut bytes = write(&[("hip-amdgcn-amd-amdhsa--gfx90a", b"CODE")], 1);
        // The table ends at 85; move the code object to 87, where no power
        // of two puts it (85, 86, 88, 96, 128, ...).
        let at = bytes.len() - 4;
        assert_eq!(at, 85);
        bytes.splice(at..at, [0, 0]);
        bytes[32..40].copy_from_slice(&87u64.to_le_bytes());
        let bundle = Bundle::parse(&bytes, &Limits::default()).unwrap();
        assert_eq!(alignment(&bundle), None);
        assert!(keep(&bundle, |_| true).is_none());
    }
}
