//! NVIDIA's libraries from PyPI that keep GPU code outside `.nv_fatbin`
//! (`.ci/cuda-libraries.sh`): cuFFT's fat binaries among host data (`.ldata`,
//! CUDA 13 `.data`), cuBLASLt's `.cask_resource`, NCCL's linked
//! `__nv_relfatbin`. The probe lists them (counts and sizes), each container
//! it lists is one `cuobjdump` reads alike once extracted to a file; the
//! verdicts follow each runtime's rule; slimmed for sm_90 they shrink on
//! disk, every kept image is byte-identical by `cuobjdump -xelf -xptx`, and
//! the results `dlopen` with the same dynamic symbols.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::*;

/// A library of `.ci/cuda-libraries.sh`: `libraries/<wheel>/<name>`.
fn library(wheel: &str, name: &str) -> Option<PathBuf> {
    let path = cuda_cache().join("libraries").join(wheel).join(name);
    if path.is_file() {
        return Some(path);
    }
    let fetch = "run `bash .ci/cuda-libraries.sh`";
    assert!(!ci(), "{} is missing: {fetch}", path.display());
    eprintln!("skipped: {} missing ({fetch})", path.display());
    None
}

/// `offload-probe ARGS --json`: (exit code, the report).
fn probe_json(args: &[&str]) -> (i32, serde_json::Value) {
    let out = Command::new(built("offload-probe").unwrap())
        .args(args)
        .arg("--json")
        .env_remove("OFFLOAD_LOADER_DEVICES")
        .output()
        .unwrap();
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap_or(-1), report)
}

/// Per section: (containers, bytes), from a report's containers.
fn per_section(report: &serde_json::Value) -> Vec<(String, usize, u64)> {
    let mut out: Vec<(String, usize, u64)> = Vec::new();
    for c in report["objects"][0]["containers"].as_array().unwrap() {
        let name = c["section"].as_str().unwrap().to_string();
        let size = c["size"].as_u64().unwrap();
        match out.iter_mut().find(|(n, _, _)| *n == name) {
            Some(row) => {
                row.1 += 1;
                row.2 += size;
            }
            None => out.push((name, 1, size)),
        }
    }
    out
}

/// The first verdict of the one file of `report`: (verdict, rule).
fn verdict(report: &serde_json::Value) -> (String, String) {
    let v = &report["objects"][0]["verdicts"][0];
    (
        v["verdict"].as_str().unwrap_or_default().into(),
        v["rule"].as_str().unwrap_or_default().into(),
    )
}

/// The containers of `file` in `section`: (offset, size) each.
fn containers_in(report: &serde_json::Value, section: &str) -> Vec<(u64, u64)> {
    report["objects"][0]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["section"] == section)
        .map(|c| (c["offset"].as_u64().unwrap(), c["size"].as_u64().unwrap()))
        .collect()
}

/// Every `step`-th of `containers` (the first and the last always),
/// extracted from `file` to a `.fatbin` file each, in a scratch directory
/// removed when the first of the pair is dropped.
fn extracted(
    file: &Path,
    containers: &[(u64, u64)],
    step: usize,
) -> (TempPath, Vec<(u64, PathBuf)>) {
    let bytes = std::fs::read(file).unwrap();
    let dir = temp_dir();
    let mut picked: Vec<usize> = (0..containers.len()).step_by(step.max(1)).collect();
    picked.push(containers.len() - 1);
    picked.dedup();
    let files = picked
        .into_iter()
        .map(|i| {
            let (at, size) = containers[i];
            let path = dir.join(format!("{at:x}.fatbin"));
            std::fs::write(&path, &bytes[at as usize..(at + size) as usize]).unwrap();
            (at, path)
        })
        .collect();
    (dir, files)
}

/// (kind, arch) of each image the probe lists in the container at `at`,
/// PTX and cubins only (cuobjdump's `-lelf -lptx` lists nothing else).
fn listed_at(report: &serde_json::Value, at: u64) -> Vec<(String, String)> {
    let c = report["objects"][0]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["offset"] == at)
        .unwrap();
    c["images"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| {
            let kind = match i["code"].as_str()? {
                "cubin" => "ELF",
                "ptx" => "PTX",
                _ => return None,
            };
            // cuobjdump -lelf names family code (`sm_100f`) by its plain arch.
            let arch = i["target_id"].as_str()?;
            let arch = arch.strip_suffix('f').unwrap_or(arch);
            Some((kind.to_string(), arch.to_string()))
        })
        .collect()
}

