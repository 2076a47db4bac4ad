//! What in a linked file refers to an address range without a relocation
//! that says so: the references compaction would have to rewrite but cannot
//! see in the relocation tables.
//!
//! - Code: x86-64 RIP-relative operands and near branches (decoded with
//!   `iced-x86`, as one linear sweep decodes them, and from where a direct
//!   branch on the sweep reaches code the sweep passed over); in a
//!   position-dependent executable also absolute displacements and
//!   immediates. AArch64 `ADR`, `ADRP`, `LDR`
//!   (literal) and `MOVZ`/`MOVK` chains, decoded by hand from their fixed encodings (Arm
//!   Architecture Reference Manual, C6.2: ADR, ADRP, LDR (literal)).
//! - Data of a position-dependent executable: every aligned 8-byte word of
//!   its loaded sections (a pointer there needs no relocation).
//! - Symbols whose value lies in the range but that name another section,
//!   or none (`SHN_ABS`): linker-script and `objcopy -I binary` symbols.
//! - The section's own symbols that other files may bind to (exported from
//!   `.dynsym`): another file's `symbol + addend` is not in this one.
//! - x86-64 code of the large code model: `movabs $sym@GOTOFF`, whose
//!   immediate is added to the GOT's address (x86-64 psABI, "Large
//!   Models"), matched by bytes.
//!
//! - Words that name a moving container's bound exactly
//!   ([`Scan::exact_words`]): in a position-dependent file 8-byte words at
//!   any offset of data, 4-byte absolute words in data, AArch64 literal
//!   pools; in any file self-relative words in data (`.long sym - .`,
//!   `.quad sym - .`).
//!
//! - AArch64 code of the large code model: a `MOVZ` and the `MOVK`s that
//!   complete an absolute address.
//!
//! Not found here: an object's assembler-resolved differences of two of
//! the section's symbols (`.quad end - start`), which the patcher rules
//! out by the object's symbols instead.
//!
//! Each finding is conservative: a decoded word that only looks like a
//! reference keeps what it names where it is (a container's start pinned,
//! else the section), never the other way round.

use std::cell::{OnceCell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use object::elf;
use object::read::elf::{SectionHeader, Sym};
use object::read::StringTable;
use object::LittleEndian as LE;
use rayon::prelude::*;

mod x86_64;

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
    /// The section's own symbol, exported: another file may refer to it
    /// with an addend.
    Exported,
}

impl Reference {
    /// Whether it names its target exactly (an instruction's operand, a
    /// word of data): a place that can be kept true by keeping it where it
    /// is, unlike an `ADRP` page or another section's symbol.
    pub(crate) fn is_exact(&self) -> bool {
        matches!(self.kind, Kind::Code | Kind::Data)
    }
}

impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.kind {
            Kind::Code => "an instruction",
            Kind::Page => "an ADRP instruction (a page)",
            Kind::Data => "a word in data",
            Kind::Symbol => "a symbol of another section",
            Kind::Exported => {
                return write!(
                    f,
                    "the exported symbol at {:#x} may be used by another file as symbol + addend, which this file does not show",
                    self.from
                )
            }
        };
        write!(
            f,
            "{what} at {:#x} refers to {:#x} with no relocation",
            self.from, self.to
        )
    }
}

/// The file this scans: its headers, already parsed by the patcher.
pub(crate) struct File<'d> {
    pub data: &'d [u8],
    pub shdrs: &'d [elf::SectionHeader64<LE>],
    pub endian: LE,
    pub machine: u16,
    /// `ET_EXEC`: addresses are absolute, pointers need no relocation.
    pub fixed: bool,
    /// The section that would move (skipped: its own bytes are GPU code).
    pub index: usize,
    /// The file ranges `(offset, length)` of the containers in other
    /// sections, in order, apart: GPU code and its headers, which the
    /// driver reads and the host program takes no address from, so no
    /// data word of the host's lies in them ([`Scan::word_hits`] passes
    /// over them).
    pub gpu: Vec<(u64, u64)>,
    /// The section name table (`e_shstrndx`), where it can be read.
    pub names: Option<StringTable<'d>>,
}

/// A section a scan reads: loaded, with bytes in the file.
#[derive(Clone, Copy)]
struct Loaded<'d> {
    index: usize,
    bytes: &'d [u8],
    addr: u64,
    offset: u64,
    /// Whether it is code (`SHF_EXECINSTR`).
    code: bool,
    /// Whether it holds the program's own data, where it may keep a
    /// self-relative word: `SHT_PROGBITS`, neither code nor a TLS template
    /// (whose words are copied per thread, away from what they would be
    /// relative to), nor a table a format defines (the gABI's relocation,
    /// symbol, hash, version and dynamic tables are of their own types;
    /// `.eh_frame`, `.eh_frame_hdr` and `.gcc_except_table` are the
    /// psABI's unwind tables; `.got`, `.got.plt` hold absolute addresses).
    program_data: bool,
}

/// Sections of type `SHT_PROGBITS` whose layout a format defines (see
/// [`Loaded::program_data`]).
const FORMAT_TABLES: [&[u8]; 5] = [
    b".eh_frame",
    b".eh_frame_hdr",
    b".gcc_except_table",
    b".got",
    b".got.plt",
];

impl<'d> File<'d> {
    /// The offsets of section `s` outside [`File::gpu`], as runs.
    fn host_data(&self, s: Loaded<'_>) -> Vec<std::ops::Range<usize>> {
        let (lo, hi) = (s.offset, s.offset.saturating_add(s.bytes.len() as u64));
        let first = self
            .gpu
            .partition_point(|&(o, l)| o.saturating_add(l) <= lo);
        let mut runs = Vec::new();
        let mut at = lo;
        for &(o, l) in self.gpu.get(first..).unwrap_or_default() {
            if o >= hi {
                break;
            }
            if o > at {
                runs.push((at - lo) as usize..(o - lo) as usize);
            }
            at = at.max(o.saturating_add(l));
        }
        if at < hi {
            runs.push((at - lo) as usize..(hi - lo) as usize);
        }
        runs
    }

