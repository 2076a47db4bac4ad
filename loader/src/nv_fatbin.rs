//! NVIDIA fat binaries (`0xBA55ED50`; sections `.nv_fatbin`, `__nv_relfatbin`).
//!
//! NVIDIA does not document the format. The layout below is where the public
//! reverse-engineered readers agree: ZLUDA (`cuda_types` `FatbinHeader` /
//! `FatbinFileHeader`, `dark_api/src/fatbin.rs`), n-eiling/cuda-fatbin-decompression
//! (`fat_elf_header`, `fat_text_header`), jiegec/fatbinary
//! (`FatBinaryEntryHeader`) and GrigoryEvko/nvopen-tools (`fatbin/FORMAT_SPECIFICATION.md`,
//! from cuobjdump). All integers are little-endian; nothing is aligned.
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
//! | 0 | u16 kind: 1 PTX, 2 ELF (cubin); cuobjdump knows others ⚠️ |
//! | 2 | u16 entry version, `0x0101` |
//! | 4 | u32 entry header size: 64 for ELF, more for PTX and some sm_100+ entries |
//! | 8 | u64 payload size as stored, padded (to 8): the next entry starts at header + this |
//! | 16 | u32 payload size before padding (the compressed size when compressed) ⚠️ |
//! | 20 | u32 offset of PTX options (ptxas arguments), 0 for ELF |
//! | 24 | u16 minor, u16 major: the code version (PTX ISA version for PTX) |
//! | 28 | u32 SM, e.g. 90 |
//! | 32 | u32 object name offset, u32 object name length (from the entry start) |
//! | 40 | u64 flags, see [`flags`] |
//! | 48 | u64 0 |
//! | 56 | u64 uncompressed size (compressed entries) |
//!
//! The payload starts at the entry start + entry header size. Compressed
//! payloads use NVIDIA's own schemes (an LZ4-style block for flag 0x2000, zstd
//! for 0x8000); they are listed, never extracted.
//!
//! ⚠️ Not yet checked against a real `nvcc` fat binary here (no CUDA toolkit on
//! this machine). No source shows the entry header recording the `a`/`f`
//! variants, so entries report `sm_XY`; a cubin's own ELF header does record
//! `a` (see [`crate::image::cubin`]).

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
/// cuda-fatbin-decompression, nvopen-tools).
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
    /// `CompressedOld`, inflating it as zlib) ⚠️.
    pub const COMPRESSED_OLD: u64 = 0x1000;
    /// Compressed with NVIDIA's LZ4-style block format (ZLUDA inflates it with LZ4).
    pub const COMPRESSED_LZ4: u64 = 0x2000;
    /// Compressed with zstd (newer `nvcc`; the payload starts with the zstd magic).
    pub const COMPRESSED_ZSTD: u64 = 0x8000;
    /// Every flag that marks a compressed payload.
    pub const COMPRESSED: u64 = COMPRESSED_OLD | COMPRESSED_LZ4 | COMPRESSED_ZSTD;
}

/// Entry kinds (entry offset 0).
pub mod kind {
    /// PTX text (NUL-terminated, padded).
    pub const PTX: u16 = 1;
    /// An ELF cubin.
    pub const ELF: u16 = 2;
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

/// One entry of a fat binary. Offsets are from the fat binary's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Offset of the entry header.
    pub header_offset: u64,
    /// What it holds, see [`kind`]: PTX, cubin or other (nvopen-tools reports
    /// 0x10 and 0x40 in CUDA 13 libraries).
    pub kind: u16,
    /// Entry header version (offset 2), `0x0101` in every known file.
    pub entry_version: u16,
    /// Entry header size (offset 4), at least [`MIN_ENTRY_HEADER`].
    pub header_size: u32,
    /// The SM the entry was built for (offset 28), e.g. 90.
    pub sm: u32,
    /// Code version (offsets 26 and 24): (major, minor); the PTX ISA version for PTX.
    pub code_version: (u16, u16),
    /// Flags (offset 40), see [`flags`].
    pub flags: u64,
    /// Offset of the payload: the entry header offset + its size.
    pub offset: u64,
    /// Bytes reserved for the payload (offset 8, padded); the next entry
    /// starts at `offset + stored_size`.
    pub stored_size: u64,
    /// Bytes of payload data: the size at offset 16 when it is non-zero and
    /// fits in `stored_size` (the compressed size for compressed entries),
    /// else `stored_size`.
    pub size: u64,
    /// Uncompressed size (offset 56), for compressed entries.
    pub uncompressed_size: Option<u64>,
}

impl Entry {
    /// How the payload is compressed.
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

    /// Whether the payload is compressed (NVIDIA's schemes: not extracted here).
    pub fn is_compressed(&self) -> bool {
        self.flags & flags::COMPRESSED != 0
    }

