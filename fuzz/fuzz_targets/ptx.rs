//! PTX module headers (`.version`, `.target`, `.address_size`, comments, the
//! 64 KiB scan limit) and the image sniffers on text.
//!
//! Invariants: the header ends within the input and the scan limit; text that
//! parses is sniffed as PTX, with the same version and target, and text that
//! sniffs as PTX parses.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::image::ptx;
use offload_loader::target::Arch;
use offload_loader::{CodeKind, Content};

fuzz_target!(|data: &[u8]| {
    let format = CodeKind::sniff(data);
    let header = ptx::Header::parse(data);
    if format == CodeKind::Ptx {
        assert!(header.is_ok(), "sniffed as PTX but does not parse");
    }
    let Ok(header) = header else { return };
    assert!(header.end <= data.len().min(ptx::MAX_HEADER));
    assert!(matches!(header.address_size, None | Some(32) | Some(64)));
    assert_eq!(format, CodeKind::Ptx);
    let sniffed = Content::read(data);
    assert_eq!(sniffed.code, CodeKind::Ptx);
    assert_eq!(sniffed.ptx_version, Some(header.version));
    assert_eq!(sniffed.arch, header.target.map(Arch::Nvptx));
    let _ = header.version.to_string();
});
