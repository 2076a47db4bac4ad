//! The loader's reading of real clang output, compared with the reference
//! tools: `clang-offload-bundler -list` / `-unbundle`, `llvm-objdump
//! --offloading`, `llvm-offload-binary`, `llvm-readobj` and `roc-obj-ls`.
//!
//! Every input is a cached recipe of `tests/support`. Next to the loader's
//! reading of each kind of artefact, the reference tools confirm that the
//! recipe made what it asked for (bundle IDs, CCOB headers, section
//! alignments, entry tables).

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use offload_loader_workspace::loader::compressed::Method;
use offload_loader_workspace::loader::container::{self, Container, Format};
use offload_loader_workspace::loader::discover::file::MappedFile;
use offload_loader_workspace::loader::select::{DeviceTarget, Policy};
use offload_loader_workspace::loader::{select, CodeKind, ImageSource, Limits};
use support::*;

const ARCHS: &[&str] = &[
    "gfx906:xnack-",
    "gfx90a:sramecc+:xnack-",
    "gfx90a:xnack+",
    "gfx942",
    "gfx1100",
    "gfx11-generic",
];

const OPENMP_ARCHS: &[&str] = &["gfx90a:xnack+", "gfx1100"];

/// The `.hip_fatbin` of the object `recipe` makes, as a scratch file (for
/// the bundler) and as bytes.
fn hip_fatbin(tc: &Toolchain, recipe: Hip) -> (TempPath, Vec<u8>) {
    let obj = tc.build(recipe);
    let (_, bytes) = tc.hip_fatbin(&obj);
    (temp_file(&bytes), bytes)
}

const HOST_22: &str = "host-x86_64-unknown-linux-gnu-";
const BUNDLE_MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";
const OFFLOAD_MAGIC: &[u8] = &[0x10, 0xff, 0x10, 0xad];
const ELF_MAGIC: &[u8] = b"\x7fELF";
const SHT_LLVM_OFFLOADING: u32 = 0x6fff_4c0b;

fn set<I: IntoIterator<Item = S>, S: Into<String>>(items: I) -> BTreeSet<String> {
    items.into_iter().map(Into::into).collect()
}

fn device_ids(kind: &str, archs: &[&str]) -> BTreeSet<String> {
    set(archs
        .iter()
        .map(|a| format!("{kind}-amdgcn-amd-amdhsa--{a}")))
}

fn with_host(mut ids: BTreeSet<String>, host: &str) -> BTreeSet<String> {
    ids.insert(host.into());
    ids
}

/// Lists and extracts every image of `file` and checks both against the bundler.
fn same_as_bundler<'a>(
    tc: &Toolchain,
    file: &Path,
    data: &'a [u8],
    format: Format,
) -> Container<'a> {
    let found = container::scan(data, &Limits::default());
    assert_eq!(found.len(), 1, "{found:?}");
    let c = found.into_iter().next().unwrap().unwrap();
    assert_eq!(c.format(), format);
    let ids: Vec<String> = c.images().iter().map(|i| i.id.clone()).collect();
    let mut reference = tc.bundler_list(file).unwrap();
    let mut ours = ids.clone();
    reference.sort();
    ours.sort();
    assert_eq!(ours, reference);
    for (i, image) in c.images().iter().enumerate() {
        if image.is_host() {
            continue;
        }
        let ours = c.image_bytes(i).unwrap();
        let theirs = tc.unbundle(file, &image.id).unwrap();
        assert!(
            ours.as_ref() == theirs.as_slice(),
            "{}: bytes differ",
            image.id
        );
    }
    c
}

/// The name `llvm-objdump --offloading` prints for a declared image kind
/// (OffloadBinary.cpp `getImageKindName`; an object is "elf").
fn objdump_kind(kind: Option<CodeKind>) -> &'static str {
    match kind {
        None => "none",
        Some(CodeKind::AmdgpuElf | CodeKind::OtherElf) => "elf",
        Some(CodeKind::Cubin) => "cubin",
        Some(CodeKind::Bitcode) => "llvm ir",
        Some(CodeKind::NvFatbin) => "fatbinary",
        Some(CodeKind::Ptx) => "ptx",
        Some(CodeKind::SpirV) => "spir-v",
        Some(_) => "unknown",
    }
}
#[test]
fn clang_22_bundle() {
    let Some(tc) = toolchain() else { return };
    let (file, data) = hip_fatbin(&tc, Hip::new(ARCHS));
    let c = same_as_bundler(&tc, &file, &data, Format::Bundle);
    assert_eq!(c.images().len(), ARCHS.len() + 1);
}

