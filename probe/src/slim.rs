//! `offload-probe slim`: a thin shell over `offload_slim::slim_file`. Finds
//! the files (directories walked, each file once whatever its names),
//! slims them in parallel, with `--output` makes the rest of the tree
//! ([`tree`] lists it, [`complete`] makes it), and reports per file and in
//! total ([`show`]).

mod complete;
mod show;
mod tree;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use offload_loader::{Limits, MappedFile};
use offload_slim::{slim_file, Destination, FileReport, How, Options};
use rayon::prelude::*;

use crate::devices;
use crate::image;
use crate::walk;
use complete::Fate;
use show::{OtherGpuFiles, Run};
use tree::{Key, Tree};

/// Rewrite GPU libraries and programs keeping only the code the named
/// devices load, and make the files smaller.
#[derive(Parser, Debug)]
#[command(
    name = "offload-probe slim",
    after_help = "EXAMPLES:
  offload-probe slim /usr/lib/x86_64-linux-gnu/librocsparse.so.0 --device gfx90a:sramecc+:xnack- --dry-run
  offload-probe slim /opt/venv/lib --device sm_90 --output /tmp/slim
  offload-probe slim nvidia_curand-10.4.5.25-py3-none-manylinux_2_27_x86_64.whl --device sm_90 --output dist --local-version sm90
  offload-probe slim oci:/srv/layout:app --device gfx90a --output oci:/srv/layout:app-gfx90a
  offload-probe slim docker-archive:app.tar --device sm_90 --output docker-archive:app-sm90.tar
  offload-probe slim /opt/rocm/lib --in-place             (the GPUs detected here)
  offload-probe slim /usr/lib/x86_64-linux-gnu/rocblas --device gfx90a --output /tmp/rocblas --link-unchanged

EXIT STATUS:
  0  done
  1  done, but a file fails on a named device by its runtime's rule (as offload-probe's exit 1:
     a HIP or OpenMP container without an image for it, or no CUDA module of the file with one)
  2  usage or input error, or a file slim could not read, verify or shrink (that file untouched,
     and with --output copied as it is; the others processed)"
)]
struct Args {
    /// Files (ELF executables, shared objects, objects, archives, raw
    /// containers) and directories, walked. A wheel (`*.whl`) named here,
    /// or found in a directory with --output, is slimmed as a wheel into
    /// --output: a new wheel whose RECORD has the new hashes. An image
    /// named as skopeo names it, `oci:DIR[:TAG]` (an OCI image layout) or
    /// `docker-archive:FILE` (a `docker save` archive), is slimmed as an
    /// image into the --output image.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Keep what this device loads (repeatable); without any, the GPUs detected here.
    #[arg(long = "device", value_name = "TARGET")]
    devices: Vec<String>,
    /// Write the whole tree to DIR, each entry under its path relative to
    /// the argument it was found under: the files slimmed, the others
    /// copied (sharing blocks where the file system can), symbolic links as
    /// links, directories with their modes; files for other GPUs left out.
    /// For an image: the image written, `oci:DIR[:TAG]` (added to that
    /// layout, the tag moved to it) or `docker-archive:FILE`.
    #[arg(long, value_name = "DIR", conflicts_with = "in_place")]
    output: Option<PathBuf>,
    /// With --output: hard-link the files left as they are to the
    /// originals instead of copying them (no space; but one file: a change
    /// to either is a change to both).
    #[arg(long, requires = "output")]
    link_unchanged: bool,
    /// Replace each changed file, atomically.
    #[arg(long)]
    in_place: bool,
    /// With --in-place: remove each file of GPU code only that no named
    /// device loads (for other GPUs), with its other names; without it they
    /// are left and reported.
    #[arg(long, requires = "in_place")]
    remove_other_gpu_files: bool,
    /// Write nothing; report the sizes (and, with --output or --in-place,
    /// what they would do).
    #[arg(long)]
    dry_run: bool,
    /// Also keep the portable code a device could compile at load: NVIDIA's
    /// PTX and AMD's SPIR-V (`--keep-ptx` is the older name).
    #[arg(long, alias = "keep-ptx")]
    keep_portable: bool,
    /// With a wheel (`*.whl`) and --output: add this local version label
    /// (`sm90`) to the slimmed wheel's version, in its file name, METADATA
    /// and .dist-info directory.
    #[arg(long, value_name = "LABEL", requires = "output")]
    local_version: Option<String>,
    /// Print the machine-readable report.
    #[arg(long)]
    json: bool,
}

