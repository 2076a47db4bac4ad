//! The quick look of a directory scan (`MappedFile::open_if_offload`: an ELF
//! file's section table and names by positioned reads, an `ar` archive member
//! by member, each object's section table read with the next member's
//! header) on a file holding the input.
//!
//! Invariant: it never misses what the full parse (`offload_sections` over
//! the whole bytes) finds; whatever it returns, it returns without panicking.
#![no_main]
use std::io::Write;
use std::path::PathBuf;

use libfuzzer_sys::fuzz_target;
use offload_loader::discover::file::{offload_sections, MappedFile};
use once_cell::sync::Lazy;

/// One file per fuzzing process, rewritten for each input.
static PATH: Lazy<PathBuf> =
    Lazy::new(|| std::env::temp_dir().join(format!("quick-look-{}", std::process::id())));

fuzz_target!(|data: &[u8]| {
    let mut file = std::fs::File::create(&*PATH).expect("temporary file");
    file.write_all(data).expect("temporary file");
    drop(file);
    let quick = MappedFile::open_if_offload(&*PATH);
    if offload_sections(data).is_ok_and(|s| !s.is_empty()) {
        assert!(
            matches!(quick, Ok(Some(_))),
            "the quick look missed offload sections the full parse finds: {:?}",
            quick.map(|f| f.is_some())
        );
    }
});
