//! What a pointer into the section is known to mean.

/// What a pointer is known to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Point {
    /// The start of something (an image, a symbol).
    Start,
    /// The end of something (an image's end).
    End,
    /// Either: a boundary between two containers must move the same way.
    Unknown,
}
