//! NVIDIA for real: programs built at test time with CUDA 13.5 `nvcc` (from
//! the PyPI wheels, `.ci/cuda-wheels.sh`), and two NVIDIA libraries, listed,
//! extracted and selected by the loader, compared with what `cuobjdump` 13.4
//! says about the same files.

mod support;

use std::path::Path;
use std::process::Command;

use offload_loader::discover::SectionRole;
use offload_loader::{select, CodeKind, DeviceTarget, Limits, MappedFile, Policy};
use support::{Cuda, NvOutput};

/// One image as the loader lists it.
#[derive(Debug)]
struct Listed {
    /// `elf` or `ptx`, as cuobjdump's dump says.
    kind: &'static str,
    /// With its `a`/`f` variant.
    arch: String,
    /// The entry itself is compressed (a --concat member: its group is).
    compressed: bool,
    member: bool,
    /// The exact code (PTX with its NUL), inflated where compressed.
    code: Option<Vec<u8>>,
}

/// What the loader finds in `path` where `cuobjdump` looks (`.nv_fatbin`,
/// raw files, and `__nv_relfatbin` of relocatable objects only: not the
/// containers found among host data, nor a linked file's `__nv_relfatbin`),
/// in file order; the code of each image too when `with_code`.
fn listed(path: &Path, with_code: bool) -> Vec<Listed> {
    let file = MappedFile::open(path).unwrap();
    // Relocatable: an object, or an archive (of objects).
    let relocatable = file.bytes().get(16) == Some(&1) || file.bytes().starts_with(b"!<arch>");
    let mut out = Vec::new();
    for section in file.containers(&Limits::default()).unwrap() {
        let linked_relfatbin = section.section.name == "__nv_relfatbin" && !relocatable;
        if section.section.role == SectionRole::Embedded || linked_relfatbin {
            continue;
        }
        for c in section.containers {
            let c = c.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            for (i, image) in c.images().iter().enumerate() {
                let entry = c.nv_entry(i);
                let kind = match image.declared {
                    Some(CodeKind::Cubin) => "elf",
                    Some(CodeKind::Ptx) => "ptx",
                    other => panic!("{}: image {i} is {other:?}", path.display()),
                };
                out.push(Listed {
                    kind,
                    arch: image.arch.to_string(),
                    compressed: entry.is_some_and(|e| e.is_compressed() && e.group.is_none()),
                    member: entry.is_some_and(|e| e.group.is_some()),
                    code: with_code.then(|| c.image_bytes(i).unwrap().into_owned()),
                });
            }
        }
    }
    out
}

/// The loader's listing equals cuobjdump's dump (kind, arch with variant,
/// compression, --concat membership) and every image's code equals what
/// `cuobjdump -xelf all -xptx all` writes, byte for byte.
fn same_as_cuobjdump(cuda: &Cuda, path: &Path) -> Vec<Listed> {
    let ours = listed(path, true);
    assert!(!ours.is_empty(), "{}: nothing listed", path.display());
    let dump: Vec<_> = cuda
        .cuobjdump_entries(path)
        .into_iter()
        .filter(|e| e.kind != "concatenated entry")
        .collect();
    let mine: Vec<(String, Option<String>, bool, bool)> = ours
        .iter()
        .map(|l| {
            (
                l.kind.to_string(),
                Some(l.arch.clone()),
                l.compressed,
                l.member,
            )
        })
        .collect();
    let theirs: Vec<(String, Option<String>, bool, bool)> = dump
        .iter()
        .map(|e| (e.kind.clone(), e.arch.clone(), e.compressed, e.member))
        .collect();
    assert_eq!(
        mine,
        theirs,
        "{}: listing differs from cuobjdump",
        path.display()
    );
    check_extraction(cuda, path, &ours);
    ours
}

