//! `offload-probe slim` on a wheel: a real package (NVIDIA's cuRAND 10.4
//! wheel from PyPI, `.ci/cuda-wheels.sh`) slimmed for sm_90 as a wheel,
//! checked with the tools people use on wheels: `python -m wheel unpack`
//! (every RECORD hash and size), `pip install` into a fresh virtual
//! environment and `pip check`; the library in it loads as the original's
//! does, is the file `offload-probe slim` makes of the original library,
//! and every other entry is the original's, with its zip metadata.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::*;

/// The Python of the environment `.ci/run` installs auditwheel and `wheel`
/// into; `None` (a failure under `CI=true`) without `wheel` there.
fn python_with_wheel() -> Option<PathBuf> {
    let cache = std::env::var_os("OFFLOAD_LOADER_CACHE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/offload-loader"))
        })?;
    let bin = cache.join("auditwheel/bin");
    if bin.join("wheel").is_file() {
        return Some(bin.join("python"));
    }
    assert!(
        !ci(),
        "{} is missing: run .ci/run, which installs it",
        bin.join("wheel").display()
    );
    eprintln!(
        "skipped: the wheel package is not installed ({})",
        bin.display()
    );
    None
}

/// The cuRAND wheel `.ci/cuda-wheels.sh` downloads.
fn curand_wheel() -> Option<PathBuf> {
    let found = std::fs::read_dir(wheel_dir()).ok().and_then(|entries| {
        entries.flatten().map(|e| e.path()).find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("nvidia_curand-10.4.5.25-") && n.ends_with(".whl"))
        })
    });
    if found.is_none() {
        assert!(!ci(), "the cuRAND wheel is missing: run .ci/run");
        eprintln!("skipped: the cuRAND wheel is not downloaded");
    }
    found
}