    /// Section `s`'s name, where the section name table holds it.
    fn name(&self, s: &elf::SectionHeader64<LE>) -> Option<&'d [u8]> {
        s.name(self.endian, self.names?).ok()
    }

    /// The sections a scan reads: every loaded one with bytes in the file,
    /// but the one that would move.
    fn loaded(&self) -> impl Iterator<Item = Loaded<'d>> + '_ {
        let e = self.endian;
        self.shdrs.iter().enumerate().filter_map(move |(index, s)| {
            let flags = s.sh_flags(e);
            if index == self.index
                || flags & u64::from(elf::SHF_ALLOC) == 0
                || s.sh_type(e) == elf::SHT_NOBITS
            {
                return None;
            }
            let code = flags & u64::from(elf::SHF_EXECINSTR) != 0;
            let program_data = !code
                && s.sh_type(e) == elf::SHT_PROGBITS
                && flags & u64::from(elf::SHF_TLS) == 0
                && !self
                    .name(s)
                    .is_some_and(|name| FORMAT_TABLES.contains(&name));
            Some(Loaded {
                index,
                bytes: s.data(e, self.data).ok()?,
                addr: s.sh_addr(e),
                offset: s.sh_offset(e),
                code,
                program_data,
            })
        })
    }
}

/// A file's scan for the references into some ranges: x86-64 code, most of
/// the cost, is read once for all of them, when the first is asked about.
pub(crate) struct Scan<'d> {
    pub file: File<'d>,
    /// The ranges asked about together.
    together: Vec<Range>,
    /// Per x86-64 code section (its index), the code's references into
    /// each range of `together`.
    code: OnceCell<Vec<(usize, Vec<Vec<Reference>>)>>,
    /// The words that may name a container's bound, for the bounds and
    /// starts they were read for (`None`: too many to keep).
    words: OnceCell<WordCache>,
    /// What symbols and each code section say of a range ([`Scan::memo`]).
    memo: RefCell<HashMap<(usize, u64, u64), Vec<Reference>>>,
}

/// The bounds and starts words were read for, and the places found (`None`:
/// too many to keep).
type WordCache = (Vec<u64>, Vec<u64>, Option<Vec<WordHit>>);

/// A place where a word may name a container's bound: its file offset, its
/// address, and what it names read each way [`Scan::exact_words`] reads
/// it (an absolute 8-byte word, an absolute 4-byte one, self-relative 4
/// and 8 bytes), where that is a bound (or start) at all.
#[derive(Debug, Clone)]
struct WordHit {
    offset: u64,
    from: u64,
    values: [Option<u64>; 4],
}

/// The most places [`Scan::word_hits`] keeps: past it (words that name
/// container bounds by the million: built to), each plan reads the data
/// again instead.
const MAX_WORD_HITS: usize = 1 << 20;

/// The offsets of data [`Scan::word_hits`] reads as one piece: the
/// pieces of a section are read in parallel.
const WORD_CHUNK: usize = 4 << 20;

/// How many places [`Words::read`] sifts at once: a block's words and
/// flags stay in the first level cache.
const WORD_BLOCK: usize = 1024;

/// How [`Scan::word_hits`] reads a word: the bounds and starts it may
/// name, and the file's kind.
struct Words<'a> {
    bounds: &'a [u64],
    starts: &'a [u64],
    /// Where the bounds and the starts may be, to pass most words over
    /// without a search.
    near_bound: Sieve,
    near_start: Sieve,
    fixed: bool,
}

