//! `offload-probe slim` on real files, checked with tools nobody here wrote:
//! `roc-obj-ls` and `clang-offload-bundler` list exactly the kept images,
//! byte-identical to the same images in the original; `cuobjdump` lists and
//! extracts the kept cubins and PTX; `eu-elflint --gnu-ld` finds nothing;
//! shared libraries `dlopen` with `RTLD_NOW` and export the same dynamic
//! symbols; programs built by clang and nvcc, linked with our runtime, print
//! what they printed before for the kept devices.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::*;

fn probe() -> Option<PathBuf> {
    built("offload-probe")
}

/// Runs `offload-probe slim ARGS`; (exit code, stdout).
fn slim(args: &[&str]) -> (i32, String) {
    let out = Command::new(probe().unwrap())
        .arg("slim")
        .args(args)
        .env_remove("OFFLOAD_LOADER_DEVICES")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// A slimmed file in its own scratch directory, removed with it.
struct Slimmed {
    path: PathBuf,
    _dir: TempPath,
}

impl std::ops::Deref for Slimmed {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for Slimmed {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

/// `file` slimmed for `devices` into a fresh directory.
fn slimmed(file: &Path, devices: &[&str], extra: &[&str]) -> Slimmed {
    let dir = temp_dir();
    let mut args = vec![file.to_str().unwrap(), "--output", dir.to_str().unwrap()];
    for d in devices {
        args.extend(["--device", d]);
    }
    args.extend(extra);
    let (code, text) = slim(&args);
    assert_eq!(code, 0, "{text}");
    let path = dir.join(file.file_name().unwrap());
    assert!(path.is_file(), "nothing written: {text}");
    Slimmed { path, _dir: dir }
}

/// `eu-elflint --gnu-ld` says "No errors" (where it does for the original).
fn elflint_clean(original: &Path, result: &Path) {
    let Some(lint) = system_tool("eu-elflint", "elfutils") else {
        return;
    };
    let run = |f: &Path| {
        let out = Command::new(&lint).arg("--gnu-ld").arg(f).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    };
    // The program header entries are numbered anew after a split, and the
    // sections when those in the program header table's way move.
    let normal = |t: String| -> String {
        t.lines()
            .map(|l| match l.find("program header entry ") {
                Some(at) => format!("{}program header entry N", &l[..at]),
                None => match (l.find("section ["), l.find("] ")) {
                    (Some(a), Some(b)) if a < b => format!("{}section [N{}", &l[..a], &l[b..]),
                    _ => l.to_string(),
                },
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let before = normal(run(original));
    let after = normal(run(result));
    if before.trim() == "No errors" {
        assert_eq!(after.trim(), "No errors", "{}", result.display());
    } else {
        // Whatever the linker left, nothing new.
        for line in after.lines() {
            assert!(before.lines().any(|b| b == line), "new: {line}");
        }
    }
}

/// The result `dlopen`s with `RTLD_NOW` as the original does (a library
/// built with `-nogpulib` fails both for want of the HIP runtime).
fn dlopens_as_before(original: &Path, result: &Path) {
    let before = dlopen(original).map(|e| e.lines().last().unwrap_or_default().to_string());
    let after = dlopen(result).map(|e| e.lines().last().unwrap_or_default().to_string());
    assert_eq!(after, before, "{}", result.display());
}

/// `roc-obj-ls` of `file`: (bundle number, ID) → code object bytes.
fn roc_objects(file: &Path) -> Option<Vec<(usize, String, Vec<u8>)>> {
    let entries = roc_obj_ls(file)?.unwrap();
    Some(
        entries
            .into_iter()
            .map(|e| (e.bundle, e.id, read_range(file, e.offset, e.size)))
            .collect(),
    )
}

#[test]
fn rocsparse_for_one_and_for_two_targets() {
    let Some(lib) = rocsparse() else { return };
    if probe().is_none() {
        return;
    }
    let Some(original) = roc_objects(&lib) else {
        return;
    };
    let symbols = dynamic_symbols(&lib);
    let before = std::fs::metadata(&lib).unwrap().len();
    let host = "host-x86_64-unknown-linux";
    let (plus, minus) = (
        "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+",
        "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-",
    );
    let gfx1030 = "hipv4-amdgcn-amd-amdhsa--gfx1030";
    // A device named without its features (an MI250X, a bare gfx90a) may
    // run with xnack on or off: the code object of each setting stays.
    for (devices, ids) in [
        (&["gfx90a:sramecc+:xnack-"][..], vec![host, minus]),
        (
            &["gfx90a:sramecc+:xnack-", "gfx1030"][..],
            vec![host, gfx1030, minus],
        ),
        (&["MI250X"][..], vec![host, plus, minus]),
        (&["gfx90a"][..], vec![host, plus, minus]),
    ] {
        let out = slimmed(&lib, devices, &[]);
        let after = std::fs::metadata(&out).unwrap().len();
        assert!(after * 2 < before, "{devices:?}: {before} -> {after}");
        // roc-obj-ls lists the host entry and the kept targets of all 111
        // bundles, each code object byte-identical to the original's.
        let kept = roc_objects(&out).unwrap();
        let want: Vec<&(usize, String, Vec<u8>)> = original
            .iter()
            .filter(|(_, id, _)| ids.contains(&id.as_str()))
            .collect();
        assert_eq!(kept.len(), 111 * ids.len());
        assert_eq!(kept.len(), want.len());
        for (k, w) in kept.iter().zip(want) {
            assert_eq!((k.0, &k.1), (w.0, &w.1));
            assert!(k.2 == w.2, "bundle {} {}: bytes differ", k.0, k.1);
        }
        assert_eq!(dynamic_symbols(&out), symbols);
        elflint_clean(&lib, &out);
        dlopens_as_before(&lib, &out);
    }
}

/// `tests/programs/app.hip` with 32 KiB of device data per processor that
/// does not compress (an LCG's output, seeded per processor macro), so that
/// removing code objects frees whole pages, compressed or not.
fn big_app(archs: &[&str]) -> LinkedProgram {
    LinkedProgram::hip_text(archs, "app_big.hip", &big_source())
}

/// 32 KiB of device data that does not compress: an LCG's output from `seed`.
fn pad(seed: u64) -> String {
    let mut x = seed;
    let words: Vec<String> = (0..4096)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            format!("{x:#x}ull")
        })
        .collect();
    format!(
        "__attribute__((device)) unsigned long long pad[4096] = {{{}}};\n",
        words.join(",")
    )
}

fn big_source() -> String {
    std::fs::read_to_string(program("app.hip")).unwrap()
        + &format!(
            "#if defined(__gfx90a__)\n{}#elif defined(__gfx1100__)\n{}#elif defined(__gfx906__)\n{}#else\n{}#endif\n",
            pad(1),
            pad(2),
            pad(3),
            pad(4)
        )
}

/// [`big_source`] compiled by clang as a position-independent HIP object
/// for `archs`, in `dir`.
fn big_object(e: &Loader, dir: &Path, archs: &[&str]) -> PathBuf {
    let src = dir.join("app_big.hip");
    std::fs::write(&src, big_source()).unwrap();
    let obj = dir.join("app_big.o");
    run_ok(
        Command::new(&e.tc.clang)
            .args(["-x", "hip", "-c", "-fPIC", "-nogpulib", "-nogpuinc"])
            .args(archs.iter().map(|a| format!("--offload-arch={a}")))
            .arg(format!(
                "-I{}",
                workspace().join("tests/programs").display()
            ))
            .arg(format!("-I{}", workspace().join("ffi/include").display()))
            .arg(&src)
            .arg("-o")
            .arg(&obj),
    );
    obj
}

/// A position-independent object defining the HIP runtime calls a kernel's
/// host stub makes, which the loader does not provide, in `dir`.
fn hip_stub(e: &Loader, dir: &Path) -> PathBuf {
    let stub = dir.join("stub.c");
    std::fs::write(
        &stub,
        "int hipLaunchKernel(void) { return 0; }\nint __hipPopCallConfiguration(void) { return 0; }\n",
    )
    .unwrap();
    let obj = dir.join("stub.o");
    run_ok(
        Command::new(&e.tc.clang)
            .args(["-c", "-fPIC"])
            .arg(&stub)
            .arg("-o")
            .arg(&obj),
    );
    obj
}

/// A HIP object (`clang -c`) and an archive of it with a host object: slimmed
/// for one device, both still link (the archive's index follows its
/// members: `nm --print-armap` names the same symbols) and the program runs
/// with the kept image.
#[test]
fn objects_and_archives_still_link() {
    let Some(e) = loader() else { return };
    let Some(ar) = tool("llvm-ar", 22) else {
        return;
    };
    if probe().is_none() {
        return;
    }
    let dir = temp_dir();
    let obj = big_object(&e, &dir, &["gfx90a", "gfx1100", "gfx906"]);
    let stub_o = hip_stub(&e, &dir);
    let lib = dir.join("libapp.a");
    run_ok(
        Command::new(&ar)
            .arg("rcs")
            .arg(&lib)
            // The slimmed member first: the index's offsets of the member
            // after it move (the verifier reads the index by what it states).
            .arg(&obj)
            .arg(&stub_o),
    );
    let armap = |f: &Path| {
        String::from_utf8(run_ok(Command::new("nm").arg("--print-armap").arg(f)).stdout).unwrap()
    };
    for input in [&obj, &lib] {
        let out = slimmed(input, &["gfx1100"], &[]);
        assert!(
            std::fs::metadata(&out).unwrap().len() * 2 < std::fs::metadata(input).unwrap().len()
        );
        let exe = dir.join("app.bin");
        let mut link = Command::new(&e.tc.clang);
        if input == &lib {
            link.arg("-Wl,--whole-archive")
                .arg(&*out)
                .arg("-Wl,--no-whole-archive");
            let index = |t: String| -> Vec<String> {
                t.lines()
                    .filter(|l| l.contains(" in "))
                    .map(String::from)
                    .collect()
            };
            assert_eq!(index(armap(&out)), index(armap(input)));
        } else {
            link.arg(&*out).arg(&stub_o);
            elflint_clean(input, &out);
        }
        run_ok(
            link.arg(format!("-L{}", e.build_dir.display()))
                .arg("-loffload_loader")
                .arg(format!("-Wl,-rpath,{}", e.build_dir.display()))
                .arg("-o")
                .arg(&exe),
        );
        let text = output_text(Command::new(&exe).env("OFFLOAD_LOADER_DEVICES", "gfx1100"));
        assert!(
            text.contains("app device=gfx1100 selected=0 image=1 target=gfx1100"),
            "{text}"
        );
    }
}

#[test]
fn hip_programs_and_libraries_run_as_before_for_the_kept_device() {
    let Some(e) = loader() else { return };
    if probe().is_none() {
        return;
    }
    let archs = ["gfx90a:xnack-", "gfx90a:xnack+", "gfx1100", "gfx11-generic"];
    // Compressed or not; and a non-PIE program, where only the fat-binary
    // wrapper points at the code (no relocation does).
    for (compress, pie) in [(false, true), (true, true), (false, false)] {
        let mut recipe = big_app(&archs);
        if !pie {
            recipe = recipe.arg("-fno-pic").arg("-no-pie");
        }
        let exe = e.build(if compress { recipe.compress() } else { recipe });
        if !pie {
            let header = run_ok(Command::new("readelf").arg("-h").arg(&exe)).stdout;
            assert!(String::from_utf8_lossy(&header).contains("EXEC (Executable file)"));
        }
        let out = slimmed(&exe, &["gfx90a:sramecc+:xnack-"], &[]);
        assert!(std::fs::metadata(&out).unwrap().len() <= std::fs::metadata(&exe).unwrap().len());
        elflint_clean(&exe, &out);
        let run = |p: &Path| {
            let dir = scratch(&format!("slim-hip-{compress}-{pie}"));
            output_text(&mut e.fake_driver(p, "gfx90a:sramecc+:xnack-", &dir.join("log")))
        };
        let strip = |t: String| -> Vec<String> {
            lines(&t, "app device=")
                .into_iter()
                // The image index and size change; what was loaded must not.
                .map(|l| {
                    l.split(" selected=").next().unwrap().to_string()
                        + l.split(" target=")
                            .nth(1)
                            .map(|t| t.split(' ').next().unwrap_or(""))
                            .unwrap_or("")
                })
                .collect()
        };
        let (before, after) = (run(&exe), run(&out));
        assert_eq!(
            strip(before.clone()),
            strip(after.clone()),
            "{before}\n---\n{after}"
        );
        assert!(after.contains("kernel=0"), "{after}");
    }
}

#[test]
fn nvcc_programs_keep_the_selected_cubins_and_the_ptx_asked_for() {
    let Some(cuda) = cuda() else { return };
    let Some(e) = loader() else { return };
    if probe().is_none() {
        return;
    }
    // Plain entries, and --concat groups (which lose members: the group is
    // written again).
    for concat in [false, true] {
        let mut args = vec![
            "-gencode",
            "arch=compute_80,code=sm_80",
            "-gencode",
            "arch=compute_90a,code=sm_90a",
            "-gencode",
            "arch=compute_90,code=compute_90",
            "-gencode",
            "arch=compute_100a,code=sm_100a",
        ];
        if concat {
            args.push("--concat");
        }
        let Some(exe) = cuda.program_with_loader(&args) else {
            return;
        };
        nvcc_program_slims(&cuda, &e, &exe, concat);
    }
}

/// `exe` (sm_80, sm_90a, sm_100a cubins, compute_90 PTX) slimmed for 9.0
/// and 8.6 devices.
fn nvcc_program_slims(cuda: &Cuda, e: &Loader, exe: &Path, concat: bool) {
    let original = cuda.cuobjdump_extract(exe, "all");
    if concat {
        let grouped = cuda.cuobjdump_entries(exe).iter().any(|l| l.member);
        assert!(grouped, "nvcc --concat wrote no group");
    }
    // A 9.0 device selects the sm_90a cubin; the compute_90 PTX could JIT
    // for it too, and is kept with --keep-ptx; sm_80 and sm_100a go.
    let cubin_90a: Vec<_> = original
        .iter()
        .filter(|o| o.2 == "cubin" && o.1 == "sm_90a")
        .collect();
    let ptx: Vec<_> = original.iter().filter(|o| o.2 == "ptx").collect();
    assert_eq!(
        (cubin_90a.len(), ptx.len()),
        (1, 1),
        "{:?}",
        original.iter().map(|o| (&o.1, &o.2)).collect::<Vec<_>>()
    );
    for (extra, want) in [(&[][..], 1usize), (&["--keep-ptx"][..], 2)] {
        let out = slimmed(exe, &["sm_90"], extra);
        let kept = cuda.cuobjdump_extract(&out, "all");
        assert_eq!(
            kept.len(),
            want,
            "concat {concat}, {extra:?}: {:?}",
            kept.iter().map(|o| (&o.1, &o.2)).collect::<Vec<_>>()
        );
        for k in &kept {
            assert!(
                original
                    .iter()
                    .any(|o| o.1 == k.1 && o.2 == k.2 && o.3 == k.3),
                "{} {} is not the original's",
                k.1,
                k.2
            );
        }
        assert!(kept.iter().any(|k| k.2 == "cubin" && k.1 == "sm_90a"));
        elflint_clean(exe, &out);
    }
    // The slimmed program still runs on an 8.6 device (the sm_80 cubin).
    let out = slimmed(exe, &["sm_86"], &[]);
    let log = scratch("slim-nvcc").join("log");
    let text = output_text(&mut e.fake_cuda(&out, "8.6", &log));
    assert!(text.contains("kernel add_one: resolved"), "{text}");
}

#[test]
fn nvidia_and_cupy_libraries_shrink_and_list_as_kept() {
    if probe().is_none() {
        return;
    }
    if let (Some(cuda), Some(lib)) = (cuda(), nvidia_library("libcusparse.so.12")) {
        let out = slimmed(&lib, &["sm_90"], &[]);
        let before = std::fs::metadata(&lib).unwrap().len();
        let after = std::fs::metadata(&out).unwrap().len();
        assert!(after < before / 2, "{before} -> {after}");
        let listed = cuda.cuobjdump_list(&out);
        assert!(!listed.is_empty());
        assert!(
            listed
                .iter()
                .all(|(kind, _, arch)| kind == "ELF" && arch.starts_with("sm_90")),
            "{listed:?}"
        );
        assert_eq!(dynamic_symbols(&out), dynamic_symbols(&lib));
        elflint_clean(&lib, &out);
    }
    let Some(dir) = unpacked_wheel("cupy_rocm_7_0-14.2.0-", "cupy-rocm-7-0==14.2.0") else {
        return;
    };
    let mut libs: Vec<PathBuf> = walk_files(&dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "so"))
        .filter(|p| {
            offload_loader::MappedFile::open(p)
                .ok()
                .and_then(|f| f.offload_sections().ok())
                .is_some_and(|s| !s.is_empty())
        })
        .collect();
    libs.sort();
    assert!(!libs.is_empty());
    for lib in libs.iter().take(1) {
        let out = slimmed(lib, &["gfx90a"], &[]);
        assert!(std::fs::metadata(&out).unwrap().len() < std::fs::metadata(lib).unwrap().len());
        elflint_clean(lib, &out);
    }
}

fn walk_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk_files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn in_place_dry_run_links_and_exit_statuses() {
    let Some(e) = loader() else { return };
    if probe().is_none() {
        return;
    }
    let lib = e.build(big_app(&["gfx90a:xnack-", "gfx1100", "gfx906"]).shared_library("libbig.so"));
    let dir = temp_dir();
    let copy = dir.join("libk.so");
    std::fs::copy(&lib, &copy).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o750)).unwrap();
    std::fs::hard_link(&copy, dir.join("libk-hard.so")).unwrap();
    std::os::unix::fs::symlink("libk.so", dir.join("libk-link.so")).unwrap();
    let bytes = std::fs::read(&copy).unwrap();

    // --dry-run writes nothing, and reports the sizes.
    let (code, text) = slim(&[
        dir.to_str().unwrap(),
        "--device",
        "gfx1100",
        "--dry-run",
        "--json",
    ]);
    assert_eq!(code, 0, "{text}");
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        report["files"].as_array().unwrap().len(),
        1,
        "one file, three names: {text}"
    );
    assert!(report["total"]["after"].as_u64() < report["total"]["before"].as_u64());
    assert_eq!(std::fs::read(&copy).unwrap(), bytes);

    // No device: 2, nothing written. A device no image serves: 1.
    assert_eq!(
        slim(&[copy.to_str().unwrap(), "--in-place", "--device", "bogus"]).0,
        2
    );
    assert_eq!(slim(&[copy.to_str().unwrap()]).0, 2);
    let (code, text) = slim(&[copy.to_str().unwrap(), "--dry-run", "--device", "gfx1030"]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("left whole"), "{text}");

    // Two files of one name to one --output directory: the second is an error.
    let other = temp_dir();
    std::fs::copy(&lib, other.join("libk.so")).unwrap();
    let out = temp_dir();
    let (code, text) = slim(&[
        copy.to_str().unwrap(),
        other.join("libk.so").to_str().unwrap(),
        "--device",
        "gfx1100",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("would both be written to"), "{text}");
    assert!(
        out.join("libk.so").is_file(),
        "the first is still written: {text}"
    );

    // --in-place: one file, every name sees the result, the mode kept.
    let (code, text) = slim(&[dir.to_str().unwrap(), "--device", "gfx1100", "--in-place"]);
    assert_eq!(code, 0, "{text}");
    let after = std::fs::read(&copy).unwrap();
    assert!(after.len() < bytes.len());
    assert_eq!(std::fs::read(dir.join("libk-hard.so")).unwrap(), after);
    assert_eq!(std::fs::read(dir.join("libk-link.so")).unwrap(), after);
    assert!(std::fs::symlink_metadata(dir.join("libk-link.so"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(
        std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777,
        0o750
    );
    let leftovers: Vec<_> = std::fs::read_dir(&*dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    dlopens_as_before(&lib, &copy);
    // Slimming again changes nothing.
    let (code, text) = slim(&[copy.to_str().unwrap(), "--device", "gfx1100", "--in-place"]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(std::fs::read(&copy).unwrap(), after);
}

#[test]
fn the_same_input_gives_the_same_bytes_whatever_the_threads() {
    let Some(e) = loader() else { return };
    if probe().is_none() {
        return;
    }
    let lib = e.build(
        big_app(&["gfx90a:xnack-", "gfx1100", "gfx906"])
            .compress()
            .shared_library("libbig.so"),
    );
    let run = |threads: &str| {
        let dir = temp_dir();
        let out = Command::new(probe().unwrap())
            .args([
                "slim",
                lib.to_str().unwrap(),
                "--device",
                "gfx1100",
                "--output",
                dir.to_str().unwrap(),
            ])
            .env("RAYON_NUM_THREADS", threads)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        std::fs::read(dir.join(lib.file_name().unwrap())).unwrap()
    };
    assert_eq!(run("1"), run("2"));
}

/// An OpenMP program of clang-22's new driver: the image of the removed
/// processor goes with its entry of the device-image table (the count drops,
/// the later entries move down with their relocations); `llvm-objdump
/// --offloading` lists only the kept image, and the program registers and
/// resolves its variable on the kept device as before.
#[test]
fn openmp_programs_lose_the_device_images_no_device_loads() {
    let Some(e) = loader() else { return };
    if probe().is_none() {
        return;
    }
    let exe = e.build(LinkedProgram::openmp(
        &["gfx90a:xnack-", "gfx1100"],
        "examples/openmp_query.c",
    ));
    let out = slimmed(&exe, &["gfx1100"], &[]);
    assert!(std::fs::metadata(&out).unwrap().len() < std::fs::metadata(&exe).unwrap().len());
    // The program finds the library stand-in for libomptarget beside it.
    let shim = out.parent().unwrap().join("shim");
    std::fs::create_dir_all(&shim).unwrap();
    for f in std::fs::read_dir(exe.parent().unwrap().join("shim"))
        .unwrap()
        .flatten()
    {
        std::os::unix::fs::symlink(
            std::fs::read_link(f.path()).unwrap_or(f.path()),
            shim.join(f.file_name()),
        )
        .unwrap();
    }
    let listed = e.tc.objdump_offloading(&out).unwrap();
    let archs: Vec<&str> = listed.images.iter().map(|i| i.arch.as_str()).collect();
    assert_eq!(archs, ["gfx1100"]);
    elflint_clean(&exe, &out);
    let run = |p: &Path| {
        let dir = scratch("slim-omp");
        output_text(
            e.fake_driver(p, "gfx1100", &dir.join("log"))
                .env("OFFLOAD_LOADER_CUDA_LIBRARY", "/nonexistent"),
        )
    };
    let (before, after) = (run(&exe), run(&out));
    assert!(
        before.contains("omp device=gfx1100 selected=0 image=1 target=gfx1100"),
        "{before}"
    );
    assert!(
        after.contains("omp device=gfx1100 selected=0 image=0 target=gfx1100"),
        "{after}"
    );
    for text in [&before, &after] {
        assert!(
            text.contains("x=6 devices=1 libraries=1 symbols=2"),
            "{text}"
        );
        assert!(
            text.contains("omp device=gfx1100 variable=0 size=4"),
            "{text}"
        );
    }
}

/// A file with two offload sections (`.hip_fatbin` from a HIP object,
/// `.nv_fatbin` from an nvcc one), as a shared library, a relocatable
/// object (`ld -r`) and an archive of it: one run compacts both, for an AMD
/// and an NVIDIA device. `roc-obj-ls` and `cuobjdump` list exactly the kept
/// code objects, byte for byte; the library `dlopen`s with the same
/// dynamic symbols; the program linked from the object runs.
#[test]
fn one_run_compacts_every_offload_section() {
    let Some(cuda) = cuda() else { return };
    let Some(e) = loader() else { return };
    if probe().is_none() {
        return;
    }
    let dir = temp_dir();
    let hip_o = big_object(&e, &dir, &["gfx90a", "gfx1100"]);
    // 32 KiB of device data per cubin, so that a cubin gone frees pages.
    let words: Vec<String> = (0u64..4096)
        .map(|i| format!("{:#x}ull", i.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
        .collect();
    let cu_src = dir.join("lib.cu");
    std::fs::write(
        &cu_src,
        std::fs::read_to_string(program("cuda_lib.cu")).unwrap()
            + &format!(
                "__device__ unsigned long long cuda_pad[4096] = {{{}}};\n",
                words.join(",")
            ),
    )
    .unwrap();
    let cu_o = dir.join("cu.o");
    run_ok(
        cuda.nvcc_command()
            .args(["-c", "-cudart", "none", "-Xcompiler", "-fPIC"])
            .args(["-gencode", "arch=compute_80,code=sm_80"])
            .args(["-gencode", "arch=compute_90a,code=sm_90a"])
            .arg(&cu_src)
            .arg("-o")
            .arg(&cu_o),
    );
    let stub_o = hip_stub(&e, &dir);
    let link_loader = |cmd: &mut Command| {
        cmd.arg(format!("-L{}", e.build_dir.display()))
            .arg("-loffload_loader")
            .arg(format!("-Wl,-rpath,{}", e.build_dir.display()))
            // nvcc's registration code guards its statics (__cxa_guard_*).
            .arg("-lstdc++");
    };
    let lib = dir.join("libmixed.so");
    let mut cmd = Command::new(&e.tc.clang);
    cmd.arg("-shared").args([&hip_o, &cu_o, &stub_o]);
    link_loader(&mut cmd);
    run_ok(cmd.arg("-o").arg(&lib));
    let obj = dir.join("mixed.o");
    run_ok(
        Command::new("ld")
            .arg("-r")
            .args([&hip_o, &cu_o])
            .arg("-o")
            .arg(&obj),
    );
    let archive = dir.join("libmixed.a");
    run_ok(Command::new("ar").arg("rcs").arg(&archive).arg(&obj));

    let devices = ["--device", "gfx1100", "--device", "sm_90"];
    for input in [&lib, &obj, &archive] {
        let out_dir = temp_dir();
        let mut args = vec![
            input.to_str().unwrap(),
            "--output",
            out_dir.to_str().unwrap(),
            "--json",
        ];
        args.extend(devices);
        let (code, text) = slim(&args);
        assert_eq!(code, 0, "{text}");
        let report: serde_json::Value = serde_json::from_str(&text).unwrap();
        let file = &report["files"][0];
        assert_eq!(
            file["sections_left"].as_array().map(Vec::len),
            Some(0),
            "{text}"
        );
        let rewritten: Vec<&str> = file["containers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["outcome"] == "rewritten")
            .map(|c| c["section"].as_str().unwrap())
            .collect();
        assert!(
            rewritten.iter().any(|s| s.contains(".hip_fatbin"))
                && rewritten.iter().any(|s| s.contains(".nv_fatbin")),
            "{input:?}: {text}"
        );
        let out = out_dir.join(input.file_name().unwrap());
        // Each section freed at least 32 KiB.
        let (before, after) = (
            std::fs::metadata(input).unwrap().len(),
            std::fs::metadata(&out).unwrap().len(),
        );
        assert!(after + 2 * 32768 < before, "{input:?}: {before} -> {after}");
        // cuobjdump: the sm_90a cubin alone, the original's bytes.
        let kept = cuda.cuobjdump_extract(&out, "all");
        let original = cuda.cuobjdump_extract(input, "all");
        assert_eq!(kept.len(), 1, "{input:?}: {kept:?}");
        assert_eq!(kept[0].1, "sm_90a");
        assert!(original
            .iter()
            .any(|o| o.1 == kept[0].1 && o.3 == kept[0].3));
        if input == &lib {
            // roc-obj-ls: the host entry and gfx1100, the original's bytes.
            if let (Some(before), Some(after)) = (roc_objects(input), roc_objects(&out)) {
                let ids: Vec<&str> = after.iter().map(|k| k.1.as_str()).collect();
                assert_eq!(ids.len(), 2, "{ids:?}");
                assert!(ids[0].starts_with("host-x86_64"), "{ids:?}");
                assert_eq!(ids[1], "hipv4-amdgcn-amd-amdhsa--gfx1100");
                for k in &after {
                    assert!(before.iter().any(|b| b.1 == k.1 && b.2 == k.2));
                }
            }
            assert_eq!(dynamic_symbols(&out), dynamic_symbols(input));
            elflint_clean(input, &out);
            assert_eq!(dlopen(input), None);
            assert_eq!(dlopen(&out), None);
        }
        if input == &obj {
            elflint_clean(input, &out);
            let exe = dir.join("mixed");
            let mut cmd = Command::new(&e.tc.clang);
            cmd.arg(&out).arg(&stub_o);
            link_loader(&mut cmd);
            run_ok(cmd.arg("-o").arg(&exe));
            let text = output_text(Command::new(&exe).env("OFFLOAD_LOADER_DEVICES", "gfx1100"));
            assert!(text.contains("app device=gfx1100"), "{text}");
            assert!(text.contains("target=gfx1100"), "{text}");
        }
    }
}

/// A library linked with 2 MiB pages (`-z max-page-size=0x200000`, as
/// NVIDIA's and many vendors' libraries are): the code objects that go free
/// some 64 KiB, less than one page of the segment that holds them, which
/// moves in the file only by whole pages. The report says so in those
/// words (not "less than a page"), and the bytes become holes: the file
/// keeps its length, the disk drops the blocks, and the bundler still
/// lists and unbundles the kept code object byte for byte.
#[test]
fn bytes_that_free_no_segment_page_become_holes_and_the_report_says_why() {
    let Some(e) = loader() else { return };
    if probe().is_none() {
        return;
    }
    let lib = e.build(
        big_app(&["gfx90a", "gfx1100", "gfx906"])
            .shared_library("libbig2m.so")
            .arg("-Wl,-z,max-page-size=0x200000")
            .arg("-Wl,-z,separate-loadable-segments"),
    );
    holes_in_hip_fatbin(
        &e,
        &lib,
        "gfx90a:sramecc+:xnack-",
        "do not free one of the 2097152-byte pages its segment is aligned to",
        65536,
        "hipv4-amdgcn-amd-amdhsa--gfx90a",
    );
}

/// `lib` slimmed for `device` into a fresh directory where its
/// `.hip_fatbin` can only get holes: the report names the section, a reason
/// that says `why` and more than `bytes` bytes of holes; the result keeps
/// the file's length and every section header while the disk drops at
/// least that much; `clang-offload-bundler` on the section lists the host
/// entry and `kept` alone, which it unbundles as the original's bytes.
fn holes_in_hip_fatbin(
    e: &Loader,
    lib: &Path,
    device: &str,
    why: &str,
    bytes: u64,
    kept: &str,
) -> Slimmed {
    let out = slimmed(lib, &[device], &["--json"]);
    let (code, text) = slim(&[
        lib.to_str().unwrap(),
        "--device",
        device,
        "--dry-run",
        "--json",
    ]);
    assert_eq!(code, 0, "{text}");
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    let holes = &report["files"][0]["holes"][0];
    assert_eq!(holes["section"], ".hip_fatbin", "{text}");
    assert!(holes["reason"].as_str().unwrap().contains(why), "{text}");
    assert!(holes["bytes"].as_u64().unwrap() > bytes, "{text}");
    use std::os::unix::fs::MetadataExt;
    let (before, after) = (
        std::fs::metadata(lib).unwrap(),
        std::fs::metadata(&out).unwrap(),
    );
    assert_eq!(after.len(), before.len());
    assert!(
        after.blocks() * 512 + bytes <= before.blocks() * 512,
        "the disk keeps the blocks: {} -> {}",
        before.blocks(),
        after.blocks()
    );
    assert_eq!(e.tc.sections(&out).unwrap(), e.tc.sections(lib).unwrap());
    let section = |f: &Path| temp_file(&e.tc.section_bytes(f, ".hip_fatbin").unwrap());
    let (old, new) = (section(lib), section(&out));
    let mut ids = e.tc.bundler_list(&new).unwrap();
    ids.sort();
    assert_eq!(ids, [kept, "host-x86_64-unknown-linux-gnu-"]);
    assert!(e.tc.unbundle(&new, kept).unwrap() == e.tc.unbundle(&old, kept).unwrap());
    out
}

/// A file that gives its offload containers' bytes to a second owner (here
/// `.comment`'s header laid over them, as a crafted or damaged file does;
/// a section name table so laid renames sections when they change) is
/// left as it was: a shared library, an executable, an object and an
/// archive of it with the containers in `.hip_fatbin`, and the library with
/// them among host data (the section renamed `.rodata.kernels`). The report
/// names the section that claims them, and the file keeps every byte.
#[test]
fn containers_whose_bytes_another_section_claims_are_left_alone() {
    let Some(e) = loader() else { return };
    let Some(objcopy) = tool("llvm-objcopy", 22) else {
        return;
    };
    if probe().is_none() {
        return;
    }
    let lib = e.build(big_app(&["gfx90a", "gfx1100"]).shared_library("libclaimed.so"));
    let dir = temp_dir();
    let renamed = dir.join("librenamed.so");
    run_ok(
        Command::new(&objcopy)
            .arg("--rename-section=.hip_fatbin=.rodata.kernels")
            .arg(&lib)
            .arg(&renamed),
    );
    let exe = e.build(big_app(&["gfx90a", "gfx1100"]));
    let obj = big_object(&e, &dir, &["gfx90a", "gfx1100"]);
    let files = [
        (lib.clone(), ".hip_fatbin"),
        (renamed, ".rodata.kernels"),
        (exe, ".hip_fatbin"),
        (obj, ".hip_fatbin"),
    ];
    let mut crafted_object = None;
    for (n, (file, section)) in files.into_iter().enumerate() {
        // Each slims, as it is.
        let (code, text) = slim(&[file.to_str().unwrap(), "--device", "gfx1100", "--dry-run"]);
        assert_eq!(code, 0, "{section}: {text}");
        let name = file.file_name().unwrap().to_str().unwrap();
        let crafted = dir.join(format!("crafted{n}-{name}"));
        std::fs::copy(&file, &crafted).unwrap();
        let offload = e.tc.section(&crafted, section).unwrap();
        let comment = e.tc.section(&crafted, ".comment").unwrap();
        let mut bytes = std::fs::read(&crafted).unwrap();
        let shoff = u64::from_le_bytes(bytes[0x28..0x30].try_into().unwrap());
        let at = (shoff + comment.index * 64 + 0x18) as usize;
        bytes[at..at + 8].copy_from_slice(&(offload.offset + 0x100).to_le_bytes());
        std::fs::write(&crafted, &bytes).unwrap();
        // llvm-readobj reads the overlap as written.
        assert_eq!(
            e.tc.section(&crafted, ".comment").unwrap().offset,
            offload.offset + 0x100
        );

        let (left, text) = left_in_place(&crafted);
        assert_eq!(left["section"], section, "{text}");
        let reason = left["reason"].as_str().unwrap();
        assert!(
            reason.contains(&format!("also section {} (.comment)", comment.index)),
            "{text}"
        );
        if name.ends_with(".o") {
            crafted_object = Some((crafted, comment.index));
        }
    }

    // The crafted object in an archive: its member is left, and the archive.
    let (object, comment) = crafted_object.unwrap();
    let archive = dir.join("libcrafted.a");
    run_ok(Command::new("ar").arg("rcs").arg(&archive).arg(&object));
    let (left, text) = left_in_place(&archive);
    let member = object.file_name().unwrap().to_str().unwrap();
    assert_eq!(left["section"], format!("{member}(.hip_fatbin)"), "{text}");
    assert!(
        left["reason"]
            .as_str()
            .unwrap()
            .contains(&format!("also section {comment} (.comment)")),
        "{text}"
    );
}

/// A file whose offload section is also a table other sections read (the
/// section name table, named by `e_shstrndx`; a symbol table's string
/// table, named by its `sh_link`), as a crafted or damaged file makes it,
/// is left as it was: rewriting the containers would rename its sections or
/// symbols. A shared library, an executable and an object; the report says
/// which table.
#[test]
fn an_offload_section_that_is_also_a_table_others_read_is_left_alone() {
    let Some(e) = loader() else { return };
    if probe().is_none() {
        return;
    }
    let dir = temp_dir();
    let lib = e.build(big_app(&["gfx90a", "gfx1100"]).shared_library("libtable.so"));
    let exe = e.build(big_app(&["gfx90a", "gfx1100"]));
    let obj = big_object(&e, &dir, &["gfx90a", "gfx1100"]);
    for file in [lib, exe, obj] {
        let name = file.file_name().unwrap().to_str().unwrap().to_string();
        let offload = e.tc.section(&file, ".hip_fatbin").unwrap();
        let symbols =
            e.tc.section(&file, ".symtab")
                .or_else(|| e.tc.section(&file, ".dynsym"))
                .unwrap();
        let bytes = std::fs::read(&file).unwrap();
        let shoff = u64::from_le_bytes(bytes[0x28..0x30].try_into().unwrap());

        // The section names are read from the offload section.
        let mut names = bytes.clone();
        names[0x3e..0x40].copy_from_slice(&(offload.index as u16).to_le_bytes());
        let crafted = dir.join(format!("names-{name}"));
        std::fs::write(&crafted, &names).unwrap();
        let (left, text) = left_in_place(&crafted);
        let reason = left["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("are also the section name table's"),
            "{name}: {text}"
        );

        // The symbol table's strings are read from it.
        let mut linked = bytes.clone();
        let at = (shoff + symbols.index * 64 + 0x28) as usize;
        linked[at..at + 4].copy_from_slice(&(offload.index as u32).to_le_bytes());
        let crafted = dir.join(format!("linked-{name}"));
        std::fs::write(&crafted, &linked).unwrap();
        let (left, text) = left_in_place(&crafted);
        assert_eq!(left["section"], ".hip_fatbin", "{name}: {text}");
        let reason = left["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains(&format!(
                "are also the table section {} ({}) links to",
                symbols.index, symbols.name
            )),
            "{name}: {text}"
        );
    }
}

/// `file` slimmed in place for gfx1100 (`--json`), which must leave every
/// byte of it and exit 0: the first section it reports as left, and the
/// report.
fn left_in_place(file: &Path) -> (serde_json::Value, String) {
    let bytes = std::fs::read(file).unwrap();
    let (code, text) = slim(&[
        file.to_str().unwrap(),
        "--device",
        "gfx1100",
        "--in-place",
        "--json",
    ]);
    let name = file.display();
    assert!(
        std::fs::read(file).unwrap() == bytes,
        "{name} changed: {text}"
    );
    assert_eq!(
        code, 0,
        "{name}: done, the section reported as left: {text}"
    );
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    (report["files"][0]["sections_left"][0].clone(), text)
}

/// A HIP library for a machine whose relocations the patcher does not
/// rewrite (ppc64le: clang-22 and ld.lld build it here): the section cannot
/// be compacted, so it is rewritten in place. The file keeps its length and
/// every section header; the removed code object's bytes are holes, which
/// the disk does not keep; `clang-offload-bundler` lists the host and the
/// kept target and unbundles the original's bytes. The same for an NVIDIA
/// fat binary in its place, checked with `cuobjdump`.
#[test]
fn a_section_that_cannot_be_compacted_gets_holes() {
    let Some(e) = loader() else { return };
    let Some(lld) = tool("ld.lld", 22) else {
        return;
    };
    if probe().is_none() {
        return;
    }
    let dir = temp_dir();
    // No headers: the target's C library is not installed here.
    let source = format!(
        "typedef unsigned long size_t;\n\
         struct dim3 {{ unsigned x, y, z; }};\n\
         extern \"C\" int hipLaunchKernel(const void *, dim3, dim3, void **, size_t, void *);\n\
         extern \"C\" unsigned __hipPopCallConfiguration(dim3 *, dim3 *, size_t *, void **);\n\
         #if defined(__gfx90a__)\n{}#else\n{}#endif\n\
         extern \"C\" __attribute__((global)) void k(unsigned long long *x) {{ x[0] = pad[x[1]]; }}\n",
        pad(1),
        pad(2)
    );
    let src = dir.join("k.hip");
    std::fs::write(&src, source).unwrap();
    let obj = dir.join("k.o");
    run_ok(
        Command::new(&e.tc.clang)
            .args(["--target=powerpc64le-linux-gnu", "-x", "hip", "-fPIC", "-c"])
            .args(["--offload-arch=gfx90a", "--offload-arch=gfx1100"])
            .args(["-nogpulib", "-nogpuinc"])
            .arg(&src)
            .arg("-o")
            .arg(&obj),
    );
    let lib = dir.join("libk.so");
    run_ok(
        Command::new(&lld)
            .arg("-shared")
            .arg(&obj)
            .arg("-o")
            .arg(&lib),
    );

    // One gfx90a code object (32 KiB of data and its code) is gone.
    holes_in_hip_fatbin(
        &e,
        &lib,
        "gfx1100",
        "machine 21",
        32768,
        "hipv4-amdgcn-amd-amdhsa--gfx1100",
    );
    let old = temp_file(&e.tc.section_bytes(&lib, ".hip_fatbin").unwrap());
    assert!(e.tc.bundler_list(&old).unwrap().len() == 3);

    // The same library with an nvcc fat binary (sm_80 and sm_90a cubins of
    // 24 KiB of data each) in place of its bundle, as `.nv_fatbin`
    // (llvm-objcopy keeps the layout): slimmed for sm_90, cuobjdump lists and
    // extracts the sm_90a cubin alone, the original's bytes, past the zeros
    // that follow the rewritten fat binary.
    let Some(cuda) = cuda() else { return };
    let Some(objcopy) = tool("llvm-objcopy", 22) else {
        return;
    };
    let cu = dir.join("f.cu");
    std::fs::write(
        &cu,
        "__device__ unsigned long long pad[3000] = {1, 2, 3};\n\
         extern \"C\" __global__ void add_one(int *x) { x[threadIdx.x] += (int)pad[threadIdx.x]; }\n",
    )
    .unwrap();
    let fatbin = dir.join("f.fatbin");
    run_ok(
        cuda.nvcc_command()
            .args(["-fatbin", "-Xfatbin", "-compress=false"])
            .args(["-gencode", "arch=compute_80,code=sm_80"])
            .args(["-gencode", "arch=compute_90a,code=sm_90a"])
            .arg(&cu)
            .arg("-o")
            .arg(&fatbin),
    );
    let mut bytes = std::fs::read(&fatbin).unwrap();
    let size = e.tc.section(&lib, ".hip_fatbin").unwrap().size as usize;
    assert!(bytes.len() <= size, "the fat binary does not fit");
    bytes.resize(size, 0);
    let padded = dir.join("f.padded");
    std::fs::write(&padded, &bytes).unwrap();
    let nv = dir.join("libnv.so");
    std::fs::copy(&lib, &nv).unwrap();
    run_ok(
        Command::new(&objcopy)
            .arg(format!("--update-section=.hip_fatbin={}", padded.display()))
            .arg("--rename-section=.hip_fatbin=.nv_fatbin")
            .arg(&nv),
    );
    let out_dir = temp_dir();
    let (code, text) = slim(&[
        nv.to_str().unwrap(),
        "--device",
        "sm_90",
        "--output",
        out_dir.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0, "{text}");
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        report["files"][0]["holes"][0]["section"], ".nv_fatbin",
        "{text}"
    );
    let out = out_dir.join("libnv.so");
    assert_eq!(
        std::fs::metadata(&out).unwrap().len(),
        std::fs::metadata(&nv).unwrap().len()
    );
    let kept = cuda.cuobjdump_extract(&out, "all");
    let original = cuda.cuobjdump_extract(&nv, "all");
    assert_eq!(original.len(), 2, "{original:?}");
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0].1, "sm_90a");
    assert!(original.iter().any(|o| o.1 == "sm_90a" && o.3 == kept[0].3));
}

/// AMD's portable code: a clang-22 bundle of `amdgcnspirv` and `gfx90a`
/// (object, executable, shared library). The probe gives gfx1100 the SPIR-V,
/// compiled at load, and gfx90a its code object, and the file loads on both
/// (HIP's rule: exit 0); slim for gfx90a removes the SPIR-V, and with
/// `--keep-portable` (or its older name `--keep-ptx`) keeps it, the kept
/// entries byte-identical to the original's as `roc-obj-ls` finds them.
#[test]
fn amd_spirv_is_chosen_where_no_code_object_runs_and_kept_on_request() {
    let Some(tc) = toolchain() else { return };
    let Some(probe) = probe() else { return };
    let spirv = "hipv4-spirv64-amd-amdhsa--amdgcnspirv";
    let native = "hipv4-amdgcn-amd-amdhsa--gfx90a";
    for output in [Output::Object, Output::Executable, Output::SharedLibrary] {
        let recipe = Hip::new(&["amdgcnspirv", "gfx90a"])
            .arg("-use-spirv-backend")
            .output(output);
        let file = tc.build(recipe);
        let out = Command::new(&probe)
            .args([
                "--json",
                "--device",
                "gfx1100",
                "--device",
                "gfx90a:sramecc+:xnack-",
            ])
            .arg(&file)
            .env_remove("OFFLOAD_LOADER_DEVICES")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{output:?}");
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let c = &report["objects"][0]["containers"][0];
        let id = |d: usize| {
            let i = c["selected"][d]["image"].as_u64().unwrap() as usize;
            c["images"][i]["bundle_id"].as_str().unwrap().to_string()
        };
        assert_eq!((id(0), id(1)), (spirv.into(), native.into()), "{output:?}");
        let how = c["selected"][0]["compiled_at_load"].as_str().unwrap();
        assert!(how.contains("SPIR-V") && how.contains("comgr 3.0"), "{how}");
        let spirv_at = c["images"]
            .as_array()
            .unwrap()
            .iter()
            .position(|i| i["bundle_id"] == spirv)
            .unwrap();
        assert_eq!(c["images"][spirv_at]["code"], "spir-v");
        for v in report["objects"][0]["verdicts"].as_array().unwrap() {
            assert_eq!(v["verdict"], "loads", "{output:?}");
        }
        // roc-obj-ls lists each bundle's entries and where they lie.
        let entries = |f: &Path| -> Vec<(String, Vec<u8>)> {
            roc_objects(f)
                .unwrap()
                .into_iter()
                .map(|(_, id, bytes)| (id, bytes))
                .filter(|(id, _)| !id.starts_with("host-"))
                .collect()
        };
        let original = entries(&file);
        assert!(original.iter().any(|(i, _)| i == spirv), "{output:?}");
        for (extra, keeps_spirv) in [
            (&[][..], false),
            (&["--keep-portable"][..], true),
            (&["--keep-ptx"][..], true),
        ] {
            let out = slimmed(&file, &["gfx90a:sramecc+:xnack-"], extra);
            let kept = entries(&out);
            let ids: Vec<&str> = kept.iter().map(|(i, _)| i.as_str()).collect();
            let want: Vec<&str> = if keeps_spirv {
                vec![spirv, native]
            } else {
                vec![native]
            };
            assert_eq!(ids, want, "{output:?} {extra:?}");
            // Byte for byte the original's entries.
            for (id, bytes) in &kept {
                let theirs = &original.iter().find(|(i, _)| i == id).unwrap().1;
                assert!(bytes == theirs, "{output:?} {extra:?}: {id}");
            }
        }
    }
}
