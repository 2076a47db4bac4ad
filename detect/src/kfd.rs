//! AMD GPUs from the KFD topology in sysfs, as LLVM 22's `offload-arch` reads
//! it (clang/tools/offload-arch/AMDGPUArchByKFD.cpp): each
//! `/sys/devices/virtual/kfd/kfd/topology/nodes/N/properties` has a line
//! `gfx_target_version MMmmss` (decimal major×10000 + minor×100 + stepping;
//! 0 for a CPU node). KFD names the processor only: xnack and sramecc stay
//! unknown ([`FeatureSetting::Any`](offload_loader::target::FeatureSetting)).

use std::path::{Path, PathBuf};

use offload_loader::select::DeviceTarget;
use offload_loader::target::{Processor, TargetId};

use crate::{Backend, BackendReport, Config, Device, Reason, Source, Status};

const DEFAULT_ROOT: &str = "/sys/devices/virtual/kfd/kfd/topology/nodes";

/// The processor of a `gfx_target_version` value (e.g. 90010 → gfx90a).
pub fn processor_of(version: u32) -> Option<&'static Processor> {
    let (major, minor, step) = (version / 10000, (version / 100) % 100, version % 100);
    Processor::from_isa_version((
        u8::try_from(major).ok()?,
        u8::try_from(minor).ok()?,
        u8::try_from(step).ok()?,
    ))
}

pub(crate) fn detect(config: &Config) -> (Vec<Device>, BackendReport) {
    let root = config
        .kfd_root
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_ROOT));
    let report = |status, reason| BackendReport {
        backend: Backend::Kfd,
        status,
        reason: Some(reason),
    };
    let Ok(entries) = std::fs::read_dir(&root) else {
        return (
            Vec::new(),
            report(Status::Unavailable, Reason::NoTopology(root)),
        );
    };
    let mut nodes: Vec<(u32, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path())))
        .collect();
    nodes.sort();
    let mut devices = Vec::new();
    for (node, path) in nodes {
        let Some(version) = gfx_target_version(&path) else {
            continue;
        };
        if version == 0 {
            continue;
        }
        let Some(processor) = processor_of(version) else {
            tracing::warn!(
                node,
                version,
                "KFD node with an unknown gfx_target_version; skipped"
            );
            continue;
        };
        devices.push(Device {
            index: devices.len(),
            target: DeviceTarget::Amdgpu(TargetId::new(processor)),
            source: Source::Kfd,
            name: None,
            ordinal: node,
            pci_bus_id: None,
            driver_version: None,
            isas: Vec::new(),
            unknown_features: true,
            handle: 0,
            driver: crate::driver::DriverRef::None,
        });
    }
    let status = if devices.is_empty() {
        Status::NoDevice
    } else {
        Status::Found(devices.len())
    };
    (devices, report(status, Reason::FeaturesUnknown))
}

fn gfx_target_version(node: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(node.join("properties")).ok()?;
    text.lines().find_map(|l| {
        let value = l.strip_prefix("gfx_target_version")?;
        value.trim().parse().ok()
    })
}
