//! LLVM offload binaries (magic `10 FF 10 AD`, section `.llvm.offloading`).
//!
//! Layout (llvm/include/llvm/Object/OffloadBinary.h, llvm/lib/Object/OffloadBinary.cpp),
//! little-endian, offsets absolute from the binary's start:
//!
//! - Header, 32 bytes: magic\[4\], u32 version, u64 total size, u64 entries offset,
//!   then u64 entries size (v1, always one 40-byte entry) or u64 entry count (v2).
//! - Entry, 40 bytes: u16 image kind, u16 offload kind, u32 flags, u64 string-map
//!   offset, u64 string count, u64 image offset, u64 image size.
//! - String entry: v1 16 bytes (u64 key offset, u64 value offset; NUL-terminated),
//!   v2 24 bytes (adds u64 value size, so values may hold NULs).
//!
//! LLVM 22 writes and reads only v1; v2 is LLVM 23's. Several binaries may sit
//! back to back in one section, each starting at an 8-byte boundary.

use crate::error::{Error, ErrorKind, Result};
use crate::limits::Limits;
use crate::magic;
use crate::read::{utf8, Bytes};
use crate::target::{Arch, OffloadKind, Triple};

/// Writing offload binaries ([`write::write()`], [`write::keep()`]): behind the `write` feature.
#[cfg(feature = "write")]
pub mod write;

const HEADER_LEN: u64 = 32;
const ENTRY_LEN: u64 = 40;

/// Image kinds (`ImageKind` in llvm/Object/OffloadBinary.h, `IMG_*`).
pub mod image_kind {
    /// `IMG_None`: not stated.
    pub const NONE: u16 = 0;
    /// `IMG_Object`: an object file (an AMDGPU code object, an ELF).
    pub const OBJECT: u16 = 1;
    /// `IMG_Bitcode`: LLVM bitcode.
    pub const BITCODE: u16 = 2;
    /// `IMG_Cubin`: a CUDA cubin.
    pub const CUBIN: u16 = 3;
    /// `IMG_Fatbinary`: an NVIDIA fat binary.
    pub const FATBINARY: u16 = 4;
    /// `IMG_PTX`: PTX text.
    pub const PTX: u16 = 5;
    /// `IMG_SPIRV`: SPIR-V.
    pub const SPIRV: u16 = 6;

    /// The name `llvm-objdump --offloading` prints for `kind`
    /// (OffloadBinary.cpp `getImageKindName`).
    pub fn name(kind: u16) -> &'static str {
        match kind {
            OBJECT => "elf",
            BITCODE => "llvm ir",
            CUBIN => "cubin",
            FATBINARY => "fatbinary",
            PTX => "ptx",
            SPIRV => "spir-v",
            _ => "none",
        }
    }
}

/// One offload binary, borrowing its bytes.
#[derive(Debug, Clone)]
pub struct OffloadBinary<'a> {
    /// Format version (1 or 2).
    pub version: u32,
    len: u64,
    entries: Vec<OffloadEntry<'a>>,
}

/// One image of an offload binary with its string map.
#[derive(Debug, Clone)]
pub struct OffloadEntry<'a> {
    /// The image kind, see [`image_kind`].
    pub image_kind: u16,
    /// The offload kind (a bit set: 1 OpenMP, 2 CUDA, 4 HIP, 8 SYCL).
    pub offload_kind: OffloadKind,
    /// The offload kind's bits as stored.
    pub offload_kind_bits: u16,
    /// Flags (unused by LLVM 22).
    pub flags: u32,
    /// The string map, in stored order (`triple`, `arch`, `producer`, ...).
    pub strings: Vec<(&'a str, &'a str)>,
    /// Offset of the image from the binary's start.
    pub image_offset: u64,
    /// The image bytes.
    pub image: &'a [u8],
}