impl<'a> Words<'a> {
    /// `None` where there is no bound to name.
    fn new(file: &File<'_>, bounds: &'a [u64], starts: &'a [u64]) -> Option<Words<'a>> {
        bounds.first()?;
        Some(Words {
            bounds,
            starts,
            near_bound: Sieve::new(bounds),
            near_start: Sieve::new(starts),
            fixed: file.fixed,
        })
    }

    /// The places at offsets `at` of section `s` (their stride the file's:
    /// every byte where position-dependent, every fourth otherwise) that
    /// `keep` keeps, counted in `taken`, until it passes `limit`. The places
    /// are sifted a block at a time ([`Words::sift`]); those left are read
    /// one by one.
    fn read(
        &self,
        s: Loaded<'_>,
        at: std::ops::Range<usize>,
        keep: &dyn Fn(&WordHit) -> bool,
        taken: &AtomicUsize,
        limit: usize,
    ) -> Vec<WordHit> {
        let mut found = Vec::new();
        if taken.load(Ordering::Relaxed) > limit {
            return found;
        }
        // Reads the place at `at`: `false` once the limit is passed.
        let mut visit = |at: usize| -> bool {
            if !self.may_name(s, at) {
                return true;
            }
            let Some(hit) = self.place(s, at) else {
                return true;
            };
            if keep(&hit) {
                if taken.fetch_add(1, Ordering::Relaxed) >= limit {
                    return false;
                }
                found.push(hit);
            }
            true
        };
        let stride = self.stride();
        let mut near = [0u8; WORD_BLOCK];
        let mut from = at.start;
        while from < at.end {
            let n = (at.end - from).div_ceil(stride).min(WORD_BLOCK);
            if !self.sift(s, from, &mut near[..n]) {
                near[..n].fill(1);
            }
            for k in flagged(&near[..n]) {
                if !visit(from + k * stride) {
                    return found;
                }
            }
            from += n * stride;
        }
        found
    }

    /// The distance between places read: every byte of a position-dependent
    /// file (packed structures), every fourth of another (self-relative
    /// words, at their alignment).
    fn stride(&self) -> usize {
        if self.fixed {
            1
        } else {
            4
        }
    }

    /// `near[k]`: 1 where the words at place `from + k * stride` of `s` may
    /// name a bound or a start, else 0; `false` where the block's last
    /// 4-byte word runs past the section, and nothing sifted.
    ///
    /// Each reading [`Words::may_name`] makes is compared in its low 32
    /// bits, by the sieves' spans: a value `v` from `lo` to `lo + span`
    /// has `(v - lo) mod 2^32 <= span` (a span of 2^32 or more lets every
    /// word through), and the low 32 bits of an 8-byte word, absolute or
    /// added to its address, are those of its first four bytes. So one
    /// 32-bit compare per reading, with no branch and no lookup (the
    /// compiler vectorizes it), keeps a superset of the places it names.
    fn sift(&self, s: Loaded<'_>, from: usize, near: &mut [u8]) -> bool {
        let Some(last) = near.len().checked_sub(1) else {
            return true;
        };
        let Some(block) = s.bytes.get(from..from + last * self.stride() + 4) else {
            return false;
        };
        let low = |sieve: &Sieve| (sieve.lo as u32, sieve.span.min(u64::from(u32::MAX)) as u32);
        let (bound_lo, bound_span) = low(&self.near_bound);
        let (start_lo, start_span) = low(&self.near_start);
        let (fixed, program_data) = (self.fixed, s.program_data);
        // A place's address, less the least start, in its low 32 bits.
        let first = (s.addr.wrapping_add(from as u64) as u32).wrapping_sub(start_lo);
        let flag = |k: usize, stride: usize, w: &[u8]| -> u8 {
            let x = u32::from_le_bytes(w.try_into().unwrap_or_default());
            let absolute =
                (x.wrapping_sub(bound_lo) <= bound_span) | (x.wrapping_sub(start_lo) <= start_span);
            let relative = first.wrapping_add((k * stride) as u32).wrapping_add(x) <= start_span;
            u8::from((fixed & absolute) | (program_data & relative))
        };
        if self.fixed {
            for (k, (near, w)) in near.iter_mut().zip(block.windows(4)).enumerate() {
                *near = flag(k, 1, w);
            }
        } else {
            for (k, (near, w)) in near.iter_mut().zip(block.chunks_exact(4)).enumerate() {
                *near = flag(k, 4, w);
            }
        }
        true
    }

    /// Whether a word at offset `at` of section `s` may name a bound or a
    /// start any way [`Words::place`] reads it: `false` only where none
    /// does. Most words name nothing near one, and are passed over with no
    /// search. The last seven places of a section, where no 8-byte word
    /// fits, are left to [`Words::place`].
    fn may_name(&self, s: Loaded<'_>, at: usize) -> bool {
        let Some(w) = s.bytes.get(at..at + 8) else {
            return true;
        };
        let w8 = w.try_into().map(u64::from_le_bytes).unwrap_or(0);
        let w4 = w8 as u32;
        let here = s.addr.wrapping_add(at as u64);
        let relative4 = here.wrapping_add(w4 as i32 as i64 as u64);
        (self.fixed && (self.near_bound.may_hold(w8) || self.near_start.may_hold(u64::from(w4))))
            || (s.program_data
                && (self.near_start.may_hold(relative4)
                    || self.near_start.may_hold(here.wrapping_add(w8))))
    }

    /// What the words at offset `at` of section `s` name, where one names
    /// a bound or a start.
    fn place(&self, s: Loaded<'_>, at: usize) -> Option<WordHit> {
        let here = s.addr.wrapping_add(at as u64);
        let word = |n: usize| -> Option<u64> {
            let b = s.bytes.get(at..at + n)?;
            let mut w = [0u8; 8];
            w[..n].copy_from_slice(b);
            Some(u64::from_le_bytes(w))
        };
        let (w4, w8) = (word(4), word(8));
        let relative4 = w4.map(|w| here.wrapping_add(w as u32 as i32 as i64 as u64));
        let relative8 = w8.map(|w| here.wrapping_add(w));
        let fixed = self.fixed;
        let hits = |v: u64| fixed && self.bounds.binary_search(&v).is_ok();
        let starts_at = |v: u64| self.starts.binary_search(&v).is_ok();
        let aligned4 = here % 4 == 0;
        let aligned8 = here % 8 == 0;
        // Code: literal pools, at their alignment.
        let any8 = !s.code || aligned8;
        // In the order they are taken: the first that names a bound of the
        // plan asked about is the word's meaning. Self-relative words
        // (`.long sym - .`, `.quad sym - .`: relative vtables, offset
        // tables) are resolved by the linker with no relocation, in any
        // file.
        let values = [
            w8.filter(|&v| any8 && hits(v)),
            w4.filter(|&v| fixed && aligned4 && !s.code && starts_at(v)),
            relative4.filter(|&v| aligned4 && s.program_data && starts_at(v)),
            relative8.filter(|&v| aligned8 && s.program_data && starts_at(v)),
        ];
        values.iter().any(Option::is_some).then_some(WordHit {
            offset: s.offset + at as u64,
            from: here,
            values,
        })
    }
}

/// The indices of the places `flags` marks (1), in order: eight flags read
/// as one word, most of them zero.
fn flagged(flags: &[u8]) -> impl Iterator<Item = usize> + '_ {
    let eights = flags.chunks_exact(8);
    let rest = eights.remainder();
    let last = (!rest.is_empty()).then(|| {
        let mut word = [0u8; 8];
        word[..rest.len()].copy_from_slice(rest);
        word
    });
    eights
        .map(|eight| eight.try_into().unwrap_or_default())
        .chain(last)
        .enumerate()
        .flat_map(|(w, word)| {
            let mut bits = u64::from_le_bytes(word);
            std::iter::from_fn(move || {
                let lane = (bits != 0).then(|| w * 8 + (bits.trailing_zeros() / 8) as usize);
                bits &= bits.wrapping_sub(1);
                lane
            })
        })
}

/// Which stretches of addresses hold one of some values: a bitmap of at
/// most [`Sieve::BITS`] bits from the least value to the greatest, each bit
/// for 64 bytes or more, so that most words are told to name none of the
/// values without a search; before it, one of at most [`Sieve::COARSE`]
/// bits (8 KiB, in the first level cache), so that most are told so
/// without a miss.
struct Sieve {
    lo: u64,
    span: u64,
    coarse: Bitmap,
    fine: Bitmap,
}

impl Sieve {
    const BITS: u64 = 1 << 23;
    const COARSE: u64 = 1 << 16;

    /// The sieve of `values`.
    fn new(values: &[u64]) -> Sieve {
        let (Some(&lo), Some(&hi)) = (values.iter().min(), values.iter().max()) else {
            return Sieve {
                lo: 0,
                span: 0,
                coarse: Bitmap::default(),
                fine: Bitmap::default(),
            };
        };
        let span = hi - lo;
        let offsets: Vec<u64> = values.iter().map(|&v| v - lo).collect();
        Sieve {
            lo,
            span,
            coarse: Bitmap::new(offsets.iter().copied(), span, Self::COARSE),
            fine: Bitmap::new(offsets, span, Self::BITS),
        }
    }

    /// Whether `v` may be one of the values: `false` only where it is not.
    fn may_hold(&self, v: u64) -> bool {
        let d = v.wrapping_sub(self.lo);
        d <= self.span && self.coarse.has(d) && self.fine.has(d)
    }
}

/// Which stretches of offsets from 0 hold one of some: a bit for each
/// `1 << shift` of them.
#[derive(Default)]
struct Bitmap {
    shift: u32,
    bits: Vec<u64>,
}

