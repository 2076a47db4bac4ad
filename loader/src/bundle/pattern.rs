//! Telling, at the cost of a few loads, whether a bundle's table lists
//! given entry IDs: for a runtime that meets the same list in bundle after
//! bundle (clang writes one per translation unit, each with the target
//! list of the build) and decides once for it.

use super::{ENTRY_FIXED_LEN, HEADER_LEN};
use crate::limits::Limits;
use crate::magic;

/// The header's length: the magic, then the entry count.
const HEADER: usize = HEADER_LEN as usize;
// An entry's fixed fields as [`IdsPattern::new`] lays them out: offset and
// size (16 bytes, not compared), then the ID's length (8).
const _: () = assert!(magic::BUNDLE.len() + 8 == HEADER && ENTRY_FIXED_LEN == 16 + 8);

/// The bytes that every table listing given entry IDs, in order, holds, at
/// the places it holds them: the magic, the entry count, and each entry's ID
/// length and ID (clang/docs/ClangOffloadBundler.rst; see [`super`]). Each
/// entry's offset and size, which differ from bundle to bundle, are not
/// looked at.
///
/// [`IdsPattern::matches`] is true of a table exactly when
/// [`super::entry_ids`], given the [`Limits`] the pattern was made with,
/// reads these IDs from it, and nothing more: but where
/// reading the IDs is a chain of loads (each ID's length gives the next
/// record's place), a pattern's places are known beforehand, so a table's
/// cache lines are all asked for at once.
#[derive(Debug, Clone)]
pub struct IdsPattern {
    /// The table's first `len` bytes as little-endian words, each with the
    /// mask of the bytes compared (the last word padded with zeros).
    words: Vec<(u64, u64)>,
    len: usize,
    /// Where each entry's record starts.
    records: Vec<usize>,
}

impl IdsPattern {
    /// The pattern of a table listing `ids`; `None` where no table can list
    /// them: more IDs than `limits` lets a table hold.
    pub fn new<'i>(ids: impl IntoIterator<Item = &'i [u8]>, limits: &Limits) -> Option<Self> {
        // The header: the magic, then the count (written below).
        let mut expected = magic::BUNDLE.to_vec();
        expected.resize(HEADER, 0);
        // 0xff where a byte is compared, 0 where not.
        let mut mask = vec![0xff; HEADER];
        let mut count = 0u64;
        let mut records = Vec::new();
        for id in ids {
            count += 1;
            if count > limits.max_entries {
                return None;
            }
            records.push(expected.len());
            // Offset and size, not compared; the ID's length; the ID.
            expected.resize(expected.len() + 16, 0);
            mask.resize(mask.len() + 16, 0);
            expected.extend((id.len() as u64).to_le_bytes());
            expected.extend(id);
            mask.resize(expected.len(), 0xff);
        }
        expected[magic::BUNDLE.len()..HEADER].copy_from_slice(&count.to_le_bytes());
        let words = expected
            .chunks(8)
            .zip(mask.chunks(8))
            .map(|(bytes, mask)| (padded(bytes), padded(mask)))
            .collect();
        Some(IdsPattern {
            words,
            len: expected.len(),
            records,
        })
    }

    /// Entry `index`'s code object in `bundle` (its bytes from the table's
    /// start), for a table the pattern [`matches`](Self::matches): its
    /// offset and size read at the record's known place, with no other
    /// record read. `None` where the entry is not there, or its code object
    /// does not lie in `bundle` after the table (where
    /// [`super::Bundle::parse`] would refuse the bundle too).
    pub fn code_object<'d>(&self, bundle: &'d [u8], index: usize) -> Option<&'d [u8]> {
        let record = *self.records.get(index)?;
        let word = |at: usize| -> Option<usize> {
            let bytes = bundle.get(at..at.checked_add(8)?)?;
            usize::try_from(u64::from_le_bytes(bytes.try_into().ok()?)).ok()
        };
        let (offset, size) = (word(record)?, word(record + 8)?);
        if size > 0 && offset < self.len {
            return None;
        }
        bundle.get(offset..offset.checked_add(size)?)
    }

    /// Whether the bundle whose table starts `prefix` lists the pattern's
    /// IDs, in order, and nothing else.
    pub fn matches(&self, prefix: &[u8]) -> bool {
        let Some(table) = prefix.get(..self.len) else {
            return false;
        };
        let full = table.chunks_exact(8);
        let tail = full.remainder();
        // Every word compared, with no early exit: the loads do not wait
        // for one another.
        let differ = full
            .zip(&self.words)
            .fold(0, |differ, (bytes, &(want, mask))| {
                // Always 8 bytes: `chunks_exact`.
                let word = u64::from_le_bytes(bytes.try_into().unwrap_or([0; 8]));
                differ | ((word ^ want) & mask)
            });
        // The last, short word, if any.
        let tail_differ = self
            .words
            .get(self.len / 8)
            .map_or(0, |&(want, mask)| (padded(tail) ^ want) & mask);
        (differ | tail_differ) == 0
    }
}

