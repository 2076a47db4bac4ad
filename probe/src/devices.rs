//! The devices the report selects for: `--device` what-ifs, or what
//! `offload-detect` finds (which honours OFFLOAD_LOADER_DEVICES).

use offload_detect::Status;
use offload_loader::select::DeviceTarget;

use crate::report::{BackendRow, DeviceRow};

/// `--device` targets if any were given, otherwise the detected devices and a
/// report per backend.
pub fn find(what_if: &[String]) -> Result<(Vec<DeviceRow>, Vec<BackendRow>), String> {
    if !what_if.is_empty() {
        let devices = what_if
            .iter()
            .map(|s| {
                let target = DeviceTarget::parse(s).map_err(|e| format!("--device {s}: {e}"))?;
                Ok(row(target, "command-line"))
            })
            .collect::<Result<_, String>>()?;
        return Ok((devices, vec![]));
    }
    let detection = offload_detect::devices();
    let devices = detection
        .devices
        .iter()
        .map(|d| DeviceRow {
            name: d.name.clone(),
            driver_version: d.driver_version,
            pci_bus_id: d.pci_bus_id.clone(),
            features_unknown: d.unknown_features,
            ..row(d.target, d.source.name())
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
        target,
    }
}
