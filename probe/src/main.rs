//! `offload-probe`: which GPU images are in a file or process, which GPUs are
//! here, and which image each GPU would load, and why not the others.

mod devices;
mod extract;
mod human;
mod image;
mod inputs;
mod json;
mod report;
mod slim;
mod verdict;
mod walk;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use offload_loader::{Limits, Scope, Selection};
use rayon::prelude::*;

/// Which GPU image would load on this machine, and why not the others.
#[derive(Parser, Debug)]
#[command(
    version,
    after_help = "EXAMPLES:
  offload-probe                                   list the GPUs found here
  offload-probe /usr/lib/x86_64-linux-gnu/librocsparse.so.0 --device gfx90a:sramecc+:xnack-
  offload-probe ./app --deps -v                   the app and every library it loads
  offload-probe /opt/rocm venv/ --device gfx1100  every file with GPU code, and which lack gfx1100
  offload-probe --pid 1234 --json                 the objects a running process has loaded
  offload-probe lib.so --device sm_90 --extract out/   write the image each device would load
  offload-probe slim lib.so --device gfx90a --dry-run  how much smaller lib.so would be with gfx90a code only
                                                  (offload-probe slim --help)

EXIT STATUS:
  0  no file fails on a device by the rule of the runtime that loads it
  1  one does: a HIP or OpenMP container without an image for a device, or a file none of
     whose CUDA modules has one (per-GPU files for other GPUs are not failures)
  2  usage or input error (the report is still printed)"
)]
struct Args {
    /// ELF executables, shared objects, objects, static archives, raw
    /// bundle / CCOB / offload-binary / fat-binary / text-bundle files, code
    /// objects, cubins, PTX; or directories, walked for every such file;
    /// or container images, as skopeo names them: `oci:DIR[:TAG]` (an OCI
    /// image layout), `docker-archive:FILE` (a `docker save` archive).
    paths: Vec<PathBuf>,
    /// Also inspect the shared libraries the files load, resolved as the dynamic loader would.
    #[arg(long)]
    deps: bool,
    /// Inspect the objects loaded in a running process.
    #[arg(long, value_name = "PID")]
    pid: Option<u32>,
    /// Use this device instead of the detected ones (repeatable), e.g.
    /// `gfx942:sramecc+:xnack-` or `sm_90`; same as OFFLOAD_LOADER_DEVICES.
    #[arg(long = "device", value_name = "TARGET")]
    devices: Vec<String>,
    /// Print the machine-readable report (see README).
    #[arg(long)]
    json: bool,
    /// Write the image each device would load into DIR, named as cuobjdump
    /// and llvm-objdump --offloading name them (see README).
    #[arg(long, value_name = "DIR")]
    extract: Option<PathBuf>,
    /// With --extract, write every image, not only the selected ones.
    #[arg(long, requires = "extract")]
    all: bool,
    /// List rejected images with their reasons.
    #[arg(short, long)]
    verbose: bool,
}

fn main() -> ExitCode {
    // `offload-probe slim ...` is its own command; anything else is the probe.
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == "slim") {
        return slim::main(argv[1..].to_vec());
    }
    let args = Args::parse();
    // Threads only for files to read: listing the devices alone costs what
    // looking for them costs (no pool to start, no cgroup to read).
    let files = !args.paths.is_empty() || args.pid.is_some();
    if files {
        // The main thread is one of the pool's workers, not a thread that
        // waits for them: one thread fewer to start, and none left for the
        // scheduler to place on the CPU this one runs on.
        let _ = rayon::ThreadPoolBuilder::new()
            .use_current_thread()
            .build_global();
    }
    // An image's GPU files are inspected where they lie in its layers.
    let (paths, images) = image::Images::open(&args.paths);
    let image_files = images.files();
    let args = Args { paths, ..args };
    let (devices, backends, device_error) = match devices::find(&args.devices) {
        Ok((d, b)) => (d, b, None),
        Err(e) => (vec![], vec![], Some(e)),
    };
    if let Some(e) = &device_error {
        eprintln!("offload-probe: {e}");
        return ExitCode::from(2);
    }
    let limits = Limits::default();
    // A progress bar on a terminal for directory scans; never in JSON or
    // when stderr is not a terminal. Its length grows as the walk finds files.
    let progress = if (args.paths.iter().any(|p| p.is_dir()) || !image_files.is_empty())
        && !args.json
        && std::io::IsTerminal::is_terminal(&std::io::stderr())
    {
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} files, {msg}") {
            bar.set_style(style);
        }
        bar
    } else {
        ProgressBar::hidden()
    };
    let extractor = args
        .extract
        .as_deref()
        .map(|dir| extract::Extract::new(dir, args.all));
    let inspector = Inspect {
        devices: &devices,
        limits: &limits,
        extract: extractor.as_ref(),
        progress: &progress,
    };
    let process_objects = match args.pid.map(inputs::process_objects) {
        Some(Ok(objects)) => objects,
        Some(Err(e)) => {
            eprintln!(
                "offload-probe: process {}: {e}",
                args.pid.unwrap_or_default()
            );
            return ExitCode::from(2);
        }
        None => Vec::new(),
    };
    // Files are inspected in parallel, each mapped and released in turn:
    // memory holds the reports of files with GPU code, not the files.
    let (mut results, dir_errors) = if !files {
        (Vec::new(), Vec::new())
    } else if args.deps {
        // Every name first: the dependencies are resolved from the list.
        let found = walk::scan(&args.paths, &walk::Listing);
        let mut paths: Vec<PathBuf> = found.inputs.iter().map(|(i, ())| i.path.clone()).collect();
        let explicit: Vec<PathBuf> = found
            .inputs
            .iter()
            .filter(|(i, ())| i.explicit)
            .map(|(i, ())| i.path.clone())
            .collect();
        paths.extend(process_objects);
        let inputs: Vec<walk::Input> = inputs::with_dependencies(&paths)
            .into_iter()
            .map(|path| walk::Input {
                explicit: explicit.contains(&path),
                also: Vec::new(),
                path,
            })
            .collect();
        (inspect_all(inputs, &inspector), found.errors)
    } else {
        let found = walk::scan(&args.paths, &inspector);
        let mut results = found.inputs;
        let objects = process_objects.into_iter().map(|path| walk::Input {
            path,
            explicit: false,
            also: Vec::new(),
        });
        results.extend(inspect_all(objects.collect(), &inspector));
        (results, found.errors)
    };
    // An image's files, after the files and directories named: found in
    // its layers (their libraries' dependencies are not looked for).
    results.extend(inspect_parts(image_files, &inspector));
    progress.finish_and_clear();
    let mut extract_errors = Vec::new();
    let mut objects = Vec::new();
    for (path, e) in dir_errors.into_iter().chain(images.errors.iter().cloned()) {
        objects.push(report::ObjectReport::failed(&path, e));
    }
    for (input, (object, errors)) in results {
        extract_errors.extend(errors);
        // Files found in directories, by --deps or --pid are left out when
        // they hold no offload code (and are not even ELF or a container,
        // or not regular files); named files are always reported.
        if !input.explicit && !object.shown() {
            continue;
        }
        objects.push(object);
    }
    let coverage = report::coverage(&devices, &objects);
    let report = report::Report {
        devices,
        backends,
        objects,
        coverage,
    };
    // Written as it is rendered. A closed pipe (`| head`) is not an error
    // worth a panic.
    let mut out = std::io::BufWriter::with_capacity(64 << 10, std::io::stdout().lock());
    let _ = if args.json {
        json::write_pretty(&mut out, &report)
    } else {
        out.write_all(human::render(&report, args.verbose).as_bytes())
    }
    .and_then(|()| out.flush());
    for e in &extract_errors {
        eprintln!("offload-probe: {e}");
    }
    if let Some(why) = extractor
        .filter(|_| extract_errors.is_empty())
        .and_then(|x| x.nothing_written(&report.devices))
    {
        eprintln!("offload-probe: {why}");
    }
    exit_status(&report, !extract_errors.is_empty())
}