impl Bitmap {
    /// The bitmap of `offsets` up to `span` (those over it are left out),
    /// of at most `most` bits, each for 64 offsets or more.
    fn new(offsets: impl IntoIterator<Item = u64>, span: u64, most: u64) -> Bitmap {
        let mut shift = 6;
        while span >> shift >= most {
            shift += 1;
        }
        let mut bits = vec![0u64; ((span >> shift) / 64 + 1) as usize];
        for d in offsets.into_iter().filter(|&d| d <= span) {
            let i = d >> shift;
            bits[(i / 64) as usize] |= 1 << (i % 64);
        }
        Bitmap { shift, bits }
    }

    /// Whether the stretch of offset `d` holds one.
    fn has(&self, d: u64) -> bool {
        let i = d >> self.shift;
        self.bits
            .get((i / 64) as usize)
            .is_some_and(|b| b & (1 << (i % 64)) != 0)
    }
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

impl<'d> Scan<'d> {
    /// The scan of `file` for references into the `together` ranges
    /// (`(start, end)`, as [`Scan::references`] takes them), whose code is
    /// read once for all of them.
    pub(crate) fn new(file: File<'d>, together: &[(u64, u64)]) -> Scan<'d> {
        Scan {
            file,
            together: together
                .iter()
                .map(|&(start, end)| Range { start, end })
                .collect(),
            code: OnceCell::new(),
            words: OnceCell::new(),
            memo: RefCell::new(HashMap::new()),
        }
    }

    /// This scan for other ranges asked about together: the code is read
    /// again for them, what it found of single ranges and data words kept.
    pub(crate) fn for_ranges(self, together: &[(u64, u64)]) -> Scan<'d> {
        Scan {
            code: OnceCell::new(),
            together: together
                .iter()
                .map(|&(start, end)| Range { start, end })
                .collect(),
            ..self
        }
    }

    /// The references into `start..=end` (its end included: a pointer to a
    /// section's end is a reference too), skipping data words at the file
    /// offsets `patched` says the patcher rewrites.
    pub(crate) fn references(
        &self,
        start: u64,
        end: u64,
        patched: &dyn Fn(u64) -> bool,
    ) -> Vec<Reference> {
        let f = &self.file;
        let mut found = Vec::new();
        let range = Range { start, end };
        // What symbols and code say is read once per range: a compaction
        // asks again for each plan it tries, and only data words' meaning
        // (what the patcher rewrites) changes between them.
        found.extend(self.memo(usize::MAX, range, || {
            let mut v = Vec::new();
            self.symbols(range, &mut v);
            v
        }));
        for s in f.loaded() {
            if found.len() >= MAX {
                break;
            }
            if s.code {
                found.extend(self.memo(s.index, range, || {
                    let mut v = Vec::new();
                    match f.machine {
                        elf::EM_X86_64 => {
                            v.extend(self.x86_64(s.index, s.bytes, s.addr, range));
                            if let Some(got) = self.got() {
                                x86_64_gotoff(s.bytes, s.addr, got, range, &mut v);
                            }
                        }
                        elf::EM_AARCH64 => aarch64(s.bytes, s.addr, range, &mut v),
                        _ => {}
                    }
                    v
                }));
            } else if f.fixed {
                words(s.bytes, s.addr, s.offset, range, patched, &mut found);
            }
        }
        found.truncate(MAX);
        found
    }

    /// Words that name a moving container bound exactly (`bounds`:
    /// addresses, in order; `starts`: the starts among them) and that no
    /// relocation describes, in the loaded sections but the one that moves.
    /// In a position-dependent file: 8-byte absolute words naming a bound at
    /// any offset of data (packed structures) and at their alignment in
    /// AArch64 code (literal pools), and 4-byte ones naming a start at their
    /// alignment in data (addresses below 4 GiB, the small code model's). In
    /// any file: self-relative words at their alignment in data
    /// (`.long sym - .`, `.quad sym - .`: relative vtables, offset tables),
    /// which the linker resolves with no relocation, naming a start.
    ///
    /// An exact bound, not the whole range: a word that names the middle of
    /// a container names nothing a program uses, and matching whole ranges
    /// (or words of x86 code, whose bytes are as good as random) would take
    /// every file for one with references. Some words match by chance (in
    /// the libraries measured, words of cuBLASLt 12's `.rodata` and of jax's
    /// `xla_cuda_plugin.so` read as a self-relative pointer to a
    /// container's start): the model cannot tell them from references, so
    /// each is taken as one, and the container it names keeps its place
    /// (pinned by the caller) rather than the file its compaction. The
    /// bytes of containers in other sections are not read ([`File::gpu`]):
    /// in NCCL 2.32 and cuSPARSELt 0.8 every such match was one, and pinned
    /// containers for GPU code, which names no host address.
    pub(crate) fn exact_words(
        &self,
        all: (&[u64], &[u64]),
        bounds: &[u64],
        starts: &[u64],
        patched: &dyn Fn(u64) -> bool,
    ) -> Vec<Reference> {
        // What a word names in this plan, if it is taken as a reference.
        let named = |h: &WordHit| {
            if patched(h.offset) {
                return None;
            }
            h.values.iter().enumerate().find_map(|(i, v)| {
                let v = (*v)?;
                let set = if i == 0 { bounds } else { starts };
                set.binary_search(&v).is_ok().then_some(v)
            })
        };
        let reference = |h: &WordHit, to| Reference {
            from: h.from,
            to,
            kind: Kind::Data,
        };
        // The data is read once, for every bound a plan may move (`all`:
        // each container's start and end, and the starts): the compaction
        // tries plan after plan, each pinning what the last one's words
        // named, and only the words' meaning changes from one to the next.
        let (a, s, cached) = self.words.get_or_init(|| {
            let (hits, complete) = self.word_hits(all.0, all.1, None, MAX_WORD_HITS);
            (all.0.to_vec(), all.1.to_vec(), complete.then_some(hits))
        });
        let covers = |sub: &[u64], sup: &[u64]| sub.iter().all(|v| sup.binary_search(v).is_ok());
        match cached {
            Some(hits) if covers(bounds, a) && covers(starts, s) => hits
                .iter()
                .filter_map(|h| Some(reference(h, named(h)?)))
                .take(MAX)
                .collect(),
            // Read for these bounds alone, the first MAX kept.
            _ => {
                let (hits, _) = self.word_hits(bounds, starts, Some(&|h| named(h).is_some()), MAX);
                hits.iter()
                    .filter_map(|h| Some(reference(h, named(h)?)))
                    .collect()
            }
        }
    }

