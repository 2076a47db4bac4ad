//! NVIDIA architectures: compute capabilities (`sm_90`), arch-specific (`sm_90a`)
//! and family-specific (`sm_100f`) variants, and PTX ISA versions.

use std::fmt;

use super::TargetIdError;

/// A device's compute capability, e.g. 9.0, written `sm_90`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ComputeCapability {
    /// Major version (the SM generation).
    pub major: u8,
    /// Minor version.
    pub minor: u8,
}

impl ComputeCapability {
    /// The capability with SM number `sm` (e.g. 90 → 9.0, 100 → 10.0, 121 → 12.1).
    pub fn from_sm(sm: u32) -> Option<Self> {
        let major = u8::try_from(sm / 10).ok()?;
        (major > 0).then_some(ComputeCapability {
            major,
            minor: (sm % 10) as u8,
        })
    }

    /// The SM number, e.g. 90.
    pub fn sm(self) -> u32 {
        u32::from(self.major) * 10 + u32::from(self.minor)
    }

    /// Whether this is a Tegra (Jetson, DRIVE) GPU, where a cubin runs only on
    /// exactly the capability it was built for: binary compatibility across
    /// minor versions "is supported only for the desktop. It is not supported
    /// for Tegra" (CUDA C++ Programming Guide, "Binary Compatibility"). The
    /// Tegra capabilities are those of the guide's compute-capability table and
    /// NVIDIA's Jetson/DRIVE pages: 3.2 (K1), 5.3 (TX1/Nano), 6.2 (TX2),
    /// 7.2 (Xavier), 8.7 (Orin), 10.1 (Thor, CUDA 12.8–12.9) and 11.0 (Thor
    /// from CUDA 13).
    pub fn is_tegra(self) -> bool {
        matches!(self.sm(), 32 | 53 | 62 | 72 | 87 | 101 | 110)
    }

    /// The capabilities a family-specific `sm_XYf` cubin or `compute_XYf` PTX
    /// runs on: the table "Family-specific compatibility" of the CUDA C++
    /// Programming Guide (12.9 and 13.0, "Feature Availability"): sm_100f on
    /// 10.0 and 10.3, sm_103f on 10.3, sm_101f on 10.1, sm_110f on 11.0,
    /// sm_120f on 12.0 and 12.1, sm_121f on 12.1. A family the table does not
    /// name is taken to be this capability alone.
    pub fn family(self) -> &'static [u32] {
        match self.sm() {
            100 => &[100, 103],
            103 => &[103],
            101 => &[101],
            110 => &[110],
            120 => &[120, 121],
            121 => &[121],
            _ => &[],
        }
    }
}

impl fmt::Display for ComputeCapability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sm_{}", self.sm())
    }
}

/// Which devices of a generation an arch's code runs on (CUDA 12.9 programming guide,
/// "Feature Availability": `a` = this exact capability, `f` = this family).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ArchVariant {
    /// `sm_XY`: the same major, minor ≥ Y (or any newer device, as PTX).
    #[default]
    Base,
    /// `sm_XYa`: exactly X.Y.
    ArchSpecific,
    /// `sm_XYf`: the same major, minor ≥ Y.
    FamilySpecific,
}

/// An NVPTX target architecture as an image names it (`sm_90a`, `compute_80`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NvArch {
    /// The capability the code was built for.
    pub capability: ComputeCapability,
    /// Its variant.
    pub variant: ArchVariant,
}

impl NvArch {
    /// Parses `sm_XY`, `sm_XYa`, `sm_XYf` and the same with `compute_` (PTX) prefix.
    pub fn parse(s: &str) -> Result<NvArch, TargetIdError> {
        let bad = || TargetIdError::BadNvptxArch(s.into());
        let digits = s
            .strip_prefix("sm_")
            .or_else(|| s.strip_prefix("compute_"))
            .ok_or_else(bad)?;
        let (digits, variant) = match digits.as_bytes().last() {
            Some(b'a') => (&digits[..digits.len() - 1], ArchVariant::ArchSpecific),
            Some(b'f') => (&digits[..digits.len() - 1], ArchVariant::FamilySpecific),
            _ => (digits, ArchVariant::Base),
        };
        if digits.len() < 2 || digits.len() > 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let capability = digits
            .parse()
            .ok()
            .and_then(ComputeCapability::from_sm)
            .ok_or_else(bad)?;
        Ok(NvArch {
            capability,
            variant,
        })
    }

    /// Whether native code (a cubin) for this arch runs on a device of
    /// capability `device` (CUDA C++ Programming Guide, "Binary
    /// Compatibility" and "Feature Availability"): `sm_XY` on the same major
    /// with minor ≥ Y, on the desktop only ([`ComputeCapability::is_tegra`]:
    /// exactly X.Y there); `sm_XYa` on exactly X.Y; `sm_XYf` on its family
    /// ([`ComputeCapability::family`]).
    pub fn runs_natively_on(&self, device: ComputeCapability) -> bool {
        let cc = self.capability;
        match self.variant {
            ArchVariant::ArchSpecific => device == cc,
            ArchVariant::FamilySpecific => device == cc || cc.family().contains(&device.sm()),
            ArchVariant::Base if device.is_tegra() => device == cc,
            ArchVariant::Base => device.major == cc.major && device.minor >= cc.minor,
        }
    }

