//! An `nvcc -cudart none` program linked with `liboffload_loader`: its
//! startup code registers through `__cudaRegisterFatBinary` and friends, the
//! library selects an entry per device (inflating it when compressed), loads it
//! with `cuModuleLoadData` on the test-double libcuda and resolves the kernel
//! and the variable.

mod support;

use std::process::Command;

fn run(exe: &std::path::Path, devices: &str) -> (String, String, String) {
    run_with(exe, devices, &[])
}

/// [`run`] with `extra` set in the environment too.
fn run_with(
    exe: &std::path::Path,
    devices: &str,
    extra: &[(&str, &str)],
) -> (String, String, String) {
    let fake = support::built("liboffload_test_drivers.so").unwrap();
    let log = support::temp_file(b"");
    let out = Command::new(exe)
        .envs(extra.iter().copied())
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

/// The `-rdc` recipe of the README, run as it is written there (and on
/// GPUs newer than its `-arch`, for which the objects are linked at load as
/// libcudart links them): objects
/// compiled with `-rdc=true
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
    // The recipe runs `g++` from `PATH`.
    if support::system_tool("g++", "g++").is_none() {
        return;
    }
    let dir = support::temp_dir();
    let include = support::workspace().join("ffi/include");
    std::fs::write(
        dir.join("a.cu"),
        "#include <cstdio>\n#include \"offload_loader.h\"\n\
         __global__ void use(int *x);\n\
         int main() {\n  uint64_t k = 0;\n\
           int r = offload_loader_kernel((const void *)use, 0, &k);\n\
           printf(\"kernel use: %s\\n\", r == 0 ? \"resolved\" : offload_loader_last_error());\n\
           return 0;\n}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("b.cu"),
        "__device__ int shared_value = 3;\n\
         __global__ void use(int *x) { *x = shared_value; }\n",
    )
    .unwrap();
    // The README's recipe, as it is written there, run from a directory
    // laid out as the repository root: `ffi/include`, and the library
    // built by cargo in `target/release`.
    let readme = std::fs::read_to_string(support::workspace().join("README.md")).unwrap();
    let recipe = readme
        .split("<!-- rdc-recipe -->")
        .nth(1)
        .and_then(|rest| rest.split("```sh\n").nth(1))
        .and_then(|rest| rest.split("```").next())
        .expect("README: the -rdc recipe");
    let recipe: String = recipe.lines().map(|l| format!("{}\n", l.trim())).collect();
    std::fs::create_dir_all(dir.join("ffi")).unwrap();
    std::os::unix::fs::symlink(&include, dir.join("ffi/include")).unwrap();
    std::fs::create_dir_all(dir.join("target/release")).unwrap();
    std::os::unix::fs::symlink(&lib, dir.join("target/release/liboffload_loader.so")).unwrap();
    let path = format!(
        "{}:{}:{}",
        cuda.nvcc.parent().unwrap().display(),
        cuda.bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let fake = support::built("liboffload_test_drivers.so").unwrap();
    let out = Command::new("bash")
        .current_dir(&*dir)
        .args(["-e", "-c", &recipe])
        .env("PATH", path)
        .env("OFFLOAD_LOADER_CUDA_LIBRARY", &fake)
        .env("OFFLOAD_LOADER_HSA_LIBRARY", &fake)
        .env("FAKE_HSA_AGENTS", "")
        .env("FAKE_CUDA_DEVICES", "8.0")
        .output()
        .unwrap();
    assert!(out.status.success(), "the README's -rdc recipe: {out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "kernel use: resolved\n"
    );
    let (stdout, stderr, log) = run(&dir.join("app"), "8.0");
    assert!(
        stdout.contains("kernel use: resolved"),
        "{stdout}\n{stderr}"
    );
    assert!(
        log.lines().any(|l| l.starts_with("cuda load sm_80")),
        "{log}"
    );
    assert!(!log.contains("cuda link"), "{log}");
    // Newer GPUs, which the stub has no image for: as libcudart does, the
    // objects' fat binaries go to the driver's linker, which takes each
    // object's PTX, and the linked result is loaded.
    for (device, sm) in [("9.0", "sm_90"), ("12.0", "sm_120")] {
        let (stdout, stderr, log) = run(&dir.join("app"), device);
        assert!(
            stdout.contains("kernel use: resolved"),
            "{device}: {stdout}\n{stderr}\n{log}"
        );
        let taken: Vec<&str> = log
            .lines()
            .filter(|l| l.starts_with("cuda link ") && !l.contains(" complete "))
            .collect();
        assert_eq!(
            taken,
            [
                format!("cuda link {sm} ptx sm_80"),
                format!("cuda link {sm} ptx sm_80"),
            ],
            "{log}"
        );
        let complete = log
            .lines()
            .find_map(|l| l.strip_prefix(&format!("cuda link complete {sm} 2 ")))
            .unwrap_or_else(|| panic!("{device}: no link completed: {log}"));
        assert!(
            log.contains(&format!("cuda load {sm} {complete} ")),
            "{device}: the linked image is what was loaded: {log}"
        );
        assert!(
            stderr.contains("the CUDA driver links its 2 objects for it at load")
                && stderr.contains("linked from its 2 objects by the CUDA driver"),
            "{device}: {stderr}"
        );
    }
    // Older than the objects' PTX: nothing to link, said before any call.
    let (stdout, stderr, log) = run(&dir.join("app"), "7.5");
    assert!(stdout.contains("no compatible image"), "{stdout}");
    assert!(
        stderr.contains("its objects cannot be linked for it")
            && stderr.contains("PTX for sm_80 cannot be compiled for the older sm_75"),
        "{stderr}"
    );
    assert!(
        !log.contains("cuda link") && !log.contains("cuda load"),
        "{log}"
    );
}

/// `__managed__` variables of an `nvcc -cudart none` program (nvcc 13),
/// which did not link before (`__cudaRegisterManagedVar` was missing): the
/// host reads their initial values and writes them. With a GPU, nvcc's host
/// pointer is set to the memory the driver gave the variable in the loaded
/// module, as cudart does (the test driver gives a cubin's managed
/// variables host memory initialised from the cubin, as the real one gives
/// managed memory), and the variable is looked up by that address. With no
/// GPU, or none the fat binary has an image for, it points at host memory
/// holding the initial value read from the images (cubin or PTX).
#[test]
fn managed_variables_are_read_and_written_by_the_host() {
    let Some(cuda) = support::cuda() else { return };
    let Some(_) = support::built("liboffload_test_drivers.so") else {
        return;
    };
    let Some(exe) = cuda.with_loader("managed.cu", "managed", &["-arch=sm_80"]) else {
        return;
    };
    let values = "read=5 arr=1.5,2.5,3.5 zero=0\nwritten=9\n";
    // An sm_86 GPU runs the sm_80 cubin: the driver's memory.
    let (out, err, log) = run(&exe, "8.6");
    assert_eq!(
        out,
        format!("{values}device=0 lookup=0 size=4 host=1\n"),
        "{err}"
    );
    assert_eq!(log.lines().count(), 1, "{log}");
    // No GPU: the initial values from the images.
    let (out, err, _) = run(&exe, "");
    assert_eq!(out, values, "{err}");
    // A GPU with no image here (sm_70 runs neither the sm_80 cubin nor its
    // PTX): the same, and the lookup says why.
    let (out, err, _) = run(&exe, "7.0");
    assert!(out.starts_with(values), "{out}{err}");
    assert!(out.contains("device=0 lookup=-2"), "{out}");
    // Only PTX (compute_80): its initialisers are read the same way.
    let Some(ptx) = cuda.with_loader(
        "managed.cu",
        "managed-ptx",
        &["-gencode", "arch=compute_80,code=compute_80"],
    ) else {
        return;
    };
    let (out, err, _) = run(&ptx, "");
    assert_eq!(out, values, "{err}");
}

/// An `nvcc -cudart shared` program linked with this library first
/// (`-loffload_loader`, then nvcc's `-lcudart`; CUDA 13.5's libcudart from
/// its wheel): every registration reaches libcudart with the handle
/// libcudart returned, not this library's (a second definition of the
/// hooks between the two, tests/programs/cuda_spy.c, sees each call), and
/// the program's `cudaGetDeviceCount` and `<<<>>>` launch answer as without
/// this library (no GPU and no libcuda here: libcudart says so), while
/// `OFFLOAD_LOADER_INFO` names the image this library selects.
#[test]
fn beside_libcudart_registration_reaches_it() {
    let Some(cuda) = support::cuda() else { return };
    let Some(_) = support::built("liboffload_test_drivers.so") else {
        return;
    };
    let dir = support::scratch("cudart-beside");
    let Beside { lib, names, .. } = beside(&cuda, &dir);
    let build = support::build_dir().display().to_string();
    let source = support::program("cudart_launch.cu");
    let link = |output: &str, ours: &[&str]| {
        let mut cmd = cuda.nvcc_command();
        cmd.current_dir(&dir)
            .args(["-arch=sm_80", "-cudart", "shared"])
            .arg(&source)
            .args(ours)
            .arg(format!("-L{}", names.display()))
            .args(["-Xlinker", "-rpath", "-Xlinker"])
            .arg(format!("{build}:{}:{}", dir.display(), lib.display()))
            .args(["-o", output]);
        support::run_ok(&mut cmd);
        dir.join(output)
    };
    let plain = link("plain", &[]);
    let spied = link(
        "spied",
        &[
            &format!("-L{build}"),
            "-loffload_loader",
            "-Xlinker",
            "--no-as-needed",
            &format!("-L{}", dir.display()),
            "-lcuda_spy",
        ],
    );
    let (expected, _, _) = run(&plain, "8.6");
    assert!(expected.contains("launch rc="), "{expected}");
    let (out, err, _) = run(&spied, "8.6");
    assert_eq!(out, expected, "{err}");
    let calls: Vec<&str> = err.lines().filter(|l| l.starts_with("spy: ")).collect();
    assert_eq!(
        calls,
        [
            "spy: fat binary, handle returned",
            "spy: function _Z1kPi, its handle",
            "spy: variable dv (4 bytes), its handle",
            "spy: end, its handle",
            "spy: unregister, its handle",
        ],
        "{err}"
    );
    assert!(
        err.contains("CUDA device 0 (sm_86) loads [0] cuda-nvptx64-nvidia-cuda--sm_80"),
        "{err}"
    );
    // libcudart tears the driver down at exit, before this library's exit
    // handler (installed at registration, earlier than libcudart's at its
    // first call) runs: installed again at the program's first launch, it
    // runs before, so INFO still names the device and
    // `OFFLOAD_LOADER_EAGER=1` loads.
    let torn = [("SPY_TEAR_DOWN", "launch")];
    let (out, err, _) = run_with(&spied, "8.6", &torn);
    assert_eq!(out, expected, "{err}");
    assert!(
        err.contains("CUDA device 0 (sm_86) loads [0] cuda-nvptx64-nvidia-cuda--sm_80"),
        "{err}"
    );
    let eager = [("SPY_TEAR_DOWN", "launch"), ("OFFLOAD_LOADER_EAGER", "1")];
    let (out, err, log) = run_with(&spied, "8.6", &eager);
    assert_eq!(out, expected, "{err}");
    assert!(log.contains("cuda load sm_86"), "{log}\n{err}");
    // Torn down before the first launch, the driver names nothing: this
    // library names the result from cuda.h.
    let early = [("SPY_TEAR_DOWN", "now")];
    let (out, err, _) = run_with(&spied, "8.6", &early);
    assert_eq!(out, expected, "{err}");
    assert!(err.contains("CUDA_ERROR_DEINITIALIZED"), "{err}");
}

/// What a program beside libcudart links, made in `dir`.
struct Beside {
    /// The wheel's library directory.
    lib: std::path::PathBuf,
    /// A directory holding `libcudart.so` (the wheel has `libcudart.so.13`
    /// only: a link name for `-lcudart`).
    names: std::path::PathBuf,
    /// tests/programs/cuda_spy.c built as `libcuda_spy.so`.
    spy: std::path::PathBuf,
}

fn beside(cuda: &support::Cuda, dir: &std::path::Path) -> Beside {
    let lib = cuda.bin.parent().unwrap().join("lib");
    let names = dir.join("cudart");
    std::fs::create_dir_all(&names).unwrap();
    let _ = std::fs::remove_file(names.join("libcudart.so"));
    std::os::unix::fs::symlink(lib.join("libcudart.so.13"), names.join("libcudart.so")).unwrap();
    let spy = dir.join("libcuda_spy.so");
    support::run_ok(
        Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&spy)
            .arg(support::program("cuda_spy.c"))
            .arg("-ldl"),
    );
    Beside { lib, names, spy }
}