/// Extraction against `cuobjdump -xelf all -xptx all` (ELF and PTX files are
/// numbered apart, in listing order).
fn check_extraction(cuda: &Cuda, path: &Path, ours: &[Listed]) {
    let extracted = cuda.cuobjdump_extract(path, "all");
    for (kind, ext) in [("elf", "cubin"), ("ptx", "ptx")] {
        let mine: Vec<&Listed> = ours.iter().filter(|l| l.kind == kind).collect();
        let theirs: Vec<_> = extracted.iter().filter(|e| e.2 == ext).collect();
        assert_eq!(mine.len(), theirs.len(), "{}: {ext} count", path.display());
        for (m, t) in mine.iter().zip(theirs) {
            let mut code = m.code.clone().unwrap();
            if kind == "ptx" {
                assert_eq!(code.pop(), Some(0), "PTX keeps its NUL for the driver");
            }
            assert!(
                code == t.3,
                "{}: {ext} {} ({}) differs from cuobjdump's: {} vs {} bytes",
                path.display(),
                t.0,
                t.1,
                code.len(),
                t.3.len()
            );
        }
    }
}

fn archs(listed: &[Listed]) -> Vec<String> {
    listed
        .iter()
        .map(|l| format!("{} {}", l.kind, l.arch))
        .collect()
}

const MULTI: &[&str] = &[
    "-gencode",
    "arch=compute_80,code=sm_80",
    "-gencode",
    "arch=compute_90a,code=[sm_90a,compute_90a]",
    "-gencode",
    "arch=compute_100f,code=sm_100f",
    "-gencode",
    "arch=compute_100a,code=sm_100a",
    "-gencode",
    "arch=compute_75,code=compute_75",
];

#[test]
fn multi_arch_object_with_variants() {
    let Some(cuda) = support::cuda() else { return };
    let obj = cuda.nvcc(MULTI, NvOutput::Object);
    let ours = same_as_cuobjdump(&cuda, &obj);
    assert_eq!(
        archs(&ours),
        [
            "elf sm_80",
            "elf sm_90a",
            "ptx sm_90a",
            "elf sm_100f",
            "elf sm_100a",
            "ptx sm_75"
        ]
    );
    // CUDA 13 compresses PTX by default, not cubins.
    assert!(ours.iter().all(|l| l.compressed == (l.kind == "ptx")));
}

#[test]
fn compressed_zstd_lz4_and_concat() {
    let Some(cuda) = support::cuda() else { return };
    let base = [
        "-gencode",
        "arch=compute_80,code=sm_80",
        "-gencode",
        "arch=compute_90,code=[sm_90,compute_90]",
    ];
    let mut all = base.to_vec();
    all.extend(["-Xfatbin", "-compress-all"]);
    let zstd = same_as_cuobjdump(&cuda, &cuda.nvcc(&all, NvOutput::Object));
    assert!(zstd.iter().all(|l| l.compressed));
    all.push("--compress-mode=speed");
    let lz4 = cuda.nvcc(&all, NvOutput::Object);
    let ours = same_as_cuobjdump(&cuda, &lz4);
    assert!(ours.iter().all(|l| l.compressed));
    // The speed mode writes raw LZ4 blocks (flag 0x2000).
    let file = MappedFile::open(&lz4).unwrap();
    let sections = file.containers(&Limits::default()).unwrap();
    let c = sections[0].containers[0].as_ref().unwrap();
    assert_eq!(c.nv_entry(0).unwrap().compression().name(), "lz4");
    let mut concat = base.to_vec();
    concat.push("--concat");
    let ours = same_as_cuobjdump(&cuda, &cuda.nvcc(&concat, NvOutput::Object));
    // The PTX stays outside the group, ahead of it.
    assert_eq!(archs(&ours), ["ptx sm_90", "elf sm_80", "elf sm_90"]);
    assert!(ours.iter().all(|l| l.member == (l.kind == "elf")));
}

/// `gencode` pairs for `arch=compute_X,code=Y`.
fn gencode(codes: &[(&str, &str)]) -> Vec<String> {
    codes
        .iter()
        .flat_map(|(compute, code)| {
            [
                "-gencode".to_string(),
                format!("arch={compute},code={code}"),
            ]
        })
        .collect()
}

