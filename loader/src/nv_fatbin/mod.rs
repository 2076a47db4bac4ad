//! NVIDIA fat binaries (`0xBA55ED50`; sections `.nv_fatbin`, `__nv_relfatbin`).
//!
//! NVIDIA does not document the format. The layout below is where the public
//! reverse-engineered readers agree: ZLUDA (`cuda_types` `FatbinHeader` /
//! `FatbinFileHeader`, `dark_api/src/fatbin.rs`), n-eiling/cuda-fatbin-decompression
//! (`fat_elf_header`, `fat_text_header`), jiegec/fatbinary
//! (`FatBinaryEntryHeader`) and GrigoryEvko/nvopen-tools (`fatbin/FORMAT_SPECIFICATION.md`,
//! from cuobjdump); every field used here was checked on files written by CUDA
//! 13.5 `nvcc`/`fatbinary` (and on CUDA 11, 12 and 13 libraries) against what
//! `cuobjdump` 13.4 lists and extracts. All integers are little-endian; nothing
//! is aligned.
//!
//! Container header, 16 bytes (CUDA's `fatBinaryHeader`):
//!
//! | offset | field |
//! |---|---|
//! | 0 | u32 magic `0xBA55ED50` |
//! | 4 | u16 version, 1 |
//! | 6 | u16 header size, 16: the first entry starts here |
//! | 8 | u64 size of everything after the header |
//!
//! Entries follow back to back, each a header and its payload:
//!
//! | offset | field |
//! |---|---|
//! | 0 | u16 kind: 1 PTX, 2 ELF (cubin), 0x100 a `--concat` group ([`kind`]) |
//! | 2 | u16 entry version, `0x0101` |
//! | 4 | u32 entry header size: 64, or more with a block after the fixed 64 bytes (PTX, sm_100+, groups) |
//! | 8 | u64 payload size as stored, padded (to 8): the next entry starts at header + this |
//! | 16 | u32 compressed size (0 when not compressed) |
//! | 20 | u32 offset of the block after the fixed fields (64), 0 when there is none |
//! | 24 | u16 minor, u16 major: the code version (1.8 for ELF, the PTX ISA for PTX) |
//! | 28 | u32 SM, e.g. 90 (0 for a group) |
//! | 32 | u32 object name offset, u32 object name length (from the entry start) |
//! | 40 | u64 flags, see [`flags`]: the `a`/`f` variant is recorded only here |
//! | 48 | u64 0 |
//! | 56 | u64 exact uncompressed size (compressed entries; 0 otherwise) |
//!
//! The payload starts at the entry start + entry header size. A compressed
//! payload is a zstd frame (flag 0x8000, `nvcc`'s default) or one raw LZ4 block
//! (flag 0x2000, `--compress-mode=speed`) that inflates to exactly the size at
//! offset 56; a stored payload is followed by NUL padding. The exact size of a
//! stored cubin is its ELF's extent (the end of its furthest header table or
//! section), of stored PTX its text and one NUL: what `cuobjdump -xelf` writes,
//! and what `cuobjdump -xptx` writes plus the NUL the driver needs.
//!
//! An entry whose u32 at 20 is not 0 has a block there (64 in every file
//! seen, 72 after an object name): u32 offset and u32 length, from the entry
//! start, of a NUL-terminated options string (`ptxas` options for PTX, a
//! binary record for sm_100+ cubins); the entry header ends at the first
//! 8-byte boundary after that NUL. Checked against the header size of every
//! such entry CUDA 13.5 `nvcc` wrote for sm_100a/103f/110/120 cubins and PTX
//! with `-G`, `-lineinfo`, `-maxrregcount`, `-Xptxas` options and object names.
//!
//! A `--concat` group (kind 0x100, SM 0) holds several entries in one
//! compressed payload: after the fixed 64 header bytes come u32 count, u32
//! table length (from the count on: 8 + the member headers), then `count`
//! entry headers back to back, each with its own kind, SM and flags, whose u32
//! at 4 is the member's offset in the inflated payload and whose u64 at 8 is
//! its padded size there. A member header has no size field: it is 64 bytes,
//! or ends after its options block as above (sm_100+ cubins, where nvcc puts
//! them in a later group of their own). The members' headers must fill the
//! table exactly. Members are listed as entries of their own
//! ([`Entry::group`]); reading one inflates the group.
use std::borrow::Cow;
use std::io::Read;

/// Writing fat binaries with fewer entries ([`write::keep()`]): behind the `write` feature.
#[cfg(feature = "write")]
pub mod write;

use crate::error::{Error, ErrorKind, Result};
use crate::limits::Limits;
use crate::magic;
use crate::read::Bytes;
use crate::target::{ArchVariant, ComputeCapability, NvArch};

/// The only container version known (`FATBIN_VERSION`).
pub const VERSION: u16 = 1;
/// Size of the container header and the smallest header size accepted.
pub const HEADER_LEN: u64 = 16;
/// The smallest entry header: the 64 bytes of fields every entry has.
pub const MIN_ENTRY_HEADER: u64 = 64;

