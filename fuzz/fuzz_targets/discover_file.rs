//! Whole files as `discover::file` reads them: ELF64 objects, executables and
//! shared libraries (section headers via the `object` crate), `ar` archives,
//! raw container files, raw cubin / PTX / code-object files; then every offload section the way `MappedFile::
//! containers` and the registration readers take them, with a 1 MiB cap.
//!
//! Invariants: every section found lies within the file; object-file bundle
//! entries give images whose bytes have the stated size.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::{scan, Container, Limits};
use offload_loader::discover::file::{containers, offload_sections};
use offload_loader::discover::{SectionRole, OBJECT_BUNDLE_PREFIX};
use offload_loader::entries::{EntryTable, Layout};
use offload_loader::registration::{offload_arch_list, FatbinWrapper};

fuzz_target!(|data: &[u8]| {
    // Everything a file yields, the clang-14 descriptor search included: every
    // image lies in the file.
    if let Ok(found) = containers(data, &Limits { max_uncompressed: 1 << 20, ..Limits::default() }) {
        for c in found.iter().flat_map(|s| s.containers.iter().flatten()) {
            assert!(c.offset() + c.len() <= data.len() as u64);
            for i in 0..c.images().len() {
                let _ = c.image_bytes(i);
            }
        }
    }
    let Ok(sections) = offload_sections(data) else { return };
    let limits = Limits { max_uncompressed: 1 << 20, ..Limits::default() };
    let mut bundle_entries = Vec::new();
    for s in &sections {
        let end = s.file_offset.checked_add(s.size).expect("section range overflows");
        assert!(end <= data.len() as u64, "section {} lies past the end", s.name);
        let bytes = &data[s.file_offset as usize..end as usize];
        match s.role {
            SectionRole::Containers => {
                for c in scan(bytes, &limits).into_iter().flatten() {
                    let _ = c.is_kernel_less();
                    for i in 0..c.images().len() {
                        let _ = c.image_bytes(i);
                    }
                }
            }
            SectionRole::BundleEntry => {
                let id = s.name.strip_prefix(OBJECT_BUNDLE_PREFIX).expect("named as a bundle entry");
                bundle_entries.push((id, s.file_offset, s.size));
            }
            SectionRole::Image => {
                if let Ok(c) = Container::from_image(bytes, &limits) {
                    assert_eq!(c.images().len(), 1);
                    let code = c.image_bytes(0).expect("a raw image is the whole file");
                    assert!(code.len() as u64 >= c.images()[0].size);
                }
            }
            SectionRole::Embedded => panic!("offload_sections lists offload sections only"),
            SectionRole::Registration => {
                let _ = FatbinWrapper::all(bytes).count();
                let _ = offload_arch_list(bytes).count();
                if let Some(layout) = Layout::of_section(&s.name) {
                    if let Ok(table) = EntryTable::parse_with(bytes, layout) {
                        let _ = table.iter().count();
                    }
                }
            }
        }
    }
    if !bundle_entries.is_empty() {
        let c = Container::from_object_bundle(data, &bundle_entries, &limits)
            .expect("object bundle sections lie in the file");
        for (i, image) in c.images().iter().enumerate() {
            let bytes = c.image_bytes(i).expect("object bundle entries lie in the file");
            assert_eq!(bytes.len() as u64, image.size);
        }
    }
    // Containers found among other bytes lie whole inside their section.
    if let Ok(all) = containers(data, &limits) {
        for s in all.iter().filter(|s| s.section.role == SectionRole::Embedded) {
            assert!(!s.containers.is_empty(), "an embedded section without containers");
            for c in s.containers.iter().flatten() {
                assert!(c.offset() >= s.section.file_offset);
                assert!(c.offset() + c.len() <= s.section.file_offset + s.section.size);
            }
        }
    }
});
