//! Real clang-built offload artefacts, built on demand and cached, and what
//! the reference tools say about them.
//!
//! Use it from a test file with `mod support;`:
//!
//! ```ignore
//! let Some(tc) = support::toolchain() else { return }; // prints "skipped: ..."
//! let obj = tc.build(support::Hip::new(&["gfx90a:xnack+", "gfx906"]));
//! let fatbin = tc.section_bytes(&obj, ".hip_fatbin").unwrap();
//! let ids = tc.bundler_list(&support::temp_file(&fatbin)).unwrap();
//! ```
//!
//! Missing tools: with `CI=true` every lookup panics naming the Debian package
//! to install; otherwise it prints `skipped: <tool> not installed` to stderr
//! and returns `None`, and the test returns early.
//!
//! Artefacts are built under `$CARGO_TARGET_TMPDIR/offload-fixtures/`, in a
//! directory named after a hash of the exact commands (and of the fixture
//! sources, inputs and compiler binaries), so tests and test binaries share
//! them. A build runs in a private temporary directory that is renamed into
//! place at the end, so concurrent threads and processes never see a half
//! built artefact. The command lines are in `tests/fixtures/README.md`.
#![allow(dead_code)]

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

// ---------------------------------------------------------------------------
// Locating tools

/// Whether missing tools are failures (`CI=true`) rather than skips.
pub fn ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// Reports that `what` (from Debian package `package`) is missing: panics
/// under `CI=true`, otherwise prints the skip line.
pub fn missing(what: &str, package: &str) {
    assert!(
        !ci(),
        "{what} is not installed: install the Debian package `{package}` (apt-get install {package})"
    );
    eprintln!("skipped: {what} not installed (Debian package {package})");
}

/// The Debian package that ships LLVM tool `name` of LLVM `version`.
fn package_of(name: &str, version: u32) -> String {
    let suffix = match name {
        "clang" => "",
        "clang-offload-bundler"
        | "clang-offload-packager"
        | "offload-arch"
        | "amdgpu-arch"
        | "nvptx-arch"
        | "clang-linker-wrapper" => "tools-",
        "ld.lld" => return format!("lld-{version}"),
        _ => return format!("llvm-{version}"),
    };
    format!("clang-{suffix}{version}")
}

/// LLVM tool `name` of LLVM `version`: `/usr/lib/llvm-<version>/bin/<name>`,
/// else `<name>-<version>` in PATH. (Unversioned names in PATH may belong to
/// another LLVM, so they are never used.)
pub fn tool(name: &str, version: u32) -> Option<PathBuf> {
    let direct = PathBuf::from(format!("/usr/lib/llvm-{version}/bin/{name}"));
    if direct.is_file() {
        return Some(direct);
    }
    if let Some(p) = in_path(&format!("{name}-{version}")) {
        return Some(p);
    }
    missing(
        &format!("{name} (LLVM {version})"),
        &package_of(name, version),
    );
    None
}

fn in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The reference tools and the compiler of one LLVM version. Building uses
/// `clang`, `bundler` and `packager` of that version; inspection always uses
/// LLVM 22's `llvm-objdump`, `llvm-readobj` and `llvm-offload-binary`.
#[derive(Clone, Debug)]
pub struct Toolchain {
    /// 22 or 19.
    pub version: u32,
    pub clang: PathBuf,
    pub bundler: PathBuf,
    /// `llvm-offload-binary` (LLVM 22) or `clang-offload-packager` (LLVM 19).
    pub packager: PathBuf,
    /// `llvm-ar` (LLVM 22; Debian has no `llvm-19` package here).
    pub ar: PathBuf,
    /// LLVM 22's `llvm-objdump`.
    pub objdump: PathBuf,
    /// LLVM 22's `llvm-readobj`.
    pub readobj: PathBuf,
    /// LLVM 22's `llvm-offload-binary`.
    pub offload_binary: PathBuf,
}

/// LLVM 22: clang-22, clang-tools-22, lld-22, llvm-22 and libomp-22-dev
/// (OpenMP programs link `-lomp`). `None` (after printing why) when any is
/// missing outside CI.
pub fn toolchain() -> Option<Toolchain> {
    static TC: OnceLock<Option<Toolchain>> = OnceLock::new();
    TC.get_or_init(|| make_toolchain(22)).clone()
}

/// LLVM 19's clang and bundler (clang-19, clang-tools-19, lld-19), with LLVM
/// 22's inspection tools (everything [`toolchain`] needs, too).
pub fn toolchain_19() -> Option<Toolchain> {
    static TC: OnceLock<Option<Toolchain>> = OnceLock::new();
    TC.get_or_init(|| make_toolchain(19)).clone()
}

fn make_toolchain(version: u32) -> Option<Toolchain> {
    let clang = tool("clang", version)?;
    let bundler = tool("clang-offload-bundler", version)?;
    tool("ld.lld", version)?;
    let objdump = tool("llvm-objdump", 22)?;
    let readobj = tool("llvm-readobj", 22)?;
    let offload_binary = tool("llvm-offload-binary", 22)?;
    let ar = tool("llvm-ar", 22)?;
    let packager = if version >= 22 {
        offload_binary.clone()
    } else {
        tool("clang-offload-packager", version)?
    };
    if version >= 22 {
        let libomp = format!("/usr/lib/llvm-{version}/lib/libomp.so");
        if !Path::new(&libomp).exists() {
            missing(&libomp, &format!("libomp-{version}-dev"));
            return None;
        }
    } else {
        toolchain()?;
    }
    Some(Toolchain {
        version,
        clang,
        bundler,
        packager,
        ar,
        objdump,
        readobj,
        offload_binary,
    })
}

