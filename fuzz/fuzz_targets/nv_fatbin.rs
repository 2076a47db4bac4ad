//! NVIDIA fat binaries: header, entries (PTX, cubin, other kinds, compressed
//! ones, `--concat` groups and their members), payloads and the images they
//! list as.
//!
//! Invariants: the fat binary and every entry's payload lie within the input,
//! top-level entries come in order without overlapping, a stored entry's
//! payload has its stated size and a compressed one is refused by `payload`;
//! one image per entry that is not a group.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::nv_fatbin::{kind, NvFatbin};
use offload_loader::{Container, Limits};

fuzz_target!(|data: &[u8]| {
    let Ok(f) = NvFatbin::parse(data, &Limits::default()) else { return };
    assert!(f.len() <= data.len() as u64);
    let mut end = 0;
    for (i, e) in f.entries().iter().enumerate() {
        let _ = (e.arch(), e.compression(), e.is_64bit(), e.kind);
        if let Some(g) = e.group {
            assert!(g < i && f.entries()[g].kind == kind::CONCAT);
            assert!(f.payload(i).is_err());
            continue;
        }
        assert!(e.header_offset >= end, "entries overlap");
        assert!(e.offset >= e.header_offset + 64);
        end = e.offset + e.stored_size;
        assert!(end <= f.len());
        assert!(e.size <= e.stored_size);
        match f.payload(i) {
            Ok(p) => {
                assert!(!e.is_compressed());
                assert_eq!(p.len() as u64, e.size);
            }
            Err(_) => assert!(e.is_compressed(), "a stored entry's payload is refused"),
        }
    }
    assert!(f.payload(f.entries().len()).is_err());
    let c = Container::parse(data, &Limits::default()).expect("a fat binary is a container");
    let groups = f.entries().iter().filter(|e| e.kind == kind::CONCAT).count();
    assert_eq!(c.images().len(), f.entries().len() - groups);
    for (i, image) in c.images().iter().enumerate() {
        assert_eq!(image.index, i);
        assert!(c.nv_entry(i).is_some());
    }
});
