//! x86-64 code: the RIP-relative operands and near branches into a set of
//! ranges (in a position-dependent file also absolute displacements and
//! immediates) that one linear sweep from the code's start decodes, found
//! without decoding most of the code, for all the ranges at once.
//!
//! Two facts of the encoding make that exact (Intel SDM, vol. 2, 2.1 and
//! 2.2.1.6): an operand that can refer elsewhere is a field of the
//! instruction's bytes, a RIP-relative one a 4-byte displacement right
//! after a ModRM byte with `mod = 00`, `r/m = 101`, a near branch's a
//! 4-byte displacement right after its opcode (or a 1-byte one, which
//! reaches 128 bytes); and no instruction is longer than 15 bytes, so a
//! decoding from any of 15 consecutive offsets is in step with the sweep
//! once it reaches an instruction the sweep decodes.
//!
//! 1. [`Code::places`]: every offset where such a field could lie: the 4
//!    bytes after a RIP-relative ModRM byte or a branch opcode, where the
//!    target they give, whatever immediate follows them (0 to 4 bytes), is
//!    in a range; near a range every offset; in a position-dependent file
//!    also every 4- and 8-byte value in a range.
//! 2. [`Code::possible_starts`]: the offsets up to 14 bytes before a place
//!    at which one instruction decodes to a reference into a range. Each
//!    instruction the sweep finds starts at one of them.
//! 3. [`Code::in_step`]: which of them the sweep decodes: from each of the
//!    15 offsets some way before them decodings run until they all fall in
//!    step with one of them; the sweep passes one of the 15, so from there
//!    it is that decoding. Where they do not fall in step, the sweep itself
//!    ([`Code::sweep_all`]).
//!
//! The bytes are read once for all the ranges: the sift of step 1 is most
//! of the cost, and compaction asks about two ranges (the section, and the
//! tables in the program header table's way).

use std::sync::atomic::{AtomicUsize, Ordering};

use iced_x86::{Decoder, DecoderOptions, Instruction, OpKind, Register};
use rayon::prelude::*;

use super::{flagged, Kind, Range, Reference, MAX};

mod branches;

/// The longest instruction, in bytes (Intel SDM, vol. 2, 2.3.11).
const LONGEST: usize = 15;

/// Per range asked about, its references.
type Found = Vec<Vec<Reference>>;

/// The references into each of `ranges` of the code `bytes` at `addr`, as
/// one linear sweep from its start finds them, in address order: at most
/// [`MAX`] per range.
pub(super) fn references(bytes: &[u8], addr: u64, fixed: bool, ranges: &[Range]) -> Found {
    let code = Code {
        bytes,
        addr,
        fixed,
        ranges,
    };
    let (mut found, starts) = code.swept();
    // Code only a branch reaches, past data the sweep read as code.
    if let Some(starts) = starts {
        code.add_branch_reached(&starts, &mut found);
    }
    for refs in &mut found {
        refs.truncate(MAX);
    }
    found
}

impl Code<'_> {
    /// What one linear sweep from the start finds, and the possible starts
    /// it was found among (`None` where there were too many, and the code
    /// was swept whole).
    fn swept(&self) -> (Found, Option<Vec<usize>>) {
        let found = match self.possible_starts(MOST_STARTS) {
            Some(starts) if starts.is_empty() => (self.none(), Some(starts)),
            Some(starts) => (
                self.in_step(&starts, MAX)
                    .unwrap_or_else(|| self.sweep_all()),
                Some(starts),
            ),
            None => (self.sweep_all(), None),
        };
        #[cfg(fuzzing)]
        fuzzing::agree(self);
        found
    }
}

/// Code, and what is asked of it.
#[derive(Clone, Copy)]
struct Code<'c> {
    bytes: &'c [u8],
    /// The address of its first byte.
    addr: u64,
    /// Position-dependent: absolute displacements and immediates are
    /// references too.
    fixed: bool,
    ranges: &'c [Range],
}

