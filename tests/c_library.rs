//! The C library as C users meet it: its SONAME and version, the symbols it
//! exports (only the C API of `offload_loader.h`), and `ffi/install.sh`'s
//! tree (`PREFIX`, `DESTDIR`, links, stripped, a static library defining
//! only the C API) found by CMake and pkg-config, building and running
//! `examples/c/devices.c` shared and static each way.

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use support::*;

/// The functions `offload_loader.h` declares, read from the header.
fn header_api() -> BTreeSet<String> {
    let text = std::fs::read_to_string(workspace().join("ffi/include/offload_loader.h")).unwrap();
    let mut api = BTreeSet::new();
    for line in text.lines() {
        // Declarations start in column 0 with a type; comments, macros and
        // continuation lines do not.
        let Some(first) = line.chars().next() else {
            continue;
        };
        if !(first.is_ascii_alphabetic() || first == '_') || line.starts_with("extern") {
            continue;
        }
        let Some((head, _)) = line.split_once('(') else {
            continue;
        };
        let name = head.rsplit([' ', '*']).next().unwrap();
        api.insert(name.to_string());
    }
    assert!(api.len() > 20, "{api:?}");
    api
}

/// `OFFLOAD_LOADER_VERSION_STRING` in the header.
fn header_version() -> String {
    let text = std::fs::read_to_string(workspace().join("ffi/include/offload_loader.h")).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("#define OFFLOAD_LOADER_VERSION_STRING"))
        .unwrap();
    line.split('"').nth(1).unwrap().to_string()
}

/// The `version` of `ffi/Cargo.toml`.
fn crate_version() -> String {
    let text = std::fs::read_to_string(workspace().join("ffi/Cargo.toml")).unwrap();
    let line = text.lines().find(|l| l.starts_with("version = ")).unwrap();
    line.split('"').nth(1).unwrap().to_string()
}

/// The symbols `nm` lists as defined and global in `file` (`-D`: the
/// dynamic table of a shared object; otherwise the symbol tables of an
/// archive's members).
fn defined_globals(nm: &Path, file: &Path, dynamic: bool) -> BTreeSet<String> {
    let mut cmd = Command::new(nm);
    if dynamic {
        cmd.arg("-D");
    }
    let out = run_ok(cmd.args(["-g", "--defined-only"]).arg(file));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, _, name) = (f.next()?, f.next()?, f.next()?);
            Some(name.to_string())
        })
        .collect()
}

#[test]
fn the_shared_library_exports_exactly_the_c_api() {
    let Some(nm) = system_tool("nm", "binutils") else {
        return;
    };
    let Some(lib) = built("liboffload_loader.so") else {
        return;
    };
    let exported = defined_globals(&nm, &lib, true);
    assert_eq!(exported, header_api());
}

#[test]
fn soname_and_version_follow_the_crate() {
    let Some(lib) = built("liboffload_loader.so") else {
        return;
    };
    let version = crate_version();
    assert_eq!(header_version(), version, "the header's version macros");
    let major = version.split('.').next().unwrap();
    assert_eq!(
        tools::soname(&lib).as_deref(),
        Some(format!("liboffload_loader.so.{major}").as_str())
    );
    // SAFETY: loading the library runs its constructor, which only prepares
    // its own state; the symbol has the C signature the header declares.
    let said = unsafe {
        let lib = libloading::Library::new(&lib).unwrap();
        let f: libloading::Symbol<unsafe extern "C" fn() -> *const std::ffi::c_char> =
            lib.get(b"offload_loader_version").unwrap();
        std::ffi::CStr::from_ptr(f()).to_str().unwrap().to_string()
    };
    assert_eq!(said, version);
}

/// What `examples/c/devices.c` prints for two override devices.
fn runs(exe: &Path) {
    let out = run_ok(
        Command::new(exe)
            .env("OFFLOAD_LOADER_DEVICES", "gfx90a:sramecc+:xnack-,sm_90")
            .env_remove("LD_LIBRARY_PATH"),
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        text,
        format!(
            "liboffload_loader {}: 2 device(s)\ndevice 0: gfx90a:sramecc+:xnack-\ndevice 1: sm_90\n",
            crate_version()
        )
    );
}

fn install(prefix: &Path, destdir: Option<&Path>) {
    let mut cmd = Command::new("bash");
    cmd.arg(workspace().join("ffi/install.sh"))
        .env("PREFIX", prefix)
        .env("OFFLOAD_LOADER_BUILT", build_dir())
        .env_remove("LIBDIR");
    match destdir {
        Some(d) => cmd.env("DESTDIR", d),
        None => cmd.env_remove("DESTDIR"),
    };
    run_ok(&mut cmd);
}

