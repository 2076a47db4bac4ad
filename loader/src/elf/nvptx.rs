//! NVIDIA cubin ELF headers → architecture.
//!
//! From llvm/include/llvm/BinaryFormat/ELF.h (`EF_CUDA_*`): `e_machine` 190.
//! `EI_ABIVERSION` 7 (CUDA ≤ 12): SM = `e_flags & 0xff`, 0x800 = arch-specific
//! (`sm_90a`), 0x400 = 64-bit addresses. `EI_ABIVERSION` 8 (CUDA 13): SM =
//! `(e_flags & 0xff00) >> 8`, 0x8 = arch-specific.

use super::{ElfIdent, EM_CUDA};
use crate::error::{Error, ErrorKind, Result};
use crate::target::{ArchVariant, ComputeCapability, NvArch};

/// What a cubin's ELF header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cubin {
    /// `EI_ABIVERSION` (7 or 8).
    pub abi_version: u8,
    /// The architecture it runs on.
    pub arch: NvArch,
}

impl Cubin {
    /// Reads the header at the start of `data`.
    pub fn parse(data: &[u8]) -> Result<Cubin> {
        let ident = ElfIdent::read(data).ok_or(Error::new(
            0,
            ErrorKind::BadMagic {
                what: "64-bit little-endian ELF header",
            },
        ))?;
        Self::from_ident(&ident)
    }

    /// Decodes identifying fields already read.
    pub fn from_ident(ident: &ElfIdent) -> Result<Cubin> {
        if ident.machine != EM_CUDA {
            return Err(Error::new(
                18,
                ErrorKind::BadValue {
                    what: "e_machine of a cubin (190)",
                    value: ident.machine.into(),
                },
            ));
        }
        let f = ident.flags;
        let (sm, arch_specific) = if ident.abi_version >= 8 {
            ((f & 0xff00) >> 8, f & 0x8 != 0)
        } else {
            (f & 0xff, f & 0x800 != 0)
        };
        let capability = ComputeCapability::from_sm(sm).ok_or(Error::new(
            48,
            ErrorKind::BadValue {
                what: "cubin SM in e_flags",
                value: sm.into(),
            },
        ))?;
        Ok(Cubin {
            abi_version: ident.abi_version,
            arch: NvArch {
                capability,
                variant: if arch_specific {
                    ArchVariant::ArchSpecific
                } else {
                    ArchVariant::Base
                },
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(abi: u8, flags: u32) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..7].copy_from_slice(b"\x7fELF\x02\x01\x01");
        h[7] = 0x33;
        h[8] = abi;
        h[18..20].copy_from_slice(&EM_CUDA.to_le_bytes());
        h[48..52].copy_from_slice(&flags.to_le_bytes());
        h
    }

    #[test]
    fn both_layouts() {
        let arch = |abi, f| Cubin::parse(&header(abi, f)).unwrap().arch.to_string();
        assert_eq!(arch(7, 0x0050_0550), "sm_80");
        assert_eq!(arch(7, 0x0d5a | 0x800), "sm_90a");
        assert_eq!(arch(8, 100 << 8), "sm_100");
        assert_eq!(arch(8, (90 << 8) | 0x8), "sm_90a");
        assert!(Cubin::parse(&header(7, 0)).is_err());
    }
}
