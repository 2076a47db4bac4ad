//! offload-probe run as a program: against the real rocSPARSE fat binary and
//! `roc-obj-ls`, and on malformed files.

#[path = "../../tests/support/mod.rs"]
mod support;

use std::process::{Command, Output};

fn probe(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_offload-probe"))
        .args(args)
        .env_remove("OFFLOAD_LOADER_DEVICES")
        .output()
        .expect("offload-probe runs")
}

/// The device rows a device name stands for: each setting of the features
/// it leaves unstated.
fn settings(device: &str) -> Vec<String> {
    offload_loader::DeviceTarget::parse(device)
        .unwrap()
        .settings()
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "bad JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn lists_rocsparse_exactly_as_roc_obj_ls() {
    let Some(lib) = support::rocsparse() else {
        return;
    };
    let Some(reference) = support::roc_obj_ls(&lib) else {
        return;
    };
    // roc-obj-ls prints "<n> <bundle id> <uri>" per code object.
    let expected: Vec<(String, String)> = reference
        .unwrap()
        .into_iter()
        .map(|e| (e.id, e.uri))
        .collect();
    assert_eq!(expected.len(), 888);

    let out = probe(&[
        "--json",
        "--device",
        "gfx90a:sramecc+:xnack-",
        lib.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json(&out);
    let containers = report["objects"][0]["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 111);
    let ours: Vec<(String, String)> = containers
        .iter()
        .flat_map(|c| c["images"].as_array().unwrap())
        .map(|i| {
            (
                i["bundle_id"].as_str().unwrap().to_string(),
                i["uri"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(ours, expected);
    // Every bundle chooses its gfx90a:xnack- image for this device.
    for c in containers {
        let chosen = c["selected"][0]["image"].as_u64().unwrap() as usize;
        assert_eq!(
            c["images"][chosen]["bundle_id"],
            "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-"
        );
        assert_eq!(c["selected"][0]["rejected"].as_array().unwrap().len(), 7);
    }
}

#[test]
fn exit_status_says_whether_every_device_has_an_image() {
    let Some(lib) = support::rocsparse() else {
        return;
    };
    let lib = lib.to_str().unwrap();
    assert_eq!(probe(&["--device", "gfx1030", lib]).status.code(), Some(0));
    // A bare gfx90a (an MI250X as people name it) is each of its settings,
    // and each loads the code object of its xnack setting.
    for name in ["gfx90a", "MI250X"] {
        let out = probe(&["--json", "--device", name, lib]);
        assert_eq!(out.status.code(), Some(0), "{name}");
        let report = json(&out);
        let rows = report["devices"].as_array().unwrap();
        assert_eq!(rows.len(), 4);
        for (d, row) in rows.iter().enumerate() {
            assert_eq!(row["setting_of"], name);
            let xnack =
                &row["target_id"].as_str().unwrap()[row["target_id"].as_str().unwrap().len() - 7..];
            for c in report["objects"][0]["containers"].as_array().unwrap() {
                let chosen = c["selected"][d]["image"].as_u64().unwrap() as usize;
                let id = c["images"][chosen]["bundle_id"].as_str().unwrap();
                assert!(id.ends_with(xnack), "{name} {d}: {id}");
            }
        }
    }
    let out = probe(&["--device", "gfx1030", "--device", "gfx1100", lib]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("device [1] gfx1100: no compatible image in 111/111"),
        "{text}"
    );
    assert!(
        text.contains("it is built for gfx1030, the device is gfx1100"),
        "{text}"
    );
    // A device of the other vendor is not missing anything here.
    assert_eq!(
        probe(&["--device", "gfx1030", "--device", "sm_90", lib])
            .status
            .code(),
        Some(0)
    );
    // Usage errors.
    assert_eq!(probe(&["--device", "gfx9999", lib]).status.code(), Some(2));
    assert_eq!(probe(&["--device", "sm_9x", lib]).status.code(), Some(2));
    // What users type for an NVIDIA device: its arch, its a spelling, its capability.
    for device in ["sm_90a", "9.0"] {
        assert_eq!(
            probe(&["--device", "gfx1030", "--device", device, lib])
                .status
                .code(),
            Some(0),
            "{device}"
        );
    }
}

#[test]
fn malformed_files_exit_2_with_the_offset_and_no_panic() {
    let dir = support::temp_dir();
    let mut bundle = b"__CLANG_OFFLOAD_BUNDLE__".to_vec();
    bundle.extend((1u64 << 48).to_le_bytes());
    let cases: [(&str, Vec<u8>, &str); 4] = [
        (
            "count.bundle",
            bundle,
            "at offset 0x18: bundle entry count of 281474976710656 exceeds the limit of 0",
        ),
        (
            "short.ccob",
            b"CCOB\x03\x00\x01\x00".to_vec(),
            "at offset 0x8: total size is truncated",
        ),
        ("empty", vec![], "not an ELF file"),
        ("junk", b"\x7fELF\x02\x01\x01junk".to_vec(), "at offset 0x0"),
    ];
    for (name, bytes, message) in cases {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        let out = probe(&["--device", "gfx90a", "--json", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{name}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(message), "{name}: {text}");
        assert!(
            text.contains(name),
            "{name}: the message names the file: {text}"
        );
        assert!(
            out.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let missing = probe(&["--device", "gfx90a", "/nonexistent/lib.so"]);
    assert_eq!(missing.status.code(), Some(2));
}

#[test]
fn extracts_the_selected_images_byte_for_byte() {
    let Some(lib) = support::rocsparse() else {
        return;
    };
    let dir = support::temp_dir();
    let out = probe(&[
        "--device",
        "gfx1030",
        "--json",
        "--extract",
        dir.to_str().unwrap(),
        lib.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let report = json(&out);
    let data = std::fs::read(&lib).unwrap();
    let containers = report["objects"][0]["containers"].as_array().unwrap();
    let written = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(written, containers.len());
    // Named as `llvm-objdump --offloading` names bundle entries: the file,
    // the bundle's number in it (all 111 are in `.hip_fatbin`), the entry ID.
    for (n, c) in containers.iter().enumerate() {
        let i = c["selected"][0]["image"].as_u64().unwrap() as usize;
        let image = &c["images"][i];
        let (offset, size) = (
            image["offset"].as_u64().unwrap() as usize,
            image["size"].as_u64().unwrap() as usize,
        );
        let name = format!(
            "librocsparse.so.0.1.{n}.{}",
            image["bundle_id"].as_str().unwrap()
        );
        let bytes = std::fs::read(dir.join(&name)).unwrap();
        assert_eq!(bytes, &data[offset..offset + size], "{name}");
        assert_eq!(&bytes[..4], b"\x7fELF");
    }
}

/// libomptarget weighs every image of a program's descriptor together: in
/// the file, the offload binaries of `.llvm.offloading` are one scope, so a
/// device served by any of them has an image (exit 0).
#[test]
fn openmp_programs_select_across_their_offload_binaries() {
    let Some(tc) = support::toolchain() else {
        return;
    };
    let exe = tc.build(
        support::OpenMp::new(&["gfx90a:xnack-", "gfx90a:xnack+", "gfx1030"])
            .output(support::Output::Executable),
    );
    let exe = exe.to_str().unwrap();
    let devices = ["--device", "gfx90a:sramecc+:xnack+", "--device", "gfx1030"];
    let out = probe(&[&[exe, "--json"][..], &devices].concat());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json(&out);
    let scopes: Vec<&serde_json::Value> = report["objects"][0]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["section"] == ".llvm.offloading")
        .collect();
    assert_eq!(scopes.len(), 1, "one scope for the section: {scopes:?}");
    let scope = scopes[0];
    assert_eq!(scope["containers"], 3, "{scope}");
    let targets: Vec<&str> = scope["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["target_id"].as_str().unwrap())
        .collect();
    let chosen = |d: usize| targets[scope["selected"][d]["image"].as_u64().unwrap() as usize];
    assert_eq!((chosen(0), chosen(1)), ("gfx90a:xnack+", "gfx1030"));
    // Every image has a file offset inside the file and a reason when not chosen.
    assert_eq!(
        scope["selected"][0]["rejected"].as_array().unwrap().len(),
        2
    );
    // The human report says the same.
    let text = probe(&[&[exe][..], &devices].concat());
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("device [0] gfx90a:sramecc+:xnack+ loads"),
        "{text}"
    );
    assert!(!text.contains("no compatible image"), "{text}");
}

/// A whole installation in one command: a tree holding Debian's rocSPARSE
/// (through a link), a clang-22 HIP shared library, a raw code object, a
/// text bundle, a plain file, a dangling link, a link back up the tree and
/// a named pipe. Every file with GPU code is listed, nothing hangs or loops,
/// and coverage names the files without an image per device.
#[test]
fn directories_are_walked_with_coverage_per_device() {
    let (Some(tc), Some(rocsparse)) = (support::toolchain(), support::rocsparse()) else {
        return;
    };
    let lib = tc.build(support::Hip::new(&["gfx90a:xnack-", "gfx1100"]).shared_library());
    let co = tc.build(support::CodeObject::new("gfx1100"));
    let root = support::scratch("walk");
    let _ = std::fs::remove_dir_all(&root);
    let tree = root.join("venv/lib/site-packages");
    std::fs::create_dir_all(tree.join("rocm/lib")).unwrap();
    std::fs::create_dir_all(tree.join("pkg/kernels")).unwrap();
    std::os::unix::fs::symlink(&rocsparse, tree.join("rocm/lib/librocsparse.so.0")).unwrap();
    std::os::unix::fs::symlink("librocsparse.so.0", tree.join("rocm/lib/librocsparse.so")).unwrap();
    std::fs::copy(&lib, tree.join("pkg/libkernels.so")).unwrap();
    std::fs::copy(&co, tree.join("pkg/kernels/gfx1100.co")).unwrap();
    let text = "\n# __CLANG_OFFLOAD_BUNDLE____START__ hip-amdgcn-amd-amdhsa--gfx1100\n\t.text\n\n# __CLANG_OFFLOAD_BUNDLE____END__ hip-amdgcn-amd-amdhsa--gfx1100\n";
    std::fs::write(tree.join("pkg/kernels/k.s"), text).unwrap();
    std::fs::write(tree.join("pkg/__init__.py"), "").unwrap();
    std::os::unix::fs::symlink("missing.so", tree.join("pkg/dangling.so")).unwrap();
    std::os::unix::fs::symlink("../..", tree.join("pkg/kernels/loop")).unwrap();
    let fifo = std::ffi::CString::new(tree.join("pkg/pipe").to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path and a mode.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);

    let dir = root.join("venv");
    let args = ["--device", "gfx90a:sramecc+:xnack-", "--device", "gfx1100"];
    let out = probe(&[&[dir.to_str().unwrap(), "--json"][..], &args].concat());
    // gfx1100 has no image in rocSPARSE, and the text bundle holds no
    // loadable code: exit 1, not 2 (nothing unreadable) and no hang.
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json(&out);
    let paths: Vec<String> = report["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let p = o["path"].as_str().unwrap();
            p.strip_prefix(dir.to_str().unwrap()).unwrap().to_string()
        })
        .collect();
    assert_eq!(
        paths,
        [
            "/lib/site-packages/pkg/kernels/gfx1100.co",
            "/lib/site-packages/pkg/kernels/k.s",
            "/lib/site-packages/pkg/libkernels.so",
            // One of the two names of the one file, the first in order.
            "/lib/site-packages/rocm/lib/librocsparse.so",
        ]
    );
    let coverage = &report["coverage"];
    assert_eq!(coverage[0]["device"], 0);
    assert_eq!(coverage[0]["objects_with_image"], 2, "{coverage}");
    let names = |d: usize, key: &str| -> Vec<String> {
        coverage[d][key]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap().rsplit('/').next().unwrap().to_string())
            .collect()
    };
    // Files of GPU code on their own, for other GPUs, are not failures (a
    // library opens the one for its GPU); rocSPARSE's bundles are registered
    // with HIP, which stops a program on a GPU they have no code for.
    assert_eq!(names(0, "objects_without_image"), Vec::<String>::new());
    assert_eq!(names(0, "objects_for_other_gpus"), ["gfx1100.co", "k.s"]);
    assert_eq!(names(1, "objects_without_image"), ["librocsparse.so"]);
    assert_eq!(names(1, "objects_for_other_gpus"), ["k.s"]);
    let verdict = |file: &str, d: usize| -> (String, String) {
        let o = report["objects"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["path"].as_str().unwrap().ends_with(file))
            .unwrap();
        let v = o["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["device"] == d)
            .unwrap();
        (
            v["verdict"].as_str().unwrap().into(),
            v["rule"].as_str().unwrap().into(),
        )
    };
    assert_eq!(
        verdict("librocsparse.so", 1),
        ("fails".into(), "hip".into())
    );
    assert_eq!(
        verdict("gfx1100.co", 0),
        ("for-other-gpus".into(), "file".into())
    );
    assert_eq!(verdict("libkernels.so", 1), ("loads".into(), "hip".into()));
    // The human report ends with the same coverage.
    let text = probe(&[&[dir.to_str().unwrap()][..], &args].concat());
    let text = String::from_utf8_lossy(&text.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("  gfx1100: "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.starts_with("  gfx1100: 1 of 4 files with AMD GPU code cannot run there: ")
            && line.contains("librocsparse.so (1 for other GPUs: these devices do not load them)"),
        "{line}"
    );
    // A pipe named on the command line is refused, not opened.
    let out = probe(&[tree.join("pkg/pipe").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stdout).contains("is a named pipe, not a regular file"));
}

/// A ROCm 7 install from PyPI (`cupy-rocm-7-0`, uncompressed bundles with
/// gfx950 and gfx1201) unpacked as a virtual environment holds it, with
/// NVIDIA's cuRAND (CUDA 13 wheel) beside it, a link to a library, a link
/// loop, a named pipe and a file the probe cannot read. The probe, run as an
/// unprivileged user, lists exactly the files that have a `.hip_fatbin` or
/// `.nv_fatbin` (GNU readelf), each AMD one as `roc-obj-ls` lists it,
/// reports the unreadable file and goes on; coverage covers both vendors.
#[test]
fn a_pypi_rocm_installation() {
    let Some(venv) = support::unpacked_wheel("cupy_rocm_7_0-14.2.0-", "cupy-rocm-7-0==14.2.0")
    else {
        return;
    };
    let Some(curand) = support::nvidia_library("libcurand.so.10") else {
        return;
    };
    let site = venv.join("lib/python3/site-packages");
    let extra = venv.join("extra");
    let _ = std::fs::remove_dir_all(&extra);
    std::fs::create_dir_all(&extra).unwrap();
    let cub = site.join("cupy/cuda/cub.cpython-311-x86_64-linux-gnu.so");
    std::os::unix::fs::symlink(&cub, extra.join("libcub.so")).unwrap();
    std::fs::create_dir_all(extra.join("nvidia/curand/lib")).unwrap();
    std::fs::copy(&curand, extra.join("nvidia/curand/lib/libcurand.so.10")).unwrap();
    std::os::unix::fs::symlink("..", extra.join("loop")).unwrap();
    let fifo = std::ffi::CString::new(extra.join("pipe").to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path and a mode.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let unreadable = extra.join("unreadable.so");
    std::fs::copy(&cub, &unreadable).unwrap();
    std::fs::set_permissions(
        &unreadable,
        std::os::unix::fs::PermissionsExt::from_mode(0o000),
    )
    .unwrap();

    // As root every file is readable: run the probe as nobody, as a user would.
    let probe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_offload-probe"));
    // The checkout may lie where other users cannot reach (under /root): the
    // unprivileged run gets a copy of the probe in the temporary directory,
    // as the tree is.
    let copy = std::env::temp_dir().join(format!("offload-probe-{}", std::process::id()));
    // SAFETY: geteuid has no preconditions.
    let mut cmd = if unsafe { libc::geteuid() } == 0 {
        std::fs::copy(&probe, &copy).unwrap();
        std::fs::set_permissions(&copy, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&copy);
        c
    } else {
        Command::new(&probe)
    };
    cmd.arg(&venv)
        .args([
            "--json", "--device", "gfx950", "--device", "gfx1201", "--device", "sm_80",
        ])
        .env_remove("OFFLOAD_LOADER_DEVICES");
    // The copy was just written: a child another test thread forks in that
    // moment holds it open for writing until it execs, and executing the
    // copy then fails with ETXTBSY ("Text file busy"). Tried again then.
    let mut out = cmd.output().unwrap();
    for _ in 0..20 {
        if !String::from_utf8_lossy(&out.stderr).contains("Text file busy") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        out = cmd.output().unwrap();
    }
    let _ = std::fs::remove_file(&copy);
    // The unreadable file is an input error (exit 2); the rest is reported.
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json(&out);
    let objects = report["objects"].as_array().unwrap();
    let failed: Vec<&serde_json::Value> =
        objects.iter().filter(|o| o["error"].is_string()).collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed[0]["error"]
        .as_str()
        .unwrap()
        .contains("unreadable.so: Permission denied"));

    // The files with GPU code are those GNU readelf shows a .hip_fatbin in,
    // each once (the link to cub's library is one of its names).
    let mut ours: Vec<String> = objects
        .iter()
        .filter(|o| o["error"].is_null())
        .map(|o| {
            let path = std::fs::canonicalize(o["path"].as_str().unwrap()).unwrap();
            path.display().to_string()
        })
        .collect();
    ours.sort();
    let mut theirs = Vec::new();
    let mut stack = vec![venv.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            // Not following links: the files themselves, each once.
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file()
                && path.to_str().unwrap().contains(".so")
                && !path.ends_with("unreadable.so")
            {
                let sections = Command::new("readelf")
                    .arg("-SW")
                    .arg(&path)
                    .output()
                    .unwrap();
                let text = String::from_utf8_lossy(&sections.stdout);
                if text.contains(".hip_fatbin") || text.contains(".nv_fatbin") {
                    theirs.push(std::fs::canonicalize(&path).unwrap().display().to_string());
                }
            }
        }
    }
    theirs.sort();
    assert!(!theirs.is_empty());
    assert_eq!(ours, theirs);

    // Each AMD one listed exactly as roc-obj-ls lists it.
    for object in objects
        .iter()
        .filter(|o| o["error"].is_null() && !o["path"].as_str().unwrap().contains("curand"))
    {
        let path = std::path::Path::new(object["path"].as_str().unwrap());
        let Some(reference) = support::roc_obj_ls(path) else {
            return;
        };
        let theirs: Vec<(String, String)> = reference
            .unwrap()
            .into_iter()
            .map(|e| (e.id, e.uri))
            .collect();
        let ours: Vec<(String, String)> = object["containers"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|c| c["images"].as_array().unwrap())
            .map(|i| {
                (
                    i["bundle_id"].as_str().unwrap().into(),
                    i["uri"].as_str().unwrap().into(),
                )
            })
            .collect();
        assert_eq!(ours, theirs, "{}", path.display());
    }
    // Coverage: gfx950 (each of its four xnack/sramecc settings) and
    // gfx1201 are served by every AMD file, sm_80 by cuRAND, each counted
    // among the files of its own vendor.
    let rows = report["devices"].as_array().unwrap();
    let targets: Vec<&str> = rows
        .iter()
        .map(|d| d["target_id"].as_str().unwrap())
        .collect();
    assert_eq!(targets.len(), 6, "{targets:?}");
    assert!(targets[..4].iter().all(|t| t.starts_with("gfx950:")));
    assert_eq!(&targets[4..], ["gfx1201", "sm_80"]);
    for d in 0..rows.len() {
        assert_eq!(
            report["coverage"][d]["objects_without_image"],
            serde_json::json!([])
        );
        assert_eq!(report["coverage"][d]["fails"], false);
    }
    assert_eq!(report["coverage"][5]["objects_with_image"], 1);
    for d in 0..5 {
        assert_eq!(report["coverage"][d]["objects_with_image"], ours.len() - 1);
    }
}

/// The probe's JSON and `--extract --all` on an nvcc 13.5 object with `a`, `f`,
/// stored, zstd PTX and PTX-only entries: what `cuobjdump` 13.4 dumps and
/// extracts, entry for entry and file for file.
#[test]
fn lists_and_extracts_nvcc_output_like_cuobjdump() {
    let Some(cuda) = support::cuda() else { return };
    let obj = cuda.nvcc(
        &[
            "-gencode",
            "arch=compute_80,code=sm_80",
            "-gencode",
            "arch=compute_90a,code=[sm_90a,compute_90a]",
            "-gencode",
            "arch=compute_100f,code=sm_100f",
            "-gencode",
            "arch=compute_75,code=compute_75",
        ],
        support::NvOutput::Object,
    );
    let dir = support::temp_dir();
    let path = obj.to_str().unwrap();
    let out = probe(&[
        "--json",
        "--device",
        "sm_103",
        "--extract",
        dir.to_str().unwrap(),
        "--all",
        path,
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let report = json(&out);
    let images = report["objects"][0]["containers"][0]["images"]
        .as_array()
        .unwrap();
    let ours: Vec<(String, String, bool)> = images
        .iter()
        .map(|i| {
            let kind = match i["code"].as_str().unwrap() {
                "cubin" => "elf",
                "ptx" => "ptx",
                other => panic!("{other}"),
            };
            (
                kind.to_string(),
                i["target_id"].as_str().unwrap().to_string(),
                i.get("compression").is_some(),
            )
        })
        .collect();
    let theirs: Vec<(String, String, bool)> = cuda
        .cuobjdump_entries(&obj)
        .into_iter()
        .map(|e| (e.kind, e.arch.unwrap(), e.compressed))
        .collect();
    assert_eq!(ours, theirs);
    // The sm_103 device gets the family cubin.
    let selected = &report["objects"][0]["containers"][0]["selected"][0];
    assert_eq!(
        images[selected["image"].as_u64().unwrap() as usize]["target_id"],
        "sm_100f"
    );
    // Extraction: the files cuobjdump writes, by name, byte for byte (PTX
    // without the NUL the fat binary keeps), and no others.
    let theirs = cuda.cuobjdump_extract_files(&obj).files;
    assert_eq!(support::files_in(&dir), theirs);
    // What users type for an NVIDIA device.
    for device in ["sm_90a", "9.0", "sm_90"] {
        let out = probe(&["--json", "--device", device, path]);
        let report = json(&out);
        let chosen = report["objects"][0]["containers"][0]["selected"][0]["image"].as_u64();
        assert_eq!(
            images[chosen.unwrap() as usize]["target_id"],
            "sm_90a",
            "{device}"
        );
    }
}

/// One spelling of a device: `--device` and `OFFLOAD_LOADER_DEVICES` (which
/// the runtime library reads through the same detection) accept the same
/// names and mean the same device by them, and refuse the same code names.
#[test]
fn device_spellings_mean_the_same_on_the_command_line_and_in_the_environment() {
    let devices = |out: &Output| -> Vec<String> {
        json(out)["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["target_id"].as_str().unwrap().to_string())
            .collect()
    };
    for (spelling, device) in [
        ("sm_90", "sm_90"),
        ("sm_90a", "sm_90"),
        ("sm_100f", "sm_100"),
        ("9.0", "sm_90"),
        ("12.1", "sm_121"),
        ("sm90", "sm_90"),
        ("SM_90", "sm_90"),
        ("90", "sm_90"),
        ("H100", "sm_90"),
        ("NVIDIA H100 80GB HBM3", "sm_90"),
        ("A100", "sm_80"),
        ("RTX 4090", "sm_89"),
        ("GeForce RTX 4090", "sm_89"),
        ("Jetson Orin", "sm_87"),
        ("gfx90a:xnack-", "gfx90a:xnack-"),
        ("gfx90a:sramecc+:xnack-", "gfx90a:sramecc+:xnack-"),
        ("gfx1100", "gfx1100"),
        ("Name: gfx90a", "gfx90a"),
        ("MI300X", "gfx942"),
        ("Marketing Name: AMD Instinct MI250X", "gfx90a"),
        ("MI100", "gfx908"),
        ("Radeon VII", "gfx906"),
        ("RX 7900 XTX", "gfx1100"),
        ("RX 6800 XT", "gfx1030"),
    ] {
        let flag = probe(&["--json", "--device", spelling]);
        let env = Command::new(env!("CARGO_BIN_EXE_offload-probe"))
            .arg("--json")
            .env("OFFLOAD_LOADER_DEVICES", spelling)
            .output()
            .unwrap();
        // A device whose features are unstated is each setting it may run in.
        let expected = settings(device);
        assert_eq!(devices(&flag), expected, "--device {spelling}");
        assert_eq!(devices(&env), expected, "OFFLOAD_LOADER_DEVICES={spelling}");
    }
    for spelling in [
        "compute_80",
        "gfx11-generic",
        "gfx1100:xnack+",
        "sm_9",
        "9.10",
        "gfx9999",
        "H10",
        "H100/A100",
    ] {
        let flag = probe(&["--device", spelling]);
        assert_eq!(flag.status.code(), Some(2), "--device {spelling}");
        let env = Command::new(env!("CARGO_BIN_EXE_offload-probe"))
            .arg("--json")
            .env("OFFLOAD_LOADER_DEVICES", spelling)
            .output()
            .unwrap();
        assert!(
            devices(&env).is_empty(),
            "OFFLOAD_LOADER_DEVICES={spelling}"
        );
        // The same reason both ways.
        let why = String::from_utf8_lossy(&flag.stderr).into_owned();
        let report = json(&env);
        let reason = report["backends"][0]["reason"].as_str().unwrap();
        let detail = reason.split_once(": ").unwrap().1;
        let detail = detail.split_once(": ").unwrap().1;
        assert!(why.contains(detail), "{spelling}: {why} / {reason}");
    }
}

/// Every product name of both tables, all at once, as `--device` and as
/// `OFFLOAD_LOADER_DEVICES`: each is the device of its architecture, shown
/// by that architecture's canonical name.
#[test]
fn every_product_name_is_a_device_on_the_command_line_and_in_the_environment() {
    use offload_loader::target::Product;
    let products: Vec<&Product> = Product::amd().iter().chain(Product::nvidia()).collect();
    let targets = |out: &Output| -> Vec<String> {
        json(out)["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["target_id"].as_str().unwrap().to_string())
            .collect()
    };
    let expected: Vec<String> = products.iter().flat_map(|p| settings(p.target)).collect();
    let mut args = vec!["--json"];
    for product in &products {
        args.extend(["--device", product.name]);
    }
    assert_eq!(targets(&probe(&args)), expected);
    let list: Vec<&str> = products.iter().map(|p| p.name).collect();
    let env = Command::new(env!("CARGO_BIN_EXE_offload-probe"))
        .arg("--json")
        .env("OFFLOAD_LOADER_DEVICES", list.join(","))
        .output()
        .unwrap();
    assert_eq!(targets(&env), expected);
}

/// A name that is not understood is said so neutrally, with the nearest
/// names; nothing NVIDIA-like is called an AMD processor.
#[test]
fn unknown_device_names_are_answered_with_the_nearest_ones() {
    let out = probe(&["--device", "RTX 4900"]);
    assert_eq!(out.status.code(), Some(2));
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(
        why.contains("`RTX 4900` is not a device name known here"),
        "{why}"
    );
    assert!(why.contains("GeForce RTX 4090 (sm_89)"), "{why}");
    for name in ["sm90x", "H1000", "compute_9x", "RTX 40900"] {
        let out = probe(&["--device", name]);
        assert_eq!(out.status.code(), Some(2), "{name}");
        let why = String::from_utf8_lossy(&out.stderr);
        assert!(!why.contains("unknown AMDGPU processor"), "{name}: {why}");
    }
    let why = probe(&["--device", "gfx9999"]).stderr;
    assert!(String::from_utf8_lossy(&why).contains("unknown AMDGPU processor `gfx9999`"));
}
