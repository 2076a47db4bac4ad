//! OpenMP recipes: `-fopenmp --offload-arch=...` objects, archives, programs
//! and shared libraries.

use super::build::{src, stem, Plan, Step};
use super::{strings, Output, Toolchain};

/// objects and archives.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OpenMp {
    pub archs: Vec<String>,
    pub output: Output,
    pub sources: Vec<String>,
}

impl OpenMp {
    pub fn new(archs: &[&str]) -> Self {
        OpenMp {
            archs: strings(archs),
            output: Output::Object,
            sources: vec!["omp_kernels.c".into()],
        }
    }
    pub fn output(mut self, output: Output) -> Self {
        self.output = output;
        self
    }
}

impl Toolchain {
    pub(super) fn plan_openmp(&self, r: &OpenMp) -> Plan {
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
}
