//! AMDGPU code-object ELF headers → code object version, processor, target ID.
//!
//! Sources: llvm/include/llvm/BinaryFormat/ELF.h (`ELFOSABI_AMDGPU_*`,
//! `ELFABIVERSION_AMDGPU_HSA_V2..V6`, `EF_AMDGPU_*`), llvm/docs/AMDGPUUsage.rst
//! ("ELF Header"), llvm/lib/Target/AMDGPU/MCTargetDesc/AMDGPUTargetStreamer.cpp
//! (`getEFlagsV3/V4/V6`, what the compiler writes), and ROCm comgr
//! (`getElfIsaNameFromElfHeader`) and clr, which read the flags at load time.
//!
//! | `EI_ABIVERSION` | code object | `e_flags` layout |
//! |---|---|---|
//! | 0 | v2 | no machine: the target is in an `NT_AMD_HSA_ISA` note (not read here) |
//! | 1 | v3 | `EF_AMDGPU_MACH` (bits 0..7), xnack bit 0x100, sramecc bit 0x200 |
//! | 2, 3 | v4, v5 | mach, xnack field 0x300, sramecc field 0xc00 |
//! | 4 | v6 | as v4, plus the generic version in bits 24..31 |
//!
//! v4+ feature fields: 0 unsupported, 1 any, 2 off, 3 on (`EF_AMDGPU_FEATURE_*_V4`).
//!
//! **v3 cannot tell "on" from "any".** LLVM's `getEFlagsV3` sets the bit when
//! the feature is on *or any* (`isXnackOnOrAny`, `isSramEccOnOrAny`), and
//! clears it only for "off". ROCm's loaders (comgr `getElfIsaNameFromElfHeader`,
//! clr) read a set bit as `feature+` and a clear bit as `feature-` when the
//! processor has the feature; this module reads v3 the same way, because that
//! is what decides whether the runtime loads the image.
//!
//! The OS ABIs PAL and Mesa3D (and an unknown OS) get v3-layout flags from LLVM
//! (`getEFlagsAMDPAL`, `getEFlagsMesa3D`, `getEFlagsUnknownOS` all call
//! `getEFlagsV3`) with `EI_ABIVERSION` 0, so for them ABI version 0 reads as the
//! v3 layout. Checked against `llvm-readelf-22 -h` on clang-22 output
//! (loader/tests/data/regenerate.sh).

use super::elf::{ElfIdent, EM_AMDGPU};
use crate::error::{Error, ErrorKind, Result};
use crate::target::{Feature, FeatureSetting, Processor, TargetId};
use std::fmt;

/// `ELFOSABI_AMDGPU_HSA` (llvm/BinaryFormat/ELF.h): ROCm code objects.
pub const ELFOSABI_AMDGPU_HSA: u8 = 64;
/// `ELFOSABI_AMDGPU_PAL` (llvm/BinaryFormat/ELF.h).
pub const ELFOSABI_AMDGPU_PAL: u8 = 65;
/// `ELFOSABI_AMDGPU_MESA3D` (llvm/BinaryFormat/ELF.h).
pub const ELFOSABI_AMDGPU_MESA3D: u8 = 66;
/// `ELFABIVERSION_AMDGPU_HSA_V6` = 4, the newest `EI_ABIVERSION` LLVM 22 writes
/// (code object v6); `EI_ABIVERSION` n is code object n + 2.
pub const MAX_ABI_VERSION: u8 = 4;
/// `EF_AMDGPU_MACH`: the processor field of `e_flags` (llvm/BinaryFormat/ELF.h).
pub const EF_AMDGPU_MACH: u32 = 0xff;
/// `EF_AMDGPU_FEATURE_XNACK_V3`: xnack on (LLVM ≥ 12 writers: on or any).
pub const EF_AMDGPU_FEATURE_XNACK_V3: u32 = 0x100;
/// `EF_AMDGPU_FEATURE_SRAMECC_V3`: sramecc on (LLVM ≥ 12 writers: on or any).
pub const EF_AMDGPU_FEATURE_SRAMECC_V3: u32 = 0x200;
/// `EF_AMDGPU_FEATURE_XNACK_V4`: the xnack field (0 unsupported, 0x100 any,
/// 0x200 off, 0x300 on), code object v4 and later.
pub const EF_AMDGPU_FEATURE_XNACK_V4: u32 = 0x300;
/// `EF_AMDGPU_FEATURE_SRAMECC_V4`: the sramecc field (0 unsupported, 0x400 any,
/// 0x800 off, 0xc00 on), code object v4 and later.
pub const EF_AMDGPU_FEATURE_SRAMECC_V4: u32 = 0xc00;
/// `EF_AMDGPU_GENERIC_VERSION`: the generic version field of a v6 code object.
pub const EF_AMDGPU_GENERIC_VERSION: u32 = 0xff00_0000;
/// `EF_AMDGPU_GENERIC_VERSION_OFFSET`: the field's shift.
pub const EF_AMDGPU_GENERIC_VERSION_OFFSET: u32 = 24;