#[test]
fn hip_object_bundle_lists_the_requested_archs() {
    let Some(tc) = support::toolchain() else {
        return;
    };
    let obj = tc.build(Hip::new(ARCHS));
    let (section, bytes) = tc.hip_fatbin(&obj);
    assert_eq!(section.align, 4096);
    assert!(bytes.starts_with(BUNDLE_MAGIC));
    let file = support::temp_file(&bytes);
    let listed = tc.bundler_list(&file).unwrap();
    assert_eq!(set(listed), with_host(device_ids("hipv4", ARCHS), HOST_22));

    // llvm-objdump extracts the same entries as clang-offload-bundler.
    let dump = tc.objdump_offloading(&obj).unwrap();
    assert!(dump.images.is_empty());
    assert_eq!(dump.entries.len(), ARCHS.len() + 1);
    for entry in &dump.entries {
        assert_eq!(entry.bundle, 0);
        if entry.id == HOST_22 {
            assert!(entry.bytes.is_empty());
            continue;
        }
        assert!(entry.bytes.starts_with(ELF_MAGIC), "{}", entry.id);
        assert_eq!(tc.unbundle(&file, &entry.id).unwrap(), entry.bytes);
    }
    // HIP writes the host entry first, then the device entries sorted by
    // target ID, each at a 4096-byte boundary.
    assert_eq!(support::le64(&bytes, 24), ARCHS.len() as u64 + 1);
    assert_eq!(&bytes[56..56 + HOST_22.len()], HOST_22.as_bytes());
    assert_eq!(support::le64(&bytes, 32) % 4096, 0);
}

#[test]
fn target_ids_are_canonicalised() {
    let Some(tc) = support::toolchain() else {
        return;
    };
    let obj = tc.build(Hip::new(&[
        "gfx90a:xnack-:sramecc+",
        "gfx906:xnack+",
        "gfx942",
    ]));
    let file = support::temp_file(&tc.hip_fatbin(&obj).1);
    assert_eq!(
        set(tc.bundler_list(&file).unwrap()),
        with_host(
            device_ids(
                "hipv4",
                &["gfx90a:sramecc+:xnack-", "gfx906:xnack+", "gfx942"]
            ),
            HOST_22
        )
    );
}

#[test]
fn clang_22_compressed_bundle_v3_zstd() {
    let Some(tc) = toolchain() else { return };
    let (file, data) = hip_fatbin(&tc, Hip::new(ARCHS).compress());
    let c = same_as_bundler(&tc, &file, &data, Format::CompressedBundle);
    let h = c.compression().unwrap();
    assert_eq!((h.version, h.method), (3, Method::Zstd));
}

#[test]
fn clang_22_compressed_bundle_v2_on_request() {
    let Some(tc) = toolchain() else { return };
    let (file, data) = hip_fatbin(&tc, Hip::new(ARCHS).compress_version(2));
    let c = same_as_bundler(&tc, &file, &data, Format::CompressedBundle);
    assert_eq!(c.compression().unwrap().version, 2);
}

#[test]
fn hip_compressed_bundles_have_the_expected_ccob_header() {
    let Some(tc) = support::toolchain() else {
        return;
    };
    let plain = tc.build(Hip::new(ARCHS));
    let plain = support::temp_file(&tc.hip_fatbin(&plain).1);
    for (recipe, version) in [
        (Hip::new(ARCHS).compress(), 3u16),
        (Hip::new(ARCHS).compress_version(2), 2),
        (Hip::new(ARCHS).compress_version(3).compression_level(19), 3),
    ] {
        let obj = tc.build(recipe);
        let (section, bytes) = tc.hip_fatbin(&obj);
        assert_eq!(&bytes[..4], b"CCOB");
        assert_eq!(support::le16(&bytes, 4), version);
        assert_eq!(support::le16(&bytes, 6), 1, "zstd");
        let total = if version == 3 {
            support::le64(&bytes, 8)
        } else {
            u64::from(support::le32(&bytes, 8))
        };
        assert_eq!(total, section.size);
        let file = support::temp_file(&bytes);
        assert_eq!(
            set(tc.bundler_list(&file).unwrap()),
            with_host(device_ids("hipv4", ARCHS), HOST_22)
        );
        // Compression does not change the code objects.
        let id = "hipv4-amdgcn-amd-amdhsa--gfx906:xnack-";
        assert_eq!(
            tc.unbundle(&file, id).unwrap(),
            tc.unbundle(&plain, id).unwrap()
        );
    }
}

#[test]
fn clang_19_compressed_bundle_v2() {
    let (Some(tc19), Some(tc)) = (toolchain_19(), toolchain()) else {
        return;
    };
    // clang-19 writes code object v5 by default, which has no generic targets.
    let archs = &ARCHS[..5];
    let (file, data) = hip_fatbin(&tc19, Hip::new(archs).compress());
    let c = same_as_bundler(&tc, &file, &data, Format::CompressedBundle);
    assert_eq!(c.compression().unwrap().version, 2);
}

