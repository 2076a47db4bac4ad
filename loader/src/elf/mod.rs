//! What an image really is, from its first bytes.
//!
//! Containers say what their images are built for (a bundle ID, an offload
//! binary's `arch` string, a fat binary entry's SM); the images say it too, in
//! their own headers. This module reads the image side, cheaply enough to run on
//! every image of a 1.3 GB library:
//!
//! - [`sniff`]: the kind of image from its magic ([`ImageFormat`]);
//! - [`amdgpu`]: an AMDGPU code object's ELF64 header → code object version,
//!   OS ABI, processor and target ID ([`AmdgpuCodeObject`]);
//! - [`nvptx`]: an NVIDIA cubin's ELF64 header → `sm_XY[a]` ([`Cubin`]);
//! - [`ptx`]: PTX text's `.version`, `.target` and `.address_size` ([`PtxHeader`]);
//! - [`image_arch`] and [`content`]: the arch an image really is, used to name
//!   images that carry no ID and to cross-check what a container claims.
//!
//! Only the 64-byte ELF header (or the first PTX directives) is read: no section
//! table, no notes, no full `object::File`.

pub mod amdgpu;
pub mod nvptx;
pub mod ptx;

pub use amdgpu::{AmdgpuCodeObject, NoTarget, OsAbi};
pub use nvptx::Cubin;
pub use ptx::Header as PtxHeader;

use crate::container::{Code, Content};
use crate::error::{Error, ErrorKind, Result};
use crate::read::Bytes;
use crate::target::Arch;

/// `EM_AMDGPU`, the `e_machine` of AMDGPU code objects (llvm/BinaryFormat/ELF.h).
pub const EM_AMDGPU: u16 = 224;
/// `EM_CUDA`, the `e_machine` of NVIDIA cubins (llvm/BinaryFormat/ELF.h).
pub const EM_CUDA: u16 = 190;
/// The four bytes every ELF file starts with (`ELFMAG`, System V gABI).
pub const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
/// Size of an ELF64 file header (`Elf64_Ehdr`, System V gABI).
pub const ELF64_HEADER_LEN: u64 = 64;

/// `EI_CLASS` value `ELFCLASS64` (System V gABI).
const ELFCLASS64: u8 = 2;
/// `EI_DATA` value `ELFDATA2LSB` (System V gABI).
const ELFDATA2LSB: u8 = 1;
/// `EI_DATA` value `ELFDATA2MSB` (System V gABI).
const ELFDATA2MSB: u8 = 2;

/// The fields of a little-endian ELF64 header that identify a GPU image
/// (offsets from the System V gABI `Elf64_Ehdr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElfIdent {
    /// `e_ident[EI_OSABI]` (byte 7).
    pub os_abi: u8,
    /// `e_ident[EI_ABIVERSION]` (byte 8).
    pub abi_version: u8,
    /// `e_machine` (bytes 18..20).
    pub machine: u16,
    /// `e_flags` (bytes 48..52).
    pub flags: u32,
}

impl ElfIdent {
    /// Reads the identifying fields of the ELF64 header at the start of `data`,
    /// checking the magic, `ELFCLASS64`, `ELFDATA2LSB` and that all 64 header
    /// bytes are present.
    pub fn parse(data: &[u8]) -> Result<ElfIdent> {
        let b = Bytes(data);
        let ident: [u8; 9] = b.array(0, "ELF identification")?;
        if &ident[..4] != ELF_MAGIC {
            return Err(Error::new(0, ErrorKind::BadMagic { what: "ELF header" }));
        }
        if ident[4] != ELFCLASS64 {
            return Err(Error::new(
                4,
                ErrorKind::BadValue {
                    what: "ELF class (EI_CLASS; a GPU image is ELFCLASS64 = 2)",
                    value: ident[4].into(),
                },
            ));
        }
        if ident[5] != ELFDATA2LSB {
            return Err(Error::new(
                5,
                ErrorKind::BadValue {
                    what: "ELF data encoding (EI_DATA; a GPU image is little-endian = 1)",
                    value: ident[5].into(),
                },
            ));
        }
        b.slice(0, ELF64_HEADER_LEN, "ELF64 header")?;
        Ok(ElfIdent {
            os_abi: ident[7],
            abi_version: ident[8],
            machine: b.u16(18, "e_machine")?,
            flags: b.u32(48, "e_flags")?,
        })
    }