/// `e_ident[EI_OSABI]` of an AMDGPU code object (llvm/BinaryFormat/ELF.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OsAbi {
    /// 64, `ELFOSABI_AMDGPU_HSA`: ROCm (HIP, OpenMP offload).
    Hsa,
    /// 65, `ELFOSABI_AMDGPU_PAL`: AMD's graphics driver ABI.
    Pal,
    /// 66, `ELFOSABI_AMDGPU_MESA3D`: Mesa.
    Mesa3d,
    /// Any other value (0 for `amdgcn--` objects with no OS).
    Other(u8),
}

impl OsAbi {
    /// The OS ABI stored as `value`.
    pub fn from_u8(value: u8) -> OsAbi {
        match value {
            ELFOSABI_AMDGPU_HSA => OsAbi::Hsa,
            ELFOSABI_AMDGPU_PAL => OsAbi::Pal,
            ELFOSABI_AMDGPU_MESA3D => OsAbi::Mesa3d,
            other => OsAbi::Other(other),
        }
    }
}

/// Why a code object's header names no target ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum NoTarget {
    /// Code object v2 (HSA, `EI_ABIVERSION` 0) keeps its target in an
    /// `NT_AMD_HSA_ISA` note, which this header reader does not parse; comgr
    /// refuses such objects too.
    #[error("code object v2: target in a note, not read")]
    CodeObjectV2,
    /// An `EF_AMDGPU_MACH` value LLVM 22 does not assign to a GCN processor
    /// (0 = `EF_AMDGPU_MACH_NONE`, the R600 family, reserved or newer values).
    #[error("unknown EF_AMDGPU_MACH value {0:#04x}")]
    UnknownMach(u8),
}

/// What an AMDGPU code object's ELF header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AmdgpuCodeObject {
    /// `e_ident[EI_OSABI]`.
    pub os_abi: OsAbi,
    /// `e_ident[EI_ABIVERSION]` as stored.
    pub abi_version: u8,
    /// Code object version, 2 to 6: `EI_ABIVERSION` + 2, except that a non-HSA
    /// object with ABI version 0 is 3 (LLVM writes v3-layout flags for it).
    pub version: u8,
    /// `e_flags` as stored.
    pub flags: u32,
    /// `EF_AMDGPU_MACH` (`e_flags & 0xff`); 0 for code object v2, whose low
    /// byte holds other flags.
    pub mach: u8,
    /// The target ID the header encodes; `None` for code object v2 or an
    /// unknown `EF_AMDGPU_MACH` ([`AmdgpuCodeObject::target_status`] says which).
    pub target: Option<TargetId>,
    /// For a generic processor in code object v6: the generic version
    /// (`e_flags` bits 24..31; LLVM writes 1..=255, 0 is invalid).
    pub generic_version: Option<u8>,
}

/// Reads the AMDGPU code object header at the start of `data` (64 bytes, nothing
/// more): ELF magic, ELFCLASS64, little-endian, `e_machine` = `EM_AMDGPU`.
pub fn parse_header(data: &[u8]) -> Result<AmdgpuCodeObject> {
    AmdgpuCodeObject::from_ident(&ElfIdent::parse(data)?)
}

