//! AMDGPU processors and target IDs.
//!
//! A target ID is `processor(:feature(+|-))*` with the features `sramecc` and
//! `xnack`; an omitted feature means "any". The canonical form uses the primary
//! processor name and sorts the features alphabetically
//! (llvm/docs/AMDGPUUsage.rst "Target ID"; clang/lib/Basic/TargetID.cpp).

use std::fmt;

use super::processors::PROCESSORS;

/// One AMDGPU processor as LLVM 22 knows it
/// (llvm/lib/TargetParser/TargetParser.cpp, llvm/include/llvm/BinaryFormat/ELF.h).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Processor {
    /// Primary name, e.g. `gfx90a` or `gfx11-generic`.
    pub name: &'static str,
    /// Legacy marketing aliases, e.g. `fiji` for `gfx803`.
    pub aliases: &'static [&'static str],
    /// ISA version (major, minor, stepping) as `hsa_isa` and KFD report it.
    pub isa_version: (u8, u8, u8),
    /// Whether a target ID may set `xnack` on this processor.
    pub xnack: bool,
    /// Whether a target ID may set `sramecc` on this processor.
    pub sramecc: bool,
    /// `EF_AMDGPU_MACH_*`: the low byte of a code object's `e_flags`.
    pub mach: u8,
    /// The generic processor whose code runs here, e.g. `gfx11-generic`.
    pub generic_family: Option<&'static str>,
    /// For generic processors, the newest generic version LLVM 22 writes; 0 otherwise.
    pub generic_version: u8,
}

impl Processor {
    /// Every processor LLVM 22 knows.
    pub fn all() -> &'static [Processor] {
        PROCESSORS
    }

    /// The processor with this primary name or alias.
    pub fn lookup(name: &str) -> Option<&'static Processor> {
        PROCESSORS
            .iter()
            .find(|p| p.name == name || p.aliases.contains(&name))
    }

    /// The processor with this `EF_AMDGPU_MACH_*` value.
    pub fn from_mach(mach: u8) -> Option<&'static Processor> {
        PROCESSORS.iter().find(|p| p.mach == mach)
    }

    /// The processor with this ISA version (how KFD's `gfx_target_version` names it).
    pub fn from_isa_version(version: (u8, u8, u8)) -> Option<&'static Processor> {
        PROCESSORS
            .iter()
            .find(|p| p.isa_version == version && !p.is_generic())
    }

    /// Whether this is a generic processor (code object v6 `gfx*-generic`).
    pub fn is_generic(&self) -> bool {
        self.generic_version > 0
    }

    /// The generic processor whose code runs on this one, if any.
    pub fn generic(&self) -> Option<&'static Processor> {
        self.generic_family.and_then(Processor::lookup)
    }

    /// The generic version at which this processor joined its family: every
    /// member joined at version 1 in LLVM 22.
    pub fn generic_join_version(&self) -> u8 {
        1
    }

    /// Whether a target ID may set `feature` on this processor.
    pub fn supports(&self, feature: Feature) -> bool {
        match feature {
            Feature::Sramecc => self.sramecc,
            Feature::Xnack => self.xnack,
        }
    }
}

impl fmt::Display for Processor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// A target-ID feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Feature {
    /// SRAM ECC enabled.
    Sramecc,
    /// XNACK (page-fault retry) enabled.
    Xnack,
}

impl Feature {
    /// Both features, in canonical (alphabetical) order.
    pub const ALL: [Feature; 2] = [Feature::Sramecc, Feature::Xnack];

    /// The feature's name in a target ID.
    pub fn name(self) -> &'static str {
        match self {
            Feature::Sramecc => "sramecc",
            Feature::Xnack => "xnack",
        }
    }
}

/// How a target ID sets a feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FeatureSetting {
    /// Not stated: code that runs either way, or a device whose setting is unknown.
    #[default]
    Any,
    /// `feature+`.
    On,
    /// `feature-`.
    Off,
}

impl FeatureSetting {
    fn suffix(self) -> &'static str {
        match self {
            FeatureSetting::Any => "",
            FeatureSetting::On => "+",
            FeatureSetting::Off => "-",
        }
    }
}

