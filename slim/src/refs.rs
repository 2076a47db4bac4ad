//! What in a linked file refers to an address range without a relocation
//! that says so: the references compaction would have to rewrite but cannot
//! see in the relocation tables.
//!
//! - Code: x86-64 RIP-relative operands and near branches (decoded with
//!   `iced-x86`); in a position-dependent executable also absolute
//!   displacements and immediates. AArch64 `ADR`, `ADRP` and `LDR`
//!   (literal), decoded by hand from their fixed encodings (Arm
//!   Architecture Reference Manual, C6.2: ADR, ADRP, LDR (literal)).
//! - Data of a position-dependent executable: every aligned 8-byte word of
//!   its loaded sections (a pointer there needs no relocation).
//! - Symbols whose value lies in the range but that name another section,
//!   or none (`SHN_ABS`): linker-script and `objcopy -I binary` symbols.
//!
//! A position-independent file's data needs no scan: a pointer there is
//! only valid with a relocation, and relocations are read by the patcher
//! itself. Objects (`ET_REL`) need none: every reference has a relocation.
//! Each finding is conservative: a decoded word that only looks like a
//! reference keeps the section where it is, never the other way round.

use object::elf;
use object::read::elf::{SectionHeader, Sym};
use object::LittleEndian as LE;

/// A reference into the range that no relocation describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reference {
    /// Where it is: an address in the file's memory image.
    pub from: u64,
    /// The address it refers to; for an `ADRP` alone, its page.
    pub to: u64,
    /// What it is.
    pub kind: Kind,
}

/// The kinds of reference found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An instruction's operand (exactly its target).
    Code,
    /// An `ADRP` page: the exact target is not known.
    Page,
    /// A word in data.
    Data,
    /// A symbol of another section, or an absolute one.
    Symbol,
}

impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.kind {
            Kind::Code => "an instruction",
            Kind::Page => "an ADRP instruction (a page)",
            Kind::Data => "a word in data",
            Kind::Symbol => "a symbol of another section",
        };
        write!(
            f,
            "{what} at {:#x} refers to {:#x} with no relocation",
            self.from, self.to
        )
    }
}

/// The file this scans: its headers, already parsed by the patcher.
pub(crate) struct Scan<'d> {
    pub data: &'d [u8],
    pub shdrs: &'d [elf::SectionHeader64<LE>],
    pub endian: LE,
    pub machine: u16,
    /// `ET_EXEC`: addresses are absolute, pointers need no relocation.
    pub fixed: bool,
    /// The section that would move (skipped: its own bytes are GPU code).
    pub index: usize,
}

/// Addresses `start..=end`.
#[derive(Debug, Clone, Copy)]
struct Range {
    start: u64,
    end: u64,
}

impl Range {
    fn contains(self, v: u64) -> bool {
        v >= self.start && v <= self.end
    }
    fn overlaps(self, lo: u64, hi: u64) -> bool {
        lo <= self.end && hi >= self.start
    }
}

/// At most this many references are reported: one is enough to refuse.
const MAX: usize = 16;

impl Scan<'_> {
    /// The references into `start..=end` (its end included: a pointer to a
    /// section's end is a reference too), skipping data words at the file
    /// offsets `patched` says the patcher rewrites.
    pub(crate) fn references(
        &self,
        start: u64,
        end: u64,
        patched: &dyn Fn(u64) -> bool,
    ) -> Vec<Reference> {
        let mut found = Vec::new();
        let range = Range { start, end };
        self.symbols(range, &mut found);
        for (i, s) in self.shdrs.iter().enumerate() {
            if found.len() >= MAX {
                break;
            }
            let flags = s.sh_flags(self.endian);
            if i == self.index
                || flags & u64::from(elf::SHF_ALLOC) == 0
                || s.sh_type(self.endian) == elf::SHT_NOBITS
            {
                continue;
            }
            let Ok(bytes) = s.data(self.endian, self.data) else {
                continue;
            };
            let addr = s.sh_addr(self.endian);
            if flags & u64::from(elf::SHF_EXECINSTR) != 0 {
                match self.machine {
                    elf::EM_X86_64 => x86_64(bytes, addr, self.fixed, range, &mut found),
                    elf::EM_AARCH64 => aarch64(bytes, addr, range, &mut found),
                    _ => {}
                }
            } else if self.fixed {
                let offset = s.sh_offset(self.endian);
                words(bytes, addr, offset, range, patched, &mut found);
            }
        }
        found.truncate(MAX);
        found
    }

    /// Symbols in the range that are not the section's own (those the
    /// patcher moves): absolute ones, and those of another section whose
    /// value is not at that section's own bounds.
    fn symbols(&self, range: Range, found: &mut Vec<Reference>) {
        for s in self.shdrs {
            if !matches!(s.sh_type(self.endian), elf::SHT_SYMTAB | elf::SHT_DYNSYM) {
                continue;
            }
            let Ok(syms) = s.data_as_array::<elf::Sym64<LE>, _>(self.endian, self.data) else {
                continue;
            };
            for sym in syms {
                let (shndx, value) = (sym.st_shndx(self.endian), sym.st_value(self.endian));
                if shndx == elf::SHN_UNDEF
                    || usize::from(shndx) == self.index
                    || sym.st_type() == elf::STT_SECTION
                    || sym.st_type() == elf::STT_FILE
                    || !range.contains(value)
                {
                    continue;
                }
                // An absolute symbol of a position-independent file is a
                // number, not an address (`_binary_*_size`).
                if shndx == elf::SHN_ABS && !self.fixed {
                    continue;
                }
                let own = self.shdrs.get(usize::from(shndx)).is_some_and(|o| {
                    shndx < elf::SHN_LORESERVE && {
                        let a = o.sh_addr(self.endian);
                        value >= a && value <= a.saturating_add(o.sh_size(self.endian))
                    }
                });
                if !own {
                    found.push(Reference {
                        from: value,
                        to: value,
                        kind: Kind::Symbol,
                    });
                }
            }
        }
    }
}

