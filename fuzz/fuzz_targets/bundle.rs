//! Clang offload bundles: the table, every code object, and the entry IDs.
//!
//! Invariants: a parsed bundle's length and every code object lie within the
//! input; parsing only the table from a cut-off prefix never panics; the IDs
//! read in place (`entry_ids`) are the parsed bundle's, and reading them
//! ends on any input; a pattern of IDs (`IdsPattern`) matches exactly the
//! inputs `entry_ids` reads its IDs from: its own bundle's, and clang's
//! usual list; where the bundle parses, the pattern finds each entry's code
//! object (`IdsPattern::code_object`) as the parsed bundle gives it.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::bundle::{entry_ids, Bundle, BundleId, IdsPattern};
use offload_loader::Limits;

/// The IDs clang 22 writes for `--offload-arch=gfx11-generic`,
/// `gfx1100` and `gfx90a:xnack-`: the list of the seed
/// (`corpus/bundle/plain`), so that its mutations land on both sides of
/// the pattern's answer.
const CLANG: [&[u8]; 4] = [
    b"host-x86_64-unknown-linux-gnu-",
    b"hipv4-amdgcn-amd-amdhsa--gfx11-generic",
    b"hipv4-amdgcn-amd-amdhsa--gfx1100",
    b"hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-",
];

fuzz_target!(|data: &[u8]| {
    let in_place = entry_ids(data, &Limits::default()).map(|ids| ids.collect::<Vec<_>>());
    // The IDs read in place, where all are read: a pattern of them matches.
    let read: Option<Vec<&[u8]>> = in_place
        .as_ref()
        .ok()
        .and_then(|ids| ids.iter().map(|id| id.as_ref().ok().copied()).collect());
    let own = read.as_ref().map(|read| {
        let own = IdsPattern::new(read.iter().copied(), &Limits::default());
        let own = own.expect("IDs a table holds make a pattern");
        assert!(own.matches(data));
        own
    });
    let clang = IdsPattern::new(CLANG, &Limits::default()).expect("four IDs");
    assert_eq!(clang.matches(data), read.as_deref() == Some(&CLANG[..]));
    if let Ok(bundle) = Bundle::parse(data, &Limits::default()) {
        let ids: Vec<&[u8]> = bundle.entries().iter().map(|e| e.id.as_bytes()).collect();
        let in_place = in_place.expect("a bundle's header reads in place");
        assert_eq!(in_place.len(), ids.len());
        for (read, id) in in_place.into_iter().zip(ids) {
            assert_eq!(read.expect("a bundle's IDs read in place"), id);
        }
        assert!(bundle.len() <= data.len() as u64);
        for (i, entry) in bundle.entries().iter().enumerate() {
            let object = bundle.code_object(entry).expect("entries lie within the input");
            assert_eq!(object.len() as u64, entry.size);
            assert!(entry.offset + entry.size <= bundle.len());
            let _ = BundleId::parse(entry.id);
            // Found where the pattern places the record: the same bytes.
            let pattern = own.as_ref().expect("a parsed bundle's IDs read in place");
            assert_eq!(pattern.code_object(data, i), Some(object));
        }
    }
    // How a compressed bundle is listed: the table from a prefix, ranges
    // checked against the full length. Code objects are not asked for.
    let cut = data.len() / 2;
    if let Ok(table) = Bundle::parse_table(&data[..cut], data.len() as u64, &Limits::default()) {
        assert!(table.len() <= data.len() as u64);
    }
});
