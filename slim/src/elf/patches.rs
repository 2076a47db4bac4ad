//! Bytes to write over the input's, by file offset.

use std::collections::BTreeMap;

use crate::pieces::{Output, Piece};

/// Patches to the original's bytes, by original file offset.
#[derive(Default)]
pub(super) struct Patches(pub(super) BTreeMap<u64, Vec<u8>>);

impl Patches {
    pub(super) fn put(&mut self, at: u64, bytes: &[u8]) {
        self.0.insert(at, bytes.to_vec());
    }
    pub(super) fn u64(&mut self, at: u64, v: u64) {
        self.put(at, &v.to_le_bytes());
    }
    pub(super) fn u16(&mut self, at: u64, v: u16) {
        self.put(at, &v.to_le_bytes());
    }
    /// Whether a patch covers file offset `at`.
    pub(super) fn covers(&self, at: u64) -> bool {
        self.0
            .range(..=at)
            .next_back()
            .is_some_and(|(&p, b)| at - p < b.len() as u64)
    }

    /// `data[range]` as pieces with the patches inside it applied (where two
    /// overlap, the one that starts first wins; each byte is written once).
    pub(super) fn copy<'a>(&self, data: &'a [u8], start: u64, end: u64, out: &mut Output<'a>) {
        let mut at = start;
        for (&p, bytes) in self.0.range(start..end) {
            let p_end = p.saturating_add(bytes.len() as u64).min(end);
            if p > at {
                out.push(Piece::Copy(&data[at as usize..p as usize]));
                at = p;
            }
            if p_end > at {
                out.push(Piece::Owned(
                    bytes[(at - p) as usize..(p_end - p) as usize].to_vec(),
                ));
                at = p_end;
            }
        }
        if end > at {
            out.push(Piece::Copy(&data[at as usize..end as usize]));
        }
    }
}
