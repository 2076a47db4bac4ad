//! A plugin host `dlopen`s and `dlclose`s an offload library again and
//! again (tests/programs/cycles.c), with this library linked before the
//! vendor runtime: what this library keeps per cycle is bounded, with
//! `OFFLOAD_LOADER_INFO` on and off, though the program never queries it
//! (a record used to be freed only by the next query, which a program
//! beside a vendor never makes: 2.1 KB a cycle beside libomptarget, 5 KB
//! with INFO beside libamdhip64).
//!
//! What remains per registration is its slot, 48 bytes: the handle table
//! that keeps a stale handle detectable and library ids stable for the
//! query API (and holds the vendor's handle). The bound checked is the
//! growth of the memory allocated beside the vendor less the growth of the
//! same program without this library (LLVM 22's libomptarget itself keeps
//! about 5 KB a cycle), at most [`BOUND`] bytes a cycle.

mod support;

use std::path::Path;
use std::process::Command;

use support::*;

/// Bytes a cycle this library may keep: its slot, twice over. The slot
/// table grows by chunks that double (`ffi/src/slots.rs`), so the chunks
/// allocated within the cycles measured hold up to twice as many slots as
/// those cycles use: 20,000 cycles of one registration allocate the chunks
/// of 4,096, 8,192 and 16,384 slots after the first tenth, 1.6 slots a cycle
/// measured. A record kept per cycle is more than 1 KB.
const BOUND: i64 = 2 * 48;

/// Runs `exe` over `library` for `cycles` cycles; the memory allocated and
/// not freed (kB, glibc's `mallinfo2`: the same from run to run, where the
/// resident size varies by megabytes) it grew by after the first tenth.
fn growth(command: &mut Command, library: &Path, cycles: u64) -> i64 {
    let out = run_ok(command.arg(library).arg(cycles.to_string()));
    let text = String::from_utf8_lossy(&out.stdout);
    let kb: Vec<i64> = text
        .split_whitespace()
        .map(|w| w.parse().unwrap())
        .collect();
    assert!(kb.len() == 4 && kb[0] > 0, "{text}");
    kb[1] - kb[0]
}

/// Asserts that `beside` grew by at most [`BOUND`] bytes a cycle more than
/// `plain` over the last nine tenths of `cycles`.
fn assert_bounded(what: &str, plain: i64, beside: i64, cycles: u64) {
    let measured = cycles as i64 * 9 / 10;
    let extra = (beside - plain) * 1024 / measured;
    eprintln!(
        "{what}: {extra} bytes a cycle ({beside} kB against {plain} kB over {measured} cycles)"
    );
    assert!(
        extra <= BOUND,
        "{what}: {extra} bytes a cycle more than without this library ({beside} kB against {plain} kB over {measured} cycles)"
    );
}

/// `tests/programs/cycles.c` linked with `libs`.
fn cycles_program(e: &Loader, dir: &Path, name: &str, libs: &[String]) -> std::path::PathBuf {
    let exe = dir.join(name);
    run_ok(
        Command::new(&e.tc.clang)
            .arg(program("cycles.c"))
            .args(libs)
            .arg("-o")
            .arg(&exe),
    );
    exe
}

fn loader_first(e: &Loader) -> Vec<String> {
    let build = e.build_dir.display();
    vec![
        format!("-L{build}"),
        "-loffload_loader".into(),
        format!("-Wl,-rpath,{build}"),
    ]
}