/// A file to slim, what it is, where its result goes, and (in place) the
/// symbolic links that name it.
struct Job {
    path: PathBuf,
    key: Key,
    destination: Destination,
    links: Vec<PathBuf>,
}

/// A wheel found in a directory, what it is, and its first place in the
/// output tree.
struct WheelJob {
    path: PathBuf,
    key: Key,
    to: PathBuf,
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
        keep_portable: args.keep_portable,
        limits: Limits::default(),
    };
    // An input truncated while it is read (a package upgrade beside us) is
    // an error for that file, not the death of the run.
    if let Err(e) = offload_slim::install_sigbus_guard() {
        eprintln!("offload-probe slim: {e}");
        return ExitCode::from(2);
    }
    let (images, paths): (Vec<PathBuf>, Vec<PathBuf>) = args
        .paths
        .iter()
        .cloned()
        .partition(|p| image::reference(p).is_some());
    let (wheels, paths): (Vec<PathBuf>, Vec<PathBuf>) =
        paths.into_iter().partition(|p| is_wheel(p));
    let image_output = match images_output(&args, &images, &paths, &wheels) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("offload-probe slim: {e}");
            return ExitCode::from(2);
        }
    };
    if !wheels.is_empty() && args.in_place {
        eprintln!("offload-probe slim: a wheel is slimmed into --output DIR, not in place");
        return ExitCode::from(2);
    }
    let args = Args { paths, ..args };
    let wheel_dir = args.output.clone().unwrap_or_else(std::env::temp_dir);
    let mut wheel_reports: Vec<offload_slim::WheelReport> = wheels
        .iter()
        .map(|w| slim_wheel(w, &args, &options, &wheel_dir))
        .collect();
    let image_reports: Vec<offload_slim::ImageReport> = images
        .iter()
        .filter_map(|i| image::reference(i))
        .map(|i| offload_slim::slim_image(&i, &options, image_output.as_ref()))
        .collect();
    let tree = match &args.output {
        _ if args.paths.is_empty() => None,
        Some(dir) => match Tree::list(&args.paths, dir, args.link_unchanged) {
            Ok(tree) => Some(tree),
            Err(e) => {
                eprintln!("offload-probe slim: {e}");
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let (jobs, found_wheels, mut errors) = find(&args, tree.as_ref());
    if !args.dry_run {
        remove_leftovers(&jobs, tree.as_ref());
    }
    if args.local_version.is_some() && wheel_reports.is_empty() && found_wheels.is_empty() {
        eprintln!(
            "offload-probe slim: --local-version labels a wheel; no wheel (*.whl) was named or found"
        );
        return ExitCode::from(2);
    }
    let mut reports = slim_all(&jobs, &options, args.dry_run, args.json);
    // A wheel found in a directory is slimmed as a wheel into its place in
    // the output tree; a dry run or an error leaves that place to the copy.
    let mut wheel_fates = BTreeMap::new();
    for WheelJob { path, key, to } in &found_wheels {
        let w = slim_wheel(path, &args, &options, to.parent().unwrap_or(Path::new(".")));
        if let Some(fate) = wheel_fate(&w, to, args.dry_run) {
            wheel_fates.insert(*key, fate);
        }
        wheel_reports.push(w);
    }
    for w in &wheel_reports {
        if let Some(e) = &w.error {
            errors.push(e.clone());
        }
    }
    for (job, r) in jobs.iter().zip(&mut reports) {
        remove_links(job, r);
        if let Some(e) = &r.error {
            errors.push(format!("{}: {e}", r.path.display()));
        }
    }
    let summary = tree.map(|mut tree| {
        errors.append(&mut tree.errors);
        let how = if args.link_unchanged {
            How::Link
        } else {
            How::Copy
        };
        let mut fates = fates(&jobs, &reports, args.dry_run);
        fates.append(&mut wheel_fates);
        let summary = complete::complete(&tree, &fates, how, args.dry_run);
        errors.extend(summary.errors.iter().cloned());
        summary
    });
    for i in &image_reports {
        if let Some(e) = &i.error {
            errors.push(e.clone());
        }
        for f in &i.files {
            if let Some(e) = &f.error {
                errors.push(format!("{}: {e}", f.path.display()));
            }
        }
        reports.extend(i.files.iter().cloned());
    }
    // The wheels' files are reported as files are (after the tree's).
    for w in &wheel_reports {
        for f in &w.files {
            if let Some(e) = &f.error {
                errors.push(format!("{}: {e}", f.path.display()));
            }
        }
        reports.extend(w.files.iter().cloned());
    }
    let missing = reports.iter().any(|r| !r.missing.is_empty());
    let run = Run {
        reports: &reports,
        options: &options,
        errors: &errors,
        dry_run: args.dry_run,
        other_gpus: match (&args.output, args.in_place, args.remove_other_gpu_files) {
            (None, true, false) => OtherGpuFiles::Kept,
            (None, true, true) => OtherGpuFiles::Removed,
            _ => OtherGpuFiles::LeftOut,
        },
        tree: args.output.as_deref().zip(summary.as_ref()),
        wheels: &wheel_reports,
        images: &image_reports,
    };
    let out = if args.json {
        show::json(&run)
    } else {
        show::human(&run)
    };
    print!("{out}");
    if !errors.is_empty() {
        ExitCode::from(2)
    } else {
        ExitCode::from(u8::from(missing))
    }
}

/// The wheel at `path` slimmed as a wheel into `dir`.
fn slim_wheel(
    path: &Path,
    args: &Args,
    options: &Options,
    dir: &Path,
) -> offload_slim::WheelReport {
    offload_slim::slim_wheel(
        path,
        options,
        dir,
        args.local_version.as_deref(),
        args.dry_run,
    )
}

/// What the output tree has of a wheel found in it, whose first place is
/// `to`: the slimmed wheel (with a local version label, under its new
/// name), a copy as it is when slimming it failed, or (`None`) a copy of a
/// wheel nothing in it changes on a dry run.
fn wheel_fate(w: &offload_slim::WheelReport, to: &Path, dry_run: bool) -> Option<Fate> {
    if w.error.is_some() {
        return Some(Fate::Failed);
    }
    match &w.output {
        Some(o) => match o.file_name() {
            Some(name) if Some(name) != to.file_name() => Some(Fate::SlimmedAs(name.to_owned())),
            _ => Some(Fate::Slimmed),
        },
        None if dry_run && w.files.iter().any(FileReport::changes) => Some(Fate::Slimmed),
        None => None,
    }
}

/// Every job slimmed, in parallel, with a progress bar on a terminal.
fn slim_all(jobs: &[Job], options: &Options, dry_run: bool, json: bool) -> Vec<FileReport> {
    let progress = if !json && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        let bar =
            ProgressBar::with_draw_target(Some(jobs.len() as u64), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} files {wide_msg}") {
            bar.set_style(style);
        }
        bar
    } else {
        ProgressBar::hidden()
    };
    let reports = jobs
        .par_iter()
        .map(|job| {
            let destination = if dry_run {
                &Destination::DryRun
            } else {
                &job.destination
            };
            let r = slim_file(&job.path, options, destination);
            progress.inc(1);
            r
        })
        .collect();
    progress.finish_and_clear();
    reports
}

