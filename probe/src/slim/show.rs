//! The slim command's report: per file and in total, for people and as
//! JSON; with `--output`, what the tree got.

use std::collections::BTreeMap;
use std::path::Path;

use offload_slim::{FileReport, ImageReport, Options, Outcome, WheelReport};

use super::complete::{Summary, FOR_OTHER_GPUS};
use crate::human::size;

/// What becomes of a file for other GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtherGpuFiles {
    /// Not in the output tree (`--output`, or a plain `--dry-run`).
    LeftOut,
    /// Removed (`--in-place --remove-other-gpu-files`).
    Removed,
    /// Left where it is (`--in-place` alone).
    Kept,
}

/// A run, to report.
pub struct Run<'a> {
    pub reports: &'a [FileReport],
    pub options: &'a Options,
    pub errors: &'a [String],
    pub dry_run: bool,
    pub other_gpus: OtherGpuFiles,
    /// With `--output`: the tree and what it got.
    pub tree: Option<(&'a Path, &'a Summary)>,
    /// The wheels slimmed as wheels (their files are among `reports`).
    pub wheels: &'a [WheelReport],
    /// The images slimmed as images (their files are among `reports`).
    pub images: &'a [ImageReport],
}

impl Run<'_> {
    /// Whether the file of `r` goes (or would go): for other GPUs, left
    /// out or removed.
    fn gone(&self, r: &FileReport) -> bool {
        let Some(other) = &r.other_gpus else {
            return false;
        };
        r.error.is_none()
            && match self.other_gpus {
                OtherGpuFiles::LeftOut => true,
                OtherGpuFiles::Removed => other.removed || self.dry_run,
                OtherGpuFiles::Kept => false,
            }
    }

    /// Its size after the run.
    fn after(&self, r: &FileReport) -> u64 {
        if self.gone(r) {
            0
        } else {
            r.after
        }
    }

    /// What became of a file for other GPUs, in words.
    fn other_state(&self, r: &FileReport) -> &'static str {
        match (self.other_gpus, self.dry_run, self.gone(r)) {
            (_, _, false) if r.error.is_some() => "error, untouched",
            (OtherGpuFiles::Kept, _, _) => "kept (--remove-other-gpu-files removes it)",
            (OtherGpuFiles::LeftOut, true, _) => "would be left out",
            (OtherGpuFiles::LeftOut, false, _) => "left out",
            (OtherGpuFiles::Removed, true, _) => "would be removed",
            (OtherGpuFiles::Removed, false, _) => "removed",
        }
    }
}

pub fn human(run: &Run<'_>) -> String {
    use std::fmt::Write;
    let (reports, errors, dry_run) = (run.reports, run.errors, run.dry_run);
    let mut s = String::new();
    let (mut before, mut after) = (0u64, 0u64);
    for r in reports {
        before += r.before;
        after += run.after(r);
        if r.other_gpus.is_some() {
            other_gpus(&mut s, run, r);
            continue;
        }
        let state = if r.error.is_some() {
            "error, untouched"
        } else if !r.changes() {
            "unchanged"
        } else if dry_run {
            "dry run"
        } else if r.written {
            "written"
        } else {
            "not written"
        };
        let _ = writeln!(
            s,
            "{}: {} -> {} ({} bytes -> {} bytes), {state}",
            r.path.display(),
            size(r.before),
            size(r.after),
            r.before,
            r.after
        );
        // Containers with the same outcome are told once, with a count.
        let mut groups: BTreeMap<String, usize> = BTreeMap::new();
        for c in &r.containers {
            let line = match &c.report.outcome {
                Outcome::Unchanged => "every image kept".to_string(),
                Outcome::Whole(why) => format!("left whole: {why}"),
                Outcome::Removed | Outcome::Rewritten => {
                    let kept: Vec<String> =
                        c.kept.iter().map(|(i, id)| format!("[{i}] {id}")).collect();
                    let removed: Vec<String> = c
                        .removed
                        .iter()
                        .map(|r| format!("[{}] {} ({})", r.index, r.id, r.reasons.join("; ")))
                        .collect();
                    let what = if c.report.outcome == Outcome::Removed {
                        "removed"
                    } else {
                        "rewritten"
                    };
                    format!("{what}: kept {}; removed {}", list(&kept), list(&removed))
                }
            };
            *groups
                .entry(format!(
                    "{} {}: {line}",
                    c.report.section,
                    c.report.format.name()
                ))
                .or_default() += 1;
        }
        for (line, n) in groups {
            let _ = writeln!(s, "  {n} x {line}");
        }
        for (section, why) in &r.sections_left {
            let _ = writeln!(s, "  section {section} left as it was: {why}");
        }
        for h in &r.holes {
            let _ = if h.compacted {
                writeln!(
                    s,
                    "  section {} compacted around containers kept at their addresses ({}): {} ({} bytes) of gaps before them are holes (the disk does not keep the blocks)",
                    h.section,
                    h.why,
                    size(h.bytes),
                    h.bytes
                )
            } else {
                writeln!(
                    s,
                    "  section {} cannot be compacted safely ({}): rewritten in place, {} ({} bytes) of removed images are holes (the file keeps its length, the disk does not keep the blocks)",
                    h.section,
                    h.why,
                    size(h.bytes),
                    h.bytes
                )
            };
        }
        for (device, section, at) in &r.missing {
            let _ = writeln!(
                s,
                "  {device} has no image in the {section} container at {at:#x}"
            );
        }
        for (device, rule, without, total) in &r.partly {
            let _ = writeln!(
                s,
                "  {device}: {without} of {total} modules under the {} rule have no image for it, which that rule allows ({})",
                rule.name(),
                rule.consequence()
            );
        }
        for note in &r.notes {
            let _ = writeln!(s, "  note: {note}");
        }
    }
    for e in errors {
        let _ = writeln!(s, "error: {e}");
    }
    let saved = before.saturating_sub(after);
    let pct = if before > 0 {
        saved as f64 * 100.0 / before as f64
    } else {
        0.0
    };
    let holes: u64 = reports.iter().flat_map(|r| &r.holes).map(|h| h.bytes).sum();
    let holes = if holes > 0 {
        format!(", and {} ({holes} bytes) of holes", size(holes))
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "total: {} -> {} ({before} bytes -> {after} bytes, {pct:.1}% less{holes}) in {} file(s)",
        size(before),
        size(after),
        reports.len()
    );
    if let Some((dir, summary)) = run.tree {
        tree(&mut s, dir, summary, dry_run);
    }
    for w in run.wheels {
        wheel(&mut s, w);
    }
    for i in run.images {
        image(&mut s, i);
    }
    s
}