/// `/usr/lib/x86_64-linux-gnu/librocsparse.so.0.1` (Debian `librocsparse0`, a
/// 1.3 GB `.hip_fatbin` of 111 uncompressed bundles), same CI rule.
pub fn rocsparse() -> Option<PathBuf> {
    let p = PathBuf::from("/usr/lib/x86_64-linux-gnu/librocsparse.so.0.1");
    if p.is_file() {
        Some(p)
    } else {
        missing(&p.display().to_string(), "librocsparse0");
        None
    }
}

/// A fixture source in `tests/fixtures/src` (e.g. `kernels.hip`).
pub fn fixture(name: &str) -> PathBuf {
    fixtures_dir().join(name)
}

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/src")
}

// ---------------------------------------------------------------------------
// Recipes

/// What a HIP or OpenMP recipe links into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Output {
    /// `-c`: a relocatable object (one source only).
    Object,
    /// An executable (HIP: with `hip_host_stubs.c`; OpenMP: against a stub
    /// `libomptarget.so` in `stub/` next to it).
    Executable,
    /// `-shared -fPIC`.
    SharedLibrary,
    /// OpenMP only: `llvm-ar rcs` of the `-c` objects.
    Archive,
}

/// HIP code compiled by clang (`-x hip -nogpulib -nogpuinc`).
///
/// Default: `kernels.hip`, old (bundle) driver, no RDC, uncompressed, object.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Hip {
    /// `--offload-arch=` values (target IDs such as `gfx90a:xnack+`).
    pub archs: Vec<String>,
    pub output: Output,
    /// `--offload-compress`.
    pub compress: bool,
    /// `COMPRESSED_BUNDLE_FORMAT_VERSION` (2 or 3; clang-19 always writes 2).
    pub compress_version: Option<u32>,
    /// `--offload-compression-level=`.
    pub compression_level: Option<u32>,
    /// `--offload-new-driver`.
    pub new_driver: bool,
    /// `-fgpu-rdc`.
    pub rdc: bool,
    /// Fixture sources (in `tests/fixtures/src`).
    pub sources: Vec<String>,
    /// Extra arguments for every clang call (e.g. `-mcode-object-version=6`,
    /// which clang-19 needs for generic targets such as `gfx11-generic`).
    pub extra_args: Vec<String>,
}

impl Hip {
    pub fn new(archs: &[&str]) -> Self {
        Hip {
            archs: strings(archs),
            output: Output::Object,
            compress: false,
            compress_version: None,
            compression_level: None,
            new_driver: false,
            rdc: false,
            sources: vec!["kernels.hip".into()],
            extra_args: Vec::new(),
        }
    }
    pub fn output(mut self, output: Output) -> Self {
        self.output = output;
        self
    }
    pub fn executable(self) -> Self {
        self.output(Output::Executable)
    }
    pub fn shared_library(self) -> Self {
        self.output(Output::SharedLibrary)
    }
    pub fn compress(mut self) -> Self {
        self.compress = true;
        self
    }
    /// Compressed with `COMPRESSED_BUNDLE_FORMAT_VERSION=version`.
    pub fn compress_version(mut self, version: u32) -> Self {
        self.compress = true;
        self.compress_version = Some(version);
        self
    }
    pub fn compression_level(mut self, level: u32) -> Self {
        self.compress = true;
        self.compression_level = Some(level);
        self
    }
    pub fn new_driver(mut self) -> Self {
        self.new_driver = true;
        self
    }
    pub fn rdc(mut self) -> Self {
        self.rdc = true;
        self
    }
    /// Both HIP fixtures (`kernels.hip`, `kernels2.hip`): two bundles (one per
    /// translation unit) in a linked `.hip_fatbin` unless RDC.
    pub fn two_sources(mut self) -> Self {
        self.sources = vec!["kernels.hip".into(), "kernels2.hip".into()];
        self
    }
    pub fn arg(mut self, arg: &str) -> Self {
        self.extra_args.push(arg.into());
        self
    }
}

/// OpenMP offload code (`-fopenmp --offload-arch=a,b -nogpulib`) from
/// `omp_kernels.c`. `sm_*` archs get `--cuda-feature=+ptx75 -foffload-lto`
/// (no CUDA here: clang would pick PTX 4.2 and need ptxas) and can only make
/// objects and archives.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OpenMp {
    pub archs: Vec<String>,
    pub output: Output,
    pub sources: Vec<String>,
    pub extra_args: Vec<String>,
}

impl OpenMp {
    pub fn new(archs: &[&str]) -> Self {
        OpenMp {
            archs: strings(archs),
            output: Output::Object,
            sources: vec!["omp_kernels.c".into()],
            extra_args: Vec::new(),
        }
    }
    pub fn output(mut self, output: Output) -> Self {
        self.output = output;
        self
    }
    pub fn arg(mut self, arg: &str) -> Self {
        self.extra_args.push(arg.into());
        self
    }
}

/// One AMDGPU code object (ELF) for `arch`: `kernels.hip` compiled with
/// `--offload-device-only --no-gpu-bundle-output -c`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CodeObject {
    pub arch: String,
    pub source: String,
}

impl CodeObject {
    pub fn new(arch: &str) -> Self {
        CodeObject {
            arch: arch.into(),
            source: "kernels.hip".into(),
        }
    }
}

/// PTX text for `arch` (`sm_80`) from `ptx_kernels.c`
/// (`--target=nvptx64-nvidia-cuda -march=<arch> -Xclang -target-feature
/// -Xclang +<isa> -S`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ptx {
    pub arch: String,
    /// PTX ISA feature, `ptx75` by default.
    pub isa: String,
}

