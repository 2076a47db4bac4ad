//! The loader's reading of real clang output, compared with the reference
//! tools: `clang-offload-bundler -list` / `-unbundle`, `llvm-objdump
//! --offloading`, `llvm-offload-binary`, and `llvm-readelf` for ELF headers.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use offload_loader_workspace::loader::compressed::Method;
use offload_loader_workspace::loader::container::{self, Container, Format};
use offload_loader_workspace::loader::discover::file::MappedFile;
use offload_loader_workspace::loader::select::{DeviceTarget, Policy};
use offload_loader_workspace::loader::{select, CodeKind, ImageSource, Limits};
use support::*;

const KERNEL: &str = "typedef struct { unsigned x, y, z; } dim3;
extern \"C\" int hipLaunchKernel(const void *, dim3, dim3, void **, unsigned long, void *);
extern \"C\" int __hipPopCallConfiguration(dim3 *, dim3 *, unsigned long *, void **);
__attribute__((global)) void kern(int *p) { *p = 1; }
__attribute__((device)) int dvar = 3;
";

const ARCHS: &[&str] = &[
    "gfx906:xnack-",
    "gfx90a:sramecc+:xnack-",
    "gfx90a:xnack+",
    "gfx942",
    "gfx1100",
    "gfx11-generic",
];

/// Compiles the kernel as HIP with `clang` and returns the object's `.hip_fatbin`.
fn hip_fatbin(
    clang: u32,
    name: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Option<(PathBuf, Vec<u8>)> {
    hip_fatbin_for(ARCHS, clang, name, extra, env)
}

fn hip_fatbin_for(
    archs: &[&str],
    clang: u32,
    name: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Option<(PathBuf, Vec<u8>)> {
    let clang = tool("clang", clang)?;
    let objcopy = tool("llvm-objcopy", 22)?;
    let dir = scratch(&format!("formats-{name}"));
    let src = dir.join("k.hip");
    std::fs::write(&src, KERNEL).unwrap();
    let obj = dir.join("k.o");
    let mut cmd = Command::new(clang);
    cmd.args(["-x", "hip", "-nogpulib", "-nogpuinc", "-c"])
        .args(archs.iter().map(|a| format!("--offload-arch={a}")))
        .args(extra)
        .arg(&src)
        .arg("-o")
        .arg(&obj);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_ok(&mut cmd);
    let fatbin = dir.join("fatbin");
    run_ok(
        Command::new(objcopy)
            .arg(format!("--dump-section=.hip_fatbin={}", fatbin.display()))
            .arg(&obj)
            .arg(dir.join("rest.o")),
    );
    let bytes = std::fs::read(&fatbin).unwrap();
    Some((fatbin, bytes))
}

/// `clang-offload-bundler -list` of a raw bundle or CCOB file.
fn bundler_list(file: &Path) -> Option<Vec<String>> {
    let bundler = tool("clang-offload-bundler", 22)?;
    let out = run_ok(
        Command::new(bundler)
            .args(["-list", "-type=o"])
            .arg(format!("-input={}", file.display())),
    );
    Some(
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(String::from)
            .collect(),
    )
}

/// `clang-offload-bundler -unbundle` of one ID.
fn bundler_extract(file: &Path, id: &str) -> Option<Vec<u8>> {
    let bundler = tool("clang-offload-bundler", 22)?;
    let out = file.with_extension(id.replace([':', '-'], "_"));
    run_ok(Command::new(bundler).args(["-unbundle", "-type=o"]).args([
        format!("-targets={id}"),
        format!("-input={}", file.display()),
        format!("-output={}", out.display()),
    ]));
    Some(std::fs::read(out).unwrap())
}

/// Lists and extracts every image of `file` and checks both against the bundler.
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

fn same_as_bundler<'a>(file: &Path, data: &'a [u8], format: Format) -> Container<'a> {
    let found = container::scan(data, &Limits::default());
    assert_eq!(found.len(), 1, "{found:?}");
    let c = found.into_iter().next().unwrap().unwrap();
    assert_eq!(c.format(), format);
    let ids: Vec<String> = c.images().iter().map(|i| i.id.clone()).collect();
    let Some(mut reference) = bundler_list(file) else {
        return c;
    };
    let mut ours = ids.clone();
    reference.sort();
    ours.sort();
    assert_eq!(ours, reference);
    for (i, image) in c.images().iter().enumerate() {
        if image.is_host() {
            continue;
        }
        let ours = c.image_bytes(i).unwrap();
        let theirs = bundler_extract(file, &image.id).unwrap();
        assert!(
            ours.as_ref() == theirs.as_slice(),
            "{}: bytes differ",
            image.id
        );
    }
    c
}

