//! Offload entry tables, both layouts: by libomptarget's detection rule and
//! with each layout forced (how file bytes are read, by section name).
//!
//! Invariants: a table holds whole entries and yields exactly `len()` of them,
//! at consecutive offsets; describing an entry for any runtime never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::entries::{EntryKind, EntryTable, Layout};
use offload_loader::target::OffloadKind;

const RUNTIMES: [OffloadKind; 4] =
    [OffloadKind::OpenMp, OffloadKind::Hip, OffloadKind::Cuda, OffloadKind::None];

fn walk(table: &EntryTable<'_>, len: usize) {
    let size = table.layout.entry_size();
    assert_eq!(table.len() as u64 * size, len as u64, "a partial entry was accepted");
    assert_eq!(table.iter().len(), table.len());
    let mut n = 0;
    for (i, entry) in table.iter().enumerate() {
        n += 1;
        let Ok(entry) = entry else { continue };
        assert_eq!(entry.offset, i as u64 * size);
        assert_eq!(entry.layout, table.layout);
        let _ = entry.runtime();
        for runtime in &RUNTIMES {
            let kind = entry.kind(runtime);
            let _ = EntryKind::of(&entry, runtime);
            let description = entry.describe(runtime);
            let _ = description.to_string();
            if let Some(requires) = entry.requires(runtime) {
                assert_eq!(kind, EntryKind::Requires);
                let _ = requires.to_string();
            }
        }
    }
    assert_eq!(n, table.len());
}

fuzz_target!(|data: &[u8]| {
    if let Ok(table) = EntryTable::parse(data) {
        assert_eq!(table.layout, Layout::detect(data));
        walk(&table, data.len());
    }
    for layout in [Layout::Legacy, Layout::V1] {
        if let Ok(table) = EntryTable::parse_with(data, layout) {
            walk(&table, data.len());
        }
    }
});