/// Why a string is not a valid target ID.
#[derive(Debug, Clone, PartialEq, Eq, Hash, thiserror::Error)]
pub enum TargetIdError {
    /// The string is empty.
    #[error("empty target ID")]
    Empty,
    /// The processor is not one LLVM 22 knows.
    #[error("unknown AMDGPU processor `{0}`")]
    UnknownProcessor(String),
    /// A feature that is not `sramecc` or `xnack`, or lacks its `+`/`-`.
    #[error("`{feature}` in target ID `{id}` is not `sramecc+/-` or `xnack+/-`")]
    BadFeature {
        /// The target ID as written.
        id: String,
        /// The feature as written.
        feature: String,
    },
    /// A feature the processor does not have.
    #[error("processor {processor} does not support {feature}")]
    Unsupported {
        /// The processor.
        processor: &'static str,
        /// The feature.
        feature: &'static str,
    },
    /// A legacy alias (`fiji`) where only the primary name counts: in a
    /// bundle entry ID. Aliases are names for `-mcpu`; comgr
    /// (`amd_comgr_lookup_code_object`) and clr compare the processor of a
    /// bundle ID as written, and LLVM 22's bundler does not unbundle a `fiji`
    /// entry for gfx803, so such an entry never loads.
    #[error("`{alias}` is an alias of {processor}, and runtimes compare bundle IDs as written")]
    Alias {
        /// The alias as written.
        alias: String,
        /// The processor it names.
        processor: &'static str,
    },
    /// A feature given twice.
    #[error("`{feature}` appears twice in target ID `{id}`")]
    Duplicate {
        /// The target ID as written.
        id: String,
        /// The feature.
        feature: &'static str,
    },
    /// An NVPTX architecture that is not `sm_XY[a|f]` or `compute_XY[a|f]`.
    #[error("`{0}` is not an NVPTX architecture (sm_XY or compute_XY)")]
    BadNvptxArch(String),
    /// A name for code where a device was asked for: PTX (`compute_80`) or a
    /// generic AMDGPU target (`gfx11-generic`).
    #[error("`{name}` names code, not a device: {hint}")]
    NotADevice {
        /// The name as written.
        name: String,
        /// What to write instead.
        hint: String,
    },
    /// A device name that is no processor, architecture or product known here.
    #[error(
        "`{name}` is not a device name known here: write an AMDGPU processor (gfx90a), \
         an NVIDIA architecture (sm_90, 9.0) or a product (MI300X, H100){}",
        did_you_mean(.suggestions)
    )]
    UnknownDevice {
        /// The name as written.
        name: String,
        /// The nearest known names, best first, each with its architecture.
        suggestions: Vec<String>,
    },
    /// A product name that names devices of different architectures.
    #[error(
        "`{name}` names devices of different architectures: {}; write one of them",
        .candidates.join(", ")
    )]
    AmbiguousDevice {
        /// The name as written.
        name: String,
        /// One product of each architecture, with the architecture.
        candidates: Vec<String>,
    },
}

/// `; did you mean A, B?` for the suggestions of an unknown name, or nothing.
fn did_you_mean(suggestions: &[String]) -> String {
    if suggestions.is_empty() {
        String::new()
    } else {
        format!("; did you mean {}?", suggestions.join(", "))
    }
}

/// A validated AMDGPU target ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TargetId {
    /// The processor.
    pub processor: &'static Processor,
    /// The `sramecc` setting.
    pub sramecc: FeatureSetting,
    /// The `xnack` setting.
    pub xnack: FeatureSetting,
}

impl TargetId {
    /// A target ID with both features left as "any".
    pub fn new(processor: &'static Processor) -> Self {
        TargetId {
            processor,
            sramecc: FeatureSetting::Any,
            xnack: FeatureSetting::Any,
        }
    }

    /// Parses `processor(:feature(+|-))*` and validates it against the processor
    /// table, as clang's `parseTargetID` does: known processor (or alias), only
    /// features the processor has, each once, in any order.
    pub fn parse(id: &str) -> Result<TargetId, TargetIdError> {
        Self::parse_with(id, true)
    }

    /// Parses a target ID as a bundle entry ID carries it: as [`TargetId::parse`],
    /// but a legacy alias is an error ([`TargetIdError::Alias`]).
    pub fn parse_primary(id: &str) -> Result<TargetId, TargetIdError> {
        Self::parse_with(id, false)
    }

    fn parse_with(id: &str, aliases: bool) -> Result<TargetId, TargetIdError> {
        let mut parts = id.split(':');
        let name = parts.next().unwrap_or_default();
        if name.is_empty() {
            return Err(TargetIdError::Empty);
        }
        let processor =
            Processor::lookup(name).ok_or_else(|| TargetIdError::UnknownProcessor(name.into()))?;
        if !aliases && processor.name != name {
            return Err(TargetIdError::Alias {
                alias: name.into(),
                processor: processor.name,
            });
        }
        let mut target = TargetId::new(processor);
        for part in parts {
            let bad = || TargetIdError::BadFeature {
                id: id.into(),
                feature: part.into(),
            };
            let (feature_name, setting) = match part.as_bytes().last() {
                Some(b'+') => (&part[..part.len() - 1], FeatureSetting::On),
                Some(b'-') => (&part[..part.len() - 1], FeatureSetting::Off),
                _ => return Err(bad()),
            };
            let feature = Feature::ALL
                .into_iter()
                .find(|f| f.name() == feature_name)
                .ok_or_else(bad)?;
            if !processor.supports(feature) {
                return Err(TargetIdError::Unsupported {
                    processor: processor.name,
                    feature: feature.name(),
                });
            }
            let slot = target.setting_mut(feature);
            if *slot != FeatureSetting::Any {
                return Err(TargetIdError::Duplicate {
                    id: id.into(),
                    feature: feature.name(),
                });
            }
            *slot = setting;
        }
        Ok(target)
    }