impl Ptx {
    pub fn new(arch: &str) -> Self {
        Ptx {
            arch: arch.into(),
            isa: "ptx75".into(),
        }
    }
}

/// An offload binary (`10 FF 10 AD`) made by `llvm-offload-binary -o
/// package.bin --image=file=...,key=value,...`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Package {
    pub images: Vec<PackageImage>,
}

/// One `--image=`. The tool derives the image kind from the file's
/// extension, so the input is copied as `image<N>.<ext>` first: `o` object,
/// `bc` bitcode, `cubin`, `fatbin`, `s` PTX, `spv` SPIR-V, anything else none.
/// Keys: `triple` (required), `arch`, `kind` (`openmp`, `cuda`, `hip`,
/// `sycl`: becomes the offload kind, not a string), any other key (`feature`,
/// `producer`, ...) is stored as a string.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PackageImage {
    pub file: PathBuf,
    pub ext: String,
    pub keys: Vec<(String, String)>,
}

impl Package {
    pub fn new() -> Self {
        Package { images: Vec::new() }
    }
    pub fn image(mut self, file: &Path, ext: &str, keys: &[(&str, &str)]) -> Self {
        self.images.push(PackageImage {
            file: file.to_path_buf(),
            ext: ext.into(),
            keys: keys
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        });
        self
    }
}

impl Default for Package {
    fn default() -> Self {
        Self::new()
    }
}

/// A raw bundle file made by `clang-offload-bundler`: `-type=o` when a `host-`
/// target is present (its input is an empty file), else `-type=bc` (the
/// bundler crashes bundling ELF inputs with `-type=o` and no host). Entries
/// are written in the order given.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Bundle {
    /// (bundle ID, input file; `None` for the host entry).
    pub entries: Vec<(String, Option<PathBuf>)>,
    /// `-compress`.
    pub compress: bool,
    pub compress_version: Option<u32>,
    /// `-compression-level=`.
    pub compression_level: Option<u32>,
    /// `-bundle-align=` (tool default 1).
    pub align: Option<u64>,
}

impl Bundle {
    pub fn new() -> Self {
        Bundle {
            entries: Vec::new(),
            compress: false,
            compress_version: None,
            compression_level: None,
            align: None,
        }
    }
    /// A `host-x86_64-unknown-linux-gnu` entry (empty).
    pub fn host(mut self) -> Self {
        self.entries
            .push(("host-x86_64-unknown-linux-gnu".into(), None));
        self
    }
    pub fn entry(mut self, id: &str, file: &Path) -> Self {
        self.entries.push((id.into(), Some(file.to_path_buf())));
        self
    }
    pub fn compress(mut self) -> Self {
        self.compress = true;
        self
    }
    pub fn compress_version(mut self, version: u32) -> Self {
        self.compress = true;
        self.compress_version = Some(version);
        self
    }
    pub fn align(mut self, align: u64) -> Self {
        self.align = Some(align);
        self
    }
}

impl Default for Bundle {
    fn default() -> Self {
        Self::new()
    }
}

/// Anything [`Toolchain::build`] makes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Recipe {
    Hip(Hip),
    OpenMp(OpenMp),
    CodeObject(CodeObject),
    Ptx(Ptx),
    Package(Package),
    Bundle(Bundle),
}

macro_rules! into_recipe {
    ($($t:ident),*) => {$(
        impl From<$t> for Recipe {
            fn from(r: $t) -> Recipe {
                Recipe::$t(r)
            }
        }
    )*};
}
into_recipe!(Hip, OpenMp, CodeObject, Ptx, Package, Bundle);

fn strings(s: &[&str]) -> Vec<String> {
    s.iter().map(|s| s.to_string()).collect()
}

// ---------------------------------------------------------------------------
// Build plans and the cache

#[derive(Debug)]
enum Step {
    Run {
        program: PathBuf,
        args: Vec<String>,
        env: Vec<(String, String)>,
    },
    /// Copy an input file into the build directory.
    Copy {
        from: PathBuf,
        to: String,
    },
    /// An empty file.
    Touch(String),
    Mkdir(String),
}

#[derive(Debug)]
struct Plan {
    slug: String,
    steps: Vec<Step>,
    /// The artefact, relative to the build directory.
    output: String,
}

impl Plan {
    fn new(slug: String, output: &str) -> Self {
        Plan {
            slug,
            steps: Vec::new(),
            output: output.into(),
        }
    }
    fn run(&mut self, program: &Path, args: Vec<String>, env: &[(String, String)]) {
        self.steps.push(Step::Run {
            program: program.to_path_buf(),
            args,
            env: env.to_vec(),
        });
    }
}

/// Environment variables that change what the bundler writes: removed from
/// every build command unless a recipe sets them.
const BUNDLER_ENV: &[&str] = &[
    "COMPRESSED_BUNDLE_FORMAT_VERSION",
    "OFFLOAD_BUNDLER_COMPRESS",
    "OFFLOAD_BUNDLER_VERBOSE",
];

/// Bump when the meaning of a plan changes without its text changing.
const CACHE_SCHEMA: u32 = 1;

fn fnv(h: &mut u64, bytes: &[u8]) {
    for b in bytes {
        *h ^= u64::from(*b);
        *h = h.wrapping_mul(0x100_0000_01b3);
    }
}

fn src(name: &str) -> String {
    fixture(name).display().to_string()
}

fn stem(name: &str) -> &str {
    Path::new(name).file_stem().unwrap().to_str().unwrap()
}