/// Entry flags at entry offset 40 (ZLUDA `FatbinFileHeaderFlags`, jiegec/fatbinary,
/// cuda-fatbin-decompression, nvopen-tools; the compression and variant bits
/// checked against CUDA 13.5 `nvcc` output and `cuobjdump` 13.4).
pub mod flags {
    /// Compiled for 64-bit addresses.
    pub const IS_64BIT: u64 = 0x1;
    /// Carries debug information.
    pub const DEBUG: u64 = 0x2;
    /// Produced by the CUDA toolchain.
    pub const PRODUCER_CUDA: u64 = 0x4;
    /// Produced by the OpenCL toolchain.
    pub const PRODUCER_OPENCL: u64 = 0x8;
    /// Built on Linux.
    pub const HOST_LINUX: u64 = 0x10;
    /// Built on macOS.
    pub const HOST_MAC: u64 = 0x20;
    /// Built on Windows.
    pub const HOST_WINDOWS: u64 = 0x40;
    /// Compressed with an older scheme (one ZLUDA version calls it
    /// `CompressedOld`) ⚠️: listed, never inflated.
    pub const COMPRESSED_OLD: u64 = 0x1000;
    /// The payload is one raw LZ4 block (`nvcc --compress-mode=speed`).
    pub const COMPRESSED_LZ4: u64 = 0x2000;
    /// The payload is a zstd frame (`nvcc`'s default compression).
    pub const COMPRESSED_ZSTD: u64 = 0x8000;
    /// Every flag that marks a compressed payload.
    pub const COMPRESSED: u64 = COMPRESSED_OLD | COMPRESSED_LZ4 | COMPRESSED_ZSTD;
    /// Arch-specific code: `sm_90a`, `compute_90a` (the cubin's ELF says so
    /// too; the entry header only here).
    pub const ARCH_SPECIFIC: u64 = 0x10_0000;
    /// Family-specific code: `sm_100f` (recorded nowhere else: the cubin's
    /// `e_flags` are those of `sm_100`, and `cuobjdump -lelf` prints `sm_100`).
    pub const FAMILY_SPECIFIC: u64 = 0x20_0000;
}

/// Entry kinds (entry offset 0).
pub mod kind {
    /// PTX text (NUL-terminated, padded).
    pub const PTX: u16 = 1;
    /// An ELF cubin.
    pub const ELF: u16 = 2;
    /// A `nvcc --concat` group: member entries in one compressed payload.
    pub const CONCAT: u16 = 0x100;
}

/// How an entry's payload is compressed (entry flags, see [`flags`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    /// Stored as is.
    None,
    /// [`flags::COMPRESSED_LZ4`].
    Lz4,
    /// [`flags::COMPRESSED_ZSTD`].
    Zstd,
    /// [`flags::COMPRESSED_OLD`].
    Old,
}

impl Compression {
    /// The name used in reports: `none`, `lz4`, `zstd`, `nvidia-old`.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
            Compression::Old => "nvidia-old",
        }
    }
}

/// One entry of a fat binary. Offsets are from the fat binary's start, except
/// for members of a `--concat` group ([`Entry::group`]), whose `offset` is in
/// the group's inflated payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Offset of the entry header (for a group member: of its header in the
    /// group's table).
    pub header_offset: u64,
    /// What it holds, see [`kind`]: PTX, cubin, a group or other (nvopen-tools
    /// reports 0x10 and 0x40 in CUDA 13 libraries).
    pub kind: u16,
    /// Entry header version (offset 2), `0x0101` in every known file.
    pub entry_version: u16,
    /// Entry header size (offset 4), at least [`MIN_ENTRY_HEADER`].
    pub header_size: u32,
    /// The SM the entry was built for (offset 28), e.g. 90.
    pub sm: u32,
    /// Code version (offsets 26 and 24): (major, minor); the PTX ISA version for PTX.
    pub code_version: (u16, u16),
    /// Flags (offset 40), see [`flags`]. A group member inherits its group's
    /// compression: the member itself is stored plainly in the inflated payload.
    pub flags: u64,
    /// Offset of the payload: the entry header offset + its size.
    pub offset: u64,
    /// Bytes reserved for the payload (offset 8, padded); the next entry
    /// starts at `offset + stored_size`.
    pub stored_size: u64,
    /// Bytes of payload data as stored: the compressed size (offset 16) for a
    /// compressed entry, the exact size for a stored one.
    pub size: u64,
    /// The exact size of the code (what `cuobjdump` extracts; for PTX, with its
    /// NUL): offset 56 for a compressed entry, measured from the payload for a
    /// stored one; `None` for a group member until its group is inflated.
    pub exact_size: Option<u64>,
    /// Uncompressed size (offset 56), for compressed entries.
    pub uncompressed_size: Option<u64>,
    /// For a member of a `--concat` group: the index of the group's entry.
    pub group: Option<usize>,
}

impl Entry {
    /// How the payload is compressed (for a group member: how its group is).
    pub fn compression(&self) -> Compression {
        if self.flags & flags::COMPRESSED_ZSTD != 0 {
            Compression::Zstd
        } else if self.flags & flags::COMPRESSED_LZ4 != 0 {
            Compression::Lz4
        } else if self.flags & flags::COMPRESSED_OLD != 0 {
            Compression::Old
        } else {
            Compression::None
        }
    }

    /// Whether the payload is compressed.
    pub fn is_compressed(&self) -> bool {
        self.flags & flags::COMPRESSED != 0
    }

    /// Whether the code uses 64-bit addresses ([`flags::IS_64BIT`]).
    pub fn is_64bit(&self) -> bool {
        self.flags & flags::IS_64BIT != 0
    }

    /// The variant, from [`flags::ARCH_SPECIFIC`] / [`flags::FAMILY_SPECIFIC`].
    pub fn variant(&self) -> ArchVariant {
        if self.flags & flags::ARCH_SPECIFIC != 0 {
            ArchVariant::ArchSpecific
        } else if self.flags & flags::FAMILY_SPECIFIC != 0 {
            ArchVariant::FamilySpecific
        } else {
            ArchVariant::Base
        }
    }

    /// The architecture with its variant (`sm_90a`, `sm_100f`), if the SM is valid.
    pub fn arch(&self) -> Option<NvArch> {
        ComputeCapability::from_sm(self.sm).map(|capability| NvArch {
            capability,
            variant: self.variant(),
        })
    }
}

/// A parsed fat binary, borrowing its bytes.
#[derive(Debug, Clone)]
pub struct NvFatbin<'a> {
    data: &'a [u8],
    entries: Vec<Entry>,
}

