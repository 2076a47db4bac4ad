//! OpenMP offload programs compiled by clang-22 (`-fopenmp --offload-arch`),
//! registered through `__tgt_register_lib` by the library.

mod support;

use std::path::Path;
use std::process::Command;

use support::*;

#[test]
fn openmp_program_registers_images_and_entries() {
    let Some(clang) = tool("clang", 22) else {
        return;
    };
    let (Some(lib), Some(fake)) = (
        built("liboffload_loader.so"),
        built("liboffload_test_drivers.so"),
    ) else {
        return;
    };
    if !Path::new("/usr/lib/llvm-22/lib/libomp.so").exists() {
        missing("libomp.so (LLVM 22)", "libomp-22-dev");
        return;
    }
    let dir = scratch("omp");
    // No libomptarget is packaged: the library stands in for it.
    let shim = dir.join("shim");
    std::fs::create_dir_all(&shim).unwrap();
    std::os::unix::fs::symlink(&lib, shim.join("libomptarget.so")).unwrap();
    let exe = dir.join("omp");
    run_ok(
        Command::new(clang)
            .args([
                "-fopenmp",
                "--offload-arch=gfx90a:xnack-,gfx1100",
                "-nogpulib",
            ])
            .args([
                "-Xoffload-linker",
                "--unresolved-symbols=ignore-all",
                "-fuse-ld=lld",
            ])
            .arg(format!(
                "-I{}",
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("ffi/include")
                    .display()
            ))
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/openmp_query.c"))
            .arg(format!("-L{}", shim.display()))
            .arg(format!("-Wl,-rpath,{}", shim.display()))
            .arg("-o")
            .arg(&exe),
    );
    let log = dir.join("log");
    let out = run_ok(
        Command::new(&exe)
            .env("OFFLOAD_LOADER_HSA_LIBRARY", &fake)
            .env("OFFLOAD_LOADER_CUDA_LIBRARY", "/nonexistent")
            .env("FAKE_HSA_AGENTS", "gfx90a:sramecc+:xnack-;gfx1100")
            .env("FAKE_DRIVER_LOG", &log)
            .env("OFFLOAD_LOADER_INFO", "1"),
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