/// A wrapper and fat binary a program builds at run time in `malloc`ed
/// memory (tests/programs/heap_wrapper.c, as a JIT or a framework makes
/// them) are in no loaded object: this library cannot place them and hands
/// the registration, the kernel and the unregistration on to libcudart as
/// they are, with libcudart's handle (the spy between the two sees each
/// call), and says so under `OFFLOAD_LOADER_INFO` rather than warning.
#[test]
fn beside_libcudart_a_heap_wrapper_is_handed_on() {
    let Some(cuda) = support::cuda() else { return };
    let Some(_) = support::built("liboffload_test_drivers.so") else {
        return;
    };
    let dir = support::scratch("cudart-heap-wrapper");
    let Beside { lib, names, spy } = beside(&cuda, &dir);
    let compiled = dir.join("compiled");
    support::run_ok(
        cuda.nvcc_command()
            .args(["-arch=sm_80", "-cudart", "shared"])
            .arg(support::program("cudart_launch.cu"))
            .arg("-o")
            .arg(&compiled)
            .arg(format!("-L{}", names.display())),
    );
    let fatbin = dir.join("heap.fatbin");
    support::run_ok(
        Command::new("objcopy")
            .args(["-O", "binary", "--only-section=.nv_fatbin"])
            .arg(&compiled)
            .arg(&fatbin),
    );
    let build = support::build_dir();
    let exe = dir.join("heap_wrapper");
    support::run_ok(
        Command::new("cc")
            .args(["-DCUDA", "-o"])
            .arg(&exe)
            .arg(support::program("heap_wrapper.c"))
            .arg(format!("-L{}", build.display()))
            .args(["-loffload_loader", "-Wl,--no-as-needed"])
            .arg(&spy)
            .arg(format!("-L{}", names.display()))
            .arg("-lcudart")
            .arg(format!(
                "-Wl,-rpath,{}:{}:{}",
                build.display(),
                dir.display(),
                lib.display()
            )),
    );
    support::assert_heap_wrapper_handed_on(
        &exe,
        &fatbin,
        "libcudart",
        &[
            "spy: fat binary, handle returned",
            "spy: function _Z1kPi, its handle",
            "spy: unregister, its handle",
        ],
    );
}