/// What the probe does with each file: inspect it (and extract from it).
struct Inspect<'a> {
    devices: &'a [report::DeviceRow],
    limits: &'a Limits,
    extract: Option<&'a extract::Extract<'a>>,
    progress: &'a ProgressBar,
}

impl walk::Inspector for Inspect<'_> {
    type Report = (report::ObjectReport, Vec<String>);

    fn inspect(&self, path: &Path, named: bool) -> Self::Report {
        self.inspect_in(path, None, named)
    }

    fn shown(&self, (object, _): &Self::Report) -> bool {
        object.shown()
    }

    fn found(&self, files: usize) {
        self.progress.inc_length(files as u64);
    }
}

impl Inspect<'_> {
    /// Inspects `path`, whose bytes are `part` of another file where given.
    fn inspect_in(
        &self,
        path: &Path,
        part: Option<image::Part<'_>>,
        named: bool,
    ) -> <Self as walk::Inspector>::Report {
        let names = extract::FileNames::new(path, part, self.limits);
        let visit = |scope: &Scope<'_, '_>, selections: &[Selection]| match self.extract {
            Some(x) => x.scope(&names, scope, selections),
            None => Vec::new(),
        };
        let done = report::inspect(path, part, named, self.devices, self.limits, &visit);
        self.progress.inc(1);
        done
    }
}

/// An image's files (name, and where its bytes lie), inspected in parallel.
fn inspect_parts(
    files: Vec<(PathBuf, image::Part<'_>)>,
    inspector: &Inspect<'_>,
) -> Vec<(walk::Input, <Inspect<'static> as walk::Inspector>::Report)> {
    use walk::Inspector;
    inspector.found(files.len());
    files
        .into_par_iter()
        .map(|(path, part)| {
            let report = inspector.inspect_in(&path, Some(part), false);
            let input = walk::Input {
                path,
                explicit: false,
                also: Vec::new(),
            };
            (input, report)
        })
        .collect()
}

/// `inputs`, inspected in parallel.
fn inspect_all(
    inputs: Vec<walk::Input>,
    inspector: &Inspect<'_>,
) -> Vec<(walk::Input, <Inspect<'static> as walk::Inspector>::Report)> {
    use walk::Inspector;
    inspector.found(inputs.len());
    inputs
        .into_par_iter()
        .map(|input| {
            let report = inspector.inspect(&input.path, input.explicit);
            (input, report)
        })
        .collect()
}

fn exit_status(report: &report::Report, extract_failed: bool) -> ExitCode {
    let input_error = report
        .objects
        .iter()
        .any(|o| o.error.is_some() || o.containers.iter().any(|c| c.error.is_some()));
    if input_error || extract_failed {
        return ExitCode::from(2);
    }
    // Exit 1 where a file cannot run on a device by the rule of the runtime
    // that loads it (see `verdict`).
    let fails = report.coverage.iter().any(|c| c.fails)
        || report
            .objects
            .iter()
            .flat_map(|o| &o.verdicts)
            .any(|v| v.verdict == verdict::Verdict::Fails);
    ExitCode::from(u8::from(fails))
}