/// `--concat` over a family of target sets, orders, compression modes and
/// file kinds, each listed and extracted exactly as cuobjdump does. nvcc
/// puts sm_100+ cubins (whose member headers carry an options block, so the
/// table is not a run of 64-byte headers) in a group of their own.
#[test]
fn concat_groups_of_every_shape_read_as_cuobjdump_reads_them() {
    let Some(cuda) = support::cuda() else { return };
    // The eight targets of the report that found the bug, in an executable
    // (which adds nvlink's kernel-less stub) and a shared library.
    let eight = gencode(&[
        ("compute_75", "sm_75"),
        ("compute_80", "sm_80"),
        ("compute_86", "sm_86"),
        ("compute_90a", "sm_90a"),
        ("compute_90", "compute_90"),
        ("compute_100a", "sm_100a"),
        ("compute_100f", "sm_100f"),
        ("compute_120", "sm_120"),
    ]);
    // Newest first, PTX for the newest, LZ4 groups.
    let reversed = gencode(&[
        ("compute_120", "[sm_120,compute_120]"),
        ("compute_110", "sm_110"),
        ("compute_103f", "sm_103f"),
        ("compute_90", "sm_90"),
        ("compute_80", "sm_80"),
    ]);
    // Only sm_100+ members; and only older ones; every entry compressed.
    let blackwell = gencode(&[
        ("compute_100a", "sm_100a"),
        ("compute_103a", "sm_103a"),
        ("compute_120f", "sm_120f"),
        ("compute_100", "compute_100"),
    ]);
    let older = gencode(&[
        ("compute_75", "[sm_75,compute_75]"),
        ("compute_89", "sm_89"),
        ("compute_87", "sm_87"),
    ]);
    // PTX beside each cubin: the PTX entries form a group of their own
    // (members with an empty options string), and so may PTX alone.
    let ptx_too = gencode(&[
        ("compute_80", "[sm_80,compute_80]"),
        ("compute_90", "[sm_90,compute_90]"),
        ("compute_100", "[sm_100,compute_100]"),
    ]);
    let ptx_only = gencode(&[("compute_80", "compute_80"), ("compute_90", "compute_90")]);
    let with = |base: &[String], extra: &[&str]| -> Vec<String> {
        let mut v = base.to_vec();
        v.push("--concat".into());
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let cases: Vec<(Vec<String>, NvOutput)> = vec![
        (with(&eight, &[]), NvOutput::Executable),
        (with(&eight, &[]), NvOutput::SharedLibrary),
        (
            with(&reversed, &["--compress-mode=speed"]),
            NvOutput::Object,
        ),
        (
            with(&blackwell, &["-Xfatbin", "-compress-all"]),
            NvOutput::Object,
        ),
        (with(&older, &[]), NvOutput::Fatbin),
        (with(&ptx_too, &[]), NvOutput::SharedLibrary),
        (
            with(&ptx_only, &["-Xfatbin", "-compress-all"]),
            NvOutput::Object,
        ),
        (
            Vec::new(),
            NvOutput::Archive(vec![with(&older, &[]), with(&blackwell, &[])]),
        ),
    ];
    let mut ptx_members = 0;
    for (args, output) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let path = cuda.nvcc(&args, output.clone());
        let ours = same_as_cuobjdump(&cuda, &path);
        assert!(
            ours.iter().any(|l| l.member),
            "{output:?} {args:?}: no --concat member listed"
        );
        ptx_members += ours.iter().filter(|l| l.member && l.kind == "ptx").count();
    }
    assert_eq!(ptx_members, 5, "PTX inside groups");
}

#[test]
fn rdc_objects_archives_and_linked_files() {
    let Some(cuda) = support::cuda() else { return };
    let rdc = cuda.nvcc(&["-rdc=true", "-arch=sm_80"], NvOutput::Object);
    assert_eq!(
        archs(&same_as_cuobjdump(&cuda, &rdc)),
        ["elf sm_80", "ptx sm_80"]
    );
    let plain: Vec<String> = MULTI.iter().map(|s| s.to_string()).collect();
    let archive = cuda.nvcc(
        &[],
        NvOutput::Archive(vec![plain, support::strings(&["-rdc=true", "-arch=sm_90"])]),
    );
    assert_eq!(same_as_cuobjdump(&cuda, &archive).len(), 8);
    // The quick look of a directory scan finds the members' fat binaries.
    assert!(MappedFile::open_if_offload(&archive).unwrap().is_some());
    for output in [NvOutput::Executable, NvOutput::SharedLibrary] {
        let linked = cuda.nvcc(&["-arch=sm_80"], output);
        same_as_cuobjdump(&cuda, &linked);
    }
    // An -rdc executable keeps its objects' __nv_relfatbin beside the linked
    // .nv_fatbin, and a wrapper of .nvFatBinSegment points into it (what
    // __cudaRegisterLinkedBinary is handed): the loader lists it, cuobjdump
    // reads only the linked code.
    let linked_rdc = cuda.nvcc(&["-rdc=true", "-arch=sm_80"], NvOutput::Executable);
    let file = MappedFile::open(&linked_rdc).unwrap();
    let names: Vec<String> = file
        .offload_sections()
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert!(names.iter().any(|n| n == "__nv_relfatbin"), "{names:?}");
    same_as_cuobjdump(&cuda, &linked_rdc);
    let fatbin = cuda.nvcc(MULTI, NvOutput::Fatbin);
    same_as_cuobjdump(&cuda, &fatbin);
}

