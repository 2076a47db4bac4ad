//! The devices the report selects for: `--device` what-ifs, or what
//! `offload-detect` finds (which honours OFFLOAD_LOADER_DEVICES).

use offload_detect::{Source, Status};
use offload_loader::select::DeviceTarget;

use crate::report::{BackendRow, DeviceRow};

/// `--device` targets if any were given, otherwise the detected devices and a
/// report per backend. A device whose features are unstated (`--device
/// gfx90a`, `MI250X`, an override without them, one KFD reports; not an
/// HSA agent, whose ISA name is what the driver matches) is one row per
/// setting it may run in ([`DeviceTarget::settings`]), each naming the
/// device as given.
pub fn find(what_if: &[String]) -> Result<(Vec<DeviceRow>, Vec<BackendRow>), String> {
    if !what_if.is_empty() {
        let mut devices = Vec::new();
        for s in what_if {
            let target = DeviceTarget::parse(s).map_err(|e| format!("--device {s}: {e}"))?;
            let settings = target.settings();
            let setting_of = (settings.len() > 1).then(|| s.clone());
            devices.extend(settings.into_iter().map(|target| DeviceRow {
                setting_of: setting_of.clone(),
                ..row(target, "command-line")
            }));
        }
        return Ok((devices, vec![]));
    }
    let detection = offload_detect::devices();
    let devices = detection
        .devices
        .iter()
        .flat_map(|d| {
            // The HSA runtime names the agent's ISA as the driver matches
            // code objects against it: that is the device.
            let settings = match d.source {
                Source::Hsa => vec![d.target],
                _ => d.target.settings(),
            };
            let setting_of = (settings.len() > 1).then(|| d.target.to_string());
            settings.into_iter().map(move |target| DeviceRow {
                name: d.name.clone(),
                driver_version: d.driver_version,
                pci_bus_id: d.pci_bus_id.clone(),
                features_unknown: d.unknown_features,
                setting_of: setting_of.clone(),
                ..row(target, d.source.name())
            })
        })
        .collect();
    let backends = detection
        .backends
        .iter()
        .map(|b| BackendRow {
            name: b.backend.name().into(),
            status: match b.status {
                Status::Found(n) => format!("found {n}"),
                other => other.name().into(),
            },
            reason: b.reason.as_ref().map(ToString::to_string),
        })
        .collect();
    Ok((devices, backends))
}

fn row(target: DeviceTarget, source: &str) -> DeviceRow {
    DeviceRow {
        target_id: target.to_string(),
        vendor: target.vendor().to_string(),
        source: source.into(),
        name: None,
        driver_version: None,
        pci_bus_id: None,
        features_unknown: false,
        setting_of: None,
        target,
    }
}