/// cuobjdump's `-lelf -lptx` of a file: (kind, arch).
fn cuobjdump_listed(cuda: &Cuda, file: &Path) -> Vec<(String, String)> {
    cuda.cuobjdump_list(file)
        .into_iter()
        .map(|(kind, _, arch)| (kind, arch))
        .collect()
}

#[test]
fn containers_among_host_data_are_listed_as_cuobjdump_reads_them() {
    let Some(cuda) = cuda() else { return };
    // (wheel, library, section, containers there, MB there, rounded).
    let cases = [
        ("nvidia-cufft-cu12", "libcufft.so.11", ".ldata", 24_453, 269),
        ("nvidia-cufft", "libcufft.so.12", ".data", 18_215, 216),
        (
            "nvidia-cublas-cu12",
            "libcublasLt.so.12",
            ".cask_resource",
            469,
            117,
        ),
        (
            "nvidia-cublas",
            "libcublasLt.so.13",
            ".cask_resource",
            299,
            59,
        ),
        (
            "nvidia-nccl-cu12",
            "libnccl.so.2",
            "__nv_relfatbin",
            129,
            216,
        ),
        (
            "nvidia-nccl-cu13",
            "libnccl.so.2",
            "__nv_relfatbin",
            129,
            159,
        ),
    ];
    for (wheel, name, section, count, mb) in cases {
        let Some(lib) = library(wheel, name) else {
            return;
        };
        let (code, report) = probe_json(&[lib.to_str().unwrap(), "--device", "sm_90"]);
        assert_eq!(code, 0, "{wheel}/{name}: {report}");
        let sections = per_section(&report);
        let row = sections
            .iter()
            .find(|(n, _, _)| n == section)
            .unwrap_or_else(|| panic!("{wheel}/{name}: no {section}: {sections:?}"));
        assert_eq!(row.1, count, "{wheel}/{name} {section}");
        assert_eq!(
            (row.2 + 500_000) / 1_000_000,
            mb,
            "{wheel}/{name} {section} MB"
        );
        // cuobjdump does not look there; extracted to a file, each container
        // is one it reads, and it lists what the probe lists.
        let found = containers_in(&report, section);
        let (_dir, fatbins) = extracted(&lib, &found, found.len() / 12);
        for (at, fatbin) in fatbins {
            let ours = listed_at(&report, at);
            let theirs = cuobjdump_listed(&cuda, &fatbin);
            assert_eq!(ours, theirs, "{wheel}/{name} container at {at:#x}");
        }
    }
}

#[test]
fn verdicts_follow_the_rule_of_the_runtime_that_loads_the_code() {
    // Per-architecture modules: a library with some modules for sm_90 runs there.
    let cases = [
        (
            "nvidia-cublas-cu12",
            "libcublasLt.so.12",
            0,
            "partly",
            "cuda",
        ),
        ("nvidia-cublas-cu12", "libcublas.so.12", 0, "partly", "cuda"),
        ("nvidia-nccl-cu12", "libnccl.so.2", 0, "partly", "cuda"),
        ("nvidia-cufft-cu12", "libcufft.so.11", 0, "partly", "data"),
        // sm_70 and sm_80 cubins only: no kernel of it can run on sm_90.
        ("faiss-gpu-cu12", "libfaiss-6b43fd57.so", 1, "fails", "cuda"),
    ];
    for (wheel, name, exit, want, rule) in cases {
        let Some(lib) = library(wheel, name) else {
            return;
        };
        let (code, report) = probe_json(&[lib.to_str().unwrap(), "--device", "sm_90"]);
        assert_eq!(code, exit, "{wheel}/{name}");
        assert_eq!(
            verdict(&report),
            (want.into(), rule.into()),
            "{wheel}/{name}"
        );
    }
    // HIP: a registered bundle without code for the GPU stops the program.
    if let Some(rocsparse) = rocsparse() {
        let (code, report) = probe_json(&[rocsparse.to_str().unwrap(), "--device", "gfx1100"]);
        assert_eq!(code, 1);
        assert_eq!(verdict(&report), ("fails".into(), "hip".into()));
    }
}

/// Disk blocks of `file` (`st_blocks`, 512 bytes each).
fn blocks(file: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(file).unwrap().blocks()
}

