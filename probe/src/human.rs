//! The human-readable report: a compact table per file, containers with the
//! same target-ID set grouped ("111 bundles, each: ..."), and per device the
//! image it would load or why none fits.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::report::{ContainerReport, Report};
use crate::verdict::{Rule, Verdict};

/// Renders `report`; `verbose` lists every rejected image with its reason.
pub fn render(report: &Report, verbose: bool) -> String {
    let mut out = String::new();
    if report.devices.is_empty() {
        out.push_str("devices: none found (use --device TARGET for a what-if)\n");
    } else {
        out.push_str("devices:\n");
        for (i, d) in report.devices.iter().enumerate() {
            let name = d
                .name
                .as_deref()
                .map(|n| format!(" {n}"))
                .unwrap_or_default();
            let of = d
                .setting_of
                .as_deref()
                .map(|g| format!(", one setting of {g}, whose features were not given"))
                .unwrap_or_default();
            let _ = writeln!(out, "  [{i}] {}{name} ({}{of})", d.target_id, d.source);
        }
    }
    if !report.backends.is_empty() {
        out.push_str("backends:\n");
    }
    for b in &report.backends {
        let reason = b
            .reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default();
        let _ = writeln!(out, "  {} {}{reason}", b.name, b.status);
    }
    for object in &report.objects {
        let _ = writeln!(out, "\n{}", object.path);
        if let Some(e) = &object.error {
            let _ = writeln!(out, "  error: {e}");
            continue;
        }
        if object.containers.is_empty() {
            out.push_str("  no offload code\n");
        }
        for group in group(&object.containers) {
            render_group(&mut out, report, &group, verbose);
        }
        for v in &object.verdicts {
            let target = &report.devices[v.device].target_id;
            if let [one] = &v.groups[..] {
                let _ = writeln!(
                    out,
                    "  => {target}: {} ({} rule): {}",
                    verdict_name(v.verdict),
                    rule_name(one.rule),
                    one.why
                );
                continue;
            }
            let _ = writeln!(
                out,
                "  => {target}: {} ({} modules under {} rules)",
                verdict_name(v.verdict),
                v.containers,
                v.groups.len()
            );
            for g in &v.groups {
                let _ = writeln!(
                    out,
                    "       {} ({} rule): {}",
                    verdict_name(g.verdict),
                    rule_name(g.rule),
                    g.why
                );
            }
        }
    }
    render_coverage(&mut out, report);
    out
}

fn verdict_name(v: Verdict) -> &'static str {
    match v {
        Verdict::Loads => "loads",
        Verdict::Partly => "loads, partly",
        Verdict::Fails => "FAILS",
        Verdict::ForOtherGpus => "for other GPUs",
    }
}

fn rule_name(r: Rule) -> &'static str {
    match r {
        Rule::Hip => "HIP",
        Rule::Openmp => "OpenMP",
        Rule::Cuda => "CUDA",
        Rule::Data => "loaded-as-data",
        Rule::File => "per-GPU file",
    }
}

/// Per device, the files with code of its vendor that have no image for it:
/// printed when more than one file was inspected, or when nothing inspected
/// has code for a device.
fn render_coverage(out: &mut String, report: &Report) {
    let mut wrote = false;
    for row in &report.coverage {
        let device = &report.devices[row.device];
        let others = row.objects_for_other_gpus.len();
        let total = row.objects_with_image + row.objects_without_image.len() + others;
        let nothing = row.fails && row.objects_without_image.is_empty();
        if !nothing && (report.objects.len() < 2 || total == 0) {
            continue;
        }
        if !wrote {
            out.push_str("\ncoverage:\n");
            wrote = true;
        }
        let vendor = device.vendor.to_uppercase();
        if nothing {
            let _ = writeln!(
                out,
                "  {}: FAILS: the {others} files with {vendor} GPU code are all for other GPUs: \
                 nothing here can run on it",
                device.target_id
            );
            continue;
        }
        let others = if others > 0 {
            format!(" ({others} for other GPUs: these devices do not load them)")
        } else {
            String::new()
        };
        if row.objects_without_image.is_empty() {
            let _ = writeln!(
                out,
                "  {}: all {} files with {vendor} GPU code for it can run there{others}",
                device.target_id, row.objects_with_image
            );
            continue;
        }
        const SHOWN: usize = 10;
        let mut names: Vec<&str> = row
            .objects_without_image
            .iter()
            .take(SHOWN)
            .map(String::as_str)
            .collect();
        let more = row.objects_without_image.len().saturating_sub(SHOWN);
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        names.dedup();
        let _ = writeln!(
            out,
            "  {}: {} of {total} files with {vendor} GPU code cannot run there: {}{more}{others}",
            device.target_id,
            row.objects_without_image.len(),
            names.join(", ")
        );
    }
}