/// One truth: on every capability of CUDA's tables (desktop, Tegra, the
/// ones no table classes), the runtime library registering an nvcc program
/// takes the image the probe names for that device, or none where the probe
/// finds none. The program holds desktop, Tegra (sm_87, sm_110) and
/// arch-specific cubins, and PTX.
#[test]
fn the_runtime_and_the_probe_choose_alike_on_every_capability() {
    let Some(cuda) = support::cuda() else { return };
    let (Some(_), Some(probe)) = (
        support::built("liboffload_test_drivers.so"),
        support::built("offload-probe"),
    ) else {
        return;
    };
    let mut args = Vec::new();
    for code in ["sm_75", "sm_80", "sm_87", "sm_90a", "sm_110", "sm_120"] {
        let arch = code.replace("sm_", "compute_");
        args.extend(["-gencode".to_string(), format!("arch={arch},code={code}")]);
    }
    args.extend([
        "-gencode".into(),
        "arch=compute_100,code=compute_100".into(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let Some(exe) = cuda.program_with_loader(&args) else {
        return;
    };
    let mut chose = 0;
    for sm in [
        75, 80, 86, 87, 88, 89, 90, 100, 101, 103, 107, 110, 120, 121,
    ] {
        let capability = format!("{}.{}", sm / 10, sm % 10);
        let out = Command::new(&probe)
            .args(["--json", "--device", &capability])
            .arg(&exe)
            .env_remove("OFFLOAD_LOADER_DEVICES")
            .output()
            .unwrap();
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        // The program's module (not nvlink's kernel-less stub).
        let module = report["objects"][0]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c.get("kernel_less").is_none())
            .unwrap();
        let probe_choice = module["selected"][0]["image"].as_u64().map(|i| {
            module["images"][i as usize]["target_id"]
                .as_str()
                .unwrap()
                .to_string()
        });
        let (stdout, stderr, log) = run(&exe, &capability);
        let loaded = log.lines().any(|l| l.starts_with("cuda load"));
        match &probe_choice {
            Some(target) => {
                assert!(
                    loaded,
                    "sm_{sm}: the probe takes {target}, nothing loaded: {stderr}"
                );
                let line = stdout
                    .lines()
                    .find(|l| l.contains("image") && l.contains(&format!("{target} ")))
                    .unwrap_or_else(|| panic!("sm_{sm}: not {target}: {stdout}"));
                assert!(!line.is_empty());
                chose += 1;
            }
            None => assert!(!loaded, "sm_{sm}: the probe takes nothing: {log}"),
        }
    }
    assert!(chose >= 10, "{chose}");
}
