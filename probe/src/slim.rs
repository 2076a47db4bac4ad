//! `offload-probe slim`: a thin shell over `offload_slim::slim_file`. Finds
//! the files (directories walked, each file once whatever its names),
//! slims them in parallel, and reports per file and in total.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use offload_loader::{Limits, MappedFile};
use offload_slim::{slim_file, Destination, FileReport, Options, Outcome};
use rayon::prelude::*;

use crate::devices;
use crate::walk;

/// Rewrite GPU libraries and programs keeping only the code the named
/// devices load, and make the files smaller.
#[derive(Parser, Debug)]
#[command(
    name = "offload-probe slim",
    after_help = "EXAMPLES:
  offload-probe slim /usr/lib/x86_64-linux-gnu/librocsparse.so.0 --device gfx90a:sramecc+:xnack- --dry-run
  offload-probe slim /opt/venv/lib --device sm_90 --output /tmp/slim
  offload-probe slim /opt/rocm/lib --in-place             (the GPUs detected here)

EXIT STATUS:
  0  done
  1  done, but a container that targets a named device's kind of GPU has no image for it (left whole)
  2  usage or input error (that file untouched; the others processed)"
)]
struct Args {
    /// Files (ELF executables, shared objects, objects, archives, raw
    /// containers) and directories, walked.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Keep what this device loads (repeatable); without any, the GPUs detected here.
    #[arg(long = "device", value_name = "TARGET")]
    devices: Vec<String>,
    /// Write each changed file to DIR, under its path relative to the argument it was found under.
    #[arg(long, value_name = "DIR", conflicts_with = "in_place")]
    output: Option<PathBuf>,
    /// Replace each changed file, atomically.
    #[arg(long)]
    in_place: bool,
    /// Write nothing; report the sizes.
    #[arg(long)]
    dry_run: bool,
    /// Also keep every PTX image an NVIDIA device could JIT.
    #[arg(long)]
    keep_ptx: bool,
    /// Print the machine-readable report.
    #[arg(long)]
    json: bool,
}

/// A file found: its first name, where it goes (`--output`), its other names.
struct Found {
    path: PathBuf,
    to: Option<PathBuf>,
    also: Vec<PathBuf>,
}

/// A file to slim and where its result goes.
struct Job {
    path: PathBuf,
    destination: Destination,
}

pub fn main(argv: Vec<std::ffi::OsString>) -> ExitCode {
    let args = match Args::try_parse_from(argv) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    if !args.dry_run && !args.in_place && args.output.is_none() {
        eprintln!(
            "offload-probe slim: say where the results go: --output DIR, --in-place or --dry-run"
        );
        return ExitCode::from(2);
    }
    let devices = match devices::find(&args.devices) {
        Ok((d, _)) => d,
        Err(e) => {
            eprintln!("offload-probe slim: {e}");
            return ExitCode::from(2);
        }
    };
    if devices.is_empty() {
        eprintln!("offload-probe slim: no device: none was detected here; name one with --device");
        return ExitCode::from(2);
    }
    let options = Options {
        devices: devices.iter().map(|d| d.target).collect(),
        keep_ptx: args.keep_ptx,
        limits: Limits::default(),
    };
    // An input truncated while it is read (a package upgrade beside us) is
    // an error for that file, not the death of the run.
    if let Err(e) = offload_slim::install_sigbus_guard() {
        eprintln!("offload-probe slim: {e}");
        return ExitCode::from(2);
    }
    let (jobs, mut errors) = find(&args);
    let progress = if !args.json && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        let bar =
            ProgressBar::with_draw_target(Some(jobs.len() as u64), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} files {wide_msg}") {
            bar.set_style(style);
        }
        bar
    } else {
        ProgressBar::hidden()
    };
    let reports: Vec<FileReport> = jobs
        .par_iter()
        .map(|job| {
            let destination = if args.dry_run {
                &Destination::DryRun
            } else {
                &job.destination
            };
            let r = slim_file(&job.path, &options, destination);
            progress.inc(1);
            r
        })
        .collect();
    progress.finish_and_clear();
    for r in &reports {
        if let Some(e) = &r.error {
            errors.push(format!("{}: {e}", r.path.display()));
        }
    }
    let missing = reports.iter().any(|r| !r.missing.is_empty());
    let out = if args.json {
        json(&reports, &options, &errors, args.dry_run)
    } else {
        human(&reports, &errors, args.dry_run)
    };
    print!("{out}");
    if !errors.is_empty() {
        ExitCode::from(2)
    } else {
        ExitCode::from(u8::from(missing))
    }
}

