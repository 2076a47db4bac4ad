//! offload-detect end to end through its production code path, with the
//! test-double driver (`offload-test-drivers`) standing in for
//! `libhsa-runtime64.so.1` and `libcuda.so.1`, a fake KFD sysfs tree, and
//! Debian's real HSA runtime.
//!
//! The fakes read `FAKE_*` (and the drivers' own `ROCR_VISIBLE_DEVICES`,
//! `CUDA_VISIBLE_DEVICES`) from the process environment, so every case that
//! needs them runs in a child process: this test binary re-run with
//! `DETECT_DRIVERS_CASE=<case>` and exactly the environment the case sets
//! (`child_case` dispatches). Everything else calls `detect_with` with an
//! explicit `Config`, in process, in parallel.
//!
//! The fakes are built on first use with `cargo build -p offload-test-drivers`
//! into their own target directories under `CARGO_TARGET_TMPDIR` (one plain,
//! one with the `missing-symbol` feature), so no earlier build step is needed
//! and the workspace's own `target/debug` is never touched. Without cargo the
//! tests are skipped, or fail under `CI=true`.

use std::ffi::{c_int, c_uint, c_void};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use offload_detect::{
    detect_with, Backend, Config, Detection, DriverError, DriverStatus, Reason, Source, Status,
    Vendors,
};
use offload_loader::select::DeviceTarget;
use offload_loader::target::{FeatureSetting, Vendor};

// ------------------------------------------------------------ harness ----

fn ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

struct Fakes {
    full: PathBuf,
    missing_symbol: PathBuf,
}

/// Builds (or finds up to date) the two test-double libraries, once per
/// test process.
fn fakes() -> Option<&'static Fakes> {
    static FAKES: OnceLock<Option<Fakes>> = OnceLock::new();
    FAKES
        .get_or_init(|| {
            let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join("detect-fakes");
            Some(Fakes {
                full: build_fake(&base.join("full"), &[])?,
                missing_symbol: build_fake(
                    &base.join("missing-symbol"),
                    &["--features", "missing-symbol"],
                )?,
            })
        })
        .as_ref()
}

fn build_fake(target_dir: &Path, extra: &[&str]) -> Option<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_string());
    let out = Command::new(&cargo)
        .args([
            "build",
            "--quiet",
            "-p",
            "offload-test-drivers",
            "--manifest-path",
        ])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir)
        .args(extra)
        .env_remove("CARGO_TARGET_DIR")
        .output();
    let lib = target_dir.join("debug/liboffload_test_drivers.so");
    match out {
        Ok(out) if out.status.success() && lib.exists() => Some(lib),
        other => {
            let why = match other {
                Ok(out) => String::from_utf8_lossy(&out.stderr).into_owned(),
                Err(e) => e.to_string(),
            };
            assert!(!ci(), "building the test-double driver failed: {why}");
            eprintln!("skipped: the test-double driver could not be built: {why}");
            None
        }
    }
}

/// Variables that would change what a child detects.
fn detection_variable(key: &str) -> bool {
    key.starts_with("OFFLOAD_LOADER_")
        || key.starts_with("HSA_OVERRIDE_GFX_VERSION")
        || key.starts_with("FAKE_")
        || matches!(
            key,
            "ROCR_VISIBLE_DEVICES" | "HIP_VISIBLE_DEVICES" | "CUDA_VISIBLE_DEVICES" | "HSA_XNACK"
        )
}

/// Runs case `case` in a child process with exactly these detection
/// variables, and returns what it printed.
fn run_case(case: &str, env: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_case", "--nocapture", "--test-threads=1"]);
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(detection_variable) {
            cmd.env_remove(key);
        }
    }
    cmd.env("DETECT_DRIVERS_CASE", case);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "case {case} failed:\n{text}");
    assert!(
        text.contains(&format!("case {case} passed")),
        "case {case} did not run:\n{text}"
    );
    text
}

/// A fresh scratch file path.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("detect-drivers");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir_all(&path);
    path
}

/// `target (source)` per device.
fn targets(d: &Detection) -> Vec<String> {
    d.devices
        .iter()
        .map(|d| format!("{} ({})", d.target, d.source.name()))
        .collect()
}

fn report(d: &Detection, backend: Backend) -> (Status, String) {
    let r = d
        .backend(backend)
        .unwrap_or_else(|| panic!("no {backend:?} report: {d:?}"));
    (
        r.status,
        r.reason
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
    )
}

fn env_path(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} not set"))
}

/// The child side: runs the case named by `DETECT_DRIVERS_CASE`, if any.
#[test]
fn child_case() {
    let Ok(case) = std::env::var("DETECT_DRIVERS_CASE") else {
        return;
    };
    let cases: &[(&str, fn())] = &[
        ("amd_gpus", case_amd_gpus),
        ("nvidia_gpus", case_nvidia_gpus),
        ("mixed_node", case_mixed_node),
        ("init_failures", case_init_failures),
        ("kfd_fallback", case_kfd_fallback),
        ("no_gpu_agent", case_no_gpu_agent),
        ("visible_devices", case_visible_devices),
        ("hip_hides_all", case_hip_hides_all),
        ("hsa_loads", case_hsa_loads),
        ("hsa_load_fails", case_hsa_load_fails),
        ("cuda_loads", case_cuda_loads),
        ("cuda_load_fails", case_cuda_load_fails),
        ("cuda_context_kept", case_cuda_context_kept),
        ("hanging_driver", case_hanging_driver),
        ("late_driver", case_late_driver),
        ("non_utf8", case_non_utf8),
        ("once_per_process", case_once_per_process),
        ("debian_hsa", case_debian_hsa),
        ("no_driver_here", case_no_driver_here),
        ("vendors_asked_for", case_vendors_asked_for),
    ];
    let (_, run) = cases
        .iter()
        .find(|(name, _)| *name == case)
        .unwrap_or_else(|| panic!("no case {case}"));
    run();
    println!("case {case} passed");
}

// -------------------------------------------------- AMD through HSA ----

const AGENTS: &str = "gfx90a:sramecc+:xnack-=AMD Instinct MI210;\
                      gfx90a:sramecc-:xnack+;\
                      gfx942:sramecc+:xnack+|gfx9-4-generic:sramecc+:xnack+=AMD Instinct MI300X;\
                      gfx1100|gfx11-generic";

#[test]
fn several_amd_gpus_with_different_features() {
    let Some(f) = fakes() else { return };
    let calls = scratch("amd-calls.log");
    run_case(
        "amd_gpus",
        &[
            ("OFFLOAD_LOADER_HSA_LIBRARY", f.full.to_str().unwrap()),
            ("OFFLOAD_LOADER_CUDA_LIBRARY", "/nonexistent/libcuda.so.1"),
            ("FAKE_HSA_AGENTS", AGENTS),
            ("FAKE_CALL_LOG", calls.to_str().unwrap()),
        ],
    );
}