/// Section, format, whether kernel-less, and image IDs (sorted): what
/// containers of one group share.
type GroupKey<'a> = (String, Option<&'a str>, bool, Vec<&'a str>);

/// Containers of one section with the same format and the same image IDs,
/// in any order (jax's fat binaries hold the same nine images in different
/// orders).
fn group(containers: &[ContainerReport]) -> Vec<Vec<&ContainerReport>> {
    let mut groups: BTreeMap<GroupKey<'_>, Vec<&ContainerReport>> = BTreeMap::new();
    let mut order = Vec::new();
    for c in containers {
        if c.error.is_some() {
            order.push(vec![c]);
            continue;
        }
        let mut ids: Vec<&str> = c.images.iter().map(|i| i.bundle_id.as_str()).collect();
        ids.sort_unstable();
        let key = (c.section.clone(), c.format, c.kernel_less, ids);
        groups.entry(key).or_default().push(c);
    }
    order.extend(groups.into_values());
    order.sort_by_key(|g| g[0].offset);
    order
}

/// For each image of `c`, the index of the image of `first` with the same
/// bundle ID (the n-th of an ID to the n-th): the two hold the same IDs.
fn in_first_order(first: &ContainerReport, c: &ContainerReport) -> Vec<usize> {
    let mut taken = vec![false; first.images.len()];
    c.images
        .iter()
        .enumerate()
        .map(|(j, image)| {
            let at = (0..first.images.len())
                .find(|&i| !taken[i] && first.images[i].bundle_id == image.bundle_id)
                .unwrap_or(j);
            if let Some(t) = taken.get_mut(at) {
                *t = true;
            }
            at
        })
        .collect()
}

