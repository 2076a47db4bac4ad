//! `offload-probe slim --output DIR` writes a whole tree that can stand in
//! for its input: every file at its relative path (slimmed, or the same
//! bytes, mode and times; hard-linked to the original with
//! `--link-unchanged`), names of one file still one file, symbolic links as
//! links with their text, directories with their modes, pipes skipped;
//! files of GPU code only for other GPUs left out, and with `--in-place`
//! kept unless `--remove-other-gpu-files` asks. Checked on a tree built
//! here and on rocBLAS 2.47 as Debian ships it (`.ci/rocblas.sh`), whose
//! Tensile kernels are one code object per GPU.

mod support;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use support::*;

/// The device the built tree is slimmed for: the library loses its gfx90a
/// code, the gfx90a code object is for other GPUs.
const DEVICE: &str = "gfx1100";

fn probe() -> Option<PathBuf> {
    built("offload-probe")
}

/// Runs `offload-probe slim ARGS --json`: (exit code, report).
fn slim(probe: &Path, args: &[&str]) -> (i32, serde_json::Value) {
    let out = Command::new(probe)
        .arg("slim")
        .args(args)
        .arg("--json")
        .env_remove("OFFLOAD_LOADER_DEVICES")
        .output()
        .unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), report)
}

/// Runs `offload-probe slim SRC --device DEVICE --output OUT` (no report
/// asked for): the process's output.
fn slim_into(probe: &Path, src: &Path, out: &Path) -> std::process::Output {
    Command::new(probe)
        .arg("slim")
        .arg(src)
        .args(["--device", DEVICE, "--output"])
        .arg(out)
        .env_remove("OFFLOAD_LOADER_DEVICES")
        .output()
        .unwrap()
}

/// What an entry of a tree is, to compare two trees.
#[derive(Debug, PartialEq, Eq)]
enum Node {
    Dir { mode: u32 },
    File { mode: u32, mtime: i64, len: u64 },
    Link(PathBuf),
    Other,
}

/// Every entry under `root` by relative path, links not followed.
fn tree(root: &Path) -> BTreeMap<String, Node> {
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            let m = std::fs::symlink_metadata(&path).unwrap();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            let mode = m.permissions().mode() & 0o7777;
            let node = if m.is_dir() {
                todo.push(path.clone());
                Node::Dir { mode }
            } else if m.is_symlink() {
                Node::Link(std::fs::read_link(&path).unwrap())
            } else if m.is_file() {
                Node::File {
                    mode,
                    mtime: m.mtime(),
                    len: m.len(),
                }
            } else {
                Node::Other
            };
            out.insert(rel, node);
        }
    }
    out
}

fn ino(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().ino()
}

