//! Device detection end to end: offload-probe (no path) reports devices and
//! backends, with the production code path loading the test-double driver
//! (or Debian's real HSA runtime) by path. One child process per configuration.

#[path = "../../tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn fake() -> Option<PathBuf> {
    support::built("liboffload_test_drivers.so")
}

/// Runs `offload-probe --json` with a clean detection environment plus `env`.
fn detect(env: &[(&str, &str)]) -> serde_json::Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_offload-probe"));
    cmd.arg("--json");
    for k in [
        "OFFLOAD_LOADER_DEVICES",
        "HSA_OVERRIDE_GFX_VERSION",
        "ROCR_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "CUDA_VISIBLE_DEVICES",
    ] {
        cmd.env_remove(k);
    }
    cmd.env("OFFLOAD_LOADER_KFD_ROOT", "/nonexistent");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn targets(report: &serde_json::Value) -> Vec<String> {
    report["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            format!(
                "{} {}",
                d["target_id"].as_str().unwrap(),
                d["source"].as_str().unwrap()
            )
        })
        .collect()
}

fn backend(report: &serde_json::Value, name: &str) -> (String, String) {
    let b = report["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == name)
        .unwrap_or_else(|| panic!("no backend {name}: {report}"));
    (
        b["status"].as_str().unwrap().to_string(),
        b["reason"].as_str().unwrap_or_default().to_string(),
    )
}

#[test]
fn mixed_node_through_hsa_and_cuda() {
    let Some(fake) = fake() else { return };
    let fake = fake.to_str().unwrap();
    let report = detect(&[
        ("OFFLOAD_LOADER_HSA_LIBRARY", fake),
        ("OFFLOAD_LOADER_CUDA_LIBRARY", fake),
        (
            "FAKE_HSA_AGENTS",
            "gfx90a:sramecc+:xnack-;gfx90a:sramecc-:xnack+;gfx1100|gfx11-generic",
        ),
        (
            "FAKE_CUDA_DEVICES",
            "8.0:NVIDIA A100-SXM4-80GB;9.0:NVIDIA H100 80GB HBM3",
        ),
        ("FAKE_CUDA_DRIVER_VERSION", "12040"),
    ]);
    assert_eq!(
        targets(&report),
        [
            "gfx90a:sramecc+:xnack- hsa",
            "gfx90a:sramecc-:xnack+ hsa",
            "gfx1100 hsa",
            "sm_80 cuda",
            "sm_90 cuda",
        ]
    );
    assert_eq!(report["devices"][4]["name"], "NVIDIA H100 80GB HBM3");
    assert_eq!(report["devices"][4]["driver_version"], 12040);
    assert_eq!(report["devices"][3]["pci_bus_id"], "0000:41:00.0");
    assert_eq!(backend(&report, "hsa").0, "found 3");
    assert_eq!(
        backend(&report, "kfd"),
        ("skipped".into(), "the HSA runtime answered".into())
    );
    assert_eq!(backend(&report, "cuda").0, "found 2");
}

#[test]
fn visible_devices_lists() {
    let Some(fake) = fake() else { return };
    let fake = fake.to_str().unwrap();
    let report = detect(&[
        ("OFFLOAD_LOADER_HSA_LIBRARY", fake),
        ("OFFLOAD_LOADER_CUDA_LIBRARY", fake),
        ("FAKE_HSA_AGENTS", "gfx906:xnack-;gfx90a:xnack+;gfx1100"),
        ("FAKE_CUDA_DEVICES", "8.0:a;9.0:b"),
        ("ROCR_VISIBLE_DEVICES", "2,0"),
        ("CUDA_VISIBLE_DEVICES", "1,bogus,0"),
    ]);
    assert_eq!(
        targets(&report),
        ["gfx1100 hsa", "gfx906:xnack- hsa", "sm_90 cuda"]
    );
}

#[test]
fn failures_become_reasons() {
    let Some(fake) = fake() else { return };
    let fake = fake.to_str().unwrap();
    let report = detect(&[
        ("OFFLOAD_LOADER_HSA_LIBRARY", fake),
        ("OFFLOAD_LOADER_CUDA_LIBRARY", fake),
        ("FAKE_HSA_INIT_STATUS", "0x1008"),
        ("FAKE_CUDA_INIT", "100"),
    ]);
    assert!(targets(&report).is_empty());
    let (status, reason) = backend(&report, "hsa");
    assert_eq!(status, "unavailable");
    assert!(
        reason.ends_with("present, hsa_init failed: HSA_STATUS_ERROR_OUT_OF_RESOURCES (0x1008): The runtime failed to allocate the necessary resources. (fake)"),
        "{reason}"
    );
    assert_eq!(backend(&report, "kfd").1, "no KFD topology at /nonexistent");
    let (status, reason) = backend(&report, "cuda");
    assert_eq!(status, "no-device");
    assert!(
        reason.ends_with(
            "cuInit failed: CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected"
        ),
        "{reason}"
    );

    // A library without the symbols, and no library at all.
    let libz = "/usr/lib/x86_64-linux-gnu/libz.so.1";
    if Path::new(libz).exists() {
        let report = detect(&[
            ("OFFLOAD_LOADER_HSA_LIBRARY", libz),
            ("OFFLOAD_LOADER_CUDA_LIBRARY", "/nonexistent/libcuda.so.1"),
        ]);
        assert_eq!(
            backend(&report, "hsa").1,
            format!("symbol hsa_init missing from {libz}")
        );
        assert!(backend(&report, "cuda")
            .1
            .starts_with("/nonexistent/libcuda.so.1 not found"));
    }
}

#[test]
fn a_hanging_driver_is_given_up_on() {
    let Some(fake) = fake() else { return };
    let fake = fake.to_str().unwrap();
    let start = Instant::now();
    let report = detect(&[
        ("OFFLOAD_LOADER_HSA_LIBRARY", fake),
        ("OFFLOAD_LOADER_CUDA_LIBRARY", "/nonexistent"),
        ("FAKE_HSA_AGENTS", "gfx90a"),
        ("FAKE_HSA_HANG_MS", "20000"),
        ("OFFLOAD_LOADER_DETECT_TIMEOUT_MS", "300"),
    ]);
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(
        backend(&report, "hsa").1,
        "the HSA runtime did not answer within 300 ms; detection gave up on it"
    );
}

#[test]
fn kfd_topology_with_gfx_overrides() {
    let root = std::env::temp_dir().join(format!("kfd-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    for (node, version) in [(0, 0), (1, 90010), (2, 110001), (3, 90008)] {
        let dir = root.join(node.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("properties"),
            format!("cpu_cores_count 0\ngfx_target_version {version}\nsimd_count 4\n"),
        )
        .unwrap();
    }
    let root_str = root.to_str().unwrap();
    let base = [
        ("OFFLOAD_LOADER_HSA_LIBRARY", "/nonexistent/libhsa.so"),
        ("OFFLOAD_LOADER_CUDA_LIBRARY", "/nonexistent"),
        ("OFFLOAD_LOADER_KFD_ROOT", root_str),
    ];
    let report = detect(&base);
    // KFD tells no xnack or sramecc setting: each device is every setting
    // its processor can run in, one row each, naming the device.
    let settings = |p: &str| {
        [
            "sramecc+:xnack+",
            "sramecc+:xnack-",
            "sramecc-:xnack+",
            "sramecc-:xnack-",
        ]
        .map(|s| format!("{p}:{s} kfd"))
    };
    let mut expected = settings("gfx90a").to_vec();
    expected.push("gfx1101 kfd".into());
    expected.extend(settings("gfx908"));
    assert_eq!(targets(&report), expected);
    assert_eq!(report["devices"][0]["features_unknown"], true);
    assert_eq!(report["devices"][0]["setting_of"], "gfx90a");
    assert!(report["devices"][4].get("setting_of").is_none());
    assert_eq!(
        backend(&report, "kfd"),
        (
            "found 3".into(),
            "KFD reports the processor only: xnack and sramecc settings are unknown".into()
        )
    );
    let mut env = base.to_vec();
    env.extend([
        ("HSA_OVERRIDE_GFX_VERSION", "10.3.0"),
        ("HSA_OVERRIDE_GFX_VERSION_2", "11.0.0"),
    ]);
    assert_eq!(
        targets(&detect(&env)),
        ["gfx1030 kfd", "gfx1100 kfd", "gfx1030 kfd"]
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn overrides_replace_detection() {
    let report = detect(&[("OFFLOAD_LOADER_DEVICES", "gfx90a:xnack-:sramecc+,sm_80")]);
    assert_eq!(
        targets(&report),
        ["gfx90a:sramecc+:xnack- override", "sm_80 override"]
    );
    assert_eq!(
        backend(&report, "hsa"),
        (
            "skipped".into(),
            "OFFLOAD_LOADER_DEVICES replaces detection".into()
        )
    );
    let report = detect(&[("OFFLOAD_LOADER_DEVICES", "gfx90a,gfx9999")]);
    assert!(targets(&report).is_empty());
    assert_eq!(
        backend(&report, "override"),
        (
            "unavailable".into(),
            "OFFLOAD_LOADER_DEVICES: `gfx9999`: unknown AMDGPU processor `gfx9999`".into()
        )
    );
}

#[test]
fn debian_hsa_runtime_finds_no_gpu_quickly() {
    let Some(lib) = support::system_file(
        "/usr/lib/x86_64-linux-gnu/libhsa-runtime64.so.1",
        "libhsa-runtime64-1",
    ) else {
        return;
    };
    let lib = lib.to_str().unwrap();
    let start = Instant::now();
    let report = detect(&[
        ("OFFLOAD_LOADER_HSA_LIBRARY", lib),
        ("OFFLOAD_LOADER_CUDA_LIBRARY", "/nonexistent"),
    ]);
    let took = start.elapsed();
    assert!(targets(&report).is_empty());
    let (status, reason) = backend(&report, "hsa");
    assert_eq!(status, "unavailable");
    assert!(
        reason.contains("hsa_init failed: HSA_STATUS_ERROR_OUT_OF_RESOURCES (0x1008)"),
        "{reason}"
    );
    assert!(took < Duration::from_secs(3), "{took:?}");
}