/// A file for other GPUs removed in place leaves the symbolic links that
/// named it dangling: they go too, and are said.
fn remove_links(job: &Job, r: &mut FileReport) {
    if !r.other_gpus.as_ref().is_some_and(|o| o.removed) {
        return;
    }
    for link in &job.links {
        let dangling = std::fs::symlink_metadata(link).is_ok_and(|m| m.file_type().is_symlink())
            && std::fs::metadata(link).is_err();
        if !dangling {
            continue;
        }
        match std::fs::remove_file(link) {
            Ok(()) => r.notes.push(format!(
                "the symbolic link {} that named it is removed too",
                link.display()
            )),
            Err(e) => r.notes.push(format!(
                "the symbolic link {} that named it is left, dangling: {e}",
                link.display()
            )),
        }
    }
}

/// What slim made of each file, for the output tree: a result at its first
/// place (a dry run: one that would be), left out for other GPUs, or left
/// out for an error; a file not here (no GPU code, nothing to change) is
/// copied.
fn fates(jobs: &[Job], reports: &[FileReport], dry_run: bool) -> BTreeMap<Key, Fate> {
    jobs.iter()
        .zip(reports)
        .filter_map(|(job, r)| {
            let fate = if r.error.is_some() {
                Fate::Failed
            } else if r.other_gpus.is_some() {
                Fate::OtherGpus
            } else if r.written || (dry_run && r.changes()) {
                Fate::Slimmed
            } else {
                return None;
            };
            Some((job.key, fate))
        })
        .collect()
}

