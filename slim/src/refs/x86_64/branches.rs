//! Code a direct branch reaches but the linear sweep does not decode: where
//! data bytes lie in `.text` (hand-written assembly, a jump over a literal),
//! the sweep decodes them as instructions and can run out of step with the
//! real ones after them, whose references it then misses. A direct branch
//! (`jmp`/`jcc`/`call` with an 8- or 32-bit displacement, Intel SDM vol. 2)
//! that the sweep itself decodes names where a real instruction starts: if
//! that is a start the sweep passes over, the code from there is decoded
//! too, until it falls in step with the sweep again (as a recursive-descent
//! disassembler would), and what it refers to counts.
//!
//! Only possible starts the sweep passes over are asked about (those with a
//! reference into a range, [`Code::possible_starts`]), and a branch must lie
//! on the sweep's own path: a branch decoded out of step names nothing, so
//! bytes that only look like one add nothing.

use std::collections::HashSet;

use iced_x86::Instruction;
use rayon::prelude::*;

use super::super::{flagged, Bitmap};
use super::{Code, Found, Kind, Reference, BACK, LONGEST};

/// How many instructions are decoded from a branch target before giving up
/// on falling in step (each is kept: more findings, never fewer).
const MOST_AFTER_TARGET: usize = 256;

impl Code<'_> {
    /// Adds to `found` the references of the code a direct branch on the
    /// sweep reaches at one of `starts` (ascending) that the sweep does not
    /// decode.
    pub(super) fn add_branch_reached(&self, starts: &[usize], found: &mut Found) {
        let swept: HashSet<u64> = found.iter().flatten().map(|r| r.from).collect();
        let unswept: Vec<usize> = starts
            .iter()
            .copied()
            .filter(|&s| !swept.contains(&(self.addr + s as u64)))
            .collect();
        if unswept.is_empty() {
            return;
        }
        let wanted = Offsets::new(unswept, self.bytes.len());
        let mut targets: Vec<usize> = self
            .branches_to(&wanted)
            .into_iter()
            .filter(|&(branch, _)| self.on_sweep(branch))
            .map(|(_, target)| target)
            .filter(|&t| !self.on_sweep(t))
            .collect();
        targets.sort_unstable();
        targets.dedup();
        for t in targets {
            self.decode_from_target(t, found);
        }
    }

    /// `(branch, target)` offsets of the direct branches whose target is
    /// one of `wanted`: 8-bit ones (EB, 70-7F, E0-E3) near each, 32-bit
    /// ones (E8 call, E9 jmp, 0F 80-8F jcc) anywhere, the code read a
    /// piece per thread.
    fn branches_to(&self, wanted: &Offsets) -> Vec<(usize, usize)> {
        let b = self.bytes;
        let short = |at: usize| -> Option<(usize, usize)> {
            let op = *b.get(at)?;
            let is_short = op == 0xeb || (0x70..=0x7f).contains(&op) || (0xe0..=0xe3).contains(&op);
            if !is_short {
                return None;
            }
            let disp = *b.get(at + 1)? as i8 as i64;
            Some((at, wanted.target(at, 2, disp)?))
        };
        let pieces: Vec<usize> = (0..b.len()).step_by(BRANCH_PIECE).collect();
        let mut found: Vec<(usize, usize)> = pieces
            .par_iter()
            .flat_map_iter(|&first| {
                let end = (first + BRANCH_PIECE).min(b.len());
                self.near_branches_to(first..end, wanted)
            })
            .collect();
        found.par_extend(
            wanted
                .sorted
                .par_iter()
                .with_min_len(1 << 10)
                .flat_map_iter(|&w| {
                    let lo = w.saturating_sub(2 + 128);
                    let hi = (w + 128).min(b.len());
                    (lo..hi).filter_map(short)
                }),
        );
        found.sort_unstable();
        found.dedup();
        found
    }

    /// `(branch, target)` of the 32-bit direct branches at offsets `span`
    /// whose target is one of `wanted`. The opcodes are looked for a block
    /// at a time, one byte per lane, as the compiler vectorizes it: most
    /// bytes of code open no branch, and a third of those that do reach
    /// nothing asked about ([`Offsets::target`]).
    fn near_branches_to(
        &self,
        span: std::ops::Range<usize>,
        wanted: &Offsets,
    ) -> Vec<(usize, usize)> {
        let b = self.bytes;
        let rel = |o: usize| -> Option<i64> {
            Some(i32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?) as i64)
        };
        let near = |at: usize| -> Option<(usize, usize)> {
            match *b.get(at)? {
                0xe8 | 0xe9 => Some((at, wanted.target(at, 5, rel(at + 1)?)?)),
                0x0f if b.get(at + 1).is_some_and(|&o| o & 0xf0 == 0x80) => {
                    Some((at, wanted.target(at, 6, rel(at + 2)?)?))
                }
                _ => None,
            }
        };
        let mut found = Vec::new();
        let mut opens = [0u8; BRANCH_BLOCK];
        let mut p = span.start;
        while p < span.end {
            // A whole block, with the byte after its last offset in the
            // code: flagged at once; else one offset.
            if p + BRANCH_BLOCK > span.end || p + BRANCH_BLOCK >= b.len() {
                found.extend(near(p));
                p += 1;
                continue;
            }
            let here = &b[p..p + BRANCH_BLOCK];
            let next = &b[p + 1..p + 1 + BRANCH_BLOCK];
            for ((o, &x), &y) in opens.iter_mut().zip(here).zip(next) {
                *o =
                    u8::from(x & 0xfe == 0xe8) | (u8::from(x == 0x0f) & u8::from(y & 0xf0 == 0x80));
            }
            found.extend(flagged(&opens).filter_map(|k| near(p + k)));
            p += BRANCH_BLOCK;
        }
        found
    }

    /// Whether the sweep decodes an instruction starting at offset `at`:
    /// from some way before it, decodings from 15 consecutive offsets fall
    /// in step by `at` (so the sweep's is among them), or the sweep itself.
    fn on_sweep(&self, at: usize) -> bool {
        BACK.iter()
            .find_map(|&back| self.path_has(at.saturating_sub(back), at))
            .unwrap_or_else(|| self.path_has(0, at).unwrap_or(false))
    }

    /// Whether the decoding from `from` starts an instruction at `at`, if
    /// the decodings from each of the 15 offsets at `from` fall in step
    /// with it by `at` (or `from` is the start, where the sweep begins).
    fn path_has(&self, from: usize, at: usize) -> Option<bool> {
        let mut decoder = self.decoder(0);
        let mut ins = Instruction::default();
        let mut path = HashSet::new();
        decoder.set_position(from).ok()?;
        decoder.set_ip(self.addr.wrapping_add(from as u64));
        while decoder.can_decode() && decoder.position() <= at {
            path.insert(decoder.position());
            decoder.decode_out(&mut ins);
        }
        if from > 0 {
            for other in from + 1..from + LONGEST {
                decoder.set_position(other).ok()?;
                while !path.contains(&decoder.position()) {
                    if decoder.position() > at || !decoder.can_decode() {
                        return None;
                    }
                    decoder.decode_out(&mut ins);
                }
            }
        }
        Some(path.contains(&at))
    }

    /// The references of the instructions decoded from branch target `t`
    /// until one starts where the sweep decodes one (at most
    /// [`MOST_AFTER_TARGET`]), added to `found`.
    fn decode_from_target(&self, t: usize, found: &mut Found) {
        let mut decoder = self.decoder(0);
        let mut ins = Instruction::default();
        if decoder.set_position(t).is_err() {
            return;
        }
        decoder.set_ip(self.addr.wrapping_add(t as u64));
        for n in 0..MOST_AFTER_TARGET {
            let at = decoder.position();
            if !decoder.can_decode() || (n > 0 && self.on_sweep(at)) {
                return;
            }
            decoder.decode_out(&mut ins);
            self.operands(&ins, |i, to| {
                found[i].push(Reference {
                    from: ins.ip(),
                    to,
                    kind: Kind::Code,
                })
            });
        }
    }
}