fn case_amd_gpus() {
    let d = detect_with(&Config::from_env());
    assert_eq!(
        targets(&d),
        [
            "gfx90a:sramecc+:xnack- (hsa)",
            "gfx90a:sramecc-:xnack+ (hsa)",
            "gfx942:sramecc+:xnack+ (hsa)",
            "gfx1100 (hsa)",
        ]
    );
    let names: Vec<_> = d.devices.iter().map(|d| d.name.as_deref()).collect();
    // The marketing name where the runtime has one, else HSA_AGENT_INFO_NAME.
    assert_eq!(
        names,
        [
            Some("AMD Instinct MI210"),
            Some("gfx90a"),
            Some("AMD Instinct MI300X"),
            Some("gfx1100")
        ]
    );
    let nodes: Vec<u32> = d.devices.iter().map(|d| d.ordinal).collect();
    assert_eq!(nodes, [1, 2, 3, 4]);
    assert_eq!(
        d.devices[3].isas,
        [
            "amdgcn-amd-amdhsa--gfx1100",
            "amdgcn-amd-amdhsa--gfx11-generic"
        ]
    );
    assert_eq!(d.devices[2].uuid.as_deref(), Some("GPU-fa4e000000000002"));
    let DeviceTarget::Amdgpu(id) = d.devices[1].target else {
        panic!()
    };
    assert_eq!(
        (id.sramecc, id.xnack),
        (FeatureSetting::Off, FeatureSetting::On)
    );
    for (i, dev) in d.devices.iter().enumerate() {
        assert_eq!(dev.index, i);
        assert_eq!(dev.source, Source::Hsa);
        assert!(!dev.unknown_features);
        assert!(dev.can_load());
    }
    assert_eq!(report(&d, Backend::Hsa), (Status::Found(4), String::new()));
    assert_eq!(
        report(&d, Backend::Kfd),
        (Status::Skipped, "the HSA runtime answered".into())
    );
    assert_eq!(
        report(&d, Backend::Cuda),
        (
            Status::Unavailable,
            "/nonexistent/libcuda.so.1 not found".into()
        )
    );
    // GPUs found: the runtime stays initialised for loading.
    let calls = std::fs::read_to_string(env_path("FAKE_CALL_LOG")).unwrap();
    assert_eq!(calls, "hsa_init\n");
}

#[test]
fn no_gpu_agent_shuts_the_runtime_down() {
    let Some(f) = fakes() else { return };
    let calls = scratch("no-gpu-calls.log");
    run_case(
        "no_gpu_agent",
        &[
            ("OFFLOAD_LOADER_HSA_LIBRARY", f.full.to_str().unwrap()),
            ("OFFLOAD_LOADER_CUDA_LIBRARY", "/nonexistent/libcuda.so.1"),
            ("OFFLOAD_LOADER_KFD_ROOT", "/nonexistent"),
            ("FAKE_CALL_LOG", calls.to_str().unwrap()),
        ],
    );
}

fn case_no_gpu_agent() {
    let d = detect_with(&Config::from_env());
    assert!(d.devices.is_empty());
    let lib = env_path("OFFLOAD_LOADER_HSA_LIBRARY");
    assert_eq!(
        report(&d, Backend::Hsa),
        (Status::NoDevice, format!("{lib} present, no GPU agent"))
    );
    // The runtime answered: KFD is not consulted.
    assert_eq!(report(&d, Backend::Kfd).0, Status::Skipped);
    let calls = std::fs::read_to_string(env_path("FAKE_CALL_LOG")).unwrap();
    assert_eq!(calls, "hsa_init\nhsa_shut_down\n");
}

// ----------------------------------------------------------- NVIDIA ----

const CUDA_DEVICES: &str = "8.0:NVIDIA A100-SXM4-80GB;9.0:NVIDIA H100 80GB HBM3";

#[test]
fn nvidia_sm80_and_sm90_with_the_driver_version() {
    let Some(f) = fakes() else { return };
    run_case(
        "nvidia_gpus",
        &[
            (
                "OFFLOAD_LOADER_HSA_LIBRARY",
                "/nonexistent/libhsa-runtime64.so.1",
            ),
            ("OFFLOAD_LOADER_KFD_ROOT", "/nonexistent"),
            ("OFFLOAD_LOADER_CUDA_LIBRARY", f.full.to_str().unwrap()),
            ("FAKE_CUDA_DEVICES", CUDA_DEVICES),
            ("FAKE_CUDA_DRIVER_VERSION", "12040"),
        ],
    );
}

fn case_nvidia_gpus() {
    let d = detect_with(&Config::from_env());
    assert_eq!(targets(&d), ["sm_80 (cuda)", "sm_90 (cuda)"]);
    let h100 = &d.devices[1];
    assert_eq!(h100.name.as_deref(), Some("NVIDIA H100 80GB HBM3"));
    assert_eq!(h100.driver_version, Some(12040));
    assert_eq!(h100.pci_bus_id.as_deref(), Some("0000:42:00.0"));
    assert_eq!(h100.ordinal, 1);
    let DeviceTarget::Nvidia {
        capability,
        max_ptx,
    } = h100.target
    else {
        panic!()
    };
    assert_eq!((capability.major, capability.minor), (9, 0));
    // CUDA 12.4 JITs PTX ISA 8.4.
    assert_eq!(max_ptx.map(|v| v.to_string()).as_deref(), Some("8.4"));
    assert_eq!(report(&d, Backend::Cuda), (Status::Found(2), String::new()));
    assert_eq!(
        report(&d, Backend::Hsa),
        (
            Status::Unavailable,
            "/nonexistent/libhsa-runtime64.so.1 not found".into()
        )
    );
    assert_eq!(
        report(&d, Backend::Kfd),
        (
            Status::Unavailable,
            "no KFD topology at /nonexistent".into()
        )
    );
}

#[test]
fn mixed_node_lists_amd_then_nvidia() {
    let Some(f) = fakes() else { return };
    let fake = f.full.to_str().unwrap();
    run_case(
        "mixed_node",
        &[
            ("OFFLOAD_LOADER_HSA_LIBRARY", fake),
            ("OFFLOAD_LOADER_CUDA_LIBRARY", fake),
            ("FAKE_HSA_AGENTS", "gfx90a:sramecc+:xnack-;gfx1030"),
            ("FAKE_CUDA_DEVICES", CUDA_DEVICES),
            ("FAKE_CUDA_DRIVER_VERSION", "12080"),
        ],
    );
}

fn case_mixed_node() {
    let d = detect_with(&Config::from_env());
    assert_eq!(
        targets(&d),
        [
            "gfx90a:sramecc+:xnack- (hsa)",
            "gfx1030 (hsa)",
            "sm_80 (cuda)",
            "sm_90 (cuda)"
        ]
    );
    let indices: Vec<usize> = d.devices.iter().map(|d| d.index).collect();
    assert_eq!(indices, [0, 1, 2, 3]);
    let backends: Vec<String> = d.backends.iter().map(ToString::to_string).collect();
    assert_eq!(
        backends,
        [
            "hsa: found 2",
            "kfd: skipped: the HSA runtime answered",
            "cuda: found 2"
        ]
    );
}

// --------------------------------------------------------- failures ----

#[test]
fn init_failures_carry_the_drivers_own_words() {
    let Some(f) = fakes() else { return };
    let fake = f.full.to_str().unwrap();
    run_case(
        "init_failures",
        &[
            ("OFFLOAD_LOADER_HSA_LIBRARY", fake),
            ("OFFLOAD_LOADER_CUDA_LIBRARY", fake),
            ("OFFLOAD_LOADER_KFD_ROOT", "/nonexistent"),
            ("FAKE_HSA_AGENTS", "gfx90a"),
            ("FAKE_HSA_INIT_STATUS", "0x1008"),
            ("FAKE_CUDA_DEVICES", CUDA_DEVICES),
            ("FAKE_CUDA_INIT", "100"),
        ],
    );
}