#[test]
fn clang_19_writes_ccob_v2_and_another_host_id() {
    let Some(tc19) = support::toolchain_19() else {
        return;
    };
    let Some(tc22) = support::toolchain() else {
        return;
    };
    // clang-19 accepts generic targets only with code object v6.
    let archs = &["gfx90a:xnack+", "gfx906", "gfx1100"];
    let host_19 = "host-x86_64-unknown-linux--";
    let plain = tc19.build(Hip::new(archs));
    let plain_file = support::temp_file(&tc19.hip_fatbin(&plain).1);
    let expected = with_host(device_ids("hipv4", archs), host_19);
    assert_eq!(set(tc19.bundler_list(&plain_file).unwrap()), expected);

    let obj = tc19.build(Hip::new(archs).compress_version(3));
    let (_, bytes) = tc19.hip_fatbin(&obj);
    assert_eq!(&bytes[..4], b"CCOB");
    assert_eq!(
        support::le16(&bytes, 4),
        2,
        "clang-19 ignores the version variable"
    );
    assert_eq!(support::le16(&bytes, 6), 1, "zstd");
    let file = support::temp_file(&bytes);
    assert_eq!(set(tc19.bundler_list(&file).unwrap()), expected);
    assert_eq!(set(tc22.bundler_list(&file).unwrap()), expected);

    // LLVM 19's new driver writes the legacy 32-byte entry tables.
    let exe = tc19.build(Hip::new(archs).new_driver().rdc().executable());
    assert!(tc19.section(&exe, "hip_offloading_entries").is_some());
    assert_eq!(tc19.hip_fatbin(&exe).0.align, 16);
    let obj = tc19.build(OpenMp::new(&["gfx90a"]));
    assert!(tc19.section(&obj, "omp_offloading_entries").is_some());
    assert!(tc19
        .section_bytes(&obj, ".llvm.offloading")
        .unwrap()
        .starts_with(OFFLOAD_MAGIC));

    let generic = tc19.build(Hip::new(&["gfx11-generic"]).arg("-mcode-object-version=6"));
    let generic = support::temp_file(&tc19.hip_fatbin(&generic).1);
    assert!(tc19
        .bundler_list(&generic)
        .unwrap()
        .contains(&"hipv4-amdgcn-amd-amdhsa--gfx11-generic".to_string()));
}

#[test]
fn code_object_headers_match_the_bundle_ids_and_llvm_readelf() {
    let Some(tc) = toolchain() else { return };
    let (_, data) = hip_fatbin(&tc, Hip::new(ARCHS));
    let c = Container::parse(&data, &Limits::default()).unwrap();
    for i in 0..c.images().len() {
        let image = &c.images()[i];
        let content = &c.read_content(i).unwrap();
        if image.is_host() {
            assert_eq!(content.code, CodeKind::Empty);
            continue;
        }
        assert_eq!(content.code, CodeKind::AmdgpuElf, "{}", image.id);
        // The header names exactly what the bundle ID claims (clang-22 writes
        // code object v6, which states every feature).
        assert_eq!(
            content.arch.as_ref().unwrap().to_string(),
            image.arch.to_string(),
            "{}",
            image.id
        );
        assert_eq!(
            content.generic_version.is_some(),
            image.id.ends_with("generic")
        );
    }
}

#[test]
fn selection_matrix_follows_the_target_id_rule() {
    let Some(tc) = toolchain() else { return };
    let (_, data) = hip_fatbin(&tc, Hip::new(ARCHS));
    let c = Container::parse(&data, &Limits::default()).unwrap();
    let chosen = |c: &Container<'_>, device: &str| {
        let s = select(&DeviceTarget::parse(device).unwrap(), c, &Policy::default());
        s.chosen.map(|i| c.images()[i].arch.to_string())
    };
    // clang's rule (clang/lib/Basic/TargetID.cpp isCompatibleTargetID): same
    // processor, and each feature the image states equals the device's; then
    // ranking among the compatible ones.
    let matrix: &[(&str, Option<&str>)] = &[
        ("gfx906:sramecc+:xnack-", Some("gfx906:xnack-")),
        ("gfx906:sramecc-:xnack+", None),
        ("gfx90a:sramecc+:xnack-", Some("gfx90a:sramecc+:xnack-")),
        ("gfx90a:sramecc-:xnack-", None),
        ("gfx90a:sramecc+:xnack+", Some("gfx90a:xnack+")),
        ("gfx90a:sramecc-:xnack+", Some("gfx90a:xnack+")),
        ("gfx942:sramecc+:xnack-", Some("gfx942")),
        ("gfx942:sramecc-:xnack+", Some("gfx942")),
        ("gfx950:sramecc+:xnack-", None),
        ("gfx1100", Some("gfx1100")),
        ("gfx1101", Some("gfx11-generic")),
        ("gfx1151", Some("gfx11-generic")),
        ("gfx1030", None),
        ("gfx1200", None),
    ];
    for (device, expected) in matrix {
        assert_eq!(chosen(&c, device).as_deref(), *expected, "device {device}");
    }
    // Every image not chosen has a reason.
    let s = select(
        &DeviceTarget::parse("gfx90a:sramecc+:xnack-").unwrap(),
        &c,
        &Policy::default(),
    );
    assert_eq!(s.rejected.len(), c.images().len() - 1);
}