impl Code<'_> {
    /// An empty list per range.
    fn none(&self) -> Found {
        vec![Vec::new(); self.ranges.len()]
    }

    /// The references into the ranges one instruction makes, each passed to
    /// `push` with its range's index (nothing for an invalid one).
    fn operands(&self, ins: &Instruction, mut push: impl FnMut(usize, u64)) {
        if ins.is_invalid() {
            return;
        }
        let mut check = |to: u64| {
            for (i, r) in self.ranges.iter().enumerate() {
                if r.contains(to) {
                    push(i, to);
                }
            }
        };
        if ins.is_ip_rel_memory_operand() {
            check(ins.ip_rel_memory_address());
        } else if self.fixed
            && ins.op_kinds().any(|k| k == OpKind::Memory)
            && ins.memory_base() == Register::None
            && ins.memory_index() == Register::None
        {
            check(ins.memory_displacement64());
        }
        for i in 0..ins.op_count() {
            match ins.op_kind(i) {
                OpKind::NearBranch64 => check(ins.near_branch64()),
                OpKind::Immediate32 | OpKind::Immediate32to64 | OpKind::Immediate64
                    if self.fixed =>
                {
                    check(ins.immediate(i))
                }
                _ => {}
            }
        }
    }

    /// The references of the instruction just decoded into `ins`, added to
    /// `found` where its range has fewer than `limit`.
    fn push_operands(&self, ins: &Instruction, found: &mut Found, limit: usize) {
        self.operands(ins, |i, to| {
            if found[i].len() < limit {
                found[i].push(Reference {
                    from: ins.ip(),
                    to,
                    kind: Kind::Code,
                })
            }
        });
    }

    /// Where a field that refers into a range may begin among the offsets
    /// `span` of the code, ascending (a superset: see the module's comment).
    /// The code is sifted a block at a time ([`Code::sift`]); near a range
    /// every offset is a place; in a position-dependent file every offset
    /// is looked at, as any of them may hold an absolute value.
    fn places(&self, span: std::ops::Range<usize>) -> Vec<usize> {
        // No field begins at offset 0: an opcode comes first.
        let span = span.start.max(1)..span.end;
        if self.fixed {
            return span.filter(|&p| self.place(p)).collect();
        }
        let mut places = Vec::new();
        let mut sifted = [0u8; SIFT];
        let mut p = span.start;
        while p < span.end {
            // A whole block, with the byte before each opener and the
            // field after it in the code: sifted; else one offset.
            let whole = p >= 2 && p + SIFT <= span.end && p + SIFT + 3 <= self.bytes.len();
            if !whole {
                if self.place(p) {
                    places.push(p);
                }
                p += 1;
                continue;
            }
            self.sift(p, &mut sifted);
            places.extend(flagged(&sifted).map(|k| p + k).filter(|&q| self.reaches(q)));
            p += SIFT;
        }
        // 8-bit branches: every offset from which a range is in reach.
        let mut near = false;
        for range in self.ranges {
            let first = range.start.saturating_sub(129).saturating_sub(self.addr);
            let Some(last) = range.end.saturating_add(127).checked_sub(self.addr) else {
                continue;
            };
            let within = span.start.max(usize::try_from(first).unwrap_or(usize::MAX))
                ..span.end.min(
                    usize::try_from(last)
                        .unwrap_or(usize::MAX)
                        .saturating_add(1),
                );
            if !within.is_empty() {
                places.extend(within);
                near = true;
            }
        }
        if near {
            places.sort_unstable();
            places.dedup();
        }
        places
    }

    /// `sifted[j]` is 1 where a field at offset `p + j` may reach a range,
    /// else 0: the byte before it [`opens`] a field, and the field's top
    /// byte is one with which a range is in reach from somewhere in the
    /// block ([`Range::top_bytes`]). Each step compares whole blocks of
    /// bytes, one byte per lane, as the compiler vectorizes them; needs the
    /// code's bytes `p - 2..p + SIFT + 3`.
    fn sift(&self, p: usize, sifted: &mut [u8; SIFT]) {
        let opener = &self.bytes[p - 1..p - 1 + SIFT];
        let before = &self.bytes[p - 2..p - 2 + SIFT];
        let top = &self.bytes[p + 3..p + 3 + SIFT];
        // The address a field's value is added to, less 0 to 4 bytes of
        // immediate, at the block's first offset.
        let first = self.addr.wrapping_add(p as u64).wrapping_add(4);
        if self.ranges.iter().all(|r| r.top_bytes(first).is_some()) {
            sifted.fill(0);
            for (lo, span) in self.ranges.iter().filter_map(|r| r.top_bytes(first)) {
                for (s, &t) in sifted.iter_mut().zip(top) {
                    *s |= u8::from(t.wrapping_sub(lo) <= span);
                }
            }
        } else {
            sifted.fill(1);
        }
        for ((s, &b), &a) in sifted.iter_mut().zip(opener).zip(before) {
            *s &= u8::from(opens(b, a));
        }
    }

    /// Whether a field that refers into a range may begin at offset `p`.
    fn place(&self, p: usize) -> bool {
        let at = self.addr.wrapping_add(p as u64);
        if self
            .ranges
            .iter()
            .any(|r| r.overlaps(at.saturating_sub(127), at.saturating_add(129)))
        {
            return true;
        }
        let bytes = self.bytes;
        let b = p.checked_sub(1).and_then(|i| bytes.get(i)).copied();
        let before = p.checked_sub(2).and_then(|i| bytes.get(i)).copied();
        if b.is_some_and(|b| opens(b, before.unwrap_or(0))) && self.reaches(p) {
            return true;
        }
        self.fixed && {
            let value = |n: usize| {
                let mut w = [0u8; 8];
                w[..n].copy_from_slice(bytes.get(p..p + n)?);
                Some(u64::from_le_bytes(w))
            };
            let d = value(4).unwrap_or(u64::MAX);
            let w = value(8);
            self.ranges.iter().any(|r| {
                r.contains(d)
                    || r.contains(d as u32 as i32 as i64 as u64)
                    || w.is_some_and(|w| r.contains(w))
            })
        }
    }

    /// Whether the 4-byte field at offset `p`, opened as a RIP-relative
    /// displacement or a branch's, reaches a range, whatever immediate
    /// follows it (0 to 4 bytes): the target is the instruction's end (4 to
    /// 8 bytes past `p`) plus the field, as 64 bits or, EIP-relative, its
    /// low 32.
    fn reaches(&self, p: usize) -> bool {
        let Some(field) = self.bytes.get(p..p + 4) else {
            return false;
        };
        let d = i32::from_le_bytes([field[0], field[1], field[2], field[3]]) as i64 as u64;
        let first = self
            .addr
            .wrapping_add(p as u64)
            .wrapping_add(4)
            .wrapping_add(d);
        self.ranges.iter().any(|r| r.meets_five(first))
    }

    /// Every offset at which one instruction decodes to a reference into a
    /// range and that lies at most 14 bytes before one of the
    /// [places](Code::places), ascending; `None` past `most` of them.
    fn possible_starts(&self, most: usize) -> Option<Vec<usize>> {
        let pieces: Vec<usize> = (0..self.bytes.len()).step_by(PIECE).collect();
        let kept = AtomicUsize::new(0);
        let pieces: Option<Vec<Vec<usize>>> = pieces
            .par_iter()
            .map(|&first| {
                let end = (first + PIECE).min(self.bytes.len());
                let starts = self.piece_starts(first..end);
                let before = kept.fetch_add(starts.len(), Ordering::Relaxed);
                (before + starts.len() <= most).then_some(starts)
            })
            .collect();
        let mut starts = pieces?.concat();
        starts.sort_unstable();
        starts.dedup();
        Some(starts)
    }

    /// [`Code::possible_starts`] for the places in `span`.
    fn piece_starts(&self, span: std::ops::Range<usize>) -> Vec<usize> {
        let mut decoder = self.decoder(0);
        let mut ins = Instruction::default();
        let mut starts = Vec::new();
        // Offsets below this are decoded already.
        let mut next = 0;
        for p in self.places(span) {
            for s in p.saturating_sub(LONGEST - 1).max(next)..p {
                if decoder.set_position(s).is_err() {
                    break;
                }
                decoder.set_ip(self.addr.wrapping_add(s as u64));
                decoder.decode_out(&mut ins);
                let mut refers = false;
                self.operands(&ins, |_, _| refers = true);
                if refers {
                    starts.push(s);
                }
            }
            next = next.max(p);
        }
        starts
    }

    /// A decoder of the code from offset `s`.
    fn decoder(&self, s: usize) -> Decoder<'_> {
        Decoder::with_ip(
            64,
            &self.bytes[s..],
            self.addr + s as u64,
            DecoderOptions::NONE,
        )
    }

    /// The references the sweep finds at `starts`, per range the first
    /// `limit` or a few more, or `None` where the decodings near some of
    /// them did not fall in step.
    fn in_step(&self, starts: &[usize], limit: usize) -> Option<Found> {
        let mut groups: Vec<(usize, usize)> = Vec::new();
        for &s in starts {
            match groups.last_mut() {
                Some((_, hi)) if s - *hi < NEAR => *hi = s,
                _ => groups.push((s, s)),
            }
        }
        let found: Vec<Option<Found>> = groups
            .par_iter()
            .map(|&(lo, hi)| {
                BACK.iter().find_map(|&back| {
                    let from = lo.saturating_sub(back);
                    self.group(from, (lo, hi), limit)
                })
            })
            .collect();
        let mut all = self.none();
        for refs in found {
            for (all, refs) in all.iter_mut().zip(refs?) {
                all.extend(refs);
            }
            if all.iter().all(|a| a.len() >= limit) {
                break;
            }
        }
        Some(all)
    }

    /// The references (per range the first `limit`) of the instructions at
    /// `lo..=hi` of the decoding from `from`, if the decodings from each of
    /// the 15 offsets at `from` fall in step with it by `lo` (or `from` is
    /// the start, where the sweep begins).
    fn group(&self, from: usize, (lo, hi): (usize, usize), limit: usize) -> Option<Found> {
        debug_assert!(from == 0 || lo - from >= LONGEST);
        let mut decoder = Decoder::with_ip(64, self.bytes, self.addr, DecoderOptions::NONE);
        let mut ins = Instruction::default();
        // The decoding's instruction starts up to `lo`, one bit each.
        let mut on_path = vec![0u64; (lo - from) / 64 + 1];
        let mut found = self.none();
        decoder.set_position(from).ok()?;
        decoder.set_ip(self.addr.wrapping_add(from as u64));
        while decoder.can_decode() && decoder.position() <= hi {
            let at = decoder.position();
            if at <= lo {
                on_path[(at - from) / 64] |= 1 << ((at - from) % 64);
            }
            decoder.decode_out(&mut ins);
            if at >= lo {
                self.push_operands(&ins, &mut found, limit);
            }
        }
        if from == 0 {
            return Some(found);
        }
        for other in from + 1..from + LONGEST {
            decoder.set_position(other).ok()?;
            loop {
                let at = decoder.position();
                if at > lo {
                    return None;
                }
                if on_path[(at - from) / 64] >> ((at - from) % 64) & 1 == 1 {
                    break;
                }
                if !decoder.can_decode() {
                    return None;
                }
                decoder.decode_out(&mut ins);
            }
        }
        Some(found)
    }

    /// The whole sweep, run in pieces in parallel: each piece is decoded
    /// from its own start, and the piece before it decodes on past that
    /// start until it reaches an instruction the piece's own decoding also
    /// starts at (from there both decode alike); each finding is taken from
    /// the decoding that is in step at its place, so the findings are those
    /// of one sweep from the start. A piece that does not fall in step soon
    /// enough makes it that one sweep.
    fn sweep_all(&self) -> Found {
        let starts: Vec<usize> = (0..self.bytes.len()).step_by(PIECE).collect();
        if starts.len() < 3 {
            return self.sweep(0, None).0;
        }
        // Where each piece's own decoding starts its first instructions.
        let heads: Vec<Vec<u64>> = starts.par_iter().map(|&s| self.sweep_starts(s)).collect();
        let pieces: Vec<(Found, Option<u64>)> = starts
            .par_iter()
            .enumerate()
            .map(|(i, &s)| self.sweep(s, heads.get(i + 1).map(|h| (starts[i + 1], &h[..]))))
            .collect();
        if pieces.iter().any(|(_, end)| end.is_none()) {
            return self.sweep(0, None).0;
        }
        // Piece i is in step from where piece i - 1 fell in step with it.
        let mut found = self.none();
        let mut from = self.addr;
        for (refs, end) in pieces {
            let end = end.unwrap_or(u64::MAX);
            for (found, refs) in found.iter_mut().zip(refs) {
                found.extend(refs.into_iter().filter(|r| r.from >= from && r.from < end));
            }
            from = end;
        }
        found
    }

    /// The addresses of the first [`STEP`] instructions decoded from offset
    /// `s`.
    fn sweep_starts(&self, s: usize) -> Vec<u64> {
        let mut decoder = self.decoder(s);
        let mut ins = Instruction::default();
        let mut starts = Vec::with_capacity(STEP);
        while decoder.can_decode() && starts.len() < STEP {
            starts.push(decoder.ip());
            decoder.decode_out(&mut ins);
        }
        starts
    }

    /// Decodes from offset `s`: the references found, and where it stopped:
    /// the end, or (with `next`, the next piece's offset and its first
    /// instruction addresses) the first instruction past that piece's start
    /// that its own decoding also starts at; `None` when there is none among
    /// them.
    fn sweep(&self, s: usize, next: Option<(usize, &[u64])>) -> (Found, Option<u64>) {
        let mut found = self.none();
        let mut decoder = self.decoder(s);
        let mut ins = Instruction::default();
        while decoder.can_decode() {
            let ip = decoder.ip();
            if let Some((n, heads)) = next {
                if ip >= self.addr + n as u64 {
                    if heads.binary_search(&ip).is_ok() {
                        return (found, Some(ip));
                    }
                    if heads.last().is_none_or(|&l| ip > l) {
                        return (found, None);
                    }
                }
            }
            decoder.decode_out(&mut ins);
            self.push_operands(&ins, &mut found, MAX);
        }
        (found, Some(u64::MAX))
    }
}

