//! `offload-probe --extract DIR`: files named and shaped as the vendors'
//! tools write them (`cuobjdump`, `llvm-objdump --offloading`,
//! `roc-obj-extract`), compared with what those tools write for the same
//! files; and a run that writes nothing says why.

#[path = "../../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

/// `offload-probe ARGS` with detection finding no device (no override, no
/// driver library, no KFD), whatever this machine has.
fn probe(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_offload-probe"))
        .args(args)
        .env_remove("OFFLOAD_LOADER_DEVICES")
        .env(
            "OFFLOAD_LOADER_HSA_LIBRARY",
            "/nonexistent/libhsa-runtime64.so.1",
        )
        .env("OFFLOAD_LOADER_CUDA_LIBRARY", "/nonexistent/libcuda.so.1")
        .env("OFFLOAD_LOADER_KFD_ROOT", "/nonexistent")
        .output()
        .expect("offload-probe runs")
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

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `offload-probe --json --extract DIR --all FILE` into a fresh DIR, which
/// must succeed: the DIR and the report.
fn extract_all(file: &Path) -> (support::TempPath, serde_json::Value) {
    let dir = support::temp_dir();
    let args = ["--json", "--extract", dir.to_str().unwrap(), "--all"];
    let out = probe(&[&args[..], &[file.to_str().unwrap()]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    (dir, json(&out))
}

/// Every image of cuRAND (CUDA 13): the 186 entries of its `.nv_fatbin` are
/// the files `cuobjdump -xelf all -xptx all` writes, name for name and byte
/// for byte; the 1,747 fat binaries among its `.data`, which cuobjdump does
/// not read, are named as cuobjdump names their entries once cut out to
/// `<file>-offset<N>-size<M>.fatbin`, and hold what it extracts from that.
#[test]
fn an_nvidia_library_extracts_as_cuobjdump_writes_it() {
    let Some(cuda) = support::cuda() else { return };
    let Some(lib) = support::nvidia_library("libcurand.so.10") else {
        return;
    };
    let dir = support::temp_dir();
    let out = probe(&[
        "--device",
        "sm_80",
        "--extract",
        dir.to_str().unwrap(),
        "--all",
        lib.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(out.stderr.is_empty(), "{}", stderr(&out));
    let ours = support::files_in(&dir);
    let theirs = cuda.cuobjdump_extract_files(&lib);
    assert_eq!(theirs.files.len(), 186);
    for (name, bytes) in &theirs.files {
        let mine = ours
            .get(name)
            .unwrap_or_else(|| panic!("{name} not written"));
        assert!(
            mine == bytes,
            "{name}: {} vs {} bytes",
            mine.len(),
            bytes.len()
        );
    }
    // The rest, by fat binary: `libcurand.so.10-offset<N>-size<M>`.
    let mut cut: BTreeMap<(u64, u64), Vec<&str>> = BTreeMap::new();
    for name in ours.keys().filter(|n| !theirs.files.contains_key(*n)) {
        let range = name
            .strip_prefix("libcurand.so.10-offset")
            .and_then(|r| r.split_once('.'))
            .and_then(|(r, _)| r.split_once("-size"))
            .unwrap_or_else(|| panic!("{name}: not named by a range"));
        let range = (range.0.parse().unwrap(), range.1.parse().unwrap());
        cut.entry(range).or_default().push(name);
    }
    assert_eq!(cut.len(), 1747);
    let data = std::fs::read(&lib).unwrap();
    let scratch = support::temp_dir();
    let picks = [cut.iter().next().unwrap(), cut.iter().next_back().unwrap()];
    for (&(offset, size), names) in picks {
        let stem = format!("libcurand.so.10-offset{offset}-size{size}");
        let fatbin = scratch.join(format!("{stem}.fatbin"));
        std::fs::write(&fatbin, &data[offset as usize..(offset + size) as usize]).unwrap();
        let theirs = cuda.cuobjdump_extract_files(&fatbin);
        assert_eq!(names.len(), theirs.listed.len(), "{stem}");
        // cuobjdump names an entry with an identifier (cuRAND's `lto`) by
        // it; the probe numbers it, as cuobjdump does the others. A name
        // cuobjdump writes twice holds the last.
        let mut seen = Vec::new();
        for (kind, n, name) in theirs.listed.iter().rev() {
            if seen.contains(&name) {
                continue;
            }
            seen.push(name);
            let mut parts = name.rsplitn(3, '.');
            let (ext, arch) = (parts.next().unwrap(), parts.next().unwrap());
            let mine = format!("{stem}.{n}.{arch}.{ext}");
            if name.starts_with(&stem) {
                assert_eq!(name, &mine);
            }
            let bytes = ours.get(&mine).unwrap_or_else(|| panic!("{mine} ({kind})"));
            assert!(bytes == &theirs.files[name], "{mine} differs from {name}");
        }
    }
}

/// Clang offload bundles, plain and compressed, two to a `.hip_fatbin`:
/// named as `llvm-objdump --offloading` (LLVM 22) names what it extracts;
/// a compressed bundle's entries are its code objects, as
/// `clang-offload-bundler -unbundle` writes them (LLVM 22's llvm-objdump
/// writes the compressed bytes there).
#[test]
fn bundles_extract_as_llvm_objdump_names_them() {
    let Some(tc) = support::toolchain() else {
        return;
    };
    for compress in [false, true] {
        let mut recipe = support::Hip::new(&["gfx90a:xnack-", "gfx1030"])
            .two_sources()
            .shared_library();
        if compress {
            recipe = recipe.compress();
        }
        let lib = tc.build(recipe);
        let file = lib.file_name().unwrap().to_str().unwrap();
        let (dir, report) = extract_all(&lib);
        let containers = report["objects"][0]["containers"].as_array().unwrap();
        assert_eq!(containers.len(), 2);
        let data = std::fs::read(&lib).unwrap();
        let objdump = tc.objdump_offloading(&lib).unwrap();
        let mut expected = BTreeMap::new();
        for e in objdump
            .entries
            .iter()
            .filter(|e| !e.id.starts_with("host-"))
        {
            let bytes = if compress {
                let c = &containers[e.bundle];
                let at = c["offset"].as_u64().unwrap() as usize;
                let bundle = &data[at..at + c["size"].as_u64().unwrap() as usize];
                tc.unbundle(&support::temp_file(bundle), &e.id).unwrap()
            } else {
                e.bytes.clone()
            };
            expected.insert(format!("{file}.{}.{}", e.bundle, e.id), bytes);
        }
        assert_eq!(expected.len(), 4);
        let ours = support::files_in(&dir);
        assert_eq!(
            ours.keys().collect::<Vec<_>>(),
            expected.keys().collect::<Vec<_>>(),
            "compressed: {compress}"
        );
        assert!(ours == expected, "compressed: {compress}");
    }
}

/// Images no tool extracts under a name of its own (here the offload
/// binaries of an OpenMP object) are named as `roc-obj-extract` names the
/// code-object URI the report gives them, and are what it writes.
#[test]
fn other_images_extract_as_roc_obj_extract_names_their_uri() {
    let Some(tc) = support::toolchain() else {
        return;
    };
    let Some(roc_obj_extract) = support::system_tool("roc-obj-extract", "hipcc") else {
        return;
    };
    let obj = tc.build(support::OpenMp::new(&["gfx90a", "gfx1030"]));
    let (dir, report) = extract_all(&obj);
    let theirs = support::temp_dir();
    let mut uris = 0;
    for c in report["objects"][0]["containers"].as_array().unwrap() {
        for image in c["images"].as_array().unwrap() {
            support::run_ok(
                Command::new(&roc_obj_extract)
                    .arg("-o")
                    .arg(&*theirs)
                    .arg(image["uri"].as_str().unwrap()),
            );
            uris += 1;
        }
    }
    assert_eq!(uris, 2);
    assert_eq!(support::files_in(&dir), support::files_in(&theirs));
}

/// `--extract DIR` that writes nothing says why on stderr, and the exit
/// status is the report's.
#[test]
fn extracting_nothing_says_why() {
    let files = support::temp_dir();
    let ptx = files.join("k.ptx");
    std::fs::write(
        &ptx,
        ".version 8.0\n.target sm_80\n.address_size 64\n\n.visible .entry k()\n{\n\tret;\n}\n",
    )
    .unwrap();
    let ptx = ptx.to_str().unwrap();
    let dir = files.join("out");
    let out_dir = dir.to_str().unwrap();
    // The exit status is the report's, as without --extract (and --all).
    let run = |args: &[&str]| {
        let out = probe(&[&["--extract", out_dir][..], args].concat());
        let plain: Vec<&str> = args.iter().copied().filter(|a| *a != "--all").collect();
        assert_eq!(out.status.code(), probe(&plain).status.code(), "{args:?}");
        (out.status.code(), stderr(&out))
    };
    // No GPU here, none named: nothing is selected.
    let (code, text) = run(&[ptx]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("nothing written")
            && text.contains("no GPU was detected here and no --device was given")
            && text.contains("--device")
            && text.contains("--all"),
        "{text}"
    );
    // Devices with no image here, each named as given.
    let (_, text) = run(&["--device", "gfx90a", "--device", "sm_70", ptx]);
    assert!(
        text.contains("no image is selected for gfx90a, sm_70") && text.contains("--all"),
        "{text}"
    );
    // A file without GPU code.
    let (code, text) = run(&[env!("CARGO_BIN_EXE_offload-probe")]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("no GPU image was found"), "{text}");
    assert!(!Path::new(out_dir).exists() || support::files_in(&dir).is_empty());
    // With --all the PTX file is written, as text without a NUL, and nothing
    // more is said.
    let (code, text) = run(&["--all", ptx]);
    assert_eq!((code, text.as_str()), (Some(0), ""));
    let written = support::files_in(&dir);
    assert_eq!(written.keys().collect::<Vec<_>>(), ["k.sm_80.ptx"]);
    assert_eq!(written["k.sm_80.ptx"], std::fs::read(ptx).unwrap());
}
