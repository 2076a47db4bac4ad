//! NVIDIA's CUDA 13 toolchain from the PyPI wheels (`.ci/cuda-wheels.sh`):
//! programs built with the real `nvcc` at test time (cached like every other
//! artefact, [`realize`]), what `cuobjdump` lists, dumps and extracts, and the
//! NVIDIA libraries of the same cache.
//!
//! Missing wheels: with `CI=true` a failure naming the script that fetches
//! them; otherwise `skipped:` and `None`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use super::*;

/// How to get what is missing.
pub const FETCH: &str = "run `bash .ci/cuda-wheels.sh` (pip downloads NVIDIA's CUDA 13 wheels into ~/.cache/offload-loader)";

/// The cache `.ci/cuda-wheels.sh` fills.
pub fn cuda_cache() -> PathBuf {
    match std::env::var_os("OFFLOAD_LOADER_CACHE") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/offload-loader"),
    }
}

fn missing_wheel(what: &str) {
    assert!(!ci(), "{what} is not installed: {FETCH}");
    eprintln!("skipped: {what} not installed ({FETCH})");
}

/// CUDA 13.5 `nvcc` and `cuobjdump` 13.4, from the wheels.
#[derive(Clone, Debug)]
pub struct Cuda {
    pub bin: PathBuf,
    pub nvcc: PathBuf,
    pub cuobjdump: PathBuf,
}

pub fn cuda() -> Option<Cuda> {
    static CUDA: OnceLock<Option<Cuda>> = OnceLock::new();
    CUDA.get_or_init(|| {
        let bin = cuda_cache().join("cuda13/nvidia/cu13/bin");
        let (nvcc, cuobjdump) = (bin.join("nvcc"), bin.join("cuobjdump"));
        if !nvcc.is_file() || !cuobjdump.is_file() {
            missing_wheel("CUDA 13 nvcc and cuobjdump");
            return None;
        }
        Some(Cuda {
            bin,
            nvcc,
            cuobjdump,
        })
    })
    .clone()
}

/// An NVIDIA library from the wheels (`libcurand.so.10`, `libcusparse.so.12`).
pub fn nvidia_library(name: &str) -> Option<PathBuf> {
    let path = cuda_cache().join("libs/nvidia/cu13/lib").join(name);
    if path.is_file() {
        Some(path)
    } else {
        missing_wheel(name);
        None
    }
}

/// The kernel file every NVIDIA test builds: a kernel and a device variable.
pub const KERNEL_CU: &str = "__device__ int scale = 1;\n\
extern \"C\" __global__ void add_one(int *x) { x[threadIdx.x] += scale; }\n";

/// What `nvcc` makes: an object (`-c`), an executable, a shared library, a
/// raw fat binary, cubin or PTX, or an archive of objects.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NvOutput {
    Object,
    Executable,
    SharedLibrary,
    Fatbin,
    Cubin,
    Ptx,
    /// `ar` of the objects of these nvcc argument lists.
    Archive(Vec<Vec<String>>),
}

impl Cuda {
    fn nvcc_env(&self) -> Vec<(String, String)> {
        let path = std::env::var("PATH").unwrap_or_default();
        vec![("PATH".into(), format!("{}:{path}", self.bin.display()))]
    }

    /// `nvcc`, with the wheel's tools first on its `PATH`, for a build of
    /// a test's own.
    pub fn nvcc_command(&self) -> Command {
        let mut cmd = Command::new(&self.nvcc);
        cmd.envs(self.nvcc_env());
        cmd
    }