/// An image slimmed as an image: what was written, its layers' sizes,
/// which changed.
fn image(s: &mut String, i: &ImageReport) {
    use std::fmt::Write;
    let before: u64 = i.layers.iter().map(|l| l.before).sum();
    let after: u64 = i.layers.iter().map(|l| l.after).sum();
    let changed = i.layers.iter().filter(|l| l.digest != l.new_digest).count();
    let what = match (&i.output, &i.error) {
        (_, Some(e)) => format!("not written: {e}"),
        (Some(o), None) => format!(
            "written as {o}, {changed} of its {} layer(s) written again, the others kept by digest",
            i.layers.len()
        ),
        (None, None) => "dry run: no image written".into(),
    };
    let platform = i
        .platform
        .as_ref()
        .map(|p| format!(" (its index's image for {p}, this machine's platform)"))
        .unwrap_or_default();
    let _ = writeln!(
        s,
        "image {}{platform}: {what}; layers {} -> {} ({before} bytes -> {after} bytes)",
        i.image,
        size(before),
        size(after),
    );
}

/// A wheel slimmed as a wheel: what was written, its size, how many of its
/// files changed.
fn wheel(s: &mut String, w: &WheelReport) {
    use std::fmt::Write;
    let changed = w.files.iter().filter(|f| f.written).count();
    let what = match (&w.output, &w.error) {
        (_, Some(e)) => format!("not written: {e}"),
        (Some(o), None) => format!(
            "written as {}, {changed} of its {} file(s) of GPU code slimmed, RECORD rewritten",
            o.display(),
            w.files.len()
        ),
        (None, None) => "dry run: no wheel written".into(),
    };
    let _ = writeln!(
        s,
        "wheel {}: {what}; {} -> {} ({} bytes -> {} bytes)",
        w.path.display(),
        size(w.before),
        size(w.after),
        w.before,
        w.after
    );
    for n in &w.notes {
        let _ = writeln!(s, "  {n}");
    }
}

/// A file for other GPUs: what became of it, and what each device says of
/// each of its images.
fn other_gpus(s: &mut String, run: &Run<'_>, r: &FileReport) {
    use std::fmt::Write;
    let _ = writeln!(
        s,
        "{}: {} ({} bytes), for other GPUs: these devices do not load it; {}",
        r.path.display(),
        size(r.before),
        r.before,
        run.other_state(r)
    );
    for image in r.other_gpus.iter().flat_map(|o| &o.images) {
        let _ = writeln!(
            s,
            "  [{}] {} ({})",
            image.index,
            image.id,
            image.reasons.join("; ")
        );
    }
}

/// What the output tree got.
fn tree(s: &mut String, dir: &Path, t: &Summary, dry_run: bool) {
    use std::fmt::Write;
    let would = if dry_run {
        " (dry run: nothing written)"
    } else {
        ""
    };
    let _ = writeln!(
        s,
        "tree {}{would}: {} file(s) slimmed, {} copied unchanged ({} sharing the original's blocks), {} hard-linked to the original, {} further name(s) of these, {} symbolic link(s), {} directories",
        dir.display(),
        t.slimmed,
        t.copied + t.cloned,
        t.cloned,
        t.linked,
        t.names,
        t.symlinks,
        t.directories
    );
    // Files for other GPUs are told above, with their images.
    for (path, why) in t.left_out.iter().filter(|(_, why)| *why != FOR_OTHER_GPUS) {
        let _ = writeln!(s, "  left out: {}: {why}", path.display());
    }
    for (path, why) in &t.as_is {
        let _ = writeln!(s, "  copied as it is: {}: {why}", path.display());
    }
    for (path, what) in &t.skipped {
        let _ = writeln!(
            s,
            "  skipped: {}: {what}, not a regular file",
            path.display()
        );
    }
    for note in &t.notes {
        let _ = writeln!(s, "  note: {note}");
    }
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "nothing".into()
    } else {
        items.join(", ")
    }
}

