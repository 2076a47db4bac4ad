//! Finding the tools: LLVM's of a given version, the system's, and the Debian
//! packages that ship them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use super::missing;

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
        "ld.lld" | "lld" => return format!("lld-{version}"),
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

pub fn in_path(name: &str) -> Option<PathBuf> {
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
    system_file(
        "/usr/lib/x86_64-linux-gnu/librocsparse.so.0.1",
        "librocsparse0",
    )
}

/// rocBLAS 2.47, Debian trixie's `librocblas0` 5.5.1+dfsg-7 unpacked
/// (`.ci/rocblas.sh`): the prefix holding `usr/lib/x86_64-linux-gnu/
/// librocblas.so.0.1` and `usr/lib/x86_64-linux-gnu/rocblas/2.47.0/library`.
/// Missing: a failure naming the script under `CI=true`, else a skip.
pub fn rocblas() -> Option<PathBuf> {
    const FETCH: &str = "run `bash .ci/rocblas.sh` (Debian trixie's librocblas0, unpacked into ~/.cache/offload-loader)";
    let dir = super::cuda_cache().join("rocblas-5.5.1+dfsg-7");
    let stamp = super::cuda_cache().join("rocblas-5.5.1+dfsg-7.stamp");
    if dir.is_dir() && stamp.is_file() {
        return Some(dir);
    }
    assert!(!super::ci(), "rocBLAS 2.47 is not here: {FETCH}");
    eprintln!("skipped: rocBLAS 2.47 not here ({FETCH})");
    None
}

/// `path`, a file Debian package `package` installs, if it exists; same CI
/// rule.
pub fn system_file(path: &str, package: &str) -> Option<PathBuf> {
    let p = PathBuf::from(path);
    if p.exists() {
        Some(p)
    } else {
        missing(path, package);
        None
    }
}

/// A tool outside LLVM (valgrind, ...) from PATH.
pub fn system_tool(name: &str, package: &str) -> Option<PathBuf> {
    let found = in_path(name);
    if found.is_none() {
        missing(name, package);
    }
    found
}

/// The directory `.ci/run` downloads PyPI wheels into:
/// `$OFFLOAD_LOADER_WHEELS`, else `~/.cache/offload-loader/wheels`.
pub fn wheel_dir() -> PathBuf {
    std::env::var_os("OFFLOAD_LOADER_WHEELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
            PathBuf::from(home).join(".cache/offload-loader/wheels")
        })
}

/// The downloaded wheel whose file name starts with `prefix` (e.g.
/// `cupy_rocm_7_0-14.2.0-`), unpacked once into a scratch directory laid out
/// as a virtual environment holds it (`<venv>/lib/python3/site-packages`);
/// returns the environment's root. It is unpacked under the system's
/// temporary directory, which every user can reach (a test reads it as an
/// unprivileged user). Same CI rule as the tools.
pub fn unpacked_wheel(prefix: &str, requirement: &str) -> Option<PathBuf> {
    let wheel = std::fs::read_dir(wheel_dir()).ok().and_then(|entries| {
        entries.filter_map(|e| e.ok().map(|e| e.path())).find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix) && n.ends_with(".whl"))
        })
    });
    let Some(wheel) = wheel else {
        missing(
            &format!("the PyPI wheel {requirement} in {}", wheel_dir().display()),
            &format!("(pip) {requirement}: .ci/run downloads it"),
        );
        return None;
    };
    let venv = std::env::temp_dir().join(format!("offload-loader-venv-{prefix}"));
    let site = venv.join("lib/python3/site-packages");
    let done = venv.join(".unpacked");
    if !done.exists() {
        let _ = std::fs::remove_dir_all(&site);
        std::fs::create_dir_all(&site).unwrap();
        super::run_ok(
            Command::new("python3")
                .args(["-m", "zipfile", "-e"])
                .arg(&wheel)
                .arg(&site),
        );
        std::fs::write(&done, "").unwrap();
    }
    Some(venv)
}

/// The SONAME `readelf -d` reads in shared object `lib`.
pub fn soname(lib: &Path) -> Option<String> {
    let out = Command::new("readelf").arg("-d").arg(lib).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.contains("(SONAME)"))?;
    let name = line.split_once('[')?.1.split_once(']')?.0;
    Some(name.to_string())
}

/// The dynamic symbols `nm -D` lists as defined.
pub fn dynamic_symbols(file: &Path) -> Vec<String> {
    let out = super::run_ok(Command::new("nm").args(["-D", "--defined-only"]).arg(file));
    let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(String::from))
        .collect();
    v.sort();
    v
}

/// `dlopen(file, RTLD_NOW)` in a child process: the error, or `None`.
pub fn dlopen(file: &Path) -> Option<String> {
    let python = system_tool("python3", "python3")?;
    let out = Command::new(python)
        .arg("-c")
        .arg("import ctypes, os, sys; ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW); print('ok')")
        .arg(file)
        .output()
        .unwrap();
    (String::from_utf8_lossy(&out.stdout).trim() != "ok")
        .then(|| String::from_utf8_lossy(&out.stderr).replace(&file.display().to_string(), "FILE"))
}