    /// `nvcc ARGS` on [`KERNEL_CU`] (plus `text`'s extra source) making
    /// `output`, cached; the artefact's path.
    pub fn nvcc(&self, args: &[&str], output: NvOutput) -> PathBuf {
        let (flag, name) = match &output {
            NvOutput::Object | NvOutput::Archive(_) => ("-c", "k.o"),
            NvOutput::Executable => ("", "k"),
            NvOutput::SharedLibrary => ("-shared", "libk.so"),
            NvOutput::Fatbin => ("-fatbin", "k.fatbin"),
            NvOutput::Cubin => ("-cubin", "k.cubin"),
            NvOutput::Ptx => ("-ptx", "k.ptx"),
        };
        let slug: String = args
            .join("_")
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(40)
            .collect();
        let artefact = match &output {
            NvOutput::Archive(_) => "libk.a",
            _ => name,
        };
        let mut plan = Plan::new(format!("nvcc-{slug}"), artefact);
        plan.steps.push(Step::Write {
            name: "k.cu".into(),
            text: format!("{KERNEL_CU}int main() {{ return 0; }}\n"),
        });
        let env = self.nvcc_env();
        let mut run = |args: Vec<String>, out: &str, src: &str| {
            let mut a = args;
            a.extend(["-o".to_string(), out.to_string(), src.to_string()]);
            plan.run(&self.nvcc, a, &env);
        };
        let owned = |args: &[&str]| args.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        match &output {
            NvOutput::Archive(members) => {
                let mut ar = vec!["rcs".to_string(), "libk.a".to_string()];
                for (i, member) in members.iter().enumerate() {
                    let mut a = member.clone();
                    a.push("-c".into());
                    let obj = format!("m{i}.o");
                    run(a, &obj, "k.cu");
                    ar.push(obj);
                }
                plan.run(Path::new("/usr/bin/ar"), ar, &[]);
            }
            _ => {
                let mut a = owned(args);
                if !flag.is_empty() {
                    a.push(flag.into());
                }
                if output == NvOutput::SharedLibrary {
                    a.extend(["-Xcompiler".into(), "-fPIC".into()]);
                }
                run(a, name, "k.cu");
            }
        }
        realize(&plan)
    }

    fn cuobjdump_cmd(&self) -> Command {
        let mut cmd = Command::new(&self.cuobjdump);
        cmd.env("PATH", &self.nvcc_env()[0].1);
        cmd
    }

    /// `cuobjdump -lelf -lptx FILE`: (kind `ELF`/`PTX`, number, arch) per
    /// line, in order. cuobjdump names `f` code by its plain arch here.
    pub fn cuobjdump_list(&self, file: &Path) -> Vec<(String, u32, String)> {
        let out = self
            .cuobjdump_cmd()
            .args(["-lelf", "-lptx"])
            .arg(file)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .filter_map(|l| {
                let (kind, rest) = l.split_once(" file")?;
                let name = rest.split_once(": ")?.1;
                let (n, arch) = split_name(name)?;
                Some((kind.trim().to_string(), n, arch))
            })
            .collect()
    }

    /// The entries `cuobjdump FILE` dumps: (kind `elf`/`ptx`/`concatenated
    /// entry`, arch with its variant, compressed, inside a --concat group).
    pub fn cuobjdump_entries(&self, file: &Path) -> Vec<DumpEntry> {
        let out = self.cuobjdump_cmd().arg(file).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let mut entries: Vec<DumpEntry> = Vec::new();
        for line in text.lines() {
            let member = line.starts_with('\t');
            let l = line.trim();
            if let Some(kind) = l
                .strip_prefix("Fatbin ")
                .and_then(|k| k.strip_suffix(" code:"))
            {
                entries.push(DumpEntry {
                    kind: kind.to_string(),
                    arch: None,
                    compressed: false,
                    member,
                });
            } else if let Some(e) = entries.last_mut() {
                if let Some(arch) = l.strip_prefix("arch = ") {
                    e.arch.get_or_insert(arch.to_string());
                } else if l == "compressed" {
                    e.compressed = true;
                }
            }
        }
        entries
    }

    /// `cuobjdump -xelf NAME -xptx NAME FILE` in a scratch directory: the
    /// files it writes, (number, arch, kind `cubin`/`ptx`, bytes), sorted.
    pub fn cuobjdump_extract(
        &self,
        file: &Path,
        name: &str,
    ) -> Vec<(u32, String, String, Vec<u8>)> {
        let dir = temp_dir();
        for flag in ["-xelf", "-xptx"] {
            let _ = self
                .cuobjdump_cmd()
                .current_dir(&*dir)
                .args([flag, name])
                .arg(file)
                .output()
                .unwrap();
        }
        let mut out: Vec<(u32, String, String, Vec<u8>)> = fs::read_dir(&*dir)
            .unwrap()
            .filter_map(|e| {
                let p = e.ok()?.path();
                let file_name = p.file_name()?.to_str()?.to_string();
                let (n, arch) = split_name(&file_name)?;
                let ext = file_name.rsplit('.').next()?.to_string();
                Some((n, arch, ext, fs::read(&p).ok()?))
            })
            .collect();
        out.sort();
        out
    }