#[test]
fn raw_cubin_and_ptx_files() {
    let Some(cuda) = support::cuda() else { return };
    for arch in ["sm_90a", "sm_80", "sm_100a"] {
        let cubin = cuda.nvcc(&[&format!("-arch={arch}")], NvOutput::Cubin);
        let ours = listed(&cubin, true);
        assert_eq!(archs(&ours), [format!("elf {arch}")]);
        assert_eq!(
            cuda.cuobjdump_list(&cubin),
            [("ELF".to_string(), 1, arch.to_string())]
        );
        check_extraction(&cuda, &cubin, &ours);
    }
    // cuobjdump says a PTX file "does not contain device code"; the loader
    // lists it, and hands the driver its text with a NUL.
    let ptx = cuda.nvcc(&["-arch=sm_80"], NvOutput::Ptx);
    let ours = listed(&ptx, true);
    assert_eq!(archs(&ours), ["ptx sm_80"]);
    let text = std::fs::read(&ptx).unwrap();
    assert_eq!(
        ours[0].code.as_deref().unwrap(),
        [&text[..], b"\0"].concat()
    );
}

#[test]
fn ptx_only_builds_jit_on_newer_devices_only() {
    let Some(cuda) = support::cuda() else { return };
    let obj = cuda.nvcc(
        &["-gencode", "arch=compute_80,code=compute_80"],
        NvOutput::Object,
    );
    assert_eq!(archs(&same_as_cuobjdump(&cuda, &obj)), ["ptx sm_80"]);
    for (device, expected) in [
        ("sm_80", "ptx sm_80"),
        ("sm_87", "ptx sm_80"),
        ("12.1", "ptx sm_80"),
        ("sm_75", "none"),
    ] {
        assert_eq!(chosen(&obj, device), [expected], "{device}");
    }
    // The driver's PTX ISA bounds the JIT: nvcc 13.5 writes ISA 9.5.
    let file = MappedFile::open(&obj).unwrap();
    let sections = file.containers(&Limits::default()).unwrap();
    let c = sections[0].containers[0].as_ref().unwrap();
    let old_driver = DeviceTarget::Nvidia {
        capability: offload_loader::target::ComputeCapability { major: 9, minor: 0 },
        max_ptx: offload_loader::target::nvptx::max_ptx_for_driver(12080),
    };
    let s = select(&old_driver, c, &Policy::default());
    assert_eq!(s.chosen, None);
    assert_eq!(
        s.rejected[0].1.to_string(),
        "its PTX ISA 9.5 is newer than the driver can compile (up to 8.7)"
    );
}

/// The image each device gets from `file`, as `kind arch`, or `none`.
fn chosen(file: &Path, device: &str) -> Vec<String> {
    let device = DeviceTarget::parse(device).unwrap();
    let file = MappedFile::open(file).unwrap();
    let mut out = Vec::new();
    for section in file.containers(&Limits::default()).unwrap() {
        for c in section.containers.iter().flatten() {
            if c.is_kernel_less() {
                continue;
            }
            let s = select(&device, c, &Policy::default());
            out.push(match s.chosen {
                Some(i) => {
                    let image = &c.images()[i];
                    let kind = if image.declared == Some(CodeKind::Ptx) {
                        "ptx"
                    } else {
                        "elf"
                    };
                    format!("{kind} {}", image.arch)
                }
                None => "none".to_string(),
            });
        }
    }
    out
}