/// Looks at each file the walk finds: may it hold offload code (its headers
/// say)? Files that may not are left out of the walk's output.
struct MayHoldOffload;

impl walk::Inspector for MayHoldOffload {
    type Report = Result<bool, String>;
    fn inspect(&self, path: &Path) -> Self::Report {
        MappedFile::open_if_offload(path)
            .map(|f| f.is_some())
            .map_err(|e| e.to_string())
    }
    fn shown(&self, report: &Self::Report) -> bool {
        matches!(report, Ok(true))
    }
}

/// The files under the arguments (walked as the probe walks them), each once
/// whatever its names (the first name, in sorted order, of each file), with
/// where each goes; and what could not be read.
fn find(args: &Args) -> (Vec<Job>, Vec<String>) {
    let walked = walk::scan(&args.paths, &MayHoldOffload);
    let mut errors: Vec<String> = walked
        .errors
        .into_iter()
        .map(|(path, e)| format!("{}: {e}", path.display()))
        .collect();
    // By (device, inode): a file named on the command line may also be
    // found in a directory.
    let mut seen: BTreeMap<(u64, u64), Found> = BTreeMap::new();
    let mut order = Vec::new();
    for (input, report) in walked.inputs {
        match report {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                errors.push(e);
                continue;
            }
        }
        let Ok(m) = std::fs::metadata(&input.path) else {
            continue;
        };
        let key = (m.dev(), m.ino());
        if let Some(found) = seen.get_mut(&key) {
            found.also.push(input.path);
            found.also.extend(input.also);
            continue;
        }
        // Where it goes: its path relative to the directory it was found
        // under, or its name when named itself.
        let rel = if input.explicit {
            PathBuf::from(input.path.file_name().unwrap_or_default())
        } else {
            args.paths
                .iter()
                .find_map(|root| input.path.strip_prefix(root).ok())
                .map_or_else(|| input.path.clone(), Path::to_path_buf)
        };
        let to = args.output.as_ref().map(|dir| dir.join(&rel));
        seen.insert(
            key,
            Found {
                path: input.path,
                to,
                also: input.also,
            },
        );
        order.push(key);
    }
    // Two files must not be written to one place.
    let mut destinations: BTreeMap<PathBuf, PathBuf> = BTreeMap::new();
    order.retain(|key| {
        let found = &seen[key];
        let Some(to) = &found.to else { return true };
        match destinations.get(to) {
            Some(first) => {
                errors.push(format!(
                    "{} and {} would both be written to {}: {} is left out",
                    first.display(),
                    found.path.display(),
                    to.display(),
                    found.path.display()
                ));
                false
            }
            None => {
                destinations.insert(to.clone(), found.path.clone());
                true
            }
        }
    });
    // No result may be written over an input: --output naming an input's
    // own directory, or a directory where another input lies.
    let inputs = Inputs::of(&seen);
    order.retain(|key| {
        let found = &seen[key];
        let Some(to) = &found.to else { return true };
        let Some(clash) = inputs.at(to) else {
            return true;
        };
        errors.push(format!(
            "{}: --output would write its result over the input {}: left out",
            found.path.display(),
            clash.display()
        ));
        false
    });
    let jobs = order
        .into_iter()
        .filter_map(|key| seen.remove(&key))
        .map(|Found { path, to, also }| {
            // A symbolic link names its target: replaced once, in place.
            let also = also
                .into_iter()
                .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| !m.file_type().is_symlink()))
                .filter(|p| std::fs::canonicalize(p).ok() != std::fs::canonicalize(&path).ok())
                .collect();
            let destination = match to {
                Some(to) => Destination::To(to),
                None => Destination::InPlace { also },
            };
            Job { path, destination }
        })
        .collect();
    (jobs, errors)
}