#[test]
fn installed_library_builds_with_cmake_and_pkg_config() {
    let (Some(nm), Some(readelf), Some(cmake), Some(pkg_config), Some(cc)) = (
        system_tool("nm", "binutils"),
        system_tool("readelf", "binutils"),
        system_tool("cmake", "cmake"),
        system_tool("pkg-config", "pkg-config"),
        system_tool("cc", "gcc"),
    ) else {
        return;
    };
    if built("liboffload_loader.so").is_none() || built("liboffload_loader.a").is_none() {
        return;
    }
    let version = crate_version();
    let major = version.split('.').next().unwrap().to_string();
    let work = scratch("c_library");

    // DESTDIR: everything lands under DESTDIR/PREFIX, and the files name
    // PREFIX, not the staging directory.
    let stage = work.join("stage");
    install(Path::new("/opt/offload-loader"), Some(&stage));
    let staged = stage.join("opt/offload-loader");
    let lib = staged.join("lib");
    let real = format!("liboffload_loader.so.{version}");
    assert!(lib.join(&real).is_file());
    assert_eq!(
        std::fs::read_link(lib.join(format!("liboffload_loader.so.{major}"))).unwrap(),
        PathBuf::from(&real)
    );
    assert_eq!(
        std::fs::read_link(lib.join("liboffload_loader.so")).unwrap(),
        PathBuf::from(format!("liboffload_loader.so.{major}"))
    );
    for f in [
        "include/offload_loader.h",
        "lib/cmake/offload_loader/offload_loaderConfig.cmake",
        "lib/cmake/offload_loader/offload_loaderConfigVersion.cmake",
    ] {
        assert!(staged.join(f).is_file(), "{f}");
    }
    let pc = std::fs::read_to_string(lib.join("pkgconfig/offload_loader.pc")).unwrap();
    assert!(pc.contains("prefix=/opt/offload-loader\n"), "{pc}");
    assert!(pc.contains(&format!("Version: {version}\n")), "{pc}");
    // Stripped: no symbol table, no debug information.
    let sections =
        String::from_utf8(run_ok(Command::new(&readelf).arg("-S").arg(lib.join(&real))).stdout)
            .unwrap();
    assert!(
        !sections.contains(".symtab") && !sections.contains(".debug_"),
        "{sections}"
    );
    // Both libraries define only the C API globally: not the Rust standard
    // library's symbols, nor the bundled zstd's.
    let api = header_api();
    assert_eq!(defined_globals(&nm, &lib.join(&real), true), api);
    assert_eq!(
        defined_globals(&nm, &lib.join("liboffload_loader.a"), false),
        api
    );

    // PREFIX: CMake's find_package, shared and static.
    let prefix = work.join("prefix");
    install(&prefix, None);
    let example = workspace().join("examples/c");
    for (dir, static_) in [("cmake-shared", "OFF"), ("cmake-static", "ON")] {
        let build = work.join(dir);
        run_ok(
            Command::new(&cmake)
                .arg("-S")
                .arg(&example)
                .arg("-B")
                .arg(&build)
                .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix.display()))
                .arg(format!("-DOFFLOAD_LOADER_STATIC={static_}")),
        );
        run_ok(Command::new(&cmake).arg("--build").arg(&build));
        let exe = build.join("devices");
        let dynamic =
            String::from_utf8(run_ok(Command::new(&readelf).arg("-d").arg(&exe)).stdout).unwrap();
        assert_eq!(
            dynamic.contains(&format!("[liboffload_loader.so.{major}]")),
            static_ == "OFF",
            "{dir}: {dynamic}"
        );
        runs(&exe);
    }

    // pkg-config, shared and static. The static program also defines a
    // function the bundled zstd has (ZSTD_versionNumber): it links, and its
    // own is the one called.
    let pkg = |args: &[&str]| -> Vec<String> {
        let out = run_ok(
            Command::new(&pkg_config)
                .args(args)
                .arg("offload_loader")
                .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig")),
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .split_whitespace()
            .map(String::from)
            .collect()
    };
    let shared = work.join("pkg-shared");
    run_ok(
        Command::new(&cc)
            .arg(example.join("devices.c"))
            .args(pkg(&["--cflags", "--libs"]))
            .arg(format!("-Wl,-rpath,{}", prefix.join("lib").display()))
            .arg("-o")
            .arg(&shared),
    );
    runs(&shared);

    let libs: Vec<String> = pkg(&["--libs", "--static"])
        .into_iter()
        .filter(|a| a != "-loffload_loader")
        .collect();
    let static_devices = work.join("pkg-static");
    run_ok(
        Command::new(&cc)
            .arg(example.join("devices.c"))
            .args(pkg(&["--cflags"]))
            .arg(prefix.join("lib/liboffload_loader.a"))
            .args(&libs)
            .arg("-o")
            .arg(&static_devices),
    );
    runs(&static_devices);

    let clash = work.join("clash.c");
    std::fs::write(
        &clash,
        "unsigned ZSTD_versionNumber(void) { return 7; }\n\
         const char *offload_loader_version(void);\n\
         int main(void) { return ZSTD_versionNumber() == 7 && offload_loader_version()[0] ? 0 : 1; }\n",
    )
    .unwrap();
    let static_exe = work.join("pkg-static-clash");
    run_ok(
        Command::new(&cc)
            .arg(&clash)
            .args(pkg(&["--cflags"]))
            .arg(prefix.join("lib/liboffload_loader.a"))
            .args(&libs)
            .arg("-o")
            .arg(&static_exe),
    );
    run_ok(&mut Command::new(&static_exe));
}