/// Looks at each file the walk finds: may it hold offload code (its headers
/// say), or is it a wheel? Files that are neither are left out of the
/// walk's output.
struct MayHoldOffload;

/// What a file found may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holds {
    /// Offload code, by its headers (or named: read whole).
    Offload,
    /// A wheel (`*.whl`), slimmed as a wheel.
    Wheel,
    Nothing,
}

impl walk::Inspector for MayHoldOffload {
    type Report = Result<Holds, String>;
    fn inspect(&self, path: &Path, named: bool) -> Self::Report {
        // A named file is slimmed whatever its headers say: GPU code may
        // lie among its data.
        if named {
            return Ok(Holds::Offload);
        }
        if is_wheel(path) {
            return Ok(Holds::Wheel);
        }
        match MappedFile::open_if_offload(path) {
            Ok(Some(_)) => Ok(Holds::Offload),
            Ok(None) => Ok(Holds::Nothing),
            Err(e) => Err(e.to_string()),
        }
    }
    fn shown(&self, report: &Self::Report) -> bool {
        matches!(report, Ok(Holds::Offload | Holds::Wheel))
    }
}

/// The files under the arguments (walked as the probe walks them), each once
/// whatever its names (the first name, in sorted order, of each file), with
/// where each goes: with `--output`, the first place of a regular name of
/// it in the `tree` (a file only symbolic links reach is not slimmed: the
/// links are copied as links); with `--output`, the wheels found, each with
/// its first place; and what could not be read.
fn find(args: &Args, tree: Option<&Tree>) -> (Vec<Job>, Vec<WheelJob>, Vec<String>) {
    let walked = walk::scan(&args.paths, &MayHoldOffload);
    let mut errors: Vec<String> = walked
        .errors
        .into_iter()
        .map(|(path, e)| format!("{}: {e}", path.display()))
        .collect();
    // By (device, inode): a file named on the command line may also be
    // found in a directory.
    let mut seen: BTreeMap<Key, usize> = BTreeMap::new();
    let mut found: Vec<(PathBuf, Key, Vec<PathBuf>)> = Vec::new();
    let firsts = tree.map(Tree::firsts);
    // Each wheel once (the walk finds each file once; a wheel named on the
    // command line is not walked), into the first place of a regular name.
    let mut wheels = Vec::new();
    for (input, report) in walked.inputs {
        let holds = match report {
            Ok(Holds::Wheel) if firsts.is_some() => Holds::Wheel,
            Ok(Holds::Offload) => Holds::Offload,
            Ok(Holds::Wheel | Holds::Nothing) => continue,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let Ok(m) = std::fs::metadata(&input.path) else {
            continue;
        };
        let key = (m.dev(), m.ino());
        if holds == Holds::Wheel {
            let (path, _) = regular_first(input.path, input.also);
            if let Some(to) = firsts.as_ref().and_then(|f| f.get(&key)) {
                let to = to.to_path_buf();
                wheels.push(WheelJob { path, key, to });
            }
            continue;
        }
        match seen.get(&key) {
            Some(&at) => {
                found[at].2.push(input.path);
                found[at].2.extend(input.also);
            }
            None => {
                seen.insert(key, found.len());
                found.push((input.path, key, input.also));
            }
        }
    }
    let jobs = found
        .into_iter()
        .map(|(path, key, also)| {
            let (path, also) = regular_first(path, also);
            (path, key, also)
        })
        .filter_map(|(path, key, also)| {
            let destination = match &firsts {
                Some(firsts) => Destination::To(firsts.get(&key)?.to_path_buf()),
                None => in_place(&path, &also, args.remove_other_gpu_files),
            };
            let links = std::iter::once(&path)
                .chain(&also)
                .filter(|p| is_symlink(p))
                .cloned()
                .collect();
            Some(Job {
                path,
                key,
                destination,
                links,
            })
        })
        .collect();
    (jobs, wheels, errors)
}

/// Removes, from every directory this run writes into, the temporary
/// files a run that was killed left there, saying so on stderr.
fn remove_leftovers(jobs: &[Job], tree: Option<&Tree>) {
    // The directory a path is in (`.` for a bare name).
    let parent = |p: &Path| match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => Some(d.to_path_buf()),
        Some(_) => Some(PathBuf::from(".")),
        None => None,
    };
    let mut dirs = std::collections::BTreeSet::new();
    for job in jobs {
        if let Destination::InPlace { also, .. } = &job.destination {
            dirs.extend(
                std::iter::once(&job.path)
                    .chain(also)
                    .filter_map(|p| parent(p)),
            );
        }
    }
    for entry in tree.iter().flat_map(|t| &t.entries) {
        dirs.extend(parent(&entry.to));
        if entry.kind == tree::Kind::Dir {
            dirs.insert(entry.to.clone());
        }
    }
    for dir in dirs {
        match offload_slim::remove_leftovers(&dir) {
            Ok(removed) => {
                for path in removed {
                    eprintln!(
                        "offload-probe slim: removed {}, left by a run that was killed",
                        path.display()
                    );
                }
            }
            // An output directory not made yet.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => eprintln!(
                "offload-probe slim: warning: {}: looking for what a killed run left: {e}",
                dir.display()
            ),
        }
    }
}

