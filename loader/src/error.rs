//! The one error type of the format parsers.
//!
//! Every parser works over a `&[u8]` and reports offsets relative to the start of
//! the buffer it was given. Layers that know more (the section a buffer came from,
//! its file offset, the file's path) add that context with [`Error::at`] and
//! [`crate::discover::FileError`], so a message always names the offset and what
//! was wrong, and the file once it is known.

use std::fmt;

/// A parse error: what was wrong and at which byte offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// Offset of the offending field or structure, from the start of the buffer
    /// the parser was given (shifted by [`Error::at`] as context is added).
    pub offset: u64,
    /// Set when [`Error::offset`] lies in inflated data, which no file offset
    /// names: then `offset` counts from the start of the inflated bytes, and
    /// this is where the compressed container they were inflated from starts
    /// (shifted by [`Error::at`] instead of `offset`).
    pub inflated_from: Option<u64>,
    /// What was wrong.
    pub kind: ErrorKind,
}

/// What was wrong with the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ErrorKind {
    /// The input ends before a structure it must contain.
    #[error("{what} is truncated: needs {needed} bytes, {available} available")]
    Truncated {
        /// The structure or field being read.
        what: &'static str,
        /// Bytes it needs.
        needed: u64,
        /// Bytes there were.
        available: u64,
    },
    /// The magic bytes of the expected format are missing.
    #[error("{what}: bad magic")]
    BadMagic {
        /// The format expected.
        what: &'static str,
    },
    /// A version this crate does not read.
    #[error("{what}: unsupported version {version}")]
    UnsupportedVersion {
        /// The format.
        what: &'static str,
        /// The version found.
        version: u64,
    },
    /// An offset/size pair that points outside its container (or wraps).
    #[error("{what} at offset {start} with size {size} lies outside the {len}-byte container")]
    OutOfBounds {
        /// What the range holds.
        what: &'static str,
        /// Its start.
        start: u64,
        /// Its size.
        size: u64,
        /// The length of what it should lie in.
        len: u64,
    },
    /// A count or size beyond what the input could hold or a configured limit.
    #[error("{what} of {value} exceeds the limit of {limit}")]
    TooLarge {
        /// The count or size.
        what: &'static str,
        /// Its value.
        value: u64,
        /// The largest accepted.
        limit: u64,
    },
    /// A field with a value the format does not allow.
    #[error("{what}: {why}")]
    Malformed {
        /// The structure or field.
        what: &'static str,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A field with a value the format does not allow, with the value shown.
    #[error("{what}: unexpected value {value:#x}")]
    BadValue {
        /// The field, with what it may hold.
        what: &'static str,
        /// The value found.
        value: u64,
    },
    /// Text that must be UTF-8 is not.
    #[error("{what} is not valid UTF-8")]
    NotUtf8 {
        /// The text.
        what: &'static str,
    },
    /// A compressed payload whose stored hash does not match its content.
    #[error("hash mismatch: header says {expected:#018x}, content hashes to {actual:#018x}")]
    HashMismatch {
        /// The hash the header stores.
        expected: u64,
        /// The hash of the inflated content.
        actual: u64,
    },
    /// The decompressor failed or produced a different size than promised.
    #[error("{method} decompression failed: {message}")]
    Decompress {
        /// `zlib` or `zstd`.
        method: &'static str,
        /// What the decompressor said.
        message: String,
    },
    /// Compressing (writing a `CCOB`) failed.
    #[error("{method} compression failed: {message}")]
    Compress {
        /// `zlib` or `zstd`.
        method: &'static str,
        /// The compressor's message.
        message: String,
    },
    /// A target ID or processor name that is not valid.
    #[error(transparent)]
    TargetId(#[from] crate::target::TargetIdError),
}

impl Error {
    /// An error of `kind` at `offset`.
    pub fn new(offset: u64, kind: ErrorKind) -> Self {
        Error {
            offset,
            inflated_from: None,
            kind,
        }
    }

    /// Where in the parsed buffer the error is: its offset, or for an error in
    /// inflated data, the offset of the compressed container.
    pub fn container_offset(&self) -> u64 {
        self.inflated_from.unwrap_or(self.offset)
    }

    /// Marks the error as found in the data inflated from the compressed
    /// container at offset 0 of the buffer being parsed (see
    /// [`Error::inflated_from`]); its offset stays relative to that data.
    #[must_use]
    pub fn inflated(mut self) -> Self {
        if self.inflated_from.is_none() {
            self.inflated_from = Some(0);
        }
        self
    }

    /// Shifts the offset by `base`: used when the failing buffer starts at `base`
    /// within a larger one (a section within a file, a bundle within a section).
    /// For an error in inflated data, the compressed container's offset moves.
    #[must_use]
    pub fn at(mut self, base: u64) -> Self {
        match &mut self.inflated_from {
            Some(container) => *container = container.saturating_add(base),
            None => self.offset = self.offset.saturating_add(base),
        }
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.inflated_from {
            Some(container) => write!(
                f,
                "at offset {:#x} of the data inflated from the compressed container at {container:#x}: {}",
                self.offset, self.kind
            ),
            None => write!(f, "at offset {:#x}: {}", self.offset, self.kind),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.kind.source()
    }
}

/// The result type of the parsers.
pub type Result<T, E = Error> = std::result::Result<T, E>;
