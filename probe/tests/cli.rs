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
    for c in containers {
        let i = c["selected"][0]["image"].as_u64().unwrap() as usize;
        let image = &c["images"][i];
        let (offset, size) = (
            image["offset"].as_u64().unwrap() as usize,
            image["size"].as_u64().unwrap() as usize,
        );
        let name = format!(
            "librocsparse.so.0.1-{:#x}-{i}-{}.co",
            c["offset"].as_u64().unwrap(),
            image["bundle_id"].as_str().unwrap()
        );
        let bytes = std::fs::read(dir.join(&name)).unwrap();
        assert_eq!(bytes, &data[offset..offset + size], "{name}");
        assert_eq!(&bytes[..4], b"\x7fELF");
    }
}

/// The probe's JSON and `--extract --all` on an nvcc 13.5 object with `a`, `f`,
/// stored, zstd PTX and PTX-only entries: what `cuobjdump` 13.4 dumps and
/// extracts, entry for entry (PTX written with the NUL the driver needs).
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
    // Extraction: the probe's files in image order against cuobjdump's by number.
    let mut written: Vec<_> = std::fs::read_dir(&*dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    written.sort_by_key(|p| {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        name.split('-').nth(2).unwrap().parse::<usize>().unwrap()
    });
    let extracted = cuda.cuobjdump_extract(&obj, "all");
    for (kind, ext) in [("elf", "cubin"), ("ptx", "ptx")] {
        let mine: Vec<Vec<u8>> = written
            .iter()
            .zip(&ours)
            .filter(|(_, o)| o.0 == kind)
            .map(|(p, _)| std::fs::read(p).unwrap())
            .collect();
        let theirs: Vec<&Vec<u8>> = extracted
            .iter()
            .filter(|e| e.2 == ext)
            .map(|e| &e.3)
            .collect();
        assert_eq!(mine.len(), theirs.len());
        for (m, t) in mine.iter().zip(theirs) {
            let m = if kind == "ptx" {
                &m[..m.len() - 1]
            } else {
                &m[..]
            };
            assert!(m == &t[..], "{ext}: {} vs {} bytes", m.len(), t.len());
        }
    }
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
