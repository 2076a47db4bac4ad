//! A whole section: every container format, resynchronisation after errors,
//! the headers of plain images, and image extraction with a 1 MiB cap.
//!
//! Invariants: containers come in order without overlapping and lie within
//! the section; an extracted image has the size its container states.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::{scan, ImageSource, Limits};

fuzz_target!(|data: &[u8]| {
    let limits = Limits { max_uncompressed: 1 << 20, ..Limits::default() };
    let mut end = 0;
    for found in scan(data, &limits) {
        let container = match found {
            Ok(c) => c,
            Err(e) => {
                assert!(e.offset <= data.len() as u64);
                let _ = e.to_string();
                continue;
            }
        };
        assert!(container.offset() >= end, "containers overlap");
        end = container.offset() + container.len();
        assert!(end <= data.len() as u64);
        for i in 0..container.images().len() {
            let _ = container.read_content(i);
            if let Ok(bytes) = container.image_bytes(i) {
                assert_eq!(bytes.len() as u64, container.images()[i].size);
            }
        }
        assert!(container.image_bytes(container.images().len()).is_err());
    }
});