#[test]
fn hip_shared_library_has_one_bundle_per_translation_unit() {
    let Some(tc) = support::toolchain() else {
        return;
    };
    let archs = &["gfx90a:xnack+", "gfx906"];
    let lib = tc.build(Hip::new(archs).two_sources().shared_library());
    let (section, _) = tc.hip_fatbin(&lib);
    let dump = tc.objdump_offloading(&lib).unwrap();
    let bundles: BTreeSet<usize> = dump.entries.iter().map(|e| e.bundle).collect();
    assert_eq!(bundles, BTreeSet::from([0, 1]));
    assert_eq!(dump.entries.len(), 6);

    let Some(listing) = support::roc_obj_ls(&lib) else {
        return;
    };
    let listing = listing.unwrap();
    assert_eq!(listing.len(), 6);
    for e in &listing {
        assert!(e.offset >= section.offset && e.offset + e.size <= section.offset + section.size);
        let extracted = dump
            .entries
            .iter()
            .find(|d| d.bundle + 1 == e.bundle && d.id == e.id)
            .unwrap_or_else(|| panic!("objdump has no {e:?}"));
        assert_eq!(support::read_range(&lib, e.offset, e.size), extracted.bytes);
    }
    // Each translation unit's bundle starts at a 4096-byte boundary.
    let second = listing.iter().find(|e| e.bundle == 2).unwrap();
    assert_eq!((second.offset - section.offset) % 4096, 0);

    // Compressed: one CCOB per translation unit, roc-obj-ls sees nothing.
    let lib = tc.build(Hip::new(archs).two_sources().shared_library().compress());
    let (_, bytes) = tc.hip_fatbin(&lib);
    assert_eq!(&bytes[..4], b"CCOB");
    assert_eq!(&bytes[4096..4100], b"CCOB");
    let dump = tc.objdump_offloading(&lib).unwrap();
    assert_eq!(dump.entries.len(), 6);
    assert!(support::roc_obj_ls(&lib).unwrap().unwrap().is_empty());
}

#[test]
fn hip_executables_old_driver() {
    let Some(tc) = support::toolchain() else {
        return;
    };
    let archs = &["gfx90a:xnack+", "gfx906"];
    let exe = tc.build(Hip::new(archs).executable());
    let (section, bytes) = tc.hip_fatbin(&exe);
    assert_eq!(section.align, 4096);
    assert!(tc.section(&exe, ".hipFatBinSegment").is_some());
    let file = support::temp_file(&bytes);
    assert_eq!(
        set(tc.bundler_list(&file).unwrap()),
        with_host(device_ids("hipv4", archs), HOST_22)
    );
    // The stubs make it a program that runs.
    assert!(std::process::Command::new(&exe).status().unwrap().success());

    // RDC: device code linked at link time, still a hipv4 bundle.
    let exe = tc.build(Hip::new(archs).rdc().executable());
    assert!(tc.section(&exe, ".hip_gpubin_handle").is_some());
    let file = support::temp_file(&tc.hip_fatbin(&exe).1);
    assert_eq!(
        set(tc.bundler_list(&file).unwrap()),
        with_host(device_ids("hipv4", archs), HOST_22)
    );
    let obj = tc.build(Hip::new(archs).rdc());
    assert!(tc.section(&obj, ".hip_fatbin").is_none());
    assert!(tc
        .section(
            &obj,
            "__CLANG_OFFLOAD_BUNDLE__hip-amdgcn-amd-amdhsa--gfx906"
        )
        .is_some());

    let exe = tc.build(Hip::new(archs).rdc().executable().compress());
    assert_eq!(&tc.hip_fatbin(&exe).1[..4], b"CCOB");
}

#[test]
fn hip_new_driver() {
    let Some(tc) = support::toolchain() else {
        return;
    };
    let archs = &["gfx90a:xnack+", "gfx906", "gfx11-generic"];
    // Without RDC the device code is linked at compile time: a `hip-` bundle.
    let obj = tc.build(Hip::new(archs).new_driver());
    let (section, bytes) = tc.hip_fatbin(&obj);
    assert_eq!(section.align, 4096);
    let file = support::temp_file(&bytes);
    assert_eq!(
        set(tc.bundler_list(&file).unwrap()),
        with_host(device_ids("hip", archs), HOST_22)
    );

    // With RDC the object carries bitcode in offload binaries.
    let obj = tc.build(Hip::new(archs).new_driver().rdc());
    assert!(tc.section(&obj, ".hip_fatbin").is_none());
    let s = tc.section(&obj, ".llvm.offloading").unwrap();
    assert_eq!(s.kind, SHT_LLVM_OFFLOADING);
    let bytes = tc.section_bytes(&obj, ".llvm.offloading").unwrap();
    assert!(bytes.starts_with(OFFLOAD_MAGIC));
    assert_eq!(support::le32(&bytes, 4), 1);
    let dump = tc.objdump_offloading(&obj).unwrap();
    assert!(dump.entries.is_empty());
    assert_eq!(
        set(dump.images.iter().map(|i| i.arch.clone())),
        set(archs.iter().copied())
    );
    for image in &dump.images {
        assert_eq!(
            (
                image.kind.as_str(),
                image.triple.as_str(),
                image.producer.as_str()
            ),
            ("llvm ir", "amdgcn-amd-amdhsa", "hip")
        );
    }
    assert!(tc.section(&obj, "llvm_offload_entries").is_some());

    // Linked: a `hip-` bundle in a 16-aligned .hip_fatbin, new entry table.
    let exe = tc.build(Hip::new(archs).new_driver().rdc().executable());
    let (section, bytes) = tc.hip_fatbin(&exe);
    assert_eq!(section.align, 16);
    let file = support::temp_file(&bytes);
    assert_eq!(
        set(tc.bundler_list(&file).unwrap()),
        with_host(device_ids("hip", archs), HOST_22)
    );
    assert!(tc.section(&exe, "llvm_offload_entries").is_some());
    let lib = tc.build(
        Hip::new(archs)
            .new_driver()
            .rdc()
            .shared_library()
            .compress(),
    );
    assert_eq!(&tc.hip_fatbin(&lib).1[..4], b"CCOB");
}