    /// Whether PTX for this arch can be JIT-compiled for a device of
    /// capability `device`: `compute_XY` on any device ≥ X.Y (desktop and
    /// Tegra alike), arch-specific `compute_XYa` only on exactly X.Y, and
    /// family `compute_XYf` only on its family (PTX ISA, "Target ISA notes":
    /// `a` and `f` targets are not forward compatible). Whether the driver
    /// takes the PTX's `.version` is checked apart.
    pub fn jits_on(&self, device: ComputeCapability) -> bool {
        match self.variant {
            ArchVariant::Base => device >= self.capability,
            ArchVariant::ArchSpecific => device == self.capability,
            ArchVariant::FamilySpecific => {
                device == self.capability || self.capability.family().contains(&device.sm())
            }
        }
    }
}

impl fmt::Display for NvArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.capability)?;
        match self.variant {
            ArchVariant::Base => Ok(()),
            ArchVariant::ArchSpecific => f.write_str("a"),
            ArchVariant::FamilySpecific => f.write_str("f"),
        }
    }
}

/// A PTX ISA version (`.version 8.5`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PtxVersion {
    /// Major version.
    pub major: u8,
    /// Minor version.
    pub minor: u8,
}

impl fmt::Display for PtxVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The newest PTX ISA a CUDA driver can JIT, from its `cuDriverGetVersion` value
/// (1000 × major + 10 × minor). Source: the PTX ISA release notes ("PTX ISA
/// version N is supported by CUDA X.Y and later"). `None` for drivers older than 11.0.
pub fn max_ptx_for_driver(driver_version: u32) -> Option<PtxVersion> {
    let (major, minor) = (driver_version / 1000, (driver_version % 1000) / 10);
    let v = |major, minor| Some(PtxVersion { major, minor });
    match (major, minor) {
        (11, m) if m <= 8 => v(7, m as u8),
        (12, m) if m <= 5 => v(8, m as u8),
        (12, 6) => v(8, 5),
        (12, 7) => v(8, 6),
        (12, 8) => v(8, 7),
        (12, _) => v(8, 8),
        (13, m) => v(9, m.min(9) as u8),
        (m, _) if m > 13 => v(9, 9),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cc(sm: u32) -> ComputeCapability {
        ComputeCapability::from_sm(sm).unwrap()
    }

    #[test]
    fn parse_and_display() {
        for s in ["sm_80", "sm_90a", "sm_100f", "sm_121"] {
            assert_eq!(NvArch::parse(s).unwrap().to_string(), s);
        }
        assert_eq!(NvArch::parse("compute_75").unwrap().to_string(), "sm_75");
        for s in ["sm_", "sm_9", "sm_1000", "gfx90a", "sm_9x", "sm_05"] {
            assert!(NvArch::parse(s).is_err(), "{s}");
        }
    }

    #[test]
    fn native_and_jit_rules() {
        let sm80 = NvArch::parse("sm_80").unwrap();
        assert!(sm80.runs_natively_on(cc(86)));
        assert!(!sm80.runs_natively_on(cc(90)));
        assert!(sm80.jits_on(cc(90)));
        assert!(!sm80.jits_on(cc(75)));
        let sm90a = NvArch::parse("sm_90a").unwrap();
        assert!(sm90a.runs_natively_on(cc(90)));
        assert!(!sm90a.runs_natively_on(cc(100)));
        assert!(!sm90a.jits_on(cc(100)));
        let sm100f = NvArch::parse("sm_100f").unwrap();
        assert!(sm100f.runs_natively_on(cc(103)));
        assert!(!sm100f.runs_natively_on(cc(120)));
        // Thor (10.1 in CUDA 12.9) is not in the sm_100 family.
        assert!(!sm100f.runs_natively_on(cc(101)));
        assert!(sm100f.jits_on(cc(103)) && !sm100f.jits_on(cc(110)));
        let sm120f = NvArch::parse("sm_120f").unwrap();
        assert!(sm120f.runs_natively_on(cc(121)));
        assert!(!NvArch::parse("sm_121f").unwrap().runs_natively_on(cc(120)));
        assert!(!NvArch::parse("sm_90a").unwrap().jits_on(cc(120)));
    }

    #[test]
    fn tegra_needs_its_exact_cubin_but_takes_ptx() {
        let sm80 = NvArch::parse("sm_80").unwrap();
        assert!(cc(87).is_tegra() && !cc(86).is_tegra());
        assert!(!sm80.runs_natively_on(cc(87)));
        assert!(sm80.runs_natively_on(cc(86)));
        assert!(NvArch::parse("sm_87").unwrap().runs_natively_on(cc(87)));
        assert!(!NvArch::parse("sm_70").unwrap().runs_natively_on(cc(72)));
        assert!(sm80.jits_on(cc(87)));
        assert!(!NvArch::parse("sm_100").unwrap().runs_natively_on(cc(101)));
    }

    #[test]
    fn driver_ptx_bound() {
        let p = |d| max_ptx_for_driver(d).map(|v| v.to_string());
        assert_eq!(p(12040).as_deref(), Some("8.4"));
        assert_eq!(p(12080).as_deref(), Some("8.7"));
        assert_eq!(p(13000).as_deref(), Some("9.0"));
        assert_eq!(p(11020).as_deref(), Some("7.2"));
        assert_eq!(p(10020), None);
    }
}
