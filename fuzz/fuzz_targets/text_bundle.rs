//! Text offload bundles (`clang -S` for offload languages), and the
//! container built from one.
//!
//! Invariants: entries lie inside the input, in order, without overlapping;
//! the container lists the same entries and hands out the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::text_bundle::TextBundle;
use offload_loader::{Container, Limits};

fuzz_target!(|data: &[u8]| {
    let limits = Limits::default();
    let Ok(bundle) = TextBundle::parse(data, &limits) else { return };
    let mut end = 0;
    for e in bundle.entries() {
        assert!(e.offset >= end, "entries overlap");
        end = e.offset + e.size;
        assert!(end <= data.len() as u64);
    }
    let c = Container::parse(data, &limits).expect("a text bundle is a container");
    assert_eq!(c.images().len(), bundle.entries().len());
    for (i, e) in bundle.entries().iter().enumerate() {
        let bytes = c.image_bytes(i).unwrap();
        assert_eq!(bytes.as_ref(), &data[e.offset as usize..(e.offset + e.size) as usize]);
    }
});
