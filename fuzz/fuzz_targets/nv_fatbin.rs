//! NVIDIA fat binaries: header, entries (PTX, cubin, other kinds, compressed
//! ones), payloads and the images they list as.
//!
//! Invariants: the fat binary and every entry's payload lie within the input,
//! entries come in order without overlapping, a stored entry's payload has its
//! stated size, a compressed one is refused; one image per entry.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::nv_fatbin::NvFatbin;
use offload_loader::{Container, Limits};

fuzz_target!(|data: &[u8]| {
    let Ok(f) = NvFatbin::parse(data, &Limits::default()) else { return };
    assert!(f.len() <= data.len() as u64);
    let mut end = 0;
    for (i, e) in f.entries().iter().enumerate() {
        assert!(e.header_offset >= end, "entries overlap");
        assert!(e.offset >= e.header_offset + 64);
        end = e.offset + e.stored_size;
        assert!(end <= f.len());
        assert!(e.size <= e.stored_size);
        let _ = (e.arch(), e.compression(), e.is_64bit(), e.kind);
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
    assert_eq!(c.images().len(), f.entries().len());
    for (i, image) in c.images().iter().enumerate() {
        assert_eq!(image.index, i);
        if let Ok(bytes) = c.image_bytes(i) {
            assert_eq!(bytes.len() as u64, image.size);
        }
    }
});