/// Whether `b` (after `before`) opens a field that may refer elsewhere: a
/// RIP-relative ModRM byte (`mod = 00`, `r/m = 101`; also EIP-relative,
/// with a 0x67 prefix), or the last opcode byte of a 32-bit near branch
/// (call E8, jmp E9, jcc 0F 8x, xbegin C7 F8: its ModRM byte F8). F9 too,
/// which opens nothing: the four are `b & 0xee == 0xe8`, one compare.
/// Without branches, so that [`Code::sift`] compares whole blocks with it
/// (`before` is 0 where there is no byte before).
fn opens(b: u8, before: u8) -> bool {
    (b & 0xc7 == 0x05) | (b & 0xee == 0xe8) | ((b & 0xf0 == 0x80) & (before == 0x0f))
}

impl Range {
    /// Whether one of the five addresses `first..=first + 4` (wrapping), or
    /// its low 32 bits, is in the range: with `y` the distance from the
    /// range's start (wrapping), `y + k` is in it for some `k <= 4` when `y`
    /// is within its width, or `y` is within 4 of wrapping to 0.
    fn meets_five(self, first: u64) -> bool {
        let Some(width) = self.end.checked_sub(self.start) else {
            return false;
        };
        let y = first.wrapping_sub(self.start);
        if y <= width || y > u64::MAX - 4 {
            return true;
        }
        let Ok(start) = u32::try_from(self.start) else {
            return false;
        };
        let width = (self.end.min(u64::from(u32::MAX)) - self.start) as u32;
        let y = (first as u32).wrapping_sub(start);
        y <= width || y > u32::MAX - 4
    }

