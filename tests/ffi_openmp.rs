//! OpenMP offload programs compiled by clang-22 (`-fopenmp --offload-arch`),
//! registered through `__tgt_register_lib` by the library.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::*;

#[test]
fn openmp_program_registers_images_and_entries() {
    let Some(e) = loader() else { return };
    let dir = scratch("omp");
    // No libomptarget is packaged: the library stands in for it.
    let exe = e.build(LinkedProgram::openmp(
        &["gfx90a:xnack-", "gfx1100"],
        "examples/openmp_query.c",
    ));
    let log = dir.join("log");
    let out = run_ok(
        e.fake_driver(&exe, "gfx90a:sramecc+:xnack-;gfx1100", &log)
            .env("OFFLOAD_LOADER_CUDA_LIBRARY", "/nonexistent"),
    );
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    // The host fallback ran the region; one kernel and one variable registered.
    assert!(
        text.contains("x=6 devices=2 libraries=1 symbols=2"),
        "{text}"
    );
    assert!(
        text.contains("omp device=gfx90a:sramecc+:xnack- selected=0 image=0 target=gfx90a:xnack-"),
        "{text}"
    );
    assert!(
        text.contains("omp device=gfx1100 selected=0 image=1 target=gfx1100"),
        "{text}"
    );
    assert!(
        text.contains("omp device=gfx1100 variable=0 size=4"),
        "{text}"
    );
    assert!(text.contains("loads [0] openmp-amdgcn-amd-amdhsa--gfx90a:xnack-; not [1] gfx1100: it is built for gfx1100, the device is gfx90a"), "{text}");
    assert!(text.contains("unregistered"), "{text}");
    // Each device loaded the ELF inside its offload binary, once.
    let loads = std::fs::read_to_string(&log).unwrap();
    assert_eq!(loads.lines().count(), 2, "{loads}");
}

/// The images of an OpenMP program name their GPUs' vendor: one built for
/// AMD GPUs only opens no NVIDIA driver (detection is asked for AMD only).
#[test]
fn openmp_program_for_amd_detects_amd_gpus_only() {
    let Some(e) = loader() else { return };
    let dir = scratch("omp-vendors");
    let exe = e.build(LinkedProgram::openmp(
        &["gfx90a:xnack-", "gfx1100"],
        "examples/openmp_query.c",
    ));
    let mut cmd = e.fake_driver(&exe, "gfx1100", &dir.join("log"));
    cmd.env_remove("OFFLOAD_LOADER_CUDA_LIBRARY")
        .env("OFFLOAD_LOADER_LOG", "offload_detect=debug");
    let out = output_text(&mut cmd);
    assert!(out.contains("x=6 devices=1 libraries=1"), "{out}");
    assert!(
        out.contains("cuda: skipped: no NVIDIA GPU asked for"),
        "{out}"
    );
}