/// Offsets of code read per piece of work in the search for 32-bit
/// branches.
const BRANCH_PIECE: usize = 1 << 20;

/// Offsets whose opcodes are looked at once: a block's bytes and flags
/// stay in the first level cache.
const BRANCH_BLOCK: usize = 4096;

/// A set of code offsets asked about for each of millions of branches:
/// a bitmap of which 64-byte lines hold one (a bit per line, 2 MiB of
/// them for 128 MiB of code: most lookups end there, in cache), then a
/// search of the sorted offsets.
struct Offsets {
    sorted: Vec<usize>,
    lines: Bitmap,
}

impl Offsets {
    /// The set of `sorted` (ascending), offsets into code `len` bytes
    /// long; offsets past it are never asked about.
    fn new(sorted: Vec<usize>, len: usize) -> Offsets {
        debug_assert!(sorted.windows(2).all(|w| w[0] < w[1]));
        // A bit for each 64 bytes: no bound on the bits.
        let lines = Bitmap::new(sorted.iter().map(|&o| o as u64), len as u64, u64::MAX);
        Offsets { sorted, lines }
    }

    /// Whether `o` is in the set.
    fn contains(&self, o: usize) -> bool {
        self.lines.has(o as u64) && self.sorted.binary_search(&o).is_ok()
    }

