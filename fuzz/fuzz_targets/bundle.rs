//! Clang offload bundles: the table, every code object, and the entry IDs.
//!
//! Invariants: a parsed bundle's length and every code object lie within the
//! input; parsing only the table from a cut-off prefix never panics; the IDs
//! read in place (`entry_ids`) are the parsed bundle's, and reading them
//! ends on any input.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::bundle::{entry_ids, Bundle, BundleId};
use offload_loader::Limits;

fuzz_target!(|data: &[u8]| {
    let in_place = entry_ids(data, &Limits::default()).map(|ids| ids.collect::<Vec<_>>());
    if let Ok(bundle) = Bundle::parse(data, &Limits::default()) {
        let ids: Vec<&[u8]> = bundle.entries().iter().map(|e| e.id.as_bytes()).collect();
        let in_place = in_place.expect("a bundle's header reads in place");
        assert_eq!(in_place.len(), ids.len());
        for (read, id) in in_place.into_iter().zip(ids) {
            assert_eq!(read.expect("a bundle's IDs read in place"), id);
        }
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