#[test]
fn openmp_objects_match_llvm_objdump() {
    let Some(tc) = toolchain() else { return };
    let obj = tc.build(OpenMp::new(OPENMP_ARCHS));
    // "kind llvm ir / arch gfx1100 / triple amdgcn-amd-amdhsa / producer openmp" per image.
    let reference: Vec<(String, String, String, String)> = tc
        .objdump_offloading(&obj)
        .unwrap()
        .images
        .into_iter()
        .map(|i| (i.kind, i.arch, i.triple, i.producer))
        .collect();
    let file = MappedFile::open(&obj).unwrap();
    let sections = file.containers(&Limits::default()).unwrap();
    let ours: Vec<(String, String, String, String)> = sections
        .iter()
        .flat_map(|s| &s.containers)
        .flat_map(|c| c.as_ref().unwrap().images().to_vec())
        .map(|i| {
            (
                objdump_kind(i.declared).to_string(),
                i.arch.to_string(),
                i.triple.to_string(),
                i.offload_kind.to_string(),
            )
        })
        .collect();
    assert_eq!(ours, reference);
    assert_eq!(ours.len(), 2);
}

#[test]
fn openmp_objects_archives_and_programs() {
    let Some(tc) = support::toolchain() else {
        return;
    };
    let archs = OPENMP_ARCHS;
    let check = |file: &Path, kind: &str| {
        let dump = tc.objdump_offloading(file).unwrap();
        assert_eq!(
            set(dump.images.iter().map(|i| i.arch.clone())),
            set(archs.iter().copied())
        );
        for image in &dump.images {
            assert_eq!(
                (
                    image.kind.as_str(),
                    image.triple.as_str(),
                    image.producer.as_str()
                ),
                (kind, "amdgcn-amd-amdhsa", "openmp")
            );
        }
        dump
    };
    let obj = tc.build(OpenMp::new(archs));
    let bytes = tc.section_bytes(&obj, ".llvm.offloading").unwrap();
    assert!(bytes.starts_with(OFFLOAD_MAGIC));
    check(&obj, "llvm ir");

    let archive = tc.build(OpenMp::new(archs).output(Output::Archive));
    // The quick look of a directory scan finds the member's .llvm.offloading.
    assert!(MappedFile::open_if_offload(&archive).unwrap().is_some());
    let dump = check(&archive, "llvm ir");
    assert!(
        dump.images[0].file.ends_with("(omp_kernels.o)"),
        "{:?}",
        dump.images[0]
    );

    let exe = tc.build(OpenMp::new(archs).output(Output::Executable));
    let s = tc.section(&exe, ".llvm.offloading").unwrap();
    assert_eq!(s.kind, SHT_LLVM_OFFLOADING);
    check(&exe, "elf");
    let image = tc
        .offload_binary_extract(&exe, &[("arch", "gfx1100")])
        .unwrap();
    assert!(image.starts_with(ELF_MAGIC));
    assert!(std::process::Command::new(&exe).status().unwrap().success());

    let obj = tc.build(OpenMp::new(&["gfx90a", "sm_80"]));
    let dump = tc.objdump_offloading(&obj).unwrap();
    let triples = set(dump
        .images
        .iter()
        .map(|i| format!("{} {} {}", i.triple, i.arch, i.kind)));
    assert_eq!(
        triples,
        set([
            "amdgcn-amd-amdhsa gfx90a llvm ir",
            "nvptx64-nvidia-cuda sm_80 llvm ir"
        ])
    );
}

#[test]
fn ptx_packaged_by_llvm_offload_binary() {
    let Some(tc) = toolchain() else { return };
    // No CUDA SDK here: state the PTX ISA version clang may use.
    let ptx = tc.build(Ptx::new("sm_80").isa("ptx78"));
    let obj = tc.build(CodeObject::new("gfx1100"));
    // As `.ptx`, which llvm-offload-binary does not take for PTX.
    let bin = tc.build(
        Package::new()
            .image(
                &ptx,
                "ptx",
                &[
                    ("triple", "nvptx64-nvidia-cuda"),
                    ("arch", "sm_80"),
                    ("kind", "cuda"),
                ],
            )
            .image(
                &obj,
                "o",
                &[
                    ("triple", "amdgcn-amd-amdhsa"),
                    ("arch", "gfx1100"),
                    ("kind", "hip"),
                ],
            ),
    );
    let data = std::fs::read(&bin).unwrap();
    let found: Vec<_> = container::scan(&data, &Limits::default())
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(found.len(), 2, "two offload binaries back to back");
    let ptx_image = &found[0].images()[0];
    // llvm-offload-binary records no image kind for a file it is just given:
    // the image's own text says it is PTX.
    assert_eq!(
        (ptx_image.declared, ptx_image.id.as_str()),
        (None, "cuda-nvptx64-nvidia-cuda--sm_80")
    );
    assert_eq!(
        found[0].image_bytes(0).unwrap().as_ref(),
        std::fs::read(&ptx).unwrap().as_slice()
    );
    assert_eq!(found[1].images()[0].id, "hip-amdgcn-amd-amdhsa--gfx1100");
    // PTX for sm_80 is JIT-compiled on sm_90 when the driver takes PTX 7.8.
    let c = container::scan(&data, &Limits::default())
        .into_iter()
        .next()
        .unwrap()
        .unwrap();
    let driver = |v| DeviceTarget::Nvidia {
        capability: offload_loader_workspace::loader::target::ComputeCapability::from_sm(90)
            .unwrap(),
        max_ptx: offload_loader_workspace::loader::target::nvptx::max_ptx_for_driver(v),
    };
    assert_eq!(
        select(&driver(12040), &c, &Policy::default()).chosen,
        Some(0)
    );
    assert_eq!(c.read_content(0).unwrap().code, CodeKind::Ptx);
    let old = select(&driver(11060), &c, &Policy::default());
    assert_eq!(old.chosen, None);
    assert_eq!(
        old.rejected[0].1.to_string(),
        "its PTX ISA 7.8 is newer than the driver can compile (up to 7.6)"
    );
}

