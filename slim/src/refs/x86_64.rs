//! x86-64 code: the RIP-relative operands and near branches into a range
//! (in a position-dependent file also absolute displacements and
//! immediates) that one linear sweep from the code's start decodes, found
//! without decoding most of the code.
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
//! 1. [`places`]: every offset where such a field could lie: the 4 bytes
//!    after a RIP-relative ModRM byte or a branch opcode, where the target
//!    they give, whatever immediate follows them (0 to 4 bytes), is in the
//!    range; near the range every offset; in a position-dependent file also
//!    every 4- and 8-byte value in the range.
//! 2. [`possible_starts`]: the offsets up to 14 bytes before a place at
//!    which one instruction decodes to a reference into the range. Each
//!    instruction the sweep finds starts at one of them.
//! 3. [`in_step`]: which of them the sweep decodes: from each of the 15
//!    offsets some way before them decodings run until they all fall in
//!    step with one of them; the sweep passes one of the 15, so from there
//!    it is that decoding. Where they do not fall in step, the sweep itself
//!    ([`sweep_all`]).

use std::sync::atomic::{AtomicUsize, Ordering};

use iced_x86::{Decoder, DecoderOptions, Instruction, OpKind, Register};
use rayon::prelude::*;

use super::{Kind, Range, Reference, MAX};

/// The longest instruction, in bytes (Intel SDM, vol. 2, 2.3.11).
const LONGEST: usize = 15;

/// The references into `range` of the code `bytes` at `addr`, as one
/// linear sweep from its start finds them, in address order, appended to
/// `found` (at most [`MAX`] in all).
pub(super) fn references(
    bytes: &[u8],
    addr: u64,
    fixed: bool,
    range: Range,
    found: &mut Vec<Reference>,
) {
    let refs = match possible_starts(bytes, addr, fixed, range, MOST_STARTS) {
        Some(starts) if starts.is_empty() => Vec::new(),
        Some(starts) => in_step(bytes, addr, fixed, range, &starts, MAX)
            .unwrap_or_else(|| sweep_all(bytes, addr, fixed, range)),
        None => sweep_all(bytes, addr, fixed, range),
    };
    #[cfg(fuzzing)]
    fuzzing::agree(bytes, addr, fixed, range);
    found.extend(refs);
    found.truncate(MAX);
}

/// The references into `range` one instruction makes, each passed to `push`
/// (nothing for an invalid one).
fn operands(ins: &Instruction, fixed: bool, range: Range, mut push: impl FnMut(u64)) {
    if ins.is_invalid() {
        return;
    }
    let mut check = |to: u64| {
        if range.contains(to) {
            push(to);
        }
    };
    if ins.is_ip_rel_memory_operand() {
        check(ins.ip_rel_memory_address());
    } else if fixed
        && ins.op_kinds().any(|k| k == OpKind::Memory)
        && ins.memory_base() == Register::None
        && ins.memory_index() == Register::None
    {
        check(ins.memory_displacement64());
    }
    for i in 0..ins.op_count() {
        match ins.op_kind(i) {
            OpKind::NearBranch64 => check(ins.near_branch64()),
            OpKind::Immediate32 | OpKind::Immediate32to64 | OpKind::Immediate64 if fixed => {
                check(ins.immediate(i))
            }
            _ => {}
        }
    }
}

/// The references of the instruction just decoded into `ins`.
fn push_operands(ins: &Instruction, fixed: bool, range: Range, found: &mut Vec<Reference>) {
    operands(ins, fixed, range, |to| {
        found.push(Reference {
            from: ins.ip(),
            to,
            kind: Kind::Code,
        })
    });
}

/// Where a field that refers into `range` may begin among the offsets
/// `span` of the code, ascending (a superset: see the module's comment).
/// The bytes that open a field are sifted 8 at a time ([`openers`]); near
/// the range every offset is one; in a position-dependent file every
/// offset is looked at, as any of them may hold an absolute value.
fn places(
    bytes: &[u8],
    addr: u64,
    fixed: bool,
    range: Range,
    span: std::ops::Range<usize>,
) -> Vec<usize> {
    // No field begins at offset 0: an opcode comes first.
    let span = span.start.max(1)..span.end;
    if fixed {
        return span
            .filter(|&p| place(bytes, addr, fixed, range, p))
            .collect();
    }
    let mut places = Vec::new();
    let mut p = span.start;
    while p < span.end {
        let Some(mut mask) = openers(bytes, p).filter(|_| p + 8 <= span.end) else {
            if place(bytes, addr, fixed, range, p) {
                places.push(p);
            }
            p += 1;
            continue;
        };
        // Offsets near the range are added below.
        while mask != 0 {
            let q = p + mask.trailing_zeros() as usize;
            mask &= mask - 1;
            if reaches(bytes, addr, range, q) {
                places.push(q);
            }
        }
        p += 8;
    }
    // 8-bit branches: every offset from which the range is in reach.
    let first = range.start.saturating_sub(129).saturating_sub(addr);
    let last = range.end.saturating_add(127).checked_sub(addr);
    if let Some(last) = last {
        let near = span.start.max(usize::try_from(first).unwrap_or(usize::MAX))
            ..span.end.min(
                usize::try_from(last)
                    .unwrap_or(usize::MAX)
                    .saturating_add(1),
            );
        if !near.is_empty() {
            places.extend(near);
            places.sort_unstable();
            places.dedup();
        }
    }
    places
}

