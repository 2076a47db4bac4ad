//! The runtime never waits on the dynamic loader's lock while it can be held
//! against it (`ffi/src/loader_lock.rs`): real HIP and CUDA shared libraries
//! are `dlopen`ed and `dlclose`d while other threads make every kind of query,
//! detect devices for the first time and load images, against the
//! test-double driver loaded by path (`tests/programs/loader_lock.hip`).
//!
//! Each scenario runs in a child process under a time limit that only a hang
//! reaches (minutes, against runs of well under a second): a hang is the
//! failure, and the child is killed. Before this rule each of them hung:
//! readers that detected or loaded while `dlclose` waited for them, a first
//! thread-local write inside a reader, a constructor or destructor detecting
//! against a detection that `dlopen`s a driver, driver unloads in destructors
//! against a driver whose load `dlopen`s, children forked in the middle of a
//! once-initialiser.

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use support::{loader, scratch, LinkedProgram, Loader};

/// Two AMD targets, compressed: every library instance inflates its bundle.
const ARCHS: &[&str] = &["gfx90a", "gfx1100"];
/// Only a hang reaches it.
const LIMIT: Duration = Duration::from_secs(300);

/// The race program and a compressed two-target HIP library.
fn programs(e: &Loader) -> (PathBuf, PathBuf) {
    let exe = e.build(
        LinkedProgram::hip(ARCHS, "loader_lock.hip")
            .arg("-ldl")
            .arg("-lpthread"),
    );
    let lib = e.build(
        LinkedProgram::hip(ARCHS, "lib.hip")
            .shared_library("libraced.so")
            .compress(),
    );
    (exe, lib)
}

/// Runs `exe ARGS` against the fake drivers (an AMD GPU with an image and
/// one without, or the CUDA devices `cuda`), with `env`, and returns its
/// output; a run past [`LIMIT`] is killed and fails the test as a hang.
fn run(e: &Loader, exe: &Path, args: &[&str], cuda: &str, env: &[(&str, &str)]) -> String {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let dir = scratch(&format!(
        "loader-lock-{}",
        RUNS.fetch_add(1, Ordering::Relaxed)
    ));
    let log = dir.join("loads.log");
    let mut cmd = if cuda.is_empty() {
        e.fake_driver(exe, "gfx90a:sramecc+:xnack-;gfx1030", &log)
    } else {
        e.fake_cuda(exe, cuda, &log)
    };
    cmd.args(args)
        // Each load dlopens a library, as CUDA's PTX JIT does, under the
        // driver's own lock, which unloads take too.
        .env("FAKE_LOAD_DLOPEN", "libm.so.6")
        .env_remove("OFFLOAD_LOADER_INFO")
        .env_remove("OFFLOAD_LOADER_EAGER")
        .env_remove("OFFLOAD_LOADER_LOG");
    // To files, not pipes: a full pipe nobody reads would stop the child.
    let (stdout, stderr) = (dir.join("stdout"), dir.join("stderr"));
    cmd.stdout(Stdio::from(std::fs::File::create(&stdout).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(&stderr).unwrap()));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let started = Instant::now();
    let read = || {
        let text = |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned();
        text(&stdout) + &text(&stderr)
    };
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{args:?} {env:?}: hung (killed after {LIMIT:?})\n{}",
                read()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = read();
    assert!(
        status.success() && text.contains("ok\n"),
        "{args:?} {env:?}: {status:?}\n{text}"
    );
    text
}

/// dlopen/dlclose of a HIP library while three threads query (the first
/// detection among them) and load, and a fresh thread per round selects for
/// a device the library has no image for (a warning: its first last error),
/// with each diagnostic switch on in turn.
#[test]
fn dlclose_races_queries_detection_loads_and_fresh_threads() {
    let Some(e) = loader() else { return };
    let (exe, lib) = programs(&e);
    let lib = lib.to_str().unwrap();
    for env in [
        &[][..],
        &[("OFFLOAD_LOADER_INFO", "1")],
        &[("OFFLOAD_LOADER_EAGER", "1")],
        &[("OFFLOAD_LOADER_LOG", "offload_loader=debug")],
    ] {
        let out = run(&e, &exe, &["race", lib, "_Z10lib_kernelPi", "150"], "", env);
        assert!(
            out.contains("dlopened=150 libraries=150 devices=2"),
            "{out}"
        );
    }
}

/// The first detection (whose HSA answer is slow, and which then opens the
/// CUDA driver) races a constructor under `OFFLOAD_LOADER_EAGER` and a
/// destructor under `OFFLOAD_LOADER_INFO`, in many fresh processes.
#[test]
fn constructors_and_destructors_race_the_first_detection() {
    let Some(e) = loader() else { return };
    let (exe, lib) = programs(&e);
    let lib = lib.to_str().unwrap();
    for round in 0..8 {
        let hang = if round % 2 == 0 { "100" } else { "5" };
        for (mode, switch) in [
            ("ctor", "OFFLOAD_LOADER_EAGER"),
            ("dtor", "OFFLOAD_LOADER_INFO"),
        ] {
            let out = run(
                &e,
                &exe,
                &[mode, lib],
                "",
                &[(switch, "1"), ("FAKE_HSA_HANG_MS", hang)],
            );
            assert!(out.contains("detected 2 devices"), "{mode}: {out}");
        }
    }
}

/// `fork` while another thread opens, first uses (inflates) and closes a
/// compressed library: no child waits on that thread.
#[test]
fn children_forked_during_first_use_never_wait() {
    let Some(e) = loader() else { return };
    let (exe, lib) = programs(&e);
    let out = run(&e, &exe, &["fork", lib.to_str().unwrap()], "", &[]);
    assert!(out.contains("forks=100 failed=0"), "{out}");
}

/// The same race for a shared library built by nvcc (`-cudart none`), its
/// entries compressed, on two CUDA devices, one with no image.
#[test]
fn dlclose_races_queries_on_an_nvcc_library() {
    let Some(e) = loader() else { return };
    let Some(cuda) = support::cuda() else { return };
    let (exe, _) = programs(&e);
    let Some(lib) = cuda.library_with_loader(&[
        "-gencode",
        "arch=compute_80,code=sm_80",
        "-gencode",
        "arch=compute_90,code=sm_90",
        "-Xfatbin",
        "-compress-all",
    ]) else {
        return;
    };
    let lib = lib.to_str().unwrap();
    for env in [&[][..], &[("OFFLOAD_LOADER_INFO", "1")]] {
        let out = run(
            &e,
            &exe,
            &["race", lib, "cuda_lib_kernel", "150"],
            "9.0;7.5",
            env,
        );
        assert!(
            out.contains("dlopened=150 libraries=150 devices=2"),
            "{out}"
        );
    }
    let out = run(
        &e,
        &exe,
        &["dtor", lib],
        "9.0;7.5",
        &[("OFFLOAD_LOADER_INFO", "1"), ("FAKE_HSA_HANG_MS", "100")],
    );
    assert!(out.contains("detected 2 devices"), "{out}");
}
