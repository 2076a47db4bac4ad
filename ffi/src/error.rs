//! The one error type of the C ABI: each variant is one status code of
//! `include/offload_loader.h`, and its `Display` is the thread's last-error
//! message.

use std::ffi::c_int;

use offload_detect::DriverError;

/// Success.
pub const OK: c_int = 0;
/// No such device, library, kernel or variable.
pub const NOT_FOUND: c_int = -1;
/// The device has no compatible image in the library.
pub const NO_IMAGE: c_int = -2;
/// The driver failed to load the image or resolve the symbol.
pub const DRIVER: c_int = -3;
/// A null pointer or an out-of-range argument.
pub const INVALID: c_int = -4;
/// The caller's buffer is too small.
pub const TOO_SMALL: c_int = -5;
/// An internal error was caught.
pub const INTERNAL: c_int = -6;
/// The selected image's bytes could not be read: a malformed container, a
/// compressed bundle that does not inflate or fails its hash, a compressed
/// entry this library cannot inflate.
pub const BAD_IMAGE: c_int = -7;

/// Why a call into the C ABI failed.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum Error {
    /// No device with this index.
    #[error("no device {0}")]
    NoDevice(i64),
    /// No registered library with this id.
    #[error("no library {0}")]
    NoLibrary(i64),
    /// Nothing registered under this host address or name.
    #[error("no registered {0}")]
    NoSymbol(String),
    /// The device has no compatible image; the message gives the reasons.
    #[error("{0}")]
    NoImage(String),
    /// The chosen image's bytes could not be read.
    #[error("{origin}: {source}")]
    BadImage {
        /// The library.
        origin: String,
        /// What the reader said.
        source: Box<offload_loader::Error>,
    },
    /// The driver failed.
    #[error("{origin}: {what} on device {device}: {source}")]
    Driver {
        /// The library.
        origin: String,
        /// What was being done: `loading <image id>`, a symbol's name.
        what: String,
        /// The device index.
        device: usize,
        /// The driver's error.
        source: Box<DriverError>,
    },
    /// A null pointer or bad argument.
    #[error("{0}")]
    Invalid(&'static str),
    /// The caller's buffer cannot hold the answer.
    #[error("buffer of {len} bytes is too small for {needed} bytes")]
    TooSmall {
        /// The buffer's size.
        len: usize,
        /// The bytes needed, NUL included.
        needed: usize,
    },
}

impl Error {
    /// The status code of `include/offload_loader.h` for this error.
    pub(crate) fn code(&self) -> c_int {
        match self {
            Error::NoDevice(_) | Error::NoLibrary(_) | Error::NoSymbol(_) => NOT_FOUND,
            Error::NoImage(_) => NO_IMAGE,
            Error::BadImage { .. } => BAD_IMAGE,
            Error::Driver { .. } => DRIVER,
            Error::Invalid(_) => INVALID,
            Error::TooSmall { .. } => TOO_SMALL,
        }
    }
}

/// Why a registration call (`__hipRegisterFatBinary`, `__tgt_register_lib`
/// and their families) could not record what it was handed: said as a
/// warning and the thread's last error, since those calls return nothing a
/// caller checks.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum RegistrationError {
    /// An address outside every loaded object.
    #[error("{what} at {address:#x} is not in any loaded object")]
    NotLoaded {
        /// What was expected there.
        what: &'static str,
        address: u64,
    },
    /// A structure that runs past the end of its segment.
    #[error("{what} at {address:#x} ({len} bytes) runs past its segment")]
    PastSegment {
        what: &'static str,
        address: u64,
        len: u64,
    },
    /// A structure that does not parse.
    #[error("{origin}: {what}: {source}")]
    Malformed {
        /// `<object> descriptor at 0x…`, or the wrapper's object.
        origin: String,
        /// Which structure: `fat binary wrapper at 0x…`, `image 3`, `host entries`.
        what: String,
        source: Box<offload_loader::Error>,
    },
    /// A wrapper of the other runtime's kind (a CUDA wrapper given to HIP).
    #[error("{origin}: wrapper at {address:#x} is a {found} wrapper, not {expected}'s")]
    WrongWrapper {
        origin: String,
        address: u64,
        found: String,
        expected: String,
    },
}

/// `OK`, or the error recorded as the thread's last error and its code.
pub(crate) fn status(result: Result<(), Error>) -> c_int {
    match result {
        Ok(()) => OK,
        Err(e) => {
            let code = e.code();
            crate::set_last_error(e.to_string());
            code
        }
    }
}