fn render_group(out: &mut String, report: &Report, group: &[&ContainerReport], verbose: bool) {
    let first = group[0];
    if let Some(e) = &first.error {
        let _ = writeln!(
            out,
            "  {} at {:#x}: error: {e}",
            first.section, first.offset
        );
        return;
    }
    let format = first.format.unwrap_or("?");
    let bytes: u64 = group.iter().map(|c| c.size).sum();
    let member = first
        .member
        .as_deref()
        .map(|m| format!("{m}: "))
        .unwrap_or_default();
    let compressed = first
        .compression
        .as_ref()
        .map(|c| format!(", CCOB v{} {}", c.version, c.method))
        .unwrap_or_default();
    // Image sizes are of the code itself: inflated where the container
    // stores it compressed, so they can exceed the bytes in the file.
    let inflated = group.iter().any(|c| {
        c.compression.is_some()
            || c.images
                .iter()
                .any(|i| i.compressed || i.compression.is_some())
    });
    let sizes = match (group.len() > 1, inflated) {
        (false, false) => "",
        (false, true) => " (image sizes uncompressed)",
        (true, false) => " (image sizes are totals)",
        (true, true) => " (image sizes are uncompressed totals)",
    };
    let sizes = if first.images.is_empty() {
        " (emptied: no image left)"
    } else {
        sizes
    };
    if group.len() == 1 {
        let _ = writeln!(
            out,
            "  {member}{} {format} at {:#x}, {} in the file{compressed}, {} images{sizes}:",
            first.section,
            first.offset,
            size(bytes),
            first.images.len()
        );
    } else {
        let _ = writeln!(
            out,
            "  {member}{} {} {format}s, {} in the file{compressed}, each with {} images{sizes}:",
            first.section,
            group.len(),
            size(bytes),
            first.images.len()
        );
    }
    let orders: Vec<Vec<usize>> = group.iter().map(|c| in_first_order(first, c)).collect();
    let mut each = vec![0u64; first.images.len()];
    for (c, order) in group.iter().zip(&orders) {
        for (image, &i) in c.images.iter().zip(order) {
            if let Some(total) = each.get_mut(i) {
                *total += image.size;
            }
        }
    }
    for (i, image) in first.images.iter().enumerate() {
        let code = match (image.code, image.compression) {
            (Some(code), Some(method)) => format!("  {code}, {method}"),
            (Some(code), None) => format!("  {code}"),
            (None, Some(method)) => format!("  {method}"),
            (None, None) => String::new(),
        };
        let _ = writeln!(
            out,
            "    [{i}] {:<48} {:>10}{code}",
            image.bundle_id,
            size(each[i])
        );
    }
    if first.kernel_less {
        out.push_str(
            "    (no kernels: nvlink's device-link stub; no device needs an image from it)\n",
        );
    }
    for (d, device) in report.devices.iter().enumerate() {
        let vendor = device.target.vendor();
        if !first.module.is_some_and(|m| m.targets(vendor)) {
            let _ = writeln!(
                out,
                "  device [{d}] {}: no {} code here",
                device.target_id, device.vendor
            );
            continue;
        }
        // Each container's choice, as the index of the same image in `first`.
        let mut chosen: BTreeMap<Option<usize>, usize> = BTreeMap::new();
        for (c, order) in group.iter().zip(&orders) {
            let image = c.selected[d].image.and_then(|j| order.get(j).copied());
            *chosen.entry(image).or_default() += 1;
        }
        for (image, count) in &chosen {
            let of = if group.len() > 1 {
                format!(" in {count}/{}", group.len())
            } else {
                String::new()
            };
            match image {
                Some(i) => {
                    let _ = writeln!(
                        out,
                        "  device [{d}] {} loads [{i}] {}{of}",
                        device.target_id, first.images[*i].bundle_id
                    );
                    let Some(c) = group.iter().zip(&orders).find_map(|(c, order)| {
                        let mine = c.selected[d].image.and_then(|j| order.get(j));
                        (mine == Some(i)).then_some(c)
                    }) else {
                        continue;
                    };
                    let s = &c.selected[d];
                    if let Some(how) = s.compiled_at_load {
                        let _ = writeln!(out, "      {how}");
                    }
                    if !s.assumed.is_empty() {
                        let _ = writeln!(
                            out,
                            "      assumed: it needs {}, which the device did not report",
                            s.assumed.join(" and ")
                        );
                    }
                    if let Some(v) = &s.vendor {
                        let theirs = match v.image {
                            Some(j) => format!("[{j}] {}", c.images[j].bundle_id),
                            None => "nothing".into(),
                        };
                        let _ = writeln!(
                            out,
                            "      {} would load {theirs} ({}); [{i}] is the best fit",
                            v.runtime, v.rule
                        );
                    }
                }
                None => {
                    let _ = writeln!(
                        out,
                        "  device [{d}] {}: no compatible image{of}",
                        device.target_id
                    );
                }
            }
        }
        // Why the others lost: always when nothing fits, otherwise with -v.
        let example = group
            .iter()
            .find(|c| c.selected[d].image.is_none())
            .unwrap_or(&first);
        if verbose || example.selected[d].image.is_none() {
            for r in &example.selected[d].rejected {
                if !verbose && example.images[r.image].offload_kind == "host" {
                    continue;
                }
                let _ = writeln!(
                    out,
                    "      not [{}] {}: {}",
                    r.image, example.images[r.image].bundle_id, r.reason
                );
            }
        }
    }
}

/// `bytes` in B, KiB, MiB or GiB, as the human reports write sizes.
pub(crate) fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