impl<'a> OffloadEntry<'a> {
    /// The value of `key` in the string map.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.strings
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
    }

    /// The `triple` string, parsed.
    pub fn triple(&self) -> Triple {
        Triple::parse(self.get("triple").unwrap_or_default())
    }

    /// The `arch` string parsed against the triple's vendor.
    pub fn arch(&self) -> Arch {
        Arch::parse(
            self.triple().gpu_vendor(),
            self.get("arch").unwrap_or_default(),
        )
    }
}

impl<'a> OffloadBinary<'a> {
    /// Parses the binary at the start of `data`; bytes past its total size are
    /// left alone (see [`OffloadBinary::len`]).
    pub fn parse(data: &'a [u8], limits: &Limits) -> Result<OffloadBinary<'a>> {
        let all = Bytes(data);
        if !data.starts_with(magic::OFFLOAD_BINARY) {
            return Err(Error::new(
                0,
                ErrorKind::BadMagic {
                    what: "offload binary",
                },
            ));
        }
        let version = all.u32(4, "offload binary version")?;
        if !(1..=2).contains(&version) {
            return Err(Error::new(
                4,
                ErrorKind::UnsupportedVersion {
                    what: "offload binary",
                    version: version.into(),
                },
            ));
        }
        let len = all.u64(8, "offload binary size")?;
        if len < HEADER_LEN {
            return Err(Error::new(
                8,
                ErrorKind::Malformed {
                    what: "offload binary size",
                    why: "smaller than the header",
                },
            ));
        }
        let b = Bytes(
            all.slice(0, len, "offload binary")
                .map_err(|e| Error::new(8, e.kind))?,
        );
        let entries_offset = b.u64(16, "offload binary entries offset")?;
        let count = if version == 1 {
            let size = b.u64(24, "offload binary entries size")?;
            if size != ENTRY_LEN {
                return Err(Error::new(
                    24,
                    ErrorKind::BadValue {
                        what: "offload binary v1 entry size (must be 40)",
                        value: size,
                    },
                ));
            }
            1
        } else {
            b.u64(24, "offload binary entry count")?
        };
        let max = (len / ENTRY_LEN).min(limits.max_entries);
        if count > max {
            return Err(Error::new(
                24,
                ErrorKind::TooLarge {
                    what: "offload binary entry count",
                    value: count,
                    limit: max,
                },
            ));
        }
        b.slice(entries_offset, count * ENTRY_LEN, "offload binary entries")
            .map_err(|e| Error::new(16, e.kind))?;
        // Entries may share one string map: the records of all entries
        // together are bounded by what the binary could hold, so memory stays
        // linear in the input (a shared map read per entry was quadratic).
        let mut strings_left = len / if version == 1 { 16 } else { 24 };
        let entries = (0..count)
            .map(|i| {
                parse_entry(
                    b,
                    version,
                    entries_offset + i * ENTRY_LEN,
                    &mut strings_left,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(OffloadBinary {
            version,
            len,
            entries,
        })
    }

    /// The binary's total size, from its header.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the binary holds no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries (one for v1).
    pub fn entries(&self) -> &[OffloadEntry<'a>] {
        &self.entries
    }
}

fn parse_entry<'a>(
    b: Bytes<'a>,
    version: u32,
    at: u64,
    strings_left: &mut u64,
) -> Result<OffloadEntry<'a>> {
    let image_kind = b.u16(at, "image kind")?;
    let offload_kind_bits = b.u16(at + 2, "offload kind")?;
    let offload_kind = OffloadKind::from_bits(offload_kind_bits);
    let flags = b.u32(at + 4, "flags")?;
    let strings_offset = b.u64(at + 8, "string map offset")?;
    let string_count = b.u64(at + 16, "string count")?;
    let image_offset = b.u64(at + 24, "image offset")?;
    let image_size = b.u64(at + 32, "image size")?;
    let image = b
        .slice(image_offset, image_size, "offload binary image")
        .map_err(|e| Error::new(at + 24, e.kind))?;
    let record = if version == 1 { 16 } else { 24 };
    if string_count > *strings_left {
        return Err(Error::new(
            at + 16,
            ErrorKind::TooLarge {
                what: "offload binary string count (all entries together)",
                value: string_count,
                limit: *strings_left,
            },
        ));
    }
    *strings_left -= string_count;
    b.slice(strings_offset, string_count * record, "string map")
        .map_err(|e| Error::new(at + 8, e.kind))?;
    let strings = (0..string_count)
        .map(|i| {
            let s = strings_offset + i * record;
            let key = b.c_str(b.u64(s, "string key offset")?, "string key")?;
            let value_offset = b.u64(s + 8, "string value offset")?;
            let value = if version == 1 {
                b.c_str(value_offset, "string value")?
            } else {
                let size = b.u64(s + 16, "string value size")?;
                utf8(
                    b.slice(value_offset, size, "string value")?,
                    value_offset,
                    "string value",
                )?
            };
            Ok((key, value))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(OffloadEntry {
        image_kind,
        offload_kind,
        offload_kind_bits,
        flags,
        strings,
        image_offset,
        image,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds a v1 offload binary the way `OffloadBinary::write` lays it out:
    /// header, entry, string entries, string table, image (aligned to 8).
    pub(crate) fn build_v1(
        kind: u16,
        offload: u16,
        strings: &[(&str, &str)],
        image: &[u8],
    ) -> Vec<u8> {
        let strings_at = 32 + 40;
        let table_at = strings_at + 16 * strings.len();
        let mut table = vec![];
        let mut offsets = vec![];
        for (k, v) in strings {
            let ko = table_at + table.len();
            table.extend(k.as_bytes());
            table.push(0);
            let vo = table_at + table.len();
            table.extend(v.as_bytes());
            table.push(0);
            offsets.push((ko as u64, vo as u64));
        }
        let image_at = (table_at + table.len()).next_multiple_of(8);
        let total = (image_at + image.len()).next_multiple_of(8);
        let mut out = magic::OFFLOAD_BINARY.to_vec();
        out.extend(1u32.to_le_bytes());
        out.extend((total as u64).to_le_bytes());
        out.extend(32u64.to_le_bytes());
        out.extend(40u64.to_le_bytes());
        out.extend(kind.to_le_bytes());
        out.extend(offload.to_le_bytes());
        out.extend(0u32.to_le_bytes());
        out.extend((strings_at as u64).to_le_bytes());
        out.extend((strings.len() as u64).to_le_bytes());
        out.extend((image_at as u64).to_le_bytes());
        out.extend((image.len() as u64).to_le_bytes());
        for (k, v) in offsets {
            out.extend(k.to_le_bytes());
            out.extend(v.to_le_bytes());
        }
        out.extend(table);
        out.resize(image_at, 0);
        out.extend(image);
        out.resize(total, 0);
        out
    }

    #[test]
    fn parses_v1() {
        let data = build_v1(
            1,
            1,
            &[("triple", "amdgcn-amd-amdhsa"), ("arch", "gfx90a:xnack+")],
            b"\x7fELF..",
        );
        let bin = OffloadBinary::parse(&data, &Limits::default()).unwrap();
        assert_eq!(bin.len(), data.len() as u64);
        let e = &bin.entries()[0];
        assert_eq!(e.image_kind, image_kind::OBJECT);
        assert_eq!(e.offload_kind, OffloadKind::OpenMp);
        assert_eq!(e.image, b"\x7fELF..");
        assert_eq!(e.arch().to_string(), "gfx90a:xnack+");
    }

    /// Builds a v2 binary (LLVM 23): an entry count at 24, and 24-byte string
    /// entries with a value size, here two entries sharing the string table.
    fn build_v2(images: &[(&str, &[u8])]) -> Vec<u8> {
        let entries_at = 32u64;
        let strings_at = entries_at + 40 * images.len() as u64;
        let table_at = strings_at + 24 * 2 * images.len() as u64;
        let mut table = b"triple\0amdgcn-amd-amdhsa\0arch\0".to_vec();
        let arch_offsets: Vec<u64> = images
            .iter()
            .map(|(arch, _)| {
                let at = table_at + table.len() as u64;
                table.extend(arch.as_bytes());
                table.push(0);
                at
            })
            .collect();
        let mut image_at = (table_at + table.len() as u64).next_multiple_of(8);
        let mut out = magic::OFFLOAD_BINARY.to_vec();
        out.extend(2u32.to_le_bytes());
        out.extend(0u64.to_le_bytes()); // total size, patched below
        out.extend(entries_at.to_le_bytes());
        out.extend((images.len() as u64).to_le_bytes());
        let mut image_offsets = vec![];
        for (i, (_, image)) in images.iter().enumerate() {
            out.extend(1u16.to_le_bytes());
            out.extend(4u16.to_le_bytes());
            out.extend(0u32.to_le_bytes());
            out.extend((strings_at + 48 * i as u64).to_le_bytes());
            out.extend(2u64.to_le_bytes());
            out.extend(image_at.to_le_bytes());
            out.extend((image.len() as u64).to_le_bytes());
            image_offsets.push(image_at);
            image_at = (image_at + image.len() as u64).next_multiple_of(8);
        }
        for (i, (arch, _)) in images.iter().enumerate() {
            for (key, value, size) in [
                (table_at, table_at + 7, 17u64),
                (table_at + 25, arch_offsets[i], arch.len() as u64),
            ] {
                out.extend(key.to_le_bytes());
                out.extend(value.to_le_bytes());
                out.extend(size.to_le_bytes());
            }
        }
        out.extend(&table);
        for ((_, image), at) in images.iter().zip(image_offsets) {
            out.resize(at as usize, 0);
            out.extend(*image);
        }
        out.resize(out.len().next_multiple_of(8), 0);
        let total = out.len() as u64;
        out[8..16].copy_from_slice(&total.to_le_bytes());
        out
    }

    #[test]
    fn parses_v2_with_several_entries() {
        let data = build_v2(&[("gfx90a:xnack+", b"AAAA"), ("gfx1100", b"BBBBBB")]);
        let bin = OffloadBinary::parse(&data, &Limits::default()).unwrap();
        assert_eq!(bin.version, 2);
        let archs: Vec<String> = bin.entries().iter().map(|e| e.arch().to_string()).collect();
        assert_eq!(archs, ["gfx90a:xnack+", "gfx1100"]);
        assert_eq!(bin.entries()[1].image, b"BBBBBB");
        assert_eq!(bin.entries()[0].offload_kind, OffloadKind::Hip);
        // A count the binary cannot hold.
        let mut huge = data.clone();
        huge[24..32].copy_from_slice(&(1u64 << 48).to_le_bytes());
        assert!(matches!(
            OffloadBinary::parse(&huge, &Limits::default())
                .unwrap_err()
                .kind,
            ErrorKind::TooLarge { .. }
        ));
    }

    #[test]
    fn rejects_hostile_fields() {
        let data = build_v1(
            5,
            2,
            &[("triple", "nvptx64-nvidia-cuda"), ("arch", "sm_80")],
            b"ptx",
        );
        for cut in 0..data.len() {
            assert!(OffloadBinary::parse(&data[..cut], &Limits::default()).is_err());
        }
        let set = |at: usize, v: u64| {
            let mut d = data.clone();
            d[at..at + 8].copy_from_slice(&v.to_le_bytes());
            OffloadBinary::parse(&d, &Limits::default()).map(|_| ())
        };
        assert!(set(8, 1 << 48).is_err()); // total size past end
        assert!(set(16, u64::MAX - 3).is_err()); // entries offset wraps
        assert!(set(24, 41).is_err()); // v1 entry size
        assert!(set(32 + 16, 1 << 60).is_err()); // string count
        assert!(set(32 + 24, u64::MAX).is_err()); // image offset
        assert!(set(32 + 40, 9999).is_err()); // key offset
        let mut v9 = data.clone();
        v9[4] = 9;
        assert!(matches!(
            OffloadBinary::parse(&v9, &Limits::default())
                .unwrap_err()
                .kind,
            ErrorKind::UnsupportedVersion { version: 9, .. }
        ));
    }
}
