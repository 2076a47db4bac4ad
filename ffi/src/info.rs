//! Diagnostics: `OFFLOAD_LOADER_INFO=1` prints one line per registration to
//! stderr (as `LIBOMPTARGET_INFO` does); `OFFLOAD_LOADER_LOG` sets a `tracing`
//! filter (e.g. `offload_loader=debug`). No global subscriber is installed
//! unless one of them is set.

use once_cell::sync::Lazy;

/// Whether `OFFLOAD_LOADER_INFO` asks for registration lines.
pub(crate) static INFO: Lazy<bool> =
    Lazy::new(|| std::env::var("OFFLOAD_LOADER_INFO").is_ok_and(|v| !v.is_empty() && v != "0"));

static SUBSCRIBER: Lazy<()> = Lazy::new(|| {
    if let Ok(filter) = std::env::var("OFFLOAD_LOADER_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .try_init();
    }
});

/// Installs the `OFFLOAD_LOADER_LOG` subscriber the first time any entry point runs.
pub(crate) fn init() {
    Lazy::force(&SUBSCRIBER);
}

/// Prints `line` to stderr when `OFFLOAD_LOADER_INFO` is set.
pub(crate) fn line(line: &str) {
    if *INFO {
        eprintln!("offload-loader: {line}");
    }
}
