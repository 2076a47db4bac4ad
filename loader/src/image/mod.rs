//! The image model every other module speaks: what one GPU image is, as its
//! container describes it ([`Image`]) and as its own first bytes say
//! ([`Content`], [`CodeKind`]).
//!
//! Containers say what their images are built for (a bundle ID, an offload
//! binary's `arch` string, a fat-binary entry's SM); the images say it too, in
//! their own headers. The readers under this module read the image side,
//! cheaply enough to run on every image of a 1.3 GB library:
//!
//! - [`elf`]: the identifying fields of an ELF64 header ([`elf::ElfIdent`]);
//! - [`amdgpu`]: an AMDGPU code object's header → code object version, OS ABI,
//!   processor and target ID ([`amdgpu::AmdgpuCodeObject`]);
//! - [`cubin`]: an NVIDIA cubin's header → `sm_XY[a]` ([`cubin::Cubin`]);
//! - [`ptx`]: PTX text's `.version`, `.target` and `.address_size` ([`ptx::Header`]);
//! - [`globals`]: a device variable's initial value, in a cubin or PTX
//!   (read for a CUDA managed variable, never while listing).
//!
//! Only the ELF header or the first PTX directives are read.

pub mod amdgpu;
pub mod cubin;
pub mod elf;
pub mod globals;
pub mod ptx;

use crate::magic::{self, Magic};
use crate::target::{Arch, OffloadKind, PtxVersion, Triple};

/// The kind of code an image holds: what its container declares
/// ([`Image::declared`]) and what its first bytes are ([`Content::code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CodeKind {
    /// An AMDGPU code object: ELF with `e_machine` = `EM_AMDGPU` (224).
    AmdgpuElf,
    /// An NVIDIA cubin: ELF with `e_machine` = `EM_CUDA` (190).
    Cubin,
    /// Any other ELF (a host object, for instance).
    OtherElf,
    /// PTX text: opens (after comments) with a `.version` directive.
    Ptx,
    /// LLVM bitcode: must be linked and compiled first, cannot be loaded.
    Bitcode,
    /// SPIR-V.
    SpirV,
    /// An NVIDIA fat binary.
    NvFatbin,
    /// Text (assembly, LLVM IR, preprocessed source) from a text offload
    /// bundle: must be compiled first, cannot be loaded.
    Text,
    /// A clang offload bundle, plain or compressed, or an LLVM offload binary:
    /// a container, not code a driver loads.
    Container,
    /// No bytes at all (a bundle's host entry).
    Empty,
    /// None of the above.
    #[default]
    Unknown,
}

impl CodeKind {
    /// The name used in reports: `amdgpu-elf`, `cubin`, `elf`, `ptx`,
    /// `llvm-bitcode`, `spir-v`, `nv-fatbin`, `text`, `container`, `empty`, `unknown`.
    pub fn name(self) -> &'static str {
        match self {
            CodeKind::AmdgpuElf => "amdgpu-elf",
            CodeKind::Cubin => "cubin",
            CodeKind::OtherElf => "elf",
            CodeKind::Ptx => "ptx",
            CodeKind::Bitcode => "llvm-bitcode",
            CodeKind::SpirV => "spir-v",
            CodeKind::NvFatbin => "nv-fatbin",
            CodeKind::Text => "text",
            CodeKind::Container => "container",
            CodeKind::Empty => "empty",
            CodeKind::Unknown => "unknown",
        }
    }

    /// The kind of code `data` holds, from its magic ([`crate::magic`]); for
    /// text, whether it opens like PTX. Reads at most the ELF header or the PTX
    /// header directives (bounded, see [`ptx`]). Never fails.
    pub fn sniff(data: &[u8]) -> CodeKind {
        match magic::sniff(data) {
            _ if data.is_empty() => CodeKind::Empty,
            Some(Magic::Elf) => match elf::machine(data) {
                Some(elf::EM_AMDGPU) => CodeKind::AmdgpuElf,
                Some(elf::EM_CUDA) => CodeKind::Cubin,
                Some(_) => CodeKind::OtherElf,
                None => CodeKind::Unknown,
            },
            Some(Magic::Bitcode) => CodeKind::Bitcode,
            Some(Magic::SpirV) => CodeKind::SpirV,
            Some(Magic::NvFatbin) => CodeKind::NvFatbin,
            Some(Magic::Bundle | Magic::CompressedBundle | Magic::OffloadBinary) => {
                CodeKind::Container
            }
            None if ptx::Header::parse(data).is_ok() => CodeKind::Ptx,
            None => CodeKind::Unknown,
        }
    }

    /// Whether a driver loads this kind as it is (a code object, a cubin, a fat
    /// binary) rather than only after compiling it (PTX) or not at all.
    pub fn is_native(self) -> bool {
        matches!(
            self,
            CodeKind::AmdgpuElf | CodeKind::Cubin | CodeKind::NvFatbin
        )
    }
}

