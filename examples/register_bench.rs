//! What one `__hipRegisterFatBinary` costs: liboffload_loader's against
//! libamdhip64's (Debian `libamdhip64-5`), on the 111 fat binaries of
//! Debian's rocSPARSE, in one process; then again with more objects loaded.
//!
//! ```sh
//! cargo build --release -p offload-loader-ffi
//! cargo run --release --example register_bench -- [--rounds 50] [--objects 0,500,1000,2000]
//! # instructions per call (each implementation in its own run):
//! valgrind --tool=callgrind --collect-atstart=no --toggle-collect=bench_register \
//!   target/release/examples/register_bench --only ours --rounds 1 --objects 0
//! ```
//!
//! rocSPARSE is `dlopen`ed first, so its own constructors register its fat
//! binaries with libamdhip64 (its `DT_NEEDED`), as in any program; the
//! benchmark then calls each implementation's `__hipRegisterFatBinary` on the
//! same 111 wrappers in rocSPARSE's memory (`.hipFatBinSegment`), and
//! `__hipUnregisterFatBinary` on each handle, untimed. "Objects" are copies
//! of a one-function shared object (built with `cc`), each `dlopen`ed.
//! Times are the median round's, per call.

use std::ffi::c_void;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Instant;

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};

type Register = unsafe extern "C" fn(*const c_void) -> *mut *mut c_void;
type Unregister = unsafe extern "C" fn(*mut *mut c_void);

const ROCSPARSE: &str = "/usr/lib/x86_64-linux-gnu/librocsparse.so.0";

/// The address and size of section `name` in the ELF file at `path`, read
/// from its section headers.
fn section(path: &str, name: &str) -> Option<(u64, u64)> {
    let mut f = std::fs::File::open(path).ok()?;
    let mut read = |at: u64, len: usize| -> Option<Vec<u8>> {
        let mut b = vec![0; len];
        f.seek(SeekFrom::Start(at)).ok()?;
        f.read_exact(&mut b).ok()?;
        Some(b)
    };
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]) as u64;
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as u64;
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let eh = read(0, 64)?;
    let (shoff, shentsize, shnum, shstrndx) = (
        u64_at(&eh, 40),
        u16_at(&eh, 58),
        u16_at(&eh, 60),
        u16_at(&eh, 62) as usize,
    );
    let shdrs = read(shoff, (shentsize * shnum) as usize)?;
    let shdr = |i: usize| &shdrs[i * shentsize as usize..(i + 1) * shentsize as usize];
    let strtab = shdr(shstrndx);
    let names = read(u64_at(strtab, 24), u64_at(strtab, 32) as usize)?;
    (0..shnum as usize).find_map(|i| {
        let h = shdr(i);
        let at = u32_at(h, 0) as usize;
        let end = names[at..].iter().position(|&c| c == 0)? + at;
        (&names[at..end] == name.as_bytes()).then(|| (u64_at(h, 16), u64_at(h, 32)))
    })
}

/// The load base of the object that defines `symbol` in `lib`.
fn base_of(lib: &Library, symbol: &str) -> usize {
    // SAFETY: only the symbol's address is used.
    let sym: libloading::os::unix::Symbol<*const c_void> =
        unsafe { lib.get(symbol.as_bytes()) }.expect("rocSPARSE symbol");
    // SAFETY: all-zero is a valid Dl_info; dladdr fills it.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: a valid address and a live out-structure.
    assert!(unsafe { libc::dladdr(*sym, &mut info) } != 0);
    info.dli_fbase as usize
}

struct Implementation {
    name: &'static str,
    register: Register,
    unregister: Unregister,
}

/// Registers every wrapper once (the function callgrind instruments).
#[no_mangle]
#[inline(never)]
pub fn bench_register(register: Register, wrappers: &[usize], handles: &mut [*mut *mut c_void]) {
    for (w, h) in wrappers.iter().zip(handles.iter_mut()) {
        // SAFETY: `w` is a fat binary wrapper in rocSPARSE's loaded memory.
        *h = unsafe { register(*w as *const c_void) };
    }
}

/// Registers and unregisters every wrapper once, outside [`bench_register`]:
/// after it, each implementation registers these wrappers as new (libamdhip64
/// would otherwise find the ones rocSPARSE's constructors registered, and
/// take its shorter path for a fat binary it already has).
fn warm_up(imp: &Implementation, wrappers: &[usize]) {
    for w in wrappers {
        // SAFETY: `w` is a fat binary wrapper in rocSPARSE's loaded memory,
        // and the handle came from this implementation's register.
        unsafe { (imp.unregister)((imp.register)(*w as *const c_void)) };
    }
}