    /// The setting of `feature`.
    pub fn setting(&self, feature: Feature) -> FeatureSetting {
        match feature {
            Feature::Sramecc => self.sramecc,
            Feature::Xnack => self.xnack,
        }
    }

    fn setting_mut(&mut self, feature: Feature) -> &mut FeatureSetting {
        match feature {
            Feature::Sramecc => &mut self.sramecc,
            Feature::Xnack => &mut self.xnack,
        }
    }

    /// Sets `feature` if the processor has it; features it lacks stay `Any`.
    #[must_use]
    pub fn with(mut self, feature: Feature, setting: FeatureSetting) -> Self {
        if self.processor.supports(feature) {
            *self.setting_mut(feature) = setting;
        }
        self
    }

    /// The number of features this ID states (`+` or `-`).
    pub fn stated_features(&self) -> usize {
        Feature::ALL
            .into_iter()
            .filter(|&f| self.setting(f) != FeatureSetting::Any)
            .count()
    }
}

impl std::str::FromStr for TargetId {
    type Err = TargetIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TargetId::parse(s)
    }
}

/// The canonical form: primary name, features sorted, e.g. `gfx90a:sramecc+:xnack-`.
impl fmt::Display for TargetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.processor.name)?;
        for feature in Feature::ALL {
            let setting = self.setting(feature);
            if setting != FeatureSetting::Any {
                write!(f, ":{}{}", feature.name(), setting.suffix())?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_llvm_22() {
        assert_eq!(Processor::all().len(), 53);
        let p = Processor::lookup("gfx90a").unwrap();
        assert_eq!((p.mach, p.xnack, p.sramecc), (0x3f, true, true));
        assert_eq!(Processor::lookup("fiji").unwrap().name, "gfx803");
        assert_eq!(Processor::from_mach(0x54).unwrap().name, "gfx11-generic");
        assert_eq!(
            Processor::lookup("gfx1151")
                .unwrap()
                .generic()
                .unwrap()
                .name,
            "gfx11-generic"
        );
        assert_eq!(
            Processor::from_isa_version((9, 0, 10)).unwrap().name,
            "gfx90a"
        );
        // Every mach value is unique, so e_flags name one processor.
        for p in Processor::all() {
            assert_eq!(Processor::from_mach(p.mach).unwrap().name, p.name);
            if let Some(g) = p.generic() {
                assert!(g.is_generic(), "{} -> {}", p.name, g.name);
            }
        }
    }

    #[test]
    fn parse_canonicalises() {
        let id = TargetId::parse("gfx90a:xnack-:sramecc+").unwrap();
        assert_eq!(id.to_string(), "gfx90a:sramecc+:xnack-");
        assert_eq!(TargetId::parse("polaris10").unwrap().to_string(), "gfx803");
        assert_eq!(
            TargetId::parse("gfx9-generic:xnack+").unwrap().to_string(),
            "gfx9-generic:xnack+"
        );
    }

    #[test]
    fn parse_rejects() {
        use TargetIdError::*;
        assert_eq!(TargetId::parse(""), Err(Empty));
        assert!(matches!(TargetId::parse("gfx9999"), Err(UnknownProcessor(p)) if p == "gfx9999"));
        assert!(matches!(
            TargetId::parse("gfx1100:xnack+"),
            Err(Unsupported { .. })
        ));
        assert!(matches!(
            TargetId::parse("gfx900:sramecc+"),
            Err(Unsupported { .. })
        ));
        assert!(matches!(
            TargetId::parse("gfx90a:xnack"),
            Err(BadFeature { .. })
        ));
        assert!(matches!(
            TargetId::parse("gfx90a:foo+"),
            Err(BadFeature { .. })
        ));
        assert!(matches!(
            TargetId::parse("gfx90a:xnack+:xnack-"),
            Err(Duplicate { .. })
        ));
        assert!(matches!(TargetId::parse("gfx90a:"), Err(BadFeature { .. })));
    }
}