/// Whether `b` (after `before`) opens a field that may refer elsewhere: a
/// RIP-relative ModRM byte (`mod = 00`, `r/m = 101`; also EIP-relative,
/// with a 0x67 prefix), or the last opcode byte of a 32-bit near branch
/// (call E8, jmp E9, jcc 0F 8x, xbegin C7 F8: its ModRM byte F8). F9 too,
/// which opens nothing: the four are `b & 0xee == 0xe8`, one compare.
fn opens(b: u8, before: Option<u8>) -> bool {
    b & 0xc7 == 0x05 || b & 0xee == 0xe8 || (b & 0xf0 == 0x80 && before == Some(0x0f))
}

/// Bit `j` set where offset `p + j` follows a byte that [`opens`] a field,
/// for `j` in `0..8`; `None` past the end. The 8 bytes are compared at once,
/// as one word (bytes equal to a value are the zero bytes of their
/// difference, found without a carry between bytes: Hacker's Delight, 6-1).
fn openers(bytes: &[u8], p: usize) -> Option<u64> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const LOW: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let word = bytes.get(p - 1..p + 7)?;
    let w = u64::from_le_bytes(word.try_into().ok()?);
    // High bit of each byte of `w` that, masked with `m`, is `v`.
    let eq = |m: u8, v: u8| {
        let x = (w & (ONES * u64::from(m))) ^ (ONES * u64::from(v));
        !(((x & LOW) + LOW) | x | LOW)
    };
    let escape_before = p >= 2 && bytes[p - 2] == 0x0f;
    let escapes = eq(0xff, 0x0f) << 8 | u64::from(escape_before) << 7;
    let high = eq(0xc7, 0x05) | eq(0xee, 0xe8) | (eq(0xf0, 0x80) & escapes);
    // One bit per byte: byte j's high bit to bit j.
    Some(((high >> 7) & ONES).wrapping_mul(0x0102_0408_1020_4080) >> 56)
}

/// Whether a field that refers into `range` may begin at offset `p`.
fn place(bytes: &[u8], addr: u64, fixed: bool, range: Range, p: usize) -> bool {
    let at = addr.wrapping_add(p as u64);
    if range.overlaps(at.saturating_sub(127), at.saturating_add(129)) {
        return true;
    }
    let b = p.checked_sub(1).and_then(|i| bytes.get(i)).copied();
    let before = p.checked_sub(2).and_then(|i| bytes.get(i)).copied();
    if b.is_some_and(|b| opens(b, before)) && reaches(bytes, addr, range, p) {
        return true;
    }
    fixed && {
        let value = |n: usize| {
            let mut w = [0u8; 8];
            w[..n].copy_from_slice(bytes.get(p..p + n)?);
            Some(u64::from_le_bytes(w))
        };
        let d = value(4).unwrap_or(u64::MAX);
        range.contains(d)
            || range.contains(d as u32 as i32 as i64 as u64)
            || value(8).is_some_and(|w| range.contains(w))
    }
}

/// Whether the 4-byte field at offset `p`, opened as a RIP-relative
/// displacement or a branch's, reaches `range`, whatever immediate follows
/// it (0 to 4 bytes): the target is the instruction's end plus the field.
fn reaches(bytes: &[u8], addr: u64, range: Range, p: usize) -> bool {
    let Some(field) = bytes.get(p..p + 4) else {
        return false;
    };
    let d = i32::from_le_bytes([field[0], field[1], field[2], field[3]]) as i64 as u64;
    let at = addr.wrapping_add(p as u64);
    (4..=8u64).any(|end| {
        let to = at.wrapping_add(end).wrapping_add(d);
        range.contains(to) || range.contains(u64::from(to as u32))
    })
}

/// Offsets whose decoded instructions make up one piece of the scan.
const PIECE: usize = 1 << 20;

