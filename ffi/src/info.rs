//! Messages: `OFFLOAD_LOADER_INFO=1` prints one line per registration to
//! stderr (as `LIBOMPTARGET_INFO` does); `OFFLOAD_LOADER_LOG` sets a `tracing`
//! filter (e.g. `offload_loader=debug`). No global subscriber is installed
//! unless one of them is set.
//!
//! Saying something is an effect (rule 3 of [`crate::loader_lock`]): stderr
//! and `tracing`'s per-thread buffers may take the dynamic loader's lock on a
//! thread's first use, so messages made inside a reader are carried out of
//! it ([`Message`]) and said here.

use std::sync::atomic::{AtomicBool, Ordering};

use once_cell::race::OnceBool;

use crate::library::Message;
use crate::loader_lock;

static INFO: OnceBool = OnceBool::new();
static SUBSCRIBER: AtomicBool = AtomicBool::new(false);

/// Whether `OFFLOAD_LOADER_INFO` asks for registration lines (read once; no
/// lock, so a `fork` can leave nothing half-initialised).
pub(crate) fn enabled() -> bool {
    INFO.get_or_init(|| {
        std::env::var("OFFLOAD_LOADER_INFO").is_ok_and(|v| !v.is_empty() && v != "0")
    })
}

/// Installs the `OFFLOAD_LOADER_LOG` subscriber, the first time.
#[inline]
pub(crate) fn init() {
    // One load on every entry point's path; the rest only the first time.
    if !SUBSCRIBER.load(Ordering::Relaxed) {
        install();
    }
}

#[cold]
#[inline(never)]
fn install() {
    if SUBSCRIBER.swap(true, Ordering::AcqRel) {
        return;
    }
    if let Ok(filter) = std::env::var("OFFLOAD_LOADER_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .try_init();
    }
}

/// Says `messages`: info lines when `OFFLOAD_LOADER_INFO` is set; warnings
/// always, to stderr, `tracing` and the thread's last error.
pub(crate) fn say(messages: impl IntoIterator<Item = Message>) {
    loader_lock::check("a message");
    init();
    for message in messages {
        match message {
            Message::Info(line) => {
                if enabled() {
                    eprintln!("offload-loader: {line}");
                }
            }
            Message::Warning(text) => {
                tracing::warn!("{text}");
                eprintln!("offload-loader: {text}");
                crate::set_last_error(text);
            }
        }
    }
}

/// Says one warning (see [`say`]).
pub(crate) fn warn(text: impl Into<String>) {
    say([Message::Warning(text.into())]);
}