/// A cuid per source, so each translation unit's `__hip_cuid_*` symbol is
/// stable (clang's default hashes the output path, which here is temporary).
fn cuid(name: &str) -> String {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    fnv(&mut h, name.as_bytes());
    format!("-cuid={h:016x}")
}

fn compress_env(version: Option<u32>) -> Vec<(String, String)> {
    version
        .map(|v| {
            vec![(
                "COMPRESSED_BUNDLE_FORMAT_VERSION".to_string(),
                v.to_string(),
            )]
        })
        .unwrap_or_default()
}

impl Toolchain {
    /// Builds `recipe` (or finds it in the cache) and returns the artefact's
    /// path. Panics, with the failing command and its output, if the build
    /// fails.
    pub fn build(&self, recipe: impl Into<Recipe>) -> PathBuf {
        let recipe = recipe.into();
        let plan = match &recipe {
            Recipe::Hip(r) => self.plan_hip(r),
            Recipe::OpenMp(r) => self.plan_openmp(r),
            Recipe::CodeObject(r) => self.plan_code_object(r),
            Recipe::Ptx(r) => self.plan_ptx(r),
            Recipe::Package(r) => self.plan_package(r),
            Recipe::Bundle(r) => self.plan_bundle(r),
        };
        realize(&plan)
    }

    fn plan_hip(&self, r: &Hip) -> Plan {
        let v = self.version;
        let kind = match r.output {
            Output::Object => "obj",
            Output::Executable => "exe",
            Output::SharedLibrary => "so",
            Output::Archive => panic!("HIP recipes make objects, executables or shared libraries"),
        };
        let output = match r.output {
            Output::Object => format!("{}.o", stem(&r.sources[0])),
            Output::Executable => "kernels".into(),
            _ => "libkernels.so".into(),
        };
        let mut plan = Plan::new(format!("hip{v}-{kind}"), &output);
        let env = compress_env(r.compress_version);
        let mut offload: Vec<String> = r
            .archs
            .iter()
            .map(|a| format!("--offload-arch={a}"))
            .collect();
        if r.new_driver {
            offload.push("--offload-new-driver".into());
        }
        if r.rdc {
            offload.push("-fgpu-rdc".into());
        }
        let mut compress = Vec::new();
        if r.compress {
            compress.push("--offload-compress".to_string());
        }
        if let Some(l) = r.compression_level {
            compress.push(format!("--offload-compression-level={l}"));
        }
        let pic = r.output == Output::SharedLibrary;
        assert!(
            r.output != Output::Object || r.sources.len() == 1,
            "a HIP object has one source"
        );
        let mut objects = Vec::new();
        for s in &r.sources {
            let obj = format!("{}.o", stem(s));
            let mut args = vec!["-x".to_string(), "hip".into()];
            args.extend(offload.iter().cloned());
            args.extend(["-nogpulib".into(), "-nogpuinc".into(), cuid(s)]);
            args.extend(compress.iter().cloned());
            if pic {
                args.push("-fPIC".into());
            }
            args.extend(r.extra_args.iter().cloned());
            args.extend(["-c".into(), src(s), "-o".into(), obj.clone()]);
            plan.run(&self.clang, args, &env);
            objects.push(obj);
        }
        if r.output == Output::Object {
            return plan;
        }
        if r.output == Output::Executable {
            plan.run(
                &self.clang,
                vec![
                    "-c".into(),
                    src("hip_host_stubs.c"),
                    "-o".into(),
                    "hip_host_stubs.o".into(),
                ],
                &[],
            );
            objects.push("hip_host_stubs.o".into());
        }
        // Device code is linked (and compressed) here only with RDC.
        let mut args = Vec::new();
        if r.rdc {
            args.push("--hip-link".to_string());
            args.extend(offload.iter().cloned());
            args.extend(compress.iter().cloned());
        }
        args.extend(r.extra_args.iter().cloned());
        args.extend(objects);
        if pic {
            args.push("-shared".into());
        }
        args.extend(["-fuse-ld=lld".into(), "-o".into(), output]);
        plan.run(&self.clang, args, &env);
        plan
    }

    fn plan_openmp(&self, r: &OpenMp) -> Plan {
        let v = self.version;
        let nvptx = r.archs.iter().any(|a| a.starts_with("sm_"));
        let mut common = vec![
            "-fopenmp".to_string(),
            format!("--offload-arch={}", r.archs.join(",")),
            "-nogpulib".into(),
        ];
        if nvptx {
            common.extend(["--cuda-feature=+ptx75".into(), "-foffload-lto".into()]);
        }
        common.extend(r.extra_args.iter().cloned());
        let first = stem(&r.sources[0]).to_string();
        match r.output {
            Output::Object | Output::Archive => {
                let output = if r.output == Output::Object {
                    assert!(r.sources.len() == 1, "an OpenMP object has one source");
                    format!("{first}.o")
                } else {
                    format!("lib{first}.a")
                };
                let kind = if r.output == Output::Object {
                    "obj"
                } else {
                    "ar"
                };
                let mut plan = Plan::new(format!("omp{v}-{kind}"), &output);
                let mut objects = Vec::new();
                for s in &r.sources {
                    let obj = format!("{}.o", stem(s));
                    let mut args = common.clone();
                    args.extend(["-c".into(), src(s), "-o".into(), obj.clone()]);
                    plan.run(&self.clang, args, &[]);
                    objects.push(obj);
                }
                if r.output == Output::Archive {
                    let mut args = vec!["rcs".to_string(), output];
                    args.extend(objects);
                    plan.run(&self.ar, args, &[]);
                }
                plan
            }
            Output::Executable | Output::SharedLibrary => {
                assert!(
                    !nvptx,
                    "linking NVPTX OpenMP code needs CUDA's ptxas and nvlink, which are not installed"
                );
                let shared = r.output == Output::SharedLibrary;
                let output = if shared {
                    format!("lib{first}.so")
                } else {
                    first.clone()
                };
                let kind = if shared { "so" } else { "exe" };
                let mut plan = Plan::new(format!("omp{v}-{kind}"), &output);
                plan.steps.push(Step::Mkdir("stub".into()));
                plan.run(
                    &self.clang,
                    vec![
                        "-shared".into(),
                        "-fPIC".into(),
                        src("omptarget_stub.c"),
                        "-o".into(),
                        "stub/libomptarget.so".into(),
                    ],
                    &[],
                );
                let mut args = common;
                args.extend([
                    "-Xoffload-linker".into(),
                    "--unresolved-symbols=ignore-all".into(),
                ]);
                if shared {
                    args.extend(["-shared".into(), "-fPIC".into()]);
                }
                args.extend(r.sources.iter().map(|s| src(s)));
                args.extend([
                    "-Lstub".into(),
                    "-Wl,-rpath,$ORIGIN/stub".into(),
                    "-fuse-ld=lld".into(),
                    "-o".into(),
                    output,
                ]);
                plan.run(&self.clang, args, &[]);
                plan
            }
        }
    }