pub fn json(run: &Run<'_>) -> String {
    use serde_json::json;
    let (reports, options, errors, dry_run) = (run.reports, run.options, run.errors, run.dry_run);
    let files: Vec<_> = reports
        .iter()
        .map(|r| {
            let containers: Vec<_> = r
                .containers
                .iter()
                .map(|c| {
                    let (outcome, reason) = match &c.report.outcome {
                        Outcome::Unchanged => ("unchanged", None),
                        Outcome::Rewritten => ("rewritten", None),
                        Outcome::Removed => ("removed", None),
                        Outcome::Whole(why) => ("whole", Some(why.clone())),
                    };
                    json!({
                        "section": c.report.section,
                        "offset": c.report.offset,
                        "format": c.report.format.name(),
                        "before": c.report.before,
                        "after": c.report.after,
                        "outcome": outcome,
                        "reason": reason,
                        "kept": c.kept.iter().map(|(i, id)| json!({"index": i, "id": id})).collect::<Vec<_>>(),
                        "removed": c.removed.iter().map(|r| json!({"index": r.index, "id": r.id, "reasons": r.reasons})).collect::<Vec<_>>(),
                    })
                })
                .collect();
            let other_gpus = r.other_gpus.as_ref().map(|o| {
                json!({
                    "state": run.other_state(r),
                    "images": o.images.iter().map(|i| json!({"index": i.index, "id": i.id, "reasons": i.reasons})).collect::<Vec<_>>(),
                })
            });
            json!({
                "path": r.path,
                "before": r.before,
                "after": run.after(r),
                "written": r.written,
                "error": r.error,
                "containers": containers,
                "sections_left": r.sections_left.iter().map(|(s, why)| json!({"section": s, "reason": why})).collect::<Vec<_>>(),
                "holes": r.holes.iter().map(|h| json!({"section": h.section, "reason": h.why, "bytes": h.bytes, "compacted": h.compacted})).collect::<Vec<_>>(),
                "missing": r.missing.iter().map(|(d, s, at)| json!({"device": d, "section": s, "offset": at})).collect::<Vec<_>>(),
                "partly": r.partly.iter().map(|(d, rule, without, total)| json!({"device": d, "rule": rule.name(), "modules_without_image": without, "modules": total})).collect::<Vec<_>>(),
                "notes": r.notes,
                "other_gpus": other_gpus,
            })
        })
        .collect();
    let before: u64 = reports.iter().map(|r| r.before).sum();
    let after: u64 = reports.iter().map(|r| run.after(r)).sum();
    let holes: u64 = reports.iter().flat_map(|r| &r.holes).map(|h| h.bytes).sum();
    let value = json!({
        "devices": options.devices.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "dry_run": dry_run,
        "files": files,
        "total": {"before": before, "after": after, "holes": holes},
        "errors": errors,
        "tree": run.tree.map(|(dir, t)| tree_json(dir, t)),
        "wheels": run.wheels.iter().map(|w| json!({
            "path": w.path,
            "output": w.output,
            "before": w.before,
            "after": w.after,
            "error": w.error,
            "notes": w.notes,
            "files": w.files.iter().map(|f| &f.path).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "images": run.images.iter().map(|i| json!({
            "image": i.image,
            "platform": i.platform,
            "output": i.output,
            "error": i.error,
            "layers": i.layers.iter().map(|l| json!({
                "digest": l.digest,
                "before": l.before,
                "new_digest": l.new_digest,
                "after": l.after,
                "gpu_files": l.gpu_files,
            })).collect::<Vec<_>>(),
            "files": i.files.iter().map(|f| &f.path).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    });
    format!(
        "{}\n",
        serde_json::to_string_pretty(&value).unwrap_or_default()
    )
}

/// What the output tree got, as JSON.
fn tree_json(dir: &Path, t: &Summary) -> serde_json::Value {
    use serde_json::json;
    json!({
        "dir": dir,
        "slimmed": t.slimmed,
        "copied": t.copied + t.cloned,
        "cloned": t.cloned,
        "linked": t.linked,
        "names": t.names,
        "symlinks": t.symlinks,
        "directories": t.directories,
        "left_out": t.left_out.iter().map(|(p, why)| json!({"path": p, "reason": why})).collect::<Vec<_>>(),
        "copied_as_is": t.as_is.iter().map(|(p, why)| json!({"path": p, "reason": why})).collect::<Vec<_>>(),
        "skipped": t.skipped.iter().map(|(p, what)| json!({"path": p, "kind": what})).collect::<Vec<_>>(),
        "notes": t.notes,
    })
}