/// At most this many starts are kept (8 MiB); code with more (hostile
/// bytes) is swept whole instead.
const MOST_STARTS: usize = 1 << 20;

/// Every offset at which one instruction decodes to a reference into
/// `range` and that lies at most 14 bytes before one of the [`places`],
/// ascending; `None` past `most` of them.
fn possible_starts(
    bytes: &[u8],
    addr: u64,
    fixed: bool,
    range: Range,
    most: usize,
) -> Option<Vec<usize>> {
    let pieces: Vec<usize> = (0..bytes.len()).step_by(PIECE).collect();
    let kept = AtomicUsize::new(0);
    let pieces: Option<Vec<Vec<usize>>> = pieces
        .par_iter()
        .map(|&first| {
            let end = (first + PIECE).min(bytes.len());
            let starts = piece_starts(bytes, addr, fixed, range, first..end);
            let before = kept.fetch_add(starts.len(), Ordering::Relaxed);
            (before + starts.len() <= most).then_some(starts)
        })
        .collect();
    let mut starts = pieces?.concat();
    starts.sort_unstable();
    starts.dedup();
    Some(starts)
}

/// [`possible_starts`] for the places in `span`.
fn piece_starts(
    bytes: &[u8],
    addr: u64,
    fixed: bool,
    range: Range,
    span: std::ops::Range<usize>,
) -> Vec<usize> {
    let mut decoder = Decoder::with_ip(64, bytes, addr, DecoderOptions::NONE);
    let mut ins = Instruction::default();
    let mut starts = Vec::new();
    // Offsets below this are decoded already.
    let mut next = 0;
    for p in places(bytes, addr, fixed, range, span) {
        for s in p.saturating_sub(LONGEST - 1).max(next)..p {
            if decoder.set_position(s).is_err() {
                break;
            }
            decoder.set_ip(addr.wrapping_add(s as u64));
            decoder.decode_out(&mut ins);
            let mut refers = false;
            operands(&ins, fixed, range, |_| refers = true);
            if refers {
                starts.push(s);
            }
        }
        next = next.max(p);
    }
    starts
}

/// Starts closer than this are checked with one decoding.
const NEAR: usize = 512;

/// How far before a group of starts the decodings begin: each is tried in
/// turn until they fall in step.
const BACK: [usize; 3] = [64, 1024, 16384];

/// The references the sweep finds at `starts`, the first `limit` or a few
/// more, or `None` where the decodings near some of them did not fall in
/// step.
fn in_step(
    bytes: &[u8],
    addr: u64,
    fixed: bool,
    range: Range,
    starts: &[usize],
    limit: usize,
) -> Option<Vec<Reference>> {
    let mut groups: Vec<(usize, usize)> = Vec::new();
    for &s in starts {
        match groups.last_mut() {
            Some((_, hi)) if s - *hi < NEAR => *hi = s,
            _ => groups.push((s, s)),
        }
    }
    let found: Vec<Option<Vec<Reference>>> = groups
        .par_iter()
        .map(|&(lo, hi)| {
            BACK.iter().find_map(|&back| {
                let from = lo.saturating_sub(back);
                group(bytes, addr, fixed, range, from, (lo, hi), limit)
            })
        })
        .collect();
    let mut all = Vec::new();
    for refs in found {
        all.extend(refs?);
        if all.len() >= limit {
            break;
        }
    }
    Some(all)
}

