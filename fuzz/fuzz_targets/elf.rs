//! AMDGPU and cubin ELF headers, PTX text, and the content sniff.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::elf::{amdgpu::CodeObject, content, nvptx::Cubin, ptx::Header};

fuzz_target!(|data: &[u8]| {
    let _ = CodeObject::parse(data);
    let _ = Cubin::parse(data);
    let _ = Header::parse(data);
    let _ = content(data);
});