    fn plan_code_object(&self, r: &CodeObject) -> Plan {
        let mut plan = Plan::new(format!("co{}", self.version), "kernels.co");
        plan.run(
            &self.clang,
            vec![
                "-x".into(),
                "hip".into(),
                format!("--offload-arch={}", r.arch),
                "-nogpulib".into(),
                "-nogpuinc".into(),
                cuid(&r.source),
                "--offload-device-only".into(),
                "--no-gpu-bundle-output".into(),
                "-c".into(),
                src(&r.source),
                "-o".into(),
                "kernels.co".into(),
            ],
            &[],
        );
        plan
    }

    fn plan_ptx(&self, r: &Ptx) -> Plan {
        let mut plan = Plan::new(format!("ptx{}", self.version), "ptx_kernels.s");
        plan.run(
            &self.clang,
            vec![
                "--target=nvptx64-nvidia-cuda".into(),
                format!("-march={}", r.arch),
                "-Xclang".into(),
                "-target-feature".into(),
                "-Xclang".into(),
                format!("+{}", r.isa),
                "-S".into(),
                src("ptx_kernels.c"),
                "-o".into(),
                "ptx_kernels.s".into(),
            ],
            &[],
        );
        plan
    }

    fn plan_package(&self, r: &Package) -> Plan {
        let mut plan = Plan::new(format!("pkg{}", self.version), "package.bin");
        let mut args = vec!["-o".to_string(), "package.bin".into()];
        for (i, img) in r.images.iter().enumerate() {
            let name = format!("image{i}.{}", img.ext);
            plan.steps.push(Step::Copy {
                from: img.file.clone(),
                to: name.clone(),
            });
            let mut spec = format!("--image=file={name}");
            for (k, v) in &img.keys {
                assert!(
                    !k.contains([',', '=']) && !v.contains(','),
                    "bad key {k}={v}"
                );
                write!(spec, ",{k}={v}").unwrap();
            }
            args.push(spec);
        }
        plan.run(&self.packager, args, &[]);
        plan
    }

    fn plan_bundle(&self, r: &Bundle) -> Plan {
        let mut plan = Plan::new(format!("bundle{}", self.version), "bundle.bin");
        let mut targets = Vec::new();
        let mut inputs = Vec::new();
        let mut host = false;
        for (i, (id, file)) in r.entries.iter().enumerate() {
            targets.push(id.clone());
            let name = format!("input{i}");
            match file {
                Some(f) => plan.steps.push(Step::Copy {
                    from: f.clone(),
                    to: name.clone(),
                }),
                None => plan.steps.push(Step::Touch(name.clone())),
            }
            host |= id.starts_with("host-");
            inputs.push(format!("-input={name}"));
        }
        let mut args = vec![
            format!("-type={}", if host { "o" } else { "bc" }),
            format!("-targets={}", targets.join(",")),
        ];
        args.extend(inputs);
        args.push("-output=bundle.bin".into());
        if r.compress {
            args.push("-compress".into());
        }
        if let Some(l) = r.compression_level {
            args.push(format!("-compression-level={l}"));
        }
        if let Some(a) = r.align {
            args.push(format!("-bundle-align={a}"));
        }
        plan.run(&self.bundler, args, &compress_env(r.compress_version));
        plan
    }
}

fn cache_root() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("offload-fixtures")
}

/// The cache key: the plan's text, the fixture sources, every copied input,
/// and the size and modification time of every program run.
fn plan_key(plan: &Plan) -> String {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    fnv(
        &mut h,
        format!("schema {CACHE_SCHEMA}\n{plan:?}").as_bytes(),
    );
    let mut files: Vec<PathBuf> = fs::read_dir(fixtures_dir())
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    for f in files {
        fnv(&mut h, f.to_string_lossy().as_bytes());
        fnv(&mut h, &fs::read(&f).unwrap_or_default());
    }
    for step in &plan.steps {
        match step {
            Step::Copy { from, .. } => {
                let bytes = fs::read(from)
                    .unwrap_or_else(|e| panic!("recipe input {}: {e}", from.display()));
                fnv(&mut h, &bytes);
            }
            Step::Run { program, .. } => {
                if let Ok(m) = fs::metadata(program) {
                    let t = m
                        .modified()
                        .ok()
                        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                        .map(|d| d.as_nanos())
                        .unwrap_or(0);
                    fnv(&mut h, format!("{} {}", m.len(), t).as_bytes());
                }
            }
            _ => {}
        }
    }
    format!("{}-{h:016x}", plan.slug)
}