/// The references (the first `limit` or a few more) of the instructions at
/// `lo..=hi` of the decoding from `from`, if the decodings from each of the
/// 15 offsets at `from` fall in step with it by `lo` (or `from` is the
/// start, where the sweep begins).
fn group(
    bytes: &[u8],
    addr: u64,
    fixed: bool,
    range: Range,
    from: usize,
    (lo, hi): (usize, usize),
    limit: usize,
) -> Option<Vec<Reference>> {
    debug_assert!(from == 0 || lo - from >= LONGEST);
    let mut decoder = Decoder::with_ip(64, bytes, addr, DecoderOptions::NONE);
    let mut ins = Instruction::default();
    // The decoding's instruction starts up to `lo`, one bit each.
    let mut on_path = vec![0u64; (lo - from) / 64 + 1];
    let mut found = Vec::new();
    decoder.set_position(from).ok()?;
    decoder.set_ip(addr.wrapping_add(from as u64));
    while decoder.can_decode() && decoder.position() <= hi {
        let at = decoder.position();
        if at <= lo {
            on_path[(at - from) / 64] |= 1 << ((at - from) % 64);
        }
        decoder.decode_out(&mut ins);
        if at >= lo && found.len() < limit {
            push_operands(&ins, fixed, range, &mut found);
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

/// The whole sweep, run in pieces in parallel: each piece is decoded from
/// its own start, and the piece before it decodes on past that start until
/// it reaches an instruction the piece's own decoding also starts at (from
/// there both decode alike); each finding is taken from the decoding that
/// is in step at its place, so the findings are those of one sweep from the
/// start. A piece that does not fall in step soon enough makes it that one
/// sweep.
fn sweep_all(bytes: &[u8], addr: u64, fixed: bool, range: Range) -> Vec<Reference> {
    let starts: Vec<usize> = (0..bytes.len()).step_by(PIECE).collect();
    if starts.len() < 3 {
        return sweep(bytes, addr, 0, None, fixed, range).0;
    }
    // Where each piece's own decoding starts its first instructions.
    let heads: Vec<Vec<u64>> = starts
        .par_iter()
        .map(|&s| sweep_starts(bytes, addr, s))
        .collect();
    let pieces: Vec<(Vec<Reference>, Option<u64>)> = starts
        .par_iter()
        .enumerate()
        .map(|(i, &s)| {
            sweep(
                bytes,
                addr,
                s,
                heads.get(i + 1).map(|h| (starts[i + 1], &h[..])),
                fixed,
                range,
            )
        })
        .collect();
    if pieces.iter().any(|(_, end)| end.is_none()) {
        return sweep(bytes, addr, 0, None, fixed, range).0;
    }
    // Piece i is in step from where piece i - 1 fell in step with it.
    let mut found = Vec::new();
    let mut from = addr;
    for (refs, end) in pieces {
        let end = end.unwrap_or(u64::MAX);
        found.extend(refs.into_iter().filter(|r| r.from >= from && r.from < end));
        from = end;
    }
    found
}

/// How many instructions a piece's decoding may take to fall in step.
const STEP: usize = 256;

/// The addresses of the first [`STEP`] instructions decoded from offset `s`.
fn sweep_starts(bytes: &[u8], addr: u64, s: usize) -> Vec<u64> {
    let mut decoder = Decoder::with_ip(64, &bytes[s..], addr + s as u64, DecoderOptions::NONE);
    let mut ins = Instruction::default();
    let mut starts = Vec::with_capacity(STEP);
    while decoder.can_decode() && starts.len() < STEP {
        starts.push(decoder.ip());
        decoder.decode_out(&mut ins);
    }
    starts
}

/// Decodes from offset `s`: the references found, and where it stopped: the
/// end, or (with `next`, the next piece's offset and its first instruction
/// addresses) the first instruction past that piece's start that its own
/// decoding also starts at; `None` when there is none among them.
fn sweep(
    bytes: &[u8],
    addr: u64,
    s: usize,
    next: Option<(usize, &[u64])>,
    fixed: bool,
    range: Range,
) -> (Vec<Reference>, Option<u64>) {
    let mut found = Vec::new();
    let mut decoder = Decoder::with_ip(64, &bytes[s..], addr + s as u64, DecoderOptions::NONE);
    let mut ins = Instruction::default();
    while decoder.can_decode() {
        let ip = decoder.ip();
        if let Some((n, heads)) = next {
            if ip >= addr + n as u64 {
                if heads.binary_search(&ip).is_ok() {
                    return (found, Some(ip));
                }
                if heads.last().is_none_or(|&l| ip > l) {
                    return (found, None);
                }
            }
        }
        decoder.decode_out(&mut ins);
        if found.len() < MAX {
            push_operands(&ins, fixed, range, &mut found);
        }
    }
    (found, Some(u64::MAX))
}

/// Under the fuzzers (`cargo fuzz` sets `cfg(fuzzing)`) every code section
/// is also swept whole: for the range asked about, and for the 16 MiB
/// before the code and after it, where its data and the PLT are (ranges
/// that hold no code: with the code's own branches in range, their places
/// would cover a missed RIP-relative operand), all the findings must be
/// the same.
#[cfg(any(test, fuzzing))]
mod fuzzing {
    use super::*;

    /// Every reference one sweep from the start finds, in order.
    pub(super) fn sweep_every(
        bytes: &[u8],
        addr: u64,
        fixed: bool,
        range: Range,
    ) -> Vec<Reference> {
        let mut found = Vec::new();
        let mut decoder = Decoder::with_ip(64, bytes, addr, DecoderOptions::NONE);
        let mut ins = Instruction::default();
        while decoder.can_decode() {
            decoder.decode_out(&mut ins);
            push_operands(&ins, fixed, range, &mut found);
        }
        found
    }

    /// Panics where the places and the decodings in step do not find what
    /// the sweep finds.
    #[cfg(fuzzing)]
    pub(super) fn agree(bytes: &[u8], addr: u64, fixed: bool, range: Range) {
        let end = addr.saturating_add(bytes.len() as u64);
        let before = Range {
            start: addr.saturating_sub(1 << 24),
            end: addr.saturating_sub(1),
        };
        let after = Range {
            start: end,
            end: end.saturating_add(1 << 24),
        };
        for range in [range, before, after] {
            let Some(starts) = possible_starts(bytes, addr, fixed, range, MOST_STARTS) else {
                continue;
            };
            if let Some(fast) = in_step(bytes, addr, fixed, range, &starts, usize::MAX) {
                let whole = sweep_every(bytes, addr, fixed, range);
                assert_eq!(fast, whole, "the places missed or added a reference");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            let (one, _) = sweep(&bytes, addr, 0, None, false, range);
            let pieces = sweep_all(&bytes, addr, false, range);
            assert!(!one.is_empty() && one.len() < MAX, "{}", one.len());
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
                let range = Range { start, end };
                let one = fuzzing::sweep_every(&bytes, addr, fixed, range);
                let starts =
                    possible_starts(&bytes, addr, fixed, range, MOST_STARTS).expect("few starts");
                let fast = in_step(&bytes, addr, fixed, range, &starts, usize::MAX);
                let fast = fast.expect("the decodings fall in step");
                assert!(one.len() > 20, "{start:#x}: {}", one.len());
                assert_eq!(fast, one, "{start:#x}..{end:#x}");
            }
        }
    }

    /// The word-wide sift finds the bytes [`opens`] accepts one by one,
    /// jcc's 0F escape in the word before included, in noise with runs of
    /// 0F and 8x.
    #[test]
    fn openers_are_the_bytes_that_open_a_field() {
        let mut bytes = noise(7, 1 << 16);
        for w in bytes.chunks_exact_mut(97) {
            w[..4].copy_from_slice(&[0x0f, 0x0f, 0x85, 0x0f]);
            w[4] = 0x80 | (w[5] & 0xf);
            w[13] = 0x0f;
        }
        for p in 1..bytes.len() - 7 {
            let mask = openers(&bytes, p).expect("in the bytes");
            for j in 0..8 {
                let q = p + j;
                let one = opens(bytes[q - 1], q.checked_sub(2).map(|i| bytes[i]));
                assert_eq!(mask >> j & 1 == 1, one, "{p} + {j}");
            }
        }
        assert_eq!(openers(&bytes, bytes.len() - 6), None);
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
            let range = Range { start, end };
            let one = fuzzing::sweep_every(bytes, addr, false, range);
            let starts =
                possible_starts(bytes, addr, false, range, MOST_STARTS).expect("few starts");
            let fast = in_step(bytes, addr, false, range, &starts, usize::MAX);
            assert_eq!(fast.as_ref(), Some(&one), "{start:#x}..{end:#x}");
            total += one.len();
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
        let range = Range {
            start: addr,
            end: addr + bytes.len() as u64,
        };
        let all = possible_starts(&bytes, addr, false, range, usize::MAX).expect("no limit");
        assert!(all.len() >= 1 << 12, "{}", all.len());
        assert_eq!(possible_starts(&bytes, addr, false, range, 100), None);
        let mut found = Vec::new();
        references(&bytes, addr, false, range, &mut found);
        assert_eq!(found, sweep(&bytes, addr, 0, None, false, range).0);
        assert_eq!(found.len(), MAX);
    }

    /// Fields the noise rarely isolates: each instruction alone in NOPs,
    /// its target at the range's first byte, found as the sweep finds it.
    #[test]
    fn x86_64_fields_at_the_edge_of_what_places_accept() {
        let at = |addr: u64, code: &[u8], start: u64, fixed: bool| {
            let mut bytes = vec![0x90; 4096];
            bytes[1000..1000 + code.len()].copy_from_slice(code);
            let range = Range {
                start,
                end: start + 0x100,
            };
            let mut found = Vec::new();
            references(&bytes, addr, fixed, range, &mut found);
            let (one, _) = sweep(&bytes, addr, 0, None, fixed, range);
            assert_eq!(found, one);
            found
                .iter()
                .map(|r| (r.from - addr, r.to))
                .collect::<Vec<_>>()
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
        let mut found = Vec::new();
        references(&code, 0x40_1000, false, range, &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].to, 0x40_3000);
        found.clear();
        references(&code, 0x40_1000, true, range, &mut found);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[1].to, 0x40_2010);
    }
}
