//! Target triples as offload containers write them.
//!
//! Bundle IDs normalise triples to four fields; for AMDHSA the environment is
//! empty, giving `amdgcn-amd-amdhsa-` (clang/lib/Driver/OffloadBundler.cpp,
//! `OffloadTargetInfo`). `amdgcn-amd-amdhsa` and `amdgcn-amd-amdhsa-` are the same triple.

use std::fmt;

/// The GPU vendor a triple's architecture belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Vendor {
    /// `amdgcn`, and AMD's SPIR-V (`spirv64-amd-amdhsa`).
    Amd,
    /// `nvptx`, `nvptx64`.
    Nvidia,
}

impl Vendor {
    /// The vendor's name as written in prose: `AMD`, `NVIDIA`.
    pub fn brand(self) -> &'static str {
        match self {
            Vendor::Amd => "AMD",
            Vendor::Nvidia => "NVIDIA",
        }
    }
}

/// Lower-case, as in reports: `amd`, `nvidia`.
impl fmt::Display for Vendor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Vendor::Amd => "amd",
            Vendor::Nvidia => "nvidia",
        })
    }
}

/// A target triple split into its fields; missing fields are empty.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Triple {
    /// Architecture, e.g. `amdgcn`, `nvptx64`, `x86_64`.
    pub arch: String,
    /// Vendor, e.g. `amd`, `nvidia`, `unknown`.
    pub vendor: String,
    /// Operating system, e.g. `amdhsa`, `cuda`, `linux`.
    pub os: String,
    /// Environment, e.g. `gnu`, or empty.
    pub env: String,
}

impl Triple {
    /// Splits `s` at `-` into up to four fields; a fifth and later field stay in `env`.
    pub fn parse(s: &str) -> Triple {
        let mut parts = s.splitn(4, '-');
        let mut next = || parts.next().unwrap_or_default().to_owned();
        Triple {
            arch: next(),
            vendor: next(),
            os: next(),
            env: next(),
        }
    }

    /// The GPU vendor of the architecture, if it is a GPU one.
    pub fn gpu_vendor(&self) -> Option<Vendor> {
        match self.arch.as_str() {
            "amdgcn" => Some(Vendor::Amd),
            // AMD's portable code: SPIR-V the HIP runtime compiles for the
            // GPU at load (clang's `--offload-arch=amdgcnspirv`).
            "spirv64" if self.vendor == "amd" => Some(Vendor::Amd),
            "nvptx" | "nvptx64" => Some(Vendor::Nvidia),
            _ => None,
        }
    }

    /// Whether two triples name the same target, treating an empty or `unknown`
    /// field as matching the same field left empty (as llvm::Triple normalisation does).
    pub fn same_target(&self, other: &Triple) -> bool {
        fn eq(a: &str, b: &str) -> bool {
            let blank = |s: &str| s.is_empty() || s == "unknown";
            a == b || (blank(a) && blank(b))
        }
        eq(&self.arch, &other.arch)
            && eq(&self.vendor, &other.vendor)
            && eq(&self.os, &other.os)
            && eq(&self.env, &other.env)
    }
}

/// Writes the fields joined by `-`, dropping a trailing empty environment.
impl fmt::Display for Triple {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{}", self.arch, self.vendor, self.os)?;
        if !self.env.is_empty() {
            write!(f, "-{}", self.env)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_and_four_fields() {
        let a = Triple::parse("amdgcn-amd-amdhsa");
        let b = Triple::parse("amdgcn-amd-amdhsa-");
        assert!(a.same_target(&b));
        assert_eq!(b.to_string(), "amdgcn-amd-amdhsa");
        assert_eq!(a.gpu_vendor(), Some(Vendor::Amd));
        let n = Triple::parse("nvptx64-nvidia-cuda-unknown");
        assert!(n.same_target(&Triple::parse("nvptx64-nvidia-cuda")));
        assert_eq!(n.gpu_vendor(), Some(Vendor::Nvidia));
        assert_eq!(Triple::parse("x86_64-unknown-linux-gnu").gpu_vendor(), None);
    }
}
