//! The writers against the reference tools: a bundle with entries removed is
//! byte for byte what `clang-offload-bundler` writes for the entries kept; a
//! `CCOB` has the bundler's header fields, hash and inflated bytes; an
//! NVIDIA fat binary with entries removed lists and extracts in `cuobjdump`
//! as the kept entries of the original; and writing what was read, with
//! nothing removed, gives back the same bytes on real artefacts (every
//! bundle of rocSPARSE, the fat binaries of nvcc builds and cuSPARSE).

mod support;

use std::path::{Path, PathBuf};

use offload_loader::bundle::{self, Bundle as ReadBundle};
use offload_loader::compressed::{self, CompressedBundle, Method};
use offload_loader::nv_fatbin::{self, NvFatbin};
use offload_loader::{Limits, MappedFile};
use support::*;

const HOST: &str = "host-x86_64-unknown-linux-gnu";
const DEVICES: [(&str, &str); 3] = [
    ("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+", "gfx90a:xnack+"),
    ("hipv4-amdgcn-amd-amdhsa--gfx906", "gfx906"),
    ("hipv4-amdgcn-amd-amdhsa--gfx1100", "gfx1100"),
];

/// Every subset of the three device entries, as a keep-mask.
fn subsets() -> impl Iterator<Item = [bool; 3]> {
    (0u8..8).map(|m| [m & 1 != 0, m & 2 != 0, m & 4 != 0])
}

/// The bundler's bundle of the host entry and the devices `keep` says yes
/// to, in `DEVICES` order.
fn reference(objects: &[std::path::PathBuf], keep: [bool; 3]) -> Bundle {
    let mut recipe = Bundle::new().host();
    for (i, (id, _)) in DEVICES.iter().enumerate() {
        if keep[i] {
            recipe = recipe.entry(id, &objects[i]);
        }
    }
    recipe
}

#[test]
fn bundles_with_entries_removed_are_what_the_bundler_writes() {
    let Some(tc) = toolchain() else { return };
    let objects: Vec<_> = DEVICES
        .iter()
        .map(|(_, arch)| tc.build(CodeObject::new(arch)))
        .collect();
    for align in [1u64, 8, 4096] {
        let full = std::fs::read(tc.build(reference(&objects, [true; 3]).align(align))).unwrap();
        let read = ReadBundle::parse(&full, &Limits::default()).unwrap();
        assert_eq!(
            bundle::write::alignment(&read).map(|a| a >= align),
            Some(true)
        );
        for keep in subsets() {
            // Entry 0 is the host entry, kept always.
            let ours = bundle::write::keep(&read, |i| i == 0 || keep[i - 1]).unwrap();
            let theirs = std::fs::read(tc.build(reference(&objects, keep).align(align))).unwrap();
            assert!(
                ours == theirs,
                "align {align}, keep {keep:?}: the bytes differ"
            );
        }
    }
}

#[test]
fn compressed_bundles_have_the_bundlers_fields_and_contents() {
    let Some(tc) = toolchain() else { return };
    let objects: Vec<_> = DEVICES
        .iter()
        .map(|(_, arch)| tc.build(CodeObject::new(arch)))
        .collect();
    for version in [2u16, 3] {
        let compressed = |keep| {
            std::fs::read(
                tc.build(
                    reference(&objects, keep)
                        .align(4096)
                        .compress_version(version.into()),
                ),
            )
            .unwrap()
        };
        let full = compressed([true; 3]);
        let ccob = CompressedBundle::parse(&full).unwrap();
        let inflated = ccob.decompress(&Limits::default()).unwrap();
        let read = ReadBundle::parse(&inflated, &Limits::default()).unwrap();
        for keep in subsets() {
            let kept = bundle::write::keep(&read, |i| i == 0 || keep[i - 1]).unwrap();
            let ours = compressed::write::compress(&kept, version, ccob.method, None).unwrap();
            let theirs_bytes = compressed(keep);
            let (o, t) = (
                CompressedBundle::parse(&ours).unwrap(),
                CompressedBundle::parse(&theirs_bytes).unwrap(),
            );
            assert_eq!(
                (
                    o.version,
                    o.method,
                    o.uncompressed_size,
                    o.hash,
                    o.header_len
                ),
                (
                    t.version,
                    t.method,
                    t.uncompressed_size,
                    t.hash,
                    t.header_len
                ),
                "version {version}, keep {keep:?}"
            );
            assert_eq!(
                o.decompress(&Limits::default()).unwrap(),
                t.decompress(&Limits::default()).unwrap()
            );
            // The bundler reads ours.
            let file = temp_file(&ours);
            let mut listed = tc.bundler_list(&file).unwrap();
            listed.sort();
            let mut want: Vec<String> = std::iter::once(format!("{HOST}-"))
                .chain(
                    DEVICES
                        .iter()
                        .zip(keep)
                        .filter(|(_, k)| *k)
                        .map(|((id, _), _)| id.to_string()),
                )
                .collect();
            want.sort();
            assert_eq!(listed, want);
        }
    }
    // zlib, through our reader and the bundler's.
    let kept = std::fs::read(tc.build(reference(&objects, [true, false, true]))).unwrap();
    let zlib = compressed::write::compress(&kept, 3, Method::Zlib, None).unwrap();
    let file = temp_file(&zlib);
    assert_eq!(
        tc.unbundle(&file, DEVICES[2].0).unwrap(),
        std::fs::read(&objects[2]).unwrap()
    );
}