/// Up to 8 bytes as a little-endian word, padded with zeros.
fn padded(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word[..bytes.len()].copy_from_slice(bytes);
    u64::from_le_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::entry_ids;
    use crate::bundle::tests::build;

    const HOST: &str = "host-x86_64-unknown-linux-gnu-";
    const GENERIC: &str = "hipv4-amdgcn-amd-amdhsa--gfx11-generic";
    const GFX1100: &str = "hipv4-amdgcn-amd-amdhsa--gfx1100";
    const GFX90A: &str = "hipv4-amdgcn-amd-amdhsa--gfx90a";

    /// What the pattern must say: whether `entry_ids` reads exactly `ids`.
    fn oracle(ids: &[&str], table: &[u8]) -> bool {
        let Ok(read) = entry_ids(table, &Limits::default()) else {
            return false;
        };
        read.map(|id| id.ok())
            .eq(ids.iter().map(|id| Some(id.as_bytes())))
    }

    fn pattern(ids: &[&str]) -> IdsPattern {
        IdsPattern::new(ids.iter().map(|id| id.as_bytes()), &Limits::default()).unwrap()
    }

    /// ID lists that differ from one another in every way a table can:
    /// count, order, an ID's length, one byte, one a prefix of another.
    fn lists() -> Vec<Vec<&'static str>> {
        vec![
            vec![],
            vec![GFX1100],
            vec![GENERIC, GFX1100],
            vec![GFX1100, GENERIC],
            vec![HOST, GENERIC, GFX1100, GFX90A],
            vec![HOST, GENERIC, GFX1100, "hipv4-amdgcn-amd-amdhsa--gfx90b"],
            vec![
                HOST,
                GENERIC,
                GFX1100,
                "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+",
            ],
            vec![HOST, GENERIC, GFX1100],
            vec!["a", "b"],
            vec!["ab"],
            vec![""],
        ]
    }

    #[test]
    fn a_pattern_matches_exactly_the_tables_entry_ids_reads_its_ids_from() {
        for table_ids in lists() {
            let entries: Vec<(&str, &[u8])> =
                table_ids.iter().map(|id| (*id, &b"code"[..])).collect();
            for align in [1, 8, 4096] {
                let table = build(&entries, align);
                for ids in lists() {
                    let want = oracle(&ids, &table);
                    assert_eq!(want, ids == table_ids, "{ids:?} in {table_ids:?}");
                    assert_eq!(
                        pattern(&ids).matches(&table),
                        want,
                        "{ids:?} in {table_ids:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn every_byte_of_a_table_changed_is_judged_as_entry_ids_judges_it() {
        let ids = [HOST, GENERIC, GFX1100, GFX90A];
        let entries: Vec<(&str, &[u8])> = ids.iter().map(|id| (*id, &b"code"[..])).collect();
        let table = build(&entries, 4096);
        let p = pattern(&ids);
        let table_end = 32 + ids.iter().map(|id| 24 + id.len()).sum::<usize>();
        for at in 0..table_end + 8 {
            for flip in [0x01, 0x80, 0xff] {
                let mut changed = table.clone();
                changed[at] ^= flip;
                assert_eq!(
                    p.matches(&changed),
                    oracle(&ids, &changed),
                    "byte {at} ^ {flip:#x}"
                );
            }
        }
        // Cut anywhere: only a prefix holding the whole table matches.
        for cut in 0..table_end + 8 {
            let prefix = &table[..cut];
            assert_eq!(p.matches(prefix), cut >= table_end, "cut at {cut}");
            assert_eq!(p.matches(prefix), oracle(&ids, prefix), "cut at {cut}");
        }
    }

    #[test]
    fn more_ids_than_a_table_may_hold_make_no_pattern() {
        let limits = Limits {
            max_entries: 2,
            ..Limits::default()
        };
        let ids = [GENERIC.as_bytes(), GFX1100.as_bytes()];
        assert!(IdsPattern::new(ids, &limits).is_some());
        assert!(IdsPattern::new(ids.into_iter().chain([GFX90A.as_bytes()]), &limits).is_none());
    }

    #[test]
    fn finds_a_code_object_where_its_record_lies() {
        let ids = [HOST, GENERIC, "hipv4-amdgcn-amd-amdhsa--gfx1100"];
        let objects: [&[u8]; 3] = [b"", b"generic code", b"gfx1100 code"];
        let entries: Vec<(&str, &[u8])> = ids.iter().copied().zip(objects).collect();
        let bytes = build(&entries, 8);
        let limits = Limits::default();
        let pattern = IdsPattern::new(ids.iter().map(|i| i.as_bytes()), &limits).unwrap();
        assert!(pattern.matches(&bytes));
        for (i, object) in objects.iter().enumerate() {
            assert_eq!(pattern.code_object(&bytes, i), Some(*object), "{i}");
        }
        assert_eq!(pattern.code_object(&bytes, 3), None);
        // Cut short, or pointing into the table: not read.
        assert_eq!(pattern.code_object(&bytes[..bytes.len() - 1], 2), None);
        let record = pattern.records[2];
        let mut inside = bytes.clone();
        inside[record..record + 8].copy_from_slice(&8u64.to_le_bytes());
        assert_eq!(pattern.code_object(&inside, 2), None);
        let mut huge = bytes.clone();
        huge[record..record + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(pattern.code_object(&huge, 2), None);
        huge[record + 8..record + 16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(pattern.code_object(&huge, 2), None);
    }
}