/// What an image's own first bytes say it is: used to name images that carry
/// no ID and to check what a container claims against what the image is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Content {
    /// The code it holds.
    pub code: CodeKind,
    /// The processor its header names, if it names one.
    pub arch: Option<Arch>,
    /// The generic code-object version (AMDGPU code object v6, generic targets).
    pub generic_version: Option<u8>,
    /// The `.version` of PTX text.
    pub ptx_version: Option<PtxVersion>,
}

impl Content {
    /// How much of an image's start [`Content::read_head`] reads: enough
    /// for an ELF header or PTX's header directives ([`ptx::MAX_HEADER`]).
    pub const HEAD_LEN: usize = ptx::MAX_HEADER;

    /// [`Content::read`] of the first [`Content::HEAD_LEN`] bytes of
    /// `image` (one image's bytes), so that a large image is not read
    /// whole.
    pub fn read_head(image: &[u8]) -> Content {
        Content::read(&image[..image.len().min(Self::HEAD_LEN)])
    }

    /// Reads what `data` (one image's bytes) holds and the processor its own
    /// header names: an AMDGPU code object's target ID ([`amdgpu`]), a cubin's
    /// `sm_XY[a]` ([`cubin`]) or PTX's `.target` ([`ptx`]). `arch` is `None`
    /// for other kinds and for headers that name no known processor (code
    /// object v2, an unknown `EF_AMDGPU_MACH`, PTX without an `sm_` target).
    pub fn read(data: &[u8]) -> Content {
        let code = CodeKind::sniff(data);
        let mut content = Content {
            code,
            ..Content::default()
        };
        match code {
            CodeKind::AmdgpuElf => {
                if let Ok(co) = amdgpu::parse_header(data) {
                    content.arch = co.target_id().map(Arch::Amdgpu);
                    content.generic_version = co.generic_version;
                }
            }
            CodeKind::Cubin => {
                content.arch = cubin::parse_header(data).ok().map(|c| Arch::Nvptx(c.arch));
            }
            CodeKind::Ptx => {
                if let Ok(header) = ptx::Header::parse(data) {
                    content.ptx_version = Some(header.version);
                    content.arch = header.target.map(Arch::Nvptx);
                }
            }
            _ => {}
        }
        content
    }
}

/// One image of a container, described without its bytes.
///
/// A plain record: the container walk ([`crate::container`]) fills it from a
/// format's own records, selection ([`crate::select()`]) reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Image {
    /// Position in the container's table.
    pub index: usize,
    /// The bundle entry ID; for other containers, an ID in the same form built
    /// from the image's kind, triple and arch (see [`Image::bundle_style_id`]).
    pub id: String,
    /// The runtime that loads it.
    pub offload_kind: OffloadKind,
    /// Its triple.
    pub triple: Triple,
    /// The processor it claims to be built for.
    pub arch: Arch,
    /// What the container says the image is (bundles say nothing: `None`).
    pub declared: Option<CodeKind>,
    /// Offset from the container's start; for a compressed bundle, from the
    /// start of the uncompressed bundle.
    pub offset: u64,
    /// Size in bytes (uncompressed).
    pub size: u64,
    /// Whether the image sits inside a compressed payload.
    pub compressed: bool,
    /// What the image's own header says it is; `None` when it was not read
    /// (the container walk reads no image bytes).
    pub content: Option<Content>,
}

impl Image {
    /// An image record; `content` starts unread.
    pub(crate) fn new(
        index: usize,
        id: String,
        offload_kind: OffloadKind,
        triple: Triple,
        arch: Arch,
    ) -> Image {
        Image {
            index,
            id,
            offload_kind,
            triple,
            arch,
            declared: None,
            offset: 0,
            size: 0,
            compressed: false,
            content: None,
        }
    }

    /// Whether this is a bundle's host entry (never loaded on a device).
    pub fn is_host(&self) -> bool {
        self.offload_kind == OffloadKind::Host
    }

    /// The kind of code, as well as it is known: the image's own header when it
    /// was read, else what its container declares, else [`CodeKind::Unknown`].
    pub fn code(&self) -> CodeKind {
        match (&self.content, self.declared) {
            (Some(c), _) if c.code != CodeKind::Unknown => c.code,
            (_, Some(d)) => d,
            (Some(c), None) => c.code,
            (None, None) => CodeKind::Unknown,
        }
    }

