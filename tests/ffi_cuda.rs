//! An `nvcc -cudart none` program linked with `liboffload_loader`: its
//! startup code registers through `__cudaRegisterFatBinary` and friends, the
//! library selects an entry per device (inflating it when compressed), loads it
//! with `cuModuleLoadData` on the test-double libcuda and resolves the kernel
//! and the variable.

mod support;

use std::process::Command;

fn run(exe: &std::path::Path, devices: &str) -> (String, String, String) {
    let fake = support::built("liboffload_test_drivers.so").unwrap();
    let log = support::temp_file(b"");
    let out = Command::new(exe)
        .env("OFFLOAD_LOADER_CUDA_LIBRARY", &fake)
        .env("OFFLOAD_LOADER_HSA_LIBRARY", &fake)
        .env("FAKE_HSA_AGENTS", "")
        .env("FAKE_CUDA_DEVICES", devices)
        // CUDA 13.5's driver: its PTX ISA 9.5 is what nvcc 13.5 writes.
        .env("FAKE_CUDA_DRIVER_VERSION", "13050")
        .env("FAKE_DRIVER_LOG", &*log)
        .env("OFFLOAD_LOADER_INFO", "1")
        .env_remove("OFFLOAD_LOADER_DEVICES")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        std::fs::read_to_string(&*log).unwrap_or_default(),
    )
}

#[test]
fn nvcc_program_registers_selects_and_resolves() {
    let Some(cuda) = support::cuda() else { return };
    let Some(_) = support::built("liboffload_test_drivers.so") else {
        return;
    };
    let args = [
        "-gencode",
        "arch=compute_80,code=sm_80",
        "-gencode",
        "arch=compute_90a,code=sm_90a",
        "-gencode",
        "arch=compute_75,code=compute_75",
        "-Xfatbin",
        "-compress-all",
    ];
    let Some(exe) = cuda.program_with_loader(&args) else {
        return;
    };
    // 9.0: its a cubin; 8.6: the sm_80 cubin; 12.0: the compute_75 PTX (JIT).
    for (device, target) in [("9.0", "sm_90a"), ("8.6", "sm_80"), ("12.0", "sm_75")] {
        let (stdout, stderr, log) = run(&exe, device);
        assert!(
            stdout.contains("kernel add_one: resolved"),
            "{device}: {stdout}\n{stderr}"
        );
        assert!(
            stdout.contains("variable scale: resolved 4 bytes"),
            "{device}: {stdout}\n{stderr}"
        );
        assert!(
            stdout
                .lines()
                .any(|l| l.contains("image") && l.contains(target)),
            "{device}: {stdout}"
        );
        // The chosen entry, inflated from zstd, is what the driver received:
        // a whole cubin, or PTX with its NUL.
        let load = log
            .lines()
            .find(|l| l.starts_with("cuda load"))
            .unwrap_or_else(|| panic!("{device}: nothing loaded: {log}\n{stderr}"));
        let size: usize = load.split_whitespace().nth(3).unwrap().parse().unwrap();
        let reported = stdout
            .lines()
            .find_map(|l| {
                l.split_once(&format!("{target} "))?
                    .1
                    .strip_suffix(" bytes")
            })
            .unwrap();
        assert_eq!(size.to_string(), reported, "{device}: {load} vs {stdout}");
    }
}

/// The `-rdc` recipe of the README: objects compiled with `-rdc=true
/// -cudart none`, device-linked by `nvcc -dlink` *without* `-cudart none`
/// (which would imply `-nodlink`), and linked with `liboffload_loader`: the
/// device-link stub needs only `__cudaRegisterFatBinary`, its `End`,
/// `__cudaUnregisterFatBinary` and the objects' `__fatbinwrap_*`, and a
/// kernel defined in one translation unit is resolved from another.
#[test]
fn rdc_programs_link_and_resolve_across_translation_units() {
    let Some(cuda) = support::cuda() else { return };
    let (Some(lib), Some(_)) = (
        support::built("liboffload_loader.so"),
        support::built("liboffload_test_drivers.so"),
    ) else {
        return;
    };
    let Some(gxx) = support::system_tool("g++", "g++") else {
        return;
    };
    let dir = support::temp_dir();
    let include = support::workspace().join("ffi/include");
    std::fs::write(
        dir.join("a.cu"),
        "#include <cstdio>\n#include \"offload_loader.h\"\n\
         __global__ void use(int *x);\n\
         int main() {\n  uint64_t k = 0;\n\
           int r = offload_loader_kernel((const void *)use, 0, &k);\n\
           printf(\"kernel use: %s\\n\", r == 0 ? \"resolved\" : offload_loader_last_error());\n\
           return r != 0;\n}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("b.cu"),
        "__device__ int shared_value = 3;\n\
         __global__ void use(int *x) { *x = shared_value; }\n",
    )
    .unwrap();
    let nvcc = |args: &[&str]| {
        let out = cuda
            .nvcc_command()
            .current_dir(&*dir)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "nvcc {args:?}: {out:?}");
    };
    let inc = format!("-I{}", include.display());
    nvcc(&[
        "-rdc=true",
        "-cudart",
        "none",
        "-arch=sm_80",
        &inc,
        "-c",
        "a.cu",
        "b.cu",
    ]);
    nvcc(&["-dlink", "-arch=sm_80", "a.o", "b.o", "-o", "dlink.o"]);
    let libdir = lib.parent().unwrap().display().to_string();
    let out = Command::new(gxx)
        .current_dir(&*dir)
        .args(["a.o", "b.o", "dlink.o", "-o", "rdc"])
        .arg(format!("-L{libdir}"))
        .arg("-loffload_loader")
        .arg(format!("-Wl,-rpath,{libdir}"))
        .output()
        .unwrap();
    assert!(out.status.success(), "link: {out:?}");
    let (stdout, stderr, log) = run(&dir.join("rdc"), "8.0");
    assert!(
        stdout.contains("kernel use: resolved"),
        "{stdout}\n{stderr}"
    );
    assert!(log.lines().any(|l| l.starts_with("cuda load")), "{log}");
}