/// Every bundle in rocSPARSE's 1.3 GB `.hip_fatbin` written again with
/// nothing removed: the same bytes, at the bundler's alignment (4096).
#[test]
fn every_rocsparse_bundle_writes_back_the_same_bytes() {
    let Some(lib) = rocsparse() else { return };
    let file = MappedFile::open(&lib).unwrap();
    let limits = Limits::default();
    let mut bundles = 0;
    for section in file.containers(&limits).unwrap() {
        for container in section.containers.iter().flatten() {
            let at = container.offset() as usize;
            let bytes = &file.bytes()[at..at + container.len() as usize];
            let read = ReadBundle::parse(bytes, &limits).unwrap();
            assert_eq!(bundle::write::alignment(&read), Some(4096));
            assert!(bundle::write::keep(&read, |_| true).unwrap() == bytes);
            bundles += 1;
        }
    }
    assert_eq!(bundles, 111);
}

/// `cuobjdump`'s listing and extraction of a fat binary written with some
/// entries removed: exactly the kept entries of the original, byte for byte.
fn check_fatbin(cuda: &Cuda, original: &Path) {
    let data = std::fs::read(original).unwrap();
    let fatbin = NvFatbin::parse(&data, &Limits::default()).unwrap();
    let limits = Limits::default();
    assert!(
        nv_fatbin::write::keep(&fatbin, |_| true, &limits).unwrap()
            == data[..fatbin.len() as usize]
    );
    // Every entry and group member that is code, and every group.
    let droppable: Vec<usize> = (0..fatbin.entries().len()).collect();
    let listed = cuda.cuobjdump_list(original);
    let extracted = cuda.cuobjdump_extract(original, "all");
    assert_eq!(listed.len(), extracted.len());
    for &drop in &droppable {
        let entries = fatbin.entries();
        let out = nv_fatbin::write::keep(
            &fatbin,
            |i| i != drop && entries[i].group != Some(drop),
            &limits,
        )
        .unwrap();
        let file = temp_file(&out);
        let fewer = cuda.cuobjdump_extract(&file, "all");
        // Every kept code object is one of the original's, byte for byte,
        // and one fewer group or entry is gone.
        let kinds = |v: &[(u32, String, String, Vec<u8>)]| -> Vec<(String, String, Vec<u8>)> {
            let mut k: Vec<_> = v
                .iter()
                .map(|(_, a, k, b)| (a.clone(), k.clone(), b.clone()))
                .collect();
            k.sort();
            k
        };
        let (all, kept) = (kinds(&extracted), kinds(&fewer));
        assert!(
            kept.len() < all.len(),
            "dropping entry {drop} removed nothing"
        );
        for k in &kept {
            assert!(all.contains(k), "{} {} is not the original's", k.0, k.1);
        }
        let members = fatbin
            .entries()
            .iter()
            .filter(|e| e.group == Some(drop))
            .count()
            .max(1);
        assert_eq!(all.len() - kept.len(), members, "dropping entry {drop}");
    }
    // Each code entry alone (a group member: its group rebuilt with it
    // alone): cuobjdump extracts exactly it.
    let code: Vec<usize> = (0..fatbin.entries().len())
        .filter(|&i| fatbin.entries()[i].kind != nv_fatbin::kind::CONCAT)
        .collect();
    assert_eq!(code.len(), extracted.len());
    for &only in &code {
        let out = nv_fatbin::write::keep(&fatbin, |i| i == only, &limits).unwrap();
        let alone = cuda.cuobjdump_extract(&temp_file(&out), "all");
        assert_eq!(alone.len(), 1, "keeping entry {only} alone");
        let (_, arch, kind, bytes) = &alone[0];
        // The reader's PTX carries the NUL the driver needs; cuobjdump's not.
        let code = fatbin.code(only, &limits).unwrap();
        let code = match kind.as_str() {
            "ptx" => code.strip_suffix(b"\0").unwrap_or(&code).to_vec(),
            _ => code.to_vec(),
        };
        assert!(
            *bytes == code,
            "entry {only} ({arch} {kind}) is not the original's"
        );
    }
}

