//! Format records → [`Image`]s: the one place where each format's own
//! description of an image (a bundle entry ID, an offload binary's string
//! map, a fat-binary entry's SM and kind, a descriptor image's own header)
//! becomes the uniform model selection reads.

use crate::bundle::{BundleEntry, BundleId};
use crate::image::{CodeKind, Content, Image};
use crate::limits::Limits;
use crate::nv_fatbin::{self, NvFatbin};
use crate::offload_binary::{image_kind, OffloadBinary, OffloadEntry};
use crate::target::{Arch, OffloadKind, PtxVersion, Triple, Vendor};

/// Images from bundle entries: (entry ID, offset, size).
pub(super) fn from_bundle<'b>(
    entries: impl Iterator<Item = (&'b str, u64, u64)>,
    compressed: bool,
) -> Vec<Image> {
    entries
        .enumerate()
        .map(|(index, (raw, offset, size))| {
            let id = BundleId::parse(raw);
            let mut image = Image::new(index, raw.to_owned(), id.kind, id.triple, id.arch);
            image.offset = offset;
            image.size = size;
            image.compressed = compressed;
            image
        })
        .collect()
}

/// The (ID, offset, size) of a bundle's table entries.
pub(super) fn bundle_entries<'b>(
    entries: &'b [BundleEntry<'b>],
) -> impl Iterator<Item = (&'b str, u64, u64)> + 'b {
    entries.iter().map(|e| (e.id, e.offset, e.size))
}

/// The declared kind of an offload binary's image (`IMG_*`), refined by its
/// triple where the format says only "object".
fn declared(kind: u16, triple: &Triple) -> Option<CodeKind> {
    Some(match kind {
        image_kind::NONE => return None,
        image_kind::OBJECT => match triple.gpu_vendor() {
            Some(Vendor::Amd) => CodeKind::AmdgpuElf,
            Some(Vendor::Nvidia) => CodeKind::Cubin,
            None => CodeKind::OtherElf,
        },
        image_kind::BITCODE => CodeKind::Bitcode,
        image_kind::CUBIN => CodeKind::Cubin,
        image_kind::FATBINARY => CodeKind::NvFatbin,
        image_kind::PTX => CodeKind::Ptx,
        image_kind::SPIRV => CodeKind::SpirV,
        _ => CodeKind::Unknown,
    })
}

/// The image an offload binary's entry describes, at `index`; `base` is the
/// binary's offset from the start of what the image offsets are measured from.
fn from_offload_entry(index: usize, entry: &OffloadEntry<'_>, base: u64) -> Image {
    let triple = entry.triple();
    let arch = entry.arch();
    let kind = entry.offload_kind.clone();
    let id = Image::bundle_style_id(&kind, &triple, entry.get("arch").unwrap_or_default());
    let mut image = Image::new(index, id, kind, triple, arch);
    image.declared = declared(entry.image_kind, &image.triple);
    image.offset = base + entry.image_offset;
    image.size = entry.image.len() as u64;
    image
}

/// Images of one offload binary.
pub(super) fn from_offload_binary(bin: &OffloadBinary<'_>) -> Vec<Image> {
    bin.entries()
        .iter()
        .enumerate()
        .map(|(index, e)| from_offload_entry(index, e, 0))
        .collect()
}

/// Images of an NVIDIA fat binary, each with the index of its entry: kind
/// `cuda`, triple `nvptx64-nvidia-cuda`, arch `sm_XY` with the variant the
/// entry flags record (`sm_90a`, `sm_100f`). A `--concat` group is not an
/// image; its members are. The size is the exact size of the code where known
/// (uncompressed; PTX with its NUL), else the padded size (group members).
/// PTX entries carry their PTX ISA version (the entry's code version) as
/// content, so a compressed one need not be inflated to be checked.
pub(super) fn from_nv_fatbin(fatbin: &NvFatbin<'_>) -> (Vec<Image>, Vec<usize>) {
    let triple = Triple::parse("nvptx64-nvidia-cuda");
    fatbin
        .entries()
        .iter()
        .enumerate()
        .filter(|(_, e)| e.kind != nv_fatbin::kind::CONCAT)
        .enumerate()
        .map(|(index, (entry, e))| {
            let arch = e.arch();
            let name = arch.map(|a| a.to_string()).unwrap_or_default();
            let id = Image::bundle_style_id(&OffloadKind::Cuda, &triple, &name);
            let mut image = Image::new(
                index,
                id,
                OffloadKind::Cuda,
                triple.clone(),
                arch.map_or(Arch::None, Arch::Nvptx),
            );
            let declared = match e.kind {
                nv_fatbin::kind::PTX => CodeKind::Ptx,
                nv_fatbin::kind::ELF => CodeKind::Cubin,
                _ => CodeKind::Unknown,
            };
            image.declared = Some(declared);
            if declared == CodeKind::Ptx && (e.is_compressed() || e.group.is_some()) {
                image.content = Some(Content {
                    code: CodeKind::Ptx,
                    arch: arch.map(Arch::Nvptx),
                    generic_version: None,
                    ptx_version: Some(PtxVersion {
                        major: e.code_version.0.min(255) as u8,
                        minor: e.code_version.1.min(255) as u8,
                    }),
                });
            }
            image.offset = e.offset;
            image.size = e.exact_size.unwrap_or(e.stored_size);
            image.compressed = e.is_compressed();
            (image, entry)
        })
        .unzip()
}

/// The one image a raw file is (`nvcc -cubin`, `nvcc -ptx`, a code object),
/// named by its own header: kind `cuda` for NVIDIA code, `hip` for AMDGPU.
pub(super) fn from_raw_image(data: &[u8]) -> Image {
    let mut content = Content::read(data);
    if let Some(Arch::Nvptx(arch)) = &mut content.arch {
        if content.code == CodeKind::Cubin
            && crate::image::cubin::compat_arch_specific(data) == Some(true)
        {
            arch.variant = crate::target::ArchVariant::ArchSpecific;
        }
    }
    let arch = content.arch.clone().unwrap_or(Arch::None);
    let (kind, triple) = match arch.vendor() {
        Some(Vendor::Amd) => (OffloadKind::Hip, "amdgcn-amd-amdhsa"),
        _ => (OffloadKind::Cuda, "nvptx64-nvidia-cuda"),
    };
    let triple = Triple::parse(triple);
    let id = Image::bundle_style_id(&kind, &triple, &arch.to_string());
    let mut image = Image::new(0, id, kind, triple, arch);
    image.declared = Some(content.code);
    image.size = data.len() as u64;
    image.content = Some(content);
    image
}

/// One image of an OpenMP binary descriptor (`__tgt_device_image`): an
/// offload binary whose first entry is the image (clang-linker-wrapper, LLVM
/// 15+), or a bare ELF (clang-offload-wrapper, LLVM ≤ 14 and AOMP) named by its
/// own header or, where AOMP registered one, by its `__tgt_image_info` target ID.
///
/// Returns the image (offset and size of the code inside `data`) and its
/// header's content; the bytes to load are `data[offset..offset + size]`.
pub fn from_descriptor_image(index: usize, data: &[u8], target_id: Option<&str>) -> Image {
    let image = match OffloadBinary::parse(data, &Limits::default()) {
        Ok(bin) if !bin.is_empty() => {
            let mut image = from_offload_entry(index, &bin.entries()[0], 0);
            image.offload_kind = OffloadKind::OpenMp;
            image.id =
                Image::bundle_style_id(&image.offload_kind, &image.triple, &image.arch.to_string());
            image
        }
        _ => {
            let sniffed = Content::read(data).arch;
            let arch = match target_id {
                Some(id) => Arch::parse(sniffed.as_ref().and_then(Arch::vendor), id),
                None => sniffed.unwrap_or(Arch::None),
            };
            let triple = Triple::parse(match arch.vendor() {
                Some(Vendor::Amd) => "amdgcn-amd-amdhsa",
                Some(Vendor::Nvidia) => "nvptx64-nvidia-cuda",
                None => "",
            });
            let id = Image::bundle_style_id(&OffloadKind::OpenMp, &triple, &arch.to_string());
            let mut image = Image::new(index, id, OffloadKind::OpenMp, triple, arch);
            image.declared = None;
            image.size = data.len() as u64;
            image
        }
    };
    let code = data
        .get(image.offset as usize..)
        .and_then(|d| d.get(..image.size as usize))
        .unwrap_or_default();
    Image {
        content: Some(Content::read(code)),
        ..image
    }
}
