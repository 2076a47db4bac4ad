//! NVIDIA cubin ELF headers → `sm_XY[a]`.
//!
//! Sources: llvm/include/llvm/BinaryFormat/ELF.h (`EM_CUDA`, `ELFOSABI_CUDA*`,
//! `ELFABIVERSION_CUDA_V1/V2`, `EF_CUDA_*`) and
//! llvm/lib/Object/ELFObjectFile.cpp (`getNVPTXCPUName`), LLVM main as of
//! LLVM 22. Two `e_flags` layouts, chosen by `EI_ABIVERSION`:
//!
//! | `EI_ABIVERSION` | SM | `a` variant | other bits |
//! |---|---|---|---|
//! | 7 (`ELFABIVERSION_CUDA_V1`, CUDA ≤ 12) | `e_flags & 0xff` (`EF_CUDA_SM`) | 0x800 (`EF_CUDA_ACCELERATORS_V1`) | 0x100/0x200 texture mode, 0x400 64-bit addresses, 0x1000 `EF_CUDA_SW_FLAG_V2`, bits 16..23 virtual SM |
//! | 8 (`ELFABIVERSION_CUDA_V2`, CUDA 13, Blackwell) | `(e_flags & 0xff00) >> 8` (`EF_CUDA_SM_MASK`, `EF_CUDA_SM_OFFSET`) | 0x8 (`EF_CUDA_ACCELERATORS`) | |
//!
//! There is no flag for the family-specific `f` variant (`sm_100f`): ELF.h
//! defines none, and `getNVPTXCPUName` only ever answers `sm_XY` or `sm_XYa`.
//! A cubin built for `sm_100f` therefore reads as `sm_100`, which runs on the
//! same devices. LLVM's own reader treats every ABI version other than 7 as the
//! new layout; LLVM's offload plugins' ELF check
//! rejects any other than 7 and 8 ("invalid CUDA ABI version"), and so does this module.

use super::elf::{ElfIdent, EM_CUDA};
use crate::error::{Error, ErrorKind, Result};
use crate::target::{ArchVariant, ComputeCapability, NvArch};

/// `ELFOSABI_CUDA` = 51 (llvm/BinaryFormat/ELF.h).
pub const ELFOSABI_CUDA: u8 = 51;
/// `ELFOSABI_CUDA_V2` = 41 (llvm/BinaryFormat/ELF.h).
pub const ELFOSABI_CUDA_V2: u8 = 41;
/// `ELFABIVERSION_CUDA_V1` = 7: SM in the low byte of `e_flags`.
pub const ELFABIVERSION_CUDA_V1: u8 = 7;
/// `ELFABIVERSION_CUDA_V2` = 8: SM in bits 8..15 of `e_flags`.
pub const ELFABIVERSION_CUDA_V2: u8 = 8;
/// `EF_CUDA_SM`: the SM field before Blackwell (ABI version 7).
pub const EF_CUDA_SM: u32 = 0xff;
/// `EF_CUDA_SM_MASK`: the SM field from Blackwell on (ABI version 8).
pub const EF_CUDA_SM_MASK: u32 = 0xff00;
/// `EF_CUDA_SM_OFFSET`: the shift of [`EF_CUDA_SM_MASK`].
pub const EF_CUDA_SM_OFFSET: u32 = 8;
/// `EF_CUDA_64BIT_ADDRESS`: 64-bit addressing (ABI version 7).
pub const EF_CUDA_64BIT_ADDRESS: u32 = 0x400;
/// `EF_CUDA_ACCELERATORS_V1`: the `a` variant (`sm_90a`) in ABI version 7.
pub const EF_CUDA_ACCELERATORS_V1: u32 = 0x800;
/// `EF_CUDA_ACCELERATORS`: the `a` variant (`sm_100a`) in ABI version 8.
pub const EF_CUDA_ACCELERATORS: u32 = 0x8;
/// `EF_CUDA_VIRTUAL_SM`: the virtual (PTX) SM the code was compiled from.
pub const EF_CUDA_VIRTUAL_SM: u32 = 0x00ff_0000;

