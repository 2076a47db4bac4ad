//! The probe's report: what is in each file, and which image each device would
//! load. Serialised as the `--json` contract documented in README.md.

use std::path::Path;

use offload_loader::discover::{link_stubs, FileErrorKind};
use offload_loader::{
    select, Container, DeviceTarget, Image, ImageSource, Limits, MappedFile, Policy, Scope,
    Selection,
};
use rayon::prelude::*;
use serde::Serialize;

use offload_loader::verdict::Module;

use crate::image::{renamed, Part};
use crate::verdict::{Rule, Verdict, VerdictRow};

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
    /// The `--device` as given, where it left features unstated: this row
    /// is one of the settings it may run in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub setting_of: Option<String>,
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
    /// Per device: which files with GPU code of its vendor have an image for it.
    pub coverage: Vec<CoverageRow>,
}

/// How many of the files with code for a device's kind of GPU serve it.
#[derive(Debug, Serialize)]
pub struct CoverageRow {
    /// Index into `devices`.
    pub device: usize,
    /// Files that can run on it (verdict `loads` or `partly`).
    pub objects_with_image: usize,
    /// Files that cannot (verdict `fails`), by path.
    pub objects_without_image: Vec<String>,
    /// Files of GPU code for other GPUs only, by path.
    pub objects_for_other_gpus: Vec<String>,
    /// No file with GPU code of its vendor can run on it: those files fail
    /// there or are all for other GPUs (exit status 1). A device of a vendor
    /// none of the files has code for misses nothing.
    pub fails: bool,
}

/// Coverage of `objects` for each of `devices`, by their verdicts: files
/// that can run there, files that cannot, and files of GPU code for other
/// GPUs (not a failure).
pub fn coverage(devices: &[DeviceRow], objects: &[ObjectReport]) -> Vec<CoverageRow> {
    (0..devices.len())
        .map(|d| {
            let mut row = CoverageRow {
                device: d,
                objects_with_image: 0,
                objects_without_image: Vec::new(),
                objects_for_other_gpus: Vec::new(),
                fails: false,
            };
            for o in objects {
                match o.verdicts.iter().find(|v| v.device == d).map(|v| v.verdict) {
                    Some(Verdict::Loads | Verdict::Partly) => row.objects_with_image += 1,
                    Some(Verdict::Fails) => row.objects_without_image.push(o.path.clone()),
                    Some(Verdict::ForOtherGpus) => row.objects_for_other_gpus.push(o.path.clone()),
                    None => {}
                }
            }
            row.fails = row.objects_with_image == 0
                && !(row.objects_without_image.is_empty() && row.objects_for_other_gpus.is_empty());
            row
        })
        .collect()
}

impl ObjectReport {
    /// Whether a file found in a directory (or by `--deps`, `--pid`) is
    /// reported: it holds offload code, or is a format that can and could
    /// not be read. Named files are always reported.
    pub fn shown(&self) -> bool {
        !self.containers.is_empty() || (self.error.is_some() && !self.not_offload_format)
    }

    /// A path that could not be read at all (a directory the walk could not list).
    pub fn failed(path: &Path, error: String) -> ObjectReport {
        ObjectReport {
            path: path.display().to_string(),
            not_offload_format: false,
            error: Some(format!("{}: {error}", path.display())),
            containers: Vec::new(),
            verdicts: Vec::new(),
        }
    }
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
    /// Per device it has code for: what it means there, and by which rule.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub verdicts: Vec<VerdictRow>,
}

/// One container (or a container that failed to parse, with `error`); for
/// the offload binaries of one section, all of them: the images the runtime
/// weighs against each other (a selection scope).
#[derive(Debug, Serialize)]
pub struct ContainerReport {
    pub section: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// File offset of the container (of the first, for several).
    pub offset: u64,
    /// Bytes it occupies in the file (from the first's start to the last's end).
    pub size: u64,
    /// How many containers of `format` the images come from, when more than one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub containers: Option<usize>,
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
    /// Whose rule says what a device without an image in it means (`null`
    /// when broken).
    #[serde(serialize_with = "crate::verdict::optional_rule_name")]
    pub rule: Option<Rule>,
    /// The module as a verdict counts it (`None` when broken).
    #[serde(skip)]
    pub module: Option<Module>,
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
    /// Feature settings the chosen image relies on that the device did not
    /// report (`xnack+`): the fit is assumed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub assumed: Vec<String>,
    /// How the chosen image becomes code for the device, where it is
    /// portable code: compiled at load from AMD's SPIR-V by the HIP runtime
    /// (with the ROCm and comgr that do it), or JIT-compiled from PTX.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compiled_at_load: Option<&'static str>,
    /// What the vendor runtime would load instead, where its rule differs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vendor: Option<VendorReport>,
    pub rejected: Vec<RejectedReport>,
}

/// The image a vendor runtime would load where it is not the chosen one.
#[derive(Debug, Serialize)]
pub struct VendorReport {
    /// `hip` or `libomptarget`.
    pub runtime: &'static str,
    /// Index into `images`, or null.
    pub image: Option<usize>,
    /// Its rule.
    pub rule: &'static str,
}

/// An image not chosen, and why.
#[derive(Debug, Serialize)]
pub struct RejectedReport {
    pub image: usize,
    pub reason: String,
}