#[test]
fn offload_binary_packages() {
    let Some(tc) = support::toolchain() else {
        return;
    };
    let ptx = tc.build(Ptx::new("sm_80"));
    let text = std::fs::read_to_string(&ptx).unwrap();
    assert!(text.contains(".target sm_80") && text.contains(".entry ptx_add"));
    let co = tc.build(CodeObject::new("gfx90a:xnack+"));
    assert!(std::fs::read(&co).unwrap().starts_with(ELF_MAGIC));
    let pkg = tc.build(
        Package::new()
            .image(
                &ptx,
                "s",
                &[
                    ("triple", "nvptx64-nvidia-cuda"),
                    ("arch", "sm_80"),
                    ("kind", "cuda"),
                ],
            )
            .image(
                &co,
                "o",
                &[
                    ("triple", "amdgcn-amd-amdhsa"),
                    ("arch", "gfx90a:xnack+"),
                    ("kind", "hip"),
                    ("feature", "+xnack"),
                ],
            ),
    );
    let bytes = std::fs::read(&pkg).unwrap();
    assert!(bytes.starts_with(OFFLOAD_MAGIC));
    assert_eq!(support::le32(&bytes, 4), 1);
    let dump = tc.objdump_offloading(&pkg).unwrap();
    let seen: Vec<_> = dump
        .images
        .iter()
        .map(|i| format!("{} {} {} {}", i.kind, i.arch, i.triple, i.producer))
        .collect();
    assert_eq!(
        seen,
        [
            "ptx sm_80 nvptx64-nvidia-cuda cuda",
            "elf gfx90a:xnack+ amdgcn-amd-amdhsa hip"
        ]
    );
    let extracted = tc
        .offload_binary_extract(&pkg, &[("arch", "sm_80")])
        .unwrap();
    assert_eq!(extracted, std::fs::read(&ptx).unwrap());
    let extracted = tc
        .offload_binary_extract(&pkg, &[("triple", "amdgcn-amd-amdhsa")])
        .unwrap();
    assert_eq!(extracted, std::fs::read(&co).unwrap());
}

#[test]
fn raw_bundles() {
    let Some(tc) = support::toolchain() else {
        return;
    };
    let a = tc.build(CodeObject::new("gfx90a:xnack+"));
    let b = tc.build(CodeObject::new("gfx906"));
    let id_a = "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+";
    let id_b = "hipv4-amdgcn-amd-amdhsa--gfx906";
    let two = || Bundle::new().host().entry(id_a, &a).entry(id_b, &b);
    let expected = set([HOST_22, id_a, id_b]);

    let plain = tc.build(two());
    let bytes = std::fs::read(&plain).unwrap();
    assert!(bytes.starts_with(BUNDLE_MAGIC));
    assert_eq!(support::le64(&bytes, 24), 3);
    assert_eq!(&bytes[56..56 + HOST_22.len()], HOST_22.as_bytes());
    assert_eq!(set(tc.bundler_list(&plain).unwrap()), expected);
    assert_eq!(
        tc.unbundle(&plain, id_a).unwrap(),
        std::fs::read(&a).unwrap()
    );

    let aligned = tc.build(two().align(4096));
    let bytes = std::fs::read(&aligned).unwrap();
    assert_eq!(support::le64(&bytes, 32) % 4096, 0);
    assert_eq!(
        tc.unbundle(&aligned, id_b).unwrap(),
        std::fs::read(&b).unwrap()
    );

    for (recipe, version) in [(two().compress(), 3u16), (two().compress_version(2), 2)] {
        let file = tc.build(recipe);
        let bytes = std::fs::read(&file).unwrap();
        assert_eq!(
            (&bytes[..4], support::le16(&bytes, 4)),
            (&b"CCOB"[..], version)
        );
        assert_eq!(set(tc.bundler_list(&file).unwrap()), expected);
    }

    let no_host = tc.build(Bundle::new().entry(id_a, &a).entry(id_b, &b));
    let bytes = std::fs::read(&no_host).unwrap();
    assert_eq!(support::le64(&bytes, 24), 2);
    assert_eq!(set(tc.bundler_list(&no_host).unwrap()), set([id_a, id_b]));

    // Other kinds and triples are written as given, NVPTX triples normalised.
    let mixed = tc.build(
        Bundle::new()
            .host()
            .entry("openmp-amdgcn-amd-amdhsa--gfx90a", &a)
            .entry("hip-nvptx64-nvidia-cuda--sm_80", &b),
    );
    assert_eq!(
        set(tc.bundler_list(&mixed).unwrap()),
        set([
            HOST_22,
            "openmp-amdgcn-amd-amdhsa--gfx90a",
            "hip-nvptx64-nvidia-cuda-unknown-sm_80"
        ])
    );

    let Some(tc19) = support::toolchain_19() else {
        return;
    };
    let file = tc19.build(two().compress());
    let bytes = std::fs::read(&file).unwrap();
    assert_eq!(support::le16(&bytes, 4), 2);
    assert_eq!(set(tc.bundler_list(&file).unwrap()), expected);
}

