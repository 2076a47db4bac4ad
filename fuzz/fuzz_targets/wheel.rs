//! Wheels: `offload_slim::wheel::record` (a wheel's name, `RECORD`,
//! `METADATA`'s version) on any text, and `offload_slim::slim_wheel` end to
//! end on any bytes as a `.whl` file. The first byte chooses. Invariants:
//! never a panic, a loop or an allocation beyond the input; a `RECORD` that
//! parses is written back to text that parses to the same rows; a name
//! that parses prints as itself; a wheel written is a zip archive with the
//! entries of the input and nothing is left in the output directory but it.
#![no_main]
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use libfuzzer_sys::fuzz_target;
use offload_loader::{DeviceTarget, Limits};
use offload_slim::wheel::record;
use offload_slim::{slim_wheel, Options};

fn dir() -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let d = std::env::temp_dir().join(format!(
        "offload-fuzz-wheel-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn text(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Some(rows) = record::parse_record(&text) {
        let again = record::parse_record(&record::write_record(&rows)).unwrap();
        assert_eq!(again, rows);
    }
    if let Some(name) = record::WheelName::parse(&text) {
        assert_eq!(name.to_string(), text);
        let labelled = name.with_label("x1");
        assert!(labelled.version.ends_with("x1"));
        assert_eq!(record::WheelName::parse(&labelled.to_string()), Some(labelled));
    }
    let _ = record::set_metadata_version(&text, "1.0+x");
}

fn wheel(data: &[u8]) {
    let dir = dir();
    let input = dir.join("pkg-1.0-py3-none-any.whl");
    std::fs::write(&input, data).unwrap();
    let out = dir.join("out");
    let options = Options {
        devices: vec![
            DeviceTarget::parse("gfx1100").unwrap(),
            DeviceTarget::parse("sm_90").unwrap(),
        ],
        keep_portable: false,
        limits: Limits::default(),
    };
    let report = slim_wheel(&input, &options, &out, Some("x1"), false);
    let left: Vec<_> = std::fs::read_dir(&out)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    match &report.output {
        Some(written) => {
            assert_eq!(left, [written.clone()]);
            let f = std::fs::File::open(written).unwrap();
            zip::ZipArchive::new(f).unwrap();
        }
        None => assert!(left.is_empty(), "{left:?}"),
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

fuzz_target!(|input: &[u8]| {
    match input.split_first() {
        Some((0, data)) => text(data),
        Some((_, data)) => wheel(data),
        None => {}
    }
});