/// What a cubin's ELF header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cubin {
    /// `e_ident[EI_OSABI]` as stored (51 `ELFOSABI_CUDA` or 41 `ELFOSABI_CUDA_V2`
    /// from NVIDIA's tools; not checked).
    pub os_abi: u8,
    /// `e_ident[EI_ABIVERSION]`: 7 or 8.
    pub abi_version: u8,
    /// `e_flags` as stored.
    pub flags: u32,
    /// The architecture the code runs on (`Base` or `ArchSpecific`; never
    /// `FamilySpecific`, which has no flag).
    pub arch: NvArch,
    /// Whether the code uses 64-bit addresses (`EF_CUDA_64BIT_ADDRESS`); `None`
    /// for ABI version 8, whose layout has no such bit.
    pub address_64: Option<bool>,
    /// The virtual SM in `EF_CUDA_VIRTUAL_SM` (ABI version 7), if non-zero.
    pub virtual_sm: Option<u32>,
}

/// Reads the cubin header at the start of `data` (64 bytes, nothing more): ELF
/// magic, ELFCLASS64, little-endian, `e_machine` = `EM_CUDA`, ABI version 7 or 8.
pub fn parse_header(data: &[u8]) -> Result<Cubin> {
    Cubin::from_ident(&ElfIdent::parse(data)?)
}

/// The architecture encoded by a cubin's `EI_ABIVERSION` and `e_flags`, as
/// `getNVPTXCPUName` decodes it (see the module docs). Errors carry the offset
/// of the field at fault within the ELF header.
pub fn arch_from_flags(abi_version: u8, flags: u32) -> Result<NvArch> {
    let (sm, accelerated) = match abi_version {
        ELFABIVERSION_CUDA_V1 => (flags & EF_CUDA_SM, flags & EF_CUDA_ACCELERATORS_V1 != 0),
        ELFABIVERSION_CUDA_V2 => (
            (flags & EF_CUDA_SM_MASK) >> EF_CUDA_SM_OFFSET,
            flags & EF_CUDA_ACCELERATORS != 0,
        ),
        other => {
            return Err(Error::new(
                8,
                ErrorKind::UnsupportedVersion {
                    what: "cubin EI_ABIVERSION (7 or 8)",
                    version: other.into(),
                },
            ))
        }
    };
    let capability = ComputeCapability::from_sm(sm).ok_or(Error::new(
        48,
        ErrorKind::BadValue {
            what: "cubin SM in e_flags",
            value: sm.into(),
        },
    ))?;
    let variant = if accelerated {
        ArchVariant::ArchSpecific
    } else {
        ArchVariant::Base
    };
    Ok(NvArch {
        capability,
        variant,
    })
}

/// Whether a whole cubin's `.nv.compat` section marks it arch-specific
/// (`sm_90a`): `None` when the cubin has no such section or it cannot be read.
///
/// CUDA 13.5 `nvcc -cubin -arch=sm_90a` writes the same `e_flags` as for
/// `sm_90` (0x6005a04; not [`EF_CUDA_ACCELERATORS`]), and the two cubins differ
/// only in their `-arch` note and in `.nv.compat`, a list of attributes
/// like `.nv.info`'s: u8 format, u8 attribute, then for formats 1–3 two bytes,
/// for format 4 a u16 size and that many bytes. Attribute 9 is 1 for `sm_XYa`
/// and 0 otherwise (checked on sm_90/90a, sm_100/100a/100f, sm_120a cubins;
/// `cuobjdump -lelf` names the file `sm_90a` accordingly). `sm_100f` and
/// `sm_100` cubins are byte-identical here: nothing in a cubin records `f`.
/// Reads the section headers, which lie at the cubin's end.
pub fn compat_arch_specific(data: &[u8]) -> Option<bool> {
    let (_, body) = sections(data)?
        .into_iter()
        .find(|(name, _)| *name == ".nv.compat")?;
    let mut pos = 0usize;
    while pos + 4 <= body.len() {
        let (format, attribute) = (body[pos], body[pos + 1]);
        if attribute == 9 && (1..=3).contains(&format) {
            return Some(body[pos + 2] == 1);
        }
        pos += match format {
            1..=3 => 4,
            4 => 4 + usize::from(u16::from_le_bytes([body[pos + 2], body[pos + 3]])),
            _ => return None,
        };
    }
    Some(false)
}

