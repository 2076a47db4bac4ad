//! Selection against the live peers, on real clang-22 code objects:
//!
//! - LLVM 22's `clang-offload-bundler -unbundle -targets=<device>` applies
//!   clang's own compatibility check (`isCodeObjectCompatible`, which calls
//!   `clang::isCompatibleTargetID`): for every device of the matrix, the images
//!   it unbundles are the images our selection finds compatible without
//!   assuming a feature the device did not state;
//! - ROCm comgr's `amd_comgr_lookup_code_object` (Debian `libamd-comgr2`,
//!   ROCm 5.2) is the HIP runtime's own choice of code object for an ISA: it
//!   must be our prediction of what HIP loads (`Selection::vendor`).
//!
//! The matrix: xnack/sramecc on, off and any, processors without those
//! features, code object v4, v5 and v6, and bundle IDs the peers refuse (an
//! alias, a feature the processor does not have). Generic code objects are
//! left to the unit tests: neither LLVM 22's bundler nor comgr 5.2 knows them.

mod support;

use std::ffi::{c_char, CString};
use std::path::{Path, PathBuf};
use std::process::Command;

use offload_loader_workspace::loader::select::VendorRuntime;
use offload_loader_workspace::loader::{select, Container, DeviceTarget, Limits, Policy};
use support::*;

/// (bundle target ID, clang `--offload-arch`, extra compiler arguments).
const OBJECTS: &[(&str, &str, &[&str])] = &[
    ("gfx906", "gfx906", &["-mcode-object-version=4"]),
    (
        "gfx906:xnack+",
        "gfx906:xnack+",
        &["-mcode-object-version=5"],
    ),
    ("gfx906:xnack-", "gfx906:xnack-", &[]),
    ("gfx90a", "gfx90a", &[]),
    ("gfx90a:sramecc+:xnack-", "gfx90a:sramecc+:xnack-", &[]),
    (
        "gfx90a:xnack+",
        "gfx90a:xnack+",
        &["-mcode-object-version=4"],
    ),
    ("gfx90a:sramecc-", "gfx90a:sramecc-", &[]),
    ("gfx1030", "gfx1030", &[]),
    ("gfx1100", "gfx1100", &["-mcode-object-version=5"]),
    // An alias in the ID, before the entry under the primary name.
    ("fiji", "gfx803", &[]),
    ("gfx803", "gfx803", &[]),
    // A feature gfx1030 does not have, on a real gfx1030 code object.
    ("gfx1030:xnack+", "gfx1030", &[]),
];

const DEVICES: &[&str] = &[
    "gfx906:sramecc+:xnack+",
    "gfx906:sramecc-:xnack-",
    "gfx906",
    "gfx90a:sramecc+:xnack-",
    "gfx90a:sramecc+:xnack+",
    "gfx90a:sramecc-:xnack+",
    "gfx90a:sramecc-:xnack-",
    "gfx90a",
    "gfx1030",
    "gfx1031",
    "gfx1100",
    "gfx803",
    "gfx900:xnack-",
];

fn id(target: &str) -> String {
    format!("hipv4-amdgcn-amd-amdhsa--{target}")
}

/// A bundle as clang writes it for HIP: the host entry first (size 0, at the
/// first boundary: the bundler refuses offset 0), each code object at a
/// 4096-byte boundary (`-bundle-align=4096`).
fn bundle(entries: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut ids = vec!["host-x86_64-unknown-linux-gnu-".to_string()];
    ids.extend(entries.iter().map(|(id, _)| id.clone()));
    let table: usize = 32 + ids.iter().map(|i| 24 + i.len()).sum::<usize>();
    let mut at = table.next_multiple_of(4096);
    let mut out = b"__CLANG_OFFLOAD_BUNDLE__".to_vec();
    out.extend((ids.len() as u64).to_le_bytes());
    let mut body = Vec::new();
    for (k, id) in ids.iter().enumerate() {
        let size = if k == 0 { 0 } else { entries[k - 1].1.len() };
        out.extend((at as u64).to_le_bytes());
        out.extend((size as u64).to_le_bytes());
        out.extend((id.len() as u64).to_le_bytes());
        out.extend(id.as_bytes());
        if size > 0 {
            body.push((at, &entries[k - 1].1));
            at = (at + size).next_multiple_of(4096);
        }
    }
    for (offset, bytes) in body {
        out.resize(offset, 0);
        out.extend(bytes);
    }
    out
}