    /// The top bytes a 4-byte field may have to reach the range from a
    /// block of [`SIFT`] offsets whose first adds its value to `first` (as
    /// [`Range::meets_five`] asks): `(lo, span)`, the bytes `lo..=lo + span`
    /// (wrapping); `None` for any. The targets' low 32 bits must be in the
    /// range's own, taken mod 2^32 (for a 64-bit target as for an
    /// EIP-relative one), so the field, mod 2^32, lies in one interval
    /// whatever the offset and the immediate: from `start - (first + SIFT
    /// - 1) - 4`, `end - start + SIFT + 3` wide.
    fn top_bytes(self, first: u64) -> Option<(u8, u8)> {
        let width = self
            .end
            .checked_sub(self.start)?
            .checked_add(SIFT as u64 + 3)?;
        if width >= 1 << 32 {
            return None;
        }
        let lo = self.start.wrapping_sub(first.wrapping_add(SIFT as u64 + 3)) as u32;
        let span = (u64::from(lo & 0xff_ffff) + width) >> 24;
        (span < 255).then_some(((lo >> 24) as u8, span as u8))
    }
}

/// Offsets sifted at once: a block's bytes and flags stay in the first
/// level cache.
const SIFT: usize = 4096;

/// Offsets whose decoded instructions make up one piece of the scan.
const PIECE: usize = 1 << 20;

