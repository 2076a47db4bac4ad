//! HIP recipes: objects, executables and shared libraries compiled by clang
//! (`-x hip -nogpulib -nogpuinc`), and single AMDGPU code objects.

use super::build::{compress_env, cuid, src, stem, Plan};
use super::{strings, Toolchain};

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
/// One AMDGPU code object (ELF) for `arch`: `kernels.hip` compiled with
/// `--offload-device-only --no-gpu-bundle-output -c`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CodeObject {
    pub arch: String,
    pub source: String,
    /// Extra compiler arguments (`-mcode-object-version=5`, `-mllvm ...`).
    pub args: Vec<String>,
}

impl CodeObject {
    pub fn new(arch: &str) -> Self {
        CodeObject {
            arch: arch.into(),
            source: "kernels.hip".into(),
            args: Vec::new(),
        }
    }
    pub fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.into());
        self
    }
}

impl Toolchain {
    pub(super) fn plan_hip(&self, r: &Hip) -> Plan {
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

    pub(super) fn plan_code_object(&self, r: &CodeObject) -> Plan {
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
            ]
            .into_iter()
            .chain(r.args.iter().cloned())
            .collect(),
            &[],
        );
        plan
    }
}
