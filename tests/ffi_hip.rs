//! HIP programs compiled by clang-22, linked with liboffload_loader, run under
//! the test-double drivers and under OFFLOAD_LOADER_DEVICES.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::*;

const ARCHS: &[&str] = &["gfx90a:xnack-", "gfx90a:xnack+", "gfx1100", "gfx11-generic"];

/// `tests/programs/app.hip` for [`ARCHS`], linked with the shared library.
fn app() -> LinkedProgram {
    LinkedProgram::hip(ARCHS, "app.hip")
}

/// `tests/programs/lib.hip` for [`ARCHS`] as the shared library `name`.
fn lib(name: &str) -> LinkedProgram {
    LinkedProgram::hip(ARCHS, "lib.hip").shared_library(name)
}

/// Runs `exe` with the fake HSA driver showing two AMD GPUs.
fn run_fake(
    e: &Loader,
    exe: &Path,
    args: &[&str],
    log: &Path,
    extra_env: &[(&str, &str)],
) -> String {
    let mut cmd = e.fake_driver(exe, "gfx90a:sramecc+:xnack-;gfx1103|gfx11-generic", log);
    cmd.args(args);
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    output_text(&mut cmd)
}

#[test]
fn executable_registers_selects_and_resolves_on_each_device() {
    let Some(e) = loader() else { return };
    let dir = scratch("hip-exe");
    for (name, compress) in [("plain", false), ("compressed", true)] {
        let exe = e.build(if compress { app().compress() } else { app() });
        let log = dir.join(format!("{name}.log"));
        let out = run_fake(&e, &exe, &[], &log, &[]);
        assert!(out.contains("devices=2 libraries=1"), "{out}");
        let got: Vec<String> = lines(&out, "app device=gfx90a:sramecc+:xnack-")
            .iter()
            .map(|l| strip_bytes(l))
            .collect();
        assert_eq!(
            got,
            [
                "app device=gfx90a:sramecc+:xnack- selected=0 image=4 target=gfx90a:xnack-",
                "app device=gfx90a:sramecc+:xnack- kernel=0",
                "app device=gfx90a:sramecc+:xnack- variable=0 size=4",
            ],
            "{out}"
        );
        // gfx1103 has no specific image: the gfx11-generic one runs.
        assert!(
            out.contains("app device=gfx1103 selected=0 image=1 target=gfx11-generic"),
            "{out}"
        );
        assert!(out.contains("app device=gfx1103 kernel=0"), "{out}");
        // Lazy loading: each device loaded its image once, on first lookup.
        let loads = std::fs::read_to_string(&log).unwrap();
        let loads: Vec<&str> = loads.lines().collect();
        assert_eq!(loads.len(), 2, "{loads:?}");
        assert!(loads[0].starts_with("hsa load gfx90a:sramecc+:xnack- "));
        assert!(loads[1].starts_with("hsa load gfx1103 "));
        // OFFLOAD_LOADER_INFO: one line per device, with why the others lost.
        assert!(out.contains("HIP device 0 (gfx90a:sramecc+:xnack-) loads [4] hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-; not [1] gfx11-generic: gfx11-generic code does not run on gfx90a, which is not in that family; [2] gfx1100: it is built for gfx1100, the device is gfx90a; [3] gfx90a:xnack+: it needs xnack+ but the device is xnack-"), "{out}");
        assert!(out.contains("unregistered"), "{out}");
    }
}

/// A program whose registered images are all for AMD GPUs opens no NVIDIA
/// driver: detection is asked for AMD only, and says so.
#[test]
fn a_hip_program_detects_amd_gpus_only() {
    let Some(e) = loader() else { return };
    let dir = scratch("hip-vendors");
    let exe = e.build(app());
    let mut cmd = e.fake_driver(&exe, "gfx90a:sramecc+:xnack-", &dir.join("log"));
    cmd.env_remove("OFFLOAD_LOADER_CUDA_LIBRARY")
        .env("OFFLOAD_LOADER_LOG", "offload_detect=debug");
    let out = output_text(&mut cmd);
    assert!(out.contains("devices=1 libraries=1"), "{out}");
    assert!(
        out.contains("cuda: skipped: no NVIDIA GPU asked for"),
        "{out}"
    );
    assert!(out.contains("hsa: found 1"), "{out}");
}

fn strip_bytes(line: &str) -> String {
    line.split(" bytes=").next().unwrap().to_string()
}

#[test]
fn eager_loading_and_the_loaded_bytes_are_the_selected_image() {
    let Some(e) = loader() else { return };
    let (dir, exe) = (scratch("hip-eager"), e.build(app()));
    let log = dir.join("eager.log");
    let out = run_fake(&e, &exe, &[], &log, &[("OFFLOAD_LOADER_EAGER", "1")]);
    assert!(out.contains("app device=gfx1103 kernel=0"), "{out}");
    let loads = std::fs::read_to_string(&log).unwrap();
    assert_eq!(loads.lines().count(), 2, "{loads}");
    // The bytes loaded on gfx90a are exactly the gfx90a:xnack- image of the
    // executable's bundle, as clang-offload-bundler extracts it.
    let (_, fatbin) = e.tc.hip_fatbin(&exe);
    let bytes =
        e.tc.unbundle(
            &temp_file(&fatbin),
            "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-",
        )
        .unwrap();
    let first = loads.lines().next().unwrap();
    let fnv = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    assert_eq!(
        first,
        format!("hsa load gfx90a:sramecc+:xnack- {} {fnv:016x}", bytes.len())
    );
}