#[test]
fn fat_binaries_with_entries_removed_list_in_cuobjdump_as_the_kept_entries() {
    let Some(cuda) = cuda() else { return };
    let multi = [
        "-gencode",
        "arch=compute_80,code=sm_80",
        "-gencode",
        "arch=compute_90a,code=[sm_90a,compute_90a]",
        "-gencode",
        "arch=compute_100a,code=sm_100a",
        "-gencode",
        "arch=compute_75,code=compute_75",
    ];
    check_fatbin(&cuda, &cuda.nvcc(&multi, NvOutput::Fatbin));
    // --concat groups and LZ4 entries.
    let mut concat = multi.to_vec();
    concat.extend(["--concat", "--compress-mode=speed"]);
    let grouped = cuda.nvcc(&concat, NvOutput::Fatbin);
    assert!(cuda.cuobjdump_entries(&grouped).iter().any(|l| l.member));
    check_fatbin(&cuda, &grouped);
}

#[test]
fn cusparse_fat_binaries_write_back_the_same_bytes() {
    let Some(lib) = nvidia_library("libcusparse.so.12") else {
        return;
    };
    let file = MappedFile::open(&lib).unwrap();
    let limits = Limits::default();
    let mut fatbins = 0;
    for section in file.containers(&limits).unwrap() {
        for container in section.containers.iter().flatten() {
            let Some(fatbin) = container.nv_fatbin() else {
                continue;
            };
            let at = container.offset() as usize;
            let bytes = &file.bytes()[at..at + container.len() as usize];
            assert!(nv_fatbin::write::keep(fatbin, |_| true, &limits).unwrap() == bytes);
            fatbins += 1;
        }
    }
    assert!(fatbins > 0);
}

