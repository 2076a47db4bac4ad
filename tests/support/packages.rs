//! Containers made by the standalone tools: PTX text, offload binaries
//! (`llvm-offload-binary`), raw bundle files (`clang-offload-bundler`) and
//! static archives (`llvm-ar`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::build::{compress_env, src, Plan, Step};
use super::Toolchain;

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
    /// PTX ISA feature `isa` (e.g. `ptx78`) instead of `ptx75`.
    pub fn isa(mut self, isa: &str) -> Self {
        self.isa = isa.into();
        self
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
    /// `-bundle-align=` (tool default 1).
    pub align: Option<u64>,
}

impl Bundle {
    pub fn new() -> Self {
        Bundle {
            entries: Vec::new(),
            compress: false,
            compress_version: None,
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

/// A static archive (`llvm-ar rcs lib.a <members>`) of other recipes'
/// artefacts, each copied in under its member name first, in the order given.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Archive {
    /// (member name, file).
    pub members: Vec<(String, PathBuf)>,
}

impl Archive {
    pub fn new() -> Self {
        Archive {
            members: Vec::new(),
        }
    }
    pub fn member(mut self, name: &str, file: &Path) -> Self {
        self.members.push((name.into(), file.to_path_buf()));
        self
    }
}

impl Default for Archive {
    fn default() -> Self {
        Self::new()
    }
}

impl Toolchain {
    pub(super) fn plan_ptx(&self, r: &Ptx) -> Plan {
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

    pub(super) fn plan_package(&self, r: &Package) -> Plan {
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

    pub(super) fn plan_bundle(&self, r: &Bundle) -> Plan {
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
        if let Some(a) = r.align {
            args.push(format!("-bundle-align={a}"));
        }
        plan.run(&self.bundler, args, &compress_env(r.compress_version));
        plan
    }

    pub(super) fn plan_archive(&self, r: &Archive) -> Plan {
        let mut plan = Plan::new(format!("ar{}", self.version), "lib.a");
        let mut args = vec!["rcs".to_string(), "lib.a".into()];
        for (name, file) in &r.members {
            plan.steps.push(Step::Copy {
                from: file.clone(),
                to: name.clone(),
            });
            args.push(name.clone());
        }
        plan.run(&self.ar, args, &[]);
        plan
    }
}