    /// An ID spelled as clang normalises bundle entry IDs: kind, the triple's
    /// four fields (empty environment kept), target, e.g.
    /// `openmp-amdgcn-amd-amdhsa--gfx90a`. Names images of containers that have
    /// no IDs (clang/lib/Driver/OffloadBundler.cpp `OffloadTargetInfo::str`).
    pub fn bundle_style_id(kind: &OffloadKind, triple: &Triple, target: &str) -> String {
        format!(
            "{kind}-{}-{}-{}-{}-{target}",
            triple.arch, triple.vendor, triple.os, triple.env
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn elf(class: u8, data: u8, machine: u16) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(magic::ELF);
        h[4] = class;
        h[5] = data;
        h[6] = 1;
        let m = if data == 2 {
            machine.to_be_bytes()
        } else {
            machine.to_le_bytes()
        };
        h[18..20].copy_from_slice(&m);
        h
    }

    #[test]
    fn sniffs_every_kind() {
        let cases: &[(&[u8], CodeKind)] = &[
            (&elf(2, 1, 224), CodeKind::AmdgpuElf),
            (&elf(2, 1, 190), CodeKind::Cubin),
            (&elf(2, 1, 62), CodeKind::OtherElf),
            (&elf(1, 2, 8), CodeKind::OtherElf),
            (b"BC\xc0\xde\x35\x14", CodeKind::Bitcode),
            (b"\xde\xc0\x17\x0b\0\0\0\0", CodeKind::Bitcode),
            (b"\x03\x02\x23\x07\0\0\x01\0", CodeKind::SpirV),
            (b"\x07\x23\x02\x03\0\x01\0\0", CodeKind::SpirV),
            (b"__CLANG_OFFLOAD_BUNDLE__\x02", CodeKind::Container),
            (b"CCOB\x03\0\x01\0", CodeKind::Container),
            (b"\x10\xff\x10\xad\x01\0\0\0", CodeKind::Container),
            (b"\x50\xed\x55\xba\x01\0\x10\0", CodeKind::NvFatbin),
            (b"// x\n.version 8.0\n.target sm_90\n", CodeKind::Ptx),
            (b"\x7fELF\x02\x01", CodeKind::Unknown),
            (b"", CodeKind::Empty),
            (b"MZ\x90\0", CodeKind::Unknown),
            (b"version 8.0", CodeKind::Unknown),
        ];
        for (data, want) in cases {
            assert_eq!(CodeKind::sniff(data), *want, "{data:x?}");
        }
    }

    #[test]
    fn content_from_real_headers() {
        let co = Content::read(include_bytes!("../../tests/data/gfx90a_xnack+_v4.ehdr"));
        assert_eq!(co.arch.unwrap().to_string(), "gfx90a:xnack+");
        let generic = Content::read(include_bytes!("../../tests/data/gfx11-generic_v6.ehdr"));
        assert_eq!(generic.code, CodeKind::AmdgpuElf);
        assert_eq!(generic.generic_version, Some(1));
        let ptx = Content::read(include_bytes!("../../tests/data/sm_80.ptx"));
        assert_eq!(ptx.arch.as_ref().unwrap().to_string(), "sm_80");
        assert_eq!(
            (ptx.code, ptx.ptx_version.unwrap().to_string()),
            (CodeKind::Ptx, "7.0".into())
        );
        let mut cubin = elf(2, 1, elf::EM_CUDA);
        cubin[8] = 7;
        cubin[48..52].copy_from_slice(&0x0050_0550u32.to_le_bytes());
        let c = Content::read(&cubin);
        assert_eq!(
            (c.code, c.arch.unwrap().to_string()),
            (CodeKind::Cubin, "sm_80".into())
        );
        assert_eq!(Content::read(b"").code, CodeKind::Empty);
        assert_eq!(Content::read(b"BC\xc0\xde").code, CodeKind::Bitcode);
        let host = Content::read(&elf(2, 1, 62));
        assert_eq!((host.code, host.arch), (CodeKind::OtherElf, None));
        assert_eq!(Content::read(b"\x10\xff\x10\xad").code, CodeKind::Container);
    }

    #[test]
    fn never_panics_on_prefixes_and_noise() {
        let co = include_bytes!("../../tests/data/gfx9-4-generic_xnack-_v6.ehdr");
        for cut in 0..=co.len() {
            let _ = Content::read(&co[..cut]);
        }
        let mut x = 0x1234_5678u32;
        for len in 0..300 {
            let noise: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            let _ = Content::read(&noise);
        }
    }
}
