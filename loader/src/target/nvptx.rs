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

    /// How NVIDIA's tables class the GPU of this capability (CUDA C++
    /// Programming Guide, "Compute Capabilities" table, and NVIDIA's CUDA GPUs
    /// and Jetson lists): the desktop and data-center GPUs, the Tegra (Jetson,
    /// DRIVE) GPUs, and numbers the tables do not class.
    ///
    /// - Desktop: 3.0, 3.5, 3.7, 5.0, 5.2, 6.0, 6.1, 7.0, 7.5, 8.0, 8.6, 8.9,
    ///   9.0, 10.0, 10.3, 12.0, 12.1.
    /// - Tegra: 3.2 (K1), 5.3 (TX1, Nano), 6.2 (TX2), 7.2 (Xavier), 8.7
    ///   (Orin), and Thor, which CUDA 12.8–12.9 name 10.1 and CUDA 13 renamed
    ///   11.0 (CUDA 13.0 release notes; PTX ISA 9.0 "adds sm_110", a renamed
    ///   sm_101).
    /// - Unlisted: any other number (CUDA 13.5's `nvcc --list-gpu-code` also
    ///   names sm_88 and sm_107, which no table classes yet).
    pub fn platform(self) -> Platform {
        match self.sm() {
            30 | 35 | 37 | 50 | 52 | 60 | 61 | 70 | 75 | 80 | 86 | 89 | 90 | 100 | 103 | 120
            | 121 => Platform::Desktop,
            32 | 53 | 62 | 72 | 87 | 101 | 110 => Platform::Tegra,
            _ => Platform::Unlisted,
        }
    }

    /// Whether this is a Tegra (Jetson, DRIVE) GPU ([`Self::platform`]).
    pub fn is_tegra(self) -> bool {
        self.platform() == Platform::Tegra
    }

    /// Whether code built for this capability names the GPU that reports
    /// `device`: the same number, or Thor's CUDA 12.8–12.9 name (10.1) on a
    /// Thor whose CUDA 13 driver reports 11.0. NVIDIA renamed the GPU, not
    /// its ISA ("Thor SM renaming from sm_101 to sm_110 starting from CUDA
    /// 13.0; for CUDA 12.9 and older releases Thor stays labeled as
    /// sm_101", the MathDx release notes), and a driver loads code built by
    /// older toolkits; the other way (sm_110 code on a driver that reports
    /// 10.1, one older than CUDA 13) it does not.
    pub fn names_gpu(self, device: ComputeCapability) -> bool {
        self == device || (self.sm() == 101 && device.sm() == 110)
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

/// How NVIDIA's tables class a GPU ([`ComputeCapability::platform`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Platform {
    /// A desktop or data-center GPU: a cubin runs on later minors of its major.
    Desktop,
    /// A Tegra (Jetson, DRIVE) GPU: a cubin runs on exactly its own GPU.
    Tegra,
    /// A number no table classes: no compatibility beyond its own GPU is assumed.
    Unlisted,
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
    /// Compatibility": a cubin runs on a later minor of its major, and that
    /// "is supported only for the desktop. It is not supported for Tegra.
    /// Also, the binary compatibility between desktop and Tegra is not
    /// supported"; "Feature Availability" for the `a` and `f` variants):
    ///
    /// - `sm_XY` on the GPU it names ([`ComputeCapability::names_gpu`]), and
    ///   where both it and the device are desktop GPUs
    ///   ([`ComputeCapability::platform`]), on the same major with minor ≥ Y.
    ///   Tegra code never runs on another GPU, nor desktop code on a Tegra
    ///   one; a capability no table classes gets no compatibility it is not
    ///   known to have (the safe side: another image, or none, is chosen).
    /// - `sm_XYa` on exactly the GPU it names.
    /// - `sm_XYf` on the GPU it names and its family
    ///   ([`ComputeCapability::family`]).
    pub fn runs_natively_on(&self, device: ComputeCapability) -> bool {
        let cc = self.capability;
        match self.variant {
            ArchVariant::ArchSpecific => cc.names_gpu(device),
            ArchVariant::FamilySpecific => {
                cc.names_gpu(device) || cc.family().contains(&device.sm())
            }
            ArchVariant::Base => {
                cc.names_gpu(device)
                    || (cc.platform() == Platform::Desktop
                        && device.platform() == Platform::Desktop
                        && device.major == cc.major
                        && device.minor >= cc.minor)
            }
        }
    }

    /// Whether PTX for this arch can be JIT-compiled for a device of
    /// capability `device`: `compute_XY` on any device ≥ X.Y, desktop and
    /// Tegra alike (PTX is forward compatible; CUDA 13.5's `ptxas` compiles
    /// `compute_87` PTX for sm_88 to sm_121 and refuses it for sm_86, and the
    /// tests check this rule against it); arch-specific `compute_XYa` only
    /// on exactly the GPU it names, and family `compute_XYf` only on its
    /// family (PTX ISA, "Target ISA notes": `a` and `f` targets are not
    /// forward compatible). Whether the driver takes the PTX's `.version` is
    /// checked apart.
    pub fn jits_on(&self, device: ComputeCapability) -> bool {
        let cc = self.capability;
        match self.variant {
            ArchVariant::Base => device >= cc,
            ArchVariant::ArchSpecific => cc.names_gpu(device),
            ArchVariant::FamilySpecific => {
                cc.names_gpu(device) || cc.family().contains(&device.sm())
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

    /// Every capability the CUDA 13.5 toolchain or NVIDIA's tables name.
    const SMS: [u32; 24] = [
        35, 37, 50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 88, 89, 90, 100, 101, 103, 107,
        110, 120, 121,
    ];

    /// Each cubin and the devices it runs on, written out from the sources
    /// rather than computed: CUDA C++ Programming Guide, "Binary
    /// Compatibility" (a later minor of the same major, desktop only; none
    /// between Tegra and desktop) and its compute-capability table (Tegra:
    /// 5.3, 6.2, 7.2, 8.7, Thor as 10.1 and 11.0); "Feature Availability"
    /// (`a`: that GPU alone; `f`: the family table, sm_100f on 10.0 and
    /// 10.3, sm_120f on 12.0 and 12.1); the CUDA 13.0 release notes (Thor's
    /// sm_101 renamed sm_110: sm_101 code is Thor's, and a CUDA 13 driver
    /// reports Thor as 11.0). sm_88 and sm_107, which no table classes, run
    /// only their own code.
    const NATIVE: &[(&str, &[u32])] = &[
        ("sm_35", &[35, 37]),
        ("sm_37", &[37]),
        ("sm_50", &[50, 52]),
        ("sm_52", &[52]),
        ("sm_53", &[53]),
        ("sm_60", &[60, 61]),
        ("sm_61", &[61]),
        ("sm_62", &[62]),
        ("sm_70", &[70, 75]),
        ("sm_72", &[72]),
        ("sm_75", &[75]),
        ("sm_80", &[80, 86, 89]),
        ("sm_86", &[86, 89]),
        ("sm_87", &[87]),
        ("sm_88", &[88]),
        ("sm_89", &[89]),
        ("sm_90", &[90]),
        ("sm_90a", &[90]),
        ("sm_100", &[100, 103]),
        ("sm_100a", &[100]),
        ("sm_100f", &[100, 103]),
        ("sm_101", &[101, 110]),
        ("sm_101a", &[101, 110]),
        ("sm_101f", &[101, 110]),
        ("sm_103", &[103]),
        ("sm_103a", &[103]),
        ("sm_103f", &[103]),
        ("sm_107", &[107]),
        ("sm_110", &[110]),
        ("sm_110a", &[110]),
        ("sm_110f", &[110]),
        ("sm_120", &[120, 121]),
        ("sm_120a", &[120]),
        ("sm_120f", &[120, 121]),
        ("sm_121", &[121]),
        ("sm_121a", &[121]),
        ("sm_121f", &[121]),
    ];

    #[test]
    fn every_cubin_on_every_device_as_the_tables_say() {
        let mut pairs = 0;
        for (code, runs_on) in NATIVE {
            let arch = NvArch::parse(code).unwrap();
            for sm in SMS {
                let expected = runs_on.contains(&sm);
                assert_eq!(arch.runs_natively_on(cc(sm)), expected, "{code} on sm_{sm}");
                pairs += 1;
            }
        }
        assert_eq!(pairs, NATIVE.len() * SMS.len());
        // Every base cubin of every capability is in the table.
        for sm in SMS {
            assert!(NATIVE.iter().any(|(code, _)| *code == format!("sm_{sm}")));
        }
    }

    #[test]
    fn tegra_code_is_for_its_own_gpu_only() {
        // cuSPARSELt's sm_87 (Orin) cubins are not for an RTX 4090 (8.9);
        // jax's sm_101 (Thor) cubins are not for a B300 (10.3).
        let orin = NvArch::parse("sm_87").unwrap();
        assert!(!orin.runs_natively_on(cc(89)));
        assert!(orin.jits_on(cc(89)));
        let thor = NvArch::parse("sm_101").unwrap();
        assert!(!thor.runs_natively_on(cc(103)) && !thor.runs_natively_on(cc(120)));
        assert!(thor.runs_natively_on(cc(110)));
        assert!(!NvArch::parse("sm_110").unwrap().runs_natively_on(cc(101)));
        for sm in SMS {
            let kind = cc(sm).platform();
            assert_eq!(cc(sm).is_tegra(), kind == Platform::Tegra, "{sm}");
            assert_eq!(
                kind == Platform::Unlisted,
                [88, 107].contains(&sm),
                "sm_{sm} is classed by the tables"
            );
        }
    }

    #[test]
    fn ptx_runs_forward_and_variants_only_on_their_gpus() {
        for code in SMS {
            let ptx = NvArch::parse(&format!("compute_{code}")).unwrap();
            for sm in SMS {
                assert_eq!(ptx.jits_on(cc(sm)), sm >= code, "compute_{code} on sm_{sm}");
            }
        }
        for (code, runs_on) in NATIVE {
            let arch = NvArch::parse(code).unwrap();
            if arch.variant != ArchVariant::Base {
                for sm in SMS {
                    assert_eq!(
                        arch.jits_on(cc(sm)),
                        runs_on.contains(&sm),
                        "{code} PTX on sm_{sm}"
                    );
                }
            }
        }
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
