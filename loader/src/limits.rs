//! Bounds on what reading untrusted offload data may cost.
//!
//! A container's headers are small and its tables are what a compiler wrote
//! (clang writes one bundle entry per offload arch; a CUDA 13 library's fat
//! binary has a few dozen entries), but a hostile file can promise anything:
//! a 3 KB compressed bundle that inflates to a table of millions of empty
//! entries, a fat binary of thousands of zero-sized entries. Every reader
//! takes a [`Limits`] and refuses, with a typed error naming the field, what
//! goes past it, so memory stays proportional to what is listed.

/// Bounds on decompression and on table sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest uncompressed size accepted; a header promising more is an error
    /// before anything is decompressed. Default 4 GiB.
    pub max_uncompressed: u64,
    /// Most entries one container's table may list (bundle entries, offload
    /// binary entries, fat-binary entries). Default 65,536.
    pub max_entries: u64,
    /// Whether a full decompression checks the stored MD5 prefix. Default on.
    pub verify_hash: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_uncompressed: 4 << 30,
            max_entries: 1 << 16,
            verify_hash: true,
        }
    }
}
