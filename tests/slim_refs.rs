//! `offload-probe slim` on programs that refer to their GPU code in every
//! way a linker leaves: through relocations it rewrites (a wrapper, a
//! pointer in position-independent data, a symbol plus an addend, a GOT
//! slot) and through references no relocation describes (code that reaches
//! a hidden symbol pc-relative, a word in a position-dependent program's
//! data, `objcopy -I binary`'s `_binary_*_end` folded into code, with and
//! without `.symtab`). Built with ld.bfd, gold and lld; PIE, non-PIE,
//! static and static-PIE; each result must run exactly as its original,
//! whatever slim chose, and the report must say what it did.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::*;

/// The probe, or `None` (with the skip line) where it was not built.
fn probe() -> Option<PathBuf> {
    built("offload-probe")
}

/// What every test here builds with: clang-22 (and its lld), gcc (with
/// ld.bfd and gold), the probe; a scratch directory holding [`bundle`]'s
/// output. `None` (a failure under `CI=true`) where a tool is missing.
struct Kit {
    clang: PathBuf,
    gcc: PathBuf,
    dir: TempPath,
    blob: PathBuf,
}

fn kit() -> Option<Kit> {
    let clang = tool("clang", 22)?;
    let (Some(_), Some(gcc), Some(_), Some(_)) = (
        probe(),
        system_tool("gcc", "gcc"),
        system_tool("ld.gold", "binutils"),
        tool("ld.lld", 22),
    ) else {
        return None;
    };
    let dir = temp_dir();
    let blob = bundle(&clang, &dir);
    Some(Kit {
        clang,
        gcc,
        dir,
        blob,
    })
}