#[test]
fn shared_library_linked_and_dlopened() {
    let Some(e) = loader() else { return };
    let dir = scratch("hip-lib");
    let lib = e.build(lib("libkernels.so"));
    // Linked: the library's constructor registers first.
    let exe = e.build(LinkedProgram::hip(ARCHS, "uses_lib.hip").link(&lib));
    let out = run_fake(&e, &exe, &[], &dir.join("linked.log"), &[]);
    assert!(out.contains("libraries=2"), "{out}");
    for who in ["lib", "main"] {
        for device in ["gfx90a:sramecc+:xnack-", "gfx1103"] {
            assert!(
                out.contains(&format!("{who} device={device} kernel=0")),
                "{who} {device}: {out}"
            );
            assert!(
                out.contains(&format!("{who} device={device} variable=0")),
                "{who} {device}: {out}"
            );
        }
    }
    // dlopen'ed later: registered then, and unregistered at dlclose.
    let src = std::fs::read_to_string(program("uses_lib.hip"))
        .unwrap()
        .replace(
            "extern \"C\" void lib_report(int library);",
            "static void lib_report(int) {}",
        );
    let exe = e.build(LinkedProgram::hip_text(&["gfx90a"], "dlopens.hip", &src).arg("-ldl"));
    let out = run_fake(&e, &exe, &[lib.to_str().unwrap()], &dir.join("dl.log"), &[]);
    assert!(out.contains("libraries=2"), "{out}");
    assert!(
        out.contains("lib device=gfx90a:sramecc+:xnack- kernel=0"),
        "{out}"
    );
    assert!(
        out.contains("library 1 (") && out.contains("libkernels.so"),
        "{out}"
    );
    assert!(
        out.contains("main device=gfx1103 selected=-2"),
        "gfx1103 has no image in main: {out}"
    );
    assert!(
        out.contains("no binary for GPU: HIP device 1 (gfx1103) has no compatible image"),
        "{out}"
    );
}

#[test]
fn static_library_works_as_well() {
    let Some(e) = loader() else { return };
    let dir = scratch("hip-static");
    let exe = e.build(app().static_loader());
    let needed = run_ok(Command::new("ldd").arg(&exe));
    assert!(!String::from_utf8_lossy(&needed.stdout).contains("liboffload_loader"));
    let out = run_fake(&e, &exe, &[], &dir.join("log"), &[]);
    assert!(out.contains("app device=gfx1103 kernel=0"), "{out}");
}

#[test]
fn never_aborts_the_host() {
    let Some(e) = loader() else { return };
    let (dir, exe) = (scratch("hip-failures"), e.build(app()));
    let log = dir.join("log");
    // A driver whose loads fail: typed error with the driver's own string.
    let out = run_fake(&e, &exe, &[], &log, &[("FAKE_HSA_LOAD_STATUS", "0x1010")]);
    assert!(out.contains("kernel=-3 "), "{out}");
    assert!(out.contains("hsa_executable_load_agent_code_object failed: HSA_STATUS_ERROR_INVALID_CODE_OBJECT (0x1010): The code object is invalid. (fake)"), "{out}");
    // hsa_init failing, and no CUDA: no devices, the program still runs.
    let out = run_fake(
        &e,
        &exe,
        &[],
        &log,
        &[
            ("FAKE_HSA_INIT_STATUS", "0x1008"),
            ("OFFLOAD_LOADER_KFD_ROOT", "/nonexistent"),
        ],
    );
    assert!(out.contains("devices=0 libraries=1"), "{out}");
    assert!(!out.contains("panicked"), "{out}");
    // A device with no compatible image: HIP's "no binary for GPU", clearly,
    // and what HIP then does.
    let out = run_fake(&e, &exe, &[], &log, &[("FAKE_HSA_AGENTS", "gfx1030")]);
    assert!(
        out.contains("no binary for GPU: HIP device 0 (gfx1030) has no compatible image"),
        "{out}"
    );
    assert!(
        out.contains("(hipErrorNoBinaryForGpu at start-up)"),
        "{out}"
    );
    assert!(out.contains("app device=gfx1030 selected=-2"), "{out}");
    // Overrides select without a driver and say why nothing loads.
    let mut cmd = Command::new(&exe);
    cmd.env("OFFLOAD_LOADER_DEVICES", "gfx90a:xnack+,gfx1151");
    let out = run_ok(&mut cmd);
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.contains("app device=gfx90a:xnack+ selected=0 image=3 target=gfx90a:xnack+"),
        "{out}"
    );
    assert!(
        out.contains("app device=gfx1151 selected=0 image=1 target=gfx11-generic"),
        "{out}"
    );
    assert!(out.contains("kernel=-3 "), "{out}");
    assert!(
        out.contains("came from override and has no driver to load images with"),
        "{out}"
    );
}