/// A program of the clang-offload-wrapper generation (clang-14): no offload
/// section, the image behind a `__tgt_bin_desc` whose pointers a PIE file
/// fills through dynamic relocations. The probe finds the descriptor from
/// the file and names the image the runtime registers, with the same size.
#[test]
fn clang_14_wrapper_generation_probe_and_runtime_agree() {
    let Some(e) = loader() else { return };
    let Some(clang14) = tool("clang", 14) else {
        return;
    };
    let Some(lld14) = tool("lld", 14) else { return };
    let Some(probe) = built("offload-probe") else {
        return;
    };
    let dir = scratch("omp-clang14");
    // No device runtime is packaged: the device link must accept undefined
    // symbols, so clang-14 runs from a copy of its tool directory whose lld
    // says so.
    let tools = dir.join("tools");
    let _ = std::fs::remove_dir_all(&tools);
    std::fs::create_dir_all(&tools).unwrap();
    for entry in std::fs::read_dir(clang14.parent().unwrap()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap();
        if name != "lld" && name != "ld.lld" {
            std::os::unix::fs::symlink(&path, tools.join(name)).unwrap();
        }
    }
    std::fs::write(
        tools.join("lld"),
        format!(
            "#!/bin/sh\nexec {} \"$@\" --unresolved-symbols=ignore-all\n",
            lld14.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        tools.join("lld"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::os::unix::fs::symlink("lld", tools.join("ld.lld")).unwrap();
    let shim = dir.join("shim");
    std::fs::create_dir_all(&shim).unwrap();
    let _ = std::fs::remove_file(shim.join("libomptarget.so"));
    std::os::unix::fs::symlink(
        e.build_dir.join("liboffload_loader.so"),
        shim.join("libomptarget.so"),
    )
    .unwrap();
    // Position-independent (the descriptor in .data.rel.ro, its pointers
    // filled by relative relocations) and position-dependent (the descriptor
    // in .rodata, its pointers in the file).
    for (name, pic) in [
        ("app", &[][..]),
        ("app-no-pie", &["-fno-pic", "-no-pie"][..]),
    ] {
        let exe = dir.join(name);
        run_ok(
            std::process::Command::new(tools.join("clang"))
                .args([
                    "-fopenmp",
                    "-fopenmp-targets=amdgcn-amd-amdhsa",
                    "-Xopenmp-target=amdgcn-amd-amdhsa",
                    "-march=gfx906",
                    "-nogpulib",
                ])
                .arg(format!("-I{}", workspace().join("ffi/include").display()))
                .arg(program("omp_wrapper.c"))
                .arg(format!("-L{}", shim.display()))
                .arg(format!("-Wl,-rpath,{}", shim.display()))
                .args(pic)
                .arg("-o")
                .arg(&exe),
        );

        // The probe, from the file.
        let out = run_ok(
            std::process::Command::new(&probe)
                .arg(&exe)
                .args(["--device", "gfx906", "--json"]),
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let c = &report["objects"][0]["containers"][0];
        assert_eq!(
            (c["section"].as_str(), c["format"].as_str()),
            (Some("__tgt_bin_desc"), Some("descriptor")),
            "{name}: {c}"
        );
        let image = &c["images"][0];
        assert_eq!(
            image["bundle_id"], "openmp-amdgcn-amd-amdhsa--gfx906",
            "{c}"
        );
        assert_eq!(c["selected"][0]["image"], 0, "{c}");
        let (offset, size) = (
            image["offset"].as_u64().unwrap() as usize,
            image["size"].as_u64().unwrap() as usize,
        );
        let bytes = std::fs::read(&exe).unwrap();
        let code = &bytes[offset..offset + size];
        // A whole AMDGPU code object (e_machine 224) whose section headers end
        // where the image ends: e_shoff + e_shnum * e_shentsize == size.
        assert_eq!(&code[..4], b"\x7fELF");
        assert_eq!(u16::from_le_bytes([code[18], code[19]]), 224);
        let shoff = u64::from_le_bytes(code[40..48].try_into().unwrap()) as usize;
        let shnum = u16::from_le_bytes([code[60], code[61]]) as usize;
        assert_eq!(shoff + shnum * 64, size);

        // The runtime, from the registration the program's constructor makes.
        let text = String::from_utf8(
            run_ok(
                std::process::Command::new(&exe)
                    .env("OFFLOAD_LOADER_DEVICES", "gfx906")
                    .env_remove("OFFLOAD_LOADER_HSA_LIBRARY"),
            )
            .stdout,
        )
        .unwrap();
        assert!(text.contains("x=42 devices=1 libraries=1"), "{text}");
        assert!(
            text.contains(&format!(
                "wrapper device=gfx906 selected=0 image=0 target=gfx906 size={size}"
            )),
            "{text}"
        );
    }
}

/// LLVM 22's real libomptarget (Debian `liboffload-22`), or `None` after
/// reporting it missing.
fn libomptarget() -> Option<std::path::PathBuf> {
    let lib = std::path::PathBuf::from("/usr/lib/llvm-22/lib/libomptarget.so");
    if lib.exists() {
        Some(lib)
    } else {
        missing("LLVM 22's libomptarget", "liboffload-22-dev");
        None
    }
}

/// An OpenMP program with `target`, `target data`, `target update`, a
/// `declare mapper` and `omp_target_alloc`, linked as clang links it with
/// the library first (`-loffload_loader`, then clang's `-lomp
/// -lomptarget`): `__tgt_register_lib` binds to the library, the rest to
/// libomptarget, which the library hands the registration on to. Without
/// that the first target region died in libomptarget (never initialised).
/// It prints what it prints without the library (host fallback: no GPU).
#[test]
fn beside_libomptarget_programs_run_as_without_the_library() {
    let Some(e) = loader() else { return };
    let Some(_) = libomptarget() else { return };
    let program = || LinkedProgram::openmp(&["gfx90a", "gfx1100"], "tests/programs/omp_beside.c");
    let plain = e.build(program().without_loader());
    let beside = e.build(program().beside_libomptarget());
    // Linked as promised: this library is needed before libomptarget.
    let needed = output_text(Command::new("readelf").args(["-dW"]).arg(&beside));
    let at = |name: &str| {
        needed
            .find(name)
            .unwrap_or_else(|| panic!("{name}: {needed}"))
    };
    assert!(at("liboffload_loader") < at("libomptarget"), "{needed}");
    let expected = "sum=124 v=10,20,30,40 alloc=1 devices=0\n";
    let out = run_ok(&mut Command::new(&plain));
    assert_eq!(String::from_utf8_lossy(&out.stdout), expected);
    let dir = scratch("omp-beside");
    let out =
        run_ok(&mut e.fake_driver(&beside, "gfx90a:sramecc+:xnack-;gfx1100", &dir.join("log")));
    assert_eq!(String::from_utf8_lossy(&out.stdout), expected);
    // OFFLOAD_LOADER_INFO names the image each device gets, though the
    // program never asks this library anything (said at exit).
    let err = String::from_utf8_lossy(&out.stderr);
    for (device, image) in [
        ("0 (gfx90a:sramecc+:xnack-)", "gfx90a"),
        ("1 (gfx1100)", "gfx1100"),
    ] {
        let said = format!("OpenMP device {device} loads [");
        let line = err
            .lines()
            .find(|l| l.contains(&said))
            .unwrap_or_else(|| panic!("{said}: {err}"));
        assert!(
            line.contains(&format!("] openmp-amdgcn-amd-amdhsa--{image}")),
            "{line}"
        );
    }
}

/// The descriptor libomptarget is handed has its images in the order where
/// the first compatible image is this library's choice. A program that
/// lays out its own descriptor (tests/programs/omp_descriptor.c, as a
/// compiler other than clang-22 may: clang-22 sorts its table so that
/// first-fit and best-fit agree on AMD GPUs) lists `gfx11-generic` before
/// `gfx1100` and `gfx9-generic` before `gfx906:xnack-`, where first-fit
/// gives a gfx1100 the generic code. A second definition of
/// `__tgt_register_lib` between this library and libomptarget
/// (tests/programs/omp_order.c) prints the order it is handed, and checks
/// unregistration hands the same table back; it passes both calls on.
#[test]
fn libomptarget_is_handed_images_in_preference_order() {
    let Some(e) = loader() else { return };
    let Some(_) = libomptarget() else { return };
    let dir = scratch("omp-order");
    let clang = |args: &[&str]| {
        let mut cmd = Command::new(&e.tc.clang);
        cmd.current_dir(&dir).args(args);
        run_ok(&mut cmd);
    };
    let order = program("omp_order.c");
    clang(&[
        "-shared",
        "-fPIC",
        "-o",
        "libvendor_order.so",
        order.to_str().unwrap(),
    ]);
    let written = ["gfx11-generic", "gfx1100", "gfx9-generic", "gfx906:xnack-"];
    let mut args = vec![program("omp_descriptor.c").display().to_string()];
    args.extend(code_objects(&e, &dir, &written));
    let build = e.build_dir.display().to_string();
    args.extend([
        format!("-L{build}"),
        "-loffload_loader".into(),
        format!("-Wl,-rpath,{build}"),
        "-L.".into(),
        "-lvendor_order".into(),
        "-Wl,-rpath,$ORIGIN".into(),
        "-L/usr/lib/llvm-22/lib".into(),
        "-lomptarget".into(),
        "-o".into(),
        "descriptor".into(),
    ]);
    clang(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let out = run_ok(&mut Command::new(dir.join("descriptor")));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "registered\n");
    let flags: Vec<&str> = err
        .lines()
        .filter_map(|l| l.strip_prefix("vendor: image "))
        .map(|l| l.split_once(": ").unwrap().1)
        .collect();
    let handed: Vec<String> = flags.iter().map(|f| target_of_flags(f)).collect();
    assert_eq!(
        handed,
        ["gfx906:xnack-", "gfx1100", "gfx11-generic", "gfx9-generic"],
        "{err}"
    );
    assert_eq!(
        line(&err, "vendor: unregister"),
        format!("vendor: unregister 4 images, first {}", flags[0])
    );
}

/// INFO numbers devices as libomptarget does and says what it does with a
/// device no image runs on. Agents gfx1030 and gfx90a, images for gfx90a
/// only: libomptarget makes the gfx90a its device 0 (the only one:
/// `omp_get_num_devices` is 1, and the plugin loads the image there, as the
/// double records) and skips the gfx1030. INFO says "OpenMP device 0
/// (gfx90a…)", and of the gfx1030 that libomptarget skips it, with no
/// warning (nothing fails).
#[test]
fn info_numbers_devices_as_libomptarget_does() {
    let Some(e) = loader() else { return };
    let Some(_) = libomptarget() else { return };
    let dir = scratch("omp-numbering");
    let written = ["gfx90a", "gfx90a:xnack-", "gfx90a:xnack+", "gfx90a"];
    let images = code_objects(&e, &dir, &written);
    let exe = devices_program(&e, &dir, &images, "numbering", true);
    let hsa = hsa_double_dir(&e, &dir);
    let saved = dir.join("loaded");
    std::fs::create_dir_all(&saved).unwrap();
    let out = run_ok(
        e.fake_driver(&exe, "gfx1030;gfx90a:sramecc+:xnack-", &dir.join("log"))
            .env("LD_LIBRARY_PATH", &hsa)
            .env("FAKE_HSA_SAVE_DIR", &saved),
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "registered\ndevice 0: allocated\n"
    );
    assert!(saved.join("gfx90a:sramecc+:xnack-.co").exists());
    assert!(!saved.join("gfx1030.co").exists());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("OpenMP device 0 (gfx90a:sramecc+:xnack-) loads [1] openmp-amdgcn-amd-amdhsa--gfx90a:xnack-"),
        "{err}"
    );
    assert!(
        err.contains("gfx1030: no compatible image, libomptarget skips this device; "),
        "{err}"
    );
    assert!(!err.contains("no binary for GPU"), "{err}");
}

/// Numbers across libraries, as libomptarget gives them. Agents gfx1030
/// and gfx90a. The program links a library registering images for gfx1030
/// and gfx90a (constructors of a dependency run first: it registers first,
/// and libomptarget makes the gfx1030 device 0 and the gfx90a device 1);
/// the program's own descriptor has gfx90a only. INFO gives the program's
/// gfx90a the number 1 that libomptarget gave it (alone, it would be 0),
/// and warns that device 0 fails for the program's images. Both proven on
/// libomptarget: device 1 is allocated on and the double loads the gfx90a
/// code object there; a run using device 0 fails with libomptarget's own
/// "No image loaded for device id 0".
#[test]
fn info_numbers_devices_across_libraries_as_libomptarget_does() {
    let Some(e) = loader() else { return };
    let Some(_) = libomptarget() else { return };
    let dir = scratch("omp-numbering-two");
    let ours = code_objects(&e, &dir, &["gfx90a", "gfx90a", "gfx90a", "gfx90a"]);
    // The library's images, under other names.
    let lib_dir = dir.join("lib");
    std::fs::create_dir_all(&lib_dir).unwrap();
    let theirs = code_objects(&e, &lib_dir, &["gfx1030", "gfx90a", "gfx90a", "gfx90a"]);
    run_ok(
        Command::new(&e.tc.clang)
            .current_dir(&lib_dir)
            .args(["-DUSE_DEVICES", "-DNO_MAIN", "-shared", "-fPIC"])
            .arg(program("omp_descriptor.c"))
            .args(&theirs)
            .args(["-L/usr/lib/llvm-22/lib", "-lomptarget", "-o", "libtwo.so"]),
    );
    let mut cmd = Command::new(&e.tc.clang);
    cmd.current_dir(&dir)
        .arg("-DUSE_DEVICES")
        .arg(program("omp_descriptor.c"))
        .args(&ours)
        .arg(format!("-L{}", e.build_dir.display()))
        .arg("-loffload_loader")
        .arg(format!("-Wl,-rpath,{}", e.build_dir.display()))
        .arg(format!("-L{}", lib_dir.display()))
        .arg("-ltwo")
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .args(["-L/usr/lib/llvm-22/lib", "-lomptarget"])
        .args(["-Wl,-rpath,/usr/lib/llvm-22/lib", "-o", "two"]);
    run_ok(&mut cmd);
    let hsa = hsa_double_dir(&e, &dir);
    let saved = dir.join("loaded");
    std::fs::create_dir_all(&saved).unwrap();
    let run = |device: &str| {
        e.fake_driver(
            &dir.join("two"),
            "gfx1030;gfx90a:sramecc+:xnack-",
            &dir.join("log"),
        )
        .env("LD_LIBRARY_PATH", &hsa)
        .env("FAKE_HSA_SAVE_DIR", &saved)
        .env("OMP_USE_DEVICE", device)
        .output()
        .unwrap()
    };
    let out = run("1");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "registered\ndevice 1: allocated\n",
        "{err}"
    );
    assert!(out.status.success(), "{err}");
    assert!(saved.join("gfx90a:sramecc+:xnack-.co").exists(), "{err}");
    let program = dir.join("two").display().to_string();
    let said = |needle: &str| {
        err.lines()
            .any(|l| l.contains(&program) && l.contains(needle))
    };
    assert!(
        said("OpenMP device 1 (gfx90a:sramecc+:xnack-) loads [0] openmp-amdgcn-amd-amdhsa--gfx90a"),
        "{err}"
    );
    assert!(
        said("no binary for GPU: OpenMP device 0 (gfx1030) has no compatible image in")
            && said("(\"No image loaded for device id 0\")"),
        "{err}"
    );
    assert!(err.contains("OpenMP device 0 (gfx1030) loads [0]"), "{err}");
    // libomptarget itself: device 0 cannot start with the program's images.
    let out = run("0");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("No image loaded for device id 0"), "{err}");
}

/// `tests/programs/omp_descriptor.c` with `-DUSE_DEVICES` and the code
/// objects `images` ([`code_objects`]), linked as `name` in `dir` with LLVM
/// 22's libomptarget, and this library first when `loader`.
fn devices_program(e: &Loader, dir: &Path, images: &[String], name: &str, loader: bool) -> PathBuf {
    let build = e.build_dir.display().to_string();
    let mut cmd = Command::new(&e.tc.clang);
    cmd.current_dir(dir)
        .arg("-DUSE_DEVICES")
        .arg(program("omp_descriptor.c"))
        .args(images);
    if loader {
        cmd.arg(format!("-L{build}"))
            .arg("-loffload_loader")
            .arg(format!("-Wl,-rpath,{build}"));
    }
    cmd.args(["-L/usr/lib/llvm-22/lib", "-lomptarget"]).args([
        "-Wl,-rpath,/usr/lib/llvm-22/lib",
        "-o",
        name,
    ]);
    run_ok(&mut cmd);
    dir.join(name)
}

/// A kernel `k` compiled by clang-22 for each of `targets` into
/// `image<i>.co` in `dir`: the `-DIMAGE_<i>` arguments that embed them in
/// `tests/programs/omp_descriptor.c`.
fn code_objects(e: &Loader, dir: &Path, targets: &[&str]) -> Vec<String> {
    std::fs::write(
        dir.join("dev.c"),
        "__attribute__((amdgpu_kernel)) void k(int *p) { *p = 1; }\n",
    )
    .unwrap();
    let mut defines = Vec::new();
    for (i, target) in targets.iter().enumerate() {
        let image = format!("image{i}.co");
        run_ok(
            Command::new(&e.tc.clang)
                .current_dir(dir)
                .arg("--target=amdgcn-amd-amdhsa")
                .arg(format!("-mcpu={target}"))
                .args(["-nogpulib", "dev.c", "-o", &image]),
        );
        defines.push(format!("-DIMAGE_{i}=\"{image}\""));
    }
    defines
}

/// The proof with libomptarget's own AMDGPU plugin: it `dlopen`s
/// `libhsa-runtime64.so`, here the HSA test double on `LD_LIBRARY_PATH`,
/// whose agents are a gfx1100 (ISAs `gfx1100` and `gfx11-generic`, as ROCr
/// lists them) and a gfx90a with xnack on. The program lays out its own
/// descriptor, `gfx11-generic`, `gfx1100`, `gfx90a` ("any"),
/// `gfx90a:xnack+`, where the plugin's first fit differs from the best fit
/// on both devices, and asks libomptarget for memory on each device, which
/// makes the plugin load the image it gave that device. Without this
/// library the plugin loads the generic code on the gfx1100 and the "any"
/// code on the gfx90a; with it, the code object the plugin hands the
/// driver (saved by the double) is byte for byte the image file of this
/// library's choice as `OFFLOAD_LOADER_INFO` names it: `gfx1100` and
/// `gfx90a:xnack+`.
#[test]
fn libomptarget_amdgpu_plugin_loads_this_librarys_choice() {
    let Some(e) = loader() else { return };
    let Some(_) = libomptarget() else { return };
    let dir = scratch("omp-plugin");
    let written = ["gfx11-generic", "gfx1100", "gfx90a", "gfx90a:xnack+"];
    let images = code_objects(&e, &dir, &written);
    let hsa = hsa_double_dir(&e, &dir);
    let link = |name: &str, loader: bool| devices_program(&e, &dir, &images, name, loader);
    let agents = ["gfx1100", "gfx90a:sramecc+:xnack+"];
    let run = |exe: &Path| {
        let saved = dir.join(format!(
            "{}.loaded",
            exe.file_name().unwrap().to_str().unwrap()
        ));
        let _ = std::fs::remove_dir_all(&saved);
        std::fs::create_dir_all(&saved).unwrap();
        let _ = std::fs::remove_file(dir.join("log"));
        let out = run_ok(
            e.fake_driver(
                exe,
                "gfx1100|gfx11-generic;gfx90a:sramecc+:xnack+",
                &dir.join("log"),
            )
            .env("LD_LIBRARY_PATH", &hsa)
            .env("FAKE_HSA_SAVE_DIR", &saved),
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "registered\ndevice 0: allocated\ndevice 1: allocated\n"
        );
        let loaded: Vec<Vec<u8>> = agents
            .iter()
            .map(|a| {
                std::fs::read(saved.join(format!("{a}.co")))
                    .unwrap_or_else(|_| panic!("nothing loaded on {a}"))
            })
            .collect();
        (loaded, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let image = |i: usize| std::fs::read(dir.join(format!("image{i}.co"))).unwrap();
    // First fit, without this library: the generic and the "any" code.
    let (plain, _) = run(&link("plain", false));
    assert!(plain[0] == image(0) && plain[1] == image(2));
    // With it: the images INFO names, gfx1100's and gfx90a:xnack+'s.
    let (beside, err) = run(&link("beside", true));
    // libomptarget numbers the devices by the first image each runs in the
    // table it is handed (here gfx90a:xnack+'s first, so the gfx90a is its
    // device 0); the saved code objects are named by agent. The program
    // allocates on its device 0 first, which makes the plugin load there
    // first: the double's first load is on the device INFO numbers 0.
    let log = std::fs::read_to_string(dir.join("log")).unwrap();
    let first = log
        .lines()
        .find_map(|l| l.strip_prefix("hsa load "))
        .and_then(|l| l.split(' ').next())
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        err.contains(&format!("OpenMP device 0 ({first}) loads [")),
        "libomptarget's device 0 is {first}: {err}"
    );
    for (device, (agent, want)) in agents.iter().zip([1, 3]).enumerate() {
        let said = format!("({agent}) loads [");
        let chosen: usize = err
            .lines()
            .find(|l| l.contains(&said))
            .and_then(|l| l.split(&said).nth(1))
            .and_then(|rest| rest.split(']').next())
            .and_then(|i| i.parse().ok())
            .unwrap_or_else(|| panic!("{said}: {err}"));
        assert_eq!(chosen, want, "{err}");
        assert!(beside[device] == image(chosen), "device {device}: {err}");
    }
}

/// The target an AMDGPU code object's `e_flags` (`0x…`) name: the processor
/// of `EF_AMDGPU_MACH` and the code object v4+ xnack and sramecc settings
/// (LLVM `ELF.h`: `EF_AMDGPU_FEATURE_XNACK_V4` bits 8–9,
/// `EF_AMDGPU_FEATURE_SRAMECC_V4` bits 10–11: 1 any, 2 off, 3 on).
fn target_of_flags(flags: &str) -> String {
    let flags = u32::from_str_radix(flags.trim_start_matches("0x"), 16).unwrap();
    let processor = offload_loader::target::Processor::from_mach((flags & 0xff) as u8)
        .unwrap_or_else(|| panic!("mach {flags:#x}"));
    let setting = |bits: u32, name: &str| match bits {
        2 => format!(":{name}-"),
        3 => format!(":{name}+"),
        _ => String::new(),
    };
    format!(
        "{}{}{}",
        processor.name,
        setting((flags >> 10) & 3, "sramecc"),
        setting((flags >> 8) & 3, "xnack")
    )
}

/// `OFFLOAD_LOADER_INFO` at exit for an OpenMP program linked through the
/// shim (this library standing in for libomptarget) that asks it nothing:
/// the exit handler runs because the library's object is never unloaded
/// (`-z nodelete`), which it reads from the object's own dynamic section,
/// whatever name the object was loaded by.
#[test]
fn info_at_exit_for_a_program_through_the_shim() {
    let Some(e) = loader() else { return };
    let exe = e.build(LinkedProgram::openmp(
        &["gfx90a"],
        "tests/programs/omp_quiet.c",
    ));
    let dir = scratch("omp-shim-exit");
    let out = run_ok(&mut e.fake_driver(&exe, "gfx90a:sramecc+:xnack-", &dir.join("log")));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "OpenMP device 0 (gfx90a:sramecc+:xnack-) loads [0] openmp-amdgcn-amd-amdhsa--gfx90a"
        ),
        "{err}"
    );
}