/// Offload binaries that `llvm-offload-binary` (LLVM 22) and
/// `clang-offload-packager` (LLVM 19) wrote, for images
/// of several kinds with several strings each (its string table laid out by
/// LLVM's StringTableBuilder), and those in a clang-22 OpenMP program:
/// written again with nothing removed, the same bytes.
#[test]
fn offload_binaries_write_back_as_llvm_wrote_them() {
    use offload_loader::offload_binary::{self, OffloadBinary};
    let Some(tc) = toolchain() else { return };
    let co = tc.build(CodeObject::new("gfx90a:xnack+"));
    let co2 = tc.build(CodeObject::new("gfx1100"));
    let package = tc.build(
        Package::new()
            .image(
                &co,
                "o",
                &[
                    ("triple", "amdgcn-amd-amdhsa"),
                    ("arch", "gfx90a:xnack+"),
                    ("kind", "openmp"),
                    ("feature", "+xnack"),
                ],
            )
            .image(
                &co2,
                "bin",
                &[
                    ("triple", "amdgcn-amd-amdhsa"),
                    ("arch", "gfx1100"),
                    ("kind", "hip"),
                    ("producer", "clang"),
                ],
            )
            .image(
                &co,
                "o",
                &[
                    ("triple", "amdgcn-amd-amdhsa"),
                    ("arch", "gfx90a"),
                    ("kind", "sycl"),
                ],
            ),
    );
    let mut inputs = vec![std::fs::read(&package).unwrap()];
    // LLVM 19's clang-offload-packager writes them too.
    if let Some(tc19) = toolchain_19() {
        let co19 = tc19.build(CodeObject::new("gfx906"));
        let package = tc19.build(
            Package::new()
                .image(
                    &co19,
                    "o",
                    &[
                        ("triple", "amdgcn-amd-amdhsa"),
                        ("arch", "gfx906"),
                        ("kind", "openmp"),
                    ],
                )
                .image(
                    &co19,
                    "o",
                    &[
                        ("triple", "amdgcn-amd-amdhsa"),
                        ("arch", "gfx906:xnack-"),
                        ("kind", "hip"),
                        ("feature", "-xnack"),
                    ],
                ),
        );
        inputs.push(std::fs::read(&package).unwrap());
    }
    if let Some(e) = loader() {
        let exe = e.build(LinkedProgram::openmp(
            &["gfx90a:xnack-", "gfx1100"],
            "examples/openmp_query.c",
        ));
        inputs.push(tc.section_bytes(&exe, ".llvm.offloading").unwrap());
    }
    let mut binaries = 0;
    for data in &inputs {
        let mut at = 0;
        while at < data.len() {
            let read = OffloadBinary::parse(&data[at..], &Limits::default()).unwrap();
            let len = read.len() as usize;
            assert!(
                offload_binary::write::keep(&read, |_| true)
                    .unwrap()
                    .unwrap()
                    == data[at..at + len]
            );
            binaries += 1;
            at = (at + len).next_multiple_of(8);
            while at < data.len() && data[at] == 0 {
                at += 1;
            }
        }
    }
    assert!(binaries >= 5, "{binaries}");
}

/// NVIDIA's `fatbinary` as the reference writer: a fat binary of four images
/// (sm_80, sm_90a and sm_100a cubins, compute_90 PTX), each subset of them
/// kept by our writer, is byte for byte what `fatbinary` writes for that
/// subset, stored and compressed (`-compress-all`).
#[test]
fn fat_binaries_with_entries_removed_are_what_fatbinary_writes() {
    let Some(cuda) = cuda() else { return };
    let fatbinary = cuda.bin.join("fatbinary");
    let dir = temp_dir();
    let images: Vec<(String, String, PathBuf)> = [
        ("elf", "80", "sm_80"),
        ("elf", "90a", "sm_90a"),
        ("elf", "100a", "sm_100a"),
        ("ptx", "90", "compute_90"),
    ]
    .iter()
    .map(|(kind, sm, arch)| {
        let output = if *kind == "elf" {
            NvOutput::Cubin
        } else {
            NvOutput::Ptx
        };
        let file = cuda.nvcc(&[&format!("-arch={arch}")], output);
        (kind.to_string(), sm.to_string(), file)
    })
    .collect();
    let create = |keep: &[bool], compress: bool, name: &str| -> Vec<u8> {
        let out = dir.join(name);
        let mut cmd = std::process::Command::new(&fatbinary);
        cmd.arg("-64").arg(format!("--create={}", out.display()));
        if compress {
            cmd.arg("-compress-all");
        }
        for ((kind, sm, file), k) in images.iter().zip(keep) {
            if *k {
                cmd.arg(format!(
                    "--image3=kind={kind},sm={sm},file={}",
                    file.display()
                ));
            }
        }
        run_ok(&mut cmd);
        std::fs::read(&out).unwrap()
    };
    for compress in [false, true] {
        let all = create(&[true; 4], compress, "all.fatbin");
        let read = NvFatbin::parse(&all, &Limits::default()).unwrap();
        assert_eq!(read.entries().len(), 4);
        for mask in 1u8..16 {
            let keep: Vec<bool> = (0..4).map(|i| mask & (1 << i) != 0).collect();
            let ours = nv_fatbin::write::keep(&read, |i| keep[i], &Limits::default()).unwrap();
            let theirs = create(&keep, compress, &format!("subset-{mask}.fatbin"));
            assert!(
                ours == theirs,
                "compress {compress}, keep {keep:?}: the bytes differ"
            );
        }
    }
}
