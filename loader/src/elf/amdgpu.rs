//! AMDGPU code-object ELF headers → target ID.
//!
//! From llvm/include/llvm/BinaryFormat/ELF.h and llvm/docs/AMDGPUUsage.rst
//! ("ELF Header"): `EI_OSABI` 64 = HSA, 65 = PAL, 66 = Mesa3D; `EI_ABIVERSION`
//! 0..4 = code object v2..v6; `e_flags & 0xff` = `EF_AMDGPU_MACH`.
//! v3: bit 0x100 xnack on, 0x200 sramecc on (off and "any" look the same).
//! v4+: xnack field `0x300` (0 unsupported, 0x100 any, 0x200 off, 0x300 on),
//! sramecc field `0xc00` (0 unsupported, 0x400 any, 0x800 off, 0xc00 on).
//! v6: generic version in bits 24..31 (`EF_AMDGPU_GENERIC_VERSION`).

use super::{ElfIdent, EM_AMDGPU};
use crate::error::{Error, ErrorKind, Result};
use crate::target::{Feature, FeatureSetting, Processor, TargetId};

/// `EI_OSABI` of an AMDGPU code object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OsAbi {
    /// 64, `ELFOSABI_AMDGPU_HSA`: ROCm.
    Hsa,
    /// 65, `ELFOSABI_AMDGPU_PAL`.
    Pal,
    /// 66, `ELFOSABI_AMDGPU_MESA3D`.
    Mesa3d,
    /// Any other value.
    Other(u8),
}

/// What an AMDGPU code object's ELF header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeObject {
    /// The OS ABI.
    pub os_abi: OsAbi,
    /// Code object version, 2 to 6.
    pub version: u8,
    /// `EF_AMDGPU_MACH` (0 for code object v2, whose target is in a note).
    pub mach: u8,
    /// The target ID the header encodes; `None` for v2 (note not read) or an
    /// unknown machine value.
    pub target: Option<TargetId>,
    /// The generic version of a generic-target v6 code object.
    pub generic_version: Option<u8>,
}

impl CodeObject {
    /// Reads the header at the start of `data`.
    pub fn parse(data: &[u8]) -> Result<CodeObject> {
        let ident = ElfIdent::read(data).ok_or(Error::new(
            0,
            ErrorKind::BadMagic {
                what: "64-bit little-endian ELF header",
            },
        ))?;
        Self::from_ident(&ident)
    }

    /// Decodes identifying fields already read.
    pub fn from_ident(ident: &ElfIdent) -> Result<CodeObject> {
        if ident.machine != EM_AMDGPU {
            return Err(Error::new(
                18,
                ErrorKind::BadValue {
                    what: "e_machine of an AMDGPU code object (224)",
                    value: ident.machine.into(),
                },
            ));
        }
        let os_abi = match ident.os_abi {
            64 => OsAbi::Hsa,
            65 => OsAbi::Pal,
            66 => OsAbi::Mesa3d,
            other => OsAbi::Other(other),
        };
        if ident.abi_version > 4 {
            return Err(Error::new(
                8,
                ErrorKind::UnsupportedVersion {
                    what: "AMDGPU code object ABI",
                    version: ident.abi_version.into(),
                },
            ));
        }
        let version = ident.abi_version + 2;
        let flags = ident.flags;
        let mach = (flags & 0xff) as u8;
        let processor = (version > 2).then(|| Processor::from_mach(mach)).flatten();
        let target = processor.map(|p| {
            let mut id = TargetId::new(p);
            for feature in Feature::ALL {
                let setting = if version == 3 {
                    let bit = match feature {
                        Feature::Xnack => 0x100,
                        Feature::Sramecc => 0x200,
                    };
                    // v3 cannot say "off" apart from "any".
                    if flags & bit != 0 {
                        FeatureSetting::On
                    } else {
                        FeatureSetting::Any
                    }
                } else {
                    let (field, shift) = match feature {
                        Feature::Xnack => (flags & 0x300, 8),
                        Feature::Sramecc => (flags & 0xc00, 10),
                    };
                    match field >> shift {
                        2 => FeatureSetting::Off,
                        3 => FeatureSetting::On,
                        _ => FeatureSetting::Any,
                    }
                };
                id = id.with(feature, setting);
            }
            id
        });
        let generic_version = (version >= 6 && processor.is_some_and(Processor::is_generic))
            .then_some((flags >> 24) as u8);
        Ok(CodeObject {
            os_abi,
            version,
            mach,
            target,
            generic_version,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(abi_version: u8, flags: u32) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..7].copy_from_slice(b"\x7fELF\x02\x01\x01");
        h[7] = 64;
        h[8] = abi_version;
        h[18..20].copy_from_slice(&EM_AMDGPU.to_le_bytes());
        h[48..52].copy_from_slice(&flags.to_le_bytes());
        h
    }

    fn target(abi: u8, flags: u32) -> String {
        CodeObject::parse(&header(abi, flags))
            .unwrap()
            .target
            .unwrap()
            .to_string()
    }

    #[test]
    fn decodes_e_flags_like_llvm_readelf() {
        // Values checked against llvm-readelf-22 -h on clang-22 output.
        assert_eq!(target(3, 0x53f), "gfx90a");
        assert_eq!(target(3, 0x73f), "gfx90a:xnack+");
        assert_eq!(target(3, 0x63f), "gfx90a:xnack-");
        assert_eq!(target(3, 0xe3f), "gfx90a:sramecc+:xnack-");
        assert_eq!(target(3, 0x41), "gfx1100");
        assert_eq!(target(1, 0x13f), "gfx90a:xnack+");
        let generic = CodeObject::parse(&header(4, 0x0100_0054)).unwrap();
        assert_eq!(generic.target.unwrap().to_string(), "gfx11-generic");
        assert_eq!(generic.generic_version, Some(1));
        assert_eq!(generic.version, 6);
    }

    #[test]
    fn v2_and_unknown_machines_name_no_target() {
        assert_eq!(CodeObject::parse(&header(0, 0)).unwrap().target, None);
        assert_eq!(CodeObject::parse(&header(3, 0xfe)).unwrap().target, None);
        assert!(CodeObject::parse(&header(9, 0x41)).is_err());
        assert!(CodeObject::parse(&header(3, 0x41)[..40]).is_err());
    }
}