/// Median nanoseconds per registration over `rounds` rounds.
fn measure(imp: &Implementation, wrappers: &[usize], rounds: usize) -> f64 {
    warm_up(imp, wrappers);
    let mut handles = vec![std::ptr::null_mut(); wrappers.len()];
    let mut per_call: Vec<f64> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            bench_register(imp.register, wrappers, &mut handles);
            let took = start.elapsed().as_nanos() as f64 / wrappers.len() as f64;
            for h in &handles {
                // SAFETY: each handle came from this implementation's register.
                unsafe { (imp.unregister)(*h) };
            }
            took
        })
        .collect();
    per_call.sort_by(f64::total_cmp);
    per_call[per_call.len() / 2]
}

/// `n` distinct copies of a one-function shared object, `dlopen`ed.
fn load_objects(dir: &Path, from: usize, to: usize, keep: &mut Vec<Library>) {
    let so = dir.join("one.so");
    if !so.exists() {
        let c = dir.join("one.c");
        std::fs::write(&c, "int one(void) { return 1; }\n").unwrap();
        let ok = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&so)
            .arg(&c)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "cc could not build a shared object");
    }
    for i in from..to {
        let copy = dir.join(format!("obj{i}.so"));
        std::fs::copy(&so, &copy).unwrap();
        // SAFETY: a one-function object without constructors.
        keep.push(unsafe { Library::open(Some(&copy), RTLD_NOW | RTLD_LOCAL) }.unwrap());
    }
}

fn main() {
    let mut rounds = 50;
    let mut objects = vec![0usize, 500, 1000, 2000];
    let mut only: Option<String> = None;
    let mut loader = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/target/release/liboffload_loader.so"
    ));
    if let Ok(dir) = std::env::var("CARGO_TARGET_DIR") {
        loader = Path::new(&dir).join("release/liboffload_loader.so");
    }
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().expect("a value");
        match a.as_str() {
            "--rounds" => rounds = value().parse().unwrap(),
            "--objects" => objects = value().split(',').map(|v| v.parse().unwrap()).collect(),
            "--only" => only = Some(value()),
            "--loader" => loader = value().into(),
            _ => panic!("unknown argument {a}"),
        }
    }
    // SAFETY: rocSPARSE's constructors register its fat binaries with HIP.
    let rocsparse =
        unsafe { Library::open(Some(ROCSPARSE), RTLD_NOW | RTLD_LOCAL) }.expect(ROCSPARSE);
    let base = base_of(&rocsparse, "rocsparse_create_handle");
    let (addr, size) = section(ROCSPARSE, ".hipFatBinSegment").expect(".hipFatBinSegment");
    let wrappers: Vec<usize> = (0..size / 24)
        .map(|i| base + (addr + 24 * i) as usize)
        .collect();

    // SAFETY: both libraries export the HIP registration ABI.
    let ours = unsafe { Library::open(Some(&loader), RTLD_NOW | RTLD_LOCAL) }.unwrap_or_else(|e| {
        panic!(
            "{}: {e} (cargo build --release -p offload-loader-ffi)",
            loader.display()
        )
    });
    let hip = unsafe { Library::open(Some("libamdhip64.so.5"), RTLD_NOW | RTLD_LOCAL) }
        .expect("libamdhip64.so.5");
    let get = |lib: &Library, name: &str| -> (Register, Unregister) {
        // SAFETY: the C signatures of the HIP registration ABI.
        unsafe {
            (
                *lib.get::<Register>(name.as_bytes()).unwrap(),
                *lib.get::<Unregister>(b"__hipUnregisterFatBinary").unwrap(),
            )
        }
    };
    let (r, u) = get(&ours, "__hipRegisterFatBinary");
    let (hr, hu) = get(&hip, "__hipRegisterFatBinary");
    let imps: Vec<Implementation> = [
        Implementation {
            name: "liboffload_loader",
            register: r,
            unregister: u,
        },
        Implementation {
            name: "libamdhip64 5.2",
            register: hr,
            unregister: hu,
        },
    ]
    .into_iter()
    .filter(|i| match only.as_deref() {
        Some("ours") => i.name.starts_with("liboffload"),
        Some("hip") => i.name.starts_with("libamdhip"),
        _ => true,
    })
    .collect();

    let dir = std::env::temp_dir().join(format!("register-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut keep = Vec::new();
    println!(
        "{} fat binaries in {ROCSPARSE}; {rounds} rounds; median ns per __hipRegisterFatBinary",
        wrappers.len()
    );
    println!(
        "{:>16} {}",
        "extra objects",
        imps.iter()
            .map(|i| format!("{:>20}", i.name))
            .collect::<String>()
    );
    for &n in &objects {
        load_objects(&dir, keep.len(), n.max(keep.len()), &mut keep);
        let row: String = imps
            .iter()
            .map(|i| format!("{:>20.0}", measure(i, &wrappers, rounds)))
            .collect();
        println!("{n:>16} {row}");
    }
    drop(keep);
    let _ = std::fs::remove_dir_all(&dir);
}