    /// Like [`ElfIdent::parse`], `None` where `data` is not a little-endian ELF64 header.
    pub fn read(data: &[u8]) -> Option<ElfIdent> {
        ElfIdent::parse(data).ok()
    }
}

/// The kind of an image, told by its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ImageFormat {
    /// ELF with `e_machine` = `EM_AMDGPU` (224): an AMDGPU code object.
    AmdgpuElf,
    /// ELF with `e_machine` = `EM_CUDA` (190): an NVIDIA cubin.
    CudaElf,
    /// Any other ELF, with its `e_machine` (a host object, for instance).
    OtherElf(u16),
    /// PTX text: starts (after comments) with a `.version` directive.
    Ptx,
    /// LLVM bitcode: `BC` `0xC0DE`, or the bitcode wrapper `0x0B17C0DE`
    /// (llvm/Bitcode/BitcodeReader.cpp `isBitcode`/`isBitcodeWrapper`).
    LlvmBitcode,
    /// SPIR-V: magic `0x07230203` in either byte order (SPIR-V spec, "Magic Number").
    SpirV,
    /// A clang offload bundle (`__CLANG_OFFLOAD_BUNDLE__`).
    ClangOffloadBundle,
    /// A compressed clang offload bundle (`CCOB`).
    CompressedBundle,
    /// An LLVM offload binary (`10 FF 10 AD`).
    OffloadBinary,
    /// An NVIDIA fat binary (`0xBA55ED50`, little-endian).
    NvFatbin,
    /// None of the above (including empty input).
    Unknown,
}

impl ImageFormat {
    /// A short name for reports: `amdgpu-elf`, `cubin`, `ptx`, ...
    pub fn name(self) -> &'static str {
        match self {
            ImageFormat::AmdgpuElf => "amdgpu-elf",
            ImageFormat::CudaElf => "cubin",
            ImageFormat::OtherElf(_) => "elf",
            ImageFormat::Ptx => "ptx",
            ImageFormat::LlvmBitcode => "llvm-bitcode",
            ImageFormat::SpirV => "spir-v",
            ImageFormat::ClangOffloadBundle => "bundle",
            ImageFormat::CompressedBundle => "compressed-bundle",
            ImageFormat::OffloadBinary => "offload-binary",
            ImageFormat::NvFatbin => "nv-fatbin",
            ImageFormat::Unknown => "unknown",
        }
    }
}

/// LLVM raw bitcode magic `BC 0xC0DE` (llvm/Bitcode/BitcodeReader.cpp).
const BITCODE_MAGIC: [u8; 4] = [b'B', b'C', 0xc0, 0xde];
/// LLVM bitcode wrapper magic `0x0B17C0DE`, little-endian (llvm/Bitcode/BitcodeReader.cpp).
const BITCODE_WRAPPER_MAGIC: [u8; 4] = [0xde, 0xc0, 0x17, 0x0b];
/// SPIR-V magic number (SPIR-V specification, section 3.1 "Magic Number").
const SPIRV_MAGIC: u32 = 0x0723_0203;

/// The kind of image `data` holds, from its magic; for text, whether it opens
/// like PTX. Reads at most the first 20 bytes, or the PTX header directives
/// (bounded, see [`ptx`]). Never fails: unrecognised input is [`ImageFormat::Unknown`].
pub fn sniff(data: &[u8]) -> ImageFormat {
    if data.starts_with(ELF_MAGIC) {
        let machine = match (data.get(5), data.get(18..20)) {
            (Some(&ELFDATA2MSB), Some(m)) => u16::from_be_bytes([m[0], m[1]]),
            (_, Some(m)) => u16::from_le_bytes([m[0], m[1]]),
            (_, None) => return ImageFormat::Unknown,
        };
        return match machine {
            EM_AMDGPU => ImageFormat::AmdgpuElf,
            EM_CUDA => ImageFormat::CudaElf,
            other => ImageFormat::OtherElf(other),
        };
    }
    if data.starts_with(&BITCODE_MAGIC) || data.starts_with(&BITCODE_WRAPPER_MAGIC) {
        return ImageFormat::LlvmBitcode;
    }
    if data.starts_with(&SPIRV_MAGIC.to_le_bytes()) || data.starts_with(&SPIRV_MAGIC.to_be_bytes())
    {
        return ImageFormat::SpirV;
    }
    if data.starts_with(crate::bundle::MAGIC) {
        return ImageFormat::ClangOffloadBundle;
    }
    if data.starts_with(crate::compressed::MAGIC) {
        return ImageFormat::CompressedBundle;
    }
    if data.starts_with(crate::offload_binary::MAGIC) {
        return ImageFormat::OffloadBinary;
    }
    if data.starts_with(&crate::nv_fatbin::MAGIC.to_le_bytes()) {
        return ImageFormat::NvFatbin;
    }
    if ptx::Header::parse(data).is_ok() {
        return ImageFormat::Ptx;
    }
    ImageFormat::Unknown
}

