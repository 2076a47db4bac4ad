//! What the environment says instead of the drivers: `OFFLOAD_LOADER_DEVICES`
//! and `HSA_OVERRIDE_GFX_VERSION`.

use offload_loader::select::DeviceTarget;
use offload_loader::target::{ArchVariant, NvArch, Processor, TargetId};

use crate::report::{Backend, BackendReport, Reason, Status};

/// The device targets `OFFLOAD_LOADER_DEVICES` lists: comma-separated, an
/// AMDGPU target ID whose features are the device's settings
/// (`gfx90a:sramecc+:xnack-`; a feature left out is unknown) or an NVIDIA
/// `sm_XY`. The list replaces detection entirely: no driver is loaded, and the
/// devices cannot load images.
///
/// One invalid entry makes the whole override fail: the report names the
/// entry and no device is returned. Falling back to detection would silently
/// hide a typo; running on fewer devices than asked would too.
pub(crate) fn devices(list: &str) -> (Vec<DeviceTarget>, BackendReport) {
    let parsed: Result<Vec<DeviceTarget>, Reason> = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|entry| {
            parse_device(entry).map_err(|detail| Reason::BadOverride {
                entry: entry.into(),
                detail,
            })
        })
        .collect();
    let report = |status, reason| BackendReport::new(Backend::Override, status, reason);
    match parsed {
        Ok(targets) if targets.is_empty() => (
            Vec::new(),
            report(Status::NoDevice, Some(Reason::EmptyOverride)),
        ),
        Ok(targets) => {
            let n = targets.len();
            (targets, report(Status::Found(n), None))
        }
        Err(reason) => (Vec::new(), report(Status::Unavailable, Some(reason))),
    }
}

/// One device as a person writes it. Code-only names are refused with the
/// name of the device to write instead: `sm_90a`/`sm_100f` (code for exactly
/// one capability or a family), `compute_80` (PTX), `gfx11-generic` (code for
/// a family of processors).
pub fn parse_device(entry: &str) -> Result<DeviceTarget, String> {
    if entry.starts_with("sm_") || entry.starts_with("compute_") {
        let arch = NvArch::parse(entry).map_err(|e| e.to_string())?;
        if entry.starts_with("compute_") || arch.variant != ArchVariant::Base {
            return Err(format!(
                "names code, not a device: write the device's compute capability, {}",
                arch.capability
            ));
        }
        return Ok(DeviceTarget::Nvidia {
            capability: arch.capability,
            max_ptx: None,
        });
    }
    let id = TargetId::parse(entry).map_err(|e| e.to_string())?;
    if id.processor.is_generic() {
        return Err(format!(
            "{} is a generic target: it names code for a family of processors, not a device",
            id.processor.name
        ));
    }
    Ok(DeviceTarget::Amdgpu(id))
}

/// Parses an `HSA_OVERRIDE_GFX_VERSION` value as libhsakmt does
/// (ROCR-Runtime `libhsakmt/src/topology.c`, `topology_sysfs_get_node_props`):
/// `sscanf(value, "%u.%u.%u%c") == 3`, so exactly three decimal numbers and
/// nothing after them, with major ≤ 63 and minor, stepping ≤ 255. libhsakmt
/// fails the whole topology (and so `hsa_init`) on anything else.
pub fn parse_gfx_version(value: &str) -> Result<(u8, u8, u8), &'static str> {
    const FORMAT: &str = "is not major.minor.stepping (three decimal numbers)";
    let mut parts = value.split('.');
    let mut number = |max: u32| -> Result<u8, &'static str> {
        let part = parts.next().ok_or(FORMAT)?;
        // `%u` skips leading white space.
        let digits = part.trim_start();
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(FORMAT);
        }
        match digits.parse::<u32>() {
            Ok(n) if n <= max => Ok(n as u8),
            _ => Err("is out of range (major at most 63, minor and stepping at most 255)"),
        }
    };
    let version = (number(63)?, number(255)?, number(255)?);
    if parts.next().is_some() {
        return Err(FORMAT);
    }
    Ok(version)
}

/// The processor an `HSA_OVERRIDE_GFX_VERSION` value names.
pub fn gfx_override_processor(value: &str) -> Result<&'static Processor, &'static str> {
    let version = parse_gfx_version(value)?;
    Processor::from_isa_version(version).ok_or("names no processor LLVM 22 knows")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn override_list() {
        let (d, r) = devices("gfx90a:xnack-:sramecc+, sm_80");
        assert_eq!(r.status, Status::Found(2));
        assert_eq!(d[0].to_string(), "gfx90a:sramecc+:xnack-");
        assert_eq!(d[1].to_string(), "sm_80");
        let (d, r) = devices("gfx90a,gfx9999");
        assert!(d.is_empty());
        assert_eq!(r.status, Status::Unavailable);
        assert_eq!(
            r.reason.unwrap().to_string(),
            "OFFLOAD_LOADER_DEVICES: `gfx9999`: unknown AMDGPU processor `gfx9999`"
        );
        let (_, r) = devices(" , ");
        assert_eq!(r.status, Status::NoDevice);
    }

    #[test]
    fn code_names_are_not_devices() {
        let e = |s| parse_device(s).unwrap_err();
        assert_eq!(
            e("sm_90a"),
            "names code, not a device: write the device's compute capability, sm_90"
        );
        assert!(e("sm_100f").ends_with("sm_100"));
        assert!(e("compute_80").ends_with("sm_80"));
        assert_eq!(
            e("gfx11-generic"),
            "gfx11-generic is a generic target: it names code for a family of processors, not a device"
        );
        assert_eq!(
            e("gfx1100:xnack+"),
            "processor gfx1100 does not support xnack"
        );
        assert!(parse_device("sm_120").is_ok());
    }

    #[test]
    fn gfx_versions() {
        assert_eq!(parse_gfx_version("10.3.0"), Ok((10, 3, 0)));
        assert_eq!(parse_gfx_version("9.0.10"), Ok((9, 0, 10)));
        assert_eq!(parse_gfx_version(" 9. 0.8"), Ok((9, 0, 8)));
        for bad in ["9.0", "9.0.8.1", "9.0.8 ", "9.0.x", "", "gfx90a", "9.0.-1"] {
            assert!(parse_gfx_version(bad).is_err(), "{bad:?}");
        }
        assert!(parse_gfx_version("64.0.0")
            .unwrap_err()
            .contains("out of range"));
        assert_eq!(gfx_override_processor("9.0.10").unwrap().name, "gfx90a");
        assert_eq!(
            gfx_override_processor("9.9.9").unwrap_err(),
            "names no processor LLVM 22 knows"
        );
    }
}