/// An OpenMP offload library, `dlopen`ed 20,000 times by a program linked
/// with this library before LLVM 22's libomptarget, whose AMDGPU plugin
/// runs on the HSA double.
#[test]
fn dlopen_cycles_beside_libomptarget_keep_memory_bounded() {
    let Some(e) = loader() else { return };
    if !Path::new("/usr/lib/llvm-22/lib/libomptarget.so").exists() {
        missing("LLVM 22's libomptarget", "liboffload-22-dev");
        return;
    }
    let dir = scratch("cycles-omp");
    std::fs::write(
        dir.join("lib.c"),
        "int twice(int x) {\n  int y = 0;\n#pragma omp target map(from : y)\n  y = 2 * x;\n  return y;\n}\n",
    )
    .unwrap();
    let library = dir.join("libomp_cycle.so");
    run_ok(
        Command::new(&e.tc.clang)
            .current_dir(&dir)
            .args(["-fopenmp", "--offload-arch=gfx90a,gfx1100", "-nogpulib"])
            .args(["-Xoffload-linker", "--unresolved-symbols=ignore-all"])
            .args(["-fuse-ld=lld", "-shared", "-fPIC", "lib.c", "-o"])
            .arg(&library),
    );
    let omptarget: Vec<String> = [
        "-L/usr/lib/llvm-22/lib",
        "-lomptarget",
        "-Wl,-rpath,/usr/lib/llvm-22/lib",
    ]
    .map(String::from)
    .to_vec();
    let plain = cycles_program(&e, &dir, "plain", &omptarget);
    let beside = cycles_program(&e, &dir, "beside", &[loader_first(&e), omptarget].concat());
    let hsa = hsa_double_dir(&e, &dir);
    let cycles = 20_000;
    for info in ["0", "1"] {
        let run = |exe: &Path| {
            let mut cmd = e.fake_driver(exe, "gfx90a;gfx1100", &dir.join("log"));
            cmd.env("LD_LIBRARY_PATH", &hsa)
                .env("OFFLOAD_LOADER_INFO", info);
            growth(&mut cmd, &library, cycles)
        };
        let (plain, beside) = (run(&plain), run(&beside));
        assert_bounded(&format!("libomptarget, INFO={info}"), plain, beside, cycles);
    }
}

/// A HIP library, `dlopen`ed 100,000 times by a program linked with this
/// library before Debian's libamdhip64 (which keeps nothing a cycle).
#[test]
fn dlopen_cycles_beside_libamdhip64_keep_memory_bounded() {
    let Some(e) = loader() else { return };
    if !Path::new("/usr/lib/x86_64-linux-gnu/libamdhip64.so").exists() {
        missing("libamdhip64", "libamdhip64-dev");
        return;
    }
    let dir = scratch("cycles-hip");
    std::fs::write(
        dir.join("lib.hip"),
        "#include \"hip_prelude.h\"\n__attribute__((global)) void k(int *p) { *p = 1; }\n__attribute__((device)) int counter = 7;\n",
    )
    .unwrap();
    let library = dir.join("libhip_cycle.so");
    run_ok(
        Command::new(&e.tc.clang)
            .current_dir(&dir)
            .args(["-x", "hip", "-nogpulib", "-nogpuinc"])
            .args(["--offload-arch=gfx90a", "--offload-arch=gfx1100"])
            .arg(format!("-I{}", program("").display()))
            .arg(format!("-I{}", workspace().join("ffi/include").display()))
            .args(["-shared", "-fPIC", "lib.hip", "-o"])
            .arg(&library),
    );
    let hip: Vec<String> = ["-Wl,--no-as-needed", "-lamdhip64"]
        .map(String::from)
        .to_vec();
    let plain = cycles_program(&e, &dir, "plain", &hip);
    let beside = cycles_program(&e, &dir, "beside", &[loader_first(&e), hip].concat());
    let cycles = 100_000;
    for info in ["0", "1"] {
        let run = |exe: &Path| {
            let mut cmd = e.fake_driver(exe, "gfx90a;gfx1100", &dir.join("log"));
            cmd.env("OFFLOAD_LOADER_INFO", info)
                .stderr(std::process::Stdio::null());
            growth(&mut cmd, &library, cycles)
        };
        let (plain, beside) = (run(&plain), run(&beside));
        assert_bounded(&format!("libamdhip64, INFO={info}"), plain, beside, cycles);
    }
}