/// x86-64 code at `addr`: RIP-relative operands and near branches into the
/// range; in a position-dependent file (`fixed`) also absolute
/// displacements and immediates. A linear sweep, run in pieces in
/// parallel: each piece is decoded from its own start, and the piece
/// before it decodes on past that start until it reaches an instruction
/// the piece's own decoding also starts at (from there both decode alike);
/// each finding is taken from the decoding that is in step at its place,
/// so the findings are those of one sweep from the start. A piece that
/// does not fall in step soon enough makes it that one sweep.
fn x86_64(bytes: &[u8], addr: u64, fixed: bool, range: Range, found: &mut Vec<Reference>) {
    use rayon::prelude::*;
    const PIECE: usize = 1 << 20;
    let starts: Vec<usize> = (0..bytes.len()).step_by(PIECE).collect();
    if starts.len() < 3 {
        found.extend(sweep(bytes, addr, 0, None, fixed, range).0);
        found.truncate(MAX);
        return;
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
        found.extend(sweep(bytes, addr, 0, None, fixed, range).0);
        found.truncate(MAX);
        return;
    }
    // Piece i is in step from where piece i - 1 fell in step with it.
    let mut from = addr;
    for (refs, end) in pieces {
        let end = end.unwrap_or(u64::MAX);
        found.extend(refs.into_iter().filter(|r| r.from >= from && r.from < end));
        from = end;
    }
    found.truncate(MAX);
}

/// How many instructions a piece's decoding may take to fall in step.
const STEP: usize = 256;

/// The addresses of the first [`STEP`] instructions decoded from offset `s`.
fn sweep_starts(bytes: &[u8], addr: u64, s: usize) -> Vec<u64> {
    use iced_x86::{Decoder, DecoderOptions};
    let mut decoder = Decoder::with_ip(64, &bytes[s..], addr + s as u64, DecoderOptions::NONE);
    let mut ins = iced_x86::Instruction::default();
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
    use iced_x86::{Decoder, DecoderOptions, Instruction, OpKind, Register};
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
        if ins.is_invalid() || found.len() >= MAX {
            continue;
        }
        let mut push = |to: u64| {
            if range.contains(to) {
                found.push(Reference {
                    from: ins.ip(),
                    to,
                    kind: Kind::Code,
                });
            }
        };
        if ins.is_ip_rel_memory_operand() {
            push(ins.ip_rel_memory_address());
        } else if fixed
            && ins.op_kinds().any(|k| k == OpKind::Memory)
            && ins.memory_base() == Register::None
            && ins.memory_index() == Register::None
        {
            push(ins.memory_displacement64());
        }
        for i in 0..ins.op_count() {
            match ins.op_kind(i) {
                OpKind::NearBranch64 => push(ins.near_branch64()),
                OpKind::Immediate32 | OpKind::Immediate32to64 | OpKind::Immediate64 if fixed => {
                    push(ins.immediate(i))
                }
                _ => {}
            }
        }
    }
    (found, Some(u64::MAX))
}

