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

use super::{Code, Found, Kind, Reference, BACK, LONGEST};

/// How many instructions are decoded from a branch target before giving up
/// on falling in step (each is kept: more findings, never fewer).
const MOST_AFTER_TARGET: usize = 256;

impl Code<'_> {
    /// Adds to `found` the references of the code a direct branch on the
    /// sweep reaches at one of `starts` that the sweep does not decode.
    pub(super) fn add_branch_reached(&self, starts: &[usize], found: &mut Found) {
        let swept: HashSet<u64> = found.iter().flatten().map(|r| r.from).collect();
        let unswept: HashSet<usize> = starts
            .iter()
            .copied()
            .filter(|&s| !swept.contains(&(self.addr + s as u64)))
            .collect();
        if unswept.is_empty() {
            return;
        }
        let mut targets: Vec<usize> = self
            .branches_to(&unswept)
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
    /// ones (E8 call, E9 jmp, 0F 80-8F jcc) anywhere.
    fn branches_to(&self, wanted: &HashSet<usize>) -> Vec<(usize, usize)> {
        let b = self.bytes;
        let target = |at: usize, len: usize, disp: i64| -> Option<usize> {
            let t = (at + len) as i64 + disp;
            usize::try_from(t).ok().filter(|t| wanted.contains(t))
        };
        let short = |at: usize| -> Option<(usize, usize)> {
            let op = *b.get(at)?;
            let is_short = op == 0xeb || (0x70..=0x7f).contains(&op) || (0xe0..=0xe3).contains(&op);
            if !is_short {
                return None;
            }
            let disp = *b.get(at + 1)? as i8 as i64;
            Some((at, target(at, 2, disp)?))
        };
        let near = |at: usize| -> Option<(usize, usize)> {
            let rel = |o: usize| -> Option<i64> {
                Some(i32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?) as i64)
            };
            match *b.get(at)? {
                0xe8 | 0xe9 => Some((at, target(at, 5, rel(at + 1)?)?)),
                0x0f if b.get(at + 1).is_some_and(|&o| o & 0xf0 == 0x80) => {
                    Some((at, target(at, 6, rel(at + 2)?)?))
                }
                _ => None,
            }
        };
        let mut found: Vec<(usize, usize)> = (0..b.len())
            .into_par_iter()
            .with_min_len(1 << 16)
            .filter_map(near)
            .collect();
        for &w in wanted {
            let lo = w.saturating_sub(2 + 128);
            let hi = (w + 128).min(b.len());
            found.extend((lo..hi).filter_map(short));
        }
        found.sort_unstable();
        found.dedup();
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
            // Far into the code, after runs of `nop`s, where the search is
            // split between threads: the opcode just before 64 KiB (its
            // displacement after) and just after.
            for nops in [(1 << 16) - 3, (1 << 16) + 1] {
                let mut late = vec![0x90; nops];
                late.extend(&branch);
                assert_eq!(found(&code_after(late)), [0x9000], "{branch:x?} at {nops}");
            }
        }
    }
}
