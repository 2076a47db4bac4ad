//! The workspace's root package: it holds the cross-crate tests in `tests/` and
//! the examples in `examples/`, and re-exports the crates they use.

pub use offload_detect as detect;
pub use offload_loader as loader;