/// Whether a whole cubin holds code: a `.text.<function>` section (`ptxas`
/// names each function's code so). nvlink's device-link stub, which CUDA 13
/// `nvcc` links into every executable as a fat binary of its own, has none.
/// `None` when the section headers cannot be read.
pub fn has_code(data: &[u8]) -> Option<bool> {
    Some(
        sections(data)?
            .iter()
            .any(|(name, body)| name.starts_with(".text.") && !body.is_empty()),
    )
}

/// The named sections of a little-endian ELF64 (their bytes; empty for
/// `SHT_NOBITS`), or `None` if any header or name is out of bounds.
fn sections(data: &[u8]) -> Option<Vec<(&str, &[u8])>> {
    let b = crate::read::Bytes(data);
    let shoff = b.u64(0x28, "").ok()?;
    let shentsize = u64::from(b.u16(0x3a, "").ok()?);
    let shnum = u64::from(b.u16(0x3c, "").ok()?);
    let shstrndx = u64::from(b.u16(0x3e, "").ok()?);
    // The whole table lies in the file, so every field offset below does too
    // and no sum overflows (a fuzzer's find: shoff near 2^64).
    if shentsize < 64 || shstrndx >= shnum || shoff.checked_add(shnum * shentsize)? > b.len() {
        return None;
    }
    let header = |i: u64| shoff + i * shentsize;
    let strtab = b.u64(header(shstrndx) + 24, "").ok()?;
    let mut out = Vec::new();
    for i in 0..shnum {
        let at = header(i);
        let name = b.u32(at, "").ok()?;
        let name = b.c_str(strtab.checked_add(name.into())?, "").ok()?;
        const SHT_NOBITS: u32 = 8;
        let body = if b.u32(at + 4, "").ok()? == SHT_NOBITS {
            &[][..]
        } else {
            b.slice(b.u64(at + 24, "").ok()?, b.u64(at + 32, "").ok()?, "")
                .ok()?
        };
        out.push((name, body));
    }
    Some(out)
}