#[test]
fn clang_22_bundle() {
    let Some((file, data)) = hip_fatbin(22, "plain", &[], &[]) else {
        return;
    };
    let c = same_as_bundler(&file, &data, Format::Bundle);
    assert_eq!(c.images().len(), ARCHS.len() + 1);
}

#[test]
fn clang_22_compressed_bundle_v3_zstd() {
    let Some((file, data)) = hip_fatbin(22, "ccob3", &["--offload-compress"], &[]) else {
        return;
    };
    let c = same_as_bundler(&file, &data, Format::CompressedBundle);
    let h = c.compression().unwrap();
    assert_eq!((h.version, h.method), (3, Method::Zstd));
}

#[test]
fn clang_22_compressed_bundle_v2_on_request() {
    let Some((file, data)) = hip_fatbin(
        22,
        "ccob2",
        &["--offload-compress"],
        &[("COMPRESSED_BUNDLE_FORMAT_VERSION", "2")],
    ) else {
        return;
    };
    let c = same_as_bundler(&file, &data, Format::CompressedBundle);
    assert_eq!(c.compression().unwrap().version, 2);
}

#[test]
fn clang_19_compressed_bundle_v2() {
    if tool("ld.lld", 19).is_none() {
        return;
    }
    // clang-19 writes code object v5 by default, which has no generic targets.
    let archs = &ARCHS[..5];
    let Some((file, data)) = hip_fatbin_for(archs, 19, "clang19", &["--offload-compress"], &[])
    else {
        return;
    };
    let c = same_as_bundler(&file, &data, Format::CompressedBundle);
    assert_eq!(c.compression().unwrap().version, 2);
}