impl<'a> NvFatbin<'a> {
    /// Parses the fat binary at the start of `data` (which may continue with
    /// other data: [`NvFatbin::len`] says where this one ends).
    ///
    /// Every entry must lie inside the size the header states; each entry
    /// advances by at least [`MIN_ENTRY_HEADER`] bytes, so the number of
    /// entries is bounded by the input. Zero bytes after the last entry
    /// (fewer than an entry header, or an all-zero kind and header size) are
    /// taken as padding. A `--concat` group's member table is read from its
    /// header; nothing is inflated.
    pub fn parse(data: &'a [u8], limits: &Limits) -> Result<NvFatbin<'a>> {
        let b = Bytes(data);
        if !data.starts_with(magic::NV_FATBIN) {
            return Err(Error::new(
                0,
                ErrorKind::BadMagic {
                    what: "NVIDIA fat binary",
                },
            ));
        }
        let version = b.u16(4, "NVIDIA fat binary version")?;
        if version != VERSION {
            return Err(Error::new(
                4,
                ErrorKind::UnsupportedVersion {
                    what: "NVIDIA fat binary",
                    version: version.into(),
                },
            ));
        }
        let header_len = u64::from(b.u16(6, "NVIDIA fat binary header size")?);
        if header_len < HEADER_LEN {
            return Err(Error::new(
                6,
                ErrorKind::BadValue {
                    what: "NVIDIA fat binary header size (at least 16)",
                    value: header_len,
                },
            ));
        }
        let size = b.u64(8, "NVIDIA fat binary size")?;
        let total = header_len.checked_add(size).ok_or(Error::new(
            8,
            ErrorKind::TooLarge {
                what: "NVIDIA fat binary size",
                value: size,
                limit: b.len(),
            },
        ))?;
        let body = Bytes(
            b.slice(0, total, "NVIDIA fat binary")
                .map_err(|e| Error::new(8, e.kind))?,
        );
        let mut entries = Vec::new();
        let mut at = header_len;
        while at < total {
            let rest = body.slice(at, total - at, "fat binary entries")?;
            let padding = rest.len() < MIN_ENTRY_HEADER as usize || rest.starts_with(&[0; 8]);
            if padding && rest.iter().all(|&x| x == 0) {
                break;
            }
            if entries.len() as u64 >= limits.max_entries {
                return Err(too_many(at, entries.len(), limits));
            }
            let entry = read_entry(body, at)?;
            at = entry.offset + entry.stored_size;
            let group = entries.len();
            entries.push(entry);
            if entry.kind == kind::CONCAT {
                read_group(body, &entry, group, limits, &mut entries)?;
            }
        }
        Ok(NvFatbin {
            data: body.0,
            entries,
        })
    }

    /// Bytes the fat binary occupies: the header size plus the size it states.
    pub fn len(&self) -> u64 {
        self.data.len() as u64
    }

    /// Whether it has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries, in order; a group's members follow the group's entry.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Entry `index` as stored, its header and payload (compressed or not),
    /// or `None` for a member of a `--concat` group, which has no bytes of
    /// its own.
    pub fn stored(&self, index: usize) -> Option<&'a [u8]> {
        let e = self.entries.get(index).filter(|e| e.group.is_none())?;
        let end = e.offset.checked_add(e.stored_size)?;
        self.data
            .get(usize::try_from(e.header_offset).ok()?..usize::try_from(end).ok()?)
    }

    fn entry(&self, index: usize) -> Result<&Entry> {
        self.entries.get(index).ok_or(Error::new(
            0,
            ErrorKind::BadValue {
                what: "fat binary entry index",
                value: index as u64,
            },
        ))
    }

    /// The payload of entry `index` as stored: its `size` bytes (the exact
    /// code of a stored entry); an error for a compressed one or a group member.
    pub fn payload(&self, index: usize) -> Result<&'a [u8]> {
        let e = self.entry(index)?;
        if e.is_compressed() || e.group.is_some() {
            return Err(Error::new(
                e.header_offset + 40,
                ErrorKind::Malformed {
                    what: "NVIDIA fat binary entry",
                    why: "compressed entry: inflate it with NvFatbin::code",
                },
            ));
        }
        Bytes(self.data).slice(e.offset, e.size, "fat binary entry payload")
    }

    /// The code of entry `index`, exactly as `cuobjdump -xelf` / `-xptx` writes
    /// it (PTX with its NUL): borrowed when stored, inflated otherwise, and for
    /// a group member its slice of the inflated group. Only this entry (or its
    /// group) is inflated; the size the header declares is a hard limit (and
    /// must be within `limits.max_uncompressed`), and inflating to any other
    /// size is an error.
    pub fn code(&self, index: usize, limits: &Limits) -> Result<Cow<'a, [u8]>> {
        let e = *self.entry(index)?;
        // Checked first: a member of a group that declares itself a group
        // (a fuzzer's find) is not code either.
        if e.kind == kind::CONCAT {
            return Err(Error::new(
                e.header_offset,
                ErrorKind::Malformed {
                    what: "NVIDIA fat binary entry",
                    why: "a concat group is not code: read its members",
                },
            ));
        }
        if let Some(group) = e.group {
            let blob = self.inflate(self.entry(group)?, limits)?;
            let padded = Bytes(&blob)
                .slice(e.offset, e.stored_size, "concat group member")
                .map_err(|err| Error::new(e.header_offset + 4, err.kind))?;
            let exact = exact_len(e.kind, padded) as usize;
            return Ok(Cow::Owned(padded[..exact].to_vec()));
        }
        if !e.is_compressed() {
            return self.payload(index).map(Cow::Borrowed);
        }
        self.inflate(&e, limits).map(Cow::Owned)
    }

    /// Inflates a compressed entry's payload to exactly its declared size.
    fn inflate(&self, e: &Entry, limits: &Limits) -> Result<Vec<u8>> {
        let declared = e.uncompressed_size.unwrap_or(0);
        if declared > limits.max_uncompressed {
            return Err(Error::new(
                e.header_offset + 56,
                ErrorKind::TooLarge {
                    what: "fat binary entry uncompressed size",
                    value: declared,
                    limit: limits.max_uncompressed,
                },
            ));
        }
        let src = Bytes(self.data).slice(e.offset, e.size, "fat binary entry payload")?;
        let fail = |method: &'static str, message: String| {
            Error::new(e.offset, ErrorKind::Decompress { method, message })
        };
        let out = match e.compression() {
            Compression::None => return Ok(src.to_vec()),
            Compression::Zstd => {
                let mut out = Vec::new();
                zstd::stream::read::Decoder::with_buffer(src)
                    .and_then(|mut d| {
                        // No valid frame needs a window beyond what it inflates
                        // to; a hostile header would otherwise reserve 2 GiB.
                        d.window_log_max(window_log(declared))?;
                        d.take(declared + 1).read_to_end(&mut out)
                    })
                    .map_err(|err| fail("zstd", err.to_string()))?;
                out
            }
            Compression::Lz4 => {
                // An LZ4 block expands at most about 255-fold (a match length
                // byte per 255 bytes of output): a larger declared size is a
                // lie, refused before its buffer is allocated.
                let most = (src.len() as u64).saturating_mul(255).saturating_add(64);
                if declared > most {
                    return Err(fail(
                        "lz4",
                        format!(
                            "the entry declares {declared} bytes, more than a {}-byte block can hold",
                            src.len()
                        ),
                    ));
                }
                let mut out = vec![0u8; declared as usize];
                let n = lz4_flex::block::decompress_into(src, &mut out)
                    .map_err(|err| fail("lz4", err.to_string()))?;
                out.truncate(n);
                out
            }
            Compression::Old => {
                return Err(Error::new(
                    e.header_offset + 40,
                    ErrorKind::Malformed {
                        what: "NVIDIA fat binary entry",
                        why: "compressed with flag 0x1000, a scheme not supported",
                    },
                ))
            }
        };
        if out.len() as u64 != declared {
            let method = e.compression().name();
            return Err(fail(
                method,
                format!(
                    "produced {}{} bytes, the entry declares {declared}",
                    if out.len() as u64 > declared {
                        "more than "
                    } else {
                        ""
                    },
                    out.len().min(declared as usize)
                ),
            ));
        }
        Ok(out)
    }
}

