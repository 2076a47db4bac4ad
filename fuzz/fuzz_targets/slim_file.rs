//! `offload_slim::slim_file` end to end on any file: selected for gfx1100
//! and sm_90, written beside it, read back and compared with the original
//! as the loader would load both (the comparison is the oracle: a result it
//! passes is written, one it refuses is not). Invariants: never a panic, a
//! loop or an allocation beyond the input; a result is written only when
//! the report says so, and then it holds the report's size; nothing else is
//! left in the directory. Seeds: `corpus/slim_elf` (the input's first byte
//! is ignored, as there it is the mask).
#![no_main]
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use libfuzzer_sys::fuzz_target;
use offload_loader::{DeviceTarget, Limits};
use offload_slim::{slim_file, Destination, Options};

fn dir() -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let d = std::env::temp_dir().join(format!(
        "offload-fuzz-slim-file-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fuzz_target!(|input: &[u8]| {
    let Some((_, data)) = input.split_first() else { return };
    let dir = dir();
    let path = dir.join("input");
    std::fs::write(&path, data).unwrap();
    let options = Options {
        devices: vec![
            DeviceTarget::parse("gfx1100").unwrap(),
            DeviceTarget::parse("sm_90").unwrap(),
        ],
        keep_portable: false,
        limits: Limits { max_uncompressed: 1 << 20, ..Limits::default() },
    };
    let out = dir.join("out");
    let report = slim_file(&path, &options, &Destination::To(out.clone()));
    match std::fs::metadata(&out) {
        Ok(m) => {
            assert!(report.written && report.error.is_none());
            assert_eq!(m.len(), report.after);
        }
        Err(_) => assert!(!report.written),
    }
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert!(names == ["input"] || names == ["input", "out"], "{names:?}");
    std::fs::remove_dir_all(&dir).unwrap();
});
