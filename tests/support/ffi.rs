//! Programs linked with the C library `liboffload_loader` that
//! `cargo build --workspace` makes (HIP programs from `tests/programs`, the
//! OpenMP example), built through the cache, and run against the test-double
//! driver library `liboffload_test_drivers.so`.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::build::{run_ok, Plan, Step};
use super::{ci, program, strings, workspace, Toolchain};

/// The directory cargo builds into (`target/debug`), from this test's path.
pub fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/debug/deps/<test> -> target/debug
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// A file `cargo build --workspace` produces (`.ci/run` builds it first).
/// For `liboffload_loader.so`, also the link named by its SONAME
/// (`liboffload_loader.so.0`, as an install makes it), which programs linked
/// against it look for at run time.
pub fn built(file: &str) -> Option<PathBuf> {
    let p = build_dir().join(file);
    if p.exists() {
        if file == "liboffload_loader.so" {
            let soname =
                p.with_file_name(super::tools::soname(&p).expect("the library has a SONAME"));
            // Several tests may make it at once: an existing link is fine.
            match std::os::unix::fs::symlink(file, &soname) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => panic!("linking {}: {e}", soname.display()),
            }
        }
        return Some(p);
    }
    assert!(
        !ci(),
        "{} is missing: run `cargo build --workspace` before the tests",
        p.display()
    );
    eprintln!(
        "skipped: {} not built (run `cargo build --workspace`)",
        p.display()
    );
    None
}

/// The built C library and test-double drivers, with LLVM 22 to build
/// programs against them. `None` (after printing why) when any is missing.
#[derive(Clone, Debug)]
pub struct Loader {
    pub tc: Toolchain,
    /// `target/debug`.
    pub build_dir: PathBuf,
    /// `liboffload_test_drivers.so`: fake HSA and CUDA drivers.
    pub fake: PathBuf,
}

pub fn loader() -> Option<Loader> {
    let tc = super::toolchain()?;
    let fake = built("liboffload_test_drivers.so")?;
    built("liboffload_loader.so")?;
    built("liboffload_loader.a")?;
    Some(Loader {
        tc,
        build_dir: build_dir(),
        fake,
    })
}

impl Loader {
    /// Builds `recipe` (see [`Toolchain::build`]).
    pub fn build(&self, recipe: impl Into<super::Recipe>) -> PathBuf {
        self.tc.build(recipe)
    }

    /// `exe` set up to run against the fake HSA driver (also standing in for
    /// CUDA) showing `agents` (`FAKE_HSA_AGENTS`), logging loads to `log`,
    /// with `OFFLOAD_LOADER_INFO=1` and no `OFFLOAD_LOADER_DEVICES`.
    pub fn fake_driver(&self, exe: &Path, agents: &str, log: &Path) -> Command {
        let mut cmd = Command::new(exe);
        cmd.env("OFFLOAD_LOADER_HSA_LIBRARY", &self.fake)
            .env("OFFLOAD_LOADER_CUDA_LIBRARY", &self.fake)
            .env("FAKE_HSA_AGENTS", agents)
            .env("FAKE_DRIVER_LOG", log)
            .env("OFFLOAD_LOADER_INFO", "1")
            .env_remove("OFFLOAD_LOADER_DEVICES");
        cmd
    }

    /// [`Loader::fake_driver`] with no AMD GPU and the CUDA devices `cuda`
    /// (`FAKE_CUDA_DEVICES`, e.g. `8.6;9.0`) of a CUDA 13.5 driver, whose PTX
    /// ISA 9.5 is what nvcc 13.5 writes.
    pub fn fake_cuda(&self, exe: &Path, cuda: &str, log: &Path) -> Command {
        let mut cmd = self.fake_driver(exe, "", log);
        cmd.env("FAKE_CUDA_DEVICES", cuda)
            .env("FAKE_CUDA_DRIVER_VERSION", "13050");
        cmd
    }
}

/// Runs `cmd`, which must succeed, and returns its stdout then its stderr.
pub fn output_text(cmd: &mut Command) -> String {
    let out = run_ok(cmd);
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// The lines of `text` that start with `prefix`.
pub fn lines(text: &str, prefix: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .map(String::from)
        .collect()
}

/// The first line of `text` that starts with `prefix` (a panic naming it
/// when there is none).
pub fn line<'t>(text: &'t str, prefix: &str) -> &'t str {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line `{prefix}…` in:\n{text}"))
}

/// The one source of a [`LinkedProgram`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// A file, read where it is (a test program or an example).
    File(PathBuf),
    /// Generated text, written as `name` into the build directory.
    Text { name: String, text: String },
}