#[test]
fn code_object_headers_match_the_bundle_ids_and_llvm_readelf() {
    let Some((_, data)) = hip_fatbin(22, "headers", &[], &[]) else {
        return;
    };
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
    let Some((_, data)) = hip_fatbin(22, "matrix", &[], &[]) else {
        return;
    };
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
fn openmp_objects_match_llvm_objdump() {
    let (Some(clang), Some(objdump)) = (tool("clang", 22), tool("llvm-objdump", 22)) else {
        return;
    };
    let dir = scratch("formats-openmp");
    let src = dir.join("o.c");
    std::fs::write(&src, "int g = 1;\n#pragma omp declare target(g)\nint main(void) { int x = 0;\n#pragma omp target map(tofrom: x)\n{ x = g; }\nreturn x; }\n").unwrap();
    let obj = dir.join("o.o");
    run_ok(
        Command::new(clang)
            .args([
                "-fopenmp",
                "--offload-arch=gfx90a:xnack+,gfx1100",
                "-nogpulib",
                "-c",
            ])
            .arg(&src)
            .arg("-o")
            .arg(&obj),
    );
    let out = run_ok(
        Command::new(objdump)
            .arg("--offloading")
            .arg(&obj)
            .current_dir(&dir),
    );
    let text = String::from_utf8(out.stdout).unwrap();
    // "kind llvm ir / arch gfx1100 / triple amdgcn-amd-amdhsa / producer openmp" per image.
    let field = |block: &str, key: &str| {
        block
            .lines()
            .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()))
            .unwrap()
    };
    let reference: Vec<(String, String, String, String)> = text
        .split("OFFLOADING IMAGE")
        .skip(1)
        .map(|b| {
            (
                field(b, "kind"),
                field(b, "arch"),
                field(b, "triple"),
                field(b, "producer"),
            )
        })
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
fn ptx_packaged_by_llvm_offload_binary() {
    let (Some(clang), Some(packager)) = (tool("clang", 22), tool("llvm-offload-binary", 22)) else {
        return;
    };
    let dir = scratch("formats-ptx");
    let src = dir.join("n.c");
    std::fs::write(&src, "void k(int *p) { *p = 1; }\n").unwrap();
    let ptx = dir.join("n.ptx");
    // No CUDA SDK here: state the PTX ISA version clang may use.
    run_ok(
        Command::new(&clang)
            .args([
                "--target=nvptx64-nvidia-cuda",
                "-march=sm_80",
                "-Xclang",
                "-target-feature",
                "-Xclang",
                "+ptx78",
                "-S",
            ])
            .arg(&src)
            .arg("-o")
            .arg(&ptx),
    );
    let obj = dir.join("g.o");
    run_ok(
        Command::new(&clang)
            .args([
                "--target=amdgcn-amd-amdhsa",
                "-mcpu=gfx1100",
                "-nogpulib",
                "-c",
            ])
            .arg(&src)
            .arg("-o")
            .arg(&obj),
    );
    let bin = dir.join("pk.bin");
    run_ok(Command::new(packager).arg("-o").arg(&bin).args([
        format!(
            "--image=file={},triple=nvptx64-nvidia-cuda,arch=sm_80,kind=cuda",
            ptx.display()
        ),
        format!(
            "--image=file={},triple=amdgcn-amd-amdhsa,arch=gfx1100,kind=hip",
            obj.display()
        ),
    ]));
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
fn relocatable_rdc_objects_and_archives() {
    let (Some(clang), Some(ar)) = (tool("clang", 22), tool("llvm-ar", 22)) else {
        return;
    };
    let dir = scratch("formats-rdc");
    let src = dir.join("k.hip");
    std::fs::write(&src, KERNEL).unwrap();
    // -fgpu-rdc -c: one __CLANG_OFFLOAD_BUNDLE__<id> section per entry.
    let obj = dir.join("rdc.o");
    run_ok(
        Command::new(&clang)
            .args([
                "-x",
                "hip",
                "-nogpulib",
                "-nogpuinc",
                "-fgpu-rdc",
                "-c",
                "--offload-arch=gfx90a:xnack-",
                "--offload-arch=gfx1100",
            ])
            .arg(&src)
            .arg("-o")
            .arg(&obj),
    );
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
    let Some(mut reference) = bundler_list(&obj) else {
        return;
    };
    ours.sort();
    reference.sort();
    assert_eq!(ours, reference);
    for (i, image) in bundle.images().iter().enumerate() {
        if !image.is_host() {
            let theirs = bundler_extract(&obj, &image.id).unwrap();
            assert!(
                bundle.image_bytes(i).unwrap().as_ref() == theirs.as_slice(),
                "{}",
                image.id
            );
        }
    }
    // A static archive of it and of a plain object: every member is found,
    // despite archive members being only 2-byte aligned.
    let plain = dir.join("plain.o");
    run_ok(
        Command::new(&clang)
            .args([
                "-x",
                "hip",
                "-nogpulib",
                "-nogpuinc",
                "-c",
                "--offload-arch=gfx906",
            ])
            .arg(&src)
            .arg("-o")
            .arg(&plain),
    );
    let lib = dir.join("libk.a");
    run_ok(Command::new(ar).arg("rcs").arg(&lib).arg(&obj).arg(&plain));
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
