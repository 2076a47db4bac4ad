//! The cached build machinery: a recipe becomes a plan (the exact commands
//! and inputs), the plan's hash names its cache directory, and the plan runs
//! in a private temporary directory that is renamed into place at the end.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::*;

/// Anything [`Toolchain::build`] makes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Recipe {
    Hip(Hip),
    OpenMp(OpenMp),
    CodeObject(CodeObject),
    Ptx(Ptx),
    Package(Package),
    Bundle(Bundle),
    Archive(Archive),
    LinkedProgram(LinkedProgram),
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
into_recipe!(
    Hip,
    OpenMp,
    CodeObject,
    Ptx,
    Package,
    Bundle,
    Archive,
    LinkedProgram
);

// Build plans and the cache

#[derive(Debug)]
pub enum Step {
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
    /// A file with these contents (a generated source).
    Write {
        name: String,
        text: String,
    },
    /// A symbolic link `to` -> `from` (absolute).
    Symlink {
        from: PathBuf,
        to: String,
    },
    /// A file the commands read where it is: its contents are hashed.
    Source(PathBuf),
    /// A (large) file the commands read where it is, such as a library
    /// `cargo build` made: its size and modification time are hashed.
    Library(PathBuf),
}

#[derive(Debug)]
pub struct Plan {
    pub slug: String,
    pub steps: Vec<Step>,
    /// The artefact, relative to the build directory.
    pub output: String,
}

impl Plan {
    pub fn new(slug: String, output: &str) -> Self {
        Plan {
            slug,
            steps: Vec::new(),
            output: output.into(),
        }
    }
    pub fn run(&mut self, program: &Path, args: Vec<String>, env: &[(String, String)]) {
        self.steps.push(Step::Run {
            program: program.to_path_buf(),
            args,
            env: env.to_vec(),
        });
    }
    pub fn source(&mut self, path: &Path) {
        self.steps.push(Step::Source(path.to_path_buf()));
    }
    pub fn library(&mut self, path: &Path) {
        self.steps.push(Step::Library(path.to_path_buf()));
    }
}

/// Environment variables that change what the bundler writes: removed from
/// every build command unless a recipe sets them.
pub const BUNDLER_ENV: &[&str] = &[
    "COMPRESSED_BUNDLE_FORMAT_VERSION",
    "OFFLOAD_BUNDLER_COMPRESS",
    "OFFLOAD_BUNDLER_VERBOSE",
];

/// Bump when the meaning of a plan changes without its text changing.
const CACHE_SCHEMA: u32 = 1;

pub fn fnv(h: &mut u64, bytes: &[u8]) {
    for b in bytes {
        *h ^= u64::from(*b);
        *h = h.wrapping_mul(0x100_0000_01b3);
    }
}

pub fn src(name: &str) -> String {
    fixture(name).display().to_string()
}

pub fn stem(name: &str) -> &str {
    Path::new(name).file_stem().unwrap().to_str().unwrap()
}

/// A cuid per source, so each translation unit's `__hip_cuid_*` symbol is
/// stable (clang's default hashes the output path, which here is temporary).
pub fn cuid(name: &str) -> String {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    fnv(&mut h, name.as_bytes());
    format!("-cuid={h:016x}")
}

pub fn compress_env(version: Option<u32>) -> Vec<(String, String)> {
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
            Recipe::Archive(r) => self.plan_archive(r),
            Recipe::LinkedProgram(r) => self.plan_linked_program(r),
        };
        realize(&plan)
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
            Step::Source(path) => {
                let bytes = fs::read(path)
                    .unwrap_or_else(|e| panic!("recipe source {}: {e}", path.display()));
                fnv(&mut h, &bytes);
            }
            Step::Run { program: path, .. } | Step::Library(path) => {
                if let Ok(m) = fs::metadata(path) {
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

pub fn unique_name(prefix: &str) -> String {
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

pub fn realize(plan: &Plan) -> PathBuf {
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
            Step::Write { name, text } => fs::write(tmp.join(name), text).unwrap(),
            Step::Symlink { from, to } => std::os::unix::fs::symlink(from, tmp.join(to))
                .unwrap_or_else(|e| panic!("symlink {}: {e}", from.display())),
            Step::Source(_) | Step::Library(_) => {}
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

/// The files in `dir` (not below it), by name.
pub fn files_in(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, fs::read(&p).unwrap())
        })
        .collect()
}

pub fn run_tool(cmd: &mut Command) -> Result<std::process::Output, String> {
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