/// The input: a HIP library for gfx90a and gfx1100 (and a link to it), a
/// code object for gfx90a only (and a link to it), a text file with a
/// second hard link, a sparse file, nested directories with their own
/// modes, a pipe.
fn input(dir: &Path) -> Option<()> {
    let tc = toolchain()?;
    let lib = tc.build(Hip::new(&["gfx90a", "gfx1100"]).shared_library());
    let co = tc.build(CodeObject::new("gfx90a"));
    for d in ["lib", "kernels", "share/nested/deep"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    std::fs::copy(&lib, dir.join("lib/libk.so.1")).unwrap();
    std::os::unix::fs::symlink("libk.so.1", dir.join("lib/libk.so")).unwrap();
    std::fs::copy(&co, dir.join("kernels/k-gfx90a.co")).unwrap();
    std::os::unix::fs::symlink("k-gfx90a.co", dir.join("kernels/current.co")).unwrap();
    std::fs::write(dir.join("kernels/index.dat"), b"gfx90a gfx1100\n").unwrap();
    std::fs::write(dir.join("share/notes.txt"), b"notes\n").unwrap();
    std::fs::hard_link(dir.join("share/notes.txt"), dir.join("share/same.txt")).unwrap();
    let sparse = std::fs::File::create(dir.join("share/nested/deep/sparse")).unwrap();
    sparse.set_len(8 << 20).unwrap();
    std::os::unix::fs::FileExt::write_at(&sparse, b"end", (8 << 20) - 3).unwrap();
    let fifo = std::ffi::CString::new(dir.join("share/pipe").to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path and a mode.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let mode = |p: &str, m: u32| {
        std::fs::set_permissions(dir.join(p), std::fs::Permissions::from_mode(m)).unwrap()
    };
    mode("lib/libk.so.1", 0o750);
    mode("share/notes.txt", 0o640);
    mode("share/nested", 0o750);
    mode("share/nested/deep", 0o700);
    Some(())
}

#[test]
fn output_is_the_whole_tree_with_copies_links_and_modes() {
    let Some(probe) = probe() else { return };
    let src = temp_dir();
    if input(&src).is_none() {
        return;
    }
    let parent = temp_dir();
    let out = parent.join("out");
    let (code, r) = slim(
        &probe,
        &[
            src.to_str().unwrap(),
            "--device",
            DEVICE,
            "--output",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{r}");
    let t = &r["tree"];
    assert_eq!(
        (
            &t["slimmed"],
            &t["copied"],
            &t["names"],
            &t["symlinks"],
            &t["linked"]
        ),
        (&1.into(), &3.into(), &1.into(), &1.into(), &0.into()),
        "{r}"
    );
    assert_eq!(t["skipped"][0]["kind"], "a named pipe", "{r}");
    let other: Vec<_> = r["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| !f["other_gpus"].is_null())
        .collect();
    assert_eq!(other.len(), 1, "{r}");
    assert!(other[0]["path"]
        .as_str()
        .unwrap()
        .ends_with("kernels/k-gfx90a.co"));
    assert_eq!(other[0]["other_gpus"]["state"], "left out");
    assert_eq!(other[0]["after"], 0);

    // Every entry but the pipe and the gfx90a code object (and its link),
    // with its mode; the same bytes and times where nothing changes.
    let (before, after) = (tree(&src), tree(&out));
    let mut want = before;
    for gone in ["share/pipe", "kernels/k-gfx90a.co", "kernels/current.co"] {
        assert!(want.remove(gone).is_some(), "{gone}");
    }
    let slimmed = "lib/libk.so.1";
    let (Some(Node::File { len: old, .. }), Some(Node::File { len: new, mode, .. })) =
        (want.remove(slimmed), after.get(slimmed))
    else {
        panic!("{slimmed}: {after:?}")
    };
    assert!(new < &old, "{slimmed} not slimmed");
    assert_eq!(*mode, 0o750);
    let mut after = after;
    after.remove(slimmed);
    assert_eq!(after, want);
    for f in [
        "kernels/index.dat",
        "share/notes.txt",
        "share/nested/deep/sparse",
    ] {
        assert!(
            std::fs::read(src.join(f)).unwrap() == std::fs::read(out.join(f)).unwrap(),
            "{f}"
        );
    }
    // One file with two names is still one file, a copy of its own; the
    // holes stay holes.
    assert_eq!(
        ino(&out.join("share/notes.txt")),
        ino(&out.join("share/same.txt"))
    );
    assert_ne!(
        ino(&out.join("share/notes.txt")),
        ino(&src.join("share/notes.txt"))
    );
    let blocks = |p: &Path| std::fs::metadata(p).unwrap().blocks();
    let sparse = "share/nested/deep/sparse";
    assert!(blocks(&out.join(sparse)) <= blocks(&src.join(sparse)).max(64));
    assert!(
        std::fs::read_dir(out.join("lib")).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with('.')),
        "temporary files left"
    );

    // --link-unchanged: the unchanged files are the originals; run twice
    // into the same tree, the second finds the links there.
    let linked = parent.join("linked");
    for _ in 0..2 {
        let (code, r) = slim(
            &probe,
            &[
                src.to_str().unwrap(),
                "--device",
                DEVICE,
                "--output",
                linked.to_str().unwrap(),
                "--link-unchanged",
            ],
        );
        assert_eq!(code, 0, "{r}");
        assert_eq!(
            (&r["tree"]["linked"], &r["tree"]["copied"]),
            (&3.into(), &0.into()),
            "{r}"
        );
    }
    for f in [
        "kernels/index.dat",
        "share/notes.txt",
        "share/same.txt",
        sparse,
    ] {
        assert_eq!(ino(&linked.join(f)), ino(&src.join(f)), "{f}");
    }
    assert_ne!(ino(&linked.join(slimmed)), ino(&src.join(slimmed)));

    // A dry run writes nothing; an output inside the input is refused.
    let dry = parent.join("dry");
    let (code, r) = slim(
        &probe,
        &[
            src.to_str().unwrap(),
            "--device",
            DEVICE,
            "--output",
            dry.to_str().unwrap(),
            "--dry-run",
        ],
    );
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["tree"]["copied"], 3, "{r}");
    assert!(!dry.exists());
    let inside = src.join("out");
    let refused = slim_into(&probe, &src, &inside);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("overlap"));
    assert!(!inside.exists());
}

#[test]
fn in_place_keeps_files_for_other_gpus_unless_asked() {
    let Some(probe) = probe() else { return };
    let Some(tc) = toolchain() else { return };
    let dir = temp_dir();
    let (theirs, ours) = (dir.join("k-gfx90a.co"), dir.join("k-gfx1100.co"));
    std::fs::copy(tc.build(CodeObject::new("gfx90a")), &theirs).unwrap();
    std::fs::copy(tc.build(CodeObject::new("gfx1100")), &ours).unwrap();
    std::os::unix::fs::symlink("k-gfx90a.co", dir.join("current.co")).unwrap();
    let args = [dir.to_str().unwrap(), "--device", DEVICE, "--in-place"];
    let (code, r) = slim(&probe, &args);
    assert_eq!(code, 0, "{r}");
    let state = |r: &serde_json::Value| {
        let other: Vec<_> = r["files"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| !f["other_gpus"].is_null())
            .collect();
        assert_eq!(other.len(), 1, "{r}");
        assert!(
            other[0]["path"].as_str().unwrap().ends_with("k-gfx90a.co"),
            "{r}"
        );
        other[0]["other_gpus"]["state"].clone()
    };
    assert_eq!(
        state(&r),
        "kept (--remove-other-gpu-files removes it)",
        "{r}"
    );
    assert!(theirs.is_file());
    let (code, r) = slim(&probe, &[&args[..], &["--remove-other-gpu-files"]].concat());
    assert_eq!(code, 0, "{r}");
    assert_eq!(state(&r), "removed", "{r}");
    let names: Vec<String> = std::fs::read_dir(&*dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        ["k-gfx1100.co"],
        "the file and the link that named it go"
    );
}

/// The rocBLAS package's files under `usr/lib/x86_64-linux-gnu/rocblas/2.47.0/library`.
const LIBRARY: &str = "usr/lib/x86_64-linux-gnu/rocblas/2.47.0/library";

/// rocBLAS for gfx90a:sramecc+:xnack-: the tree keeps the library
/// (slimmed), every file without GPU code, `TensileLibrary_gfx90a.co` and
/// `Kernels.so-000-gfx90a-xnack-.hsaco`, and leaves out the other GPUs'
/// files (the xnack+ one too, which rocBLAS's name match would open but the
/// device cannot load), by their code.
#[test]
fn rocblas_keeps_the_files_of_the_named_device_only() {
    let Some(probe) = probe() else { return };
    let Some(prefix) = rocblas() else { return };
    let parent = temp_dir();
    let out = parent.join("rocblas");
    // Linked, not copied: the package is 2 GB.
    let (code, r) = slim(
        &probe,
        &[
            prefix.to_str().unwrap(),
            "--device",
            "gfx90a:sramecc+:xnack-",
            "--output",
            out.to_str().unwrap(),
            "--link-unchanged",
        ],
    );
    assert_eq!(code, 0, "{r}");
    let mut left: Vec<String> = r["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["other_gpus"]["state"] == "left out")
        .map(|f| {
            f["path"]
                .as_str()
                .unwrap()
                .rsplit('/')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    left.sort();
    let mut want: Vec<String> = [
        "gfx1030", "gfx1100", "gfx1101", "gfx1102", "gfx803", "gfx900", "gfx906", "gfx908",
    ]
    .iter()
    .map(|g| format!("TensileLibrary_{g}.co"))
    .chain(
        [
            "gfx1010",
            "gfx1030",
            "gfx1100",
            "gfx1101",
            "gfx1102",
            "gfx803",
            "gfx900",
            "gfx906",
            "gfx908",
            "gfx90a-xnack+",
        ]
        .iter()
        .map(|g| format!("Kernels.so-000-{g}.hsaco")),
    )
    .collect();
    want.sort();
    assert_eq!(left, want, "{r}");
    // Everything else is there.
    let mut expected = tree(&prefix);
    for name in &want {
        expected.remove(&format!("{LIBRARY}/{name}"));
    }
    let got = tree(&out);
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    for kept in [
        "TensileLibrary.dat",
        "TensileLibrary_gfx90a.co",
        "Kernels.so-000-gfx90a-xnack-.hsaco",
    ] {
        let f = format!("{LIBRARY}/{kept}");
        assert_eq!(ino(&out.join(&f)), ino(&prefix.join(&f)), "{f}");
    }
    let lib = "usr/lib/x86_64-linux-gnu/librocblas.so.0.1";
    let size = |p: PathBuf| std::fs::metadata(p).unwrap().len();
    assert!(size(out.join(lib)) * 4 < size(prefix.join(lib)));
    assert_eq!(
        std::fs::read_link(out.join("usr/lib/x86_64-linux-gnu/librocblas.so.0")).unwrap(),
        Path::new("librocblas.so.0.1")
    );
}

/// In place, on a copy of a few of rocBLAS's files: the files for other
/// GPUs are kept and reported, and removed only when asked.
#[test]
fn rocblas_in_place_removes_other_gpus_files_only_when_asked() {
    let Some(probe) = probe() else { return };
    let Some(prefix) = rocblas() else { return };
    let dir = temp_dir();
    let files = [
        "TensileLibrary_gfx803.co",
        "Kernels.so-000-gfx90a-xnack+.hsaco",
        "Kernels.so-000-gfx90a-xnack-.hsaco",
    ];
    for f in files {
        std::fs::copy(prefix.join(LIBRARY).join(f), dir.join(f)).unwrap();
    }
    std::fs::copy(
        prefix.join("usr/share/doc/librocblas0/copyright"),
        dir.join("copyright"),
    )
    .unwrap();
    let args = [
        dir.to_str().unwrap(),
        "--device",
        "gfx90a:sramecc+:xnack-",
        "--in-place",
    ];
    let listing = || {
        let mut v: Vec<String> = std::fs::read_dir(&*dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let before = listing();
    let (code, r) = slim(&probe, &args);
    assert_eq!(code, 0, "{r}");
    let kept = r["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| !f["other_gpus"].is_null())
        .count();
    assert_eq!(kept, 2, "{r}");
    assert_eq!(listing(), before);
    let (code, r) = slim(&probe, &[&args[..], &["--remove-other-gpu-files"]].concat());
    assert_eq!(code, 0, "{r}");
    assert_eq!(
        listing(),
        ["Kernels.so-000-gfx90a-xnack-.hsaco", "copyright"]
    );
}

/// Every input file is in the output tree, always: a 32-bit ELF object
/// (which slim does not read) and a file cut short inside its ELF header
/// are copied as they are beside the slimmed library, reported with their
/// reasons, and the exit status is 2.
#[test]
fn files_slim_cannot_read_are_copied_as_they_are() {
    let Some(probe) = probe() else { return };
    let Some(tc) = toolchain() else { return };
    let src = temp_dir();
    let lib = tc.build(Hip::new(&["gfx90a", "gfx1100"]).shared_library());
    std::fs::copy(&lib, src.join("libk.so")).unwrap();
    let c = src.join("a.c");
    std::fs::write(&c, "int f(int x) { return x + 1; }\n").unwrap();
    run_ok(
        Command::new(&tc.clang)
            .args(["-m32", "-c"])
            .arg(&c)
            .arg("-o")
            .arg(src.join("a32.o")),
    );
    std::fs::remove_file(&c).unwrap();
    let cut = std::fs::read(&lib).unwrap()[..40].to_vec();
    std::fs::write(src.join("cut.so"), &cut).unwrap();
    // A wheel found in the walk is slimmed as a wheel; one that is no zip
    // is copied as it is.
    std::fs::write(src.join("k-1.0-py3-none-any.whl"), &cut).unwrap();
    let out = temp_dir().join("out");
    let (code, r) = slim(
        &probe,
        &[
            src.to_str().unwrap(),
            "--device",
            DEVICE,
            "--output",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 2, "{r}");
    assert_eq!(r["tree"]["slimmed"], 1, "{r}");
    let as_is: Vec<String> = r["tree"]["copied_as_is"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let p = PathBuf::from(e["path"].as_str().unwrap());
            p.file_name().unwrap().to_string_lossy().into_owned()
        })
        .collect();
    assert_eq!(as_is, ["a32.o", "cut.so", "k-1.0-py3-none-any.whl"], "{r}");
    assert_eq!(r["wheels"].as_array().unwrap().len(), 1, "{r}");
    for name in ["a32.o", "cut.so", "k-1.0-py3-none-any.whl"] {
        assert!(
            std::fs::read(out.join(name)).unwrap() == std::fs::read(src.join(name)).unwrap(),
            "{name} is not its original: {r}"
        );
    }
    assert!(
        std::fs::metadata(out.join("libk.so")).unwrap().len()
            < std::fs::metadata(&lib).unwrap().len()
    );
}

/// A run into an output tree a killed run wrote into removes that run's
/// temporary files there (`.NAME.slim-TAG-PID-N` of a process that is
/// gone), keeps those of a process that runs, and leaves its inputs alone.
#[test]
fn a_rerun_removes_what_a_killed_run_left_in_the_output_only() {
    let Some(probe) = probe() else { return };
    let (src, out) = (temp_dir(), temp_dir().join("out"));
    for d in [src.join("sub"), out.join("sub")] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(src.join("sub/a.txt"), b"a\n").unwrap();
    let mut child = Command::new("true").spawn().unwrap();
    let gone = child.id();
    child.wait().unwrap();
    let running = std::process::id();
    let stale = [
        out.join(format!(".a.txt.slim-copy-{gone}-0")),
        out.join(format!("sub/.a.txt.slim-link-{gone}-1")),
    ];
    let kept = [
        out.join(format!("sub/.a.txt.slim-copy-{running}-2")),
        src.join(format!("sub/.a.txt.slim-link-{gone}-3")),
    ];
    for p in stale.iter().chain(&kept) {
        std::fs::write(p, b"partial").unwrap();
    }
    let run = slim_into(&probe, &src, &out);
    let said = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{said}");
    for p in &stale {
        assert!(!p.exists(), "{} is left", p.display());
        let line = format!("removed {}, left by a run that was killed", p.display());
        assert!(said.contains(&line), "{said}");
    }
    for p in &kept {
        assert_eq!(std::fs::read(p).unwrap(), b"partial", "{}", p.display());
    }
    assert_eq!(std::fs::read(out.join("sub/a.txt")).unwrap(), b"a\n");
}
