//! Whose rule says what a container without an image for a device means:
//! the runtime that loads it. One truth for the probe's verdicts and
//! `slim`'s exit status.
//!
//! - HIP registers every fat binary at start-up (`__hipRegisterFatBinary`),
//!   and one without code for a present GPU stops the program there
//!   (`hipErrorNoBinaryForGpu`, clr's `hip_code_object.cpp`).
//! - libomptarget registers the program's descriptor; a device with no image
//!   in it runs none of its target regions.
//! - The CUDA runtime loads a module when a kernel of it is first used, so a
//!   fat binary without code for a device fails only at a launch of one of
//!   its kernels: libraries ship per-architecture modules and choose among
//!   them. A file fails only when none of its modules can run.
//! - Containers found among host data are loaded by the program itself
//!   (`cuModuleLoadData`, `hipModuleLoadData`), when it chooses: the CUDA rule.
//! - A file that is GPU code on its own (rocBLAS's per-GPU Tensile files, a
//!   device archive's members) is opened by whoever wants that GPU's code: one
//!   with code for other GPUs only is for them, not a failure.

use crate::container::{Container, Format};
use crate::discover::{OffloadSection, SectionRole};
use crate::target::OffloadKind;

/// The runtime whose rule decides what a container without an image means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Registered with HIP: a device without an image fails at start-up.
    Hip,
    /// In an OpenMP descriptor: a device without an image runs no target region.
    Openmp,
    /// A CUDA module: only a launch of one of its kernels fails.
    Cuda,
    /// Found among host data, loaded by the program when it chooses to.
    Data,
    /// A file of GPU code on its own, opened for the GPU it is for.
    File,
}

impl Rule {
    /// The rule for `container`, found in `section`.
    pub fn of(section: &OffloadSection, container: &Container<'_>) -> Rule {
        let kind = container.images().first().map(|i| &i.offload_kind);
        match section.role {
            SectionRole::Embedded => Rule::Data,
            SectionRole::Image => Rule::File,
            // A raw container file (named by its format) or a device
            // archive's member: GPU code on its own.
            _ if section.name == container.format().name() => Rule::File,
            _ => match (container.format(), kind) {
                (Format::NvFatbin, _) | (_, Some(OffloadKind::Cuda)) => Rule::Cuda,
                (Format::OffloadBinary, Some(OffloadKind::OpenMp)) => Rule::Openmp,
                _ if section.name == "__tgt_bin_desc" => Rule::Openmp,
                _ => Rule::Hip,
            },
        }
    }

    /// Whether a container of this rule without an image for a device makes
    /// the whole program fail on it (at start-up, or for every target region).
    pub fn registered(self) -> bool {
        matches!(self, Rule::Hip | Rule::Openmp)
    }

    /// Its name in reports: `hip`, `openmp`, `cuda`, `data`, `file`.
    pub fn name(self) -> &'static str {
        match self {
            Rule::Hip => "hip",
            Rule::Openmp => "openmp",
            Rule::Cuda => "cuda",
            Rule::Data => "data",
            Rule::File => "file",
        }
    }

    /// What a container of this rule without an image for a device does.
    pub fn consequence(self) -> &'static str {
        match self {
            Rule::Hip => "HIP stops the program at start-up (hipErrorNoBinaryForGpu)",
            Rule::Openmp => "libomptarget runs none of its target regions on the device",
            Rule::Cuda => "the CUDA runtime fails only at a launch of one of their kernels",
            Rule::Data => "the program loads them itself, when it chooses to",
            Rule::File => "whoever wants this GPU's code opens another file",
        }
    }
}