/// Whether LLVM 22's bundler unbundles the only entry of `file` for `device`.
fn bundler_takes(tc: &Toolchain, file: &Path, device: &str) -> bool {
    let dir = temp_dir();
    let out = dir.join("out");
    let result = Command::new(&tc.bundler)
        .args(["-unbundle", "-type=o", "-allow-missing-bundles"])
        .arg(format!("-targets={}", id(device)))
        .arg(format!("-input={}", file.display()))
        .arg(format!("-output={}", out.display()))
        .output()
        .unwrap();
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    std::fs::metadata(&out)
        .map(|m| m.len() > 0)
        .unwrap_or(false)
}

/// comgr loaded at run time, as the HIP runtime loads it.
struct Comgr {
    lib: libloading::Library,
}

#[repr(C)]
struct CodeObjectInfo {
    isa: *const c_char,
    size: usize,
    offset: u64,
}

/// `AMD_COMGR_DATA_KIND_FATBIN` (amd_comgr.h).
const DATA_KIND_FATBIN: u32 = 0x10;

impl Comgr {
    fn open() -> Option<Comgr> {
        let path = "libamd_comgr.so.2";
        // SAFETY: loading comgr runs its initialisers, which have no
        // preconditions.
        match unsafe { libloading::Library::new(path) } {
            Ok(lib) => Some(Comgr { lib }),
            Err(e) => {
                missing(&format!("{path} ({e})"), "libamd-comgr2");
                None
            }
        }
    }

    /// The offset of the code object comgr looks up in `bundle` for `isa`,
    /// one ISA per call (comgr 5.2 answers later ISAs of one call wrongly
    /// once an entry was taken); `None` when it finds none.
    fn lookup(&self, bundle: &[u8], isa: &str) -> Option<u64> {
        type Create = unsafe extern "C" fn(u32, *mut u64) -> u32;
        type SetData = unsafe extern "C" fn(u64, usize, *const c_char) -> u32;
        type Lookup = unsafe extern "C" fn(u64, *mut CodeObjectInfo, usize) -> u32;
        type Release = unsafe extern "C" fn(u64) -> u32;
        // SAFETY: the signatures are amd_comgr.h's (amd_comgr_data_t is a
        // struct of one uint64_t, passed as one); the data handle lives for
        // this call, the bundle and the ISA string outlive it.
        unsafe {
            let create: libloading::Symbol<Create> =
                self.lib.get(b"amd_comgr_create_data").unwrap();
            let set: libloading::Symbol<SetData> = self.lib.get(b"amd_comgr_set_data").unwrap();
            let lookup: libloading::Symbol<Lookup> =
                self.lib.get(b"amd_comgr_lookup_code_object").unwrap();
            let release: libloading::Symbol<Release> =
                self.lib.get(b"amd_comgr_release_data").unwrap();
            let mut data = 0u64;
            assert_eq!(create(DATA_KIND_FATBIN, &mut data), 0);
            assert_eq!(set(data, bundle.len(), bundle.as_ptr().cast()), 0);
            let name = CString::new(isa).unwrap();
            let mut info = CodeObjectInfo {
                isa: name.as_ptr(),
                size: 0,
                offset: 0,
            };
            assert_eq!(lookup(data, &mut info, 1), 0, "{isa}");
            release(data);
            (info.size > 0).then_some(info.offset)
        }
    }
}

fn code_objects(tc: &Toolchain) -> Vec<(String, Vec<u8>)> {
    OBJECTS
        .iter()
        .map(|(target, arch, args)| {
            let recipe = args.iter().fold(CodeObject::new(arch), |r, a| r.arg(a));
            (id(target), std::fs::read(tc.build(recipe)).unwrap())
        })
        .collect()
}

