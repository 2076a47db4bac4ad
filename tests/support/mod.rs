//! The one test-support layer of the cross-crate tests: real clang-built
//! offload artefacts, built on demand and cached, what the reference tools say
//! about them, and programs linked with `liboffload_loader`.
//!
//! Use it from a test file with `mod support;` (from `probe/tests` with
//! `#[path = "../../tests/support/mod.rs"] mod support;`):
//!
//! ```ignore
//! let Some(tc) = support::toolchain() else { return }; // prints "skipped: ..."
//! let obj = tc.build(support::Hip::new(&["gfx90a:xnack+", "gfx906"]));
//! let (_, fatbin) = tc.hip_fatbin(&obj);
//! let ids = tc.bundler_list(&support::temp_file(&fatbin)).unwrap();
//! ```
//!
//! By concern:
//!
//! - [`tools`]: finding LLVM's tools of a version ([`toolchain`],
//!   [`toolchain_19`], [`tool`]) and the system's ([`system_tool`],
//!   [`rocsparse`]), with the Debian packages that ship them.
//! - [`build`]: the cache ([`Toolchain::build`]), scratch files and running
//!   commands.
//! - [`hip`], [`openmp`], [`packages`]: the recipes (HIP and OpenMP code,
//!   single code objects, PTX, offload binaries, raw bundles, archives).
//! - [`ffi`]: programs linked with `liboffload_loader` ([`LinkedProgram`])
//!   and run against the test-double drivers.
//! - [`cuda`]: NVIDIA's CUDA 13 `nvcc` and `cuobjdump` and two NVIDIA
//!   libraries from the PyPI wheels (`.ci/cuda-wheels.sh`): nvcc builds
//!   through the same cache, `nvcc -cudart none` programs linked with the
//!   library, what `cuobjdump` dumps, lists and extracts. Missing wheels
//!   fail under `CI=true` naming the script, else skip.
//! - [`reference`]: what `clang-offload-bundler`, `llvm-objdump
//!   --offloading`, `llvm-offload-binary`, `llvm-readobj` and `roc-obj-ls`
//!   say about a file.
//!
//! Missing tools: with `CI=true` every lookup panics naming the Debian package
//! to install; otherwise it prints `skipped: <tool> not installed` to stderr
//! and returns `None`, and the test returns early.
//!
//! Artefacts are built under `$CARGO_TARGET_TMPDIR/offload-fixtures/`, in a
//! directory named after a hash of the exact commands (and of the sources,
//! inputs and compiler binaries), so tests and test binaries share them. A
//! build runs in a private temporary directory that is renamed into place at
//! the end, so concurrent threads and processes never see a half built
//! artefact. The command lines are in `tests/fixtures/README.md`.
#![allow(dead_code, unused_imports)]

pub mod build;
pub mod cuda;
pub mod ffi;
pub mod hip;
pub mod openmp;
pub mod packages;
pub mod reference;
pub mod tools;

use std::path::{Path, PathBuf};

pub use build::*;
pub use cuda::*;
pub use ffi::*;
pub use hip::*;
pub use openmp::*;
pub use packages::*;
pub use reference::*;
pub use tools::*;

/// Whether missing tools are failures (`CI=true`) rather than skips.
pub fn ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// Reports that `what` (from Debian package `package`) is missing: panics
/// under `CI=true`, otherwise prints the skip line.
pub fn missing(what: &str, package: &str) {
    assert!(
        !ci(),
        "{what} is not installed: install the Debian package `{package}` (apt-get install {package})"
    );
    eprintln!("skipped: {what} not installed (Debian package {package})");
}

/// The workspace root: this package's directory, or its parent for a
/// member's tests (`probe/tests`) that include this module by path.
pub fn workspace() -> &'static Path {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    if dir.join("tests/support/mod.rs").exists() {
        dir
    } else {
        dir.parent().unwrap()
    }
}

/// A fixture source in `tests/fixtures/src` (e.g. `kernels.hip`).
pub fn fixture(name: &str) -> PathBuf {
    fixtures_dir().join(name)
}

pub fn fixtures_dir() -> PathBuf {
    workspace().join("tests/fixtures/src")
}

/// A test program's source, in `tests/programs`.
pub fn program(name: &str) -> PathBuf {
    workspace().join("tests/programs").join(name)
}

pub fn strings(s: &[&str]) -> Vec<String> {
    s.iter().map(|s| s.to_string()).collect()
}

/// Little-endian u16 at `at`.
pub fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().unwrap())
}

/// Little-endian u32 at `at`.
pub fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

/// Little-endian u64 at `at`.
pub fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}