/// At most this many starts are kept (8 MiB); code with more (hostile
/// bytes) is swept whole instead.
const MOST_STARTS: usize = 1 << 20;

/// Starts closer than this are checked with one decoding.
const NEAR: usize = 512;

/// How far before a group of starts the decodings begin: each is tried in
/// turn until they fall in step.
const BACK: [usize; 3] = [64, 1024, 16384];

/// How many instructions a piece's decoding may take to fall in step.
const STEP: usize = 256;

/// Under the fuzzers (`cargo fuzz` sets `cfg(fuzzing)`) every code section
/// is also swept whole: for the range asked about, and for the 16 MiB
/// before the code and after it, where its data and the PLT are (ranges
/// that hold no code: with the code's own branches in range, their places
/// would cover a missed RIP-relative operand), all the findings must be
/// the same.
#[cfg(any(test, fuzzing))]
mod fuzzing {
    use super::*;

    /// Every reference one sweep from the start finds, in order, per range.
    pub(super) fn sweep_every(code: &Code<'_>) -> Found {
        let mut found = code.none();
        let mut decoder = code.decoder(0);
        let mut ins = Instruction::default();
        while decoder.can_decode() {
            decoder.decode_out(&mut ins);
            code.push_operands(&ins, &mut found, usize::MAX);
        }
        found
    }