#[test]
fn compatible_sets_match_the_bundlers_own_check() {
    let Some(tc) = toolchain() else { return };
    let objects = code_objects(&tc);
    let dir = scratch("peers-bundler");
    // One single-entry bundle per code object: the bundler answers "does
    // this image run on that device" for each pair.
    let singles: Vec<PathBuf> = objects
        .iter()
        .enumerate()
        .map(|(k, entry)| {
            let path = dir.join(format!("single-{k}.hipfb"));
            std::fs::write(&path, bundle(std::slice::from_ref(entry))).unwrap();
            path
        })
        .collect();
    let all = bundle(&objects);
    let container = Container::parse(&all, &Limits::default()).unwrap();
    for device in DEVICES {
        let target = DeviceTarget::parse(device).unwrap();
        let s = select(&target, &container, &Policy::default());
        let ours: Vec<&str> = s
            .compatible
            .iter()
            .filter(|(_, fit)| fit.certain)
            .map(|&(i, _)| container.images()[i].id.as_str())
            .collect();
        let mut ours = ours;
        ours.sort_unstable();
        let mut theirs: Vec<&str> = objects
            .iter()
            .zip(&singles)
            .filter(|(_, file)| bundler_takes(&tc, file, device))
            .map(|((id, _), _)| id.as_str())
            .collect();
        theirs.sort_unstable();
        assert_eq!(ours, theirs, "device {device}");
    }
}

#[test]
fn the_hip_prediction_is_what_comgr_looks_up() {
    let Some(tc) = toolchain() else { return };
    let Some(comgr) = Comgr::open() else { return };
    let objects = code_objects(&tc);
    let all = bundle(&objects);
    let container = Container::parse(&all, &Limits::default()).unwrap();
    let mut differs = 0;
    for device in DEVICES {
        let target = DeviceTarget::parse(device).unwrap();
        let s = select(&target, &container, &Policy::default());
        let vendor = s.vendor.unwrap();
        assert_eq!(vendor.runtime, VendorRuntime::Hip);
        let ours = vendor.image.map(|i| container.images()[i].offset);
        let theirs = comgr.lookup(&all, &format!("amdgcn-amd-amdhsa--{device}"));
        assert_eq!(ours, theirs, "device {device}: {s:?}");
        differs += usize::from(vendor.image != s.chosen);
    }
    // The matrix has devices where best fit and the vendor's rule differ.
    assert!(differs > 0);
}

/// Generic code objects as clang-22 writes them (code object v6), at generic
/// version 1 and, with `-mllvm -amdgpu-force-generic-version=2`, version 2:
/// each runs on every member of its family at either version (ROCr's ISA
/// registry and clr take any version from the one the member joined at; LLVM
/// 22 `EF_AMDGPU_GENERIC_VERSION_MAX` is 0xff) and on nothing else.
#[test]
fn generic_code_objects_of_every_version_run_on_their_family_only() {
    let Some(tc) = toolchain() else { return };
    let families: &[(&str, &[&str], &[&str])] = &[
        (
            "gfx9-generic",
            &["gfx900", "gfx906:xnack-", "gfx90c"],
            &["gfx908", "gfx90a", "gfx1030"],
        ),
        (
            "gfx10-3-generic",
            &["gfx1030", "gfx1031", "gfx1036"],
            &["gfx1010", "gfx1100"],
        ),
        (
            "gfx11-generic",
            &["gfx1100", "gfx1103", "gfx1151"],
            &["gfx1030", "gfx1200"],
        ),
        (
            "gfx12-generic",
            &["gfx1200", "gfx1201"],
            &["gfx1100", "gfx942"],
        ),
    ];
    for &(generic, members, others) in families {
        for version in [1u8, 2] {
            let mut recipe = CodeObject::new(generic);
            if version == 2 {
                recipe = recipe.arg("-mllvm").arg("-amdgpu-force-generic-version=2");
            }
            let code = std::fs::read(tc.build(recipe)).unwrap();
            let all = bundle(&[(id(generic), code)]);
            let container = Container::parse(&all, &Limits::default()).unwrap();
            let header =
                offload_loader_workspace::loader::ImageSource::read_content(&container, 1).unwrap();
            assert_eq!(header.generic_version, Some(version), "{generic}");
            for device in members {
                let s = select(
                    &DeviceTarget::parse(device).unwrap(),
                    &container,
                    &Policy::default(),
                );
                assert_eq!(s.chosen, Some(1), "{generic} v{version} on {device}: {s:?}");
            }
            for device in others {
                let s = select(
                    &DeviceTarget::parse(device).unwrap(),
                    &container,
                    &Policy::default(),
                );
                assert_eq!(s.chosen, None, "{generic} v{version} on {device}");
                assert!(
                    s.rejected[1]
                        .1
                        .to_string()
                        .contains("which is not in that family"),
                    "{:?}",
                    s.rejected[1]
                );
            }
        }
    }
}
