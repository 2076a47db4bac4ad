//! The Rust example, built by `cargo test`, run on the real rocSPARSE library.

mod support;

use std::process::Command;

use support::*;

#[test]
fn list_and_select_example_runs() {
    let Some(lib) = rocsparse() else {
        return;
    };
    let Some(example) = built("examples/list_and_select") else {
        return;
    };
    let out = run_ok(Command::new(example).arg(&lib).arg("gfx908:xnack-"));
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.matches(".hip_fatbin bundle at").count(), 111);
    assert_eq!(
        text.matches("gfx908:xnack- runs [5] hipv4-amdgcn-amd-amdhsa--gfx908:xnack-")
            .count(),
        111
    );
    assert!(text.contains("not [6]: it is built for gfx90a, the device is gfx908"));
}