#[test]
fn relocatable_rdc_objects_and_archives() {
    let Some(tc) = toolchain() else { return };
    // -fgpu-rdc -c: one __CLANG_OFFLOAD_BUNDLE__<id> section per entry.
    let obj = tc.build(Hip::new(&["gfx90a:xnack-", "gfx1100"]).rdc());
    let file = MappedFile::open(&obj).unwrap();
    let found = file.containers(&Limits::default()).unwrap();
    let bundle = found
        .iter()
        .find_map(|s| {
            s.containers[0]
                .as_ref()
                .ok()
                .filter(|c| c.format() == Format::ObjectBundle)
        })
        .unwrap();
    let mut ours: Vec<String> = bundle.images().iter().map(|i| i.id.clone()).collect();
    let mut reference = tc.bundler_list(&obj).unwrap();
    ours.sort();
    reference.sort();
    assert_eq!(ours, reference);
    for (i, image) in bundle.images().iter().enumerate() {
        if !image.is_host() {
            let theirs = tc.unbundle(&obj, &image.id).unwrap();
            assert!(
                bundle.image_bytes(i).unwrap().as_ref() == theirs.as_slice(),
                "{}",
                image.id
            );
        }
    }
    // A static archive of it and of a plain object: every member is found,
    // despite archive members being only 2-byte aligned.
    let plain = tc.build(Hip::new(&["gfx906"]));
    let lib = tc.build(
        Archive::new()
            .member("rdc.o", &obj)
            .member("plain.o", &plain),
    );
    // The quick look of a directory scan finds them too.
    assert!(MappedFile::open_if_offload(&lib).unwrap().is_some());
    let file = MappedFile::open(&lib).unwrap();
    let members: Vec<(String, &'static str, usize)> = file
        .containers(&Limits::default())
        .unwrap()
        .iter()
        .map(|s| {
            let c = s.containers[0].as_ref().unwrap();
            (
                s.section.member.clone().unwrap(),
                c.format().name(),
                c.images().len(),
            )
        })
        .collect();
    assert_eq!(
        members,
        [
            ("plain.o".to_string(), "bundle", 2),
            ("rdc.o".to_string(), "object-bundle", 3)
        ]
    );
}

#[test]
fn rocsparse_listed_by_roc_obj_ls() {
    let Some(tc) = support::toolchain() else {
        return;
    };
    let Some(lib) = support::rocsparse() else {
        return;
    };
    let start = std::time::Instant::now();
    let Some(listing) = support::roc_obj_ls(&lib) else {
        return;
    };
    let listing = listing.unwrap();
    eprintln!("roc-obj-ls on librocsparse: {:?}", start.elapsed());
    let section = tc.section(&lib, ".hip_fatbin").unwrap();
    let bundles = listing.iter().map(|e| e.bundle).max().unwrap();
    assert!(bundles > 100, "{bundles} bundles");
    assert_eq!(
        listing.iter().filter(|e| e.id.starts_with("host-")).count(),
        bundles
    );
    assert!(listing
        .iter()
        .any(|e| e.id == "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-"));
    for e in &listing {
        assert!(e.offset >= section.offset && e.offset + e.size <= section.offset + section.size);
        if e.size > 0 {
            assert_eq!(support::read_range(&lib, e.offset, 4), ELF_MAGIC, "{e:?}");
        }
    }
}

#[test]
fn concurrent_builds_share_one_artefact() {
    let Some(tc) = support::toolchain() else {
        return;
    };
    let paths: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| tc.build(CodeObject::new("gfx1030"))))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(paths.windows(2).all(|w| w[0] == w[1]));
    assert!(std::fs::read(&paths[0]).unwrap().starts_with(ELF_MAGIC));
}

