//! The ELF compaction of `offload-slim`: any file, its offload containers
//! rewritten keeping the images a mask picks, the file compacted around them.
//!
//! The input's first byte is the keep-mask (bit i of its low seven keeps
//! image i of each container, cycling) and the layout (its top bit: every
//! section in place, as when the verifier refused a compaction); the rest
//! is a file (seeds: small shared objects,
//! executables, objects and archives from clang-22 and nvcc 13; an ld.bfd
//! PIE and an lld shared library whose program header table must grow, each
//! with three bundles). Invariants:
//! never a panic, a loop or an allocation beyond the input; a result is never
//! larger than the input plus one program header and the sections moved
//! out of its way; every result of the in-place layout keeps the file's
//! length; and a result reads
//! back: the same offload sections, each container parses.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::discover::file::containers;
use offload_loader::Limits;

fuzz_target!(|input: &[u8]| {
    let Some((&mask, data)) = input.split_first() else { return };
    let limits = Limits { max_uncompressed: 1 << 20, ..Limits::default() };
    let Ok(sections) = containers(data, &limits) else { return };
    let keep = |_: &_, c: &offload_loader::Container<'_>| {
        Some((0..c.images().len()).map(|i| mask & (1 << (i % 7)) != 0).collect())
    };
    let layout = if mask & 0x80 != 0 {
        offload_slim::Layout::InPlace { why: "fuzzed" }
    } else {
        offload_slim::Layout::Compact
    };
    let slimmed = offload_slim::slim(data, &sections, &keep, &limits, layout);
    let Some(output) = slimmed.output else { return };
    let bytes = output.to_vec();
    assert_eq!(bytes.len() as u64, output.len());
    assert!(bytes.len() <= data.len() + 64 * 1024, "the result grew");
    // A file (not an archive) rewritten in place keeps its length (a
    // compaction may also leave a section with holes in the same pass).
    if layout != offload_slim::Layout::Compact && !data.starts_with(b"!<arch>\n") {
        assert_eq!(bytes.len(), data.len(), "holes changed the length");
    }
    let again = containers(&bytes, &limits).expect("the result reads back");
    assert_eq!(
        again.iter().map(|s| &s.section.name).collect::<Vec<_>>(),
        sections.iter().map(|s| &s.section.name).collect::<Vec<_>>()
    );
});
