//! What an image really is, from its first bytes: AMDGPU code-object and NVIDIA
//! cubin ELF headers ([`amdgpu`], [`nvptx`]), PTX directives ([`ptx`]), and the
//! magics of the other kinds of image. Used to name images that carry no ID and
//! to check what a container claims against what the image is.

pub mod amdgpu;
pub mod nvptx;
pub mod ptx;

use crate::container::{Code, Content, Format};
use crate::read::Bytes;
use crate::target::Arch;

/// `EM_AMDGPU` (llvm/BinaryFormat/ELF.h).
pub const EM_AMDGPU: u16 = 224;
/// `EM_CUDA` (llvm/BinaryFormat/ELF.h).
pub const EM_CUDA: u16 = 190;

/// The fields of a little-endian ELF64 header that identify a GPU image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElfIdent {
    /// `e_ident[EI_OSABI]`.
    pub os_abi: u8,
    /// `e_ident[EI_ABIVERSION]`.
    pub abi_version: u8,
    /// `e_machine`.
    pub machine: u16,
    /// `e_flags`.
    pub flags: u32,
}

impl ElfIdent {
    /// Reads the identifying fields of a 64-bit little-endian ELF header (the
    /// first 64 bytes); `None` if `data` is not one.
    pub fn read(data: &[u8]) -> Option<ElfIdent> {
        let b = Bytes(data);
        // ELFCLASS64 = 2, ELFDATA2LSB = 1.
        if !data.starts_with(b"\x7fELF\x02\x01") || b.len() < 64 {
            return None;
        }
        Some(ElfIdent {
            os_abi: data[7],
            abi_version: data[8],
            machine: b.u16(18, "e_machine").ok()?,
            flags: b.u32(48, "e_flags").ok()?,
        })
    }
}

/// What `data` (an image's bytes) holds, with the arch its header names.
/// Reads at most the ELF header or the first PTX directives.
pub fn content(data: &[u8]) -> Content {
    let mut content = Content {
        code: Code::Unknown,
        ..Content::default()
    };
    if data.is_empty() {
        content.code = Code::Empty;
    } else if let Some(ident) = ElfIdent::read(data) {
        match ident.machine {
            EM_AMDGPU => {
                content.code = Code::AmdgpuElf;
                if let Ok(co) = amdgpu::CodeObject::from_ident(&ident) {
                    content.arch = co.target.map(Arch::Amdgpu);
                    content.generic_version = co.generic_version;
                }
            }
            EM_CUDA => {
                content.code = Code::Cubin;
                content.arch = nvptx::Cubin::from_ident(&ident)
                    .ok()
                    .map(|c| Arch::Nvptx(c.arch));
            }
            _ => content.code = Code::OtherElf,
        }
    } else if data.starts_with(b"BC\xc0\xde") || data.starts_with(&[0xde, 0xc0, 0x17, 0x0b]) {
        content.code = Code::Bitcode;
    } else if data.starts_with(&0x0723_0203u32.to_le_bytes()) {
        content.code = Code::SpirV;
    } else if Format::sniff(data) == Some(Format::NvFatbin) {
        content.code = Code::NvFatbin;
    } else if let Ok(header) = ptx::Header::parse(data) {
        content.code = Code::Ptx;
        content.ptx_version = Some(header.version);
        content.arch = header.target.map(Arch::Nvptx);
    }
    content
}