/// How a [`LinkedProgram`] gets `liboffload_loader`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LoaderLink {
    /// `-L<target/debug> -loffload_loader -Wl,-rpath,<target/debug>`.
    Shared,
    /// `-x none <target/debug>/liboffload_loader.a -lpthread -ldl -lm`.
    Static,
    /// OpenMP: `shim/libomptarget.so`, a link to `liboffload_loader.so`
    /// (Debian packages no libomptarget), `-Lshim -Wl,-rpath,$ORIGIN/shim`.
    OmpTargetShim,
    /// OpenMP: `-L<target/debug> -loffload_loader -Wl,-rpath,<target/debug>`,
    /// before the `-lomp -lomptarget` clang appends: LLVM 22's real
    /// libomptarget (Debian `liboffload-22`) beside the library.
    BesideLibomptarget,
    /// Not linked at all: the program as clang makes it.
    None,
}

/// A HIP or OpenMP program (or shared library) from one source, compiled
/// by clang-22 with `-I ffi/include -I tests/programs` and linked with
/// `liboffload_loader`:
///
/// - HIP: `clang -x hip -nogpulib -nogpuinc -fuse-ld=lld -I.. -I..
///   --offload-arch=... <src> <link> [-shared -fPIC] -o <output>`
/// - OpenMP: `clang -fopenmp --offload-arch=a,b -nogpulib -Xoffload-linker
///   --unresolved-symbols=ignore-all -fuse-ld=lld -I.. <src> <link> -o
///   <output>`
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LinkedProgram {
    pub openmp: bool,
    pub archs: Vec<String>,
    pub source: Source,
    /// The file name made, e.g. `app` or `libkernels.so`.
    pub output: String,
    /// `-shared -fPIC`.
    pub shared: bool,
    /// `--offload-compress`.
    pub compress: bool,
    pub link: LoaderLink,
    /// Shared libraries (other recipes' artefacts) to link with:
    /// `-L<dir> -l<name> -Wl,-rpath,<dir>`.
    pub libs: Vec<PathBuf>,
    /// Extra link arguments (`-ldl`, `-lpthread`).
    pub args: Vec<String>,
}

impl LinkedProgram {
    /// HIP program `tests/programs/<name>` as the executable `<stem>`.
    pub fn hip(archs: &[&str], name: &str) -> Self {
        LinkedProgram {
            openmp: false,
            archs: strings(archs),
            source: Source::File(program(name)),
            output: name.trim_end_matches(".hip").into(),
            shared: false,
            compress: false,
            link: LoaderLink::Shared,
            libs: Vec::new(),
            args: Vec::new(),
        }
    }
    /// HIP program from generated text, saved as `name`.
    pub fn hip_text(archs: &[&str], name: &str, text: &str) -> Self {
        LinkedProgram {
            source: Source::Text {
                name: name.into(),
                text: text.into(),
            },
            ..Self::hip(archs, name)
        }
    }
    /// OpenMP program from the workspace file `path` (e.g.
    /// `examples/openmp_query.c`), linked through the libomptarget shim.
    pub fn openmp(archs: &[&str], path: &str) -> Self {
        let file = workspace().join(path);
        let output = file.file_stem().unwrap().to_str().unwrap().to_string();
        LinkedProgram {
            openmp: true,
            source: Source::File(file),
            output,
            link: LoaderLink::OmpTargetShim,
            ..Self::hip(archs, "")
        }
    }
    /// Makes the shared library `name` (`libkernels.so`) instead.
    pub fn shared_library(mut self, name: &str) -> Self {
        self.shared = true;
        self.output = name.into();
        self
    }
    pub fn compress(mut self) -> Self {
        self.compress = true;
        self
    }
    /// OpenMP: links the library before LLVM's real libomptarget.
    pub fn beside_libomptarget(mut self) -> Self {
        self.link = LoaderLink::BesideLibomptarget;
        self
    }
    /// Links no offload-loader at all.
    pub fn without_loader(mut self) -> Self {
        self.link = LoaderLink::None;
        self
    }
    /// Links `liboffload_loader.a` instead of the shared library.
    pub fn static_loader(mut self) -> Self {
        self.link = LoaderLink::Static;
        self
    }
    /// Links the shared library `lib` (another recipe's artefact).
    pub fn link(mut self, lib: &Path) -> Self {
        self.libs.push(lib.to_path_buf());
        self
    }
    pub fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.into());
        self
    }
}