fn case_init_failures() {
    let d = detect_with(&Config::from_env());
    assert!(d.devices.is_empty());
    let lib = env_path("OFFLOAD_LOADER_HSA_LIBRARY");
    assert_eq!(
        report(&d, Backend::Hsa),
        (
            Status::Unavailable,
            format!(
                "{lib} present, hsa_init failed: HSA_STATUS_ERROR_OUT_OF_RESOURCES (0x1008): \
                 The runtime failed to allocate the necessary resources. (fake)"
            )
        )
    );
    // The same, typed.
    let Some(Reason::InitFailed {
        call: "hsa_init",
        status: DriverStatus::Hsa { status, name, .. },
        ..
    }) = &d.backend(Backend::Hsa).unwrap().reason
    else {
        panic!("{:?}", d.backends)
    };
    assert_eq!(
        (*status, *name),
        (0x1008, "HSA_STATUS_ERROR_OUT_OF_RESOURCES")
    );
    // HSA failed: KFD is asked (and has no topology here).
    assert_eq!(
        report(&d, Backend::Kfd),
        (
            Status::Unavailable,
            "no KFD topology at /nonexistent".into()
        )
    );
    // CUDA_ERROR_NO_DEVICE is "no device", not a failure.
    assert_eq!(
        report(&d, Backend::Cuda),
        (
            Status::NoDevice,
            format!(
                "{lib} present, cuInit failed: CUDA_ERROR_NO_DEVICE (100): \
                 no CUDA-capable device is detected"
            )
        )
    );
}

#[test]
fn a_library_without_a_symbol_is_unavailable() {
    let Some(f) = fakes() else { return };
    let lib = &f.missing_symbol;
    let d = detect_with(&Config {
        hsa_library: Some(lib.clone()),
        cuda_library: Some(lib.clone()),
        kfd_root: Some("/nonexistent".into()),
        ..Config::default()
    });
    assert!(d.devices.is_empty());
    assert_eq!(
        report(&d, Backend::Hsa),
        (
            Status::Unavailable,
            format!("symbol hsa_iterate_agents missing from {}", lib.display())
        )
    );
    assert_eq!(
        report(&d, Backend::Cuda),
        (
            Status::Unavailable,
            format!("symbol cuDeviceGetPCIBusId missing from {}", lib.display())
        )
    );
    assert!(matches!(
        d.backend(Backend::Hsa).unwrap().reason,
        Some(Reason::MissingSymbol {
            symbol: "hsa_iterate_agents",
            ..
        })
    ));
}

#[test]
fn missing_libraries_cost_nothing() {
    let config = Config {
        hsa_library: Some("/nonexistent/libhsa-runtime64.so.1".into()),
        cuda_library: Some("/nonexistent/libcuda.so.1".into()),
        kfd_root: Some("/nonexistent".into()),
        ..Config::default()
    };
    detect_with(&config);
    let start = Instant::now();
    let d = detect_with(&config);
    let took = start.elapsed();
    assert!(d.devices.is_empty());
    assert_eq!(report(&d, Backend::Hsa).0, Status::Unavailable);
    assert_eq!(report(&d, Backend::Kfd).0, Status::Unavailable);
    assert_eq!(report(&d, Backend::Cuda).0, Status::Unavailable);
    eprintln!("detection with no library: {took:?}");
    // (No bound on the time: the reports say no library was found, so no
    // thread was started or waited for.)
}

#[test]
fn a_hanging_driver_is_given_up_on() {
    let Some(f) = fakes() else { return };
    run_case(
        "hanging_driver",
        &[
            ("OFFLOAD_LOADER_HSA_LIBRARY", f.full.to_str().unwrap()),
            ("OFFLOAD_LOADER_CUDA_LIBRARY", "/nonexistent"),
            ("OFFLOAD_LOADER_KFD_ROOT", "/nonexistent"),
            ("OFFLOAD_LOADER_DETECT_TIMEOUT_MS", "300"),
            ("FAKE_HSA_AGENTS", "gfx90a"),
            // Far longer than any loaded machine takes to give up at 300 ms.
            ("FAKE_HSA_HANG_MS", "3600000"),
        ],
    );
}