fn key_lock(key: &str) -> Arc<Mutex<()>> {
    static LOCKS: OnceLock<Mutex<HashMap<String, Arc<Mutex<()>>>>> = OnceLock::new();
    LOCKS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(key.to_string())
        .or_default()
        .clone()
}

static UNIQUE: AtomicU64 = AtomicU64::new(0);

fn unique_name(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}.tmp-{}-{}-{nanos}",
        std::process::id(),
        UNIQUE.fetch_add(1, Ordering::Relaxed)
    )
}

fn realize(plan: &Plan) -> PathBuf {
    let key = plan_key(plan);
    let root = cache_root();
    let dir = root.join(&key);
    let artefact = dir.join(&plan.output);
    // One builder per key in this process; other processes race harmlessly.
    let lock = key_lock(&key);
    let _guard = lock.lock().unwrap_or_else(|e| e.into_inner());
    if artefact.exists() {
        return artefact;
    }
    fs::create_dir_all(&root).unwrap();
    let tmp = root.join(unique_name(&key));
    fs::create_dir_all(&tmp).unwrap();
    let mut log = String::new();
    for step in &plan.steps {
        match step {
            Step::Run { program, args, env } => {
                let mut cmd = Command::new(program);
                cmd.args(args).current_dir(&tmp);
                for v in BUNDLER_ENV {
                    cmd.env_remove(v);
                }
                for (k, v) in env {
                    cmd.env(k, v);
                }
                let shown = show(program, args, env);
                let out = cmd
                    .output()
                    .unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
                writeln!(log, "$ {shown}").unwrap();
                log.push_str(&String::from_utf8_lossy(&out.stderr));
                if !out.status.success() {
                    let _ = fs::remove_dir_all(&tmp);
                    panic!(
                        "fixture build failed ({}) in {}:\n{log}{}",
                        out.status,
                        tmp.display(),
                        String::from_utf8_lossy(&out.stdout)
                    );
                }
            }
            Step::Copy { from, to } => {
                fs::copy(from, tmp.join(to))
                    .unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
            }
            Step::Touch(name) => fs::write(tmp.join(name), b"").unwrap(),
            Step::Mkdir(name) => fs::create_dir_all(tmp.join(name)).unwrap(),
        }
    }
    assert!(
        tmp.join(&plan.output).exists(),
        "fixture build made no {}:\n{log}",
        plan.output
    );
    fs::write(tmp.join("commands.log"), &log).unwrap();
    if fs::rename(&tmp, &dir).is_err() {
        // Another process finished first: use its (identical) build.
        let _ = fs::remove_dir_all(&tmp);
        assert!(
            artefact.exists(),
            "cannot move a build to {}",
            dir.display()
        );
    }
    artefact
}

fn show(program: &Path, args: &[String], env: &[(String, String)]) -> String {
    let mut s = String::new();
    for (k, v) in env {
        write!(s, "{k}={v} ").unwrap();
    }
    s.push_str(&program.display().to_string());
    for a in args {
        s.push(' ');
        s.push_str(a);
    }
    s
}

// ---------------------------------------------------------------------------
// Scratch files

/// A file or directory under `$CARGO_TARGET_TMPDIR/offload-scratch` that is
/// removed on drop.
#[derive(Debug)]
pub struct TempPath(PathBuf);

impl TempPath {
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl std::ops::Deref for TempPath {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempPath {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        if self.0.is_dir() {
            let _ = fs::remove_dir_all(&self.0);
        } else {
            let _ = fs::remove_file(&self.0);
        }
    }
}

fn scratch_root() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("offload-scratch");
    fs::create_dir_all(&root).unwrap();
    root
}

/// `bytes` in a fresh file (to hand section contents to a reference tool).
pub fn temp_file(bytes: &[u8]) -> TempPath {
    let p = scratch_root().join(unique_name("file"));
    fs::write(&p, bytes).unwrap();
    TempPath(p)
}

/// A fresh empty directory.
pub fn temp_dir() -> TempPath {
    let p = scratch_root().join(unique_name("dir"));
    fs::create_dir_all(&p).unwrap();
    TempPath(p)
}

fn run_tool(cmd: &mut Command) -> Result<std::process::Output, String> {
    for v in BUNDLER_ENV {
        cmd.env_remove(v);
    }
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(format!(
            "{cmd:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

// ---------------------------------------------------------------------------
// Reference tools

/// One image in `llvm-objdump --offloading`'s listing of offload binaries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffloadingImage {
    /// The `file format` header it came under: the file, or `lib.a(member.o)`.
    pub file: String,
    /// `N` of `OFFLOADING IMAGE [N]:`.
    pub index: usize,
    /// `elf`, `llvm ir`, `cubin`, `fatbinary`, `ptx`, `spir-v`, `<none>`.
    pub kind: String,
    pub arch: String,
    pub triple: String,
    /// From the offload kind: `openmp`, `cuda`, `hip`, `sycl`, `none`.
    pub producer: String,
}

/// One bundle entry `llvm-objdump --offloading` extracted from a `.hip_fatbin`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtractedEntry {
    /// Which bundle of the section (0-based), compressed or not.
    pub bundle: usize,
    /// Bundle ID as written in the file (e.g. `hipv4-amdgcn-amd-amdhsa--gfx906`).
    pub id: String,
    pub bytes: Vec<u8>,
}

/// What `llvm-objdump --offloading` says about a file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Offloading {
    /// Offload binaries found in `.llvm.offloading` (or the file itself).
    pub images: Vec<OffloadingImage>,
    /// Entries of the bundles in `.hip_fatbin`, which it writes to
    /// `<input>.<bundle>.<id>` next to the input.
    pub entries: Vec<ExtractedEntry>,
}