    /// Panics where the places and the decodings in step do not find what
    /// the sweep finds: for the ranges asked about, and the 16 MiB before
    /// and after the code, together and each alone.
    #[cfg(fuzzing)]
    pub(super) fn agree(code: &Code<'_>) {
        let end = code.addr.saturating_add(code.bytes.len() as u64);
        let before = Range {
            start: code.addr.saturating_sub(1 << 24),
            end: code.addr.saturating_sub(1),
        };
        let after = Range {
            start: end,
            end: end.saturating_add(1 << 24),
        };
        for ranges in [code.ranges, &[before, after], &[before], &[after]] {
            let code = Code { ranges, ..*code };
            let Some(starts) = code.possible_starts(MOST_STARTS) else {
                continue;
            };
            if let Some(fast) = code.in_step(&starts, usize::MAX) {
                let whole = sweep_every(&code);
                assert_eq!(fast, whole, "the places missed or added a reference");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What one sweep finds of `bytes` at `addr` in `ranges` (what
    /// [`references`] finds but for code only a branch reaches).
    fn swept(bytes: &[u8], addr: u64, fixed: bool, ranges: &[Range]) -> Found {
        let mut found = code(bytes, addr, fixed, ranges).swept().0;
        for refs in &mut found {
            refs.truncate(MAX);
        }
        found
    }

    /// `bytes` at `addr`, asked about `ranges`.
    fn code<'c>(bytes: &'c [u8], addr: u64, fixed: bool, ranges: &'c [Range]) -> Code<'c> {
        Code {
            bytes,
            addr,
            fixed,
            ranges,
        }
    }

    /// An LCG's output: bytes that decode as anything, with no instruction
    /// boundary where a piece starts.
    fn noise(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed;
        (0..len)
            .map(|_| {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (x >> 33) as u8
            })
            .collect()
    }

    /// The pieces decoded in parallel find what one sweep finds.
    #[test]
    fn x86_64_pieces_find_what_one_sweep_finds() {
        let bytes = noise(0x1234_5678_9abc_def0, (3 << 20) + 12345);
        let addr = 0x10_0000;
        for (start, len) in [(0x4000_0000, 1 << 20), (0x2000_0000, 3 << 19)] {
            let range = Range {
                start,
                end: start + len,
            };
            let ranges = [range];
            let code = code(&bytes, addr, false, &ranges);
            let (one, _) = code.sweep(0, None);
            let pieces = code.sweep_all();
            assert!(!one[0].is_empty() && one[0].len() < MAX, "{}", one[0].len());
            assert_eq!(pieces, one);
        }
    }

    /// Every reference one sweep finds, the places and the decodings in
    /// step find, and nothing else: on noise, with ranges that catch
    /// hundreds of references of each kind (all of them, not only the first
    /// [`MAX`]), position-independent and not, and near the code too.
    #[test]
    fn x86_64_places_find_what_one_sweep_finds() {
        let len = 1 << 20;
        for seed in [1, 0x1234_5678_9abc_def0] {
            let bytes = noise(seed, len);
            for (addr, start, end, fixed) in [
                // Ahead of the code, behind it, and both.
                (0x10_0000, 0x4000_0000, 0x7fff_ffff, false),
                (0x8000_0000, 0x1000, 0x4000_0000, false),
                (0x4000_0000, 0x1000, 0xffff_ffff, false),
                // Absolute values too.
                (0x10_0000, 0x1000, 0x1000_0000, true),
                // Around a place in the code: 8-bit branches.
                (0x10_0000, 0x18_0000, 0x18_0400, false),
            ] {
                let ranges = [Range { start, end }];
                let code = code(&bytes, addr, fixed, &ranges);
                let one = fuzzing::sweep_every(&code);
                let starts = code.possible_starts(MOST_STARTS).expect("few starts");
                let fast = code.in_step(&starts, usize::MAX);
                let fast = fast.expect("the decodings fall in step");
                assert!(one[0].len() > 20, "{start:#x}: {}", one[0].len());
                assert_eq!(fast, one, "{start:#x}..{end:#x}");
            }
        }
    }

    /// Ranges asked about together find what each finds alone, and what
    /// one sweep finds for it: on noise, ranges apart, overlapping, one
    /// inside the other, one near the code (8-bit branches), and a range
    /// whose end is before its start (nothing is in it).
    #[test]
    fn several_ranges_find_what_each_finds_alone() {
        let bytes = noise(3, 1 << 20);
        let addr = 0x10_0000;
        let ranges = [
            Range {
                start: 0x4000_0000,
                end: 0x5000_0000,
            },
            Range {
                start: 0x1000,
                end: 0x8_0000,
            },
            Range {
                start: 0x4800_0000,
                end: 0x6000_0000,
            },
            Range {
                start: 0x4900_0000,
                end: 0x4920_0000,
            },
            Range {
                start: 0x18_0000,
                end: 0x18_0400,
            },
            Range {
                start: 0x3000,
                end: 0x2000,
            },
        ];
        let together = swept(&bytes, addr, false, &ranges);
        let whole = fuzzing::sweep_every(&code(&bytes, addr, false, &ranges));
        for (i, range) in ranges.iter().enumerate() {
            let alone = swept(&bytes, addr, false, &[*range]);
            assert_eq!(together[i], alone[0], "{i}");
            let first: Vec<Reference> = whole[i].iter().take(MAX).copied().collect();
            assert_eq!(together[i], first, "{i}");
            assert_eq!(together[i].is_empty(), i == 5, "{i}");
        }
    }

    /// Code a branch reaches only adds to what the sweep finds: every
    /// finding of the sweep is still there, in noise and real code alike.
    #[test]
    fn branch_reached_code_only_adds() {
        let bytes = noise(11, 1 << 18);
        let addr = 0x10_0000;
        for range in [
            Range {
                start: 0x4000_0000,
                end: 0x5000_0000,
            },
            Range {
                start: 0x10_0000,
                end: 0x14_0000,
            },
        ] {
            let all = references(&bytes, addr, false, &[range]);
            let sweep = swept(&bytes, addr, false, &[range]);
            for r in &sweep[0] {
                assert!(all[0].contains(r), "{r:?}");
            }
        }
    }

    /// [`Range::meets_five`] is the five targets' check, each as 64 bits
    /// and as its low 32, at the edges: wrapping past 0 and past 4 GiB,
    /// ranges at both ends of the address space, one byte wide.
    #[test]
    fn meets_five_is_the_five_targets() {
        let five = |r: Range, first: u64| {
            (0..=4u64).any(|k| {
                let to = first.wrapping_add(k);
                r.contains(to) || r.contains(u64::from(to as u32))
            })
        };
        let edges: [u64; 9] = [
            0,
            1,
            3,
            4,
            5,
            0x1000,
            0xffff_fffb,
            0xffff_ffff,
            0x1_0000_0000,
        ];
        let mut values: Vec<u64> = Vec::new();
        for e in edges {
            for d in 0..10u64 {
                values.extend([e.wrapping_add(d), e.wrapping_sub(d), u64::MAX - e - d]);
            }
        }
        let mut ranges = Vec::new();
        for &a in &values {
            for w in [0, 1, 4, 0x1000, u64::MAX] {
                ranges.push(Range {
                    start: a,
                    end: a.saturating_add(w),
                });
            }
        }
        for r in ranges {
            for &v in &values {
                assert_eq!(
                    r.meets_five(v),
                    five(r, v),
                    "{:#x}..{:#x} {v:#x}",
                    r.start,
                    r.end
                );
            }
        }
    }

    /// The sift keeps every offset after a byte [`opens`] accepts whose
    /// field [reaches](Code::reaches) a range, and only offsets after such
    /// bytes: in noise with runs of 0F and 8x, for wide and narrow ranges,
    /// ahead of the code and behind it, and code where the 32-bit targets
    /// wrap (from just below 4 GiB).
    #[test]
    fn the_sift_keeps_every_field_that_reaches() {
        let mut bytes = noise(7, 1 << 16);
        for w in bytes.chunks_exact_mut(97) {
            w[..4].copy_from_slice(&[0x0f, 0x0f, 0x85, 0x0f]);
            w[4] = 0x80 | (w[5] & 0xf);
            w[13] = 0x0f;
        }
        let range = |start: u64, len: u64| Range {
            start,
            end: start + len,
        };
        let cases: [(u64, Vec<Range>); 5] = [
            (0x10_0000, vec![range(0x4000_0000, 0x1000_0000)]),
            (
                0x10_0000,
                vec![range(0x5000, 0x100), range(0x7000_0000, 0x10)],
            ),
            (0x8000_0000, vec![range(0x1000, 0x4000)]),
            (0xffff_f000, vec![range(0x2000, 0x1000)]),
            (0x10_0000, vec![range(0, u64::MAX)]),
        ];
        let mut kept = 0;
        for (addr, ranges) in cases {
            let code = code(&bytes, addr, false, &ranges);
            let mut sifted = [0u8; SIFT];
            let mut p = 2;
            while p + SIFT + 3 <= bytes.len() {
                code.sift(p, &mut sifted);
                for (j, &s) in sifted.iter().enumerate() {
                    let q = p + j;
                    let opens = opens(bytes[q - 1], bytes[q - 2]);
                    assert!(s <= 1 && (s == 0 || opens), "{addr:#x} {q}");
                    if opens && code.reaches(q) {
                        assert_eq!(s, 1, "{addr:#x} {q}");
                        kept += 1;
                    }
                }
                p += SIFT;
            }
        }
        assert!(kept > 1000, "{kept}");
    }

    /// [`Range::top_bytes`] never leaves out a field that reaches the
    /// range: every field value whose target, from an offset of the block,
    /// is in the range has a top byte it lets through; at the edges of the
    /// address space and of 4 GiB, for ranges narrow and wide, and where
    /// the lowest field that reaches lies just below a change of top byte.
    #[test]
    fn top_bytes_let_through_every_field_that_reaches() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let block = SIFT as u64;
        let firsts = [
            0,
            0x1000,
            0xffff_f000,
            0xffff_ffff,
            0x1_0000_0000,
            u64::MAX - 0x1000,
        ];
        for &first in &firsts {
            let mut ranges = vec![
                (0x2000u64, 0x100u64),
                (0xffff_ff00, 0x200),
                (0, 0x10),
                (u64::MAX - 0x10, 0x10),
                (0x4000_0000, 0x1000_0000),
                (first.wrapping_sub(0x30_0000), 0x1_0000),
            ];
            // The lowest field that reaches, from the block's last offset
            // with 4 bytes of immediate, is 2^24 - δ.
            for delta in 0..8 {
                let start = first.wrapping_add(block + 3 + (1 << 24) - delta);
                ranges.push((start, 0x40));
            }
            for (start, width) in ranges {
                let r = Range {
                    start,
                    end: start.saturating_add(width),
                };
                let Some((lo, span)) = r.top_bytes(first) else {
                    continue;
                };
                let check = |off: u64, to: u64| {
                    let d = to.wrapping_sub(first.wrapping_add(off)) as u32;
                    let field = d as i32 as i64 as u64;
                    if r.meets_five(first.wrapping_add(off).wrapping_add(field)) {
                        let top = (d >> 24) as u8;
                        assert!(
                            top.wrapping_sub(lo) <= span,
                            "{first:#x}+{off} {d:#x} {:#x}..{:#x}",
                            r.start,
                            r.end
                        );
                    }
                };
                // Each end of the block and of the range.
                for off in [0, 1, block - 2, block - 1] {
                    for k in 0..=8 {
                        check(off, r.start.wrapping_sub(4).wrapping_add(k));
                        check(off, r.end.wrapping_sub(4).wrapping_add(k));
                    }
                }
                for _ in 0..20_000 {
                    let off = next() % block;
                    // Targets near the range, and anywhere.
                    let to = match next() % 3 {
                        0 => r.start.wrapping_add(next() % (width + 8)).wrapping_sub(4),
                        1 => (r.start as u32).wrapping_add(next() as u32 % 0x100) as u64,
                        _ => next(),
                    };
                    check(off, to);
                }
            }
        }
    }

    /// Real code, with real references: this test program's own `.text`,
    /// against the ranges of each of its other loaded sections (thousands of
    /// RIP-relative operands into `.rodata`, `.data`, `.got`...) and of
    /// stretches of `.text` itself (branches).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x86_64_real_code_gives_what_one_sweep_gives() {
        use object::{Object, ObjectSection};
        let exe = std::fs::read(std::env::current_exe().expect("the test program")).expect("read");
        let file = object::File::parse(&*exe).expect("an ELF file");
        let text = file.section_by_name(".text").expect(".text");
        let (bytes, addr) = (text.data().expect("bytes"), text.address());
        let mut ranges: Vec<(u64, u64)> = file
            .sections()
            .filter(|s| s.address() != 0 && s.size() > 0 && s.name() != Ok(".text"))
            .map(|s| (s.address(), s.address() + s.size()))
            .collect();
        let third = text.size() / 3;
        ranges.push((addr + third, addr + third + 0x1000));
        ranges.push((addr + 2 * third, addr + 2 * third + 0x10_0000));
        let mut total = 0;
        for (start, end) in ranges {
            let ranges = [Range { start, end }];
            let code = code(bytes, addr, false, &ranges);
            let one = fuzzing::sweep_every(&code);
            let starts = code.possible_starts(MOST_STARTS).expect("few starts");
            let fast = code.in_step(&starts, usize::MAX);
            assert_eq!(fast.as_ref(), Some(&one), "{start:#x}..{end:#x}");
            total += one[0].len();
        }
        assert!(total > 1000, "{total}");
    }

    /// Code that is nothing but references (calls to the next instruction,
    /// the code its own range): past the most starts kept, none are, and
    /// the whole sweep's findings are the answer.
    #[test]
    fn too_many_starts_are_swept_whole() {
        let bytes: Vec<u8> = [0xe8, 0, 0, 0, 0].repeat(1 << 12);
        let addr = 0x40_0000;
        let ranges = [Range {
            start: addr,
            end: addr + bytes.len() as u64,
        }];
        let code = code(&bytes, addr, false, &ranges);
        let all = code.possible_starts(usize::MAX).expect("no limit");
        assert!(all.len() >= 1 << 12, "{}", all.len());
        assert_eq!(code.possible_starts(100), None);
        let found = swept(&bytes, addr, false, &ranges);
        assert_eq!(found, code.sweep(0, None).0);
        assert_eq!(found[0].len(), MAX);
    }

    /// Fields the noise rarely isolates: each instruction alone in NOPs,
    /// its target at the range's first byte, found as the sweep finds it.
    #[test]
    fn x86_64_fields_at_the_edge_of_what_places_accept() {
        // In code too short to sift, and in code sifted block by block.
        let at = |addr: u64, ins: &[u8], start: u64, fixed: bool| {
            let ranges = [Range {
                start,
                end: start + 0x100,
            }];
            let mut each = [4096, 3 * SIFT].map(|len| {
                let mut bytes = vec![0x90; len];
                bytes[1000..1000 + ins.len()].copy_from_slice(ins);
                let found = swept(&bytes, addr, fixed, &ranges);
                let (one, _) = code(&bytes, addr, fixed, &ranges).sweep(0, None);
                assert_eq!(found, one);
                found[0]
                    .iter()
                    .map(|r| (r.from - addr, r.to))
                    .collect::<Vec<_>>()
            });
            assert_eq!(each[0], each[1]);
            std::mem::take(&mut each[0])
        };
        let le = |v: u64, n: usize| v.to_le_bytes()[..n].to_vec();
        // mov dword [rip + d], imm32: 10 bytes, the field at 2, the end 8
        // bytes after it.
        let d = 0x50_0000u64 - (0x1000 + 1000 + 10);
        let code = [&[0xc7, 0x05][..], &le(d, 4), &[1, 2, 3, 4]].concat();
        assert_eq!(at(0x1000, &code, 0x50_0000, false), [(1000, 0x50_0000)]);
        // mov eax, [eip + d] from above 4 GiB: the target wraps to 32 bits.
        let addr = 0x1_0000_0000;
        let d = (0x2000u64).wrapping_sub(1000 + 7);
        let code = [&[0x67, 0x8b, 0x05][..], &le(d, 4)].concat();
        assert_eq!(at(addr, &code, 0x2000, false), [(1000, 0x2000)]);
        // xbegin rel32.
        let d = 0x9000u64 - (0x1000 + 1000 + 6);
        let code = [&[0xc7, 0xf8][..], &le(d, 4)].concat();
        assert_eq!(at(0x1000, &code, 0x9000, false), [(1000, 0x9000)]);
        // mov rax, imm64 above 4 GiB, in a position-dependent file.
        let code = [&[0x48, 0xb8][..], &le(0x7_0000_0000, 8)].concat();
        assert_eq!(
            at(0x1000, &code, 0x7_0000_0000, true),
            [(1000, 0x7_0000_0000)]
        );
        // jmp rel8 just past the code's end.
        assert_eq!(
            at(0x1000, &[0xeb, 0x7f], 0x1000 + 1000 + 2 + 0x7f, false).len(),
            1
        );
    }

    #[test]
    fn x86_64_rip_relative_and_absolute_operands() {
        let range = Range {
            start: 0x40_2000,
            end: 0x40_3000,
        };
        // lea rdi, [rip + 0x1ff9] at 0x401000 (7 bytes: target 0x403000);
        // mov edi, 0x402010 (absolute immediate).
        let code = [
            0x48, 0x8d, 0x3d, 0xf9, 0x1f, 0x00, 0x00, 0xbf, 0x10, 0x20, 0x40, 0x00,
        ];
        let found = references(&code, 0x40_1000, false, &[range]);
        assert_eq!(found[0].len(), 1, "{found:?}");
        assert_eq!(found[0][0].to, 0x40_3000);
        let found = references(&code, 0x40_1000, true, &[range]);
        assert_eq!(found[0].len(), 2, "{found:?}");
        assert_eq!(found[0][1].to, 0x40_2010);
    }
}
