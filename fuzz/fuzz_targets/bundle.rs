//! Clang offload bundles: the table, every code object, and the entry IDs.
//!
//! Invariants: a parsed bundle's length and every code object lie within the
//! input; parsing only the table from a cut-off prefix never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::bundle::{Bundle, BundleId};
use offload_loader::Limits;

fuzz_target!(|data: &[u8]| {
    if let Ok(bundle) = Bundle::parse(data, &Limits::default()) {
        assert!(bundle.len() <= data.len() as u64);
        for entry in bundle.entries() {
            let object = bundle.code_object(entry).expect("entries lie within the input");
            assert_eq!(object.len() as u64, entry.size);
            assert!(entry.offset + entry.size <= bundle.len());
            let _ = BundleId::parse(entry.id);
        }
    }
    // How a compressed bundle is listed: the table from a prefix, ranges
    // checked against the full length. Code objects are not asked for.
    let cut = data.len() / 2;
    if let Ok(table) = Bundle::parse_table(&data[..cut], data.len() as u64, &Limits::default()) {
        assert!(table.len() <= data.len() as u64);
    }
});
