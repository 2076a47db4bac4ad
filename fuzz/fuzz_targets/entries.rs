//! Offload entry tables, both layouts.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::entries::{EntryKind, EntryTable};
use offload_loader::target::OffloadKind;

fuzz_target!(|data: &[u8]| {
    if let Ok(table) = EntryTable::parse(data) {
        for entry in table.iter().flatten() {
            let _ = EntryKind::of(&entry, &OffloadKind::OpenMp);
            let _ = EntryKind::of(&entry, &OffloadKind::Hip);
        }
    }
});
