//! Prints the detected devices, one target per line, as LLVM's `offload-arch`
//! prints architectures; with `-v`, each device's details and what each
//! backend said. Exit status 1 when no device was found (as `offload-arch`).
//!
//! ```sh
//! cargo run -p offload-detect --example detect -- -v
//! ```

use std::process::ExitCode;

fn main() -> ExitCode {
    let verbose = std::env::args().any(|a| a == "-v");
    let detection = offload_detect::devices();
    for device in &detection.devices {
        if verbose {
            println!(
                "{device}  node/ordinal {}{}{}",
                device.ordinal,
                device
                    .pci_bus_id
                    .as_deref()
                    .map(|p| format!(" pci {p}"))
                    .unwrap_or_default(),
                device
                    .uuid
                    .as_deref()
                    .map(|u| format!(" {u}"))
                    .unwrap_or_default()
            );
        } else {
            println!("{}", device.target);
        }
    }
    if verbose {
        for report in &detection.backends {
            println!("{report}");
        }
    }
    if detection.devices.is_empty() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
