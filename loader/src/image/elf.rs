//! The fields of an ELF64 header that tell which GPU an image is for.
//!
//! Only the 64-byte `Elf64_Ehdr` is read (System V gABI): no section table, no
//! notes, no full `object::File`, so it is cheap enough for every image of a
//! 1.3 GB library.

use crate::error::{Error, ErrorKind, Result};
use crate::magic;
use crate::read::Bytes;

/// `EM_AMDGPU`, the `e_machine` of AMDGPU code objects (llvm/BinaryFormat/ELF.h).
pub const EM_AMDGPU: u16 = 224;
/// `EM_CUDA`, the `e_machine` of NVIDIA cubins (llvm/BinaryFormat/ELF.h).
pub const EM_CUDA: u16 = 190;
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
        if &ident[..4] != magic::ELF {
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
}

/// The `e_machine` of the ELF file `data` starts with, in either byte order;
/// `None` when `data` is not ELF or is too short to say.
pub fn machine(data: &[u8]) -> Option<u16> {
    if !data.starts_with(magic::ELF) {
        return None;
    }
    let m = data.get(18..20)?;
    Some(match data.get(5) {
        Some(&ELFDATA2MSB) => u16::from_be_bytes([m[0], m[1]]),
        _ => u16::from_le_bytes([m[0], m[1]]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elf(class: u8, data: u8, machine: u16) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(magic::ELF);
        h[4] = class;
        h[5] = data;
        h[6] = 1;
        h[18..20].copy_from_slice(&machine.to_le_bytes());
        h
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
    fn machine_in_either_byte_order() {
        assert_eq!(machine(&elf(2, 1, EM_AMDGPU)), Some(EM_AMDGPU));
        let mut be = elf(1, ELFDATA2MSB, 0);
        be[18..20].copy_from_slice(&8u16.to_be_bytes());
        assert_eq!(machine(&be), Some(8));
        assert_eq!(machine(b"\x7fELF\x02"), None);
        assert_eq!(machine(b"CCOB"), None);
    }
}
