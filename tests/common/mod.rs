//! Shared by the cross-crate tests: finding the reference tools and the built
//! libraries, scratch directories, and running programs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Whether this run is CI (`CI=true`), where a missing tool is a failure.
pub fn ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// `what` is missing: fail under CI, otherwise say the test is skipped.
pub fn missing(what: &str, package: &str) {
    assert!(
        !ci(),
        "{what} is missing: install the Debian package {package}"
    );
    eprintln!("skipped: {what} not installed (Debian package {package})");
}

/// A tool from PATH or LLVM 22's directory, e.g. `clang-22`, `clang-offload-bundler`.
pub fn tool(name: &str, package: &str) -> Option<PathBuf> {
    // LLVM 22's own directory first: /usr/bin may hold another LLVM's unversioned tools.
    for dir in ["/usr/lib/llvm-22/bin", "/usr/bin"] {
        let p = Path::new(dir).join(name);
        if p.exists() {
            return Some(p);
        }
    }
    missing(name, package);
    None
}

/// The directory cargo builds into (`target/debug`), from this test's path.
pub fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/debug/deps/<test> -> target/debug
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// A library `cargo build --workspace` produces (`.ci/run` builds it first).
pub fn built(file: &str) -> Option<PathBuf> {
    let p = build_dir().join(file);
    if p.exists() {
        return Some(p);
    }
    assert!(
        !ci(),
        "{} is missing: run `cargo build --workspace` before the tests",
        p.display()
    );
    eprintln!(
        "skipped: {} not built (run `cargo build --workspace`)",
        p.display()
    );
    None
}

/// A fresh scratch directory for `name`.
pub fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `cmd`, panicking with its output if it fails.
pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The test programs' sources.
pub fn program(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/programs")
        .join(name)
}
