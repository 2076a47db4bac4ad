//! What the environment says instead of, or on top of, the drivers:
//! `OFFLOAD_LOADER_DEVICES`, `HSA_OVERRIDE_GFX_VERSION` (and its per-node form
//! `HSA_OVERRIDE_GFX_VERSION_<node>`, as ROCR-Runtime's topology code reads
//! them: `major.minor.stepping` in decimal), and the visible-devices lists.

use offload_loader::select::DeviceTarget;
use offload_loader::target::{Processor, TargetId};

use crate::{Backend, BackendReport, Device, Reason, Source, Status};

/// Devices from `OFFLOAD_LOADER_DEVICES` (comma-separated targets). One invalid
/// entry makes the whole override fail, with no devices: a typo must not
/// silently fall back to detection.
pub(crate) fn devices(list: &str) -> (Vec<Device>, BackendReport) {
    let parsed: Result<Vec<DeviceTarget>, String> = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| DeviceTarget::parse(s).map_err(|e| format!("`{s}`: {e}")))
        .collect();
    match parsed {
        Ok(targets) => {
            let devices: Vec<Device> = targets
                .into_iter()
                .enumerate()
                .map(|(index, target)| Device {
                    index,
                    target,
                    source: Source::Override,
                    name: None,
                    ordinal: index as u32,
                    pci_bus_id: None,
                    driver_version: None,
                    isas: Vec::new(),
                    unknown_features: false,
                    handle: 0,
                    driver: crate::driver::DriverRef::None,
                })
                .collect();
            let status = if devices.is_empty() {
                Status::NoDevice
            } else {
                Status::Found(devices.len())
            };
            let report = BackendReport {
                backend: Backend::Override,
                status,
                reason: None,
            };
            (devices, report)
        }
        Err(e) => (
            Vec::new(),
            BackendReport {
                backend: Backend::Override,
                status: Status::Unavailable,
                reason: Some(Reason::BadOverride(e)),
            },
        ),
    }
}

/// Parses `HSA_OVERRIDE_GFX_VERSION`'s `major.minor.stepping`.
pub fn parse_gfx_version(value: &str) -> Option<&'static Processor> {
    let mut parts = value.trim().split('.').map(|p| p.parse::<u8>().ok());
    let version = (parts.next()??, parts.next()??, parts.next()??);
    if parts.next().is_some() {
        return None;
    }
    Processor::from_isa_version(version)
}

/// Replaces the processor of AMD devices as `HSA_OVERRIDE_GFX_VERSION` says
/// (the per-node form wins for its node); feature settings are kept when the
/// new processor has the feature.
pub(crate) fn apply_gfx_overrides(devices: &mut [Device], overrides: &[(Option<u32>, String)]) {
    for device in devices {
        let DeviceTarget::Amdgpu(id) = device.target else {
            continue;
        };
        let value = overrides
            .iter()
            .find(|(node, _)| *node == Some(device.ordinal))
            .or_else(|| overrides.iter().find(|(node, _)| node.is_none()));
        let Some((_, value)) = value else { continue };
        match parse_gfx_version(value) {
            Some(processor) => {
                let mut new = TargetId::new(processor);
                for feature in offload_loader::target::Feature::ALL {
                    new = new.with(feature, id.setting(feature));
                }
                device.target = DeviceTarget::Amdgpu(new);
            }
            None => tracing::warn!(
                value,
                "HSA_OVERRIDE_GFX_VERSION names no known processor; ignored"
            ),
        }
    }
}

/// Keeps the devices a `*_VISIBLE_DEVICES` list names, in its order: indices
/// among this vendor's devices, comma-separated; like the runtimes, the list
/// stops at the first entry that is not a valid index (UUIDs are not matched).
/// An empty list hides every device.
pub(crate) fn visible(devices: Vec<Device>, list: Option<&str>) -> Vec<Device> {
    let Some(list) = list else { return devices };
    let mut out = Vec::new();
    for entry in list.split(',').map(str::trim) {
        match entry.parse::<usize>().ok().and_then(|i| devices.get(i)) {
            Some(d) if !out.iter().any(|o: &Device| o.ordinal == d.ordinal) => out.push(d.clone()),
            Some(_) => {}
            None => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn override_list() {
        let (d, r) = devices("gfx90a:xnack-:sramecc+, sm_80");
        assert_eq!(r.status, Status::Found(2));
        assert_eq!(d[0].target.to_string(), "gfx90a:sramecc+:xnack-");
        assert_eq!(d[1].target.to_string(), "sm_80");
        let (d, r) = devices("gfx90a,gfx9999");
        assert!(d.is_empty());
        assert_eq!(
            r.reason.unwrap().to_string(),
            "OFFLOAD_LOADER_DEVICES: `gfx9999`: unknown AMDGPU processor `gfx9999`"
        );
    }

    #[test]
    fn gfx_override_and_visibility() {
        let (mut d, _) = devices("gfx1030,gfx90a:xnack+,gfx1100");
        for (i, dev) in d.iter_mut().enumerate() {
            dev.ordinal = i as u32 + 1;
        }
        apply_gfx_overrides(
            &mut d,
            &[(None, "10.3.0".into()), (Some(2), "9.0.8".into())],
        );
        let t: Vec<String> = d.iter().map(|d| d.target.to_string()).collect();
        assert_eq!(t, ["gfx1030", "gfx908:xnack+", "gfx1030"]);
        let v = visible(d.clone(), Some("2,0,x,1"));
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].ordinal, 3);
        assert!(visible(d, Some("")).is_empty());
        assert!(parse_gfx_version("9.0").is_none());
    }
}
