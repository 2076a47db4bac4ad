//! What a missing image means, by the rule of the runtime that loads the
//! container: a verdict per file and device, which the report, `--json` and
//! the exit status share.
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

use offload_loader::discover::{OffloadSection, SectionRole};
use offload_loader::target::OffloadKind;
use offload_loader::{Container, Format};
use serde::Serialize;

use crate::report::{targets_vendor, ContainerReport, DeviceRow, ObjectReport};

/// The runtime whose rule decides what a container without an image means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
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

    /// What a container of this rule without an image for a device does.
    fn consequence(self) -> &'static str {
        match self {
            Rule::Hip => "HIP stops the program at start-up (hipErrorNoBinaryForGpu)",
            Rule::Openmp => "libomptarget runs none of its target regions on the device",
            Rule::Cuda => "the CUDA runtime fails only at a launch of one of their kernels",
            Rule::Data => "the program loads them itself, when it chooses to",
            Rule::File => "whoever wants this GPU's code opens another file",
        }
    }
}

/// What a file means for a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Every container with code of the device's vendor has an image for it.
    Loads,
    /// Some modules have no image for it, which their runtime allows.
    Partly,
    /// It cannot run on the device (exit status 1).
    Fails,
    /// GPU code for other GPUs only: these devices do not load it.
    ForOtherGpus,
}

/// One file's verdict for one device.
#[derive(Debug, Serialize)]
pub struct VerdictRow {
    /// Index into the report's devices.
    pub device: usize,
    pub verdict: Verdict,
    /// The rule that decided it.
    pub rule: Rule,
    /// Containers with code of the device's vendor, and how many of them have no image for it.
    pub containers: usize,
    pub without_image: usize,
    /// The verdict in words.
    pub why: String,
}

/// The verdict of `object` for each of `devices` that it has code for.
pub fn of(object: &ObjectReport, devices: &[DeviceRow]) -> Vec<VerdictRow> {
    devices
        .iter()
        .enumerate()
        .filter_map(|(d, device)| verdict(object, d, device))
        .collect()
}

fn verdict(object: &ObjectReport, d: usize, device: &DeviceRow) -> Option<VerdictRow> {
    let mine: Vec<&ContainerReport> = object
        .containers
        .iter()
        .filter(|c| c.error.is_none() && !c.kernel_less && targets_vendor(c, device))
        .collect();
    if mine.is_empty() {
        return None;
    }
    let has = |c: &&&ContainerReport| c.selected[d].image.is_some();
    let count = |rules: &[Rule]| {
        let of: Vec<&&ContainerReport> = mine
            .iter()
            .filter(|c| c.rule.is_some_and(|r| rules.contains(&r)))
            .collect();
        let without = of.iter().filter(|c| !has(c)).count();
        (of.len(), without)
    };
    let row =
        |verdict, rule, (containers, without_image): (usize, usize), why: String| VerdictRow {
            device: d,
            verdict,
            rule,
            containers,
            without_image,
            why,
        };
    let target = &device.target_id;
    // Registered at start-up: one without an image is a failure.
    for rule in [Rule::Hip, Rule::Openmp] {
        let (n, without) = count(&[rule]);
        if without > 0 {
            let why = format!(
                "{without} of {n} containers have no image for {target}: {}",
                rule.consequence()
            );
            return Some(row(Verdict::Fails, rule, (n, without), why));
        }
    }
    // Modules the program or the CUDA runtime loads when needed.
    let (n, without) = count(&[Rule::Cuda, Rule::Data]);
    if n > 0 && without == n {
        let rule = if count(&[Rule::Data]).0 == n {
            Rule::Data
        } else {
            Rule::Cuda
        };
        let why = format!(
            "none of its {n} modules has an image for {target}: no kernel of it can run there"
        );
        return Some(row(Verdict::Fails, rule, (n, without), why));
    }
    let (files, files_without) = count(&[Rule::File]);
    if n == 0 && files_without == files {
        let why = format!("GPU code for other GPUs only: {target} does not load it");
        return Some(row(
            Verdict::ForOtherGpus,
            Rule::File,
            (files, files_without),
            why,
        ));
    }
    let (all, all_without) = (n + files, without + files_without);
    // The rule of the first container without an image (or of the first).
    let rule = mine
        .iter()
        .find(|c| !has(c))
        .or(mine.first())
        .and_then(|c| c.rule)
        .unwrap_or(Rule::Cuda);
    if all_without == 0 {
        let why = format!("every container has an image for {target}");
        return Some(row(Verdict::Loads, rule, (all, 0), why));
    }
    let why = format!(
        "{all_without} of {all} modules have no image for {target}, which its runtime allows: {}",
        rule.consequence()
    );
    Some(row(Verdict::Partly, rule, (all, all_without), why))
}