/// A section, from `llvm-readobj --elf-output-style=JSON -S`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    pub index: u64,
    pub name: String,
    /// `sh_type` (`SHT_LLVM_OFFLOADING` = 0x6fff4c0b).
    pub kind: u32,
    pub kind_name: String,
    pub flags: u64,
    pub address: u64,
    pub offset: u64,
    pub size: u64,
    pub align: u64,
}

/// One line of `roc-obj-ls -v`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RocObjEntry {
    /// 1-based bundle number.
    pub bundle: usize,
    pub id: String,
    /// `file://<path>#offset=<n>&size=<n>` (path as given, URI-encoded).
    pub uri: String,
    /// Absolute file offset of the code object.
    pub offset: u64,
    pub size: u64,
}

impl Toolchain {
    /// `clang-offload-bundler -list -type=o -input=<file>`: the bundle IDs of
    /// the FIRST bundle in the file, in the tool's (hash) order, not file
    /// order. `Err(stderr)` when the tool fails.
    pub fn bundler_list(&self, file: &Path) -> Result<Vec<String>, String> {
        let out = run_tool(
            Command::new(&self.bundler)
                .arg("-list")
                .arg("-type=o")
                .arg(format!("-input={}", file.display())),
        )?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.trim().to_string())
            .collect())
    }

    /// `clang-offload-bundler -unbundle -type=o -targets=<id> -input=<file>
    /// -output=<tmp>`: the entry's bytes (first bundle only; decompresses).
    pub fn unbundle(&self, file: &Path, id: &str) -> Result<Vec<u8>, String> {
        let dir = temp_dir();
        let out = dir.join("entry");
        run_tool(
            Command::new(&self.bundler)
                .arg("-unbundle")
                .arg("-type=o")
                .arg(format!("-targets={id}"))
                .arg(format!("-input={}", file.display()))
                .arg(format!("-output={}", out.display())),
        )?;
        fs::read(&out).map_err(|e| e.to_string())
    }

    /// `llvm-objdump --offloading <file>`, run on a link to the file in a
    /// scratch directory so the extracted bundle entries land there. Beware:
    /// on librocsparse it would write 1.3 GB.
    pub fn objdump_offloading(&self, file: &Path) -> Result<Offloading, String> {
        let dir = temp_dir();
        let link = dir.join("input");
        let target = fs::canonicalize(file).map_err(|e| format!("{}: {e}", file.display()))?;
        std::os::unix::fs::symlink(target, &link).unwrap();
        let out = run_tool(
            Command::new(&self.objdump)
                .arg("--offloading")
                .arg("input")
                .current_dir(&*dir),
        )?;
        let text = String::from_utf8_lossy(&out.stdout);
        let mut result = Offloading::default();
        let mut file_name = String::new();
        let mut current: Option<OffloadingImage> = None;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("OFFLOADING IMAGE [") {
                result.images.extend(current.take());
                let index = rest.trim_end_matches("]:").parse().unwrap_or(usize::MAX);
                current = Some(OffloadingImage {
                    file: file_name.clone(),
                    index,
                    kind: String::new(),
                    arch: String::new(),
                    triple: String::new(),
                    producer: String::new(),
                });
            } else if let Some(name) = line.strip_prefix("Extracting offload bundle: ") {
                let name = name.trim();
                let rest = name
                    .strip_prefix("input.")
                    .ok_or_else(|| format!("unexpected extracted name {name}"))?;
                let (n, id) = rest
                    .split_once('.')
                    .ok_or_else(|| format!("unexpected extracted name {name}"))?;
                let bytes = fs::read(dir.join(name)).map_err(|e| format!("{name}: {e}"))?;
                let _ = fs::remove_file(dir.join(name));
                result.entries.push(ExtractedEntry {
                    bundle: n
                        .parse()
                        .map_err(|_| format!("bad bundle index in {name}"))?,
                    id: id.to_string(),
                    bytes,
                });
            } else if let Some((name, _)) = line.split_once(":\tfile format ") {
                result.images.extend(current.take());
                let name = name.trim();
                file_name = match name.strip_prefix("input") {
                    Some(member) => format!("{}{member}", file.display()),
                    None => name.to_string(),
                };
            } else if let Some(img) = current.as_mut() {
                if let Some((key, value)) = line.split_once(char::is_whitespace) {
                    let value = value.trim().to_string();
                    match key {
                        "kind" => img.kind = value,
                        "arch" => img.arch = value,
                        "triple" => img.triple = value,
                        "producer" => img.producer = value,
                        _ => {}
                    }
                }
            }
        }
        result.images.extend(current.take());
        Ok(result)
    }

    /// `llvm-offload-binary <file> --image=file=<tmp>,<k>=<v>...`: the bytes
    /// of the image matching the keys (e.g. `[("arch", "gfx90a")]`). Works on
    /// raw offload binaries and on ELF files with `.llvm.offloading`.
    pub fn offload_binary_extract(
        &self,
        file: &Path,
        keys: &[(&str, &str)],
    ) -> Result<Vec<u8>, String> {
        let dir = temp_dir();
        let out = dir.join("image");
        let mut spec = format!("--image=file={}", out.display());
        for (k, v) in keys {
            write!(spec, ",{k}={v}").unwrap();
        }
        run_tool(Command::new(&self.offload_binary).arg(file).arg(spec))?;
        fs::read(&out).map_err(|e| format!("no image matched {keys:?}: {e}"))
    }

    /// The sections of an ELF file (`llvm-readobj --elf-output-style=JSON -S`).
    pub fn sections(&self, file: &Path) -> Result<Vec<Section>, String> {
        let out = run_tool(
            Command::new(&self.readobj)
                .arg("--elf-output-style=JSON")
                .arg("-S")
                .arg(file),
        )?;
        let json: serde_json::Value =
            serde_json::from_slice(&out.stdout).map_err(|e| format!("readobj JSON: {e}"))?;
        let list = json[0]["Sections"]
            .as_array()
            .ok_or("readobj JSON: no Sections")?;
        Ok(list
            .iter()
            .map(|s| {
                let s = &s["Section"];
                let n = |k: &str| s[k].as_u64().unwrap_or(0);
                Section {
                    index: n("Index"),
                    name: s["Name"]["Name"].as_str().unwrap_or("").to_string(),
                    kind: s["Type"]["Value"].as_u64().unwrap_or(0) as u32,
                    kind_name: s["Type"]["Name"].as_str().unwrap_or("").to_string(),
                    flags: s["Flags"]["Value"].as_u64().unwrap_or(0),
                    address: n("Address"),
                    offset: n("Offset"),
                    size: n("Size"),
                    align: n("AddressAlignment"),
                }
            })
            .collect())
    }

    /// The first section called `name`, if any.
    pub fn section(&self, file: &Path, name: &str) -> Option<Section> {
        self.sections(file)
            .unwrap_or_else(|e| panic!("{e}"))
            .into_iter()
            .find(|s| s.name == name)
    }

    /// The contents of section `name` (e.g. `.hip_fatbin`, `.llvm.offloading`),
    /// read from the file at the offset `llvm-readobj` gives.
    pub fn section_bytes(&self, file: &Path, name: &str) -> Option<Vec<u8>> {
        let s = self.section(file, name)?;
        Some(read_range(file, s.offset, s.size))
    }
}

