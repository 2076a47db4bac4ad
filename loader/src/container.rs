//! One offload section's bytes → the containers in it → a uniform list of images.
//!
//! A section such as `.hip_fatbin` or `.llvm.offloading` holds containers back
//! to back (one per translation unit or per image): clang offload bundles,
//! compressed bundles, offload binaries, NVIDIA fat binaries. [`scan`] walks them
//! by reading headers only: after a container it jumps to the container's end and
//! looks for the next magic across the padding, so cost grows with the number of
//! containers, not with the size of their images. Code objects are read, and
//! compressed bundles inflated, only when [`Container::image_bytes`] asks.

use std::borrow::Cow;
use std::sync::OnceLock;

use crate::bundle::{Bundle, BundleId};
use crate::compressed::{CompressedBundle, Limits};
use crate::error::{Error, ErrorKind, Result};
use crate::offload_binary::{self, ImageKind, OffloadBinary};
use crate::target::{Arch, OffloadKind, Triple};

/// The kind of container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// A clang offload bundle.
    Bundle,
    /// A `CCOB` compressed bundle.
    CompressedBundle,
    /// An LLVM offload binary.
    OffloadBinary,
    /// An NVIDIA fat binary.
    NvFatbin,
    /// A relocatable object whose `__CLANG_OFFLOAD_BUNDLE__<id>` sections
    /// are the entries of a bundle.
    ObjectBundle,
}

impl Format {
    /// The name used in reports: `bundle`, `compressed-bundle`, `offload-binary`, `nv-fatbin`.
    pub fn name(self) -> &'static str {
        match self {
            Format::Bundle => "bundle",
            Format::CompressedBundle => "compressed-bundle",
            Format::OffloadBinary => "offload-binary",
            Format::NvFatbin => "nv-fatbin",
            Format::ObjectBundle => "object-bundle",
        }
    }

    /// The format whose magic `data` starts with.
    pub fn sniff(data: &[u8]) -> Option<Format> {
        if data.starts_with(crate::bundle::MAGIC) {
            Some(Format::Bundle)
        } else if data.starts_with(crate::compressed::MAGIC) {
            Some(Format::CompressedBundle)
        } else if data.starts_with(offload_binary::MAGIC) {
            Some(Format::OffloadBinary)
        } else if data.starts_with(&crate::nv_fatbin::MAGIC.to_le_bytes()) {
            Some(Format::NvFatbin)
        } else {
            None
        }
    }
}

/// One image of a container, described without its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// Position in the container's table.
    pub index: usize,
    /// The bundle entry ID; for other containers, an ID in the same form built
    /// from the image's kind, triple and arch.
    pub id: String,
    /// The runtime that loads it.
    pub offload_kind: OffloadKind,
    /// Its triple.
    pub triple: Triple,
    /// The processor it claims to be built for.
    pub arch: Arch,
    /// What the container says the image is (bundles say nothing: `None`).
    pub image_kind: ImageKind,
    /// Offset from the container's start; for a compressed bundle, from the
    /// start of the uncompressed bundle.
    pub offset: u64,
    /// Size in bytes (uncompressed).
    pub size: u64,
    /// Whether the image sits inside a compressed payload.
    pub compressed: bool,
    /// What the image's own header says it is; `None` when it was not read
    /// (an image inside a compressed bundle that was not inflated).
    pub content: Option<Content>,
}

/// What an image's own first bytes say it is: used to name images that carry
/// no ID and to check what a container claims against what the image is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Content {
    /// The code it holds.
    pub code: Code,
    /// The processor its header names, if it names one.
    pub arch: Option<Arch>,
    /// The generic code-object version (AMDGPU code object v6, generic targets).
    pub generic_version: Option<u8>,
    /// The `.version` of PTX text.
    pub ptx_version: Option<crate::target::PtxVersion>,
}

/// The kind of code in an image, from its magic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Code {
    /// An AMDGPU code object (ELF, `EM_AMDGPU`).
    AmdgpuElf,
    /// An NVIDIA cubin (ELF, `EM_CUDA`).
    Cubin,
    /// Another ELF (a host object).
    OtherElf,
    /// PTX text.
    Ptx,
    /// LLVM bitcode: must be linked and compiled first, cannot be loaded.
    Bitcode,
    /// SPIR-V.
    SpirV,
    /// An NVIDIA fat binary.
    NvFatbin,
    /// Empty (a host entry).
    Empty,
    /// Anything else.
    #[default]
    Unknown,
}

impl Image {
    /// Whether this is a bundle's host entry (never loaded on a device).
    pub fn is_host(&self) -> bool {
        self.offload_kind == OffloadKind::Host
    }
}