/// The zstd window (log2) enough for a frame inflating to `size` bytes.
fn window_log(size: u64) -> u32 {
    (64 - size.max(1).leading_zeros()).clamp(10, 31)
}

/// The exact length of the code in `padded` (a stored payload with its NUL
/// padding): for a cubin the extent of its ELF, for PTX its text and one NUL;
/// `padded.len()` when it cannot tell.
fn exact_len(kind: u16, padded: &[u8]) -> u64 {
    let len = padded.len() as u64;
    match kind {
        kind::ELF => elf_extent(padded).filter(|&n| n <= len).unwrap_or(len),
        kind::PTX => {
            let text = padded.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1) as u64;
            (text + 1).min(len)
        }
        _ => len,
    }
}

/// Where a little-endian ELF64 file ends: the furthest end of its header
/// tables and of its sections that occupy file space.
fn elf_extent(data: &[u8]) -> Option<u64> {
    let b = Bytes(data);
    if !data.starts_with(b"\x7fELF\x02\x01") {
        return None;
    }
    let phoff = b.u64(0x20, "").ok()?;
    let shoff = b.u64(0x28, "").ok()?;
    let phentsize = u64::from(b.u16(0x36, "").ok()?);
    let phnum = u64::from(b.u16(0x38, "").ok()?);
    let shentsize = u64::from(b.u16(0x3a, "").ok()?);
    let shnum = u64::from(b.u16(0x3c, "").ok()?);
    let mut end = 64u64;
    end = end.max(phoff.checked_add(phentsize.checked_mul(phnum)?)?);
    end = end.max(shoff.checked_add(shentsize.checked_mul(shnum)?)?);
    if shentsize >= 64 {
        for i in 0..shnum {
            let at = shoff + i * shentsize;
            const SHT_NOBITS: u32 = 8;
            if b.u32(at + 4, "").ok()? == SHT_NOBITS {
                continue;
            }
            let offset = b.u64(at + 24, "").ok()?;
            let size = b.u64(at + 32, "").ok()?;
            end = end.max(offset.checked_add(size)?);
        }
    }
    Some(end)
}

/// The fixed 64 header bytes at `at`, common to entries and group members.
fn read_fields(body: Bytes<'_>, at: u64) -> Result<Entry> {
    let field = |off: u64| at + off;
    body.slice(at, MIN_ENTRY_HEADER, "fat binary entry header")?;
    Ok(Entry {
        header_offset: at,
        kind: body.u16(field(0), "fat binary entry kind")?,
        entry_version: body.u16(field(2), "fat binary entry version")?,
        header_size: body.u32(field(4), "fat binary entry header size")?,
        sm: body.u32(field(28), "fat binary entry SM")?,
        code_version: (
            body.u16(field(26), "fat binary entry code version")?,
            body.u16(field(24), "fat binary entry code version")?,
        ),
        flags: body.u64(field(40), "fat binary entry flags")?,
        offset: 0,
        stored_size: body.u64(field(8), "fat binary entry payload size")?,
        size: 0,
        exact_size: None,
        uncompressed_size: None,
        group: None,
    })
}

/// The error for entry `n + 1` (at `at`) past [`Limits::max_entries`].
fn too_many(at: u64, n: usize, limits: &Limits) -> Error {
    Error::new(
        at,
        ErrorKind::TooLarge {
            what: "NVIDIA fat binary entry count",
            value: n as u64 + 1,
            limit: limits.max_entries,
        },
    )
}

/// Reads the member table of the `--concat` group `g` (entry `group`) into
/// `entries`: `count` headers, back to back, that fill the table exactly.
fn read_group(
    body: Bytes<'_>,
    g: &Entry,
    group: usize,
    limits: &Limits,
    entries: &mut Vec<Entry>,
) -> Result<()> {
    let count_at = g.header_offset + MIN_ENTRY_HEADER;
    let count = body.u32(count_at, "concat group member count")?;
    let table_len = u64::from(body.u32(count_at + 4, "concat group table length")?);
    let table_end = count_at + table_len;
    if table_len < 8 || table_end > g.offset {
        return Err(Error::new(
            count_at + 4,
            ErrorKind::OutOfBounds {
                what: "concat group member table",
                start: count_at,
                size: table_len,
                len: g.offset,
            },
        ));
    }
    let mut at = count_at + 8;
    for _ in 0..count {
        if entries.len() as u64 >= limits.max_entries {
            return Err(too_many(count_at, entries.len(), limits));
        }
        let len = member_header_len(body, at, table_end)?;
        entries.push(read_member(body, at, group, g)?);
        at += len;
    }
    if at != table_end {
        return Err(Error::new(
            count_at + 4,
            ErrorKind::Malformed {
                what: "concat group member table",
                why: "its member headers do not fill the length it states",
            },
        ));
    }
    Ok(())
}

