//! Images: `offload_slim::slim_image` and `offload_slim::image::gpu_files`
//! end to end on a `docker save` archive. The first byte chooses what the
//! rest is: 0, a layer's tar stream, put into a well-formed archive (its
//! config's `diff_id` right, so the layer's entries are what is read); any
//! other, the whole archive. Invariants: never a panic, a loop or an
//! allocation beyond the input; an image written is read back, by both
//! functions, without error; nothing is left in the output directory but
//! what was written; each file `gpu_files` gives lies inside its holder and
//! maps, and its scratch directory is gone once the result is dropped.
#![no_main]
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use libfuzzer_sys::fuzz_target;
use offload_loader::{DeviceTarget, Limits, MappedFile};
use offload_slim::{image, slim_image, Options, Reference};
use sha2::{Digest, Sha256};

fn dir() -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let d = std::env::temp_dir().join(format!(
        "offload-fuzz-image-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn member(tar: &mut tar::Builder<Vec<u8>>, name: &str, data: &[u8]) {
    let mut h = tar::Header::new_ustar();
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    tar.append_data(&mut h, name, data).unwrap();
}

/// A `docker save` archive with one layer, `layer`.
fn archive(layer: &[u8]) -> Vec<u8> {
    let hex: String = Sha256::digest(layer)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let diff_id = format!("sha256:{hex}");
    let config = format!(r#"{{"rootfs":{{"type":"layers","diff_ids":["{diff_id}"]}}}}"#);
    let mut tar = tar::Builder::new(Vec::new());
    member(&mut tar, "layer.tar", layer);
    member(&mut tar, "config.json", config.as_bytes());
    member(
        &mut tar,
        "manifest.json",
        br#"[{"Config":"config.json","RepoTags":["fuzz:1"],"Layers":["layer.tar"]}]"#,
    );
    tar.into_inner().unwrap()
}

fn check_view(image: &str, scratch: &Path) {
    let Some(r) = Reference::parse(image) else {
        panic!("{image}")
    };
    if let Ok(gpu) = image::gpu_files(&r, scratch) {
        for f in &gpu.files {
            assert!(!f.names.is_empty(), "{f:?}");
            let holder = std::fs::metadata(&f.holder).unwrap().len();
            assert!(f.offset + f.len <= holder, "{f:?}");
            MappedFile::open_part(&f.holder, f.offset, f.len).unwrap();
        }
    }
    // Only the scratch directory's parent is left.
    assert_eq!(std::fs::read_dir(scratch).map_or(0, |d| d.count()), 0);
}

fn run(data: &[u8]) {
    let dir = dir();
    let input = dir.join("in.tar");
    std::fs::File::create(&input).unwrap().write_all(data).unwrap();
    let options = Options {
        devices: vec![
            DeviceTarget::parse("gfx1100").unwrap(),
            DeviceTarget::parse("sm_90").unwrap(),
        ],
        keep_portable: false,
        limits: Limits::default(),
    };
    let source = format!("docker-archive:{}", input.display());
    let out = dir.join("out");
    let output = format!("oci:{}:slim", out.display());
    let report = slim_image(
        &Reference::parse(&source).unwrap(),
        &options,
        Some(&Reference::parse(&output).unwrap()),
    );
    check_view(&source, &dir.join("view-in"));
    if report.output.is_some() {
        // What was written reads back.
        let again = slim_image(&Reference::parse(&output).unwrap(), &options, None);
        assert!(again.error.is_none(), "{:?}", again.error);
        check_view(&output, &dir.join("view-out"));
        let names: Vec<_> = std::fs::read_dir(&out)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().into_string().unwrap())
            .collect();
        let mut names = names;
        names.sort();
        assert_eq!(names, ["blobs", "index.json", "oci-layout"]);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

fuzz_target!(|input: &[u8]| {
    match input.split_first() {
        Some((0, layer)) => run(&archive(layer)),
        Some((_, data)) => run(data),
        None => {}
    }
});