    /// Whether the code uses 64-bit addresses ([`flags::IS_64BIT`]).
    pub fn is_64bit(&self) -> bool {
        self.flags & flags::IS_64BIT != 0
    }

    /// The architecture, `sm_XY` (entries do not record `a` or `f`), if the SM is valid.
    pub fn arch(&self) -> Option<NvArch> {
        ComputeCapability::from_sm(self.sm).map(|capability| NvArch {
            capability,
            variant: ArchVariant::Base,
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
    /// taken as padding.
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
                return Err(Error::new(
                    at,
                    ErrorKind::TooLarge {
                        what: "NVIDIA fat binary entry count",
                        value: entries.len() as u64 + 1,
                        limit: limits.max_entries,
                    },
                ));
            }
            let entry = read_entry(body, at)?;
            at = entry.offset + entry.stored_size;
            entries.push(entry);
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

    /// The entries, in order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The payload of entry `index`: its `size` bytes for a stored entry
    /// (PTX keeps its NUL padding); an error for a compressed one.
    pub fn payload(&self, index: usize) -> Result<&'a [u8]> {
        let e = self.entries.get(index).ok_or(Error::new(
            0,
            ErrorKind::BadValue {
                what: "fat binary entry index",
                value: index as u64,
            },
        ))?;
        if e.is_compressed() {
            return Err(Error::new(
                e.header_offset + 40,
                ErrorKind::Malformed {
                    what: "NVIDIA fat binary entry",
                    why: "compressed entry not supported",
                },
            ));
        }
        Bytes(self.data).slice(e.offset, e.size, "fat binary entry payload")
    }
}

/// The entry whose header starts at `at` in `body` (the whole fat binary).
fn read_entry(body: Bytes<'_>, at: u64) -> Result<Entry> {
    let field = |off: u64| at + off;
    body.slice(at, MIN_ENTRY_HEADER, "fat binary entry header")?;
    let kind = body.u16(field(0), "fat binary entry kind")?;
    let header_size = body.u32(field(4), "fat binary entry header size")?;
    if u64::from(header_size) < MIN_ENTRY_HEADER {
        return Err(Error::new(
            field(4),
            ErrorKind::BadValue {
                what: "fat binary entry header size (at least 64)",
                value: header_size.into(),
            },
        ));
    }
    let stored_size = body.u64(field(8), "fat binary entry payload size")?;
    let offset = at + u64::from(header_size);
    body.slice(offset, stored_size, "fat binary entry payload")
        .map_err(|e| Error::new(field(8), e.kind))?;
    let data_size = u64::from(body.u32(field(16), "fat binary entry data size")?);
    let flags = body.u64(field(40), "fat binary entry flags")?;
    let mut entry = Entry {
        header_offset: at,
        kind,
        entry_version: body.u16(field(2), "fat binary entry version")?,
        header_size,
        sm: body.u32(field(28), "fat binary entry SM")?,
        code_version: (
            body.u16(field(26), "fat binary entry code version")?,
            body.u16(field(24), "fat binary entry code version")?,
        ),
        flags,
        offset,
        stored_size,
        size: if data_size > 0 && data_size <= stored_size {
            data_size
        } else {
            stored_size
        },
        uncompressed_size: None,
    };
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
        entry.uncompressed_size = Some(body.u64(field(56), "fat binary uncompressed size")?);
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

    /// A fat binary of an sm_80 cubin, sm_90 PTX (with a 72-byte entry
    /// header) and a zstd-compressed sm_100 entry.
    pub(crate) fn sample() -> Vec<u8> {
        let mut zstd = E::new(2, 100, 0x8011, b"\x28\xb5\x2f\xfdzz");
        zstd.uncompressed = 4096;
        let mut ptx = E::new(1, 90, 0x11, PTX);
        ptx.header = 72;
        fatbin(&[
            E::new(2, 80, 0x11, CUBIN).bytes(),
            ptx.bytes(),
            zstd.bytes(),
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
        assert_eq!((e[0].size, e[0].stored_size), (CUBIN.len() as u64, 16));
        assert_eq!(e[0].code_version, (8, 0));
        assert!(e[0].is_64bit() && !e[0].is_compressed());
        assert_eq!(f.payload(0).unwrap(), CUBIN);
        assert_eq!(e[1].header_offset, 16 + 64 + 16);
        assert_eq!(e[1].offset, e[1].header_offset + 72);
        assert_eq!(f.payload(1).unwrap(), PTX);
        assert_eq!(e[2].compression(), Compression::Zstd);
        assert_eq!(e[2].uncompressed_size, Some(4096));
        let err = f.payload(2).unwrap_err();
        assert_eq!(
            err.kind.to_string(),
            "NVIDIA fat binary entry: compressed entry not supported"
        );
        assert_eq!(err.offset, e[2].header_offset + 40);
        assert!(f.payload(3).is_err());
        assert_eq!(e[2].arch().unwrap().to_string(), "sm_100");
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
}
