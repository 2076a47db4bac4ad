//! AMD GPUs from the KFD topology in sysfs, read the way LLVM's
//! `offload-arch` reads it (clang/tools/offload-arch/AMDGPUArchByKFD.cpp) and
//! the way ROCm's libhsakmt would adjust it.
//!
//! Each `/sys/devices/virtual/kfd/kfd/topology/nodes/N/properties` holds
//! `key value` lines; `gfx_target_version` is decimal
//! major × 10000 + minor × 100 + stepping, 0 for a CPU node; `unique_id` is
//! the 64-bit number ROCR prints as the UUID `GPU-<16 hex digits>`.
//!
//! KFD names the processor only: xnack and sramecc stay unknown
//! ([`FeatureSetting::Any`](offload_loader::target::FeatureSetting),
//! `Device::unknown_features`). It is consulted only when the HSA runtime is
//! absent or failed, because HSA knows the features and KFD does not; and it
//! costs no library load. Since no runtime runs, this module applies what
//! libhsakmt and ROCR would: `HSA_OVERRIDE_GFX_VERSION` (`_<node>` first)
//! and `ROCR_VISIBLE_DEVICES`.

use std::path::{Path, PathBuf};

use offload_loader::target::{Processor, TargetId};

use crate::config::Config;
use crate::overrides::gfx_override_processor;
use crate::report::{Backend, BackendReport, Reason, Status};
use crate::visible;

/// Where the topology's nodes are on Linux, under the system root (`/`).
const DEFAULT_ROOT: &str = "sys/devices/virtual/kfd/kfd/topology/nodes";

/// One GPU node of the topology.
#[derive(Debug)]
pub(crate) struct Node {
    /// Its processor, with xnack and sramecc unknown (`Any`).
    pub(crate) target: TargetId,
    /// The node's number.
    pub(crate) node: u32,
    /// `GPU-<unique_id as 16 hex digits>`, when `unique_id` is not 0.
    pub(crate) uuid: Option<String>,
}

impl visible::Listed for Node {
    fn uuid(&self) -> Option<&str> {
        self.uuid.as_deref()
    }
}

/// The processor of a `gfx_target_version` value (e.g. 90010 → gfx90a), split
/// as libhsakmt's `HSA_GET_GFX_VERSION_*` macros split it.
fn processor_of(version: u32) -> Option<&'static Processor> {
    let (major, minor, step) = (
        (version / 10000) % 100,
        (version / 100) % 100,
        version % 100,
    );
    Processor::from_isa_version((major as u8, minor as u8, step as u8))
}

/// One node's `properties`.
#[derive(Debug, Default, PartialEq, Eq)]
struct Properties {
    gfx_target_version: u32,
    unique_id: u64,
}

fn read_properties(node: &Path) -> Option<Properties> {
    let text = std::fs::read_to_string(node.join("properties")).ok()?;
    let mut props = Properties::default();
    for line in text.lines() {
        let (key, value) = line.split_once(' ').unwrap_or((line, ""));
        match key {
            "gfx_target_version" => props.gfx_target_version = value.trim().parse().ok()?,
            "unique_id" => props.unique_id = value.trim().parse().unwrap_or(0),
            _ => {}
        }
    }
    Some(props)
}

pub(crate) fn detect(config: &Config) -> (Vec<Node>, BackendReport) {
    let root = config
        .kfd_root
        .clone()
        .unwrap_or_else(|| config.system_root().join(DEFAULT_ROOT));
    let report = |status, reason| BackendReport::new(Backend::Kfd, status, Some(reason));
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
    let mut unknown = Vec::new();
    for (node, path) in nodes {
        let Some(props) = read_properties(&path) else {
            tracing::debug!(node, "KFD node without readable properties; skipped");
            continue;
        };
        if props.gfx_target_version == 0 {
            continue;
        }
        // libhsakmt reads the per-node variable first, then the global one,
        // and fails the whole topology on a malformed value.
        let override_value = config
            .gfx_overrides
            .iter()
            .find(|(n, _)| *n == Some(node))
            .map(|(_, v)| (format!("HSA_OVERRIDE_GFX_VERSION_{node}"), v))
            .or_else(|| {
                config
                    .gfx_overrides
                    .iter()
                    .find(|(n, _)| n.is_none())
                    .map(|(_, v)| ("HSA_OVERRIDE_GFX_VERSION".to_string(), v))
            });
        let processor = match override_value {
            Some((variable, value)) => match gfx_override_processor(value) {
                Ok(p) => Some(p),
                Err(problem) => {
                    let reason = Reason::BadGfxOverride {
                        variable,
                        value: value.clone(),
                        problem,
                    };
                    return (Vec::new(), report(Status::Unavailable, reason));
                }
            },
            None => processor_of(props.gfx_target_version),
        };
        let Some(processor) = processor else {
            tracing::warn!(
                node,
                version = props.gfx_target_version,
                "KFD node with an unknown gfx_target_version; left out"
            );
            unknown.push(format!(
                "node {node} has gfx_target_version {}",
                props.gfx_target_version
            ));
            continue;
        };
        devices.push(Node {
            target: TargetId::new(processor),
            node,
            uuid: (props.unique_id != 0).then(|| format!("GPU-{:016x}", props.unique_id)),
        });
    }
    let found = devices.len();
    if let Some(list) = &config.rocr_visible {
        devices = visible::rocr(devices, list);
        if devices.is_empty() && found > 0 {
            let reason = Reason::AllHidden {
                variable: "ROCR_VISIBLE_DEVICES",
                value: list.clone(),
                found,
            };
            return (devices, report(Status::NoDevice, reason));
        }
    }
    if devices.is_empty() {
        let reason = if unknown.is_empty() {
            Reason::NoGpuNode(root)
        } else {
            Reason::UnknownProcessor(format!("KFD {}", unknown.join(", ")))
        };
        return (devices, report(Status::NoDevice, reason));
    }
    let n = devices.len();
    (devices, report(Status::Found(n), Reason::FeaturesUnknown))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        let name = |v| processor_of(v).map(|p| p.name);
        assert_eq!(name(90010), Some("gfx90a"));
        assert_eq!(name(90402), Some("gfx942"));
        assert_eq!(name(110001), Some("gfx1101"));
        assert_eq!(name(100300), Some("gfx1030"));
        assert_eq!(name(0), None);
        assert_eq!(name(999999), None);
    }

    #[test]
    fn properties() {
        let dir = std::env::temp_dir().join(format!("kfd-props-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("properties"),
            "cpu_cores_count 0\ngfx_target_version 90010\nunique_id 12345678901234\ncapability 1\n",
        )
        .unwrap();
        assert_eq!(
            read_properties(&dir),
            Some(Properties {
                gfx_target_version: 90010,
                unique_id: 12345678901234
            })
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