/// Every input, by device and inode and by each of its names, resolved.
struct Inputs {
    keys: BTreeMap<(u64, u64), PathBuf>,
    names: BTreeMap<PathBuf, PathBuf>,
}

impl Inputs {
    fn of(seen: &BTreeMap<(u64, u64), Found>) -> Inputs {
        let mut names = BTreeMap::new();
        for found in seen.values() {
            for name in std::iter::once(&found.path).chain(&found.also) {
                names.insert(resolved(name), found.path.clone());
            }
        }
        let keys = seen.iter().map(|(k, f)| (*k, f.path.clone())).collect();
        Inputs { keys, names }
    }

    /// The input that `to` is (the same file, or one of its names).
    fn at(&self, to: &Path) -> Option<&PathBuf> {
        if let Ok(m) = std::fs::metadata(to) {
            if let Some(p) = self.keys.get(&(m.dev(), m.ino())) {
                return Some(p);
            }
        }
        self.names.get(&resolved(to))
    }
}

/// `path` with its directory resolved (symbolic links, `..`), its own name
/// kept: the name it is reached by, wherever it is spelled from.
fn resolved(path: &Path) -> PathBuf {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    match (std::fs::canonicalize(dir), path.file_name()) {
        (Ok(d), Some(name)) => d.join(name),
        _ => path.to_path_buf(),
    }
}

fn size(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn human(reports: &[FileReport], errors: &[String], dry_run: bool) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let (mut before, mut after) = (0u64, 0u64);
    for r in reports {
        before += r.before;
        after += r.after;
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
            let _ = writeln!(
                s,
                "  section {} cannot be compacted safely ({}): rewritten in place, {} ({} bytes) of removed images are holes (the file keeps its length, the disk does not keep the blocks)",
                h.section,
                h.why,
                size(h.bytes),
                h.bytes
            );
        }
        for (device, section, at) in &r.missing {
            let _ = writeln!(
                s,
                "  {device} has no image in the {section} container at {at:#x}"
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
    s
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "nothing".into()
    } else {
        items.join(", ")
    }
}

fn json(reports: &[FileReport], options: &Options, errors: &[String], dry_run: bool) -> String {
    use serde_json::json;
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
            json!({
                "path": r.path,
                "before": r.before,
                "after": r.after,
                "written": r.written,
                "error": r.error,
                "containers": containers,
                "sections_left": r.sections_left.iter().map(|(s, why)| json!({"section": s, "reason": why})).collect::<Vec<_>>(),
                "holes": r.holes.iter().map(|h| json!({"section": h.section, "reason": h.why, "bytes": h.bytes})).collect::<Vec<_>>(),
                "missing": r.missing.iter().map(|(d, s, at)| json!({"device": d, "section": s, "offset": at})).collect::<Vec<_>>(),
                "notes": r.notes,
            })
        })
        .collect();
    let before: u64 = reports.iter().map(|r| r.before).sum();
    let after: u64 = reports.iter().map(|r| r.after).sum();
    let holes: u64 = reports.iter().flat_map(|r| &r.holes).map(|h| h.bytes).sum();
    let value = json!({
        "devices": options.devices.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "dry_run": dry_run,
        "files": files,
        "total": {"before": before, "after": after, "holes": holes},
        "errors": errors,
    });
    format!(
        "{}\n",
        serde_json::to_string_pretty(&value).unwrap_or_default()
    )
}