/// A container found in a section.
#[derive(Debug)]
pub struct Container<'a> {
    /// Offset of the container from the start of the scanned bytes.
    pub offset: u64,
    /// Its format.
    pub format: Format,
    /// Bytes it occupies in the section.
    pub len: u64,
    /// For a compressed bundle: its header.
    pub compression: Option<CompressedBundle<'a>>,
    /// Its images, in table order.
    pub images: Vec<Image>,
    data: &'a [u8],
    inflated: OnceLock<std::result::Result<Vec<u8>, Error>>,
}

/// The first bytes decompressed to read a compressed bundle's table; doubled
/// until the table fits.
const TABLE_PREFIX: u64 = 16 << 10;

impl<'a> Container<'a> {
    /// Parses the container at the start of `data`, reading only its headers.
    /// Offsets in errors and in the result are relative to `data`.
    pub fn parse(data: &'a [u8], limits: &Limits) -> Result<Container<'a>> {
        let format = Format::sniff(data).ok_or(Error::new(
            0,
            ErrorKind::BadMagic {
                what: "offload container (bundle, CCOB, offload binary or NVIDIA fat binary)",
            },
        ))?;
        let (len, compression, images) = match format {
            Format::Bundle => {
                let bundle = Bundle::parse(data)?;
                (bundle.len(), None, bundle_images(&bundle, false))
            }
            Format::CompressedBundle => {
                let ccob = CompressedBundle::parse(data)?;
                let images = compressed_images(&ccob, limits)?;
                (ccob.len(), Some(ccob), images)
            }
            Format::OffloadBinary => {
                let bin = OffloadBinary::parse(data)?;
                (bin.len(), None, offload_binary_images(&bin))
            }
            Format::NvFatbin => {
                let fatbin = crate::nv_fatbin::NvFatbin::parse(data)?;
                (fatbin.len(), None, fatbin.images())
            }
            // No magic sniffs as one: object bundles are built from sections.
            Format::ObjectBundle => {
                return Err(Error::new(
                    0,
                    ErrorKind::Malformed {
                        what: "object bundle",
                        why: "is made from an object's sections, not parsed from bytes",
                    },
                ))
            }
        };
        Ok(Container {
            offset: 0,
            format,
            len,
            compression,
            images,
            data: &data[..len as usize],
            inflated: OnceLock::new(),
        })
    }

    /// The container formed by an object's `__CLANG_OFFLOAD_BUNDLE__<id>`
    /// sections: `entries` are (bundle entry ID, file offset, size) within
    /// `file`, the whole file's bytes. Offsets stay file offsets.
    pub fn from_object_bundle(file: &'a [u8], entries: &[(&str, u64, u64)]) -> Container<'a> {
        let start = entries.iter().map(|e| e.1).min().unwrap_or(0);
        let end = entries.iter().map(|e| e.1 + e.2).max().unwrap_or(0);
        let images = bundle_images_from(
            entries
                .iter()
                .map(|(id, offset, size)| (*id, *offset - start, *size)),
            false,
        );
        Container {
            offset: start,
            format: Format::ObjectBundle,
            len: end - start,
            compression: None,
            images,
            data: &file[start as usize..end as usize],
            inflated: OnceLock::new(),
        }
    }

    /// Reads what image `index` really is from its first bytes (its ELF header
    /// or PTX directives) into [`Image::content`]. Plain images only: an image
    /// inside a compressed bundle is left unread rather than inflating the bundle.
    pub fn read_content(&mut self, index: usize) {
        let Some(image) = self.images.get(index) else {
            return;
        };
        if image.content.is_some() || image.compressed {
            return;
        }
        let header_len = image.size.min(64 << 10);
        if let Ok(bytes) = crate::read::Bytes(self.data).slice(image.offset, header_len, "image") {
            self.images[index].content = Some(crate::elf::content(bytes));
        }
    }

    /// Selects the image `device` should run, checking the chosen image's own
    /// header against its container's claim: if the header contradicts it (or
    /// names a generic version this loader cannot run), selection runs again
    /// without it. Only chosen images are read, never the others.
    pub fn select_checked(
        &mut self,
        device: &crate::select::DeviceTarget,
        policy: &crate::select::Policy,
    ) -> crate::select::Selection {
        // NVIDIA code whose container does not say cubin or PTX: whether it
        // runs natively or needs the JIT depends on which, so read it first.
        for i in 0..self.images.len() {
            let image = &self.images[i];
            if image.image_kind == ImageKind::None && matches!(image.arch, Arch::Nvptx(_)) {
                self.read_content(i);
            }
        }
        loop {
            let selection = crate::select::select(device, &self.images, policy);
            match selection.chosen {
                Some(i) if self.images[i].content.is_none() && !self.images[i].compressed => {
                    self.read_content(i)
                }
                _ => return selection,
            }
        }
    }

    /// The container's bytes as stored (compressed for a `CCOB`).
    pub fn raw(&self) -> &'a [u8] {
        self.data
    }

    /// The bytes of image `index`: borrowed when stored plainly; for a
    /// compressed bundle, the whole bundle is inflated (once, hash checked) and
    /// the image copied out of it.
    pub fn image_bytes(&self, index: usize, limits: &Limits) -> Result<Cow<'a, [u8]>> {
        let image = self.images.get(index).ok_or(Error::new(
            self.offset,
            ErrorKind::BadValue {
                what: "image index",
                value: index as u64,
            },
        ))?;
        let at = |e: Error| e.at(self.offset);
        match (self.format, &self.compression) {
            (Format::CompressedBundle, Some(ccob)) => {
                let inflated = self
                    .inflated
                    .get_or_init(|| ccob.decompress(limits))
                    .as_ref()
                    .map_err(|e| at(e.clone()))?;
                let bytes = crate::read::Bytes(inflated)
                    .slice(image.offset, image.size, "bundle entry code object")
                    .map_err(at)?;
                Ok(Cow::Owned(bytes.to_vec()))
            }
            (Format::NvFatbin, _) => crate::nv_fatbin::NvFatbin::parse(self.data)
                .and_then(|f| f.payload(index))
                .map(Cow::Borrowed)
                .map_err(at),
            _ => crate::read::Bytes(self.data)
                .slice(image.offset, image.size, "image")
                .map(Cow::Borrowed)
                .map_err(at),
        }
    }
}