/// Text bundles as clang-22 writes them with `-S` (assembly, `#` comments),
/// `-S -emit-llvm` (LLVM IR, `;` comments) and `-E` (preprocessed source,
/// `//` comments, after a blank first line): the same IDs as
/// `clang-offload-bundler -list -type=s/ll/hipi` and, for every entry, the
/// bytes `-unbundle` writes.
#[test]
fn text_bundles_match_the_bundler() {
    let Some(tc) = toolchain() else { return };
    let dir = scratch("text-bundles");
    for (kind, mode) in [
        ("s", &["-S"][..]),
        ("ll", &["-S", "-emit-llvm"][..]),
        ("hipi", &["-E"][..]),
    ] {
        let out = dir.join(format!("kernels.{kind}"));
        run_ok(
            Command::new(&tc.clang)
                .args(["-x", "hip", "-nogpulib", "-nogpuinc"])
                .args(mode)
                .args(["--offload-arch=gfx90a:xnack-", "--offload-arch=gfx1100"])
                .arg(format!("-I{}", fixtures_dir().display()))
                .arg(fixture("kernels.hip"))
                .arg("-o")
                .arg(&out),
        );
        let data = std::fs::read(&out).unwrap();
        let c = Container::parse(&data, &Limits::default()).unwrap();
        assert_eq!(c.format(), Format::TextBundle);
        let ours: Vec<&str> = c.images().iter().map(|i| i.id.as_str()).collect();
        let listed = run_ok(
            Command::new(&tc.bundler)
                .args(["-list", &format!("-type={kind}")])
                .arg(format!("-input={}", out.display())),
        );
        let theirs: Vec<String> = String::from_utf8_lossy(&listed.stdout)
            .lines()
            .map(String::from)
            .collect();
        assert_eq!(ours, theirs, "{kind}");
        assert_eq!(ours.len(), 3);
        for (i, id) in ours.iter().enumerate() {
            let target = dir.join(format!("entry-{kind}-{i}"));
            run_ok(
                Command::new(&tc.bundler)
                    .args(["-unbundle", &format!("-type={kind}")])
                    .arg(format!("-targets={id}"))
                    .arg(format!("-input={}", out.display()))
                    .arg(format!("-output={}", target.display())),
            );
            assert_eq!(
                c.image_bytes(i).unwrap().as_ref(),
                std::fs::read(&target).unwrap().as_slice(),
                "{kind} {id}"
            );
        }
        // Text is listed, never chosen.
        let s = select(
            &DeviceTarget::parse("gfx1100").unwrap(),
            &c,
            &Policy::default(),
        );
        assert_eq!(s.chosen, None);
    }
}

/// Peak resident memory (KiB) of `offload-probe ARGS`, which exits with `code`.
/// Reaped by `wait4` (for its own rusage), not by `Child::wait`.
#[allow(clippy::zombie_processes)]
fn probe_peak_kib(args: &[&str], code: i32) -> i64 {
    let probe = build_dir().join("offload-probe");
    let child = std::process::Command::new(&probe)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: all-zero is a valid rusage.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, writing into live locals.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32);
    assert!(libc::WIFEXITED(status), "{status:#x}");
    assert_eq!(libc::WEXITSTATUS(status), code, "{args:?}");
    usage.ru_maxrss
}

#[test]
fn a_listing_bomb_costs_what_is_listed() {
    if !build_dir().join("offload-probe").exists() {
        assert!(!ci(), "offload-probe is not built");
        return;
    }
    // 64 KiB of zlib promising a table of 2.8 million empty entries (64 MiB
    // inflated; 1 GiB of listing before the entry limit). Refused after
    // reading the count: the peak is the probe's own, whatever the load.
    let bomb = workspace().join("fuzz/regressions/default-limits/ccob-empty-table-64mib");
    let peak = probe_peak_kib(&["--device", "gfx90a", bomb.to_str().unwrap()], 2);
    let baseline = probe_peak_kib(&["--device", "gfx90a", "/dev/null"], 2);
    eprintln!("peak RSS: bomb {peak} KiB, empty input {baseline} KiB");
    assert!(
        peak < baseline + 16 * 1024,
        "listing the bomb took {peak} KiB, an empty input {baseline} KiB"
    );
}

/// The quick look of a directory scan (`MappedFile::open_if_offload`: headers
/// only, archives member by member) never misses a file in which the full
/// parse finds offload sections, over every regular file of Debian's library
/// directory (rocSPARSE and 100-odd static archives among them), and it does
/// rule out the archives without offload code rather than map them all.
#[test]
fn quick_look_never_misses_what_the_full_parse_finds() {
    let Some(rocsparse) = support::rocsparse() else {
        return;
    };
    let mut dirs = vec![rocsparse.parent().unwrap().to_path_buf()];
    let (mut files, mut archives_ruled_out, mut with_code) = (0, 0, 0);
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let kind = entry.file_type().unwrap();
            let path = entry.path();
            if kind.is_dir() {
                dirs.push(path);
                continue;
            }
            if !kind.is_file() {
                continue;
            }
            files += 1;
            let full = MappedFile::open(&path)
                .ok()
                .and_then(|f| f.offload_sections().ok())
                .is_some_and(|s| !s.is_empty());
            let quick = MappedFile::open_if_offload(&path);
            if full {
                with_code += 1;
                assert!(
                    matches!(quick, Ok(Some(_))),
                    "{}: the quick look missed offload sections",
                    path.display()
                );
            } else if matches!(quick, Ok(None)) && path.extension().is_some_and(|e| e == "a") {
                archives_ruled_out += 1;
            }
        }
    }
    assert!(
        files > 1000 && with_code >= 1,
        "{files} files, {with_code} with code"
    );
    assert!(
        archives_ruled_out >= 50,
        "{archives_ruled_out} archives ruled out"
    );
}

/// A section's declared size bounds nothing: the fuzzer's object whose
/// `.data` claims 2^52 bytes (fuzz/regressions/discover_file) made the
/// search for a clang-14 binary descriptor step through 2^49 addresses.
/// Only the bytes the file holds are searched.
#[test]
fn a_data_section_larger_than_the_file_is_searched_only_as_far_as_the_file() {
    let path = workspace().join("fuzz/regressions/discover_file/data-section-of-2-52-bytes");
    let file = MappedFile::open(&path).unwrap();
    // Listing it ends (with or without containers); before, it did not.
    let _ = file.containers(&Limits::default());
}