/// `size` bytes of `file` from `offset`.
pub fn read_range(file: &Path, offset: u64, size: u64) -> Vec<u8> {
    let mut f = fs::File::open(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    f.seek(SeekFrom::Start(offset)).unwrap();
    let mut buf = vec![0; size as usize];
    f.read_exact(&mut buf)
        .unwrap_or_else(|e| panic!("{}: {size} bytes at {offset}: {e}", file.display()));
    buf
}

/// `roc-obj-ls -v <file>` (Debian `hipcc`; a Perl script that walks
/// uncompressed bundles in `.hip_fatbin` at 4096-byte steps and prints nothing
/// for compressed ones; it needs GNU `objdump`). `None` if it is not
/// installed (outside CI); `Err` when it fails (e.g. no `.hip_fatbin`).
pub fn roc_obj_ls(file: &Path) -> Option<Result<Vec<RocObjEntry>, String>> {
    let Some(tool) = in_path("roc-obj-ls") else {
        missing("roc-obj-ls", "hipcc");
        return None;
    };
    if in_path("objdump").is_none() {
        missing("objdump (GNU, used by roc-obj-ls)", "binutils");
        return None;
    }
    Some(parse_roc_obj_ls(run_tool(
        Command::new(tool).arg("-v").arg(file),
    )))
}

fn parse_roc_obj_ls(out: Result<std::process::Output, String>) -> Result<Vec<RocObjEntry>, String> {
    let out = out?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut entries = Vec::new();
    for line in text.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() != 3 || cols[0] == "Bundle#" {
            continue;
        }
        let Ok(bundle) = cols[0].parse() else {
            continue;
        };
        let uri = cols[2].to_string();
        let query = uri.rsplit_once('#').map(|(_, q)| q).unwrap_or("");
        let mut offset = None;
        let mut size = None;
        for kv in query.split('&') {
            match kv.split_once('=') {
                Some(("offset", v)) => offset = v.parse().ok(),
                Some(("size", v)) => size = v.parse().ok(),
                _ => {}
            }
        }
        let (Some(offset), Some(size)) = (offset, size) else {
            return Err(format!("roc-obj-ls: cannot parse {line:?}"));
        };
        entries.push(RocObjEntry {
            bundle,
            id: cols[1].to_string(),
            uri,
            offset,
            size,
        });
    }
    Ok(entries)
}

/// Little-endian u16 at `at`.
pub fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().unwrap())
}

/// Little-endian u32 at `at`.
pub fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

/// Little-endian u64 at `at`.
pub fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

// ---------------------------------------------------------------------------
// The libraries `cargo build --workspace` produces, scratch space, programs

/// A tool outside LLVM (valgrind, ...) from PATH.
pub fn system_tool(name: &str, package: &str) -> Option<PathBuf> {
    let found = in_path(name);
    if found.is_none() {
        missing(name, package);
    }
    found
}

/// The directory cargo builds into (`target/debug`), from this test's path.
pub fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/debug/deps/<test> -> target/debug
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// A library `cargo build --workspace` produces (`.ci/run` builds it first).
pub fn built(file: &str) -> Option<PathBuf> {
    let p = build_dir().join(file);
    if p.exists() {
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

/// A fresh scratch directory for `name` under the test target directory.
pub fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `cmd`, panicking with its output if it fails.
pub fn run_ok(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A test program's source, in tests/programs.
pub fn program(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/programs")
        .join(name)
}
