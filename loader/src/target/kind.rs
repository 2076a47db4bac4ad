//! Offload kinds: which language runtime loads an image.

use std::fmt;

/// The runtime that manages an image.
///
/// Bundle IDs spell it as text (`host`, `hip`, `hipv4`, `hcc`, `openmp`, `cuda`;
/// clang/lib/Driver/OffloadBundler.cpp and ROCm clr's `hip_code_object.cpp` accept
/// `hip`, `hipv4` and `hcc` as one kind); offload binaries store a bit set
/// (llvm/include/llvm/Object/OffloadBinary.h `OffloadKind`: 1 OpenMP, 2 CUDA, 4 HIP, 8 SYCL).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum OffloadKind {
    /// The host entry of a bundle: never loaded on a device.
    Host,
    /// HIP (`hip`, `hipv4`, `hcc`).
    Hip,
    /// OpenMP target offload.
    OpenMp,
    /// CUDA.
    Cuda,
    /// SYCL.
    Sycl,
    /// No kind given (`OFK_None`).
    None,
    /// A spelling or bit set this crate does not know.
    Other(String),
}

impl OffloadKind {
    /// The kind named by a bundle ID's first field.
    pub fn from_bundle(name: &str) -> OffloadKind {
        match name {
            "host" => OffloadKind::Host,
            "hip" | "hipv4" | "hcc" => OffloadKind::Hip,
            "openmp" => OffloadKind::OpenMp,
            "cuda" => OffloadKind::Cuda,
            "sycl" => OffloadKind::Sycl,
            other => OffloadKind::Other(other.into()),
        }
    }

    /// The kind stored in an offload binary's `u16` field.
    pub fn from_bits(bits: u16) -> OffloadKind {
        match bits {
            0 => OffloadKind::None,
            1 => OffloadKind::OpenMp,
            2 => OffloadKind::Cuda,
            4 => OffloadKind::Hip,
            8 => OffloadKind::Sycl,
            other => OffloadKind::Other(format!("{other:#x}")),
        }
    }

    /// The name used in reports.
    pub fn name(&self) -> &str {
        match self {
            OffloadKind::Host => "host",
            OffloadKind::Hip => "hip",
            OffloadKind::OpenMp => "openmp",
            OffloadKind::Cuda => "cuda",
            OffloadKind::Sycl => "sycl",
            OffloadKind::None => "none",
            OffloadKind::Other(s) => s,
        }
    }
}

impl fmt::Display for OffloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