/// `cuobjdump -xelf all -xptx all` of `fatbin`: file name → bytes.
fn cuobjdump_files(cuda: &Cuda, fatbin: &Path) -> Vec<(String, Vec<u8>)> {
    let dir = temp_dir();
    for flag in ["-xelf", "-xptx"] {
        let out = Command::new(&cuda.cuobjdump)
            .current_dir(&*dir)
            .args([flag, "all"])
            .arg(fatbin)
            .output()
            .unwrap();
        let _ = out;
    }
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&*dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    files.sort();
    files
}

#[test]
fn slimmed_for_sm_90_they_shrink_and_keep_their_images_byte_for_byte() {
    let Some(cuda) = cuda() else { return };
    let cases = [
        ("nvidia-cufft-cu12", "libcufft.so.11", ".ldata"),
        ("nvidia-cublas-cu12", "libcublasLt.so.12", ".cask_resource"),
        ("nvidia-nccl-cu12", "libnccl.so.2", "__nv_relfatbin"),
        ("nvidia-cufft", "libcufft.so.12", ".data"),
        ("nvidia-cublas", "libcublasLt.so.13", ".cask_resource"),
        ("nvidia-nccl-cu13", "libnccl.so.2", "__nv_relfatbin"),
    ];
    for (wheel, name, section) in cases {
        let Some(lib) = library(wheel, name) else {
            return;
        };
        let dir = temp_dir();
        let out = Command::new(built("offload-probe").unwrap())
            .args(["slim", "--device", "sm_90", "--output"])
            .arg(&*dir)
            .arg(&lib)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.code().unwrap_or(2) < 2, "{wheel}/{name}: {text}");
        let result = dir.join(name);
        assert!(result.is_file(), "{wheel}/{name}: nothing written: {text}");
        assert!(
            blocks(&result) < blocks(&lib),
            "{wheel}/{name}: {} blocks, was {}",
            blocks(&result),
            blocks(&lib)
        );
        assert_eq!(
            dlopen(&result).is_none(),
            dlopen(&lib).is_none(),
            "{wheel}/{name}"
        );
        assert_eq!(
            dynamic_symbols(&result),
            dynamic_symbols(&lib),
            "{wheel}/{name}"
        );
        // Each container of the section, in the result, holds exactly the
        // images sm_90 selected from the original, byte for byte as
        // cuobjdump extracts them.
        let (_, before) = probe_json(&[lib.to_str().unwrap(), "--device", "sm_90"]);
        let (_, after) = probe_json(&[result.to_str().unwrap(), "--device", "sm_90"]);
        let (old, new) = (
            containers_in(&before, section),
            containers_in(&after, section),
        );
        assert!(
            !new.is_empty(),
            "{wheel}/{name}: no {section} container left"
        );
        let chosen = |report: &serde_json::Value, at: u64| -> Option<String> {
            let c = report["objects"][0]["containers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["offset"] == at)?;
            let i = c["selected"][0]["image"].as_u64()?;
            c["images"][i as usize]["target_id"]
                .as_str()
                .map(String::from)
        };
        let (_old_dir, old_files) = extracted(&lib, &old, old.len() / 6);
        for (at, original) in old_files {
            let Some(target) = chosen(&before, at) else {
                continue;
            };
            // Rewritten where it stands (among host data) or moved with its
            // section: found by its chosen image at the same rank.
            let rank = old.iter().position(|c| c.0 == at).unwrap();
            let (new_at, _) = *new
                .get(rank)
                .unwrap_or_else(|| panic!("{wheel}/{name}: container {rank} is gone"));
            assert_eq!(
                chosen(&after, new_at),
                Some(target.clone()),
                "{wheel}/{name}"
            );
            let (_slim_dir, slim) = extracted(&result, &new[rank..=rank], 1);
            let keep = |files: Vec<(String, Vec<u8>)>| -> Vec<Vec<u8>> {
                let arch = target.trim_start_matches("sm_");
                files
                    .into_iter()
                    .filter(|(n, _)| n.contains(&format!("sm_{arch}.")))
                    .map(|(_, b)| b)
                    .collect()
            };
            let (a, b) = (
                keep(cuobjdump_files(&cuda, &original)),
                keep(cuobjdump_files(&cuda, &slim[0].1)),
            );
            assert!(
                !a.is_empty(),
                "{wheel}/{name}: cuobjdump extracts nothing at {at:#x}"
            );
            assert_eq!(a, b, "{wheel}/{name}: the kept image at {at:#x} changed");
        }
    }
}