/// The processor `data` (one image's bytes) really is built for, from its own
/// header: an AMDGPU code object's target ID ([`amdgpu`]), a cubin's `sm_XY[a]`
/// ([`nvptx`]) or PTX's `.target` ([`ptx`]). `None` for other kinds of image
/// and for headers that name no known processor (code object v2, an unknown
/// `EF_AMDGPU_MACH`, PTX without `sm_` target).
pub fn image_arch(data: &[u8]) -> Option<Arch> {
    match sniff(data) {
        ImageFormat::AmdgpuElf => amdgpu::parse_header(data)
            .ok()?
            .target_id()
            .map(Arch::Amdgpu),
        ImageFormat::CudaElf => nvptx::parse_header(data).ok().map(|c| Arch::Nvptx(c.arch)),
        ImageFormat::Ptx => ptx::Header::parse(data).ok()?.target.map(Arch::Nvptx),
        _ => None,
    }
}

/// What `data` (an image's bytes) holds, with the arch its header names, as
/// [`crate::container::Image::content`] records it. Reads at most the ELF header
/// or the first PTX directives.
pub fn content(data: &[u8]) -> Content {
    let mut content = Content::default();
    if data.is_empty() {
        content.code = Code::Empty;
        return content;
    }
    content.code = match sniff(data) {
        ImageFormat::AmdgpuElf => {
            if let Ok(co) = amdgpu::parse_header(data) {
                content.arch = co.target_id().map(Arch::Amdgpu);
                content.generic_version = co.generic_version;
            }
            Code::AmdgpuElf
        }
        ImageFormat::CudaElf => {
            content.arch = nvptx::parse_header(data).ok().map(|c| Arch::Nvptx(c.arch));
            Code::Cubin
        }
        ImageFormat::OtherElf(_) => Code::OtherElf,
        ImageFormat::Ptx => {
            if let Ok(header) = ptx::Header::parse(data) {
                content.ptx_version = Some(header.version);
                content.arch = header.target.map(Arch::Nvptx);
            }
            Code::Ptx
        }
        ImageFormat::LlvmBitcode => Code::Bitcode,
        ImageFormat::SpirV => Code::SpirV,
        ImageFormat::NvFatbin => Code::NvFatbin,
        ImageFormat::ClangOffloadBundle
        | ImageFormat::CompressedBundle
        | ImageFormat::OffloadBinary
        | ImageFormat::Unknown => Code::Unknown,
    };
    content
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elf(class: u8, data: u8, machine: u16) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(ELF_MAGIC);
        h[4] = class;
        h[5] = data;
        h[6] = 1;
        let m = if data == ELFDATA2MSB {
            machine.to_be_bytes()
        } else {
            machine.to_le_bytes()
        };
        h[18..20].copy_from_slice(&m);
        h
    }

    #[test]
    fn sniffs_every_magic() {
        let cases: &[(&[u8], ImageFormat)] = &[
            (&elf(2, 1, 224), ImageFormat::AmdgpuElf),
            (&elf(2, 1, 190), ImageFormat::CudaElf),
            (&elf(2, 1, 62), ImageFormat::OtherElf(62)),
            (&elf(1, 2, 8), ImageFormat::OtherElf(8)),
            (b"BC\xc0\xde\x35\x14", ImageFormat::LlvmBitcode),
            (b"\xde\xc0\x17\x0b\0\0\0\0", ImageFormat::LlvmBitcode),
            (b"\x03\x02\x23\x07\0\0\x01\0", ImageFormat::SpirV),
            (b"\x07\x23\x02\x03\0\x01\0\0", ImageFormat::SpirV),
            (
                b"__CLANG_OFFLOAD_BUNDLE__\x02",
                ImageFormat::ClangOffloadBundle,
            ),
            (b"CCOB\x03\0\x01\0", ImageFormat::CompressedBundle),
            (b"\x10\xff\x10\xad\x01\0\0\0", ImageFormat::OffloadBinary),
            (b"\x50\xed\x55\xba\x01\0\x10\0", ImageFormat::NvFatbin),
            (b"// x\n.version 8.0\n.target sm_90\n", ImageFormat::Ptx),
            (b"\x7fELF\x02\x01", ImageFormat::Unknown),
            (b"", ImageFormat::Unknown),
            (b"MZ\x90\0", ImageFormat::Unknown),
            (b"version 8.0", ImageFormat::Unknown),
        ];
        for (data, want) in cases {
            assert_eq!(sniff(data), *want, "{data:x?}");
        }
    }

    #[test]
    fn ident_checks_class_order_and_length() {
        assert!(ElfIdent::parse(&elf(2, 1, 224)).is_ok());
        let e = ElfIdent::parse(&elf(1, 1, 224)).unwrap_err();
        assert_eq!(
            (e.offset, e.kind.to_string().contains("EI_CLASS")),
            (4, true)
        );
        assert_eq!(ElfIdent::parse(&elf(2, 2, 224)).unwrap_err().offset, 5);
        assert!(matches!(
            ElfIdent::parse(&elf(2, 1, 224)[..63]).unwrap_err().kind,
            ErrorKind::OutOfBounds { .. }
        ));
        assert!(matches!(
            ElfIdent::parse(b"\x7fELG\x02\x01\x01\0\0")
                .unwrap_err()
                .kind,
            ErrorKind::BadMagic { .. }
        ));
        assert!(ElfIdent::parse(b"\x7fELF").is_err());
    }

    #[test]
    fn image_arch_and_content_from_real_headers() {
        let co = include_bytes!("../../tests/data/gfx90a_xnack+_v4.ehdr");
        assert_eq!(image_arch(co).unwrap().to_string(), "gfx90a:xnack+");
        let generic = content(include_bytes!("../../tests/data/gfx11-generic_v6.ehdr"));
        assert_eq!(generic.code, Code::AmdgpuElf);
        assert_eq!(generic.generic_version, Some(1));
        let ptx = include_bytes!("../../tests/data/sm_80.ptx");
        assert_eq!(image_arch(ptx).unwrap().to_string(), "sm_80");
        let c = content(ptx);
        assert_eq!(
            (c.code, c.ptx_version.unwrap().to_string()),
            (Code::Ptx, "7.0".into())
        );
        let mut cubin = elf(2, 1, EM_CUDA);
        cubin[8] = 7;
        cubin[48..52].copy_from_slice(&0x0050_0550u32.to_le_bytes());
        assert_eq!(image_arch(&cubin).unwrap().to_string(), "sm_80");
        assert_eq!(content(&cubin).code, Code::Cubin);
        assert_eq!(content(b"").code, Code::Empty);
        assert_eq!(content(b"BC\xc0\xde").code, Code::Bitcode);
        assert_eq!(content(&elf(2, 1, 62)).code, Code::OtherElf);
        assert_eq!(image_arch(&elf(2, 1, 62)), None);
        assert_eq!(content(b"\x10\xff\x10\xad").code, Code::Unknown);
    }

    #[test]
    fn never_panics_on_prefixes_and_noise() {
        let co = include_bytes!("../../tests/data/gfx9-4-generic_xnack-_v6.ehdr");
        for cut in 0..=co.len() {
            let _ = (
                sniff(&co[..cut]),
                image_arch(&co[..cut]),
                content(&co[..cut]),
            );
        }
        let mut x = 0x1234_5678u32;
        for len in 0..300 {
            let noise: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            let _ = (sniff(&noise), image_arch(&noise), content(&noise));
        }
    }
}