/// The file's names with the first that is not a symbolic link first (if
/// any is): the name it is reported and slimmed under.
fn regular_first(path: PathBuf, mut also: Vec<PathBuf>) -> (PathBuf, Vec<PathBuf>) {
    if !is_symlink(&path) {
        return (path, also);
    }
    match also.iter().position(|p| !is_symlink(p)) {
        Some(at) => {
            let first = also.remove(at);
            also.insert(0, path);
            (first, also)
        }
        None => (path, also),
    }
}

/// In place: over the file, and over its other names that are not
/// symbolic links (a link names its target: replaced once, in place).
fn in_place(path: &Path, also: &[PathBuf], remove_other_gpus: bool) -> Destination {
    let also = also
        .iter()
        .filter(|p| !is_symlink(p))
        .filter(|p| std::fs::canonicalize(p).ok() != std::fs::canonicalize(path).ok())
        .cloned()
        .collect();
    Destination::InPlace {
        also,
        remove_other_gpus,
    }
}

/// Where the images named go: the --output image (`None`: a dry run).
/// Images and files are not slimmed in one run: --output names an image or
/// a directory.
fn images_output(
    args: &Args,
    images: &[PathBuf],
    paths: &[PathBuf],
    wheels: &[PathBuf],
) -> Result<Option<offload_slim::Reference>, String> {
    if images.is_empty() {
        return match args.output.as_deref().and_then(image::reference) {
            Some(o) => Err(format!("--output {o} names an image: name an image to slim (oci:DIR[:TAG] or docker-archive:FILE)")),
            None => Ok(None),
        };
    }
    if !paths.is_empty() || !wheels.is_empty() {
        return Err(
            "slim images alone, or files and wheels alone: --output names an image or a directory"
                .into(),
        );
    }
    if args.in_place {
        return Err(
            "an image is slimmed into --output oci:DIR[:TAG] or docker-archive:FILE, not in place"
                .into(),
        );
    }
    if images.len() > 1 && !args.dry_run {
        return Err("one image at a time: --output names one image".into());
    }
    match args.output.as_deref() {
        _ if args.dry_run => Ok(None),
        Some(o) => match offload_slim::Reference::parse(&o.to_string_lossy()) {
            Some(r) => Ok(Some(r)),
            None => Err(format!(
                "--output {}: name the image to write, oci:DIR[:TAG] or docker-archive:FILE",
                o.display()
            )),
        },
        None => {
            Err("say where the image goes: --output oci:DIR[:TAG] or docker-archive:FILE".into())
        }
    }
}

/// A wheel named on the command line: a regular file named `*.whl`.
fn is_wheel(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "whl") && path.is_file()
}

fn is_symlink(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}