fn bundle_images(bundle: &Bundle<'_>, compressed: bool) -> Vec<Image> {
    bundle_images_from(
        bundle.entries().iter().map(|e| (e.id, e.offset, e.size)),
        compressed,
    )
}

/// Images from (bundle entry ID, offset, size) triples.
fn bundle_images_from<'b>(
    entries: impl Iterator<Item = (&'b str, u64, u64)>,
    compressed: bool,
) -> Vec<Image> {
    entries
        .enumerate()
        .map(|(index, (raw, offset, size))| {
            let id = BundleId::parse(raw);
            Image {
                index,
                id: raw.to_owned(),
                offload_kind: id.kind,
                triple: id.triple,
                arch: id.arch,
                image_kind: ImageKind::None,
                offset,
                size,
                compressed,
                content: None,
            }
        })
        .collect()
}

/// Lists a compressed bundle by inflating only as much as its table needs.
fn compressed_images(ccob: &CompressedBundle<'_>, limits: &Limits) -> Result<Vec<Image>> {
    if ccob.uncompressed_size > limits.max_uncompressed {
        return ccob.decompress(limits).map(|_| Vec::new());
    }
    let mut want = TABLE_PREFIX.min(ccob.uncompressed_size);
    loop {
        let prefix = ccob.decompress_prefix(want)?;
        match Bundle::parse_table(&prefix, ccob.uncompressed_size) {
            Ok(bundle) => return Ok(bundle_images(&bundle, true)),
            Err(e)
                if matches!(
                    e.kind,
                    ErrorKind::Truncated { .. } | ErrorKind::OutOfBounds { .. }
                ) && (prefix.len() as u64) == want
                    && want < ccob.uncompressed_size =>
            {
                want = want.saturating_mul(2).min(ccob.uncompressed_size);
            }
            Err(e) => return Err(e.at(ccob.header_len)),
        }
    }
}

fn offload_binary_images(bin: &OffloadBinary<'_>) -> Vec<Image> {
    bin.entries()
        .iter()
        .enumerate()
        .map(|(index, e)| {
            let triple = e.triple();
            let arch = e.arch();
            let kind = e.offload_kind.clone();
            Image {
                index,
                id: bundle_style_id(&kind, &triple, e.get("arch").unwrap_or_default()),
                offload_kind: kind,
                triple,
                arch,
                image_kind: e.image_kind,
                offset: e.image_offset,
                size: e.image.len() as u64,
                compressed: false,
                content: None,
            }
        })
        .collect()
}

/// An ID spelled as clang normalises bundle entry IDs: kind, the triple's
/// four fields (empty environment kept), target, e.g.
/// `openmp-amdgcn-amd-amdhsa--gfx90a`. Names images of containers that have no IDs.
pub fn bundle_style_id(kind: &OffloadKind, triple: &Triple, target: &str) -> String {
    format!(
        "{kind}-{}-{}-{}-{}-{target}",
        triple.arch, triple.vendor, triple.os, triple.env
    )
}