/// How `e_flags` is laid out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// Code object v2: no machine in `e_flags`.
    V2,
    /// One bit per feature, set = on (or any).
    V3,
    /// Two-bit feature fields.
    V4,
    /// Two-bit feature fields and the generic version.
    V6,
}

impl AmdgpuCodeObject {
    /// Decodes identifying fields already read from an ELF64 header.
    fn from_ident(ident: &ElfIdent) -> Result<AmdgpuCodeObject> {
        if ident.machine != EM_AMDGPU {
            return Err(Error::new(
                18,
                ErrorKind::BadValue {
                    what: "e_machine of an AMDGPU code object (EM_AMDGPU = 224)",
                    value: ident.machine.into(),
                },
            ));
        }
        if ident.abi_version > MAX_ABI_VERSION {
            return Err(Error::new(
                8,
                ErrorKind::UnsupportedVersion {
                    what: "AMDGPU code object EI_ABIVERSION (0..=4 = code object v2..v6)",
                    version: ident.abi_version.into(),
                },
            ));
        }
        let os_abi = OsAbi::from_u8(ident.os_abi);
        let (version, layout) = match (ident.abi_version, os_abi) {
            (0, OsAbi::Hsa) => (2, Layout::V2),
            (0 | 1, _) => (3, Layout::V3),
            (2 | 3, _) => (ident.abi_version + 2, Layout::V4),
            _ => (6, Layout::V6),
        };
        let flags = ident.flags;
        let mach = if layout == Layout::V2 {
            0
        } else {
            (flags & EF_AMDGPU_MACH) as u8
        };
        let processor = match layout {
            Layout::V2 => Err(NoTarget::CodeObjectV2),
            _ => Processor::from_mach(mach).ok_or(NoTarget::UnknownMach(mach)),
        };
        let target = processor.ok().map(|p| {
            TargetId::new(p)
                .with(Feature::Xnack, feature(layout, flags, Feature::Xnack))
                .with(Feature::Sramecc, feature(layout, flags, Feature::Sramecc))
        });
        let generic_version = match processor {
            Ok(p) if layout == Layout::V6 && p.is_generic() => Some(
                ((flags & EF_AMDGPU_GENERIC_VERSION) >> EF_AMDGPU_GENERIC_VERSION_OFFSET) as u8,
            ),
            _ => None,
        };
        Ok(AmdgpuCodeObject {
            os_abi,
            abi_version: ident.abi_version,
            version,
            flags,
            mach,
            target,
            generic_version,
        })
    }

    /// The target ID, if the header names a known processor.
    pub fn target_id(&self) -> Option<TargetId> {
        self.target
    }

    /// The target ID, or why the header names none.
    pub fn target_status(&self) -> Result<TargetId, NoTarget> {
        match self.target {
            Some(target) => Ok(target),
            None if self.version == 2 => Err(NoTarget::CodeObjectV2),
            None => Err(NoTarget::UnknownMach(self.mach)),
        }
    }

    /// The processor, if the header names a known one.
    pub fn processor(&self) -> Option<&'static Processor> {
        self.target.map(|t| t.processor)
    }
}

/// The setting of `which` in `flags` under `layout` (see the module docs).
fn feature(layout: Layout, flags: u32, which: Feature) -> FeatureSetting {
    match layout {
        Layout::V2 => FeatureSetting::Any,
        Layout::V3 => {
            let bit = match which {
                Feature::Xnack => EF_AMDGPU_FEATURE_XNACK_V3,
                Feature::Sramecc => EF_AMDGPU_FEATURE_SRAMECC_V3,
            };
            if flags & bit != 0 {
                FeatureSetting::On
            } else {
                FeatureSetting::Off
            }
        }
        Layout::V4 | Layout::V6 => {
            let field = match which {
                Feature::Xnack => (flags & EF_AMDGPU_FEATURE_XNACK_V4) >> 8,
                Feature::Sramecc => (flags & EF_AMDGPU_FEATURE_SRAMECC_V4) >> 10,
            };
            match field {
                2 => FeatureSetting::Off,
                3 => FeatureSetting::On,
                // 0 unsupported, 1 any.
                _ => FeatureSetting::Any,
            }
        }
    }
}