#[test]
fn selection_follows_the_cuda_rules() {
    let Some(cuda) = support::cuda() else { return };
    let obj = cuda.nvcc(MULTI, NvOutput::Object);
    for (device, expected) in [
        // sm_80 cubin: same major, minor ≥ 0, on the desktop.
        ("sm_80", "elf sm_80"),
        ("8.6", "elf sm_80"),
        // Orin (Tegra 8.7): no binary compatibility, the compute_75 PTX.
        ("sm_87", "ptx sm_75"),
        // sm_90a cubin only on 9.0 (the device typed with its a spelling).
        ("sm_90a", "elf sm_90a"),
        // 10.0: the a cubin ranks above the f one.
        ("sm_100", "elf sm_100a"),
        // 10.3: sm_100a is for 10.0 alone; sm_100f's family includes 10.3.
        ("sm_103", "elf sm_100f"),
        // 12.0: no cubin, compute_90a PTX is for 9.0 only: compute_75 PTX.
        ("sm_120", "ptx sm_75"),
        ("sm_75", "ptx sm_75"),
    ] {
        assert_eq!(chosen(&obj, device), [expected], "{device}");
    }
    // CUDA 13 links nvlink's kernel-less stub into every executable: an
    // -arch=sm_80 program's PTX still serves sm_90, and only the stub lacks it.
    let exe = cuda.nvcc(&["-arch=sm_80"], NvOutput::Executable);
    assert_eq!(chosen(&exe, "sm_90"), ["ptx sm_80"]);
    let file = MappedFile::open(&exe).unwrap();
    let stubs = file
        .containers(&Limits::default())
        .unwrap()
        .into_iter()
        .flat_map(|s| s.containers)
        .filter(|c| c.as_ref().is_ok_and(|c| c.is_kernel_less()))
        .count();
    assert_eq!(stubs, 1);
}

#[test]
fn nvidia_libraries_list_like_cuobjdump() {
    let Some(cuda) = support::cuda() else { return };
    for name in ["libcurand.so.10", "libcusparse.so.12"] {
        let Some(lib) = support::nvidia_library(name) else {
            return;
        };
        let ours = listed(&lib, false);
        let dump = cuda.cuobjdump_entries(&lib);
        let mine: Vec<_> = ours
            .iter()
            .map(|l| (l.kind.to_string(), Some(l.arch.clone()), l.compressed))
            .collect();
        let theirs: Vec<_> = dump
            .iter()
            .map(|e| (e.kind.clone(), e.arch.clone(), e.compressed))
            .collect();
        assert_eq!(mine, theirs, "{name}");
        // Extract the first and last cubin and PTX by name: byte-identical,
        // each inflated alone.
        let list = cuda.cuobjdump_list(&lib);
        // cuobjdump names what it extracts after the file, less its last extension.
        let base = name.rsplit_once('.').unwrap().0;
        for kind in ["ELF", "PTX"] {
            let of_kind: Vec<_> = list.iter().filter(|l| l.0 == kind).collect();
            for pick in [of_kind.first(), of_kind.last()].into_iter().flatten() {
                let ext = if kind == "ELF" { "cubin" } else { "ptx" };
                let file_name = format!("{base}.{}.{}.{ext}", pick.1, pick.2);
                let theirs = cuda.cuobjdump_extract(&lib, &file_name);
                assert_eq!(theirs.len(), 1, "{file_name}");
                let index = ours
                    .iter()
                    .enumerate()
                    .filter(|(_, l)| l.kind == kind.to_lowercase())
                    .nth(pick.1 as usize - 1)
                    .unwrap()
                    .0;
                let mut code = image_code(&lib, index);
                if kind == "PTX" {
                    assert_eq!(code.pop(), Some(0));
                }
                assert!(
                    code == theirs[0].3,
                    "{file_name}: {} vs {} bytes",
                    code.len(),
                    theirs[0].3.len()
                );
            }
        }
    }
}

/// The code of the `index`th image of `path` (in listing order).
fn image_code(path: &Path, mut index: usize) -> Vec<u8> {
    let file = MappedFile::open(path).unwrap();
    for section in file.containers(&Limits::default()).unwrap() {
        for c in section.containers.iter().flatten() {
            if index < c.images().len() {
                return c.image_bytes(index).unwrap().into_owned();
            }
            index -= c.images().len();
        }
    }
    panic!("no image {index}");
}