    /// `cuobjdump -xelf all` then `-xptx all` on `file` in a scratch
    /// directory: each file it says it extracts, in its order, as (kind
    /// `ELF`/`PTX`, number, name), and the files left in the directory by
    /// name (a name written twice holds the last).
    pub fn cuobjdump_extract_files(&self, file: &Path) -> CuobjdumpFiles {
        let dir = temp_dir();
        let mut listed = Vec::new();
        for flag in ["-xelf", "-xptx"] {
            let out = self
                .cuobjdump_cmd()
                .current_dir(&*dir)
                .args([flag, "all"])
                .arg(file)
                .output()
                .unwrap();
            // "Extracting ELF file    1: k.1.sm_80.cubin", "Extracting PTX
            // file and ptxas options    1: k.1.sm_80.ptx -arch=sm_80 ..."
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                let Some(rest) = line.strip_prefix("Extracting ") else {
                    continue;
                };
                let (kind, rest) = rest.split_once(" file").unwrap();
                let rest = rest.trim_start_matches(" and ptxas options");
                let (n, name) = rest.split_once(": ").unwrap();
                let name = name.split_whitespace().next().unwrap();
                listed.push((kind.to_string(), n.trim().parse().unwrap(), name.into()));
            }
        }
        CuobjdumpFiles {
            listed,
            files: files_in(&dir),
        }
    }
}

/// What `cuobjdump -xelf all -xptx all` wrote ([`Cuda::cuobjdump_extract_files`]).
#[derive(Clone, Debug)]
pub struct CuobjdumpFiles {
    /// (kind `ELF`/`PTX`, number, file name), in the order it extracted them.
    pub listed: Vec<(String, u32, String)>,
    /// The files in its directory afterwards, by name.
    pub files: std::collections::BTreeMap<String, Vec<u8>>,
}

/// One entry of `cuobjdump`'s dump.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpEntry {
    pub kind: String,
    pub arch: Option<String>,
    pub compressed: bool,
    pub member: bool,
}

/// `base.N.sm_XY.cubin` → (N, `sm_XY`); a raw cubin's `base.sm_XY.cubin` → (1, `sm_XY`).
fn split_name(name: &str) -> Option<(u32, String)> {
    let mut parts = name.rsplit('.');
    let _ext = parts.next()?;
    let arch = parts.next()?.to_string();
    let n = parts.next().and_then(|n| n.parse().ok()).unwrap_or(1);
    Some((n, arch))
}

impl Cuda {
    /// `tests/programs/app.cu` built by `nvcc ARGS -cudart none`, linked with
    /// the shared `liboffload_loader` of `cargo build` (its registration ABI
    /// takes the place of cudart's), cached; `None` when the library is not
    /// built (see [`built`]).
    pub fn program_with_loader(&self, args: &[&str]) -> Option<PathBuf> {
        self.with_loader("app.cu", "app", args)
    }

    /// `tests/programs/cuda_lib.cu` as the shared library `libcudalib.so`,
    /// built and linked as [`Cuda::program_with_loader`] builds its program.
    pub fn library_with_loader(&self, args: &[&str]) -> Option<PathBuf> {
        let mut a = args.to_vec();
        a.extend(["-shared", "-Xcompiler", "-fPIC"]);
        self.with_loader("cuda_lib.cu", "libcudalib.so", &a)
    }

    /// `tests/programs/<source>` built as `output` by `nvcc ARGS -cudart
    /// none`, linked as [`Cuda::program_with_loader`] links its program.
    pub fn with_loader(&self, source: &str, output: &str, args: &[&str]) -> Option<PathBuf> {
        let lib = built("liboffload_loader.so")?;
        let dir = lib.parent().unwrap().display().to_string();
        let slug: String = args
            .join("_")
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(40)
            .collect();
        let mut plan = Plan::new(format!("nvcc-{output}-{slug}"), output);
        let source = program(source);
        let include = workspace().join("ffi/include");
        plan.source(&source);
        plan.source(&include.join("offload_loader.h"));
        plan.library(&lib);
        let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        a.extend([
            "-cudart".into(),
            "none".into(),
            "-I".into(),
            include.display().to_string(),
            source.display().to_string(),
            format!("-L{dir}"),
            "-loffload_loader".into(),
            "-Xlinker".into(),
            format!("-rpath,{dir}"),
            "-o".into(),
            output.into(),
        ]);
        plan.run(&self.nvcc, a, &self.nvcc_env());
        Some(realize(&plan))
    }
}
