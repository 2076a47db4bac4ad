//! What the environment says instead of the drivers: `OFFLOAD_LOADER_DEVICES`
//! and `HSA_OVERRIDE_GFX_VERSION`.

use offload_loader::select::DeviceTarget;
use offload_loader::target::Processor;

use crate::report::{Backend, BackendReport, Reason, Status};

/// The device targets `OFFLOAD_LOADER_DEVICES` lists: comma-separated, each
/// spelled as [`DeviceTarget::parse`] reads it (as `offload-probe --device`
/// does): `gfx90a:sramecc+:xnack-`, `sm_90`, `sm90`, `90`, `9.0`, or a
/// product name (`MI300X`, `H100`, `RTX 4090`). The list
/// replaces detection entirely: no driver is loaded, and the devices cannot
/// load images.
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
            DeviceTarget::parse(entry).map_err(|e| Reason::BadOverride {
                entry: entry.into(),
                detail: e.to_string(),
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
    fn devices_are_spelled_as_everywhere_else() {
        let one = |s| devices(s).0;
        // The device of a capability, however its code or product is named.
        for spelling in [
            "sm_90",
            "sm_90a",
            "9.0",
            "sm90",
            "90",
            "H100",
            "NVIDIA H100 80GB HBM3",
        ] {
            assert_eq!(
                one(spelling),
                [DeviceTarget::parse("sm_90").unwrap()],
                "{spelling}"
            );
        }
        let (_, r) = devices("compute_80");
        assert_eq!(
            r.reason.unwrap().to_string(),
            "OFFLOAD_LOADER_DEVICES: `compute_80`: `compute_80` names code, not a device: PTX, \
             which a device compiles for itself; write the device's compute capability, sm_80"
        );
        let (_, r) = devices("gfx11-generic");
        assert!(r.to_string().contains("names code, not a device"), "{r}");
        let (_, r) = devices("gfx1100:xnack+");
        assert!(
            r.to_string()
                .ends_with("processor gfx1100 does not support xnack"),
            "{r}"
        );
    }

    /// Every product name is taken as `--device` takes it, in a list too.
    #[test]
    fn product_names_are_devices() {
        use offload_loader::target::Product;
        for product in Product::amd().iter().chain(Product::nvidia()) {
            let (d, r) = devices(&format!("{}, {}", product.name, product.target));
            assert_eq!(r.status, Status::Found(2), "{}: {r}", product.name);
            assert_eq!(d[0], d[1], "{}", product.name);
            assert_eq!(d[0].to_string(), product.target, "{}", product.name);
        }
        let (d, r) = devices("MI300X,RTX 4090");
        assert_eq!(r.status, Status::Found(2));
        assert_eq!(d[0].to_string(), "gfx942");
        assert_eq!(d[1].to_string(), "sm_89");
        let (d, r) = devices("gfx90a,H10");
        assert!(d.is_empty());
        let reason = r.reason.unwrap().to_string();
        assert!(
            reason.starts_with(
                "OFFLOAD_LOADER_DEVICES: `H10`: `H10` is not a device name known here"
            ),
            "{reason}"
        );
        assert!(
            reason.contains("did you mean NVIDIA H100 (sm_90)"),
            "{reason}"
        );
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