/// Fat binaries a program keeps as data (a `const` array in `.rodata`, as
/// cuFFT keeps 24,453 in `.ldata`) are found by what they are, in an object,
/// a shared library and an archive member, each as `cuobjdump` reads the
/// fat binary file itself; stray magics and a truncated copy are not
/// containers.
#[test]
fn fat_binaries_kept_as_data_are_found_by_content() {
    let Some(cuda) = support::cuda() else { return };
    let Some(gcc) = support::system_tool("gcc", "gcc") else {
        return;
    };
    let fatbin = cuda.nvcc(MULTI, NvOutput::Fatbin);
    let bytes = std::fs::read(&fatbin).unwrap();
    let array = |b: &[u8]| {
        b.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    // The fat binary, a truncated copy, and bytes that merely start like one.
    let source = format!(
        "__attribute__((aligned(16))) const unsigned char blob[] = {{{}}};\n\
         const unsigned char cut[] = {{{}}};\n\
         const char stray[] = \"\\x50\\xed\\x55\\xba\\x01\\x00\\x10\\x00 not a fat binary\";\n\
         const void *get(int i) {{ return i ? (const void *)cut : (const void *)blob; }}\n",
        array(&bytes),
        array(&bytes[..bytes.len() / 2]),
    );
    let dir = support::temp_dir();
    let c = dir.join("embed.c");
    std::fs::write(&c, source).unwrap();
    let (obj, lib, archive) = (
        dir.join("embed.o"),
        dir.join("libembed.so"),
        dir.join("libembed.a"),
    );
    support::run_ok(
        Command::new(&gcc)
            .args(["-O1", "-fPIC", "-c"])
            .arg(&c)
            .arg("-o")
            .arg(&obj),
    );
    support::run_ok(
        Command::new(&gcc)
            .arg("-shared")
            .arg(&obj)
            .arg("-o")
            .arg(&lib),
    );
    support::run_ok(Command::new("ar").arg("rcs").arg(&archive).arg(&obj));
    let theirs: Vec<(String, String)> = cuda
        .cuobjdump_list(&fatbin)
        .into_iter()
        .map(|(kind, _, arch)| (kind, arch))
        .collect();
    assert!(!theirs.is_empty());
    for file in [&obj, &lib, &archive] {
        let mapped = MappedFile::open(file).unwrap();
        let found: Vec<_> = mapped
            .containers(&Limits::default())
            .unwrap()
            .into_iter()
            .filter(|s| s.section.role == SectionRole::Embedded)
            .collect();
        assert_eq!(found.len(), 1, "{}", file.display());
        assert_eq!(found[0].section.name, ".rodata", "{}", file.display());
        let containers: Vec<_> = found[0].containers.iter().flatten().collect();
        assert_eq!(
            containers.len(),
            1,
            "{}: only the whole one",
            file.display()
        );
        let c = containers[0];
        assert_eq!(c.len(), bytes.len() as u64);
        let at = c.offset() as usize;
        assert_eq!(&mapped.bytes()[at..at + bytes.len()], &bytes[..]);
        let ours: Vec<(String, String)> = c
            .images()
            .iter()
            .map(|i| {
                let kind = if i.declared == Some(CodeKind::Ptx) {
                    "PTX"
                } else {
                    "ELF"
                };
                let arch = i.arch.to_string();
                (kind.to_string(), arch.trim_end_matches('f').to_string())
            })
            .collect();
        assert_eq!(ours, theirs, "{}", file.display());
    }
}

/// The PTX rule against the JIT's offline twin: CUDA 13.5's `ptxas`
/// compiles `compute_XY` PTX for a GPU exactly where `NvArch::jits_on` says
/// the driver can, for every capability this nvcc targets, Tegra (sm_87,
/// sm_110) and unclassed (sm_88, sm_107) ones included: PTX is forward
/// compatible whatever the platform, unlike a cubin.
#[test]
fn ptx_compiles_for_a_gpu_where_the_rule_says_it_jits() {
    use offload_loader::target::{ComputeCapability, NvArch};
    let Some(cuda) = support::cuda() else {
        return;
    };
    let ptxas = cuda.bin.join("ptxas");
    let list = cuda.nvcc_command().arg("--list-gpu-code").output().unwrap();
    assert!(list.status.success());
    let mut sms: Vec<u32> = String::from_utf8_lossy(&list.stdout)
        .split_whitespace()
        .filter_map(|a| a.strip_prefix("sm_")?.parse().ok())
        .collect();
    sms.sort_unstable();
    assert!(sms.contains(&87) && sms.contains(&110), "{sms:?}");
    let mut checked = 0;
    for &code in &sms {
        let ptx = cuda.nvcc(&[&format!("-arch=compute_{code}")], NvOutput::Ptx);
        let arch = NvArch::parse(&format!("compute_{code}")).unwrap();
        for &gpu in &sms {
            let compiled = Command::new(&ptxas)
                .args([&format!("-arch=sm_{gpu}"), "-o", "/dev/null"])
                .arg(&ptx)
                .output()
                .unwrap()
                .status
                .success();
            let device = ComputeCapability::from_sm(gpu).unwrap();
            assert_eq!(
                arch.jits_on(device),
                compiled,
                "compute_{code} PTX on sm_{gpu}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 100, "{checked}");
}

/// A library whose modules hold arch-specific code only (vllm's
/// `_vllm_fa3_C`: sm_90a only), slimmed for a GPU none is for: every module is
/// emptied, and every module still counts. The probe on the result fails
/// for the device slimmed for and for the one the code was for (no module
/// has an image for either any more), with the original's module count,
/// and says which modules were emptied; slim itself exits 1, as the probe
/// on the original does for that device.
/// Where selection takes an arch- or family-specific cubin, slim keeps the
/// cubins of the same capability the driver may take instead (which one it
/// takes is not documented): slimmed for sm_90, an object of sm_80, sm_90,
/// sm_90a and compute_90 PTX keeps, by `cuobjdump`, both sm_90 cubins and
/// nothing else; for sm_100 one of sm_100f and sm_100a keeps both, and for
/// sm_103 the sm_100f its family runs.
#[test]
fn cubins_the_driver_may_take_instead_are_kept() {
    let Some(cuda) = support::cuda() else { return };
    let Some(probe) = support::built("offload-probe") else {
        return;
    };
    let dir = support::temp_dir();
    for (codes, device, kept) in [
        (
            &[
                ("compute_80", "sm_80"),
                ("compute_90", "sm_90"),
                ("compute_90a", "sm_90a"),
                ("compute_90", "compute_90"),
            ][..],
            "sm_90",
            &["elf sm_90", "elf sm_90a"][..],
        ),
        // nvcc makes no sm_100 cubin beside an sm_100f one (the same code).
        (
            &[("compute_100f", "sm_100f"), ("compute_100a", "sm_100a")][..],
            "sm_100",
            &["elf sm_100f", "elf sm_100a"][..],
        ),
        (
            &[("compute_100f", "sm_100f"), ("compute_100a", "sm_100a")][..],
            "sm_103",
            &["elf sm_100f"][..],
        ),
    ] {
        let args = gencode(codes);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let obj = cuda.nvcc(&args, NvOutput::Object);
        let out = dir.join(device);
        let o = Command::new(&probe)
            .args(["slim", "--device", device, "--output"])
            .arg(&out)
            .arg(&obj)
            .env_remove("OFFLOAD_LOADER_DEVICES")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{o:?}");
        let slimmed = out.join(obj.file_name().unwrap());
        let mut listed = archs(&same_as_cuobjdump(&cuda, &slimmed));
        listed.sort();
        let mut kept = kept.to_vec();
        kept.sort();
        assert_eq!(listed, kept, "{device}");
    }
}

#[test]
fn emptied_modules_still_count() {
    let Some(cuda) = support::cuda() else { return };
    let Some(probe) = support::built("offload-probe") else {
        return;
    };
    // Arch-specific cubins only, enough of them that removing them frees
    // whole pages (slim leaves a section that would free less as it was).
    let mut args = Vec::new();
    for sm in ["90a", "100a", "103a", "110a", "120a", "121a"] {
        args.extend([
            "-gencode".to_string(),
            format!("arch=compute_{sm},code=sm_{sm}"),
        ]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let lib = cuda.nvcc(&args, NvOutput::SharedLibrary);
    let run = |args: &[&str]| {
        let out = Command::new(&probe)
            .args(args)
            .env_remove("OFFLOAD_LOADER_DEVICES")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (
            out.status.code(),
            text + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let lib = lib.to_str().unwrap();
    let modules = |file: &str, device: &str| -> (Option<i32>, u64, u64, String) {
        let (code, text) = run(&["--json", "--device", device, file]);
        let report: serde_json::Value = serde_json::from_str(&text).unwrap();
        let v = &report["objects"][0]["verdicts"][0];
        // Modules with kernels (nvlink's stub never lacks an image).
        let stubs: u64 = v["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["kernel_less"].as_u64().unwrap())
            .sum();
        (
            code,
            v["containers"].as_u64().unwrap() - stubs,
            v["without_image"].as_u64().unwrap(),
            v["verdict"].as_str().unwrap().to_string(),
        )
    };
    let (code, before, without, verdict) = modules(lib, "sm_80");
    assert_eq!(
        (code, without, verdict.as_str()),
        (Some(1), before, "fails")
    );
    assert_eq!(modules(lib, "sm_90").3, "loads");
    let dir = support::temp_dir();
    let (code, text) = run(&[
        "slim",
        lib,
        "--device",
        "sm_80",
        "--output",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "{text}");
    let slimmed = dir.join("libk.so");
    let slimmed = slimmed.to_str().unwrap();
    for device in ["sm_80", "sm_90"] {
        let (code, after, without, verdict) = modules(slimmed, device);
        assert_eq!(after, before, "{device}: the module count");
        assert_eq!(
            (code, without, verdict.as_str()),
            (Some(1), after, "fails"),
            "{device}"
        );
        let (_, human) = run(&["--device", device, slimmed]);
        assert!(
            human.contains("0 images (emptied: no image left)"),
            "{human}"
        );
        assert!(human.contains("FAILS"), "{human}");
    }
}

/// An `-rdc` program (objects compiled `-rdc=true -arch=sm_80`, the
/// device-link stub for sm_80 only), as libcudart loads it: on sm_80 the
/// stub's cubin; on a newer GPU the objects' fat binaries linked at load
/// (their PTX); on an older one nothing. The probe's verdict says so, the
/// objects' fat binaries are no modules of their own, and a slimmed copy
/// keeps what the link needs.
#[test]
fn rdc_programs_are_judged_as_their_runtime_links_them() {
    let Some(cuda) = support::cuda() else { return };
    let Some(probe) = support::built("offload-probe") else {
        return;
    };
    let exe = cuda.nvcc(&["-rdc=true", "-arch=sm_80"], NvOutput::Executable);
    let verdict = |file: &Path, device: &str| {
        let out = Command::new(&probe)
            .args(["--json", "--device", device])
            .arg(file)
            .env_remove("OFFLOAD_LOADER_DEVICES")
            .output()
            .unwrap();
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let v = report["objects"][0]["verdicts"][0].clone();
        let group = v["groups"][0].clone();
        (
            v["verdict"].as_str().unwrap().to_string(),
            group["modules"].as_u64().unwrap(),
            group["linked_at_load"].as_u64().unwrap(),
            v["why"].as_str().unwrap().to_string(),
        )
    };
    // The stub is the one module, whatever the number of objects.
    let (v, modules, linked, _) = verdict(&exe, "sm_80");
    assert_eq!((v.as_str(), modules, linked), ("loads", 1, 0));
    for device in ["sm_90", "sm_120"] {
        let (v, modules, linked, why) = verdict(&exe, device);
        assert_eq!((v.as_str(), modules, linked), ("loads", 1, 1), "{device}");
        assert!(why.contains("linking its objects' code at load"), "{why}");
    }
    let (v, modules, linked, _) = verdict(&exe, "sm_75");
    assert_eq!((v.as_str(), modules, linked), ("fails", 1, 0));
    // Slimmed for sm_90: what the link needs stays (slim judges by the
    // same verdict, and refuses a result that would lose it).
    let dir = support::temp_dir();
    let out = Command::new(&probe)
        .args(["slim", "--device", "sm_90", "--output"])
        .arg(&*dir)
        .arg(&exe)
        .env_remove("OFFLOAD_LOADER_DEVICES")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let slimmed = dir.join(exe.file_name().unwrap());
    // Still linked for sm_90 (every object keeps an image for it); no
    // longer loaded on sm_80 by the stub's own cubin.
    let (v, _, linked, _) = verdict(&slimmed, "sm_90");
    assert_eq!((v.as_str(), linked), ("loads", 1));
}