/// AArch64 code at `addr`: `ADR`, `ADRP` (the page; exact when the next
/// instruction is an `ADD` (immediate) of the same register) and `LDR`
/// (literal) into the range.
fn aarch64(bytes: &[u8], addr: u64, range: Range, found: &mut Vec<Reference>) {
    let words: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    for (i, &w) in words.iter().enumerate() {
        if found.len() >= MAX {
            return;
        }
        let pc = addr.wrapping_add(4 * i as u64);
        let (to, kind) = if w & 0x9f00_0000 == 0x1000_0000 {
            // ADR: PC + SignExtend(immhi:immlo).
            (pc.wrapping_add(adr_imm(w) as u64), Kind::Code)
        } else if w & 0x9f00_0000 == 0x9000_0000 {
            // ADRP: the 4 KiB page of PC + SignExtend(immhi:immlo) << 12.
            let page = (pc & !0xfff).wrapping_add((adr_imm(w) << 12) as u64);
            match words.get(i + 1).and_then(|&n| add_lo12(n, w & 0x1f)) {
                Some(lo) => (page.wrapping_add(lo), Kind::Code),
                // Any address of the page may be meant.
                None if range.overlaps(page, page | 0xfff) => {
                    found.push(Reference {
                        from: pc,
                        to: page,
                        kind: Kind::Page,
                    });
                    continue;
                }
                None => continue,
            }
        } else if w & 0x3b00_0000 == 0x1800_0000 {
            // LDR (literal), general and SIMD: PC + SignExtend(imm19) * 4.
            let imm19 = ((w >> 5) & 0x7ffff) as i64;
            let imm = (imm19 << 45) >> 43;
            (pc.wrapping_add(imm as u64), Kind::Code)
        } else {
            continue;
        };
        if range.contains(to) {
            found.push(Reference { from: pc, to, kind });
        }
    }
}

/// `ADR`/`ADRP`'s signed 21-bit immediate, immhi (bits 5..24) : immlo
/// (bits 29..31).
fn adr_imm(w: u32) -> i64 {
    let imm = (((w >> 5) & 0x7ffff) << 2 | ((w >> 29) & 3)) as i64;
    (imm << 43) >> 43
}

/// The low 12 bits an `ADD Xd, Xn, #imm` (64-bit, no shift) adds to
/// register `rn`, if `w` is one.
fn add_lo12(w: u32, rn: u32) -> Option<u64> {
    // sf=1 op=0 S=0 100010 sh=0: ADD (immediate), 64-bit.
    (w & 0xffc0_0000 == 0x9100_0000 && (w >> 5) & 0x1f == rn).then(|| u64::from((w >> 10) & 0xfff))
}

/// Aligned 8-byte words of a position-dependent file's data that fall in
/// the range, except at the file offsets `patched` rewrites.
fn words(
    bytes: &[u8],
    addr: u64,
    offset: u64,
    range: Range,
    patched: &dyn Fn(u64) -> bool,
    found: &mut Vec<Reference>,
) {
    let skip = ((8 - addr % 8) % 8) as usize;
    let Some(aligned) = bytes.get(skip..) else {
        return;
    };
    for (i, c) in aligned.chunks_exact(8).enumerate() {
        let v = u64::from_le_bytes(c.try_into().unwrap_or_default());
        let at = (skip + i * 8) as u64;
        if range.contains(v) && !patched(offset + at) {
            found.push(Reference {
                from: addr.wrapping_add(at),
                to: v,
                kind: Kind::Data,
            });
            if found.len() >= MAX {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aarch64_pc_relative_forms() {
        let range = Range {
            start: 0x2_0000,
            end: 0x3_0000,
        };
        // At 0x1000: adrp x0, 0x21000; add x0, x0, #0x10; adr x1, +8;
        // ldr x2, +0x1f000 (literal).
        let code: Vec<u8> = [
            // ADRP x0: immhi:immlo = 0x20 (0x20 pages from 0x1000's page).
            0x9000_0000 | ((0x20 >> 2) << 5),
            0x9100_0000 | (0x10 << 10),
            0x1000_0000 | (2 << 5) | 1,
            0x5800_0000 | ((0x1f000 / 4) << 5) | 2,
        ]
        .iter()
        .flat_map(|w: &u32| w.to_le_bytes())
        .collect();
        let mut found = Vec::new();
        aarch64(&code, 0x1000, range, &mut found);
        let to: Vec<u64> = found.iter().map(|r| r.to).collect();
        assert_eq!(to, vec![0x21010, 0x2000c]);
        // The literal load from 0x100c reaches 0x2000c: in range too.
        assert_eq!(found[1].from, 0x100c);
    }

    /// The pieces decoded in parallel find what one sweep finds, on bytes
    /// that decode as anything (an LCG's output: no instruction boundary
    /// is where a piece starts).
    #[test]
    fn x86_64_pieces_find_what_one_sweep_finds() {
        let mut x = 0x1234_5678_9abc_def0u64;
        let bytes: Vec<u8> = (0..(3 << 20) + 12345)
            .map(|_| {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (x >> 33) as u8
            })
            .collect();
        let addr = 0x10_0000;
        for (start, len) in [(0x4000_0000, 1 << 20), (0x2000_0000, 3 << 19)] {
            let range = Range {
                start,
                end: start + len,
            };
            let (one, _) = sweep(&bytes, addr, 0, None, false, range);
            let mut pieces = Vec::new();
            x86_64(&bytes, addr, false, range, &mut pieces);
            assert!(!one.is_empty() && one.len() < MAX, "{}", one.len());
            assert_eq!(pieces, one);
        }
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
        x86_64(&code, 0x40_1000, false, range, &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].to, 0x40_3000);
        found.clear();
        x86_64(&code, 0x40_1000, true, range, &mut found);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[1].to, 0x40_2010);
    }
}