    /// The target of a branch at offset `at`, `len` bytes long with
    /// displacement `disp`, where it is in the set.
    fn target(&self, at: usize, len: usize, disp: i64) -> Option<usize> {
        let t = (at + len) as i64 + disp;
        usize::try_from(t).ok().filter(|&t| self.contains(t))
    }
}

#[cfg(test)]
mod tests {
    use super::super::Range;
    use super::*;

    /// `jmp +2; .byte 0x48, 0x8d; lea rax, [rip + d]; ret` at 0x1000, the
    /// `lea` aimed at 0x9000: the sweep decodes `48 8d 48 8d` and `05 d32`
    /// (`lea rcx, [rax - 0x73]`, `add eax, imm32`) and misses it.
    fn code_with(first: [u8; 2]) -> Vec<u8> {
        code_after(first.to_vec())
    }

    /// `before`, then the two data bytes and the `lea` of [`code_with`].
    fn code_after(before: Vec<u8>) -> Vec<u8> {
        let lea_end = 0x1000i64 + before.len() as i64 + 2 + 7;
        // Backwards where `before` is long.
        let disp = (0x9000 - lea_end) as i32;
        let mut bytes = before;
        bytes.extend([0x48, 0x8d, 0x48, 0x8d, 0x05]);
        bytes.extend(disp.to_le_bytes());
        bytes.push(0xc3);
        bytes
    }

    fn found(bytes: &[u8]) -> Vec<u64> {
        let ranges = [Range {
            start: 0x9000,
            end: 0x9100,
        }];
        let code = Code {
            bytes,
            addr: 0x1000,
            fixed: false,
            ranges: &ranges,
        };
        let starts = code.possible_starts(1 << 10).unwrap();
        let mut found = code.in_step(&starts, 64).unwrap();
        assert!(found[0].is_empty(), "the sweep is out of step there");
        code.add_branch_reached(&starts, &mut found);
        found[0].iter().map(|r| r.to).collect()
    }

    /// The set holds exactly its offsets: each, and none of their
    /// neighbours, the lines they share, or past the code.
    #[test]
    fn offsets_hold_what_they_were_given() {
        let len = 10_000;
        let given = vec![0, 1, 63, 64, 127, 640, 641, 4095, 4096, 9_999];
        let set = Offsets::new(given.clone(), len);
        for o in 0..len + 200 {
            assert_eq!(set.contains(o), given.contains(&o), "{o}");
        }
        assert!(!set.contains(usize::MAX));
        assert_eq!(set.target(600, 5, 36), Some(641));
        assert_eq!(set.target(600, 5, 37), None);
        assert_eq!(set.target(2, 2, -4), Some(0));
        assert_eq!(set.target(2, 2, -5), None);
    }

    #[test]
    fn branch_targets_the_sweep_passes_over_are_decoded() {
        assert_eq!(found(&code_with([0xeb, 0x02])), [0x9000]);
        // Nothing branches there: bytes the sweep reads otherwise are not
        // taken for code.
        assert_eq!(found(&code_with([0x90, 0x90])), Vec::<u64>::new());
    }

    #[test]
    fn near_branches_are_found_wherever_they_lie() {
        // `jmp rel32`, `call rel32` and `je rel32` over the two data bytes.
        let jmp = vec![0xe9, 0x02, 0, 0, 0];
        let call = vec![0xe8, 0x02, 0, 0, 0];
        let je = vec![0x0f, 0x84, 0x02, 0, 0, 0];
        for branch in [jmp, call, je] {
            assert_eq!(found(&code_after(branch.clone())), [0x9000], "{branch:x?}");
            // Far into the code, after runs of `nop`s, where the search
            // moves from one block of opcodes to the next and from one
            // thread's piece to the next: the opcode at a block's last
            // offset (its second byte, or its displacement, in the next),
            // at the next one's first, just before, and just after.
            let edges = [BRANCH_BLOCK, 3 * BRANCH_BLOCK, BRANCH_PIECE];
            for nops in edges.into_iter().flat_map(|e| [e - 3, e - 1, e, e + 1]) {
                let mut late = vec![0x90; nops];
                late.extend(&branch);
                assert_eq!(found(&code_after(late)), [0x9000], "{branch:x?} at {nops}");
            }
        }
    }
}
