//! Why a file's layout cannot be compacted: the reason every rewrite of
//! the crate gives.

/// Why a file cannot be compacted safely.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot be compacted safely: {why}")]
pub struct Unsafe {
    /// Why.
    pub why: String,
    /// Whether rewriting the section's containers where they stand (nothing
    /// kept moves inside a bundle, nothing starts elsewhere) is still safe:
    /// false when something is known to point inside what would change.
    pub in_place: bool,
}

impl Unsafe {
    /// A layout that cannot be compacted, for `why`.
    pub(crate) fn new(why: impl Into<String>) -> Unsafe {
        Unsafe {
            why: why.into(),
            in_place: true,
        }
    }

    /// A file that cannot be rewritten even in place, for `why`.
    pub(crate) fn not_in_place(why: impl Into<String>) -> Unsafe {
        Unsafe {
            why: why.into(),
            in_place: false,
        }
    }
}

/// [`Unsafe::new`], short.
pub(crate) fn unsafe_(why: impl Into<String>) -> Unsafe {
    Unsafe::new(why)
}