/// `offload-probe slim --device sm_90 --local-version sm90 --json --output
/// out input`, which must exit 0: its report.
fn slim_labelled(probe: &Path, out: &Path, input: &Path) -> serde_json::Value {
    let o = run_ok(
        Command::new(probe)
            .args([
                "slim",
                "--device",
                "sm_90",
                "--local-version",
                "sm90",
                "--json",
                "--output",
            ])
            .arg(out)
            .arg(input)
            .env_remove("OFFLOAD_LOADER_DEVICES"),
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

fn python_out(python: &Path, script: &str, args: &[&Path]) -> String {
    let out = run_ok(Command::new(python).arg("-c").arg(script).args(args));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What `dlopen` of the one `libcurand.so*` under `root` says (the error
/// with the path cut off, or `loaded`).
fn load(py: &Path, root: &Path) -> String {
    python_out(
        py,
        "import ctypes,glob,sys\n\
         f=glob.glob(sys.argv[1]+'/lib/**/libcurand.so*',recursive=True)\n\
         assert len(f)==1,f\n\
         try:\n    ctypes.CDLL(f[0]); print('loaded')\n\
         except OSError as e: print(str(e).split(': ',1)[-1])\n",
        &[root],
    )
}

#[test]
fn a_slimmed_wheel_installs_and_its_record_holds() {
    let (Some(probe), Some(py), Some(whl)) =
        (built("offload-probe"), python_with_wheel(), curand_wheel())
    else {
        return;
    };
    let dir = temp_dir();
    let report = slim_labelled(&probe, &dir.join("out"), &whl);
    let written = PathBuf::from(report["wheels"][0]["output"].as_str().unwrap());
    let name = whl.file_name().unwrap().to_str().unwrap();
    assert_eq!(
        written.file_name().unwrap().to_str().unwrap(),
        name.replacen("-10.4.5.25-", "-10.4.5.25+sm90-", 1)
    );
    let (before, after) = (
        std::fs::metadata(&whl).unwrap().len(),
        std::fs::metadata(&written).unwrap().len(),
    );
    assert!(after < before * 3 / 4, "{before} -> {after}");
    // Every RECORD hash and size, as `wheel` checks them.
    let unpacked = dir.join("unpacked");
    run_ok(
        Command::new(&py)
            .args(["-m", "wheel", "unpack", "-d"])
            .arg(&unpacked)
            .arg(&written),
    );
    // pip installs it beside the original, each in a fresh environment.
    let mut roots = Vec::new();
    for (tag, wheel) in [("original", &whl), ("slimmed", &written)] {
        let venv = dir.join(tag);
        run_ok(Command::new("python3").args(["-m", "venv"]).arg(&venv));
        run_ok(
            Command::new(venv.join("bin/pip"))
                .args(["install", "-q", "--no-index"])
                .arg(wheel),
        );
        run_ok(Command::new(venv.join("bin/pip")).arg("check"));
        roots.push(venv);
    }
    let version = python_out(
        &roots[1].join("bin/python"),
        "import importlib.metadata as m; print(m.version('nvidia-curand'))",
        &[],
    );
    assert_eq!(version.trim(), "10.4.5.25+sm90");
    assert_eq!(load(&py, &roots[0]), load(&py, &roots[1]));
    // The library is what `offload-probe slim` makes of the original's.
    let lib = |root: &Path| {
        std::fs::read_dir(root.join("lib"))
            .unwrap()
            .flatten()
            .map(|e| {
                e.path()
                    .join("site-packages/nvidia/cu13/lib/libcurand.so.10")
            })
            .find(|p| p.is_file())
            .unwrap()
    };
    let alone = dir.join("alone");
    let o = Command::new(&probe)
        .args(["slim", "--device", "sm_90", "--output"])
        .arg(&alone)
        .arg(lib(&roots[0]))
        .env_remove("OFFLOAD_LOADER_DEVICES")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(
        std::fs::read(alone.join("libcurand.so.10")).unwrap()
            == std::fs::read(lib(&roots[1])).unwrap(),
        "the wheel's library is not what slim makes of the original's"
    );
    // Every other entry is the original's, zip metadata and all; the
    // .dist-info directory renamed with the label.
    let compared = python_out(&py, COMPARE, &[&whl, &written]);
    assert!(compared.trim().parse::<usize>().unwrap() >= 3, "{compared}");
    a_wheelhouse_is_slimmed_wheel_by_wheel(&probe, &whl, &written, &dir);
}

/// A directory holding the wheel (twice: a hard link; mode 0640) and a file
/// with no GPU code, slimmed with --output: the tree holds, at the wheel's
/// place, the wheel slimmed as it is when named (byte for byte), under its
/// labelled name, with its mode, and once (the other name a hard link to
/// it); the other file copied; the original name not there.
fn a_wheelhouse_is_slimmed_wheel_by_wheel(probe: &Path, whl: &Path, named: &Path, dir: &Path) {
    let house = dir.join("house");
    let name = whl.file_name().unwrap();
    std::fs::create_dir_all(house.join("dist/again")).unwrap();
    std::fs::copy(whl, house.join("dist").join(name)).unwrap();
    std::fs::set_permissions(
        house.join("dist").join(name),
        std::os::unix::fs::PermissionsExt::from_mode(0o640),
    )
    .unwrap();
    std::fs::hard_link(
        house.join("dist").join(name),
        house.join("dist/again").join(name),
    )
    .unwrap();
    std::fs::write(house.join("dist/index.html"), b"<a href=x.whl>x</a>\n").unwrap();
    let out = dir.join("house-out");
    let report = slim_labelled(probe, &out, &house);
    assert_eq!(report["wheels"].as_array().unwrap().len(), 1, "{report}");
    let labelled = named.file_name().unwrap();
    let slimmed = out.join("dist").join(labelled);
    assert!(
        std::fs::read(&slimmed).unwrap() == std::fs::read(named).unwrap(),
        "the wheel found in the directory is not the wheel slimmed when named"
    );
    assert!(!out.join("dist").join(name).exists());
    assert_eq!(
        std::fs::read(out.join("dist/index.html")).unwrap(),
        std::fs::read(house.join("dist/index.html")).unwrap()
    );
    let mut listed: Vec<_> = std::fs::read_dir(out.join("dist"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    listed.sort();
    assert_eq!(listed.len(), 3, "{listed:?}");
    // The hard link is one file with the first, under the labelled name.
    use std::os::unix::fs::MetadataExt;
    let again = std::fs::metadata(out.join("dist/again").join(labelled)).unwrap();
    assert_eq!(again.ino(), std::fs::metadata(&slimmed).unwrap().ino());
    // It keeps the original's mode.
    assert_eq!(again.mode() & 0o7777, 0o640);
}

/// Compares two wheels entry by entry (the second's `.dist-info` renamed
/// with the label): the same entries in the same order, and but for RECORD,
/// METADATA and the library, each with the same zip metadata and bytes;
/// prints how many were compared.
const COMPARE: &str = r#"
import sys, zipfile
a, b = zipfile.ZipFile(sys.argv[1]), zipfile.ZipFile(sys.argv[2])
def ren(n):
    return n.replace("-10.4.5.25.dist-info/", "-10.4.5.25+sm90.dist-info/", 1)
def key(z):
    return (z.date_time, z.compress_type, z.external_attr, z.CRC,
            z.compress_size, z.file_size, z.extra, z.create_system)
assert [ren(i.filename) for i in a.infolist()] == [i.filename for i in b.infolist()]
by_name = {i.filename: i for i in b.infolist()}
same = 0
for i in a.infolist():
    j = by_name[ren(i.filename)]
    if i.filename.endswith(("/RECORD", "/METADATA", "libcurand.so.10")):
        continue
    assert key(i) == key(j), (i.filename, key(i), key(j))
    assert a.read(i) == b.read(j)
    same += 1
print(same)
"#;
