//! OpenMP offload programs compiled by clang-22 (`-fopenmp --offload-arch`),
//! registered through `__tgt_register_lib` by the library.

mod support;

use support::*;

#[test]
fn openmp_program_registers_images_and_entries() {
    let Some(e) = loader() else { return };
    let dir = scratch("omp");
    // No libomptarget is packaged: the library stands in for it.
    let exe = e.build(LinkedProgram::openmp(
        &["gfx90a:xnack-", "gfx1100"],
        "examples/openmp_query.c",
    ));
    let log = dir.join("log");
    let out = run_ok(
        e.fake_driver(&exe, "gfx90a:sramecc+:xnack-;gfx1100", &log)
            .env("OFFLOAD_LOADER_CUDA_LIBRARY", "/nonexistent"),
    );
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    // The host fallback ran the region; one kernel and one variable registered.
    assert!(
        text.contains("x=6 devices=2 libraries=1 symbols=2"),
        "{text}"
    );
    assert!(
        text.contains("omp device=gfx90a:sramecc+:xnack- selected=0 image=0 target=gfx90a:xnack-"),
        "{text}"
    );
    assert!(
        text.contains("omp device=gfx1100 selected=0 image=1 target=gfx1100"),
        "{text}"
    );
    assert!(
        text.contains("omp device=gfx1100 variable=0 size=4"),
        "{text}"
    );
    assert!(text.contains("loads [0] openmp-amdgcn-amd-amdhsa--gfx90a:xnack-; not [1] gfx1100: it is built for gfx1100, the device is gfx90a"), "{text}");
    assert!(text.contains("unregistered"), "{text}");
    // Each device loaded the ELF inside its offload binary, once.
    let loads = std::fs::read_to_string(&log).unwrap();
    assert_eq!(loads.lines().count(), 2, "{loads}");
}