impl Toolchain {
    pub(super) fn plan_linked_program(&self, r: &LinkedProgram) -> Plan {
        let build = build_dir();
        let kind = match (r.openmp, r.shared, r.link) {
            (true, _, LoaderLink::BesideLibomptarget) => "ffi-omp-beside",
            (_, _, LoaderLink::None) => "ffi-plain",
            (false, false, _) => "ffi-hip-exe",
            (false, true, _) => "ffi-hip-so",
            (true, false, _) => "ffi-omp-exe",
            (true, true, _) => "ffi-omp-so",
        };
        let mut plan = Plan::new(kind.into(), &r.output);
        let include = workspace().join("ffi/include");
        plan.source(&include.join("offload_loader.h"));
        plan.source(&program("hip_prelude.h"));
        let mut args: Vec<String> = if r.openmp {
            vec![
                "-fopenmp".into(),
                format!("--offload-arch={}", r.archs.join(",")),
                "-nogpulib".into(),
                "-Xoffload-linker".into(),
                "--unresolved-symbols=ignore-all".into(),
                "-fuse-ld=lld".into(),
                format!("-I{}", include.display()),
            ]
        } else {
            let mut a = strings(&["-x", "hip", "-nogpulib", "-nogpuinc", "-fuse-ld=lld"]);
            a.extend(["-I".into(), include.display().to_string()]);
            a.extend(["-I".into(), program("").display().to_string()]);
            a.extend(r.archs.iter().map(|a| format!("--offload-arch={a}")));
            a
        };
        match &r.source {
            Source::File(path) => {
                plan.source(path);
                args.push(path.display().to_string());
            }
            Source::Text { name, text } => {
                plan.steps.push(Step::Write {
                    name: name.clone(),
                    text: text.clone(),
                });
                args.push(name.clone());
            }
        }
        if r.compress {
            args.push("--offload-compress".into());
        }
        match r.link {
            LoaderLink::None => {}
            LoaderLink::Shared | LoaderLink::BesideLibomptarget => {
                plan.library(&build.join("liboffload_loader.so"));
                args.extend([
                    format!("-L{}", build.display()),
                    "-loffload_loader".into(),
                    format!("-Wl,-rpath,{}", build.display()),
                ]);
            }
            LoaderLink::Static => {
                let lib = build.join("liboffload_loader.a");
                plan.library(&lib);
                args.extend(["-x".into(), "none".into(), lib.display().to_string()]);
                args.extend(strings(&["-lpthread", "-ldl", "-lm"]));
            }
            LoaderLink::OmpTargetShim => {
                let lib = build.join("liboffload_loader.so");
                plan.library(&lib);
                plan.steps.push(Step::Mkdir("shim".into()));
                plan.steps.push(Step::Symlink {
                    from: lib.clone(),
                    to: "shim/libomptarget.so".into(),
                });
                // The program records the library's SONAME, and finds it
                // under that name beside the shim.
                let soname = super::tools::soname(&lib).expect("the library has a SONAME");
                plan.steps.push(Step::Symlink {
                    from: lib,
                    to: format!("shim/{soname}"),
                });
                args.extend(["-Lshim".into(), "-Wl,-rpath,$ORIGIN/shim".into()]);
            }
        }
        for lib in &r.libs {
            plan.library(lib);
            let dir = lib.parent().unwrap().display().to_string();
            let name = lib.file_name().unwrap().to_str().unwrap();
            let name = name.trim_start_matches("lib").trim_end_matches(".so");
            args.extend([
                format!("-L{dir}"),
                format!("-l{name}"),
                format!("-Wl,-rpath,{dir}"),
            ]);
        }
        args.extend(r.args.iter().cloned());
        if r.shared {
            args.extend(["-shared".into(), "-fPIC".into()]);
        }
        args.extend(["-o".into(), r.output.clone()]);
        plan.run(&self.clang, args, &[]);
        plan
    }
}

/// Runs `exe`, tests/programs/heap_wrapper.c linked with this library, a
/// spy and the vendor runtime `vendor`, on the fat binary `fatbin`, with
/// `OFFLOAD_LOADER_INFO` on and off: the spy between the two sees the calls
/// `spied` (the registration, the kernel and the unregistration, with the
/// vendor's handle), and this library says it handed the wrapper on only
/// under INFO.
pub fn assert_heap_wrapper_handed_on(exe: &Path, fatbin: &Path, vendor: &str, spied: &[&str]) {
    for info in ["1", "0"] {
        let out = run_ok(
            Command::new(exe)
                .arg(fatbin)
                .arg("_Z1kPi")
                .env("OFFLOAD_LOADER_INFO", info),
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "registered and unregistered\n"
        );
        let err = String::from_utf8_lossy(&out.stderr);
        let seen: Vec<&str> = err.lines().filter(|l| l.starts_with("spy: ")).collect();
        assert_eq!(seen, spied, "{err}");
        let ours: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with("offload-loader: "))
            .collect();
        let said = format!("handed to {vendor} as it is; not selected here");
        if info == "1" {
            assert!(
                ours.iter()
                    .any(|l| l.contains("is not in any loaded object") && l.ends_with(&said)),
                "{err}"
            );
        } else {
            assert!(ours.is_empty(), "{err}");
        }
    }
}

/// A directory in `dir` holding the HSA test double as
/// `libhsa-runtime64.so`: on `LD_LIBRARY_PATH`, libomptarget's AMDGPU
/// plugin `dlopen`s it.
pub fn hsa_double_dir(e: &Loader, dir: &Path) -> PathBuf {
    let hsa = dir.join("hsa");
    std::fs::create_dir_all(&hsa).unwrap();
    let _ = std::fs::remove_file(hsa.join("libhsa-runtime64.so"));
    std::os::unix::fs::symlink(&e.fake, hsa.join("libhsa-runtime64.so")).unwrap();
    hsa
}