#[test]
fn nothing_leaks_under_valgrind() {
    let Some(e) = loader() else { return };
    let Some(valgrind) = system_tool("valgrind", "valgrind") else {
        return;
    };
    let exe = e.build(app());
    let out = Command::new(valgrind)
        .args([
            "--leak-check=full",
            "--errors-for-leak-kinds=definite",
            "--error-exitcode=9",
            "-q",
        ])
        .arg(&exe)
        .env("OFFLOAD_LOADER_HSA_LIBRARY", &e.fake)
        .env("OFFLOAD_LOADER_CUDA_LIBRARY", "/nonexistent")
        .env("FAKE_HSA_AGENTS", "gfx90a:sramecc+:xnack-")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("kernel=0"));
}

#[test]
fn probe_inspects_a_running_process() {
    let Some(e) = loader() else { return };
    let exe = e.build(LinkedProgram::hip_text(
        &["gfx90a", "gfx1100"],
        "waits.hip",
        "#include \"hip_prelude.h\"\n__attribute__((global)) void k(int *p) { *p = 1; }\nint main() { printf(\"ready\\n\"); fflush(stdout); return getchar() == EOF ? 0 : 1; }\n",
    ));
    let mut child = Command::new(&exe)
        .env("OFFLOAD_LOADER_DEVICES", "gfx1100")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = [0u8; 6];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut ready).unwrap();
    let probe = e.build_dir.join("offload-probe");
    let out = Command::new(&probe)
        .args([
            "--json",
            "--device",
            "gfx1100",
            "--pid",
            &child.id().to_string(),
        ])
        .output()
        .unwrap();
    drop(child.stdin.take());
    child.wait().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Only objects with offload code are listed: the program itself.
    let objects = report["objects"].as_array().unwrap();
    assert_eq!(objects.len(), 1, "{report}");
    assert_eq!(objects[0]["path"], exe.display().to_string());
    let c = &objects[0]["containers"][0];
    let chosen = c["selected"][0]["image"].as_u64().unwrap() as usize;
    assert_eq!(c["images"][chosen]["target_id"], "gfx1100");
}

#[test]
fn libraries_register_from_several_threads_at_once() {
    let Some(e) = loader() else { return };
    let dir = scratch("hip-threads");
    // Four builds of one library (each named for itself: four distinct
    // libraries to the dynamic linker).
    let libs: Vec<String> = (0..4)
        .map(|i| e.build(lib(&format!("libk{i}.so"))).display().to_string())
        .collect();
    let exe = e.build(
        LinkedProgram::hip(ARCHS, "threads.hip")
            .arg("-ldl")
            .arg("-lpthread"),
    );
    let args: Vec<&str> = libs.iter().map(String::as_str).collect();
    // Eager loading from the constructors of dlopen'ed libraries: the driver
    // library is opened on the registering thread, so detection does not
    // wait on the loader lock those constructors run under.
    // (Were it to wait, detection would time out and select nothing.)
    let log = dir.join("eager.log");
    let out = run_fake(&e, &exe, &args, &log, &[("OFFLOAD_LOADER_EAGER", "1")]);
    assert_eq!(
        out.matches("symbols=2 selected=0 target=gfx90a:xnack-")
            .count(),
        4,
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(&log).unwrap().lines().count(),
        8,
        "4 libraries x 2 devices"
    );
    for _ in 0..5 {
        let out = run_fake(
            &e,
            &exe,
            &args,
            &dir.join("log"),
            &[("OFFLOAD_LOADER_INFO", "")],
        );
        assert!(out.contains("libraries=4"), "{out}");
        // Four libraries (the program itself has no device code), each with
        // its kernel and variable, each selecting gfx90a:xnack- for device 0.
        assert_eq!(
            out.matches("symbols=2 selected=0 target=gfx90a:xnack-")
                .count(),
            4,
            "{out}"
        );
    }
}

/// A copy of `exe` in `dir` whose `gfx1100` bundle entry holds a code
/// object whose header says gfx1101 (`e_flags`' processor patched).
fn mislabelled(exe: &Path, dir: &Path) -> PathBuf {
    let out = dir.join(format!(
        "{}-mislabelled",
        exe.file_name().unwrap().to_str().unwrap()
    ));
    // EF_AMDGPU_MACH_AMDGCN_GFX1100 = 0x41, GFX1101 = 0x46
    // (llvm/BinaryFormat/ELF.h).
    patched(exe, ("gfx1100", 0x41), ("gfx1100", 0x46), &out)
}

