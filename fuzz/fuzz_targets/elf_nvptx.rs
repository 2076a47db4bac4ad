//! NVIDIA cubin ELF headers (→ sm_XY[a], both e_flags layouts) and the image
//! sniffers built on them.
//!
//! Invariants: the arch is what `arch_from_flags` decodes, never a
//! family-specific one, and displays as an arch that parses back; the
//! sniffers agree with the parser.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::image::cubin;
use offload_loader::target::{Arch, ArchVariant, NvArch};
use offload_loader::{CodeKind, Content};

fuzz_target!(|data: &[u8]| {
    let format = CodeKind::sniff(data);
    let sniffed = Content::read(data);
    let Ok(header) = cubin::parse_header(data) else { return };
    let cubin = header;
    assert_eq!(cubin::arch_from_flags(cubin.abi_version, cubin.flags).unwrap(), cubin.arch);
    assert_ne!(cubin.arch.variant, ArchVariant::FamilySpecific);
    assert_eq!(NvArch::parse(&cubin.arch.to_string()).unwrap(), cubin.arch);
    assert_eq!(format, CodeKind::Cubin);
    assert_eq!(sniffed.code, CodeKind::Cubin);
    assert_eq!(sniffed.arch, Some(Arch::Nvptx(cubin.arch)));
});
