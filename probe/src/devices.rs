//! The devices the report selects for: `--device` what-ifs, or what
//! `offload-detect` finds (which honours OFFLOAD_LOADER_DEVICES).

use offload_loader::select::DeviceTarget;

use crate::report::{BackendRow, DeviceRow};

/// `--device` targets if any were given, otherwise the detected devices.
pub fn find(what_if: &[String]) -> Result<(Vec<DeviceRow>, Vec<BackendRow>), String> {
    if !what_if.is_empty() {
        let devices = what_if
            .iter()
            .map(|s| {
                let target = DeviceTarget::parse(s).map_err(|e| format!("--device {s}: {e}"))?;
                Ok(row(target, "command-line", None))
            })
            .collect::<Result<_, String>>()?;
        return Ok((devices, vec![]));
    }
    Ok((vec![], vec![]))
}

fn row(target: DeviceTarget, source: &str, name: Option<String>) -> DeviceRow {
    DeviceRow {
        target_id: target.to_string(),
        vendor: target.vendor().to_string(),
        source: source.into(),
        name,
        target,
    }
}