/// A code object whose own header contradicts its bundle entry ID (the
/// gfx1100 entry patched to say gfx1101, as a mislabelled build would):
/// the probe and the runtime both read the chosen image's header, reject it
/// with the same reason and take the same next-best image.
#[test]
fn probe_and_runtime_agree_when_a_header_contradicts_its_bundle_id() {
    let Some(e) = loader() else { return };
    let Some(probe) = built("offload-probe") else {
        return;
    };
    let dir = scratch("hip-mislabelled");
    let exe = e.build(LinkedProgram::hip(&["gfx1100", "gfx11-generic"], "app.hip"));
    let patched = mislabelled(&exe, &dir);

    let device = "gfx1100";
    // The probe: which image, and why not the mislabelled one.
    let out = run_ok(
        Command::new(&probe)
            .arg(&patched)
            .args(["--device", device, "--json"]),
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let container = &report["objects"][0]["containers"][0];
    let ids: Vec<&str> = container["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["bundle_id"].as_str().unwrap())
        .collect();
    let chosen = container["selected"][0]["image"].as_u64().unwrap() as usize;
    assert_eq!(ids[chosen], "hipv4-amdgcn-amd-amdhsa--gfx11-generic");
    let mislabelled = ids
        .iter()
        .position(|id| *id == "hipv4-amdgcn-amd-amdhsa--gfx1100")
        .unwrap();
    let why = container["selected"][0]["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["image"] == mislabelled)
        .unwrap()["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        why,
        "its header says it is for gfx1101, not gfx1100 as its container claims"
    );

    // The runtime, under the test-double HSA driver showing the same device.
    let mut cmd = e.fake_driver(&patched, "gfx1100|gfx11-generic", &dir.join("loads.log"));
    let out = output_text(&mut cmd);
    assert!(
        out.contains(&format!(
            "app device={device} selected=0 image={chosen} target=gfx11-generic "
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("[{mislabelled}] gfx1100: {why}")),
        "{out}"
    );
    assert!(
        out.contains(&format!("app device={device} kernel=0")),
        "{out}"
    );
}
/// `tests/programs/hostile.hip`, run once per scenario, each in its own
/// process: a crash, an abort or a hang fails only that scenario. Linked
/// without libamdhip64 (`-no-hip-rt`; it launches nothing): these are this
/// library's promises. Beside libamdhip64 its own hold: Debian's 5.2
/// crashes in its `__hipUnregisterFatBinary` when the `fork` scenario's
/// threads hand their unregistrations on to it at once.
fn hostile(e: &Loader, args: &[&str], env: &[(&str, &str)]) -> String {
    let exe = e.build(
        LinkedProgram::hip(ARCHS, "hostile.hip")
            .arg("-no-hip-rt")
            .arg("-ldl")
            .arg("-lpthread"),
    );
    let dir = scratch("hip-hostile");
    let mut cmd = e.fake_driver(&exe, "gfx90a:sramecc+:xnack-", &dir.join("log"));
    cmd.args(args).env("OFFLOAD_LOADER_INFO", "");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && text.contains("ok\n"),
        "{args:?}: {:?}\n{text}",
        out.status
    );
    text
}

#[test]
fn hostile_calls_are_errors_not_crashes() {
    let Some(e) = loader() else { return };
    for case in ["foreign-handle", "nulls", "stray-pointers"] {
        hostile(&e, &[case], &[]);
    }
    // OFFLOAD_LOADER_INFO reports the selection of a library nothing ever
    // looked up (the program's own, library 0) when it is unregistered, the
    // devices being known by then (a destructor never detects).
    let out = hostile(&e, &["double-release"], &[("OFFLOAD_LOADER_INFO", "1")]);
    let line = |suffix: &str| {
        out.lines()
            .position(|l| l.starts_with("offload-loader: library 0 (") && l.contains(suffix))
    };
    let selected = line(
        "): HIP device 0 (gfx90a:sramecc+:xnack-) loads [4] hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-;",
    );
    let unregistered = line("): unregistered");
    assert!(selected.is_some() && selected < unregistered, "{out}");
    let out = hostile(&e, &["huge-counts"], &[]);
    assert!(
        out.contains("bundle entry count of 4611686018427387904 exceeds the limit of"),
        "{out}"
    );
}

#[test]
fn fork_while_registering() {
    let Some(e) = loader() else { return };
    // Registration uses glibc's lock-free _dl_find_object, the registry's
    // and detection's locks are released around fork: no child may hang.
    let out = hostile(&e, &["fork"], &[]);
    assert!(out.contains("forks=40 failed=0"), "{out}");
}

#[test]
fn dlclose_races_lookups() {
    let Some(e) = loader() else { return };
    let lib = e.build(lib("libkernels.so"));
    let out = hostile(&e, &["dlclose", lib.to_str().unwrap()], &[]);
    // Every dlopen registered one library; none was unregistered twice.
    assert!(out.contains("dlopened=200 libraries=201"), "{out}");
}

/// A program that registers and exits, never asking this library anything:
/// `OFFLOAD_LOADER_INFO` still names the image each device gets (said at
/// exit, from a copy made when the program's destructor unregistered it).
#[test]
fn a_program_that_never_queries_is_reported_at_exit() {
    let Some(e) = loader() else { return };
    let dir = scratch("hip-quiet");
    let exe = e.build(LinkedProgram::hip_text(
        &["gfx90a", "gfx1100"],
        "quiet.hip",
        "#include \"hip_prelude.h\"\n__attribute__((global)) void k(int *p) { *p = 1; }\nint main() { printf(\"quiet\\n\"); return 0; }\n",
    ));
    let log = dir.join("log");
    let _ = std::fs::remove_file(&log);
    let out = output_text(&mut e.fake_driver(&exe, "gfx90a:sramecc+:xnack-;gfx1100", &log));
    assert!(out.contains("quiet"), "{out}");
    assert!(
        out.contains(
            "HIP device 0 (gfx90a:sramecc+:xnack-) loads [2] hipv4-amdgcn-amd-amdhsa--gfx90a;"
        ),
        "{out}"
    );
    assert!(
        out.contains("HIP device 1 (gfx1100) loads [1] hipv4-amdgcn-amd-amdhsa--gfx1100;"),
        "{out}"
    );
    // Nothing was loaded: no query asked for a kernel.
    assert!(std::fs::read_to_string(&log).unwrap_or_default().is_empty());
}

/// Debian's libamdhip64 (5.2), linked as clang links a HIP program with
/// this library first (`-loffload_loader`, then clang's `-lamdhip64`): a
/// program launching with `<<<>>>` links and runs to its first launch as it
/// does without this library, and every registration reaches libamdhip64
/// with the handle libamdhip64 returned, not this library's: a second
/// definition of the hooks between the two (tests/programs/hip_spy.c)
/// sees each call.
#[test]
fn beside_libamdhip64_registration_reaches_it() {
    let Some(e) = loader() else { return };
    if !std::path::Path::new("/usr/lib/x86_64-linux-gnu/libamdhip64.so").exists() {
        missing("libamdhip64", "libamdhip64-dev");
        return;
    }
    let dir = scratch("hip-beside");
    let spy = hip_spy(&e, &dir);
    let program = || LinkedProgram::hip(&["gfx90a", "gfx1100"], "hip_launch.hip");
    let plain = e.build(program().without_loader());
    let beside = e.build(program());
    let spied = e.build(program().link(&spy));
    // No GPU: libamdhip64 answers as it does without this library.
    let expected = "count rc=100 (hipErrorNoDevice) n=0\nattributes rc=101 (hipErrorInvalidDevice)\nlaunch rc=101 (hipErrorInvalidDevice)\n";
    for exe in [&plain, &beside, &spied] {
        let out = run_ok(&mut Command::new(exe));
        assert_eq!(String::from_utf8_lossy(&out.stdout), expected, "{exe:?}");
    }
    let needed = output_text(Command::new("readelf").args(["-dW"]).arg(&spied));
    let at = |name: &str| {
        needed
            .find(name)
            .unwrap_or_else(|| panic!("{name}: {needed}"))
    };
    assert!(at("liboffload_loader") < at("libhip_spy") && at("libhip_spy") < at("libamdhip64"));
    let out = run_ok(&mut Command::new(&spied));
    let err = String::from_utf8_lossy(&out.stderr);
    let spied: Vec<&str> = err.lines().filter(|l| l.starts_with("spy: ")).collect();
    assert_eq!(
        spied,
        [
            "spy: bundle host-x86_64-unknown-linux-gnu- hipv4-amdgcn-amd-amdhsa--gfx1100 hipv4-amdgcn-amd-amdhsa--gfx90a",
            "spy: fat binary given, handle returned",
            "spy: function _Z1kPi, its handle",
            "spy: variable counter (4 bytes), its handle",
            "spy: unregister, its handle",
        ],
        "{err}"
    );
}

/// A wrapper and bundle a program builds at run time in `malloc`ed memory
/// (tests/programs/heap_wrapper.c, as a JIT or a framework makes them) are
/// in no loaded object: this library cannot place them, and hands the
/// registration, the kernel and the unregistration on to libamdhip64 as
/// they are, with libamdhip64's handle (the spy between the two sees each
/// call), and says so under `OFFLOAD_LOADER_INFO` rather than warning.
#[test]
fn beside_libamdhip64_a_heap_wrapper_is_handed_on() {
    let Some(e) = loader() else { return };
    if !Path::new("/usr/lib/x86_64-linux-gnu/libamdhip64.so").exists() {
        missing("libamdhip64", "libamdhip64-dev");
        return;
    }
    let dir = scratch("hip-heap-wrapper");
    let spy = hip_spy(&e, &dir);
    let compiled =
        e.build(LinkedProgram::hip(&["gfx90a", "gfx1100"], "hip_launch.hip").without_loader());
    let bundle = dir.join("heap.bundle");
    run_ok(
        Command::new("objcopy")
            .args(["-O", "binary", "--only-section=.hip_fatbin"])
            .arg(&compiled)
            .arg(&bundle),
    );
    let exe = dir.join("heap_wrapper");
    run_ok(
        Command::new(&e.tc.clang)
            .args(["-DHIP", "-o"])
            .arg(&exe)
            .arg(program("heap_wrapper.c"))
            .arg(format!("-L{}", e.build_dir.display()))
            .args(["-loffload_loader", "-Wl,--no-as-needed"])
            .arg(&spy)
            .arg("-lamdhip64")
            .arg(format!(
                "-Wl,-rpath,{}:{}",
                e.build_dir.display(),
                dir.display()
            )),
    );
    assert_heap_wrapper_handed_on(&exe, &bundle, "libamdhip64", &[
                "spy: bundle host-x86_64-unknown-linux-gnu- hipv4-amdgcn-amd-amdhsa--gfx1100 hipv4-amdgcn-amd-amdhsa--gfx90a",
                "spy: fat binary given, handle returned",
                "spy: function _Z1kPi, its handle",
                "spy: unregister, its handle",
            ]);
}

/// A KFD topology under `dir` (for `OFFLOAD_LOADER_KFD_ROOT`): a CPU node,
/// then one GPU node per `gfx_target_version` (e.g. 110000 for gfx1100).
fn fake_kfd(dir: &Path, versions: &[u32]) -> PathBuf {
    let root = dir.join("kfd-nodes");
    let _ = std::fs::remove_dir_all(&root);
    for (node, version) in std::iter::once(&0).chain(versions).enumerate() {
        let at = root.join(node.to_string());
        std::fs::create_dir_all(&at).unwrap();
        std::fs::write(
            at.join("properties"),
            format!("gfx_target_version {version}\nunique_id {node}\n"),
        )
        .unwrap();
    }
    root
}

/// `tests/programs/hip_spy.c` built as `libhip_spy.so` in `dir`.
fn hip_spy(e: &Loader, dir: &Path) -> PathBuf {
    let spy = dir.join("libhip_spy.so");
    run_ok(
        Command::new(&e.tc.clang)
            .args(["-shared", "-fPIC", "-o"])
            .arg(&spy)
            .arg(program("hip_spy.c")),
    );
    spy
}

/// libamdhip64 gives a device the first compatible code object of the
/// table, by entry ID, its own processor's before its generic family's
/// whatever the order (clr `extractCodeObjectFromFatBinary`; 5.2 matches
/// its own processor only). clang's bundle (`gfx11-generic`, `gfx1100`,
/// `gfx90a`) already gives this library's choice on a gfx1100 and a gfx90a:
/// it is handed on as it is. A bundle with `gfx90a` "any" before
/// `gfx90a:xnack+` would give an xnack+ gfx90a the "any" code: handed on by
/// this library, the bundle libamdhip64 gets (seen by a definition of the
/// hooks between the two, which saves it) has `gfx90a:xnack+` first, each
/// code object in it byte for byte the program's own, as LLVM 22's
/// `clang-offload-bundler` unbundles both. A compressed bundle is handed on
/// as it is. The program prints what it prints without this library.
#[test]
fn libamdhip64_is_handed_the_bundle_in_first_fit_order() {
    let Some(e) = loader() else { return };
    if !Path::new("/usr/lib/x86_64-linux-gnu/libamdhip64.so").exists() {
        missing("libamdhip64", "libamdhip64-dev");
        return;
    }
    let dir = scratch("hip-first-fit");
    let spy = hip_spy(&e, &dir);
    let expected = "count rc=100 (hipErrorNoDevice) n=0\nattributes rc=101 (hipErrorInvalidDevice)\nlaunch rc=101 (hipErrorInvalidDevice)\n";
    let saved = dir.join("handed.bundle");
    // libamdhip64 can find a gfx1100 and a gfx90a: KFD's topology lists
    // them (ROCr finds its agents there).
    let kfd = fake_kfd(&dir, &[110000, 90010]);
    let handed = |exe: &Path, kfd: &Path| {
        let _ = std::fs::remove_file(&saved);
        let out = run_ok(
            Command::new(exe)
                .env("SPY_BUNDLE", &saved)
                .env("OFFLOAD_LOADER_KFD_ROOT", kfd),
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), expected, "{exe:?}");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        line(&err, "spy: ").to_string()
    };
    let table = |ids: &[&str]| {
        let ids: Vec<String> = ids
            .iter()
            .map(|id| format!("hipv4-amdgcn-amd-amdhsa--{id}"))
            .collect();
        format!(
            "spy: bundle host-x86_64-unknown-linux-gnu- {}",
            ids.join(" ")
        )
    };
    // clang's table, without this library and with it.
    let program = LinkedProgram::hip(&["gfx1100", "gfx11-generic", "gfx90a"], "hip_launch.hip");
    let clang = table(&["gfx11-generic", "gfx1100", "gfx90a"]);
    let exe = e.build(program.clone().link(&spy).without_loader());
    assert_eq!(handed(&exe, &kfd), clang);
    let exe = e.build(program.clone().link(&spy));
    assert_eq!(handed(&exe, &kfd), clang);
    let exe = e.build(program.clone().link(&spy).compress());
    assert_eq!(handed(&exe, &kfd), "spy: not an uncompressed bundle");

    // "Any" before stated features: clang's gfx906 entry renamed gfx90a
    // (its ID and its code object's processor: EF_AMDGPU_MACH gfx906 0x2f,
    // gfx90a 0x3f), before `gfx90a:xnack+`.
    let crafted = |program: LinkedProgram, out: &str| {
        let built = e.build(program.link(&spy));
        patched(&built, ("gfx906", 0x2f), ("gfx90a", 0x3f), &dir.join(out))
    };
    let program = LinkedProgram::hip(&["gfx906", "gfx90a:xnack+"], "hip_launch.hip");
    let own = table(&["gfx90a", "gfx90a:xnack+"]);
    let alone = crafted(program.clone().without_loader(), "crafted-alone");
    assert_eq!(handed(&alone, &kfd), own);
    let exe = crafted(program, "crafted");
    assert_eq!(handed(&exe, &kfd), table(&["gfx90a:xnack+", "gfx90a"]));
    // The program's own bundle, as objcopy extracts it.
    let original = dir.join("original.bundle");
    let extract = |exe: &Path| {
        run_ok(
            Command::new("objcopy")
                .args(["-O", "binary", "--only-section=.hip_fatbin"])
                .arg(exe)
                .arg(&original),
        )
    };
    extract(&exe);
    for id in [
        "hipv4-amdgcn-amd-amdhsa--gfx90a",
        "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+",
    ] {
        let ours = e.tc.unbundle(&saved, id).unwrap();
        let theirs = e.tc.unbundle(&original, id).unwrap();
        assert!(!ours.is_empty() && ours == theirs, "{id}");
    }
    // Where no gfx90a can be present (a gfx1100 only, or no GPU at all),
    // the program's own table is handed on.
    for gpus in [fake_kfd(&dir.join("gfx1100"), &[110000]), dir.join("none")] {
        assert_eq!(handed(&exe, &gpus), own, "{gpus:?}");
    }

    // A gfx1100 entry whose code object says gfx1101 is never handed to a
    // gfx1100: libamdhip64 compares entry IDs only, and takes gfx1100's
    // before the generic code (this library's choice) in any order. The
    // table handed names that entry by its header. Without the mislabelling
    // clang's table is handed as it is.
    let pair =
        e.build(LinkedProgram::hip(&["gfx1100", "gfx11-generic"], "hip_launch.hip").link(&spy));
    assert_eq!(handed(&pair, &kfd), table(&["gfx11-generic", "gfx1100"]));
    let patched = mislabelled(&pair, &dir);
    assert_eq!(handed(&patched, &kfd), table(&["gfx11-generic", "gfx1101"]));
    extract(&patched);
    let ours =
        e.tc.unbundle(&saved, "hipv4-amdgcn-amd-amdhsa--gfx1101")
            .unwrap();
    let theirs =
        e.tc.unbundle(&original, "hipv4-amdgcn-amd-amdhsa--gfx1100")
            .unwrap();
    assert!(!ours.is_empty() && ours == theirs);
}

/// A copy of `exe` at `out` whose bundle entry `from.0` is renamed `to.0`
/// (an ID of the same length, or the same), its code object's processor
/// (`EF_AMDGPU_MACH`, llvm/BinaryFormat/ELF.h), checked to be `from.1`,
/// set to `to.1`.
fn patched(exe: &Path, from: (&str, u32), to: (&str, u32), out: &Path) -> PathBuf {
    use offload_loader_workspace::loader::{Limits, MappedFile};

    let (from_id, to_id) = (
        format!("hipv4-amdgcn-amd-amdhsa--{}", from.0),
        format!("hipv4-amdgcn-amd-amdhsa--{}", to.0),
    );
    assert_eq!(from_id.len(), to_id.len());
    let mut bytes = std::fs::read(exe).unwrap();
    let (table, code) = {
        let file = MappedFile::open(exe).unwrap();
        let sections = file.containers(&Limits::default()).unwrap();
        let c = sections[0].containers[0].as_ref().unwrap();
        let image = c.images().iter().find(|i| i.id == from_id).unwrap();
        (c.offset() as usize, (c.offset() + image.offset) as usize)
    };
    let record = table
        + bytes[table..code]
            .windows(from_id.len())
            .position(|w| w == from_id.as_bytes())
            .unwrap();
    bytes[record..record + to_id.len()].copy_from_slice(to_id.as_bytes());
    assert_eq!(&bytes[code..code + 4], b"\x7fELF");
    let flags = u32::from_le_bytes(bytes[code + 48..code + 52].try_into().unwrap());
    assert_eq!(flags & 0xff, from.1, "{}'s EF_AMDGPU_MACH", from.0);
    bytes[code + 48..code + 52].copy_from_slice(&((flags & !0xff) | to.1).to_le_bytes());
    std::fs::write(out, &bytes).unwrap();
    std::fs::set_permissions(out, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    out.to_path_buf()
}

/// A `__managed__` variable, standalone (no libamdhip64 linked), from
/// clang-22's old and new offload driver: the host reads its initial value
/// and writes it (clang sends every host use through the pointer
/// `__hipRegisterManagedVar` is given, which was left null and crashed the
/// first read), and the lookup by `&counter` finds its memory as the device
/// reaches it, 4 bytes (as clr's `hipGetSymbolAddress` answers; the test
/// driver's agents reach pinned memory at its host address). When
/// the image is loaded, the device's copy of the pointer (clang's 8-byte
/// device variable `counter`) is set to where the agent reaches the host's
/// copy (`hsa_amd_memory_lock`, then `hsa_memory_copy` of that address),
/// as the test driver records.
#[test]
fn managed_variables_have_their_initial_value_on_the_host() {
    let Some(e) = loader() else { return };
    let dir = scratch("hip-managed");
    for driver in [None, Some("--offload-new-driver")] {
        let mut program = LinkedProgram::hip(&["gfx90a"], "managed.hip").arg("-no-hip-rt");
        if let Some(flag) = driver {
            program = program.arg(flag);
        }
        let exe = e.build(program);
        let calls = dir.join("calls");
        let _ = std::fs::remove_file(&calls);
        let out = run_ok(
            e.fake_driver(&exe, "gfx90a:sramecc+:xnack-", &dir.join("log"))
                .env("FAKE_CALL_LOG", &calls),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "read=5\nwritten=9\ndevice=0 lookup=0 size=4 at=host\n",
            "{driver:?}: {err}"
        );
        let host = line(&err, "host=").trim_start_matches("host=").to_string();
        let calls = std::fs::read_to_string(&calls).unwrap();
        assert!(
            calls.contains(&format!("hsa_amd_memory_lock {host} 4\n")),
            "{driver:?}: {calls}"
        );
        let copy = line(&calls, "hsa_memory_copy ");
        assert!(copy.ends_with(&format!(" 8 {host}")), "{driver:?}: {calls}");
    }
}

/// AMD's portable code, with no vendor runtime: on a GPU the bundle has no
/// code object for (gfx1100), the library compiles the `amdgcnspirv` image
/// through comgr (the test double standing in for comgr 3, handed the
/// image's SPIR-V byte for byte) and HSA loads the code object comgr made;
/// INFO says so. gfx90a loads its own code object and compiles nothing.
/// With comgr 2.4 (Debian 12's, which has no SPIR-V) the host runs on and
/// the lookup says what is needed.
#[test]
fn spirv_is_compiled_through_comgr_and_loaded_through_hsa() {
    let Some(e) = loader() else { return };
    let dir = scratch("hip-spirv");
    let exe = e
        .build(LinkedProgram::hip(&["amdgcnspirv", "gfx90a"], "app.hip").arg("-use-spirv-backend"));
    let entry = |file: &Path, id: &str| {
        let (_, fatbin) = e.tc.hip_fatbin(file);
        e.tc.unbundle(&temp_file(&fatbin), id).unwrap()
    };
    let spirv = entry(&exe, "hipv4-spirv64-amd-amdhsa--amdgcnspirv");
    assert!(spirv.starts_with(&[0x03, 0x02, 0x23, 0x07]));
    // What comgr would make for gfx1100: clang's own code object for it.
    let native = e.build(LinkedProgram::hip(&["gfx1100"], "app.hip"));
    let code = entry(&native, "hipv4-amdgcn-amd-amdhsa--gfx1100");
    let code_path = dir.join("gfx1100.co");
    std::fs::write(&code_path, &code).unwrap();
    let run = |version: &str| {
        let (comgr, hsa) = (
            dir.join(format!("comgr-{version}")),
            dir.join(format!("hsa-{version}")),
        );
        for d in [&comgr, &hsa] {
            let _ = std::fs::remove_dir_all(d);
            std::fs::create_dir_all(d).unwrap();
        }
        let log = dir.join(format!("log-{version}"));
        let _ = std::fs::remove_file(&log);
        let mut cmd = e.fake_driver(&exe, "gfx1100;gfx90a:sramecc+:xnack-", &log);
        cmd.env("OFFLOAD_LOADER_COMGR_LIBRARY", &e.fake)
            .env("FAKE_COMGR_VERSION", version)
            .env("FAKE_COMGR_EXECUTABLE", &code_path)
            .env("FAKE_COMGR_SAVE_DIR", &comgr)
            .env("FAKE_HSA_SAVE_DIR", &hsa);
        let out = output_text(&mut cmd);
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        (out, log, comgr, hsa)
    };
    let (out, log, comgr, hsa) = run("3.0");
    assert!(
        out.contains("app device=gfx1100 selected=0 image=1 target=amdgcnspirv"),
        "{out}"
    );
    assert!(out.contains("app device=gfx1100 kernel=0"), "{out}");
    assert!(
        out.contains("app device=gfx90a:sramecc+:xnack- kernel=0"),
        "{out}"
    );
    assert!(
        out.contains("device 0 gfx1100: hipv4-spirv64-amd-amdhsa--amdgcnspirv compiled from SPIR-V by comgr 3.0"),
        "{out}"
    );
    assert!(std::fs::read(comgr.join("input.spv")).unwrap() == spirv);
    assert!(std::fs::read(hsa.join("gfx1100.co")).unwrap() == code);
    let compiles: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("comgr compile"))
        .collect();
    assert_eq!(compiles.len(), 1, "{log}");
    assert!(
        compiles[0].starts_with("comgr compile amdgcn-amd-amdhsa--gfx1100 "),
        "{log}"
    );
    // Debian 12's comgr: nothing to compile with, the host runs on.
    let (out, log, _, _) = run("2.4");
    assert!(out.contains("app device=gfx1100 kernel=-"), "{out}");
    assert!(
        out.contains("SPIR-V is compiled at load by comgr 3.0 or later"),
        "{out}"
    );
    assert!(
        out.contains("comgr 2.4, which has no SPIR-V action"),
        "{out}"
    );
    assert!(
        out.contains("app device=gfx90a:sramecc+:xnack- kernel=0"),
        "{out}"
    );
    assert!(!log.contains("comgr compile"), "{log}");
}