/// The length of the member header at `at`, which must end by `table_end`:
/// 64 bytes, or up to the 8-byte boundary after its options string (see the
/// module docs).
fn member_header_len(body: Bytes<'_>, at: u64, table_end: u64) -> Result<u64> {
    let outside = |start: u64, size: u64| {
        Error::new(
            at,
            ErrorKind::OutOfBounds {
                what: "concat group member header",
                start,
                size,
                len: table_end,
            },
        )
    };
    if at + MIN_ENTRY_HEADER > table_end {
        return Err(outside(at, MIN_ENTRY_HEADER));
    }
    let block = u64::from(body.u32(at + 20, "concat group member options block")?);
    if block == 0 {
        return Ok(MIN_ENTRY_HEADER);
    }
    if block < MIN_ENTRY_HEADER || at + block + 8 > table_end {
        return Err(outside(at + block, 8));
    }
    let offset = u64::from(body.u32(at + block, "concat group member options offset")?);
    let size = u64::from(body.u32(at + block + 4, "concat group member options size")?);
    // The string and its NUL, then padding to 8.
    let end = (offset + size + 1).next_multiple_of(8);
    if offset < block + 8 || at + end > table_end {
        return Err(outside(at + offset, size + 1));
    }
    Ok(end)
}

/// A member of the `--concat` group `group` (entry `g`), its header at `at`.
fn read_member(body: Bytes<'_>, at: u64, group: usize, g: &Entry) -> Result<Entry> {
    let mut m = read_fields(body, at)?;
    // The u32 at 4 is the member's offset in the inflated payload.
    m.offset = u64::from(m.header_size);
    m.header_size = 0;
    let declared = g.uncompressed_size.unwrap_or(g.size);
    if !matches!(m.offset.checked_add(m.stored_size), Some(end) if end <= declared) {
        return Err(Error::new(
            at + 4,
            ErrorKind::OutOfBounds {
                what: "concat group member",
                start: m.offset,
                size: m.stored_size,
                len: declared,
            },
        ));
    }
    m.size = m.stored_size;
    m.flags = (m.flags & !flags::COMPRESSED) | (g.flags & flags::COMPRESSED);
    m.group = Some(group);
    Ok(m)
}