impl Cubin {
    /// Decodes identifying fields already read from an ELF64 header.
    fn from_ident(ident: &ElfIdent) -> Result<Cubin> {
        if ident.machine != EM_CUDA {
            return Err(Error::new(
                18,
                ErrorKind::BadValue {
                    what: "e_machine of a cubin (EM_CUDA = 190)",
                    value: ident.machine.into(),
                },
            ));
        }
        let flags = ident.flags;
        let arch = arch_from_flags(ident.abi_version, flags)?;
        let v1 = ident.abi_version == ELFABIVERSION_CUDA_V1;
        let virtual_sm = (flags & EF_CUDA_VIRTUAL_SM) >> 16;
        Ok(Cubin {
            os_abi: ident.os_abi,
            abi_version: ident.abi_version,
            flags,
            arch,
            address_64: v1.then_some(flags & EF_CUDA_64BIT_ADDRESS != 0),
            virtual_sm: (v1 && virtual_sm != 0).then_some(virtual_sm),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // EF_CUDA_SM* values from llvm/BinaryFormat/ELF.h.
    const EF_CUDA_SM80: u32 = 0x50;
    const EF_CUDA_SM90: u32 = 0x5a;
    const EF_CUDA_SM100: u32 = 0x64;
    const EF_CUDA_SM121: u32 = 0x79;

    fn header(abi: u8, flags: u32) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..7].copy_from_slice(b"\x7fELF\x02\x01\x01");
        h[7] = ELFOSABI_CUDA;
        h[8] = abi;
        h[18..20].copy_from_slice(&EM_CUDA.to_le_bytes());
        h[48..52].copy_from_slice(&flags.to_le_bytes());
        h
    }

    fn arch(abi: u8, flags: u32) -> String {
        parse_header(&header(abi, flags)).unwrap().arch.to_string()
    }

    #[test]
    fn abi_version_7_layout() {
        // sm_80 with 64-bit addresses and virtual SM 80, as ptxas 12 writes it.
        let c = parse_header(&header(7, 0x0050_0550)).unwrap();
        assert_eq!(c.arch.to_string(), "sm_80");
        assert_eq!((c.address_64, c.virtual_sm), (Some(true), Some(80)));
        assert_eq!(arch(7, EF_CUDA_SM90 | EF_CUDA_64BIT_ADDRESS), "sm_90");
        assert_eq!(
            arch(
                7,
                EF_CUDA_SM90 | EF_CUDA_ACCELERATORS_V1 | EF_CUDA_64BIT_ADDRESS
            ),
            "sm_90a"
        );
        assert_eq!(arch(7, EF_CUDA_SM80), "sm_80");
        // 0x8 is an SM bit in the old layout: 0x50 | 0x8 is sm_88, never `a`.
        assert_eq!(arch(7, EF_CUDA_SM80 | EF_CUDA_ACCELERATORS), "sm_88");
        assert_eq!(
            parse_header(&header(7, EF_CUDA_SM80)).unwrap().address_64,
            Some(false)
        );
    }

    #[test]
    fn abi_version_8_layout() {
        let sm = |v: u32| v << EF_CUDA_SM_OFFSET;
        assert_eq!(arch(8, sm(EF_CUDA_SM100)), "sm_100");
        assert_eq!(arch(8, sm(EF_CUDA_SM100) | EF_CUDA_ACCELERATORS), "sm_100a");
        assert_eq!(arch(8, sm(EF_CUDA_SM121) | EF_CUDA_ACCELERATORS), "sm_121a");
        assert_eq!(arch(8, sm(EF_CUDA_SM90) | EF_CUDA_ACCELERATORS), "sm_90a");
        // 0x800 is an SM bit here, not the old `a` flag.
        assert_eq!(arch(8, sm(EF_CUDA_SM90)), "sm_90");
        let c = parse_header(&header(8, sm(EF_CUDA_SM100))).unwrap();
        assert_eq!((c.address_64, c.virtual_sm), (None, None));
    }

    #[test]
    fn section_walk_refuses_tables_past_the_end() {
        // A fuzzer's find: e_shoff near 2^64 overflowed the field offsets.
        let data = include_bytes!(
            "../../../fuzz/regressions/discover_file/panic-cubin-section-table-overflow"
        );
        assert_eq!(compat_arch_specific(data), None);
        assert_eq!(has_code(data), None);
    }

    #[test]
    fn rejects_bad_headers() {
        // No SM in the field the ABI version names.
        assert_eq!(parse_header(&header(7, 0x6400)).unwrap_err().offset, 48);
        assert_eq!(
            parse_header(&header(8, EF_CUDA_SM90)).unwrap_err().offset,
            48
        );
        assert_eq!(parse_header(&header(7, 0x5)).unwrap_err().offset, 48);
        for abi in [0u8, 6, 9, 255] {
            let e = parse_header(&header(abi, EF_CUDA_SM80)).unwrap_err();
            assert!(
                matches!(e.kind, ErrorKind::UnsupportedVersion { .. }),
                "{abi}"
            );
        }
        let mut amd = header(7, EF_CUDA_SM80);
        amd[18] = 224;
        assert_eq!(parse_header(&amd).unwrap_err().offset, 18);
        let h = header(7, EF_CUDA_SM80);
        for cut in 0..64 {
            assert!(parse_header(&h[..cut]).is_err(), "{cut}");
        }
    }
}