    /// Every place in the loaded sections (but the one that moves) where a
    /// word may name one of `bounds` (addresses, in order) or `starts` (the
    /// starts among them), as [`Scan::exact_words`] reads words, that
    /// `keep` keeps: at most `limit`, and whether that is all of them.
    /// With no `keep`, every place, the chunks of the data read in
    /// parallel.
    fn word_hits(
        &self,
        bounds: &[u64],
        starts: &[u64],
        keep: Option<&dyn Fn(&WordHit) -> bool>,
        limit: usize,
    ) -> (Vec<WordHit>, bool) {
        let Some(words) = Words::new(&self.file, bounds, starts) else {
            return (Vec::new(), true);
        };
        // x86 code's absolute operands are decoded, and its bytes at any
        // offset name anything by chance: only AArch64's literal pools are
        // read in code.
        // A position-independent file has self-relative words only, in
        // program data, at 4-byte alignment at least: only those places
        // are read.
        let (fixed, aarch64) = (self.file.fixed, self.file.machine == elf::EM_AARCH64);
        // The containers among a section's data (cuBLASLt's 162 MB of fat
        // binaries in `.cask_resource`) are passed over.
        let stride = words.stride();
        let chunks: Vec<(Loaded<'_>, usize, usize)> = self
            .file
            .loaded()
            .filter(|s| !s.code || (aarch64 && fixed))
            .filter(|s| fixed || s.program_data)
            .flat_map(|s| {
                self.file.host_data(s).into_iter().flat_map(move |run| {
                    let here = s.addr.wrapping_add(run.start as u64);
                    let first = run.start + here.wrapping_neg() as usize % stride;
                    (first..run.end.max(first))
                        .step_by(WORD_CHUNK)
                        .map(move |at| (s, at, run.end.min(at + WORD_CHUNK)))
                })
            })
            .collect();
        // Every chunk counts what it keeps in `taken`, and stops once the
        // count passes `limit`: at most `limit` are kept in all, and the
        // count says whether that is all of them.
        let taken = AtomicUsize::new(0);
        let found: Vec<WordHit> = match keep {
            None => chunks
                .par_iter()
                .map(|&(s, from, to)| words.read(s, from..to, &|_| true, &taken, limit))
                .flatten_iter()
                .collect(),
            Some(keep) => chunks
                .iter()
                .flat_map(|&(s, from, to)| words.read(s, from..to, keep, &taken, limit))
                .collect(),
        };
        let complete = taken.load(Ordering::Relaxed) <= limit;
        (found, complete)
    }

    /// What `find` finds in section `i` (`usize::MAX`: the symbol tables)
    /// for `range`, found once. Each finding is a prefix of the same
    /// sequence (at most [`MAX`] of it), so taking it whole and truncating
    /// after gives what the first call would.
    fn memo(
        &self,
        i: usize,
        range: Range,
        find: impl FnOnce() -> Vec<Reference>,
    ) -> Vec<Reference> {
        let key = (i, range.start, range.end);
        if let Some(found) = self.memo.borrow().get(&key) {
            return found.clone();
        }
        let found = find();
        self.memo.borrow_mut().insert(key, found.clone());
        found
    }

    /// The references into `range` of section `i`, x86-64 code `bytes` at
    /// `addr`: from the findings for all the ranges asked about together
    /// where it is one of them.
    fn x86_64(&self, i: usize, bytes: &[u8], addr: u64, range: Range) -> Vec<Reference> {
        let asked = self
            .together
            .iter()
            .position(|r| (r.start, r.end) == (range.start, range.end));
        let Some(k) = asked else {
            let mut found = x86_64::references(bytes, addr, self.file.fixed, &[range]);
            return found.swap_remove(0);
        };
        let code = self.code.get_or_init(|| self.x86_64_code());
        code.iter()
            .find(|(s, _)| *s == i)
            .map(|(_, found)| found[k].clone())
            .unwrap_or_default()
    }

    /// The address `_GLOBAL_OFFSET_TABLE_` names on x86-64: the start of
    /// `.got.plt`, or of `.got` where there is no `.got.plt` (what GNU ld,
    /// gold and lld define it as).
    fn got(&self) -> Option<u64> {
        let f = &self.file;
        let names = object::read::elf::FileHeader::section_strings(
            <elf::FileHeader64<LE> as object::read::elf::FileHeader>::parse(f.data).ok()?,
            f.endian,
            f.data,
            f.shdrs,
        )
        .ok()?;
        let find = |name: &[u8]| {
            f.shdrs
                .iter()
                .find(|s| s.name(f.endian, names).ok() == Some(name))
                .map(|s| s.sh_addr(f.endian))
        };
        find(b".got.plt").or_else(|| find(b".got"))
    }

    /// The references of each x86-64 code section into each range asked
    /// about together.
    fn x86_64_code(&self) -> Vec<(usize, Vec<Vec<Reference>>)> {
        let f = &self.file;
        f.loaded()
            .filter(|s| s.code)
            .map(|s| {
                let found = x86_64::references(s.bytes, s.addr, f.fixed, &self.together);
                (s.index, found)
            })
            .collect()
    }

    /// Symbols in the range that are not the section's own (those the
    /// patcher moves): absolute ones, and those of another section whose
    /// value is not at that section's own bounds.
    fn symbols(&self, range: Range, found: &mut Vec<Reference>) {
        let f = &self.file;
        for s in f.shdrs {
            if !matches!(s.sh_type(f.endian), elf::SHT_SYMTAB | elf::SHT_DYNSYM) {
                continue;
            }
            let Ok(syms) = s.data_as_array::<elf::Sym64<LE>, _>(f.endian, f.data) else {
                continue;
            };
            let dynamic = s.sh_type(f.endian) == elf::SHT_DYNSYM;
            for sym in syms {
                let (shndx, value) = (sym.st_shndx(f.endian), sym.st_value(f.endian));
                if dynamic
                    && usize::from(shndx) == f.index
                    && exported(sym)
                    && range.contains(value)
                {
                    found.push(Reference {
                        from: value,
                        to: value,
                        kind: Kind::Exported,
                    });
                    continue;
                }
                if shndx == elf::SHN_UNDEF
                    || usize::from(shndx) == f.index
                    || sym.st_type() == elf::STT_SECTION
                    || sym.st_type() == elf::STT_FILE
                    // A TLS symbol's value is an offset in the TLS
                    // template, not an address (gABI, "Symbol Values";
                    // Drepper, "ELF Handling For Thread-Local Storage").
                    || sym.st_type() == elf::STT_TLS
                    || !range.contains(value)
                {
                    continue;
                }
                // An absolute symbol of a position-independent file is a
                // number, not an address (`_binary_*_size`).
                if shndx == elf::SHN_ABS && !f.fixed {
                    continue;
                }
                let own = f.shdrs.get(usize::from(shndx)).is_some_and(|o| {
                    shndx < elf::SHN_LORESERVE && {
                        let a = o.sh_addr(f.endian);
                        value >= a && value <= a.saturating_add(o.sh_size(f.endian))
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

/// x86-64 code at `addr`: every `movabs $imm64, %reg` (REX.W + B8+r) whose
/// immediate, added to the GOT's address `got`, lands in the range: the
/// large code model's `sym@GOTOFF` (x86-64 psABI, "Large Models":
/// `R_X86_64_GOTOFF64`, resolved at link time, so no relocation is left).
/// Matched by bytes, at every offset: a match that is not an instruction
/// only keeps the section where it is.
fn x86_64_gotoff(bytes: &[u8], addr: u64, got: u64, range: Range, found: &mut Vec<Reference>) {
    // The code in pieces, read in parallel, each finding at most what is
    // reported in all: the first ones, in order, are those of the first
    // pieces.
    let starts: Vec<usize> = (0..bytes.len()).step_by(GOTOFF_CHUNK).collect();
    let per_chunk: Vec<Vec<Reference>> = starts
        .par_iter()
        .map(|&from| {
            let to = bytes.len().min(from + GOTOFF_CHUNK);
            let mut here = Vec::new();
            let mut at = from;
            while at < to && here.len() < MAX {
                // Eight places at once where none can be one.
                if !may_be_movabs(bytes, at) {
                    at += 8;
                    continue;
                }
                for i in at..to.min(at + 8) {
                    let Some(imm) = movabs(bytes, i) else {
                        continue;
                    };
                    let to = got.wrapping_add(imm);
                    if range.contains(to) && here.len() < MAX {
                        here.push(Reference {
                            from: addr.wrapping_add(i as u64),
                            to,
                            kind: Kind::Code,
                        });
                    }
                }
                at += 8;
            }
            here
        })
        .collect();
    let room = MAX.saturating_sub(found.len());
    found.extend(per_chunk.into_iter().flatten().take(room));
}

/// The immediate of the `movabs $imm64, %reg` (REX.W + B8+r, Intel SDM
/// vol. 2, "MOV") at `at`, if those bytes are one.
fn movabs(bytes: &[u8], at: usize) -> Option<u64> {
    let w = bytes.get(at..at + 10)?;
    if w[0] & 0xf8 != 0x48 || w[1] & 0xf8 != 0xb8 {
        return None;
    }
    let imm: [u8; 8] = w[2..].try_into().ok()?;
    Some(u64::from_le_bytes(imm))
}

/// Whether one of the eight places from `at` may start a `movabs` (see
/// [`movabs`]): `false` only where none does. Eight bytes and the eight
/// after them are compared at once (a byte is zero in `x ^ pattern` where
/// it matches; `zeros` marks every zero byte, and some others).
fn may_be_movabs(bytes: &[u8], at: usize) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let (Some(a), Some(b)) = (bytes.get(at..at + 8), bytes.get(at + 1..at + 9)) else {
        return true;
    };
    let word = |b: &[u8]| b.try_into().map(u64::from_le_bytes).unwrap_or(0);
    let zeros = |t: u64| t.wrapping_sub(ONES) & !t & (0x80 * ONES);
    let rex_w = zeros((word(a) & (0xf8 * ONES)) ^ (0x48 * ONES));
    let mov = zeros((word(b) & (0xf8 * ONES)) ^ (0xb8 * ONES));
    rex_w & mov != 0
}

/// The bytes of code [`x86_64_gotoff`] reads as one piece.
const GOTOFF_CHUNK: usize = 4 << 20;

/// Whether another file may bind to `sym`: a global, weak or unique
/// symbol of default or protected visibility (gABI, "Symbol Table": the
/// dynamic linker resolves another object's references to it, each with
/// its own addend, which this file does not show).
fn exported(sym: &elf::Sym64<LE>) -> bool {
    matches!(
        sym.st_bind(),
        elf::STB_GLOBAL | elf::STB_WEAK | elf::STB_GNU_UNIQUE
    ) && matches!(sym.st_visibility(), elf::STV_DEFAULT | elf::STV_PROTECTED)
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
        } else if let Some(value) = movz_chain(&words[i..]) {
            // The large code model's absolute address (AArch64 ELF psABI,
            // "Code models": MOVZ/MOVK with R_AARCH64_MOVW_UABS_G0..G3,
            // resolved at link time).
            (value, Kind::Code)
        } else {
            continue;
        };
        if range.contains(to) {
            found.push(Reference { from: pc, to, kind });
        }
    }
}

/// The value a 64-bit `MOVZ Xd` at `code[0]` and the `MOVK Xd` that follow
/// it (up to three, any order, other instructions not between them) build,
/// when at least one `MOVK` does (a lone `MOVZ` is a constant, not an
/// address). Arm ARM C6.2: MOVZ `0xd2800000`, MOVK `0xf2800000`, `hw` in
/// bits 21..22 (the 16-bit piece's position), `imm16` in bits 5..20.
fn movz_chain(code: &[u32]) -> Option<u64> {
    let (&first, rest) = code.split_first()?;
    if first & 0xff80_0000 != 0xd280_0000 {
        return None;
    }
    let rd = first & 0x1f;
    let piece = |w: u32| u64::from((w >> 5) & 0xffff) << (16 * ((w >> 21) & 3));
    let mut value = piece(first);
    let mut moves = 0;
    for &w in rest.iter().take(3) {
        if w & 0xff80_0000 != 0xf280_0000 || w & 0x1f != rd {
            break;
        }
        let shift = 16 * ((w >> 21) & 3);
        value = (value & !(0xffff << shift)) | piece(w);
        moves += 1;
    }
    (moves > 0).then_some(value)
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

    /// Bytes as good as random (a 64-bit LCG's high bytes), with `every`
    /// n-th place made a REX.W prefix and a B8+r opcode.
    fn noise(len: usize, every: usize) -> Vec<u8> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut bytes: Vec<u8> = (0..len)
            .map(|_| {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (x >> 56) as u8
            })
            .collect();
        for at in (0..len.saturating_sub(1)).step_by(every) {
            bytes[at] = 0x48 | (bytes[at] & 7);
            bytes[at + 1] = 0xb8 | (bytes[at + 1] & 7);
        }
        bytes
    }

    /// The search of eight places at once finds every `movabs` a place by
    /// place reading finds, at every offset, up to the last byte, and
    /// across the pieces read in parallel.
    #[test]
    fn gotoff_finds_what_reading_every_place_finds() {
        for (len, every) in [(64, 7), (1000, 13), (GOTOFF_CHUNK + 4099, 4093), (30, 1)] {
            let bytes = noise(len, every);
            let got = 0x40_0000u64;
            // Every place reads as a `movabs` to somewhere: a range that
            // takes one in about 16 of them (immediates are random).
            let range = Range {
                start: 0,
                end: u64::MAX / 16,
            };
            let naive: Vec<u64> = bytes
                .windows(10)
                .enumerate()
                .filter(|(_, w)| w[0] & 0xf8 == 0x48 && w[1] & 0xf8 == 0xb8)
                .filter(|(i, _)| range.contains(got.wrapping_add(movabs(&bytes, *i).unwrap())))
                .map(|(i, _)| 0x1000 + i as u64)
                .take(MAX)
                .collect();
            let mut found = Vec::new();
            x86_64_gotoff(&bytes, 0x1000, got, range, &mut found);
            let from: Vec<u64> = found.iter().map(|r| r.from).collect();
            assert_eq!(from, naive, "{len} bytes");
            for at in 0..len {
                if movabs(&bytes, at).is_some() {
                    assert!(may_be_movabs(&bytes, at & !7), "{at}");
                }
            }
        }
    }

    /// Reading words a sifted block at a time finds what reading each place
    /// finds: absolute and self-relative words planted at every alignment,
    /// up to the section's last byte, among noise, fixed or not, program
    /// data or not, with a limit that cuts the reading short.
    #[test]
    fn sifted_words_are_those_each_place_names() {
        let addr = 0x40_0000u64;
        let near: Vec<u64> = (0..40).map(|i| addr + 0x2_0000 + i * 0x1_0010).collect();
        // More than 4 GiB away, where only 8-byte words reach (a 4-byte
        // word's low bits name no start), and a span whose low 32 bits are
        // less than the near starts'.
        let far = (0..20).map(|i| addr + 0x1_0000_0000 + 0x10_0000 + i * 0x1_0010);
        let mut wide: Vec<u64> = near.iter().copied().chain(far).collect();
        wide.sort_unstable();
        let ends = |starts: &[u64]| starts.iter().map(|&v| v + 0x800).collect::<Vec<u64>>();
        let both = |starts: &[u64]| {
            let mut b: Vec<u64> = starts.iter().copied().chain(ends(starts)).collect();
            b.sort_unstable();
            b
        };
        // Spans over 4 GiB, under it, and bounds that are not the starts.
        for (starts, bounds) in [
            (wide.clone(), both(&wide)),
            (near.clone(), both(&near)),
            (near.clone(), ends(&near)),
        ] {
            words_read_as_each_place(addr, &starts, &bounds);
        }
    }

    fn words_read_as_each_place(addr: u64, starts: &[u64], bounds: &[u64]) {
        for len in [5, 8, 4096 + 13, 3 * WORD_BLOCK * 4 + 7] {
            let mut bytes = noise(len, 97);
            for (i, at) in (0..len.saturating_sub(7)).step_by(61).enumerate() {
                let here = addr + at as u64;
                let to = starts[i % starts.len()];
                // Each kind of word, and words that only one way of
                // reading them makes a start.
                let word = match (i / 8) % 6 {
                    0 => to,
                    1 => to.wrapping_sub(here),
                    2 => (to.wrapping_sub(here) as u32).into(),
                    3 => bounds[i % bounds.len()],
                    4 => u64::from(to as u32) | 0xa5a5_a5a5 << 32,
                    _ => u64::from(to.wrapping_sub(here) as u32) | 0x5a5a_5a5a << 32,
                };
                bytes[at..at + 8].copy_from_slice(&word.to_le_bytes());
            }
            for fixed in [false, true] {
                for program_data in [true, false] {
                    let words = Words {
                        bounds,
                        starts,
                        near_bound: Sieve::new(bounds),
                        near_start: Sieve::new(starts),
                        fixed,
                    };
                    let section = Loaded {
                        index: 1,
                        bytes: &bytes,
                        addr,
                        offset: 0x1000,
                        code: false,
                        program_data,
                    };
                    let each: Vec<String> = (0..len)
                        .step_by(words.stride())
                        .filter(|&at| words.may_name(section, at))
                        .filter_map(|at| words.place(section, at))
                        .map(|h| format!("{h:?}"))
                        .collect();
                    let read = |limit| -> Vec<String> {
                        let taken = AtomicUsize::new(0);
                        words
                            .read(section, 0..len, &|_| true, &taken, limit)
                            .iter()
                            .map(|h| format!("{h:?}"))
                            .collect()
                    };
                    assert_eq!(read(usize::MAX), each, "{len} {fixed} {program_data}");
                    assert_eq!(read(3), each[..each.len().min(3)], "{len}");
                    if len > 4096 && (fixed || program_data) {
                        assert!(each.len() > 4, "{len} {fixed} {program_data}");
                    }
                }
            }
        }
    }

    /// A section header for the tests: `PROGBITS`, loaded.
    fn progbits(flags: u32, addr: u64, offset: u64, size: u64) -> elf::SectionHeader64<LE> {
        use object::{U32, U64};
        elf::SectionHeader64 {
            sh_name: U32::new(LE, 0),
            sh_type: U32::new(LE, elf::SHT_PROGBITS),
            sh_flags: U64::new(LE, u64::from(elf::SHF_ALLOC | flags)),
            sh_addr: U64::new(LE, addr),
            sh_offset: U64::new(LE, offset),
            sh_size: U64::new(LE, size),
            sh_link: U32::new(LE, 0),
            sh_info: U32::new(LE, 0),
            sh_addralign: U64::new(LE, 8),
            sh_entsize: U64::new(LE, 0),
        }
    }

    /// The runs of a section outside the GPU code: around ranges before
    /// it, inside it, across its ends and after it.
    #[test]
    fn host_data_runs_around_gpu_code() {
        let data = vec![0u8; 0x1000];
        let runs = |gpu: Vec<(u64, u64)>| {
            let file = File {
                data: &data,
                shdrs: &[],
                endian: LE,
                machine: elf::EM_X86_64,
                fixed: false,
                index: 0,
                gpu,
                names: None,
            };
            let s = Loaded {
                index: 1,
                bytes: &data[..300],
                addr: 0x1000,
                offset: 120,
                code: false,
                program_data: true,
            };
            let runs = file.host_data(s);
            runs.into_iter()
                .map(|r| (r.start, r.end))
                .collect::<Vec<_>>()
        };
        assert_eq!(runs(vec![]), [(0, 300)]);
        assert_eq!(runs(vec![(0, 10), (500, 10)]), [(0, 300)]);
        assert_eq!(
            runs(vec![(100, 50), (160, 10), (300, 1000)]),
            [(30, 40), (50, 180)]
        );
        assert_eq!(runs(vec![(120, 300)]), []);
        assert_eq!(runs(vec![(130, 10), (410, 100)]), [(0, 10), (20, 290)]);
    }

    /// The search for data words passes over the containers among the
    /// data: a self-relative word there names nothing; the same word
    /// outside them does.
    #[test]
    fn words_in_gpu_code_are_not_read() {
        let mut data = vec![0u8; 0x3000];
        let shdrs = [
            progbits(0, 0, 0, 0),
            progbits(elf::SHF_WRITE, 0x1_0000, 0x1000, 0x1000),
            progbits(0, 0x2_0000, 0x2000, 0x1000),
        ];
        // At 0x1_0100 (file 0x1100) and 0x1_0840 (file 0x1840, in a
        // container), `.long start - .`.
        let starts = [0x2_0040u64, 0x2_0080];
        for (at, to) in [(0x1100u64, starts[0]), (0x1840, starts[1])] {
            let word = to.wrapping_sub(0x1_0000 + at - 0x1000) as u32;
            data[at as usize..at as usize + 4].copy_from_slice(&word.to_le_bytes());
        }
        let found = |gpu: Vec<(u64, u64)>| -> Vec<u64> {
            let file = File {
                data: &data,
                shdrs: &shdrs,
                endian: LE,
                machine: elf::EM_X86_64,
                fixed: false,
                index: 2,
                gpu,
                names: None,
            };
            let scan = Scan::new(file, &[(0x2_0000, 0x2_1000)]);
            let (hits, complete) = scan.word_hits(&starts, &starts, None, MAX_WORD_HITS);
            assert!(complete);
            hits.iter().map(|h| h.offset).collect()
        };
        assert_eq!(found(vec![]), [0x1100, 0x1840]);
        assert_eq!(found(vec![(0x1800, 0x100)]), [0x1100]);
    }

    /// A `movabs` is found wherever it lies: across the edges of the eight
    /// places looked at at once and of the pieces read in parallel.
    #[test]
    fn gotoff_finds_a_movabs_at_every_edge() {
        let got = 0x40_0000u64;
        let range = Range {
            start: got + 0x1000,
            end: got + 0x1fff,
        };
        let edges = [8, 4096, GOTOFF_CHUNK];
        for at in edges.into_iter().flat_map(|e| [e - 2, e - 1, e, e + 1]) {
            let mut bytes = vec![0x90u8; GOTOFF_CHUNK + 4096];
            // movabs $0x1234, %rax
            bytes[at..at + 10].copy_from_slice(&[0x48, 0xb8, 0x34, 0x12, 0, 0, 0, 0, 0, 0]);
            let mut found = Vec::new();
            x86_64_gotoff(&bytes, 0x1000, got, range, &mut found);
            let from: Vec<u64> = found.iter().map(|r| r.from).collect();
            assert_eq!(from, [0x1000 + at as u64], "{at}");
        }
    }

    /// A sieve holds every value it was made of, and tells most others
    /// apart, wide or narrow.
    #[test]
    fn a_sieve_keeps_its_values() {
        for (values, step) in [
            (vec![5u64], 1u64),
            (vec![0x1000, 0x1040, 0x9_0000_0000], 0x1_0000),
            ((0..1000).map(|i| 0x20_0000 + i * 0x3_1337).collect(), 0x777),
        ] {
            let sieve = Sieve::new(&values);
            assert!(values.iter().all(|&v| sieve.may_hold(v)));
            assert!(sieve.fine.bits.len() as u64 * 64 <= 2 * Sieve::BITS);
            assert!(sieve.coarse.bits.len() as u64 * 64 <= 2 * Sieve::COARSE);
            let (lo, hi) = (values[0], *values.last().unwrap());
            let others = (lo.saturating_sub(1 << 20)..hi + (1 << 20))
                .step_by(step as usize)
                .filter(|v| !values.contains(v));
            let (mut held, mut all) = (0, 0);
            for v in others {
                held += usize::from(sieve.may_hold(v));
                all += 1;
            }
            assert!(held * 4 <= all, "{held} of {all}");
        }
        assert!(!Sieve::new(&[]).may_hold(0));
    }

    #[test]
    fn aarch64_large_model_chains() {
        let range = Range {
            start: 0x12_3456_0000,
            end: 0x12_3457_0000,
        };
        // movz x3, #0x89ab; movk x3, #0x3456, lsl #16; movk x3, #0x12, lsl #32
        let movz = |hw: u32, imm: u32, rd: u32| 0xd280_0000 | hw << 21 | imm << 5 | rd;
        let movk = |hw: u32, imm: u32, rd: u32| 0xf280_0000 | hw << 21 | imm << 5 | rd;
        let chain = [movz(0, 0x89ab, 3), movk(1, 0x3456, 3), movk(2, 0x12, 3)];
        assert_eq!(movz_chain(&chain), Some(0x12_3456_89ab));
        let bytes: Vec<u8> = chain.iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut found = Vec::new();
        aarch64(&bytes, 0x1000, range, &mut found);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].from, found[0].to), (0x1000, 0x12_3456_89ab));
        // Another register's MOVK ends the chain; a lone MOVZ is a constant.
        assert_eq!(movz_chain(&[movz(0, 1, 3), movk(1, 2, 4)]), None);
        assert_eq!(movz_chain(&[movz(1, 0x3456, 3)]), None);
    }

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
}