impl fmt::Display for OsAbi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OsAbi::Hsa => f.write_str("hsa"),
            OsAbi::Pal => f.write_str("pal"),
            OsAbi::Mesa3d => f.write_str("mesa3d"),
            OsAbi::Other(v) => write!(f, "osabi {v}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(os_abi: u8, abi_version: u8, flags: u32) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..7].copy_from_slice(b"\x7fELF\x02\x01\x01");
        h[7] = os_abi;
        h[8] = abi_version;
        h[18..20].copy_from_slice(&EM_AMDGPU.to_le_bytes());
        h[48..52].copy_from_slice(&flags.to_le_bytes());
        h
    }

    fn target(abi: u8, flags: u32) -> String {
        parse_header(&header(64, abi, flags))
            .unwrap()
            .target
            .unwrap()
            .to_string()
    }

    /// Headers clang-22 wrote (loader/tests/data/regenerate.sh), with what
    /// `llvm-readelf-22 -h` printed for each object.
    #[test]
    fn reads_clang_22_code_objects_like_llvm_readelf() {
        type Fixture<'a> = (&'a [u8], u8, u32, &'a str, Option<u8>);
        let fixtures: &[Fixture<'_>] = &[
            // ABI Version: 2  Flags: 0x73f, gfx90a, xnack+, sramecc
            (
                include_bytes!("../../tests/data/gfx90a_xnack+_v4.ehdr"),
                4,
                0x73f,
                "gfx90a:xnack+",
                None,
            ),
            // ABI Version: 2  Flags: 0x53f, gfx90a, xnack, sramecc (both "any")
            (
                include_bytes!("../../tests/data/gfx90a_v4.ehdr"),
                4,
                0x53f,
                "gfx90a",
                None,
            ),
            // ABI Version: 3  Flags: 0xa3f, gfx90a, xnack-, sramecc-
            (
                include_bytes!("../../tests/data/gfx90a_sramecc-_xnack-_v5.ehdr"),
                5,
                0xa3f,
                "gfx90a:sramecc-:xnack-",
                None,
            ),
            // ABI Version: 3  Flags: 0x41, gfx1100
            (
                include_bytes!("../../tests/data/gfx1100_v5.ehdr"),
                5,
                0x41,
                "gfx1100",
                None,
            ),
            // ABI Version: 4  Flags: 0xd3f, gfx90a, xnack, sramecc+
            (
                include_bytes!("../../tests/data/gfx90a_sramecc+_v6.ehdr"),
                6,
                0xd3f,
                "gfx90a:sramecc+",
                None,
            ),
            // ABI Version: 4  Flags: 0x1000054, gfx11-generic, generic_v1
            (
                include_bytes!("../../tests/data/gfx11-generic_v6.ehdr"),
                6,
                0x0100_0054,
                "gfx11-generic",
                Some(1),
            ),
            // ABI Version: 4  Flags: 0x100065f, gfx9-4-generic, xnack-, sramecc, generic_v1
            (
                include_bytes!("../../tests/data/gfx9-4-generic_xnack-_v6.ehdr"),
                6,
                0x0100_065f,
                "gfx9-4-generic:xnack-",
                Some(1),
            ),
        ];
        for &(bytes, version, flags, id, generic) in fixtures {
            let co = parse_header(bytes).unwrap();
            assert_eq!(co.os_abi, OsAbi::Hsa, "{id}");
            assert_eq!((co.version, co.flags), (version, flags), "{id}");
            assert_eq!(co.mach, flags as u8, "{id}");
            assert_eq!(co.target_status().unwrap().to_string(), id);
            assert_eq!(co.generic_version, generic, "{id}");
        }
    }

    #[test]
    fn mesa3d_objects_use_the_v3_layout() {
        // OS/ABI: AMDGPU - MESA3D  ABI Version: 0  Flags: 0x32f, gfx906, xnack, sramecc
        // (built as gfx906:xnack+, sramecc left as "any": v3 sets both bits).
        let co =
            parse_header(include_bytes!("../../tests/data/gfx906_xnack+_mesa3d.ehdr")).unwrap();
        assert_eq!(
            (co.os_abi, co.abi_version, co.version),
            (OsAbi::Mesa3d, 0, 3)
        );
        assert_eq!(
            co.target_id().unwrap().to_string(),
            "gfx906:sramecc+:xnack+"
        );
        assert_eq!(co.generic_version, None);
    }

    #[test]
    fn v3_bits_read_as_the_rocm_loaders_read_them() {
        assert_eq!(target(1, 0x13f), "gfx90a:sramecc-:xnack+");
        assert_eq!(target(1, 0x33f), "gfx90a:sramecc+:xnack+");
        assert_eq!(target(1, 0x3f), "gfx90a:sramecc-:xnack-");
        // Features the processor lacks stay unstated.
        assert_eq!(target(1, 0x341), "gfx1100");
        assert_eq!(target(1, 0x12c), "gfx900:xnack+");
    }

    #[test]
    fn v4_fields_and_generic_versions() {
        assert_eq!(target(2, 0x63f), "gfx90a:xnack-");
        assert_eq!(target(2, 0xe3f), "gfx90a:sramecc+:xnack-");
        assert_eq!(target(3, 0x2f), "gfx906");
        // A field set on a processor without the feature is ignored.
        assert_eq!(target(3, 0xf41), "gfx1100");
        // Generic version only for generic processors in v6.
        let g = |abi, flags| {
            parse_header(&header(64, abi, flags))
                .unwrap()
                .generic_version
        };
        assert_eq!(g(4, 0x0200_0051), Some(2));
        assert_eq!(g(4, 0x0000_0051), Some(0));
        assert_eq!(g(4, 0x0100_003f), None);
        assert_eq!(g(3, 0x0100_0051), None);
    }

    #[test]
    fn no_target_for_v2_and_unknown_machines() {
        let v2 = parse_header(&header(64, 0, 0x3)).unwrap();
        assert_eq!((v2.version, v2.mach), (2, 0));
        assert_eq!(v2.target, None);
        assert_eq!(v2.target_status(), Err(NoTarget::CodeObjectV2));
        assert_eq!(
            NoTarget::CodeObjectV2.to_string(),
            "code object v2: target in a note, not read"
        );
        for mach in [0x00u8, 0x01, 0x27, 0x40, 0x4b, 0x60, 0xff] {
            let co = parse_header(&header(64, 2, u32::from(mach) | 0x300)).unwrap();
            assert_eq!(co.target_status(), Err(NoTarget::UnknownMach(mach)));
            assert_eq!(co.target_id(), None);
            assert_eq!(co.mach, mach);
        }
        assert_eq!(
            NoTarget::UnknownMach(0x4b).to_string(),
            "unknown EF_AMDGPU_MACH value 0x4b"
        );
    }

    #[test]
    fn rejects_what_is_not_an_amdgpu_header() {
        let e = parse_header(&header(64, 5, 0x41)).unwrap_err();
        assert!(matches!(
            e.kind,
            ErrorKind::UnsupportedVersion { version: 5, .. }
        ));
        assert_eq!(e.offset, 8);
        let mut cuda = header(64, 2, 0x41);
        cuda[18] = 190;
        assert_eq!(parse_header(&cuda).unwrap_err().offset, 18);
        let h = header(64, 2, 0x41);
        for cut in 0..64 {
            assert!(parse_header(&h[..cut]).is_err(), "{cut}");
        }
        let mut be = h.clone();
        be[5] = 2;
        assert!(parse_header(&be).is_err());
    }

    #[test]
    fn every_processor_round_trips_through_e_flags() {
        for p in Processor::all() {
            let abi = if p.is_generic() { 4 } else { 2 };
            let flags = u32::from(p.mach) | 0x0100_0000;
            let co = parse_header(&header(64, abi, flags)).unwrap();
            assert_eq!(co.processor().unwrap().name, p.name);
        }
    }
}