/// Every container in `section`, in order, with offsets relative to `section`.
///
/// A container that fails to parse yields its error, and the scan resumes at
/// the next magic after it, so one bad container does not hide the others.
/// Zero padding between containers is skipped; other unrecognised bytes are
/// reported once per gap.
pub fn scan<'a>(section: &'a [u8], limits: &Limits) -> Vec<Result<Container<'a>>> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    // After a broken container, the bytes up to the next magic are its own,
    // already reported: they are not reported again as unrecognised.
    let mut after_error = false;
    while pos < section.len() {
        let next = next_container(section, pos);
        let gap = &section[pos..next.unwrap_or(section.len())];
        if !after_error && gap.iter().any(|&b| b != 0) {
            out.push(Err(unrecognised(pos)));
        }
        let Some(start) = next else { break };
        match Container::parse(&section[start..], limits) {
            Ok(mut c) => {
                c.offset = start as u64;
                pos = start + (c.len as usize).max(1);
                after_error = false;
                out.push(Ok(c));
            }
            Err(e) => {
                out.push(Err(e.at(start as u64)));
                pos = start + 1;
                after_error = true;
            }
        }
    }
    out
}

fn unrecognised(at: usize) -> Error {
    Error::new(
        at as u64,
        ErrorKind::Malformed {
            what: "section bytes",
            why: "not an offload container and not zero padding",
        },
    )
}

/// Offset of the first container magic at or after `from`.
fn next_container(data: &[u8], from: usize) -> Option<usize> {
    (from..data.len()).find(|&i| {
        matches!(data[i], b'_' | b'C' | 0x10 | 0x50) && Format::sniff(&data[i..]).is_some()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::select::{DeviceTarget, Policy, Rejection};

    fn elf(flags: u32) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..7].copy_from_slice(b"\x7fELF\x02\x01\x01");
        h[7] = 64;
        h[8] = 4;
        h[18..20].copy_from_slice(&224u16.to_le_bytes());
        h[48..52].copy_from_slice(&flags.to_le_bytes());
        h
    }

    fn bundle(entries: &[(&str, Vec<u8>)]) -> Vec<u8> {
        let mut out = crate::bundle::MAGIC.to_vec();
        out.extend((entries.len() as u64).to_le_bytes());
        let table: usize = entries.iter().map(|(id, _)| 24 + id.len()).sum();
        let mut at = 32 + table;
        for (id, obj) in entries {
            out.extend((at as u64).to_le_bytes());
            out.extend((obj.len() as u64).to_le_bytes());
            out.extend((id.len() as u64).to_le_bytes());
            out.extend(id.as_bytes());
            at += obj.len();
        }
        for (_, obj) in entries {
            out.extend(obj);
        }
        out
    }

    #[test]
    fn chosen_image_is_checked_against_its_header() {
        // The first gfx90a image is really a gfx906 code object.
        let data = bundle(&[
            ("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-", elf(0x2f)),
            ("hipv4-amdgcn-amd-amdhsa--gfx90a", elf(0x53f)),
        ]);
        let mut c = Container::parse(&data, &Limits::default()).unwrap();
        let device = DeviceTarget::parse("gfx90a:xnack-").unwrap();
        let s = c.select_checked(&device, &Policy::default());
        assert_eq!(s.chosen, Some(1));
        assert!(matches!(s.rejected[0].1, Rejection::ClaimMismatch { .. }));
        assert_eq!(
            s.rejected[0].1.to_string(),
            "its header says it is for gfx906, not gfx90a:xnack- as its container claims"
        );
        assert_eq!(c.images[1].content.as_ref().unwrap().code, Code::AmdgpuElf);
    }

    #[test]
    fn scan_walks_padding_and_reports_garbage() {
        let one = bundle(&[("hip-amdgcn-amd-amdhsa--gfx1100", elf(0x41))]);
        let mut section = one.clone();
        section.resize(4096, 0);
        section.extend(&one);
        section.extend(b"garbage!");
        section.resize(8192, 0);
        section.extend(&one);
        let found = scan(&section, &Limits::default());
        let offsets: Vec<Option<u64>> = found
            .iter()
            .map(|c| c.as_ref().ok().map(|c| c.offset))
            .collect();
        assert_eq!(offsets, [Some(0), Some(4096), None, Some(8192)]);
        let e = found[2].as_ref().unwrap_err();
        assert_eq!(e.offset, 4096 + one.len() as u64);
    }
}