/// Inspects `path` (whose bytes are `part` of another file where given)
/// and selects for `devices`; `visit` is handed each selection scope with
/// its selections so images can be written out, and returns what failed.
/// Scopes are handled in parallel (a library's bundles inflate on several
/// cores); the report keeps file order.
pub fn inspect(
    path: &Path,
    part: Option<Part<'_>>,
    named: bool,
    devices: &[DeviceRow],
    limits: &Limits,
    visit: &(dyn Fn(&Scope<'_, '_>, &[Selection]) -> Vec<String> + Sync),
) -> (ObjectReport, Vec<String>) {
    let mut report = ObjectReport {
        // What `display` writes, without its formatting machinery (2,200
        // instructions a path, this for every file a scan finds).
        path: path
            .to_str()
            .map_or_else(|| path.to_string_lossy().into_owned(), str::to_owned),
        not_offload_format: false,
        error: None,
        containers: Vec::new(),
        verdicts: Vec::new(),
    };
    // A file found in a directory that cannot hold offload code is told
    // from its headers alone, without mapping it (most of a library
    // directory); a named file is read whole: GPU code may lie among its
    // data, and so is a part (an image's file, found to hold GPU code).
    let opened = match part {
        Some(part) => part.open(path).map(Some),
        None if named => MappedFile::open(path).map(Some),
        None => MappedFile::open_if_offload(path),
    };
    let file = match opened {
        Ok(Some(f)) => f,
        Ok(None) => return (report, Vec::new()),
        Err(e) => {
            report.not_offload_format = matches!(
                e.kind,
                FileErrorKind::Unrecognised | FileErrorKind::NotRegular(_)
            );
            report.error = Some(e.to_string());
            return (report, Vec::new());
        }
    };
    // A part's errors name the file it is, not its holder.
    let sections = match file.containers(limits).map_err(|e| renamed(e, path)) {
        Ok(s) => s,
        Err(e) => {
            report.not_offload_format = matches!(
                e.kind,
                FileErrorKind::Unrecognised | FileErrorKind::NotRegular(_)
            );
            report.error = Some(e.to_string());
            return (report, Vec::new());
        }
    };
    let mut errors = Vec::new();
    let stubs = link_stubs(file.bytes());
    for found in &sections {
        let row = || ContainerReport {
            section: found.section.name.clone(),
            member: found.section.member.clone(),
            offset: 0,
            size: 0,
            containers: None,
            format: None,
            compression: None,
            images: Vec::new(),
            selected: Vec::new(),
            error: None,
            kernel_less: false,
            rule: None,
            module: None,
        };
        let mut rows = Vec::new();
        for e in found.containers.iter().filter_map(|c| c.as_ref().err()) {
            rows.push(ContainerReport {
                offset: e.container_offset(),
                error: Some(format!("{}: {e}", path.display())),
                ..row()
            });
        }
        let done: Vec<(ContainerReport, Vec<String>)> = found
            .scopes()
            .par_iter()
            .map(|scope| {
                let selections: Vec<Selection> = devices
                    .iter()
                    .map(|d| select(&d.target, scope, &Policy::default()))
                    .collect();
                let failed = visit(scope, &selections);
                let mut row = row();
                let module = Module::of(&found.section, scope, &stubs);
                row.rule = Some(module.rule);
                row.kernel_less = module.kernel_less;
                row.module = Some(module);
                (scope_row(path, scope, selections, row), failed)
            })
            .collect();
        for (r, failed) in done {
            rows.push(r);
            errors.extend(failed);
        }
        rows.sort_by_key(|r| r.offset);
        report.containers.extend(rows);
    }
    report.verdicts = verdicts(&report.containers, devices);
    (report, errors)
}

/// The verdicts of a file of `containers` for `devices` (broken containers
/// are no modules).
fn verdicts(containers: &[ContainerReport], devices: &[DeviceRow]) -> Vec<VerdictRow> {
    let modules: Vec<(&ContainerReport, Module)> = containers
        .iter()
        .filter_map(|c| Some((c, c.module?)))
        .collect();
    let targets: Vec<DeviceTarget> = devices.iter().map(|d| d.target).collect();
    let plain: Vec<Module> = modules.iter().map(|(_, m)| *m).collect();
    crate::verdict::of(&plain, &targets, |m, d| {
        modules[m].0.selected[d].image.is_some()
    })
}

/// The row of one selection scope.
fn scope_row(
    path: &Path,
    scope: &Scope<'_, '_>,
    selections: Vec<Selection>,
    mut row: ContainerReport,
) -> ContainerReport {
    let containers = scope.containers();
    let (first, last) = (containers[0], containers[containers.len() - 1]);
    row.offset = first.offset();
    row.size = last.offset() + last.len() - first.offset();
    row.containers = (containers.len() > 1).then_some(containers.len());
    row.format = Some(first.format().name());
    row.compression = first.compression().map(|h| CompressionReport {
        version: h.version,
        method: h.method.name(),
        uncompressed_size: h.uncompressed_size,
    });
    row.images = scope
        .images()
        .iter()
        .filter_map(|i| {
            let (c, j) = scope.locate(i.index)?;
            let chosen = selections.iter().any(|s| s.chosen == Some(i.index));
            Some(image_row(path, c, &c.images()[j], chosen))
        })
        .collect();
    row.selected = selections
        .into_iter()
        .enumerate()
        .map(|(device, s)| SelectedReport {
            device,
            image: s.chosen,
            compiled_at_load: s.compatible.first().and_then(|(i, fit)| {
                let image = scope.images().get(*i)?;
                offload_loader::select::compiled_at_load(image, fit)
            }),
            assumed: s.assumed,
            vendor: s
                .vendor
                .filter(|v| v.image != s.chosen)
                .map(|v| VendorReport {
                    runtime: v.runtime.name(),
                    image: v.image,
                    rule: v.runtime.rule(),
                }),
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
    row
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
