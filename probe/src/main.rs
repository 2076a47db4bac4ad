//! `offload-probe`: which GPU images are in a file or process, which GPUs are
//! here, and which image each GPU would load, and why not the others.

mod devices;
mod human;
mod inputs;
mod report;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use offload_loader::{Container, Limits, Selection};

/// Which GPU image would load on this machine, and why not the others.
#[derive(Parser, Debug)]
#[command(
    version,
    after_help = "EXAMPLES:
  offload-probe                                   list the GPUs found here
  offload-probe /usr/lib/x86_64-linux-gnu/librocsparse.so.0 --device gfx90a:sramecc+:xnack-
  offload-probe ./app --deps -v                   the app and every library it loads
  offload-probe --pid 1234 --json                 the objects a running process has loaded
  offload-probe lib.so --device sm_90 --extract out/   write the image each device would load

EXIT STATUS:
  0  every device has an image in every container that targets its kind of GPU
  1  some device has none (where HIP fails with \"no binary for GPU\")
  2  usage or input error (the report is still printed)"
)]
struct Args {
    /// ELF executables, shared objects, objects, static archives, or raw
    /// bundle / CCOB / offload-binary files.
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
    /// Write the image each device would load into DIR.
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
    let args = Args::parse();
    let (devices, backends, device_error) = match devices::find(&args.devices) {
        Ok((d, b)) => (d, b, None),
        Err(e) => (vec![], vec![], Some(e)),
    };
    if let Some(e) = &device_error {
        eprintln!("offload-probe: {e}");
        return ExitCode::from(2);
    }
    let mut paths = args.paths.clone();
    let mut skip_plain = false;
    if let Some(pid) = args.pid {
        match inputs::process_objects(pid) {
            Ok(p) => paths.extend(p),
            Err(e) => {
                eprintln!("offload-probe: process {pid}: {e}");
                return ExitCode::from(2);
            }
        }
        skip_plain = true;
    }
    if args.deps {
        paths = inputs::with_dependencies(&paths);
        skip_plain = true;
    }
    let limits = Limits::default();
    let mut extract_errors = Vec::new();
    let mut objects = Vec::new();
    for path in &paths {
        let object = report::inspect(path, &devices, &limits, |c, s| {
            if let Some(dir) = &args.extract {
                if let Err(e) = extract(dir, path, c, s, args.all) {
                    extract_errors.push(e);
                }
            }
        });
        // With --deps/--pid, objects without offload code are left out
        // (shared libraries, and mapped files that are not ELF at all).
        let plain =
            object.containers.is_empty() && (object.error.is_none() || object.not_offload_format);
        if skip_plain && plain && !args.paths.contains(path) {
            continue;
        }
        objects.push(object);
    }
    let report = report::Report {
        devices,
        backends,
        objects,
    };
    let text = if args.json {
        serde_json::to_string_pretty(&report).map(|j| j + "\n")
    } else {
        Ok(human::render(&report, args.verbose))
    };
    // A closed pipe (`| head`) is not an error worth a panic.
    let _ = text.map(|t| std::io::Write::write_all(&mut std::io::stdout().lock(), t.as_bytes()));
    for e in &extract_errors {
        eprintln!("offload-probe: {e}");
    }
    exit_status(&report, !extract_errors.is_empty())
}

fn exit_status(report: &report::Report, extract_failed: bool) -> ExitCode {
    let input_error = report
        .objects
        .iter()
        .any(|o| o.error.is_some() || o.containers.iter().any(|c| c.error.is_some()));
    if input_error || extract_failed {
        return ExitCode::from(2);
    }
    let missing = report.objects.iter().flat_map(|o| &o.containers).any(|c| {
        report.devices.iter().enumerate().any(|(d, device)| {
            let targets_vendor = c.images.iter().any(|i| {
                offload_loader::target::Triple::parse(&i.triple)
                    .gpu_vendor()
                    .is_some_and(|v| v.to_string() == device.vendor)
            });
            targets_vendor && c.selected[d].image.is_none() && !c.kernel_less
        })
    });
    ExitCode::from(u8::from(missing))
}

/// Writes the selected images of `container` (or all of them) into `dir`, named
/// `<file>-<container offset>-<index>-<bundle id>.co`.
fn extract(
    dir: &Path,
    path: &Path,
    container: &Container<'_>,
    selections: &[Selection],
    all: bool,
) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut wanted: Vec<usize> = if all {
        (0..container.images().len()).collect()
    } else {
        selections.iter().filter_map(|s| s.chosen).collect()
    };
    wanted.sort_unstable();
    wanted.dedup();
    let stem = path.file_name().unwrap_or_default().to_string_lossy();
    for index in wanted {
        let image = &container.images()[index];
        if image.size == 0 {
            continue;
        }
        let bytes = container
            .image_bytes(index)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let name = format!(
            "{stem}-{:#x}-{index}-{}.co",
            container.offset(),
            image.id.replace('/', "_")
        );
        std::fs::write(dir.join(&name), &bytes).map_err(|e| format!("{name}: {e}"))?;
    }
    Ok(())
}