/// A bundle of two images of ~40 KiB each (gfx90a, gfx1100), and the host
/// entry: what clang puts in `.hip_fatbin`, big enough that dropping the
/// gfx90a image frees whole pages.
fn bundle(clang: &Path, dir: &Path) -> PathBuf {
    let mut x = 7u64;
    let mut pad = || {
        (0..4096)
            .map(|_| {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                format!("{x:#x}ull")
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    let source = format!(
        "#if defined(__gfx90a__)\n__attribute__((device)) unsigned long long pad[4096] = {{{}}};\n\
         #else\n__attribute__((device)) unsigned long long pad[4096] = {{{}}};\n#endif\n\
         extern \"C\" __attribute__((global)) void k(unsigned long long *x) {{ x[0] = pad[x[1]]; }}\n",
        pad(),
        pad()
    );
    let src = dir.join("k.hip");
    std::fs::write(&src, source).unwrap();
    let out = dir.join("blob.hipfb");
    run_ok(
        Command::new(clang)
            .args(["-x", "hip", "--cuda-device-only", "-nogpulib", "-nogpuinc"])
            .args(["--offload-arch=gfx90a", "--offload-arch=gfx1100"])
            .arg(&src)
            .arg("-o")
            .arg(&out),
    );
    out
}

/// `.hip_fatbin` holding three copies of the bundle (`blob_a`, `blob_b`,
/// `blob_c`, each at a page; `blob_end` after the last) and a HIP wrapper
/// pointing at the first, as assembly, then `extra`; `visibility` is
/// `.hidden`, or empty for symbols a shared object exports.
fn containers(blob: &Path, visibility: &str, extra: &str) -> String {
    let mut s = String::from("    .section .hip_fatbin,\"a\",@progbits\n    .p2align 12\n");
    for name in ["blob_a", "blob_b", "blob_c"] {
        s += &format!(
            "    .p2align 12\n    .globl {name}\n{}    .type {name},@object\n{name}:\n    .incbin \"{}\"\n",
            if visibility.is_empty() { String::new() } else { format!("    {visibility} {name}\n") },
            blob.display()
        );
    }
    s += "    .globl blob_end\n    .hidden blob_end\nblob_end:\n";
    s += "    .section .hipFatBinSegment,\"aw\",@progbits\n    .p2align 3\n\
          __hip_wrapper:\n    .long 0x48495046\n    .long 1\n    .quad blob_a\n    .quad 0\n";
    s += extra;
    s += "    .section .note.GNU-stack,\"\",@progbits\n";
    s
}

/// `where`, a pointer to `blob_b` written as `blob_a` plus an addend (an
/// `R_X86_64_64 blob_a + N` for the linker), in data.
fn symbol_plus_addend(blob: &Path) -> String {
    let step = std::fs::metadata(blob)
        .unwrap()
        .len()
        .next_multiple_of(4096);
    format!(
        "    .section .data.rel.ro,\"aw\",@progbits\n    .p2align 3\n    .globl where\n\
         where:\n    .quad blob_a + {step}\n"
    )
}

/// A program that checks the bundle magic where `expr` points, and prints
/// what it saw.
fn checker(decls: &str, expr: &str) -> String {
    format!(
        "#include <stdio.h>\n#include <string.h>\n{decls}\n\
         int main(void) {{\n  const char *p = {expr};\n\
           int ok = memcmp(p, \"__CLANG_OFFLOAD_BUNDLE__\", 24) == 0;\n\
           printf(\"magic %s\\n\", ok ? \"ok\" : \"BAD\");\n  return !ok;\n}}\n"
    )
}

/// The programs that refer to the containers, by name: (C source, extra
/// assembly).
fn cases(blob: &Path) -> Vec<(&'static str, String, String)> {
    let hidden =
        |n: &str| format!("extern const char {n}[] __attribute__((visibility(\"hidden\")));");
    let size = std::fs::metadata(blob).unwrap().len();
    vec![
        // Code: lea blob_X(%rip) (or an absolute immediate), no relocation
        // once linked.
        (
            "pcrel-start",
            checker(&hidden("blob_a"), "blob_a"),
            String::new(),
        ),
        (
            "pcrel-middle",
            checker(&hidden("blob_b"), "blob_b"),
            String::new(),
        ),
        (
            "pcrel-last",
            checker(&hidden("blob_c"), "blob_c"),
            String::new(),
        ),
        // The section's end, the last container found from it.
        (
            "pcrel-end",
            checker(&hidden("blob_end"), &format!("blob_end - {size}")),
            String::new(),
        ),
        // A pointer in data: a relative relocation in a PIE, a plain word in
        // a position-dependent program.
        (
            "data-word",
            checker(
                &format!("{}\nconst char *volatile where = blob_b;", hidden("blob_b")),
                "where",
            ),
            String::new(),
        ),
        // Data bytes in .text put the linear sweep out of step: the `lea`
        // after them is reached only by the jump over them.
        (
            "data-in-text",
            checker(
                "const char *get(void);\n\
                 __asm__(\".text\\n.globl get\\n.type get,@function\\nget:\\n\
                 jmp 1f\\n.byte 0x48, 0x8d\\n1: lea blob_b(%rip), %rax\\nret\\n\");",
                "get()",
            ),
            String::new(),
        ),
        // A symbol with an addend.
        (
            "symbol-addend",
            checker("extern const char *const where;", "where"),
            symbol_plus_addend(blob),
        ),
    ]
}

/// Linkers and program kinds: (linker, compiler, flags).
fn links() -> Vec<(&'static str, &'static str, Vec<&'static str>)> {
    let mut v = Vec::new();
    for ld in ["bfd", "gold", "lld"] {
        for (kind, flags) in [
            ("pie", vec!["-fPIE", "-pie"]),
            ("no-pie", vec!["-fno-PIE", "-no-pie"]),
            ("static", vec!["-fno-PIE", "-static"]),
            ("static-pie", vec!["-fPIE", "-static-pie"]),
        ] {
            // gold cannot link a static PIE.
            if ld == "gold" && kind == "static-pie" {
                continue;
            }
            v.push((ld, kind, flags));
        }
    }
    v
}

/// `inputs` compiled and linked by `compiler` with linker `ld` and
/// `flags` into `out`.
fn link(compiler: &Path, ld: &str, flags: &[&str], inputs: &[&Path], out: &Path) {
    run_ok(
        Command::new(compiler)
            .arg(format!("-fuse-ld={ld}"))
            .args(flags)
            .args(inputs)
            .arg("-o")
            .arg(out),
    );
}

/// (exit status, stdout) of running `exe`.
fn run(exe: &Path) -> (Option<i32>, String) {
    let out = Command::new(exe)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", exe.display()));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// `file` slimmed for gfx1100 into `out`: the JSON report.
fn slim_json(file: &Path, out: &Path) -> serde_json::Value {
    let o = run_ok(
        Command::new(probe().unwrap())
            .args(["slim", "--device", "gfx1100", "--json", "--output"])
            .arg(out)
            .arg(file)
            .env_remove("OFFLOAD_LOADER_DEVICES"),
    );
    let text = String::from_utf8_lossy(&o.stdout);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// What the report says of the file, checked against the file written
/// into `out`: "compacted" only when it is shorter, holes only at the same
/// length, "unchanged" only when nothing was rewritten (the file copied). The file to run as
/// the result (the original when nothing was written), and whether it was
/// compacted.
fn outcome(report: &serde_json::Value, original: &Path, out: &Path) -> (PathBuf, bool) {
    let file = &report["files"][0];
    let result = out.join(original.file_name().unwrap());
    let before = std::fs::metadata(original).unwrap().len();
    assert_eq!(file["before"].as_u64(), Some(before), "{report}");
    if file["written"] == false {
        // The output tree is whole: a file not rewritten is a copy.
        assert!(
            std::fs::read(&result).unwrap() == std::fs::read(original).unwrap(),
            "not written, not copied as it is: {report}"
        );
        assert_eq!(file["after"].as_u64(), Some(before), "{report}");
        assert!(
            !file["sections_left"].as_array().unwrap().is_empty(),
            "neither written nor said why: {report}"
        );
        return (original.to_path_buf(), false);
    }
    let after = std::fs::metadata(&result).unwrap().len();
    assert_eq!(file["after"].as_u64(), Some(after), "{report}");
    // Holes alone (no section compacted) keep the length.
    // Sections rewritten in place (not those compacted around containers
    // kept at their addresses, whose gaps are holes too).
    let holes: Vec<&str> = file["holes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["compacted"] == false)
        .filter_map(|h| h["section"].as_str())
        .collect();
    let compacted_any = file["containers"].as_array().unwrap().iter().any(|c| {
        c["outcome"] == "rewritten" && !holes.contains(&c["section"].as_str().unwrap_or(""))
    });
    if !holes.is_empty() && !compacted_any {
        assert_eq!(before, after, "holes, yet the length changed: {report}");
    }
    (result, after < before)
}

/// Every case, linked every way, slimmed: each result runs as its original.
/// Where a relocation describes the reference (a PIE's pointer in data),
/// slim compacts; where nothing does, it compacts only around what the
/// reference names exactly (a kept container's start, pinned), and says
/// why not otherwise.
#[test]
fn references_without_relocations_keep_their_containers_in_place() {
    let Some(Kit {
        clang,
        gcc,
        dir,
        blob,
    }) = kit()
    else {
        return;
    };
    let mut compactions = 0;
    let mut refused = Vec::new();
    for (name, source, extra) in cases(&blob) {
        let asm = dir.join(format!("{name}.s"));
        std::fs::write(&asm, containers(&blob, ".hidden", &extra)).unwrap();
        let c = dir.join(format!("{name}.c"));
        std::fs::write(&c, &source).unwrap();
        for (ld, kind, flags) in links() {
            let exe = dir.join(format!("{name}-{ld}-{kind}"));
            let compiler = if ld == "lld" { &clang } else { &gcc };
            link(compiler, ld, &flags, &[&c, &asm], &exe);
            let before = run(&exe);
            assert_eq!(before, (Some(0), "magic ok\n".into()), "{}", exe.display());
            let out = dir.join(format!("out-{name}-{ld}-{kind}"));
            let report = slim_json(&exe, &out);
            let (result, done) = outcome(&report, &exe, &out);
            assert_eq!(
                run(&result),
                before,
                "{} runs differently once slimmed: {report}",
                exe.display()
            );
            if done {
                compactions += 1;
            } else {
                refused.push(format!("{name}-{ld}-{kind}"));
            }
        }
    }
    // A pc-relative reference to a container's start keeps that container
    // where it is (pinned, the gap before it left as zeros), so the rest
    // may still compact (gcc folds `blob_end - size` into blob_c's start,
    // too); relocated pointers compact. Every result ran as its original.
    assert!(
        refused
            .iter()
            .filter(|r| r.starts_with("pcrel-middle-"))
            .count()
            < 11,
        "no start pinned: {refused:?}"
    );
    for case in ["data-word", "symbol-addend"] {
        for ld in ["bfd", "lld"] {
            for kind in ["-pie", "-static-pie"] {
                let case = format!("{case}-{ld}{kind}");
                assert!(!refused.contains(&case), "{case} was not compacted");
            }
        }
    }
    assert!(compactions >= 4, "{refused:?}");
}

/// `objcopy -I binary`'s objects: two bundles, `a.bin` and `b.bin`, each
/// an object whose `.data` is renamed `.hip_fatbin`, with
/// `_binary_*_start`, `_end` and `_size`; linked one after the other, so
/// that `b.bin` moves when `a.bin` shrinks. A program that finds `b.bin`
/// from its `_end` (the reference folded into code), linked with a wrapper
/// of `a.bin`, unstripped and stripped: every result runs as before (the
/// reference is found without `.symtab`, and `b.bin` keeps its address).
#[test]
fn objcopy_binary_blobs_run_the_same_with_or_without_symbols() {
    let Some(Kit { gcc, dir, blob, .. }) = kit() else {
        return;
    };
    let (Some(objcopy), Some(strip)) = (
        system_tool("objcopy", "binutils"),
        system_tool("strip", "binutils"),
    ) else {
        return;
    };
    let mut objects = Vec::new();
    for name in ["a", "b"] {
        std::fs::copy(&blob, dir.join(format!("{name}.bin"))).unwrap();
        run_ok(
            Command::new(&objcopy)
                .current_dir(&dir)
                .args(["-I", "binary", "-O", "elf64-x86-64", "-B", "i386:x86-64"])
                .arg("--rename-section=.data=.hip_fatbin,alloc,load,readonly,data,contents")
                .arg(format!("{name}.bin"))
                .arg(format!("{name}.o")),
        );
        objects.push(dir.join(format!("{name}.o")));
    }
    let size = std::fs::metadata(&blob).unwrap().len();
    let main = dir.join("main.c");
    std::fs::write(
        &main,
        checker(
            "extern const char _binary_a_bin_start[], _binary_b_bin_end[];",
            &format!("_binary_b_bin_end - {size}"),
        ) + "__attribute__((section(\".hipFatBinSegment\"), used)) static struct { int m, v; const void *f, *d; } w = \
           {0x48495046, 1, _binary_a_bin_start, 0};\n",
    )
    .unwrap();
    for (kind, flags) in [
        ("pie", ["-fPIE", "-pie"]),
        ("no-pie", ["-fno-PIE", "-no-pie"]),
    ] {
        let exe = dir.join(format!("bin-{kind}"));
        run_ok(
            Command::new(&gcc)
                .args(flags)
                .arg(&main)
                .args(&objects)
                .arg("-o")
                .arg(&exe),
        );
        let stripped = dir.join(format!("bin-{kind}-stripped"));
        run_ok(Command::new(&strip).arg(&exe).arg("-o").arg(&stripped));
        for exe in [exe, stripped] {
            let before = run(&exe);
            assert_eq!(before, (Some(0), "magic ok\n".into()));
            let out = dir.join(format!(
                "out-{}",
                exe.file_name().unwrap().to_str().unwrap()
            ));
            let report = slim_json(&exe, &out);
            let (result, _) = outcome(&report, &exe, &out);
            assert_eq!(run(&result), before, "{}: {report}", exe.display());
            // `b.bin` keeps its address: pinned, or the section in place.
            assert!(
                report["files"][0]["holes"]
                    .as_array()
                    .is_some_and(|h| !h.is_empty()),
                "{}: {report}",
                exe.display()
            );
        }
    }
}

/// A shared library that exports its containers (RCCL 5.4.3 exports
/// `__hip_fatbin`): a pointer to the second as `R_X86_64_64 blob_a + N`
/// against the dynamic symbol, and a GOT slot for the third
/// (`R_X86_64_GLOB_DAT blob_c`). Another file may bind to an exported symbol
/// with an addend this file does not show, so nothing moves: the section is
/// rewritten in place (holes), and a program using the library runs as
/// before, with each linker.
#[test]
fn shared_objects_that_export_their_containers_keep_them_in_place() {
    let Some(Kit {
        clang,
        gcc,
        dir,
        blob,
    }) = kit()
    else {
        return;
    };
    let asm = dir.join("lib.s");
    std::fs::write(&asm, containers(&blob, "", &symbol_plus_addend(&blob))).unwrap();
    let lib_c = dir.join("lib.c");
    std::fs::write(
        &lib_c,
        "extern const char blob_c[];\nextern const char *const where;\n\
         const char *second(void) { return where; }\n\
         const char *third(void) { return blob_c; }\n",
    )
    .unwrap();
    let main = dir.join("main.c");
    std::fs::write(
        &main,
        "#include <stdio.h>\n#include <string.h>\n\
         const char *second(void); const char *third(void);\n\
         int main(void) {\n\
           int a = !memcmp(second(), \"__CLANG_OFFLOAD_BUNDLE__\", 24);\n\
           int b = !memcmp(third(), \"__CLANG_OFFLOAD_BUNDLE__\", 24);\n\
           printf(\"%d %d\\n\", a, b);\n  return !(a && b);\n}\n",
    )
    .unwrap();
    for ld in ["bfd", "gold", "lld"] {
        let compiler = if ld == "lld" { &clang } else { &gcc };
        let libdir = dir.join(format!("lib-{ld}"));
        std::fs::create_dir_all(&libdir).unwrap();
        let lib = libdir.join("libblob.so");
        link(compiler, ld, &["-shared", "-fPIC"], &[&lib_c, &asm], &lib);
        let exe = dir.join(format!("main-{ld}"));
        run_ok(
            Command::new(compiler)
                .arg(format!("-fuse-ld={ld}"))
                .arg(&main)
                .arg(format!("-L{}", libdir.display()))
                .arg("-lblob")
                .arg("-o")
                .arg(&exe),
        );
        let run_with = |dir: &Path| {
            let out = Command::new(&exe)
                .env("LD_LIBRARY_PATH", dir)
                .output()
                .unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
            )
        };
        let before = run_with(&libdir);
        assert_eq!(before, (Some(0), "1 1\n".into()), "{ld}");
        let out = dir.join(format!("out-{ld}"));
        let report = slim_json(&lib, &out);
        let (_, compacted) = outcome(&report, &lib, &out);
        assert!(!compacted, "{ld}: the library was compacted: {report}");
        let holes = report["files"][0]["holes"].to_string();
        assert!(holes.contains("exported symbol"), "{ld}: {report}");
        assert_eq!(run_with(&out), before, "{ld}: {report}");
    }
}

/// The tools that run after slim, each as a command on a file in place:
/// (name, [commands]).
fn after_tools(dir: &Path) -> Vec<(&'static str, Vec<Vec<String>>)> {
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let debug = dir.join("f.debug").display().to_string();
    vec![
        ("strip", vec![s(&["strip"])]),
        (
            "strip --strip-unneeded",
            vec![s(&["strip", "--strip-unneeded"])],
        ),
        (
            "objcopy --strip-debug",
            vec![s(&["objcopy", "--strip-debug"])],
        ),
        (
            "objcopy --only-keep-debug + --add-gnu-debuglink",
            vec![
                vec!["objcopy-keep-debug".into(), debug.clone()],
                vec!["objcopy-debuglink".into(), debug],
            ],
        ),
        ("eu-strip", vec![s(&["eu-strip"])]),
        ("llvm-strip", vec![s(&["llvm-strip"])]),
        (
            "patchelf --set-rpath",
            vec![s(&["patchelf", "--set-rpath", "/opt/x"])],
        ),
        (
            "patchelf --add-needed",
            vec![s(&["patchelf", "--add-needed", "libm.so.6"])],
        ),
    ]
}

/// `file` passed through one tool's commands: whether they succeeded.
fn apply(tool: &[Vec<String>], file: &Path, llvm_strip: &Path) -> bool {
    tool.iter().all(|cmd| {
        let mut c = match cmd[0].as_str() {
            "objcopy-keep-debug" => {
                let mut c = Command::new("objcopy");
                c.arg("--only-keep-debug").arg(file).arg(&cmd[1]);
                return c.status().is_ok_and(|s| s.success());
            }
            "objcopy-debuglink" => {
                let mut c = Command::new("objcopy");
                c.arg("--strip-debug")
                    .arg(format!("--add-gnu-debuglink={}", cmd[1]));
                c
            }
            "llvm-strip" => Command::new(llvm_strip),
            first => {
                let mut c = Command::new(first);
                c.args(&cmd[1..]);
                c
            }
        };
        c.arg(file).status().is_ok_and(|s| s.success())
    })
}

/// Programs (ld.bfd, gold, lld; PIE, non-PIE, static, static-PIE) and a
/// shared library whose containers only a wrapper refers to, so that slim
/// compacts them and the segment that holds them splits: every tool that
/// runs after slim (binutils' and elfutils' strip, objcopy, llvm-strip,
/// patchelf) gives a file that runs exactly as the original given to the
/// same tool.
#[test]
fn strip_objcopy_and_patchelf_work_on_every_result() {
    let Some(Kit {
        clang,
        gcc,
        dir,
        blob,
    }) = kit()
    else {
        return;
    };
    let Some(llvm_strip) = tool("llvm-strip", 22) else {
        return;
    };
    for (t, package) in [
        ("strip", "binutils"),
        ("objcopy", "binutils"),
        ("eu-strip", "elfutils"),
        ("patchelf", "patchelf"),
    ] {
        if system_tool(t, package).is_none() {
            return;
        }
    }
    let asm = dir.join("c.s");
    std::fs::write(&asm, containers(&blob, ".hidden", "")).unwrap();
    let main = dir.join("main.c");
    std::fs::write(
        &main,
        "#include <stdio.h>\nint main(void) { puts(\"hello\"); return 0; }\n",
    )
    .unwrap();
    let tools = after_tools(&dir);
    let mut compacted_files = 0;
    for (ld, kind, flags) in links() {
        let exe = dir.join(format!("p-{ld}-{kind}"));
        let compiler = if ld == "lld" { &clang } else { &gcc };
        link(compiler, ld, &flags, &[&main, &asm], &exe);
        let out = dir.join(format!("out-{ld}-{kind}"));
        let report = slim_json(&exe, &out);
        let (result, compacted) = outcome(&report, &exe, &out);
        compacted_files += usize::from(compacted);
        assert_eq!(run(&result), run(&exe), "{}", exe.display());
        for (name, commands) in &tools {
            let (a, b) = (dir.join("orig.tool"), dir.join("result.tool"));
            std::fs::copy(&exe, &a).unwrap();
            std::fs::copy(&result, &b).unwrap();
            let (ok_a, ok_b) = (
                apply(commands, &a, &llvm_strip),
                apply(commands, &b, &llvm_strip),
            );
            assert_eq!(ok_a, ok_b, "{name} on {}: {report}", exe.display());
            if ok_a {
                assert_eq!(run(&b), run(&a), "{name} on {}: {report}", exe.display());
            }
        }
    }
    // A static program's data may hold, by chance, a word that names a
    // container exactly (glibc's `.rodata` in the ld.bfd and lld static
    // links): the section then stays in place, which is the safe side.
    assert!(compacted_files >= 9, "{compacted_files} compacted");

    // A shared library, each linker: dlopen'ed by a program after each tool.
    let user = dir.join("user.c");
    std::fs::write(
        &user,
        "#include <dlfcn.h>\n#include <stdio.h>\n\
         int main(int c, char **v) { void *h = dlopen(v[1], RTLD_NOW);\n\
           if (!h) { printf(\"%s\\n\", dlerror()); return 1; }\n\
           int (*f)(void) = (int (*)(void))dlsym(h, \"answer\");\n\
           printf(\"%d\\n\", f ? f() : -1); return 0; }\n",
    )
    .unwrap();
    let user_exe = dir.join("user");
    run_ok(
        Command::new(&gcc)
            .arg(&user)
            .arg("-o")
            .arg(&user_exe)
            .arg("-ldl"),
    );
    let lib_c = dir.join("lib.c");
    std::fs::write(&lib_c, "int answer(void) { return 42; }\n").unwrap();
    for ld in ["bfd", "gold", "lld"] {
        let lib = dir.join(format!("lib-{ld}.so"));
        let compiler = if ld == "lld" { &clang } else { &gcc };
        link(compiler, ld, &["-shared", "-fPIC"], &[&lib_c, &asm], &lib);
        let out = dir.join(format!("out-lib-{ld}"));
        let report = slim_json(&lib, &out);
        let (result, compacted) = outcome(&report, &lib, &out);
        assert!(compacted, "{ld}: {report}");
        let load = |f: &Path| {
            let o = Command::new(&user_exe).arg(f).output().unwrap();
            (
                o.status.code(),
                String::from_utf8_lossy(&o.stdout).into_owned(),
            )
        };
        assert_eq!(load(&result), (Some(0), "42\n".into()), "{ld}: {report}");
        for (name, commands) in &tools {
            let (a, b) = (dir.join("orig.so"), dir.join("result.so"));
            std::fs::copy(&lib, &a).unwrap();
            std::fs::copy(&result, &b).unwrap();
            let (ok_a, ok_b) = (
                apply(commands, &a, &llvm_strip),
                apply(commands, &b, &llvm_strip),
            );
            assert_eq!(ok_a, ok_b, "{name} on lib-{ld}: {report}");
            if ok_a {
                assert_eq!(load(&b), load(&a), "{name} on lib-{ld}: {report}");
            }
        }
    }
}

/// auditwheel from the virtual environment `.ci/run` makes (with the
/// patchelf it needs); `None` (a failure under `CI=true`) without it.
fn auditwheel() -> Option<PathBuf> {
    let cache = std::env::var_os("OFFLOAD_LOADER_CACHE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/offload-loader"))
        })?;
    let bin = cache.join("auditwheel/bin/auditwheel");
    if bin.is_file() {
        return Some(bin);
    }
    assert!(
        !ci(),
        "{} is missing: run .ci/run, which installs it",
        bin.display()
    );
    eprintln!("skipped: auditwheel not installed ({})", bin.display());
    None
}

/// A wheel holding `module` as `pkg/blob_mod.so`, in `dir` (written with
/// Python's zipfile: the wheel format is a zip with a RECORD).
fn wheel(dir: &Path, module: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let whl = dir.join("pkg-1.0-cp311-cp311-linux_x86_64.whl");
    let script = "import sys, zipfile\n\
        so, out = sys.argv[1], sys.argv[2]\n\
        files = {'pkg/__init__.py': b'', 'pkg/blob_mod.so': open(so, 'rb').read(),\n\
          'pkg-1.0.dist-info/METADATA': b'Metadata-Version: 2.1\\nName: pkg\\nVersion: 1.0\\n',\n\
          'pkg-1.0.dist-info/WHEEL': b'Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: false\\nTag: cp311-cp311-linux_x86_64\\n'}\n\
        files['pkg-1.0.dist-info/RECORD'] = ''.join(n + ',,\\n' for n in list(files) + ['pkg-1.0.dist-info/RECORD']).encode()\n\
        with zipfile.ZipFile(out, 'w') as z:\n\
        \x20   [z.writestr(n, b) for n, b in files.items()]\n";
    run_ok(
        Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(module)
            .arg(&whl),
    );
    whl
}

/// `auditwheel repair` on a wheel holding a slimmed library that needs a
/// library of its own (copied into the wheel, the module's RPATH and
/// NEEDED rewritten by patchelf) works as on the original's wheel, and the
/// repaired module loads and answers as the repaired original does.
#[test]
fn auditwheel_repairs_a_slimmed_library_as_the_original() {
    let (Some(Kit { gcc, dir, blob, .. }), Some(auditwheel)) = (kit(), auditwheel()) else {
        return;
    };
    let asm = dir.join("c.s");
    std::fs::write(&asm, containers(&blob, ".hidden", "")).unwrap();
    let libs = dir.join("libs");
    std::fs::create_dir_all(&libs).unwrap();
    let foo = dir.join("foo.c");
    std::fs::write(&foo, "int foo(void) { return 7; }\n").unwrap();
    run_ok(
        Command::new(&gcc)
            .args(["-shared", "-fPIC"])
            .arg(&foo)
            .arg("-o")
            .arg(libs.join("libfoo.so")),
    );
    let module_c = dir.join("mod.c");
    std::fs::write(
        &module_c,
        "int foo(void);\nint answer(void) { return 35 + foo(); }\n",
    )
    .unwrap();
    let module = dir.join("blob_mod.so");
    run_ok(
        Command::new(&gcc)
            .args(["-fuse-ld=bfd", "-shared", "-fPIC"])
            .arg(&module_c)
            .arg(&asm)
            .arg(format!("-L{}", libs.display()))
            .arg("-lfoo")
            .arg("-o")
            .arg(&module),
    );
    let out = dir.join("slim");
    let report = slim_json(&module, &out);
    let (slimmed, compacted) = outcome(&report, &module, &out);
    assert!(compacted, "{report}");
    let venv = auditwheel.parent().unwrap();
    let path = format!(
        "{}:{}",
        venv.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let loader = dir.join("user");
    std::fs::write(
        dir.join("user.c"),
        "#include <dlfcn.h>\n#include <stdio.h>\n\
         int main(int c, char **v) { void *h = dlopen(v[1], RTLD_NOW);\n\
           if (!h) { printf(\"%s\\n\", dlerror()); return 1; }\n\
           int (*f)(void) = (int (*)(void))dlsym(h, \"answer\");\n\
           printf(\"%d\\n\", f ? f() : -1); return 0; }\n",
    )
    .unwrap();
    run_ok(
        Command::new(&gcc)
            .arg(dir.join("user.c"))
            .arg("-o")
            .arg(&loader)
            .arg("-ldl"),
    );
    let mut answers = Vec::new();
    for (name, so) in [("orig", &module), ("slim", &slimmed)] {
        let whl = wheel(&dir.join(name), so);
        let repaired = dir.join(format!("{name}-repaired"));
        run_ok(
            Command::new(&auditwheel)
                .env("PATH", &path)
                .env("LD_LIBRARY_PATH", &libs)
                .args(["repair", "--plat", "manylinux_2_35_x86_64", "-w"])
                .arg(&repaired)
                .arg(&whl),
        );
        let repaired_whl = std::fs::read_dir(&repaired)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let unpacked = dir.join(format!("{name}-unpacked"));
        run_ok(
            Command::new("python3")
                .args([
                    "-c",
                    "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])",
                ])
                .arg(&repaired_whl)
                .arg(&unpacked),
        );
        let o = Command::new(&loader)
            .arg(unpacked.join("pkg/blob_mod.so"))
            .output()
            .unwrap();
        answers.push((
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        ));
    }
    assert_eq!(answers[0], (Some(0), "42\n".into()));
    assert_eq!(answers[1], answers[0]);
}

/// Layouts other tools leave, each compacted and run as its original:
/// a `.bss` whose file offset range spans the containers among host data
/// after it (ld.bfd's medium-model layout: `.lrodata` after `.bss`, as in
/// PyTorch's libtorch_cuda.so), where a `SHT_NOBITS` section holds no file
/// bytes (gABI, "Sections"); and a section header table patchelf 0.19
/// put at the start of the loaded segment it adds (`--set-rpath`, as
/// auditwheel runs it on every repaired wheel), compared as the table it
/// is.
#[test]
fn layouts_other_tools_leave_are_compacted() {
    let (Some(Kit { gcc, dir, blob, .. }), Some(auditwheel)) = (kit(), auditwheel()) else {
        return;
    };
    let patchelf = auditwheel.with_file_name("patchelf");
    // Host data around a second copy of the bundle in `.lrodata`, and a
    // megabyte of `.bss` named every 2 KiB.
    let mut extra = format!(
        "    .section .lrodata,\"a\",@progbits\n    .globl table\ntable:\n    .quad 1, 2, 3, 4\n\
         \x20   .p2align 12\n    .globl lro\nlro:\n    .incbin \"{}\"\n    .quad 5\n    .bss\n    .p2align 12\n",
        blob.display()
    );
    for i in 0..512 {
        extra += &format!(
            "    .globl b{i}\n    .type b{i},@object\n    .size b{i},2048\nb{i}:\n    .zero 2048\n"
        );
    }
    let asm = dir.join("layouts.s");
    std::fs::write(&asm, containers(&blob, ".hidden", &extra)).unwrap();
    let lib_c = dir.join("layouts.c");
    std::fs::write(
        &lib_c,
        "#include <string.h>\nextern const char lro[]; extern char b300[];\n\
         int answer(void) { strcpy(b300, \"bss\");\n\
           return 40 + !memcmp(lro, \"__CLANG_OFFLOAD_BUNDLE__\", 24) + !strcmp(b300, \"bss\"); }\n",
    )
    .unwrap();
    let load = dlopen_caller(
        &gcc,
        &dir.join("user"),
        "",
        "int (*f)(void) = (int (*)(void))dlsym(h, \"answer\"); printf(\"%d\\n\", f ? f() : -1);",
    );
    let readelf = |so: &Path, flag: &str| {
        String::from_utf8(run_ok(Command::new("readelf").arg(flag).arg("-W").arg(so)).stdout)
            .unwrap()
    };
    for layout in ["medium-model", "patchelf"] {
        let lib = dir.join(format!("{layout}/libl.so"));
        std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
        link(&gcc, "bfd", &["-shared", "-fPIC"], &[&lib_c, &asm], &lib);
        let sections = readelf(&lib, "-S");
        let offset = |name: &str| {
            let line = sections.lines().find(|l| l.contains(name)).unwrap();
            let f: Vec<&str> = line.split_whitespace().collect();
            let at = f.iter().position(|w| *w == name).unwrap();
            let hex = |s: &str| u64::from_str_radix(s, 16).unwrap();
            (hex(f[at + 3]), hex(f[at + 4]))
        };
        // The layout is the one named: `.bss`'s offset range holds `.lrodata`.
        let ((bss, bss_size), (lrodata, _)) = (offset(".bss"), offset(".lrodata"));
        assert!(bss < lrodata && lrodata < bss + bss_size, "{sections}");
        if layout == "patchelf" {
            run_ok(
                Command::new(&patchelf)
                    .arg("--set-rpath")
                    .arg(format!("$ORIGIN/{}", "long/".repeat(64)))
                    .arg(&lib),
            );
            let header = readelf(&lib, "-hl");
            let shoff: u64 = header
                .lines()
                .find(|l| l.contains("Start of section headers"))
                .and_then(|l| l.split_whitespace().nth(4))
                .unwrap()
                .parse()
                .unwrap();
            assert!(
                header.lines().any(|l| l.trim_start().starts_with("LOAD")
                    && l.split_whitespace().nth(1) == Some(&format!("{shoff:#08x}"))),
                "the section headers are not where patchelf 0.19 puts them: {header}"
            );
        }
        assert_eq!(load(&lib), "42\n", "{layout}");
        let out = dir.join(format!("{layout}/out"));
        let report = slim_json(&lib, &out);
        let (result, compacted) = outcome(&report, &lib, &out);
        assert!(compacted, "{layout}: {report}");
        assert_eq!(load(&result), "42\n", "{layout}: {report}");
    }
}

/// A TLS symbol's value is an offset in the TLS template, not an address
/// (gABI, "Symbol Values"): TLS symbols whose offsets fall where the
/// headers' neighbours are (vllm's `_C_stable_libtorch.abi3.so`, jax's
/// `xla_cuda_plugin.so`) neither block the compaction nor move, and the
/// result's threads read their variables as the original's do.
#[test]
fn tls_symbols_are_offsets_not_addresses() {
    let Some(Kit {
        clang,
        gcc,
        dir,
        blob,
    }) = kit()
    else {
        return;
    };
    let asm = dir.join("tls.s");
    std::fs::write(&asm, containers(&blob, ".hidden", "")).unwrap();
    // 64 exported TLS variables, one every 0x80 bytes of the template: the
    // offsets 0 to 0x1f80 cover the pages after the ELF header.
    let mut lib_c = String::from("#include <pthread.h>\n");
    for i in 0..64 {
        lib_c += &format!("__thread int tv{i}[32] = {{{i}}};\n");
    }
    lib_c += "static void *sum(void *p) { long s = 0;\n";
    for i in 0..64 {
        lib_c += &format!("  tv{i}[1] = {i}; s += tv{i}[0] + tv{i}[1];\n");
    }
    lib_c += "  *(long *)p = s; return 0; }\n\
              long answer(void) { long s = 0; pthread_t t; pthread_create(&t, 0, sum, &s);\n\
                pthread_join(t, 0); long m = 0; sum(&m); return s + m; }\n";
    let lib_src = dir.join("tls.c");
    std::fs::write(&lib_src, lib_c).unwrap();
    let load = dlopen_caller(
        &gcc,
        &dir.join("tls-user"),
        "",
        "long (*f)(void) = (long (*)(void))dlsym(h, \"answer\"); printf(\"%ld\\n\", f ? f() : -1);",
    );
    for ld in ["bfd", "gold", "lld"] {
        let compiler = if ld == "lld" { &clang } else { &gcc };
        let lib = dir.join(format!("tls-{ld}/libtls.so"));
        std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
        link(
            compiler,
            ld,
            &["-shared", "-fPIC", "-pthread"],
            &[&lib_src, &asm],
            &lib,
        );
        // Each thread: 2 * (0 + 1 + ... + 63).
        let expected = format!("{}\n", 2 * 2 * (0..64).sum::<i64>());
        assert_eq!(load(&lib), expected, "{ld}");
        let out = dir.join(format!("tls-{ld}/out"));
        let report = slim_json(&lib, &out);
        let (result, compacted) = outcome(&report, &lib, &out);
        assert!(compacted, "{ld}: {report}");
        assert_eq!(load(&result), expected, "{ld}: {report}");
        let tls = |f: &Path| -> Vec<String> {
            String::from_utf8(
                run_ok(Command::new("readelf").args(["-sW", "--dyn-syms"]).arg(f)).stdout,
            )
            .unwrap()
            .lines()
            .filter(|l| l.contains(" TLS "))
            .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
            .filter(|l| !l.contains(" UND "))
            .collect()
        };
        let (before, after) = (tls(&lib), tls(&result));
        assert!(before.len() >= 64, "{ld}: {before:?}");
        // Same values, sizes, bindings (section indices may be renumbered).
        let strip = |v: Vec<String>| -> Vec<String> {
            v.into_iter()
                .map(|l| {
                    let f: Vec<&str> = l.split(' ').collect();
                    format!("{} {} {} {}", f[0], f[1], f[3], f.last().unwrap())
                })
                .collect()
        };
        assert_eq!(strip(before), strip(after), "{ld}");
    }
}

/// Two bundles back to back (one starts where the other ends, as in
/// rocSOLVER 5.5.1's `.hip_fatbin`), each named only by a HIP wrapper: a
/// wrapper's pointer is a container's start (the registration call reads a
/// bundle there), so the place where two meet moves with the later one.
/// Compacted, in a PIE (relative relocations) and a position-dependent
/// program (the words themselves), and each wrapper still points at a
/// bundle.
#[test]
fn wrappers_point_at_starts_where_two_bundles_meet() {
    let Some(Kit { gcc, dir, blob, .. }) = kit() else {
        return;
    };
    let asm = dir.join("meet.s");
    let b = blob.display();
    std::fs::write(
        &asm,
        format!(
            "    .section .hip_fatbin,\"a\",@progbits\n    .p2align 12\n\
             blob_a:\n    .incbin \"{b}\"\nblob_b:\n    .incbin \"{b}\"\n\
             \x20   .section .hipFatBinSegment,\"aw\",@progbits\n    .p2align 3\n\
             \x20   .globl wrap_a\nwrap_a:\n    .long 0x48495046\n    .long 1\n    .quad blob_a\n    .quad 0\n\
             \x20   .globl wrap_b\nwrap_b:\n    .long 0x48495046\n    .long 1\n    .quad blob_b\n    .quad 0\n\
             \x20   .section .note.GNU-stack,\"\",@progbits\n"
        ),
    )
    .unwrap();
    let main = dir.join("meet.c");
    std::fs::write(
        &main,
        "#include <stdio.h>\n#include <string.h>\n\
         struct w { unsigned magic, version; const char *bin; const void *aux; };\n\
         extern struct w wrap_a, wrap_b;\n\
         int main(void) {\n\
           int a = !memcmp(wrap_a.bin, \"__CLANG_OFFLOAD_BUNDLE__\", 24);\n\
           int b = !memcmp(wrap_b.bin, \"__CLANG_OFFLOAD_BUNDLE__\", 24);\n\
           printf(\"%d %d %d\\n\", a, b, wrap_b.bin > wrap_a.bin);\n  return !(a && b);\n}\n",
    )
    .unwrap();
    for (name, flags) in [
        ("pie", &["-pie", "-fPIE"][..]),
        ("no-pie", &["-no-pie", "-fno-pic"][..]),
    ] {
        let exe = dir.join(format!("meet-{name}"));
        link(&gcc, "bfd", flags, &[&main, &asm], &exe);
        let before = run(&exe);
        assert_eq!(before, (Some(0), "1 1 1\n".into()), "{name}");
        let out = dir.join(format!("meet-{name}-out"));
        let report = slim_json(&exe, &out);
        let (result, compacted) = outcome(&report, &exe, &out);
        assert!(compacted, "{name}: {report}");
        assert_eq!(run(&result), before, "{name}: {report}");
    }
}

/// The x86-64 large code model in a shared object: `movabs $sym@GOTOFF`
/// added to the GOT's address (x86-64 psABI, "Large Models"; the
/// `R_X86_64_GOTOFF64` is resolved at link time and leaves no relocation).
/// Found, so what it names does not move (the container is pinned, or the
/// section rewritten in place), and the library's pointer still reaches its
/// bundle, with gcc and clang, each linker.
#[test]
fn large_code_model_references_keep_the_section_in_place() {
    let Some(Kit {
        clang,
        gcc,
        dir,
        blob,
    }) = kit()
    else {
        return;
    };
    let asm = dir.join("large.s");
    std::fs::write(&asm, containers(&blob, ".hidden", "")).unwrap();
    let lib_c = dir.join("large.c");
    std::fs::write(
        &lib_c,
        "__attribute__((visibility(\"hidden\"))) extern const char blob_c[];\n\
         const char *third(void) { return blob_c; }\n",
    )
    .unwrap();
    let load = dlopen_caller(
        &gcc,
        &dir.join("large-user"),
        "#include <string.h>\n",
        "const char *(*f)(void) = (const char *(*)(void))dlsym(h, \"third\");\n\
         printf(\"%d\\n\", !memcmp(f(), \"__CLANG_OFFLOAD_BUNDLE__\", 24));",
    );
    for (compiler, ld) in [(&gcc, "bfd"), (&gcc, "gold"), (&clang, "lld")] {
        let name = format!("{}-{ld}", compiler.file_name().unwrap().to_string_lossy());
        let lib = dir.join(format!("large-{name}/liblarge.so"));
        std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
        link(
            compiler,
            ld,
            &["-O2", "-shared", "-fPIC", "-mcmodel=large"],
            &[&lib_c, &asm],
            &lib,
        );
        assert_eq!(load(&lib), "1\n", "{name}");
        let out = dir.join(format!("large-{name}/out"));
        let report = slim_json(&lib, &out);
        let (result, _) = outcome(&report, &lib, &out);
        assert_eq!(load(&result), "1\n", "{name}: {report}");
        // blob_c, which the code names, keeps its address.
        assert!(
            report["files"][0]["written"] == true,
            "{name}: nothing written: {report}"
        );
    }
}

/// Words no relocation describes that name a container's start exactly:
/// in a position-dependent program an 8-byte pointer at an odd offset (a
/// packed structure) and a 32-bit absolute word (`.long blob_b`); in a PIE
/// and a position-dependent program, 32- and 64-bit self-relative words
/// (`.long blob_b - .`). Found, so the container each names keeps its
/// address (pinned) while the rest compacts, and each program follows its
/// word to a bundle as the original does.
#[test]
fn exact_words_without_relocations_keep_what_they_name_in_place() {
    let Some(Kit {
        clang,
        gcc,
        dir,
        blob,
    }) = kit()
    else {
        return;
    };
    let cases = [
        (
            "packed",
            &["-no-pie", "-fno-pic"][..],
            "    .data\n    .globl packed\npacked:\n    .byte 1\n    .quad blob_b\n",
            "#include <string.h>\nextern const char packed[];\n\
             const char *target(void) { const char *p; memcpy(&p, packed + 1, 8); return p; }\n",
        ),
        (
            "absolute-32",
            &["-no-pie", "-fno-pic"][..],
            "    .data\n    .p2align 2\n    .globl word32\nword32:\n    .long blob_b\n",
            "extern const unsigned word32;\n\
             const char *target(void) { return (const char *)(unsigned long)word32; }\n",
        ),
        // Self-relative words in read-only data (relative vtables, offset
        // tables), which the linker resolves with no relocation in a PIE as
        // in a position-dependent file.
        (
            "self-relative-32-pie",
            &["-pie", "-fPIE"][..],
            "    .section .rodata\n    .p2align 2\n    .globl rel\n    .hidden rel\n\
             rel:\n    .long blob_b - .\n",
            "extern const int rel __attribute__((visibility(\"hidden\")));\n\
             const char *target(void) { return (const char *)&rel + rel; }\n",
        ),
        (
            "self-relative-64-pie",
            &["-pie", "-fPIE"][..],
            "    .section .rodata\n    .p2align 3\n    .globl rel\n    .hidden rel\n\
             rel:\n    .quad blob_c - .\n",
            "extern const long rel __attribute__((visibility(\"hidden\")));\n\
             const char *target(void) { return (const char *)&rel + rel; }\n",
        ),
        (
            "self-relative-32-no-pie",
            &["-no-pie", "-fno-pic"][..],
            "    .section .rodata\n    .p2align 2\n    .globl rel\nrel:\n    .long blob_b - .\n",
            "extern const int rel;\n\
             const char *target(void) { return (const char *)&rel + rel; }\n",
        ),
    ];
    for (name, flags, data, c) in cases {
        let asm = dir.join(format!("{name}.s"));
        std::fs::write(&asm, containers(&blob, ".hidden", data)).unwrap();
        let src = dir.join(format!("{name}.c"));
        std::fs::write(
            &src,
            format!(
                "{c}#include <stdio.h>\n#include <string.h>\n\
                 int main(void) {{ int ok = !memcmp(target(), \"__CLANG_OFFLOAD_BUNDLE__\", 24);\n\
                   printf(\"%d\\n\", ok); return !ok; }}\n"
            ),
        )
        .unwrap();
        // Each linker, as the program kinds the case is written for
        // (position-dependent or not): static too.
        let pie = flags.contains(&"-pie");
        for (ld, kind, link_flags) in links() {
            if kind.contains("pie") != pie || (pie && kind == "no-pie") {
                continue;
            }
            let compiler = if ld == "lld" { &clang } else { &gcc };
            let exe = dir.join(format!("words-{name}-{ld}-{kind}"));
            link(compiler, ld, &link_flags, &[&src, &asm], &exe);
            let before = run(&exe);
            assert_eq!(before, (Some(0), "1\n".into()), "{name} {ld} {kind}");
            let out = dir.join(format!("words-{name}-{ld}-{kind}-out"));
            let report = slim_json(&exe, &out);
            let (result, _) = outcome(&report, &exe, &out);
            assert_eq!(run(&result), before, "{name} {ld} {kind}: {report}");
            // blob_b (or blob_c), which the word names exactly, keeps its
            // address: pinned, the rest compacted around it, the section in
            // place, or (a static C library's data naming a place inside a
            // container by chance) the file as it was.
            let file = &report["files"][0];
            assert!(
                file["written"] == false || file["holes"].as_array().is_some_and(|h| !h.is_empty()),
                "{name} {ld} {kind}: {report}"
            );
        }
    }
}

/// An object whose data holds a difference of two of the section's symbols
/// (`.quad blob_end - blob_a`), which the assembler resolves with no
/// relocation: the section stays in place (holes), and the program linked
/// from the slimmed object prints the same difference and finds its
/// bundles as the original's does.
#[test]
fn objects_with_resolved_differences_keep_the_section_in_place() {
    let Some(Kit { gcc, dir, blob, .. }) = kit() else {
        return;
    };
    let asm = dir.join("diff.s");
    std::fs::write(
        &asm,
        containers(
            &blob,
            ".hidden",
            "    .data\n    .p2align 3\n    .globl span\nspan:\n    .quad blob_end - blob_a\n",
        ),
    )
    .unwrap();
    let obj = dir.join("diff.o");
    run_ok(Command::new(&gcc).arg("-c").arg(&asm).arg("-o").arg(&obj));
    let main = dir.join("diff-main.c");
    std::fs::write(
        &main,
        "#include <stdio.h>\n#include <string.h>\n\
         extern const char blob_a[], blob_c[], blob_end[]; extern const long span;\n\
         int main(void) { int ok = blob_a + span == blob_end\n\
             && !memcmp(blob_c, \"__CLANG_OFFLOAD_BUNDLE__\", 24);\n\
           printf(\"%d\\n\", ok); return !ok; }\n",
    )
    .unwrap();
    let out = dir.join("diff-out");
    let report = slim_json(&obj, &out);
    let (result, compacted) = outcome(&report, &obj, &out);
    assert!(!compacted, "{report}");
    let mut runs = Vec::new();
    for (name, o) in [("orig", &obj), ("slim", &result)] {
        let exe = dir.join(format!("diff-{name}"));
        link(&gcc, "bfd", &[], &[&main, o], &exe);
        runs.push(run(&exe));
    }
    assert_eq!(runs[0].0, Some(0), "{runs:?}");
    assert_eq!(runs[0], runs[1], "{report}");
}

/// A program, built with `gcc` at `exe`, that `dlopen`s the library its
/// argument names (printing `dlerror()` if it cannot) and runs `call` with
/// the handle `h` (after the headers `dlfcn.h`, `stdio.h` and `includes`):
/// a function from a library to what the program prints with it.
fn dlopen_caller(gcc: &Path, exe: &Path, includes: &str, call: &str) -> impl Fn(&Path) -> String {
    let src = exe.with_extension("c");
    std::fs::write(
        &src,
        format!(
            "#include <dlfcn.h>\n#include <stdio.h>\n{includes}\
             int main(int c, char **v) {{ void *h = dlopen(v[1], RTLD_NOW);\n\
               if (!h) {{ printf(\"%s\\n\", dlerror()); return 1; }}\n{call}\n return 0; }}\n"
        ),
    )
    .unwrap();
    run_ok(Command::new(gcc).arg(&src).arg("-o").arg(exe).arg("-ldl"));
    let exe = exe.to_path_buf();
    move |so: &Path| {
        let o = Command::new(&exe).arg(so).output().unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
}

/// AArch64 programs (static, linked by lld, no C library: `_start` checks the
/// bundle magic where the form under test points and exits 0 or 1), each
/// run under `qemu-aarch64` before and after slim: the forms of the AArch64
/// ELF psABI's code models that reach into a section, "Code models":
/// small (`ADRP` + `ADD :lo12:`), large (`MOVZ`/`MOVK` with
/// `:abs_g3:`..`:abs_g0_nc:`), a literal pool in `.text` (`LDR x0, =sym`),
/// a pointer in data, and the section's end minus a size. Every result runs
/// as its original; the pointer in data of a position-dependent file has no
/// relocation, and neither have the code forms: what each names may not
/// move (a container's start is pinned where it is; the section's end is
/// never moved past).
#[test]
fn aarch64_references_run_the_same_under_qemu() {
    let Some(Kit {
        clang, dir, blob, ..
    }) = kit()
    else {
        return;
    };
    let Some(qemu) = system_tool("qemu-aarch64", "qemu-user") else {
        return;
    };
    let size = std::fs::metadata(&blob).unwrap().len();
    // x0 = the address to check, by form.
    let forms: [(&str, String); 7] = [
        // The control: only the HIP wrapper's pointer (relocated by slim as
        // the runtime reads it) reaches the containers.
        (
            "wrapper",
            "    adrp x9, __hip_wrapper\n    add x9, x9, :lo12:__hip_wrapper\n\
                 ldr x0, [x9, #8]\n"
                .into(),
        ),
        (
            "adrp-add",
            "    adrp x0, blob_b\n    add x0, x0, :lo12:blob_b\n".into(),
        ),
        (
            "movz-movk",
            "    movz x0, #:abs_g3:blob_c\n    movk x0, #:abs_g2_nc:blob_c\n\
                 movk x0, #:abs_g1_nc:blob_c\n    movk x0, #:abs_g0_nc:blob_c\n"
                .into(),
        ),
        ("literal-pool", "    ldr x0, =blob_b\n".into()),
        (
            "data-word",
            "    adrp x9, where\n    ldr x0, [x9, :lo12:where]\n".into(),
        ),
        (
            "end-minus-size",
            format!(
                "    adrp x0, blob_end\n    add x0, x0, :lo12:blob_end\n\
                     movz x3, #{}\n    movk x3, #{}, lsl #16\n    sub x0, x0, x3\n",
                size & 0xffff,
                size >> 16
            ),
        ),
        (
            "adr-first",
            "    adrp x0, blob_a\n    add x0, x0, :lo12:blob_a\n".into(),
        ),
    ];
    // "__CLANG_" as a little-endian u64, built in x2 (no literal: the
    // literal pool is a form under test).
    let magic = u64::from_le_bytes(*b"__CLANG_");
    let check = format!(
        "    ldr x1, [x0]\n    movz x2, #{}\n    movk x2, #{}, lsl #16\n\
             movk x2, #{}, lsl #32\n    movk x2, #{}, lsl #48\n\
             cmp x1, x2\n    cset x0, ne\n    mov x8, #93\n    svc #0\n    .ltorg\n",
        magic & 0xffff,
        (magic >> 16) & 0xffff,
        (magic >> 32) & 0xffff,
        magic >> 48
    );
    let mut compacted = Vec::new();
    // Position-dependent, every form; a static PIE (no C library, so no
    // self-relocation: the forms that read no pointer from data).
    let kinds: [(&str, &[&str]); 2] = [
        ("static", &["-static", "-no-pie"]),
        ("static-pie", &["-static-pie"]),
    ];
    for (name, load) in &forms {
        for (kind, flags) in kinds {
            let pie = kind == "static-pie";
            if pie && !matches!(*name, "adrp-add" | "adrp-first" | "end-minus-size") {
                continue;
            }
            let data = match *name {
                "data-word" => "    .data\n    .p2align 3\nwhere:\n    .quad blob_b\n",
                _ => "",
            };
            let program = format!("    .text\n    .globl _start\n_start:\n{load}{check}{data}");
            let asm = dir.join(format!("a64-{name}-{kind}.s"));
            std::fs::write(&asm, containers(&blob, ".hidden", &program)).unwrap();
            let exe = dir.join(format!("a64-{name}-{kind}"));
            run_ok(
                Command::new(&clang)
                    .args(["--target=aarch64-linux-gnu", "-fuse-ld=lld", "-nostdlib"])
                    .args(flags)
                    .arg(&asm)
                    .arg("-o")
                    .arg(&exe),
            );
            let run = |exe: &Path| {
                Command::new(&qemu)
                    .arg(exe)
                    .status()
                    .unwrap_or_else(|e| panic!("{}: {e}", exe.display()))
                    .code()
            };
            assert_eq!(run(&exe), Some(0), "{name} {kind}: the original");
            let out = dir.join(format!("out-a64-{name}-{kind}"));
            let report = slim_json(&exe, &out);
            let (result, done) = outcome(&report, &exe, &out);
            assert_eq!(
                run(&result),
                Some(0),
                "{name} {kind} runs differently once slimmed: {report}"
            );
            if done {
                compacted.push(format!("{name} {kind}"));
            }
        }
    }
    // The control compacts; the section's end, which moves, is never
    // compacted past; the forms that name a start exactly pin it, and
    // compact where what is left frees one of the segments' 64 KiB pages.
    assert!(
        compacted.iter().any(|c| c == "wrapper static"),
        "{compacted:?}"
    );
    assert!(
        !compacted.iter().any(|c| c.starts_with("end-minus-size")),
        "{compacted:?}"
    );
    assert!(
        compacted.iter().any(|c| c == "literal-pool static")
            && compacted.iter().any(|c| c == "adrp-add static"),
        "{compacted:?}"
    );
}
