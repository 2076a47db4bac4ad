//! Targets: AMDGPU target IDs and processors, NVPTX architectures, triples and
//! offload kinds; what an image claims to be built for.

mod amd_products;
pub mod amdgpu;
pub mod kind;
pub mod names;
mod nvidia_products;
pub mod nvptx;
mod processors;
mod rocm_products;
pub mod triple;

use std::fmt;

pub use amdgpu::{Feature, FeatureSetting, Processor, TargetId, TargetIdError};
pub use kind::OffloadKind;
pub use names::Product;
pub use nvptx::{ArchVariant, ComputeCapability, NvArch, Platform, PtxVersion};
pub use triple::{Triple, Vendor};

/// The target clang names AMD's SPIR-V by (`--offload-arch=amdgcnspirv`; the
/// bundle entry `hipv4-spirv64-amd-amdhsa--amdgcnspirv`).
pub const AMD_SPIRV: &str = "amdgcnspirv";

/// The processor an image was built for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Arch {
    /// An AMDGPU target ID.
    Amdgpu(TargetId),
    /// An NVPTX architecture.
    Nvptx(NvArch),
    /// AMD's portable code, `amdgcnspirv`: SPIR-V for any AMD GPU, which
    /// the HIP runtime compiles for the device when it loads it.
    AmdSpirv,
    /// A name that is not a valid target for its vendor (kept with the reason).
    Unknown {
        /// The name as written.
        name: String,
        /// Why it is not valid.
        error: TargetIdError,
    },
    /// No processor stated (host code, or a container that names none).
    None,
}

impl Arch {
    /// Parses `name` as a processor of `vendor`; an empty name is [`Arch::None`].
    pub fn parse(vendor: Option<Vendor>, name: &str) -> Arch {
        if name.is_empty() {
            return Arch::None;
        }
        let parsed = match vendor {
            Some(Vendor::Amd) if name == AMD_SPIRV => Ok(Arch::AmdSpirv),
            Some(Vendor::Amd) => TargetId::parse(name).map(Arch::Amdgpu),
            Some(Vendor::Nvidia) => NvArch::parse(name).map(Arch::Nvptx),
            None => Err(TargetIdError::UnknownProcessor(name.into())),
        };
        parsed.unwrap_or_else(|error| Arch::Unknown {
            name: name.into(),
            error,
        })
    }

    /// Parses the target of a bundle entry ID: as [`Arch::parse`], but an
    /// AMDGPU alias (`fiji`) is not taken for its processor
    /// ([`TargetIdError::Alias`]).
    pub fn parse_bundle_target(vendor: Option<Vendor>, name: &str) -> Arch {
        match vendor {
            Some(Vendor::Amd) if !name.is_empty() && name != AMD_SPIRV => {
                TargetId::parse_primary(name)
                    .map(Arch::Amdgpu)
                    .unwrap_or_else(|error| Arch::Unknown {
                        name: name.into(),
                        error,
                    })
            }
            _ => Arch::parse(vendor, name),
        }
    }

    /// The vendor whose devices this arch names.
    pub fn vendor(&self) -> Option<Vendor> {
        match self {
            Arch::Amdgpu(_) | Arch::AmdSpirv => Some(Vendor::Amd),
            Arch::Nvptx(_) => Some(Vendor::Nvidia),
            _ => None,
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arch::Amdgpu(id) => id.fmt(f),
            Arch::Nvptx(arch) => arch.fmt(f),
            Arch::AmdSpirv => f.write_str(AMD_SPIRV),
            Arch::Unknown { name, .. } => f.write_str(name),
            Arch::None => Ok(()),
        }
    }
}