/// The entry whose header starts at `at` in `body` (the whole fat binary).
fn read_entry(body: Bytes<'_>, at: u64) -> Result<Entry> {
    let field = |off: u64| at + off;
    let mut entry = read_fields(body, at)?;
    let header_size = entry.header_size;
    if u64::from(header_size) < MIN_ENTRY_HEADER {
        return Err(Error::new(
            field(4),
            ErrorKind::BadValue {
                what: "fat binary entry header size (at least 64)",
                value: header_size.into(),
            },
        ));
    }
    let stored_size = entry.stored_size;
    let offset = at + u64::from(header_size);
    let stored = body
        .slice(offset, stored_size, "fat binary entry payload")
        .map_err(|e| Error::new(field(8), e.kind))?;
    let data_size = u64::from(body.u32(field(16), "fat binary entry data size")?);
    entry.offset = offset;
    if entry.is_compressed() {
        if data_size > stored_size {
            return Err(Error::new(
                field(16),
                ErrorKind::OutOfBounds {
                    what: "fat binary compressed payload",
                    start: offset,
                    size: data_size,
                    len: offset + stored_size,
                },
            ));
        }
        entry.size = if data_size > 0 {
            data_size
        } else {
            stored_size
        };
        let declared = body.u64(field(56), "fat binary uncompressed size")?;
        entry.uncompressed_size = Some(declared);
        entry.exact_size = (entry.kind != kind::CONCAT).then_some(declared);
    } else {
        let exact = exact_len(entry.kind, stored);
        entry.size = exact;
        entry.exact_size = Some(exact);
    }
    Ok(entry)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An entry laid out as documented above.
    struct E<'p> {
        kind: u16,
        sm: u32,
        flags: u64,
        header: u32,
        payload: &'p [u8],
        data_size: Option<u32>,
        uncompressed: u64,
    }

    impl E<'_> {
        fn new(kind: u16, sm: u32, flags: u64, payload: &[u8]) -> E<'_> {
            E {
                kind,
                sm,
                flags,
                header: 64,
                payload,
                data_size: None,
                uncompressed: 0,
            }
        }

        fn bytes(&self) -> Vec<u8> {
            let padded = self.payload.len().next_multiple_of(8);
            let mut e = self.kind.to_le_bytes().to_vec();
            e.extend(0x0101u16.to_le_bytes());
            e.extend(self.header.to_le_bytes());
            e.extend((padded as u64).to_le_bytes());
            let data = self.data_size.unwrap_or(self.payload.len() as u32);
            e.extend(data.to_le_bytes());
            e.extend(if self.kind == 1 { 64u32 } else { 0 }.to_le_bytes());
            e.extend(0u16.to_le_bytes()); // minor
            e.extend(8u16.to_le_bytes()); // major
            e.extend(self.sm.to_le_bytes());
            e.extend([0u8; 8]); // object name offset, length
            e.extend(self.flags.to_le_bytes());
            e.extend([0u8; 8]);
            e.extend(self.uncompressed.to_le_bytes());
            e.resize(self.header as usize, 0);
            e.extend(self.payload);
            e.resize(self.header as usize + padded, 0);
            e
        }
    }

    fn fatbin(entries: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = entries.concat();
        let mut f = magic::NV_FATBIN.to_vec();
        f.extend(VERSION.to_le_bytes());
        f.extend(16u16.to_le_bytes());
        f.extend((body.len() as u64).to_le_bytes());
        f.extend(body);
        f
    }

    const CUBIN: &[u8] = b"\x7fELF\x02\x01\x01cubin";
    const PTX: &[u8] = b".version 8.0\n.target sm_90\n\0";

    /// A 122-byte ELF64 whose furthest part is its program header table.
    pub(crate) fn elf122() -> Vec<u8> {
        let mut h = vec![0u8; 122];
        h[..7].copy_from_slice(b"\x7fELF\x02\x01\x01");
        h[18..20].copy_from_slice(&190u16.to_le_bytes());
        h[0x20..0x28].copy_from_slice(&66u64.to_le_bytes());
        h[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        h[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        h[120] = 0xcc;
        h
    }

    fn zstd_entry(kind: u16, sm: u32, flags: u64, code: &[u8]) -> Vec<u8> {
        let z = zstd::bulk::compress(code, 3).unwrap();
        let mut e = E::new(kind, sm, flags | flags::COMPRESSED_ZSTD, &z);
        e.uncompressed = code.len() as u64;
        e.bytes()
    }

    /// A fat binary of an sm_80 cubin, sm_90 PTX (with a 72-byte entry
    /// header) and a zstd-compressed sm_100 cubin.
    pub(crate) fn sample() -> Vec<u8> {
        let mut ptx = E::new(1, 90, 0x11, PTX);
        ptx.header = 72;
        fatbin(&[
            E::new(2, 80, 0x11, &elf122()).bytes(),
            ptx.bytes(),
            zstd_entry(2, 100, 0x11, &elf122()),
        ])
    }

    #[test]
    fn lists_and_extracts() {
        let mut data = sample();
        let len = data.len();
        data.extend(b"next container");
        let f = NvFatbin::parse(&data, &Limits::default()).unwrap();
        assert_eq!(f.len(), len as u64);
        let e = f.entries();
        assert_eq!(e.len(), 3);
        assert_eq!((e[0].kind, e[0].sm, e[0].offset), (kind::ELF, 80, 16 + 64));
        // The exact size is the ELF's extent, without the padding to 8.
        assert_eq!((e[0].size, e[0].stored_size), (122, 128));
        assert_eq!(e[0].exact_size, Some(122));
        assert_eq!(e[0].code_version, (8, 0));
        assert!(e[0].is_64bit() && !e[0].is_compressed());
        assert_eq!(f.payload(0).unwrap(), elf122());
        assert_eq!(e[1].header_offset, 16 + 64 + 128);
        assert_eq!(e[1].offset, e[1].header_offset + 72);
        assert_eq!(f.payload(1).unwrap(), PTX);
        assert_eq!(e[1].exact_size, Some(PTX.len() as u64));
        assert_eq!(e[2].compression(), Compression::Zstd);
        assert_eq!(e[2].uncompressed_size, Some(122));
        let err = f.payload(2).unwrap_err();
        assert_eq!(err.offset, e[2].header_offset + 40);
        let code = f.code(2, &Limits::default()).unwrap();
        assert_eq!(&code[..], &elf122()[..]);
        assert!(matches!(
            f.code(0, &Limits::default()).unwrap(),
            Cow::Borrowed(_)
        ));
        assert!(f.payload(3).is_err() && f.code(3, &Limits::default()).is_err());
        assert_eq!(e[2].arch().unwrap().to_string(), "sm_100");
    }

    #[test]
    fn variants_come_from_the_entry_flags() {
        let arch = |flags| {
            let f = fatbin(&[E::new(2, 100, flags, b"x").bytes()]);
            let p = NvFatbin::parse(&f, &Limits::default()).unwrap();
            p.entries()[0].arch().unwrap().to_string()
        };
        // Flags of CUDA 13.5 nvcc's sm_100, sm_100a and sm_100f cubins.
        assert_eq!(arch(0x0100_0011), "sm_100");
        assert_eq!(arch(0x0110_0011), "sm_100a");
        assert_eq!(arch(0x0120_0011), "sm_100f");
    }

    #[test]
    fn lz4_and_zstd_inflate_to_exactly_the_declared_size() {
        let code = elf122();
        let lz = lz4_flex::block::compress(&code);
        let mut e = E::new(2, 80, 0x2011, &lz);
        e.uncompressed = code.len() as u64;
        let f = fatbin(&[e.bytes()]);
        let p = NvFatbin::parse(&f, &Limits::default()).unwrap();
        assert_eq!(p.entries()[0].compression(), Compression::Lz4);
        assert_eq!(&p.code(0, &Limits::default()).unwrap()[..], &code[..]);
        // Declared one byte short or long: an error, never a longer buffer.
        for declared in [code.len() as u64 - 1, code.len() as u64 + 1] {
            e.uncompressed = declared;
            let f = fatbin(&[e.bytes()]);
            let p = NvFatbin::parse(&f, &Limits::default()).unwrap();
            let err = p.code(0, &Limits::default()).unwrap_err();
            assert!(matches!(err.kind, ErrorKind::Decompress { .. }), "{err}");
        }
        let z = zstd::bulk::compress(&code, 3).unwrap();
        for declared in [code.len() as u64 - 1, code.len() as u64 + 1] {
            let mut e = E::new(2, 80, 0x8011, &z);
            e.uncompressed = declared;
            let f = fatbin(&[e.bytes()]);
            let p = NvFatbin::parse(&f, &Limits::default()).unwrap();
            let err = p.code(0, &Limits::default()).unwrap_err();
            assert!(matches!(err.kind, ErrorKind::Decompress { .. }), "{err}");
        }
        // A declared size past the limit is refused before inflating.
        let f = fatbin(&[zstd_entry(2, 80, 0x11, &code)]);
        let p = NvFatbin::parse(&f, &Limits::default()).unwrap();
        let tight = Limits {
            max_uncompressed: 100,
            ..Limits::default()
        };
        let err = p.code(0, &tight).unwrap_err();
        assert!(matches!(err.kind, ErrorKind::TooLarge { .. }), "{err}");
        assert_eq!(err.offset, 16 + 56);
        // An LZ4 entry declaring more than its block can hold: refused before
        // allocating (4 GiB here).
        let mut e = E::new(2, 80, 0x2011, &lz);
        e.uncompressed = 4 << 30;
        let f = fatbin(&[e.bytes()]);
        let err = NvFatbin::parse(&f, &Limits::default())
            .unwrap()
            .code(0, &Limits::default())
            .unwrap_err();
        assert!(err.to_string().contains("more than a"), "{err}");
        // Garbage payloads are errors.
        let mut e = E::new(2, 80, 0x8011, b"\x28\xb5\x2f\xfdzz");
        e.uncompressed = 4096;
        let f = fatbin(&[e.bytes()]);
        assert!(NvFatbin::parse(&f, &Limits::default())
            .unwrap()
            .code(0, &Limits::default())
            .is_err());
    }

    /// A `--concat` group (kind 0x100) of an sm_80 cubin and an sm_90a one,
    /// laid out as CUDA 13.5 `nvcc --concat` writes it.
    pub(crate) fn concat_group() -> Vec<u8> {
        let cubin = elf122();
        let mut blob = cubin.clone();
        blob.resize(128, 0);
        blob.extend(&cubin);
        blob.resize(256, 0);
        let z = zstd::bulk::compress(&blob, 3).unwrap();
        let mut table = 2u32.to_le_bytes().to_vec();
        table.extend(136u32.to_le_bytes());
        for (offset, sm, flags) in [(0u32, 80u32, 0x11u64), (128, 90, 0x10_0011)] {
            let mut m = E::new(2, sm, flags, b"").bytes();
            m[4..8].copy_from_slice(&offset.to_le_bytes());
            m[8..16].copy_from_slice(&128u64.to_le_bytes());
            m[16..20].copy_from_slice(&0u32.to_le_bytes());
            table.extend(m);
        }
        let mut g = E::new(kind::CONCAT, 0, 0x8011, &z);
        g.header = 64 + table.len() as u32;
        g.uncompressed = blob.len() as u64;
        let mut bytes = g.bytes();
        bytes[64..64 + table.len()].copy_from_slice(&table);
        fatbin(&[bytes])
    }

    #[test]
    fn concat_groups_list_their_members_and_inflate_once_read() {
        let f = concat_group();
        let p = NvFatbin::parse(&f, &Limits::default()).unwrap();
        let e = p.entries();
        assert_eq!(e.len(), 3);
        assert_eq!((e[0].kind, e[0].sm), (kind::CONCAT, 0));
        assert_eq!((e[1].group, e[1].sm, e[1].offset), (Some(0), 80, 0));
        assert_eq!(e[2].arch().unwrap().to_string(), "sm_90a");
        assert!(e[1].is_compressed() && e[1].exact_size.is_none());
        assert_eq!(&p.code(2, &Limits::default()).unwrap()[..], &elf122()[..]);
        assert!(p.code(0, &Limits::default()).is_err());
        assert!(p.payload(1).is_err());
        // A member past the inflated payload, or a count past the header.
        let mut bad = f.clone();
        bad[16 + 72 + 64 + 4..16 + 72 + 64 + 8].copy_from_slice(&200u32.to_le_bytes());
        assert!(NvFatbin::parse(&bad, &Limits::default()).is_err());
        let mut bad = f.clone();
        bad[16 + 64..16 + 68].copy_from_slice(&3u32.to_le_bytes());
        assert!(NvFatbin::parse(&bad, &Limits::default()).is_err());
        let mut bad = f.clone();
        bad[16 + 64..16 + 68].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(NvFatbin::parse(&bad, &Limits::default()).is_err());
    }

    /// nvcc's 8-target `--concat` fat binary (see the fuzz corpus README):
    /// the second group's three member headers carry an options block, so
    /// they are 120 bytes apart, not 64.
    #[test]
    fn concat_member_headers_with_an_options_block() {
        let f = include_bytes!("../../../fuzz/corpus/nv_fatbin/nvcc13-concat8");
        let p = NvFatbin::parse(f, &Limits::default()).unwrap();
        let listed: Vec<(String, Option<usize>)> = p
            .entries()
            .iter()
            .map(|e| (e.arch().map_or("group".into(), |a| a.to_string()), e.group))
            .collect();
        let want = [
            ("sm_90", None),
            ("group", None),
            ("sm_75", Some(1)),
            ("sm_80", Some(1)),
            ("sm_86", Some(1)),
            ("sm_90a", Some(1)),
            ("group", None),
            ("sm_100a", Some(6)),
            ("sm_100f", Some(6)),
            ("sm_120", Some(6)),
        ];
        let want: Vec<(String, Option<usize>)> =
            want.iter().map(|(a, g)| (a.to_string(), *g)).collect();
        assert_eq!(listed, want);
        let headers: Vec<u64> = p.entries()[7..].iter().map(|e| e.header_offset).collect();
        assert_eq!(headers, [0x898, 0x910, 0x988]);
        for i in 7..10 {
            let code = p.code(i, &Limits::default()).unwrap();
            assert!(code.starts_with(b"\x7fELF"), "member {i}");
        }
        // An options string that runs past the table, and a table whose
        // member headers do not fill it, are errors.
        let mut bad = f.to_vec();
        bad[0x898 + 68..0x898 + 72].copy_from_slice(&400u32.to_le_bytes());
        let err = NvFatbin::parse(&bad, &Limits::default()).unwrap_err();
        assert!(
            err.to_string().contains("concat group member header"),
            "{err}"
        );
        let mut bad = f.to_vec();
        bad[0x890..0x894].copy_from_slice(&2u32.to_le_bytes());
        let err = NvFatbin::parse(&bad, &Limits::default()).unwrap_err();
        assert!(err.to_string().contains("do not fill"), "{err}");
    }

    #[test]
    fn compression_flags_and_other_kinds() {
        let flags_of = |flags| {
            let f = fatbin(&[E::new(2, 80, flags, b"x").bytes()]);
            let p = NvFatbin::parse(&f, &Limits::default()).unwrap();
            (p.entries()[0].compression(), p.payload(0).is_ok())
        };
        assert_eq!(flags_of(0x11), (Compression::None, true));
        assert_eq!(flags_of(0x2011), (Compression::Lz4, false));
        assert_eq!(flags_of(0x8011), (Compression::Zstd, false));
        assert_eq!(flags_of(0x1011), (Compression::Old, false));
        let f = fatbin(&[E::new(0x10, 100, 1, b"x").bytes()]);
        let p = NvFatbin::parse(&f, &Limits::default()).unwrap();
        assert_eq!(p.entries()[0].kind, 0x10);
        // An unpadded-size field of 0 or too big falls back to the stored size.
        let mut e = E::new(2, 80, 1, b"abc");
        e.data_size = Some(0);
        let f = fatbin(&[e.bytes()]);
        assert_eq!(
            NvFatbin::parse(&f, &Limits::default())
                .unwrap()
                .payload(0)
                .unwrap(),
            b"abc\0\0\0\0\0"
        );
        // A compressed size past the stored payload is an error.
        let mut e = E::new(2, 80, 0x2001, b"abc");
        e.data_size = Some(9);
        let f = fatbin(&[e.bytes()]);
        assert_eq!(
            NvFatbin::parse(&f, &Limits::default()).unwrap_err().offset,
            16 + 16
        );
    }

    #[test]
    fn empty_and_padded() {
        let f = fatbin(&[]);
        assert!(NvFatbin::parse(&f, &Limits::default()).unwrap().is_empty());
        let mut entries = vec![E::new(2, 80, 1, CUBIN).bytes()];
        entries.push(vec![0u8; 72]);
        let p = fatbin(&entries);
        assert_eq!(
            NvFatbin::parse(&p, &Limits::default())
                .unwrap()
                .entries()
                .len(),
            1
        );
        let mut entries = vec![E::new(2, 80, 1, CUBIN).bytes()];
        entries.push(vec![0u8; 8]);
        let p = fatbin(&entries);
        assert_eq!(
            NvFatbin::parse(&p, &Limits::default())
                .unwrap()
                .entries()
                .len(),
            1
        );
        // Trailing bytes that are not zero are an error.
        let mut entries = vec![E::new(2, 80, 1, CUBIN).bytes()];
        entries.push(vec![1u8; 8]);
        assert!(NvFatbin::parse(&fatbin(&entries), &Limits::default()).is_err());
    }

    #[test]
    fn rejects_bad_headers_and_sizes() {
        let data = fatbin(&[E::new(2, 80, 1, b"x").bytes()]);
        for cut in 0..data.len() {
            assert!(
                NvFatbin::parse(&data[..cut], &Limits::default()).is_err(),
                "{cut}"
            );
        }
        let set = |at: usize, bytes: &[u8]| {
            let mut d = data.clone();
            d[at..at + bytes.len()].copy_from_slice(bytes);
            NvFatbin::parse(&d, &Limits::default())
                .map(|_| ())
                .unwrap_err()
        };
        assert!(matches!(
            set(0, b"\0\0\0\0").kind,
            ErrorKind::BadMagic { .. }
        ));
        assert!(matches!(
            set(4, &2u16.to_le_bytes()).kind,
            ErrorKind::UnsupportedVersion { .. }
        ));
        assert_eq!(set(6, &8u16.to_le_bytes()).offset, 6);
        assert_eq!(set(8, &u64::MAX.to_le_bytes()).offset, 8);
        assert_eq!(set(8, &(1u64 << 40).to_le_bytes()).offset, 8);
        // Entry header size 0 (no progress) and below the minimum.
        assert_eq!(set(16 + 4, &0u32.to_le_bytes()).offset, 16 + 4);
        assert_eq!(set(16 + 4, &63u32.to_le_bytes()).offset, 16 + 4);
        // Entry header size or payload size past the container.
        assert_eq!(set(16 + 4, &1000u32.to_le_bytes()).offset, 16 + 8);
        assert_eq!(set(16 + 8, &u64::MAX.to_le_bytes()).offset, 16 + 8);
        assert_eq!(set(16 + 8, &16u64.to_le_bytes()).offset, 16 + 8);
    }

    #[test]
    fn zero_sizes_always_advance() {
        // Entries with empty payloads: each still takes its 64-byte header.
        let entries: Vec<Vec<u8>> = (0..100).map(|_| E::new(1, 75, 1, b"").bytes()).collect();
        let f = fatbin(&entries);
        let p = NvFatbin::parse(&f, &Limits::default()).unwrap();
        assert_eq!(p.entries().len(), 100);
        assert_eq!(p.payload(99).unwrap(), b"");
    }

    #[test]
    fn never_panics_on_noise() {
        let base = fatbin(&[
            E::new(2, 80, 0x11, CUBIN).bytes(),
            E::new(1, 90, 0x2011, PTX).bytes(),
        ]);
        let mut x = 0x9e37_79b9u32;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let mut d = base.clone();
            let at = 4 + (x as usize % (d.len() - 4));
            d[at] = (x >> 8) as u8;
            if let Ok(f) = NvFatbin::parse(&d, &Limits::default()) {
                assert!(f.len() <= d.len() as u64);
                for i in 0..f.entries().len() {
                    let _ = f.payload(i);
                }
            }
        }
    }

    #[test]
    fn a_group_member_that_declares_a_group_is_not_code() {
        // A fuzzer's find (fuzz/regressions/README.md).
        let data = include_bytes!(
            "../../../fuzz/regressions/nv_fatbin_code/crash-group-member-declared-a-group"
        );
        let limits = Limits {
            max_uncompressed: 1 << 20,
            ..Limits::default()
        };
        if let Ok(f) = NvFatbin::parse(data, &limits) {
            for (i, e) in f.entries().iter().enumerate() {
                if e.kind == kind::CONCAT {
                    assert!(f.code(i, &limits).is_err());
                }
            }
        }
    }
}
