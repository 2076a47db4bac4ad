//! The probe's report: what is in each file, and which image each device would
//! load. Serialised as the `--json` contract documented in README.md.

use std::path::Path;

use offload_loader::discover::FileErrorKind;
use offload_loader::{
    select, Container, DeviceTarget, Image, ImageSource, Limits, MappedFile, Policy, Selection,
};
use serde::Serialize;

/// A device the report selects for.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceRow {
    /// Full target: `gfx90a:sramecc+:xnack-`, `sm_90`.
    pub target_id: String,
    /// `amd` or `nvidia`.
    pub vendor: String,
    /// Where it came from: `override`, `hsa`, `kfd`, `cuda`, `command-line`.
    pub source: String,
    /// The device's name, if known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// CUDA driver version (1000 × major + 10 × minor).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<u32>,
    /// PCI bus ID (CUDA).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
    /// Whether xnack/sramecc could not be told (KFD).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub features_unknown: bool,
    #[serde(skip)]
    pub target: DeviceTarget,
}

/// What one detection backend found.
#[derive(Debug, Clone, Serialize)]
pub struct BackendRow {
    /// `hsa`, `kfd`, `cuda`, `override`.
    pub name: String,
    /// `found`, `no-device`, `unavailable`, `skipped`, `error`.
    pub status: String,
    /// Why, as one sentence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The whole report.
#[derive(Debug, Serialize)]
pub struct Report {
    pub devices: Vec<DeviceRow>,
    pub backends: Vec<BackendRow>,
    pub objects: Vec<ObjectReport>,
}

/// One inspected file.
#[derive(Debug, Serialize)]
pub struct ObjectReport {
    pub path: String,
    /// The file is not one that can hold offload code (not ELF, archive or container).
    #[serde(skip)]
    pub not_offload_format: bool,
    /// Set when the file could not be read or parsed at all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub containers: Vec<ContainerReport>,
}

/// One container (or a container that failed to parse, with `error`).
#[derive(Debug, Serialize)]
pub struct ContainerReport {
    pub section: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// File offset of the container.
    pub offset: u64,
    /// Bytes it occupies in the file.
    pub size: u64,
    /// `bundle`, `compressed-bundle`, `offload-binary`, `nv-fatbin`; `null` when broken.
    pub format: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compression: Option<CompressionReport>,
    pub images: Vec<ImageReport>,
    pub selected: Vec<SelectedReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// An NVIDIA fat binary with no kernels (nvlink's `*_dlink` stub): a
    /// device without an image in it lacks nothing.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub kernel_less: bool,
}

/// A compressed bundle's header.
#[derive(Debug, Serialize)]
pub struct CompressionReport {
    pub version: u16,
    pub method: &'static str,
    pub uncompressed_size: u64,
}

/// One image.
#[derive(Debug, Serialize)]
pub struct ImageReport {
    pub bundle_id: String,
    pub offload_kind: String,
    pub triple: String,
    pub target_id: String,
    /// File offset of the image; for a compressed image, its offset inside the
    /// uncompressed bundle.
    pub offset: u64,
    pub size: u64,
    pub compressed: bool,
    /// ROCm code-object URI: `file://PATH#offset=N&size=M`. For a compressed
    /// image it addresses the whole compressed bundle, which must be inflated.
    pub uri: String,
    /// What the image's own header says it is, when it was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<&'static str>,
    /// How an NVIDIA fat-binary entry is compressed: `zstd`, `lz4`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compression: Option<&'static str>,
}

/// The outcome for one device in one container.
#[derive(Debug, Serialize)]
pub struct SelectedReport {
    /// Index into `devices`.
    pub device: usize,
    /// Index into `images`, or null.
    pub image: Option<usize>,
    pub rejected: Vec<RejectedReport>,
}

/// An image not chosen, and why.
#[derive(Debug, Serialize)]
pub struct RejectedReport {
    pub image: usize,
    pub reason: String,
}

/// Inspects `path` and selects for `devices`; `extract` is handed each
/// container with the selections so images can be written out.
pub fn inspect(
    path: &Path,
    devices: &[DeviceRow],
    limits: &Limits,
    mut visit: impl FnMut(&Container<'_>, &[Selection]),
) -> ObjectReport {
    let mut report = ObjectReport {
        path: path.display().to_string(),
        not_offload_format: false,
        error: None,
        containers: Vec::new(),
    };
    let file = match MappedFile::open(path) {
        Ok(f) => f,
        Err(e) => {
            report.error = Some(e.to_string());
            return report;
        }
    };
    let sections = match file.containers(limits) {
        Ok(s) => s,
        Err(e) => {
            report.not_offload_format = matches!(e.kind, FileErrorKind::Unrecognised);
            report.error = Some(e.to_string());
            return report;
        }
    };
    for found in sections {
        for container in found.containers {
            let mut row = ContainerReport {
                section: found.section.name.clone(),
                member: found.section.member.clone(),
                offset: 0,
                size: 0,
                format: None,
                compression: None,
                images: Vec::new(),
                selected: Vec::new(),
                error: None,
                kernel_less: false,
            };
            match container {
                Err(e) => {
                    row.offset = e.offset;
                    row.error = Some(format!("{}: {e}", path.display()));
                }
                Ok(c) => {
                    let selections: Vec<Selection> = devices
                        .iter()
                        .map(|d| select(&d.target, &c, &Policy::default()))
                        .collect();
                    visit(&c, &selections);
                    row.offset = c.offset();
                    row.size = c.len();
                    row.format = Some(c.format().name());
                    row.kernel_less = c.is_kernel_less();
                    row.compression = c.compression().map(|h| CompressionReport {
                        version: h.version,
                        method: h.method.name(),
                        uncompressed_size: h.uncompressed_size,
                    });
                    row.images = c
                        .images()
                        .iter()
                        .map(|i| {
                            let chosen = selections.iter().any(|s| s.chosen == Some(i.index));
                            image_row(path, &c, i, chosen)
                        })
                        .collect();
                    row.selected = selections
                        .into_iter()
                        .enumerate()
                        .map(|(device, s)| SelectedReport {
                            device,
                            image: s.chosen,
                            rejected: s
                                .rejected
                                .into_iter()
                                .map(|(image, why)| RejectedReport {
                                    image,
                                    reason: why.to_string(),
                                })
                                .collect(),
                        })
                        .collect();
                }
            }
            report.containers.push(row);
        }
    }
    report
}

/// One image's row; the header of a chosen image is read for its `code`
/// (selection read it too), the others say what their container declares.
fn image_row(path: &Path, c: &Container<'_>, image: &Image, chosen: bool) -> ImageReport {
    let (offset, uri) = if image.compressed {
        (
            image.offset,
            format!(
                "file://{}#offset={}&size={}",
                path.display(),
                c.offset(),
                c.len()
            ),
        )
    } else {
        let offset = c.offset() + image.offset;
        (
            offset,
            format!(
                "file://{}#offset={offset}&size={}",
                path.display(),
                image.size
            ),
        )
    };
    ImageReport {
        bundle_id: image.id.clone(),
        offload_kind: image.offload_kind.to_string(),
        triple: image.triple.to_string(),
        target_id: image.arch.to_string(),
        offset,
        size: image.size,
        compressed: image.compressed,
        uri,
        code: image
            .content
            .clone()
            .or_else(|| chosen.then(|| c.read_content(image.index)).flatten())
            .map(|content| content.code)
            .or(image.declared)
            .map(|code| code.name()),
        compression: c
            .nv_entry(image.index)
            .filter(|e| e.is_compressed())
            .map(|e| e.compression().name()),
    }
}
