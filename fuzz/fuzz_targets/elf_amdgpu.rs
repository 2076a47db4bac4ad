//! AMDGPU code-object ELF headers (→ code object version, target ID, generic
//! version) and the image sniffers built on them.
//!
//! Invariants: a parsed code object has an ELF header, a
//! version in 2..=6 and a target exactly when `target_status` is `Ok`; the
//! sniffers (`CodeKind::sniff`, `Content::read`) agree with the parser.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::image::{amdgpu, elf::ElfIdent};
use offload_loader::target::Arch;
use offload_loader::{CodeKind, Content};

fuzz_target!(|data: &[u8]| {
    let format = CodeKind::sniff(data);
    let _ = format.name();
    let sniffed = Content::read(data);
    let ident = ElfIdent::parse(data);
    let Ok(co) = amdgpu::parse_header(data) else { return };
    assert!(ident.is_ok(), "a code object has an ELF header");
    assert!((2..=6).contains(&co.version), "code object v{}", co.version);
    assert_eq!(co.target_status().ok(), co.target_id());
    if let Err(why) = co.target_status() {
        let _ = why.to_string();
    }
    assert_eq!(co.processor(), co.target.map(|t| t.processor));
    if co.generic_version.is_some() {
        assert!(co.version == 6 && co.processor().is_some_and(|p| p.is_generic()));
    }
    assert_eq!(format, CodeKind::AmdgpuElf);
    assert_eq!(sniffed.code, CodeKind::AmdgpuElf);
    assert_eq!(sniffed.arch, co.target.map(Arch::Amdgpu));
    assert_eq!(sniffed.generic_version, co.generic_version);
    if let Some(target) = co.target {
        assert_eq!(target.to_string().parse::<offload_loader::target::TargetId>().unwrap(), target);
    }
});