fn case_hanging_driver() {
    let start = Instant::now();
    let d = detect_with(&Config::from_env());
    assert!(
        start.elapsed() < Duration::from_secs(1800),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(
        report(&d, Backend::Hsa),
        (
            Status::Unavailable,
            "the HSA runtime did not answer within 300 ms; detection gave up on it".into()
        )
    );
    // The process exits with the hung thread still in hsa_init.
}

// ------------------------------------------------------------- KFD ----

/// A KFD topology: node 0 a CPU, then GPUs with these `gfx_target_version`s
/// and `unique_id`s.
fn kfd_tree(name: &str, gpus: &[(u32, u64)]) -> PathBuf {
    let root = scratch(name);
    let nodes = std::iter::once((0, 0)).chain(gpus.iter().copied());
    for (node, (version, unique_id)) in nodes.enumerate() {
        let dir = root.join(node.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("properties"),
            format!(
                "cpu_cores_count {}\nsimd_count 256\ngfx_target_version {version}\n\
                 unique_id {unique_id}\ncapability 1009664\n",
                u32::from(version == 0) * 16
            ),
        )
        .unwrap();
    }
    // Not a node.
    std::fs::create_dir_all(root.join("generation_id")).unwrap();
    root
}

fn kfd_config(root: &Path) -> Config {
    Config {
        hsa_library: Some("/nonexistent/libhsa-runtime64.so.1".into()),
        cuda_library: Some("/nonexistent/libcuda.so.1".into()),
        kfd_root: Some(root.into()),
        ..Config::default()
    }
}

const KFD_GPUS: &[(u32, u64)] = &[
    (90010, 0x1111_2222_3333_4444),
    (110001, 0),
    (90008, 0xabcd_0000_0000_0001),
    (999999, 0), // a processor LLVM 22 does not know
];

#[test]
fn kfd_names_processors_without_features() {
    let root = kfd_tree("kfd-plain", KFD_GPUS);
    let d = detect_with(&kfd_config(&root));
    assert_eq!(
        targets(&d),
        ["gfx90a (kfd)", "gfx1101 (kfd)", "gfx908 (kfd)"]
    );
    for dev in &d.devices {
        assert!(dev.unknown_features);
        assert!(!dev.can_load());
        let DeviceTarget::Amdgpu(id) = dev.target else {
            panic!()
        };
        assert_eq!(
            (id.sramecc, id.xnack),
            (FeatureSetting::Any, FeatureSetting::Any)
        );
    }
    let nodes: Vec<u32> = d.devices.iter().map(|d| d.ordinal).collect();
    assert_eq!(nodes, [1, 2, 3]);
    assert_eq!(d.devices[0].uuid.as_deref(), Some("GPU-1111222233334444"));
    assert_eq!(d.devices[1].uuid, None);
    assert_eq!(
        report(&d, Backend::Kfd),
        (
            Status::Found(3),
            "KFD reports the processor only: xnack and sramecc settings are unknown".into()
        )
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn hsa_override_gfx_version_on_kfd() {
    let root = kfd_tree("kfd-override", KFD_GPUS);
    let with = |overrides: &[(Option<u32>, &str)]| {
        detect_with(&Config {
            gfx_overrides: overrides.iter().map(|(n, v)| (*n, v.to_string())).collect(),
            ..kfd_config(&root)
        })
    };
    // The per-node variable wins for its node; the global one covers the
    // rest, including the node whose own version LLVM does not know.
    let d = with(&[(None, "10.3.0"), (Some(2), "11.0.0")]);
    assert_eq!(
        targets(&d),
        [
            "gfx1030 (kfd)",
            "gfx1100 (kfd)",
            "gfx1030 (kfd)",
            "gfx1030 (kfd)"
        ]
    );
    let d = with(&[(Some(3), "9.0.10")]);
    assert_eq!(
        targets(&d),
        ["gfx90a (kfd)", "gfx1101 (kfd)", "gfx90a (kfd)"]
    );
    // libhsakmt rejects a malformed value for the whole topology: so does KFD.
    let d = with(&[(None, "9.0")]);
    assert!(d.devices.is_empty());
    assert_eq!(
        report(&d, Backend::Kfd),
        (
            Status::Unavailable,
            "HSA_OVERRIDE_GFX_VERSION=`9.0` is not major.minor.stepping (three decimal numbers)"
                .into()
        )
    );
    let d = with(&[(Some(3), "9.9.9")]);
    assert_eq!(
        report(&d, Backend::Kfd).1,
        "HSA_OVERRIDE_GFX_VERSION_3=`9.9.9` names no processor LLVM 22 knows"
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn visible_device_lists_on_kfd() {
    let root = kfd_tree("kfd-visible", KFD_GPUS);
    let with = |rocr: Option<&str>, hip: Option<&str>| {
        detect_with(&Config {
            rocr_visible: rocr.map(String::from),
            hip_visible: hip.map(String::from),
            ..kfd_config(&root)
        })
    };
    // ROCR_VISIBLE_DEVICES picks and orders; the first bad entry ends it.
    assert_eq!(
        targets(&with(Some("2,0,x,1"), None)),
        ["gfx908 (kfd)", "gfx90a (kfd)"]
    );
    // By UUID prefix, as ROCR matches them (case-insensitively).
    assert_eq!(
        targets(&with(Some("gpu-abcd,0"), None)),
        ["gfx908 (kfd)", "gfx90a (kfd)"]
    );
    // HIP_VISIBLE_DEVICES indexes what ROCR left.
    assert_eq!(targets(&with(Some("2,0"), Some("1"))), ["gfx90a (kfd)"]);
    // Set but empty: ROCR shows no GPU.
    let d = with(Some(""), None);
    assert!(d.devices.is_empty());
    assert_eq!(
        report(&d, Backend::Kfd),
        (
            Status::NoDevice,
            "ROCR_VISIBLE_DEVICES=`` hides all 3 GPU(s) found".into()
        )
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn kfd_is_the_fallback_when_hsa_fails() {
    let Some(f) = fakes() else { return };
    let root = kfd_tree("kfd-fallback", &[(90010, 0), (110000, 0)]);
    let fake = f.full.to_str().unwrap();
    for (case, init) in [("kfd_fallback", "0x1008"), ("amd_gpus", "0")] {
        let calls = scratch("kfd-fallback-calls.log");
        run_case(
            case,
            &[
                ("OFFLOAD_LOADER_HSA_LIBRARY", fake),
                ("OFFLOAD_LOADER_CUDA_LIBRARY", "/nonexistent/libcuda.so.1"),
                ("OFFLOAD_LOADER_KFD_ROOT", root.to_str().unwrap()),
                ("FAKE_HSA_AGENTS", AGENTS),
                ("FAKE_HSA_INIT_STATUS", init),
                ("FAKE_CALL_LOG", calls.to_str().unwrap()),
            ],
        );
    }
    let _ = std::fs::remove_dir_all(&root);
}

fn case_kfd_fallback() {
    let d = detect_with(&Config::from_env());
    assert_eq!(targets(&d), ["gfx90a (kfd)", "gfx1100 (kfd)"]);
    assert_eq!(report(&d, Backend::Hsa).0, Status::Unavailable);
    assert_eq!(report(&d, Backend::Kfd).0, Status::Found(2));
    // hsa_init failed: nothing to shut down.
    let calls = std::fs::read_to_string(env_path("FAKE_CALL_LOG")).unwrap();
    assert_eq!(calls, "hsa_init\n");
}

// --------------------------------------------------- visible devices ----

#[test]
fn visible_device_lists_through_the_drivers() {
    let Some(f) = fakes() else { return };
    let fake = f.full.to_str().unwrap();
    run_case(
        "visible_devices",
        &[
            ("OFFLOAD_LOADER_HSA_LIBRARY", fake),
            ("OFFLOAD_LOADER_CUDA_LIBRARY", fake),
            ("FAKE_HSA_AGENTS", "gfx906:xnack-;gfx90a:xnack+;gfx1100"),
            ("FAKE_CUDA_DEVICES", "8.0:a;9.0:b;8.6:c"),
            // Applied by the (fake) drivers themselves.
            ("ROCR_VISIBLE_DEVICES", "2,0"),
            ("CUDA_VISIBLE_DEVICES", "2,bogus,0"),
            // Applied by offload-detect, on what ROCR left.
            ("HIP_VISIBLE_DEVICES", "1,1,0"),
        ],
    );
    run_case(
        "hip_hides_all",
        &[
            ("OFFLOAD_LOADER_HSA_LIBRARY", fake),
            ("OFFLOAD_LOADER_CUDA_LIBRARY", fake),
            ("FAKE_HSA_AGENTS", "gfx906:xnack-;gfx90a:xnack+"),
            ("FAKE_CUDA_DEVICES", "8.0:a"),
            ("HIP_VISIBLE_DEVICES", "5"),
            ("CUDA_VISIBLE_DEVICES", ""),
        ],
    );
}

fn case_visible_devices() {
    let d = detect_with(&Config::from_env());
    assert_eq!(
        targets(&d),
        ["gfx906:xnack- (hsa)", "gfx1100 (hsa)", "sm_86 (cuda)"]
    );
    // KFD node numbers survive the reordering; CUDA ordinals are post-filter.
    let ordinals: Vec<u32> = d.devices.iter().map(|d| d.ordinal).collect();
    assert_eq!(ordinals, [1, 3, 0]);
    assert_eq!(d.devices[2].name.as_deref(), Some("c"));
}

fn case_hip_hides_all() {
    let d = detect_with(&Config::from_env());
    assert!(d.devices.is_empty());
    assert_eq!(
        report(&d, Backend::Hsa),
        (
            Status::NoDevice,
            "HIP_VISIBLE_DEVICES=`5` hides all 2 GPU(s) found".into()
        )
    );
    let lib = env_path("OFFLOAD_LOADER_CUDA_LIBRARY");
    assert_eq!(
        report(&d, Backend::Cuda),
        (
            Status::NoDevice,
            format!("{lib} present, cuDeviceGetCount reports no device")
        )
    );
}

// --------------------------------------------------------- overrides ----

#[test]
fn overrides_replace_detection() {
    let d = detect_with(&Config {
        devices: Some("gfx90a:xnack-:sramecc+, sm_80,gfx1100".into()),
        hsa_library: Some("/must/not/be/opened".into()),
        ..Config::default()
    });
    assert_eq!(
        targets(&d),
        [
            "gfx90a:sramecc+:xnack- (override)",
            "sm_80 (override)",
            "gfx1100 (override)"
        ]
    );
    assert!(d.devices.iter().all(|d| !d.can_load()));
    assert_eq!(
        report(&d, Backend::Override),
        (Status::Found(3), String::new())
    );
    for backend in [Backend::Hsa, Backend::Kfd, Backend::Cuda] {
        assert_eq!(
            report(&d, backend),
            (
                Status::Skipped,
                "OFFLOAD_LOADER_DEVICES replaces detection".into()
            )
        );
    }
    let err = d.devices[1].load(b"x").unwrap_err();
    assert!(
        matches!(err, DriverError::NoDriver { device: 1, .. }),
        "{err}"
    );
}

#[test]
fn an_invalid_override_fails_without_falling_back() {
    for (list, why) in [
        (
            "gfx90a,gfx9999",
            "OFFLOAD_LOADER_DEVICES: `gfx9999`: unknown AMDGPU processor `gfx9999`",
        ),
        (
            "compute_90a",
            "OFFLOAD_LOADER_DEVICES: `compute_90a`: `compute_90a` names code, not a device: \
             PTX, which a device compiles for itself; write the device's compute capability, sm_90",
        ),
        (
            "gfx1100:xnack+",
            "OFFLOAD_LOADER_DEVICES: `gfx1100:xnack+`: processor gfx1100 does not support xnack",
        ),
    ] {
        let d = detect_with(&Config {
            devices: Some(list.into()),
            ..Config::default()
        });
        assert!(d.devices.is_empty(), "{list}");
        assert_eq!(
            report(&d, Backend::Override),
            (Status::Unavailable, why.into())
        );
        assert_eq!(report(&d, Backend::Hsa).0, Status::Skipped);
    }
}

#[test]
fn devices_is_detected_once_per_process() {
    run_case(
        "once_per_process",
        &[("OFFLOAD_LOADER_DEVICES", "gfx942:sramecc+:xnack-,sm_90")],
    );
}

fn case_once_per_process() {
    let first = offload_detect::devices();
    assert!(std::ptr::eq(first, offload_detect::devices()));
    assert!(std::ptr::eq(
        first,
        offload_detect::detected(Vendors::ALL).unwrap()
    ));
    assert_eq!(
        targets(first),
        ["gfx942:sramecc+:xnack- (override)", "sm_90 (override)"]
    );
}

// ------------------------------------------------------------ loading ----

/// An image the fake HSA runtime accepts: ELF magic, then a string table.
fn amdgpu_image() -> Vec<u8> {
    let mut image = b"\x7fELF\x02\x01\x01\x40".to_vec();
    image.resize(64, 0);
    image.extend_from_slice(b"\0vector_add.kd\0counter\0vector_add\0");
    image
}

/// A cubin-shaped ELF whose section headers end it, with a string table.
fn cubin_image() -> Vec<u8> {
    let strtab = b"\0saxpy\0flag\0".as_slice();
    let shoff = 64 + strtab.len() as u64;
    let mut image = b"\x7fELF\x02\x01\x01\x33".to_vec();
    image.resize(64, 0);
    image[40..48].copy_from_slice(&shoff.to_le_bytes());
    image[58..60].copy_from_slice(&64u16.to_le_bytes());
    image[60..62].copy_from_slice(&2u16.to_le_bytes());
    image.extend_from_slice(strtab);
    image.resize(shoff as usize + 128, 0);
    image
}

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

#[test]
fn images_load_through_hsa() {
    let Some(f) = fakes() else { return };
    let (loads, calls) = (scratch("hsa-loads.log"), scratch("hsa-calls.log"));
    run_case(
        "hsa_loads",
        &[
            ("OFFLOAD_LOADER_HSA_LIBRARY", f.full.to_str().unwrap()),
            ("OFFLOAD_LOADER_CUDA_LIBRARY", "/nonexistent"),
            ("FAKE_HSA_AGENTS", AGENTS),
            ("FAKE_DRIVER_LOG", loads.to_str().unwrap()),
            ("FAKE_CALL_LOG", calls.to_str().unwrap()),
        ],
    );
}

fn case_hsa_loads() {
    let d = detect_with(&Config::from_env());
    let image = amdgpu_image();
    let loaded = d.devices[0].load(&image).unwrap();
    let kernel = loaded.kernel("vector_add").unwrap();
    assert_ne!(kernel.handle, 0);
    let counter = loaded.global("counter").unwrap();
    assert_eq!(counter.size, 4);
    assert_ne!(counter.address, 0);
    // `counter` is a variable: there is no `counter.kd`.
    let err = loaded.kernel("counter").unwrap_err();
    assert_eq!(
        err.to_string(),
        "hsa_executable_get_symbol_by_name failed: HSA_STATUS_ERROR_INVALID_SYMBOL_NAME \
         (0x1013): There is no symbol with the given name. (fake)"
    );
    assert!(matches!(
        loaded.kernel("a\0b"),
        Err(DriverError::BadName(_))
    ));
    // The same image on another device.
    let module = d.devices[3].load(&image).unwrap();
    assert_eq!(
        module.kernel("vector_add").unwrap().handle,
        kernel.handle + (1 << 32)
    );
    loaded.unload().unwrap();
    drop(module);
    let loads = std::fs::read_to_string(env_path("FAKE_DRIVER_LOG")).unwrap();
    let line = |target| format!("hsa load {target} {} {:016x}", image.len(), fnv(&image));
    assert_eq!(
        loads.lines().collect::<Vec<_>>(),
        [line("gfx90a:sramecc+:xnack-"), line("gfx1100")]
    );
    // Each executable and reader destroyed once, executable first.
    let calls = std::fs::read_to_string(env_path("FAKE_CALL_LOG")).unwrap();
    assert_eq!(
        calls.lines().collect::<Vec<_>>(),
        [
            "hsa_init",
            "hsa_executable_destroy 1",
            "hsa_code_object_reader_destroy 1",
            "hsa_executable_destroy 2",
            "hsa_code_object_reader_destroy 2"
        ]
    );
}

#[test]
fn a_failed_hsa_load_reports_the_runtime_status() {
    let Some(f) = fakes() else { return };
    let (loads, calls) = (scratch("hsa-fail-loads.log"), scratch("hsa-fail-calls.log"));
    run_case(
        "hsa_load_fails",
        &[
            ("OFFLOAD_LOADER_HSA_LIBRARY", f.full.to_str().unwrap()),
            ("OFFLOAD_LOADER_CUDA_LIBRARY", "/nonexistent"),
            ("FAKE_HSA_AGENTS", "gfx90a:sramecc+:xnack-"),
            ("FAKE_HSA_LOAD_STATUS", "0x1010"),
            ("FAKE_DRIVER_LOG", loads.to_str().unwrap()),
            ("FAKE_CALL_LOG", calls.to_str().unwrap()),
        ],
    );
}

fn case_hsa_load_fails() {
    let d = detect_with(&Config::from_env());
    let err = d.devices[0].load(&amdgpu_image()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "hsa_executable_load_agent_code_object failed: HSA_STATUS_ERROR_INVALID_CODE_OBJECT \
         (0x1010): The code object is invalid. (fake)"
    );
    let DriverError::Call {
        call,
        status: DriverStatus::Hsa { status, .. },
    } = err
    else {
        panic!("{err:?}")
    };
    assert_eq!(
        (call, status),
        ("hsa_executable_load_agent_code_object", 0x1010)
    );
    assert!(!Path::new(&env_path("FAKE_DRIVER_LOG")).exists());
    // Nothing leaks: the executable and the reader are destroyed.
    let calls = std::fs::read_to_string(env_path("FAKE_CALL_LOG")).unwrap();
    assert_eq!(
        calls.lines().collect::<Vec<_>>(),
        [
            "hsa_init",
            "hsa_executable_destroy 1",
            "hsa_code_object_reader_destroy 1"
        ]
    );
}

#[test]
fn images_load_through_cuda() {
    let Some(f) = fakes() else { return };
    let (loads, calls) = (scratch("cuda-loads.log"), scratch("cuda-calls.log"));
    run_case(
        "cuda_loads",
        &[
            ("OFFLOAD_LOADER_HSA_LIBRARY", "/nonexistent"),
            ("OFFLOAD_LOADER_KFD_ROOT", "/nonexistent"),
            ("OFFLOAD_LOADER_CUDA_LIBRARY", f.full.to_str().unwrap()),
            ("FAKE_CUDA_DEVICES", CUDA_DEVICES),
            ("FAKE_DRIVER_LOG", loads.to_str().unwrap()),
            ("FAKE_CALL_LOG", calls.to_str().unwrap()),
        ],
    );
}

const PTX: &[u8] = b".version 8.4\n.target sm_90\n.address_size 64\n\
                    .global .align 4 .u32 hits;\n.visible .entry scale(\n) { ret; }";

fn case_cuda_loads() {
    let d = detect_with(&Config::from_env());
    let (a100, h100) = (&d.devices[0], &d.devices[1]);
    // A cubin is passed as is.
    let cubin = cubin_image();
    let loaded = a100.load(&cubin).unwrap();
    assert_ne!(loaded.kernel("saxpy").unwrap().handle, 0);
    assert_eq!(loaded.global("flag").unwrap().size, 4);
    let err = loaded.kernel("missing").unwrap_err();
    assert_eq!(
        err.to_string(),
        "cuModuleGetFunction failed: CUDA_ERROR_NOT_FOUND (500): named symbol not found"
    );
    loaded.unload().unwrap();
    // PTX without its NUL gets one.
    let ptx = h100.load(PTX).unwrap();
    assert_ne!(ptx.kernel("scale").unwrap().handle, 0);
    assert_eq!(ptx.global("hits").unwrap().size, 4);
    drop(ptx);
    // A cubin cut short is refused before the driver reads past its end.
    let err = a100.load(&cubin[..100]).unwrap_err();
    assert!(matches!(err, DriverError::Truncated { .. }), "{err}");
    let with_nul = [PTX, b"\0"].concat();
    let loads = std::fs::read_to_string(env_path("FAKE_DRIVER_LOG")).unwrap();
    assert_eq!(
        loads.lines().collect::<Vec<_>>(),
        [
            format!("cuda load sm_80 {} {:016x}", cubin.len(), fnv(&cubin)),
            format!("cuda load sm_90 {} {:016x}", with_nul.len(), fnv(&with_nul)),
        ]
    );
    let calls = std::fs::read_to_string(env_path("FAKE_CALL_LOG")).unwrap();
    assert_eq!(
        calls.lines().collect::<Vec<_>>(),
        [
            "cuDevicePrimaryCtxRetain 0",
            "cuModuleUnload 1",
            "cuDevicePrimaryCtxRelease_v2 0",
            "cuDevicePrimaryCtxRetain 1",
            "cuModuleUnload 2",
            "cuDevicePrimaryCtxRelease_v2 1"
        ]
    );
}

#[test]
fn a_failed_cuda_load_reports_the_driver_error() {
    let Some(f) = fakes() else { return };
    let calls = scratch("cuda-fail-calls.log");
    run_case(
        "cuda_load_fails",
        &[
            ("OFFLOAD_LOADER_HSA_LIBRARY", "/nonexistent"),
            ("OFFLOAD_LOADER_KFD_ROOT", "/nonexistent"),
            ("OFFLOAD_LOADER_CUDA_LIBRARY", f.full.to_str().unwrap()),
            ("FAKE_CUDA_DEVICES", "7.5:NVIDIA T4"),
            ("FAKE_CUDA_LOAD_ERROR", "209"),
            ("FAKE_CALL_LOG", calls.to_str().unwrap()),
        ],
    );
}

fn case_cuda_load_fails() {
    let d = detect_with(&Config::from_env());
    let err = d.devices[0].load(&cubin_image()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "cuModuleLoadData failed: CUDA_ERROR_NO_BINARY_FOR_GPU (209): \
         no kernel image is available for execution on the device"
    );
    // The context retained for the load is released.
    let calls = std::fs::read_to_string(env_path("FAKE_CALL_LOG")).unwrap();
    assert_eq!(
        calls.lines().collect::<Vec<_>>(),
        [
            "cuDevicePrimaryCtxRetain 0",
            "cuDevicePrimaryCtxRelease_v2 0"
        ]
    );
}

#[test]
fn cuda_loading_leaves_the_current_context_alone() {
    let Some(f) = fakes() else { return };
    let calls = scratch("cuda-context-calls.log");
    run_case(
        "cuda_context_kept",
        &[
            ("OFFLOAD_LOADER_HSA_LIBRARY", "/nonexistent"),
            ("OFFLOAD_LOADER_KFD_ROOT", "/nonexistent"),
            ("OFFLOAD_LOADER_CUDA_LIBRARY", f.full.to_str().unwrap()),
            ("FAKE_CUDA_DEVICES", CUDA_DEVICES),
            ("FAKE_CALL_LOG", calls.to_str().unwrap()),
        ],
    );
}

/// The context calls of the CUDA driver (cuda.h), called by the test as a
/// host program would call them.
struct CudaContexts {
    retain: unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int,
    release: unsafe extern "C" fn(c_int) -> c_int,
    get_state: unsafe extern "C" fn(c_int, *mut c_uint, *mut c_int) -> c_int,
    set_current: unsafe extern "C" fn(*mut c_void) -> c_int,
    get_current: unsafe extern "C" fn(*mut *mut c_void) -> c_int,
    // Keeps the library's reference count up while the pointers are used.
    _library: libloading::Library,
}

impl CudaContexts {
    /// The driver detection opened (`dlopen` of the same path gives the same
    /// library, so the same per-thread context stacks).
    fn open() -> CudaContexts {
        // SAFETY: the test double, already loaded by detection; loading it
        // again runs no initialiser.
        let library =
            unsafe { libloading::Library::new(env_path("OFFLOAD_LOADER_CUDA_LIBRARY")) }.unwrap();
        // SAFETY: each symbol is given its cuda.h signature; the library
        // stays loaded while `_library` lives (and detection never closes it).
        unsafe {
            CudaContexts {
                retain: *library.get(b"cuDevicePrimaryCtxRetain\0").unwrap(),
                release: *library.get(b"cuDevicePrimaryCtxRelease_v2\0").unwrap(),
                get_state: *library.get(b"cuDevicePrimaryCtxGetState\0").unwrap(),
                set_current: *library.get(b"cuCtxSetCurrent\0").unwrap(),
                get_current: *library.get(b"cuCtxGetCurrent\0").unwrap(),
                _library: library,
            }
        }
    }

    fn retain(&self, device: c_int) -> *mut c_void {
        let mut context = std::ptr::null_mut();
        // SAFETY: an out-pointer.
        assert_eq!(unsafe { (self.retain)(&mut context, device) }, 0);
        context
    }

    fn release(&self, device: c_int) {
        // SAFETY: balances `retain`.
        assert_eq!(unsafe { (self.release)(device) }, 0);
    }

    fn active(&self, device: c_int) -> bool {
        let (mut flags, mut active) = (0, 0);
        // SAFETY: out-pointers.
        assert_eq!(
            unsafe { (self.get_state)(device, &mut flags, &mut active) },
            0
        );
        active != 0
    }

    fn set_current(&self, context: *mut c_void) {
        // SAFETY: a context from `retain`, or null.
        assert_eq!(unsafe { (self.set_current)(context) }, 0);
    }

    fn current(&self) -> *mut c_void {
        let mut context = std::ptr::null_mut();
        // SAFETY: an out-pointer.
        assert_eq!(unsafe { (self.get_current)(&mut context) }, 0);
        context
    }
}

fn case_cuda_context_kept() {
    let d = detect_with(&Config::from_env());
    let a100 = &d.devices[0];
    let cuda = CudaContexts::open();
    // The host program has device 1's primary context current.
    let own = cuda.retain(1);
    cuda.set_current(own);
    assert_eq!(cuda.current(), own);
    let cubin = cubin_image();
    let loaded = a100.load(&cubin).unwrap();
    assert_eq!(cuda.current(), own);
    assert!(cuda.active(0));
    assert_ne!(loaded.kernel("saxpy").unwrap().handle, 0);
    assert_eq!(cuda.current(), own);
    assert_eq!(loaded.global("flag").unwrap().size, 4);
    assert_eq!(cuda.current(), own);
    loaded.kernel("missing").unwrap_err();
    assert_eq!(cuda.current(), own);
    loaded.unload().unwrap();
    assert_eq!(cuda.current(), own);
    // Device 0's primary context was retained for the image only.
    assert!(!cuda.active(0));
    // A load the driver refuses leaves it alone too (the double reads
    // FAKE_CUDA_LOAD_ERROR at the call; this case is the only test running).
    std::env::set_var("FAKE_CUDA_LOAD_ERROR", "209");
    let err = a100.load(&cubin).unwrap_err();
    std::env::remove_var("FAKE_CUDA_LOAD_ERROR");
    assert!(
        err.to_string().starts_with("cuModuleLoadData failed"),
        "{err}"
    );
    assert_eq!(cuda.current(), own);
    assert!(!cuda.active(0));
    cuda.set_current(std::ptr::null_mut());
    cuda.release(1);
    assert!(!cuda.active(1));
    // A thread with no current context has none afterwards, and the image
    // loaded there is used and unloaded from this one.
    let loaded = std::thread::scope(|s| {
        s.spawn(|| {
            let loaded = a100.load(&cubin).unwrap();
            assert!(cuda.current().is_null());
            loaded
        })
        .join()
        .unwrap()
    });
    assert_ne!(loaded.kernel("saxpy").unwrap().handle, 0);
    assert!(cuda.current().is_null());
    drop(loaded);
    assert!(cuda.current().is_null());
    assert!(!cuda.active(0));
    let calls = std::fs::read_to_string(env_path("FAKE_CALL_LOG")).unwrap();
    assert_eq!(
        calls.lines().collect::<Vec<_>>(),
        [
            "cuDevicePrimaryCtxRetain 1",
            "cuDevicePrimaryCtxRetain 0",
            "cuModuleUnload 1",
            "cuDevicePrimaryCtxRelease_v2 0",
            "cuDevicePrimaryCtxRetain 0",
            "cuDevicePrimaryCtxRelease_v2 0",
            "cuDevicePrimaryCtxRelease_v2 1",
            "cuDevicePrimaryCtxRetain 0",
            "cuModuleUnload 2",
            "cuDevicePrimaryCtxRelease_v2 0"
        ]
    );
}

// ---------------------------------------------- Debian's HSA runtime ----

const DEBIAN_HSA: &str = "/usr/lib/x86_64-linux-gnu/libhsa-runtime64.so.1";

/// Whether `lib` is mapped in this process.
fn mapped(lib: &str) -> bool {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .any(|l| l.contains(lib))
}

/// Detection exactly as a program here gets it (default library names, the
/// real /dev, /proc and sysfs) on a machine with no GPU driver: no device,
/// and no driver library loaded, because no `/dev/kfd`, `/dev/nvidiactl` or
/// `/proc/driver/nvidia` says one could answer (the HSA runtime and its
/// libraries cost 13 ms to load; see BENCHMARKS.md). The same verdict as
/// `offload-arch` here: no GPU.
#[test]
fn no_gpu_driver_here_loads_no_driver_library() {
    if [
        "/dev/kfd",
        "/dev/dxg",
        "/dev/nvidiactl",
        "/proc/driver/nvidia",
    ]
    .iter()
    .any(|p| Path::new(p).exists())
    {
        eprintln!("skipped: this machine has a GPU kernel driver; the case expects none");
        return;
    }
    run_case("no_driver_here", &[]);
}

fn case_no_driver_here() {
    let d = offload_detect::devices();
    assert!(d.devices.is_empty(), "{:?}", d.devices);
    assert_eq!(
        report(d, Backend::Hsa),
        (
            Status::NoDevice,
            "no AMD GPU kernel driver here: none of /dev/kfd, /dev/dxg exists".into()
        )
    );
    assert_eq!(
        report(d, Backend::Kfd),
        (
            Status::Unavailable,
            "no KFD topology at /sys/devices/virtual/kfd/kfd/topology/nodes".into()
        )
    );
    assert_eq!(
        report(d, Backend::Cuda),
        (
            Status::NoDevice,
            "no NVIDIA GPU kernel driver here: none of /proc/driver/nvidia, /dev/nvidiactl, \
             /dev/dxg exists"
                .into()
        )
    );
    assert!(!mapped("libhsa-runtime64"), "the HSA runtime was loaded");
    assert!(!mapped("libcuda"), "the CUDA driver was loaded");
}

/// Debian's real HSA runtime, reached as on a machine whose `/dev/kfd` is
/// there but unusable (a system root whose `dev/kfd` is a plain file: the
/// runtime itself opens the real `/dev/kfd`, which is missing): it loads,
/// `hsa_init` fails with 0x1008, and detection goes on to KFD and reports
/// no GPU.
#[test]
fn debian_hsa_runtime_reports_no_gpu_quickly() {
    if !Path::new(DEBIAN_HSA).exists() {
        assert!(
            !ci(),
            "{DEBIAN_HSA} is missing: install the Debian package libhsa-runtime64-1"
        );
        eprintln!("skipped: {DEBIAN_HSA} not installed (Debian package libhsa-runtime64-1)");
        return;
    }
    if Path::new("/dev/kfd").exists() {
        eprintln!("skipped: this machine has /dev/kfd; the case expects none");
        return;
    }
    let root = scratch("debian-hsa-root");
    std::fs::create_dir_all(root.join("dev")).unwrap();
    std::fs::write(root.join("dev/kfd"), "").unwrap();
    let out = run_case(
        "debian_hsa",
        &[("TEST_SYSTEM_ROOT", root.to_str().unwrap())],
    );
    // The harness prints the test's name on the same line as its first output.
    if let Some(at) = out.find("detection took") {
        eprintln!("{}", out[at..].lines().next().unwrap_or_default());
    }
}

fn case_debian_hsa() {
    let root = PathBuf::from(std::env::var_os("TEST_SYSTEM_ROOT").unwrap());
    let start = Instant::now();
    let d = detect_with(&Config {
        system_root: Some(root.clone()),
        ..Config::from_env()
    });
    let took = start.elapsed();
    println!("detection took {took:?}");
    assert!(d.devices.is_empty(), "{:?}", d.devices);
    let (status, reason) = report(&d, Backend::Hsa);
    assert_eq!(status, Status::Unavailable, "{reason}");
    assert!(
        reason.starts_with(
            "libhsa-runtime64.so.1 present, hsa_init failed: HSA_STATUS_ERROR_OUT_OF_RESOURCES \
             (0x1008): The runtime failed to allocate the necessary resources"
        ),
        "{reason}"
    );
    assert!(mapped("libhsa-runtime64"));
    assert_eq!(
        report(&d, Backend::Kfd),
        (
            Status::Unavailable,
            format!(
                "no KFD topology at {}",
                root.join("sys/devices/virtual/kfd/kfd/topology/nodes")
                    .display()
            )
        )
    );
    // No NVIDIA driver sign under this root: libcuda is not opened.
    assert_eq!(report(&d, Backend::Cuda).0, Status::NoDevice);
    // (The reason is hsa_init's own failure, not a timeout: it did not hang.)
}

/// Only the vendors asked for are detected: the others' drivers are not
/// opened, even when their kernel drivers are here; a driver library named
/// explicitly is opened anyway.
#[test]
fn only_the_vendors_asked_for_are_detected() {
    let Some(f) = fakes() else { return };
    let root = scratch("vendors-root");
    std::fs::create_dir_all(root.join("dev")).unwrap();
    std::fs::create_dir_all(root.join("proc/driver/nvidia")).unwrap();
    std::fs::write(root.join("dev/kfd"), "").unwrap();
    run_case(
        "vendors_asked_for",
        &[
            ("TEST_SYSTEM_ROOT", root.to_str().unwrap()),
            ("OFFLOAD_LOADER_HSA_LIBRARY", f.full.to_str().unwrap()),
            ("FAKE_HSA_AGENTS", "gfx90a:sramecc+:xnack-"),
            ("FAKE_CUDA_DEVICES", CUDA_DEVICES),
        ],
    );
}

fn case_vendors_asked_for() {
    let root = PathBuf::from(std::env::var_os("TEST_SYSTEM_ROOT").unwrap());
    let config = |vendors| Config {
        system_root: Some(root.clone()),
        vendors,
        ..Config::from_env()
    };
    // NVIDIA only: HSA is named, so it is opened and answers; CUDA is not
    // named, and its default names are not found here.
    let d = detect_with(&config(Vendors::of(Vendor::Nvidia)));
    assert_eq!(targets(&d), ["gfx90a:sramecc+:xnack- (hsa)"]);
    assert_ne!(report(&d, Backend::Cuda).0, Status::Skipped);
    // AMD only: CUDA is neither asked for nor named.
    let d = detect_with(&config(Vendors::of(Vendor::Amd)));
    assert_eq!(
        targets(&d),
        ["gfx90a:sramecc+:xnack- (hsa)"],
        "{:?}",
        d.backends
    );
    assert_eq!(
        report(&d, Backend::Cuda),
        (Status::Skipped, "no NVIDIA GPU asked for".into())
    );
    assert!(!mapped("libcuda"));
    // Both, CUDA named too: every device, AMD first.
    std::env::set_var(
        "OFFLOAD_LOADER_CUDA_LIBRARY",
        std::env::var_os("OFFLOAD_LOADER_HSA_LIBRARY").unwrap(),
    );
    let d = detect_with(&config(Vendors::of(Vendor::Amd)));
    assert_eq!(
        targets(&d).len(),
        1 + CUDA_DEVICES.split(';').count(),
        "{:?}",
        targets(&d)
    );
}

#[test]
fn a_driver_that_answers_late_is_retried() {
    let Some(f) = fakes() else { return };
    run_case(
        "late_driver",
        &[
            ("OFFLOAD_LOADER_HSA_LIBRARY", f.full.to_str().unwrap()),
            ("OFFLOAD_LOADER_CUDA_LIBRARY", "/nonexistent"),
            ("OFFLOAD_LOADER_KFD_ROOT", "/nonexistent"),
            ("OFFLOAD_LOADER_DETECT_TIMEOUT_MS", "100"),
            ("FAKE_HSA_AGENTS", "gfx90a"),
            // Only the first hsa_init hangs; it cannot answer within 100 ms.
            ("FAKE_HSA_HANG_MS", "1500"),
        ],
    );
}

fn case_late_driver() {
    let first = offload_detect::devices();
    assert!(first.devices.is_empty());
    assert_eq!(
        report(first, Backend::Hsa),
        (
            Status::Unavailable,
            "the HSA runtime did not answer within 100 ms; detection gave up on it".into()
        )
    );
    // Later calls answer at once while the first thread is still in
    // hsa_init, then detect again once it has ended. No bound on how long
    // that takes on a loaded machine, beyond failing rather than hanging
    // after ten minutes.
    let found = (0..30_000)
        .map(|_| {
            let d = offload_detect::devices();
            if d.devices.is_empty() {
                std::thread::sleep(Duration::from_millis(20));
            }
            d
        })
        .find(|d| !d.devices.is_empty())
        .expect("the HSA runtime was never asked again");
    assert_eq!(targets(found), ["gfx90a (hsa)"]);
    // Final now: detected once more, never again.
    assert!(std::ptr::eq(found, offload_detect::devices()));
    assert!(std::ptr::eq(
        found,
        offload_detect::detected(Vendors::ALL).unwrap()
    ));
}

#[test]
fn a_non_utf8_environment_is_not_fatal() {
    use std::os::unix::ffi::OsStrExt;
    let Some(f) = fakes() else { return };
    let bad = std::ffi::OsStr::from_bytes(b"\xff\xfe1");
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_case", "--nocapture", "--test-threads=1"]);
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(detection_variable) {
            cmd.env_remove(key);
        }
    }
    cmd.env("DETECT_DRIVERS_CASE", "non_utf8")
        .env("OFFLOAD_LOADER_HSA_LIBRARY", &f.full)
        .env("OFFLOAD_LOADER_CUDA_LIBRARY", "/nonexistent")
        .env("OFFLOAD_LOADER_KFD_ROOT", "/nonexistent")
        .env("FAKE_HSA_AGENTS", "gfx90a")
        // Neither a value nor a name that is UTF-8: ignored, never a panic.
        .env("HIP_VISIBLE_DEVICES", bad)
        .env("OFFLOAD_LOADER_DEVICES", bad)
        .env(bad, "x");
    let out = cmd.output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && text.contains("case non_utf8 passed"),
        "{text}"
    );
}

fn case_non_utf8() {
    let d = offload_detect::devices();
    assert_eq!(targets(d), ["gfx90a (hsa)"]);
}
