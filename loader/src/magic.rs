//! The magic numbers that open offload containers and GPU images: one table,
//! read by every module that asks "what are these bytes".
//!
//! A leaf: the format readers check their own magic from here, the image model
//! ([`crate::image::CodeKind::sniff`]) and the container walk
//! ([`crate::container::Format::sniff`]) classify bytes with [`sniff`].

use aho_corasick::{AhoCorasick, Input, MatchKind};
use once_cell::sync::OnceCell;

/// `ELFMAG`, the four bytes every ELF file starts with (System V gABI).
pub const ELF: &[u8; 4] = b"\x7fELF";
/// A clang offload bundle: `__CLANG_OFFLOAD_BUNDLE__`, 24 bytes, no NUL
/// (clang/lib/Driver/OffloadBundler.cpp `OFFLOAD_BUNDLER_MAGIC_STR`).
pub const BUNDLE: &[u8; 24] = b"__CLANG_OFFLOAD_BUNDLE__";
/// A compressed clang offload bundle: `CCOB`
/// (OffloadBundler.cpp `CompressedOffloadBundle::MagicNumber`).
pub const COMPRESSED_BUNDLE: &[u8; 4] = b"CCOB";
/// An LLVM offload binary: `10 FF 10 AD` (llvm/Object/OffloadBinary.h `OffloadBinary::Magic`).
pub const OFFLOAD_BINARY: &[u8; 4] = &[0x10, 0xff, 0x10, 0xad];
/// An NVIDIA fat binary: `0xBA55ED50` stored little-endian (CUDA's `fatbinary_section.h`
/// `FATBIN_MAGIC`; clang's `CudaFatMagic` names the wrapper, not this).
pub const NV_FATBIN: &[u8; 4] = &0xBA55_ED50u32.to_le_bytes();
/// LLVM raw bitcode: `BC C0 DE` (llvm/Bitcode/BitcodeReader.cpp `isRawBitcode`).
pub const BITCODE: &[u8; 4] = &[b'B', b'C', 0xc0, 0xde];
/// The LLVM bitcode wrapper: `0x0B17C0DE` little-endian (BitcodeReader.cpp `isBitcodeWrapper`).
pub const BITCODE_WRAPPER: &[u8; 4] = &0x0B17_C0DEu32.to_le_bytes();
/// SPIR-V, little-endian words: `0x07230203` (SPIR-V specification 3.1 "Magic Number").
pub const SPIRV: &[u8; 4] = &0x0723_0203u32.to_le_bytes();
/// SPIR-V, big-endian words.
pub const SPIRV_BE: &[u8; 4] = &0x0723_0203u32.to_be_bytes();

/// What a magic number says the bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Magic {
    /// [`ELF`].
    Elf,
    /// [`BUNDLE`].
    Bundle,
    /// [`COMPRESSED_BUNDLE`].
    CompressedBundle,
    /// [`OFFLOAD_BINARY`].
    OffloadBinary,
    /// [`NV_FATBIN`].
    NvFatbin,
    /// [`BITCODE`] or [`BITCODE_WRAPPER`].
    Bitcode,
    /// [`SPIRV`] or [`SPIRV_BE`].
    SpirV,
}

/// Every magic, once.
const TABLE: &[(&[u8], Magic)] = &[
    (ELF, Magic::Elf),
    (BUNDLE, Magic::Bundle),
    (COMPRESSED_BUNDLE, Magic::CompressedBundle),
    (OFFLOAD_BINARY, Magic::OffloadBinary),
    (NV_FATBIN, Magic::NvFatbin),
    (BITCODE, Magic::Bitcode),
    (BITCODE_WRAPPER, Magic::Bitcode),
    (SPIRV, Magic::SpirV),
    (SPIRV_BE, Magic::SpirV),
];

/// The magic `data` starts with, if any. Reads at most 24 bytes.
pub fn sniff(data: &[u8]) -> Option<Magic> {
    TABLE
        .iter()
        .find(|(magic, _)| data.starts_with(magic))
        .map(|&(_, m)| m)
}

impl Magic {
    /// Whether this magic opens an offload container (bundle, `CCOB`, offload
    /// binary, NVIDIA fat binary) rather than a single image.
    pub fn is_container(self) -> bool {
        matches!(
            self,
            Magic::Bundle | Magic::CompressedBundle | Magic::OffloadBinary | Magic::NvFatbin
        )
    }
}

/// Offset of the first container magic at or after `from` in `data`.
///
/// One pass over the bytes for the four container magics together
/// (Aho-Corasick's packed SIMD search), not byte by byte.
pub fn next_container(data: &[u8], from: usize) -> Option<usize> {
    if from > data.len() {
        return None;
    }
    containers()
        .find(Input::new(data).span(from..data.len()))
        .map(|m| m.start())
}

/// The searcher of the container magics, built once.
fn containers() -> &'static AhoCorasick {
    static SEARCHER: OnceCell<AhoCorasick> = OnceCell::new();
    SEARCHER.get_or_init(|| {
        let magics = TABLE
            .iter()
            .filter(|(_, m)| m.is_container())
            .map(|&(magic, _)| magic);
        AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostFirst)
            .build(magics)
            .expect("four short literal patterns always build")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_magic_is_told_apart() {
        let cases: &[(&[u8], Option<Magic>)] = &[
            (b"\x7fELF\x02\x01", Some(Magic::Elf)),
            (b"__CLANG_OFFLOAD_BUNDLE__\x02", Some(Magic::Bundle)),
            (b"CCOB\x03\0", Some(Magic::CompressedBundle)),
            (b"\x10\xff\x10\xad\x01", Some(Magic::OffloadBinary)),
            (b"\x50\xed\x55\xba\x01\0", Some(Magic::NvFatbin)),
            (b"BC\xc0\xde\x35", Some(Magic::Bitcode)),
            (b"\xde\xc0\x17\x0b", Some(Magic::Bitcode)),
            (b"\x03\x02\x23\x07", Some(Magic::SpirV)),
            (b"\x07\x23\x02\x03", Some(Magic::SpirV)),
            (b"__CLANG_OFFLOAD_BUNDLE_", None),
            (b"", None),
        ];
        for (data, want) in cases {
            assert_eq!(sniff(data), *want, "{data:x?}");
        }
    }

    #[test]
    fn next_container_skips_other_magics() {
        let mut data = b"\x7fELF....CCO".to_vec();
        data.extend(b"CCOB\x03");
        assert_eq!(next_container(&data, 0), Some(11));
        assert_eq!(next_container(&data, 12), None);
        assert_eq!(next_container(&data, 100), None);
    }
}
