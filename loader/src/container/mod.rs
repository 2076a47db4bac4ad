//! One offload section's bytes → the containers in it → a uniform list of images.
//!
//! A section such as `.hip_fatbin` or `.llvm.offloading` holds containers back
//! to back (one per translation unit or per image): clang offload bundles,
//! compressed bundles, offload binaries, NVIDIA fat binaries. [`scan`] walks them
//! by reading headers only: after a container it jumps to the container's end and
//! looks for the next magic across the padding, so cost grows with the number of
//! containers, not with the size of their images. Code objects are read, and
//! compressed bundles inflated, only when [`Container::image_bytes`] asks.
//!
//! Each format's reader returns its own records; `images` turns them into
//! [`Image`]s. A [`Container`] is an [`ImageSource`]: selection reads the
//! header of the image it is about to choose through it.

mod images;
mod scope;

use std::borrow::Cow;

use once_cell::race::OnceBox;

pub use images::from_descriptor_image;
pub use scope::Scope;

use crate::bundle::Bundle;
use crate::compressed::CompressedBundle;
use crate::error::{Error, ErrorKind, Result};
use crate::image::{CodeKind, Content, Image};
use crate::limits::Limits;
use crate::magic::{self, Magic};
use crate::nv_fatbin::NvFatbin;
use crate::offload_binary::OffloadBinary;
use crate::read::Bytes;
use crate::select::ImageSource;
use crate::text_bundle;
use crate::text_bundle::TextBundle;

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
    /// The images of an OpenMP `__tgt_bin_desc` in a linked file of the
    /// clang-offload-wrapper generation ([`crate::discover`]).
    Descriptor,
    /// A text offload bundle (`clang -S`, [`crate::text_bundle`]).
    TextBundle,
    /// One image on its own: an AMDGPU code object (`.co`, `.hsaco`), a
    /// cubin or PTX file, named by its own header.
    Image,
}

impl Format {
    /// The name used in reports: `bundle`, `compressed-bundle`, `offload-binary`,
    /// `nv-fatbin`, `object-bundle`, `descriptor`, `text-bundle`, `image`.
    pub fn name(self) -> &'static str {
        match self {
            Format::Bundle => "bundle",
            Format::CompressedBundle => "compressed-bundle",
            Format::OffloadBinary => "offload-binary",
            Format::NvFatbin => "nv-fatbin",
            Format::ObjectBundle => "object-bundle",
            Format::Descriptor => "descriptor",
            Format::TextBundle => "text-bundle",
            Format::Image => "image",
        }
    }

    /// The format whose magic `data` starts with ([`crate::magic`]), or a
    /// text bundle's first line.
    pub fn sniff(data: &[u8]) -> Option<Format> {
        if text_bundle::sniff(data).is_some() {
            return Some(Format::TextBundle);
        }
        match magic::sniff(data)? {
            Magic::Bundle => Some(Format::Bundle),
            Magic::CompressedBundle => Some(Format::CompressedBundle),
            Magic::OffloadBinary => Some(Format::OffloadBinary),
            Magic::NvFatbin => Some(Format::NvFatbin),
            _ => None,
        }
    }
}

/// A container found in a section: its format, where it is, its images, and
/// the way to their bytes.
#[derive(Debug)]
pub struct Container<'a> {
    offset: u64,
    format: Format,
    compression: Option<CompressedBundle<'a>>,
    images: Vec<Image>,
    limits: Limits,
    data: &'a [u8],
    /// A compressed bundle, inflated at first use: published with one
    /// compare-and-swap, never under a lock, so a thread forked away in the
    /// middle of an inflation leaves nothing for the child to wait on.
    inflated: OnceBox<std::result::Result<Vec<u8>, Error>>,
    /// For an NVIDIA fat binary: its entries, and each image's entry index.
    nv: Option<Box<(NvFatbin<'a>, Vec<usize>)>>,
}

// Shared by the runtime's registry across threads.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Container<'static>>();
};

/// The first bytes decompressed to read a compressed bundle's table; doubled
/// until the table fits.
const TABLE_PREFIX: u64 = 16 << 10;

impl<'a> Container<'a> {
    /// Parses the container at the start of `data`, reading only its headers.
    /// Offsets in errors and in the result are relative to `data`. `limits`
    /// bound its table here and its inflation in [`Container::image_bytes`].
    pub fn parse(data: &'a [u8], limits: &Limits) -> Result<Container<'a>> {
        let format = Format::sniff(data).ok_or(Error::new(
            0,
            ErrorKind::BadMagic {
                what: "offload container (bundle, CCOB, offload binary or NVIDIA fat binary)",
            },
        ))?;
        let mut nv = None;
        let (len, compression, images) = match format {
            Format::Bundle => {
                let bundle = Bundle::parse(data, limits)?;
                let images = images::from_bundle(images::bundle_entries(bundle.entries()), false);
                (bundle.len(), None, images)
            }
            Format::CompressedBundle => {
                let ccob = CompressedBundle::parse(data)?;
                let images = compressed_images(&ccob, limits)?;
                (ccob.len(), Some(ccob), images)
            }
            Format::OffloadBinary => {
                let bin = OffloadBinary::parse(data, limits)?;
                (bin.len(), None, images::from_offload_binary(&bin))
            }
            Format::NvFatbin => {
                let fatbin = NvFatbin::parse(data, limits)?;
                let (images, entries) = images::from_nv_fatbin(&fatbin);
                let len = fatbin.len();
                nv = Some(Box::new((fatbin, entries)));
                (len, None, images)
            }
            Format::TextBundle => {
                let text = TextBundle::parse(data, limits)?;
                let entries = text.entries().iter().map(|e| (e.id, e.offset, e.size));
                let mut images = images::from_bundle(entries, false);
                for image in &mut images {
                    image.declared = Some(CodeKind::Text);
                }
                (data.len() as u64, None, images)
            }
            // No magic sniffs as these: they are built from a file's parts.
            Format::ObjectBundle | Format::Descriptor | Format::Image => {
                return Err(Error::new(
                    0,
                    ErrorKind::Malformed {
                        what: format.name(),
                        why: "is made from a file's parts, not parsed from bytes",
                    },
                ))
            }
        };
        Ok(Container {
            offset: 0,
            format,
            compression,
            images,
            limits: *limits,
            data: &data[..len as usize],
            inflated: OnceBox::new(),
            nv,
        })
    }

    /// The container formed by an object's `__CLANG_OFFLOAD_BUNDLE__<id>`
    /// sections: `entries` are (bundle entry ID, file offset, size) within
    /// `file`, the whole file's bytes. Offsets stay file offsets; an entry
    /// outside `file` is an error naming it.
    pub fn from_object_bundle(
        file: &'a [u8],
        entries: &[(&str, u64, u64)],
        limits: &Limits,
    ) -> Result<Container<'a>> {
        for &(_, offset, size) in entries {
            Bytes(file).slice(offset, size, "object bundle entry section")?;
        }
        within_limit("object bundle entry count", entries.len(), limits)?;
        let start = entries.iter().map(|e| e.1).min().unwrap_or(0);
        let end = entries.iter().map(|e| e.1 + e.2).max().unwrap_or(0);
        let images = images::from_bundle(
            entries
                .iter()
                .map(|(id, offset, size)| (*id, *offset - start, *size)),
            false,
        );
        Ok(Container {
            offset: start,
            format: Format::ObjectBundle,
            compression: None,
            images,
            limits: *limits,
            data: &file[start as usize..end as usize],
            inflated: OnceBox::new(),
            nv: None,
        })
    }

    /// The container of the one image that `data` (a whole file: a cubin,
    /// PTX text, an AMDGPU code object) is, named by its own header. PTX
    /// without its terminating NUL gets one in [`Container::image_bytes`]
    /// (the CUDA driver needs it).
    pub fn from_image(data: &'a [u8], limits: &Limits) -> Result<Container<'a>> {
        let image = images::from_raw_image(data);
        if image.arch == crate::target::Arch::None {
            return Err(Error::new(
                0,
                ErrorKind::Malformed {
                    what: "image file",
                    why: "its header names no GPU architecture",
                },
            ));
        }
        Ok(Container {
            offset: 0,
            format: Format::Image,
            compression: None,
            images: vec![image],
            limits: *limits,
            data,
            inflated: OnceBox::new(),
            nv: None,
        })
    }

    /// The images of an OpenMP binary descriptor: `images` are (file offset,
    /// size, AOMP target ID) of each `__tgt_device_image` within `file`, the
    /// whole file's bytes; each is named by its own header or offload binary
    /// ([`from_descriptor_image`]). Offsets stay file offsets; an image
    /// outside `file` is an error.
    pub fn from_descriptor(
        file: &'a [u8],
        images: &[(u64, u64, Option<String>)],
        limits: &Limits,
    ) -> Result<Container<'a>> {
        within_limit("descriptor image count", images.len(), limits)?;
        let mut slices = Vec::with_capacity(images.len());
        for &(offset, size, _) in images {
            slices.push(Bytes(file).slice(offset, size, "descriptor device image")?);
        }
        let start = images.iter().map(|e| e.0).min().unwrap_or(0);
        let end = images.iter().map(|e| e.0 + e.1).max().unwrap_or(0);
        let images = images
            .iter()
            .zip(slices)
            .enumerate()
            .map(|(index, ((offset, _, name), bytes))| {
                let mut image = from_descriptor_image(index, bytes, name.as_deref());
                image.offset += offset - start;
                image
            })
            .collect();
        Ok(Container {
            offset: start,
            format: Format::Descriptor,
            compression: None,
            images,
            limits: *limits,
            data: &file[start as usize..end as usize],
            inflated: OnceBox::new(),
            nv: None,
        })
    }

    /// Offset of the container from the start of the scanned bytes (for
    /// containers from [`crate::MappedFile::containers`], from the file's start).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Moves the container's offset by `by`: its section's offset in the file.
    pub(crate) fn rebase(&mut self, by: u64) {
        self.offset += by;
    }

    /// Its format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Bytes it occupies in the section.
    pub fn len(&self) -> u64 {
        self.data.len() as u64
    }

    /// Whether it occupies no bytes (an object bundle of empty sections).
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// For a compressed bundle: its header.
    pub fn compression(&self) -> Option<&CompressedBundle<'a>> {
        self.compression.as_ref()
    }

    /// Its images, in table order.
    pub fn images(&self) -> &[Image] {
        &self.images
    }

    /// For an NVIDIA fat binary: the entry image `index` comes from (its
    /// compression, flags, group), with offsets from the container's start.
    pub fn nv_entry(&self, index: usize) -> Option<&crate::nv_fatbin::Entry> {
        let (fatbin, entries) = &**self.nv.as_ref()?;
        fatbin.entries().get(*entries.get(index)?)
    }

    /// Whether this is an NVIDIA fat binary without kernels: every entry a
    /// cubin with no code section, as nvlink's device-link stub (`*_dlink`)
    /// that CUDA 13 `nvcc` links into every executable. Such a container
    /// lacking an image for a device is not a device lacking code. Stored
    /// cubins are read in place; a compressed one is inflated only if it
    /// declares at most 64 KiB (a stub is about 1.5 KiB), and the check stops
    /// at the first entry that is not a kernel-less cubin.
    pub fn is_kernel_less(&self) -> bool {
        let Some(nv) = &self.nv else {
            return false;
        };
        let fatbin = &nv.0;
        !fatbin.is_empty()
            && fatbin.entries().iter().enumerate().all(|(i, e)| {
                e.kind == crate::nv_fatbin::kind::ELF
                    && e.group.is_none()
                    && e.exact_size.is_some_and(|n| n <= 64 << 10)
                    && fatbin
                        .code(i, &self.limits)
                        .is_ok_and(|code| crate::image::cubin::has_code(&code) == Some(false))
            })
    }

    /// For an NVIDIA fat binary: the parsed fat binary.
    pub fn nv_fatbin(&self) -> Option<&NvFatbin<'a>> {
        self.nv.as_ref().map(|nv| &nv.0)
    }

    /// The bytes of image `index`: borrowed from the container when stored
    /// plainly; for a compressed bundle, borrowed from the bundle inflated once
    /// (within the [`Limits`] given at parse, hash checked) and kept, so
    /// every image of it is served from one inflation; for an NVIDIA fat
    /// binary, only this entry (or its `--concat` group) is inflated.
    pub fn image_bytes(&self, index: usize) -> Result<Cow<'_, [u8]>> {
        let image = self.image(index)?;
        if let Some(code) = self.nv_code(index) {
            return code;
        }
        if !image.compressed {
            return self.stored(image);
        }
        let ccob = self.ccob(image)?;
        let inflated = self
            .inflated
            .get_or_init(|| Box::new(ccob.decompress(&self.limits)))
            .as_ref()
            .map_err(|e| e.clone().at(self.offset))?;
        Bytes(inflated)
            .slice(image.offset, image.size, "bundle entry code object")
            .map(Cow::Borrowed)
            .map_err(|e| e.inflated().at(self.offset))
    }

    /// The bytes of image `index`, keeping nothing: a compressed bundle is
    /// inflated for this call alone and the rest of it dropped, so writing
    /// out one image of each of many bundles holds one bundle at a time.
    pub fn take_image(&self, index: usize) -> Result<Cow<'a, [u8]>> {
        let image = self.image(index)?;
        if let Some(code) = self.nv_code(index) {
            return code;
        }
        if !image.compressed {
            return self.stored(image);
        }
        let mut inflated = self
            .ccob(image)?
            .decompress(&self.limits)
            .map_err(|e| e.at(self.offset))?;
        Bytes(&inflated)
            .slice(image.offset, image.size, "bundle entry code object")
            .map_err(|e| e.inflated().at(self.offset))?;
        inflated.truncate((image.offset + image.size) as usize);
        inflated.drain(..image.offset as usize);
        Ok(Cow::Owned(inflated))
    }

    fn image(&self, index: usize) -> Result<&Image> {
        self.images.get(index).ok_or(Error::new(
            self.offset,
            ErrorKind::BadValue {
                what: "image index",
                value: index as u64,
            },
        ))
    }

    /// For an NVIDIA fat binary, entry `index`'s code (inflated when compressed).
    fn nv_code(&self, index: usize) -> Option<Result<Cow<'a, [u8]>>> {
        let (fatbin, entries) = &**self.nv.as_ref()?;
        Some(
            fatbin
                .code(entries[index], &self.limits)
                .map_err(|e| e.at(self.offset)),
        )
    }

    /// A plain image's bytes in the container; PTX of a raw file without its
    /// terminating NUL gets one (the CUDA driver needs it).
    fn stored(&self, image: &Image) -> Result<Cow<'a, [u8]>> {
        let bytes = Bytes(self.data)
            .slice(image.offset, image.size, "image")
            .map_err(|e| e.at(self.offset))?;
        if self.format == Format::Image
            && image.declared == Some(CodeKind::Ptx)
            && bytes.last() != Some(&0)
        {
            let mut text = bytes.to_vec();
            text.push(0);
            return Ok(Cow::Owned(text));
        }
        Ok(Cow::Borrowed(bytes))
    }

    /// The compressed bundle a compressed image is in.
    fn ccob(&self, image: &Image) -> Result<&CompressedBundle<'a>> {
        self.compression.as_ref().ok_or_else(|| {
            Error::new(
                image.offset,
                ErrorKind::Malformed {
                    what: "compressed image",
                    why: "its container has no compressed payload",
                },
            )
            .at(self.offset)
        })
    }
}

impl ImageSource for Container<'_> {
    fn images(&self) -> &[Image] {
        &self.images
    }

    /// Reads a plain image's first [`Content::HEAD_LEN`] bytes; an image
    /// inside a compressed payload is left unread rather than inflating it.
    fn read_content(&self, index: usize) -> Option<Content> {
        let image = self.images.get(index)?;
        if image.compressed {
            return None;
        }
        let header_len = image.size.min(Content::HEAD_LEN as u64);
        let bytes = Bytes(self.data)
            .slice(image.offset, header_len, "image")
            .ok()?;
        Some(Content::read(bytes))
    }
}

/// An error when a table built from a file's parts has more entries than
/// [`Limits::max_entries`].
fn within_limit(what: &'static str, count: usize, limits: &Limits) -> Result<()> {
    if count as u64 > limits.max_entries {
        return Err(Error::new(
            0,
            ErrorKind::TooLarge {
                what,
                value: count as u64,
                limit: limits.max_entries,
            },
        ));
    }
    Ok(())
}

/// Lists a compressed bundle by inflating only as much as its table needs.
fn compressed_images(ccob: &CompressedBundle<'_>, limits: &Limits) -> Result<Vec<Image>> {
    if ccob.uncompressed_size > limits.max_uncompressed {
        return ccob.decompress(limits).map(|_| Vec::new());
    }
    let mut want = TABLE_PREFIX.min(ccob.uncompressed_size);
    loop {
        let prefix = ccob.decompress_prefix(want, limits)?;
        match Bundle::parse_table(&prefix, ccob.uncompressed_size, limits) {
            Ok(bundle) => {
                return Ok(images::from_bundle(
                    images::bundle_entries(bundle.entries()),
                    true,
                ))
            }
            Err(e)
                if matches!(
                    e.kind,
                    ErrorKind::Truncated { .. } | ErrorKind::OutOfBounds { .. }
                ) && (prefix.len() as u64) == want
                    && want < ccob.uncompressed_size =>
            {
                want = want.saturating_mul(2).min(ccob.uncompressed_size);
            }
            Err(e) => return Err(e.inflated()),
        }
    }
}

/// Every container in `section`, in order, with offsets relative to `section`.
///
/// A container that fails to parse yields its error, and the scan resumes at
/// the next magic after the bytes the failed parse had read, so one bad
/// container does not hide the others and no byte is parsed twice as the
/// start of a container's table. Zero padding between containers is skipped;
/// other unrecognised bytes are reported once per gap.
pub fn scan<'a>(section: &'a [u8], limits: &Limits) -> Vec<Result<Container<'a>>> {
    scan_around(section, &[], limits)
}

/// [`scan`], passing over `holes` (ranges of `section`, in order, apart,
/// known to read as zeros: a sparse file's holes) instead of reading them.
/// No magic lies across a hole's edge: none holds a zero byte.
pub(crate) fn scan_around<'a>(
    section: &'a [u8],
    holes: &[(usize, usize)],
    limits: &Limits,
) -> Vec<Result<Container<'a>>> {
    // A text bundle is a whole file: it has no magic to resynchronise on.
    if text_bundle::sniff(section).is_some() {
        return vec![Container::parse(section, limits)];
    }
    let mut out = Vec::new();
    let mut pos = 0usize;
    // After a broken container, the bytes up to the next magic are its own,
    // already reported: they are not reported again as unrecognised.
    let mut after_error = false;
    while pos < section.len() {
        let next = next_outside(section, pos, holes);
        let gap = pos..next.unwrap_or(section.len());
        if !after_error && nonzero_outside(section, gap, holes) {
            out.push(Err(unrecognised(pos)));
        }
        let Some(start) = next else { break };
        match Container::parse(&section[start..], limits) {
            Ok(mut c) => {
                c.offset = start as u64;
                pos = start + (c.len() as usize).max(1);
                after_error = false;
                out.push(Ok(c));
            }
            Err(e) => {
                // Resume past what the failed parse looked at (its error's
                // offset), never inside it: a table whose entry IDs are
                // themselves bundle headers would otherwise be re-read once
                // per nested header, quadratic in the section.
                let read = usize::try_from(e.offset).unwrap_or(usize::MAX);
                pos = start.saturating_add(read.max(1)).min(section.len());
                out.push(Err(e.at(start as u64)));
                after_error = true;
            }
        }
    }
    out
}

/// The bytes of `section` from `pos` on that are not in `holes`, as runs.
fn outside<'h>(
    section: &[u8],
    pos: usize,
    holes: &'h [(usize, usize)],
) -> impl Iterator<Item = std::ops::Range<usize>> + 'h {
    let len = section.len();
    let mut at = pos;
    let mut rest = holes.iter();
    std::iter::from_fn(move || {
        while at < len {
            let Some(&(a, b)) = rest.next() else {
                let run = at..len;
                at = len;
                return Some(run);
            };
            if b <= at {
                continue;
            }
            let run = at..a.clamp(at, len);
            at = b.max(at);
            if !run.is_empty() {
                return Some(run);
            }
        }
        None
    })
}

/// [`magic::next_container`] from `pos`, in the bytes outside `holes`.
pub(crate) fn next_outside(section: &[u8], pos: usize, holes: &[(usize, usize)]) -> Option<usize> {
    outside(section, pos, holes)
        .find_map(|run| magic::next_container(&section[..run.end], run.start))
}

/// Whether a byte of `section` in `range` outside `holes` is not zero.
fn nonzero_outside(
    section: &[u8],
    range: std::ops::Range<usize>,
    holes: &[(usize, usize)],
) -> bool {
    outside(&section[..range.end], range.start, holes)
        .any(|run| section[run].iter().any(|&b| b != 0))
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::image::CodeKind;
    use crate::select::{select, DeviceTarget, Policy, Rejection};

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
        let mut out = magic::BUNDLE.to_vec();
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

    /// Bundles and stray bytes among long runs of zeros: the bytes a slimmed
    /// file leaves in place of what it removed.
    pub(crate) fn sparse_section() -> Vec<u8> {
        let a = bundle(&[("hip-amdgcn-amd-amdhsa--gfx1100", elf(0x41))]);
        let b = bundle(&[("hip-amdgcn-amd-amdhsa--gfx90a", elf(0x3f))]);
        let mut section = a;
        section.resize(section.len() + (1 << 20) + 3, 0);
        section.extend(&b);
        section.resize(section.len() + 300_001, 0);
        section.extend(b"stray");
        section.resize(section.len() + 70_000, 0);
        section.extend(&b);
        section.resize(section.len() + 9, 0);
        section
    }

    /// Every run of at least `min` zeros of `bytes`, as `(start, end)`.
    fn zero_runs(bytes: &[u8], min: usize) -> Vec<(usize, usize)> {
        let mut runs = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let len = bytes[at..].iter().take_while(|&&b| b == 0).count();
            if len >= min {
                runs.push((at, at + len));
            }
            at += len.max(1);
        }
        runs
    }

    /// Passing over holes finds what reading them finds: the containers,
    /// and stray bytes between them, wherever the holes start and end
    /// (within a run of zeros, at its edges, at the section's end).
    #[test]
    fn holes_are_passed_over_as_the_zeros_they_read_as() {
        let section = sparse_section();
        let plain = format!("{:?}", scan(&section, &Limits::default()));
        assert_eq!(scan(&section, &Limits::default()).len(), 4, "{plain}");
        for min in [1, 7, 4096, 65_536] {
            let runs = zero_runs(&section, min);
            // Whole runs, and runs with their edges kept as data.
            let inner: Vec<(usize, usize)> = runs
                .iter()
                .filter(|(a, b)| b - a > 2)
                .map(|&(a, b)| (a + 1, b - 1))
                .collect();
            for holes in [runs, inner] {
                let around = scan_around(&section, &holes, &Limits::default());
                assert_eq!(format!("{around:?}"), plain, "{min}: {holes:?}");
            }
        }
    }

    #[test]
    fn errors_inside_inflated_data_name_the_compressed_container() {
        // A bundle whose table promises an entry past the end of its data,
        // compressed, behind 64 bytes of padding in the section.
        let mut raw = bundle(&[("hip-amdgcn-amd-amdhsa--gfx1100", elf(0x41))]);
        raw[32..40].copy_from_slice(&(1u64 << 40).to_le_bytes());
        let ccob = crate::compressed::tests::ccob(3, crate::compressed::Method::Zstd, &raw);
        let mut section = vec![0u8; 64];
        section.extend(&ccob);
        let found = scan(&section, &Limits::default());
        let e = found
            .iter()
            .find_map(|c| c.as_ref().err())
            .expect("an error");
        assert_eq!(e.inflated_from, Some(64));
        assert_eq!(e.container_offset(), 64);
        assert!(
            e.to_string().starts_with(
                "at offset 0x20 of the data inflated from the compressed container at 0x40: "
            ),
            "{e}"
        );
    }

    #[test]
    fn chosen_image_is_checked_against_its_header() {
        // The first gfx90a image is really a gfx906 code object.
        let data = bundle(&[
            ("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-", elf(0x2f)),
            ("hipv4-amdgcn-amd-amdhsa--gfx90a", elf(0x53f)),
        ]);
        let c = Container::parse(&data, &Limits::default()).unwrap();
        let device = DeviceTarget::parse("gfx90a:xnack-").unwrap();
        let s = select(&device, &c, &Policy::default());
        assert_eq!(s.chosen, Some(1));
        assert!(matches!(s.rejected[0].1, Rejection::ClaimMismatch { .. }));
        assert_eq!(
            s.rejected[0].1.to_string(),
            "its header says it is for gfx906, not gfx90a:xnack- as its container claims"
        );
        assert_eq!(c.read_content(1).unwrap().code, CodeKind::AmdgpuElf);
        // The images alone, without their bytes, cannot tell.
        assert_eq!(
            select(&device, c.images(), &Policy::default()).chosen,
            Some(0)
        );
    }

    #[test]
    fn image_bytes_borrow_and_use_the_limits_given_at_parse() {
        let data = bundle(&[("hip-amdgcn-amd-amdhsa--gfx1100", elf(0x41))]);
        let c = Container::parse(&data, &Limits::default()).unwrap();
        let bytes = c.image_bytes(0).unwrap();
        assert!(matches!(bytes, Cow::Borrowed(_)));
        assert_eq!(&bytes[..], &elf(0x41)[..]);
        assert!(c.image_bytes(1).is_err());

        let ccob = crate::compressed::tests::ccob(3, crate::compressed::Method::Zstd, &data);
        let tight = Limits {
            max_uncompressed: data.len() as u64 - 1,
            ..Limits::default()
        };
        assert!(Container::parse(&ccob, &tight).is_err());
        let c = Container::parse(&ccob, &Limits::default()).unwrap();
        assert!(c.images()[0].compressed);
        // take_image inflates for the call alone.
        assert_eq!(&c.take_image(0).unwrap()[..], &elf(0x41)[..]);
        assert!(c.inflated.get().is_none());
        let first = c.image_bytes(0).unwrap();
        assert_eq!(&first[..], &elf(0x41)[..]);
        assert!(matches!(first, Cow::Borrowed(_)));
        assert!(c.inflated.get().is_some());
    }

    #[test]
    fn tables_past_the_entry_limit_are_refused() {
        let entries: Vec<(String, Vec<u8>)> = (0..5)
            .map(|i| (format!("hip-amdgcn-amd-amdhsa--gfx90{i}"), Vec::new()))
            .collect();
        let refs: Vec<(&str, Vec<u8>)> = entries
            .iter()
            .map(|(id, o)| (id.as_str(), o.clone()))
            .collect();
        let data = bundle(&refs);
        let four = Limits {
            max_entries: 4,
            ..Limits::default()
        };
        let e = Container::parse(&data, &four).unwrap_err();
        assert!(
            matches!(e.kind, ErrorKind::TooLarge { limit: 4, .. }),
            "{e}"
        );
        assert_eq!(
            Container::parse(&data, &Limits::default())
                .unwrap()
                .images()
                .len(),
            5
        );
    }

    #[test]
    fn object_bundle_entries_outside_the_file_are_errors() {
        let file = vec![0u8; 100];
        let limits = Limits::default();
        assert!(Container::from_object_bundle(
            &file,
            &[("hip-amdgcn-amd-amdhsa--gfx90a", 90, 20)],
            &limits
        )
        .is_err());
        assert!(Container::from_object_bundle(&file, &[("x", u64::MAX, 2)], &limits).is_err());
        let c = Container::from_object_bundle(
            &file,
            &[("hip-amdgcn-amd-amdhsa--gfx90a", 80, 20)],
            &limits,
        )
        .unwrap();
        assert_eq!((c.offset(), c.len(), c.images()[0].offset), (80, 20, 0));
    }

    #[test]
    fn nested_bundle_headers_are_scanned_in_linear_time() {
        // A fuzzer's find (fuzz/regressions/README.md): bundle headers whose
        // entry IDs are bundle headers, each asking for one entry more than
        // follows. Resuming one byte after each failed parse re-read the same
        // entries once per nested header (K^2/2 reads, 18 s for this 1 MiB);
        // resuming past what the parse read reports a handful of errors.
        let section =
            include_bytes!("../../../fuzz/regressions/container_scan/timeout-nested-bundles");
        let found = scan(section, &Limits::default());
        assert!(found.len() < 8, "{} results", found.len());
        assert!(found.iter().all(|c| c.is_err()));
    }

    #[test]
    fn listing_bombs_are_refused_by_the_default_limits() {
        // A 64 KiB CCOB inflating to a 64 MiB table of empty entries (1 GiB
        // of listing before the entry limit), and an offload binary whose
        // entries share one huge string map.
        let ccob =
            include_bytes!("../../../fuzz/regressions/default-limits/ccob-empty-table-64mib");
        let found = scan(ccob, &Limits::default());
        let e = found[0].as_ref().unwrap_err();
        assert!(matches!(e.kind, ErrorKind::TooLarge { .. }), "{e}");
        let shared =
            include_bytes!("../../../fuzz/regressions/offload_binary/oom-shared-string-map");
        let e = Container::parse(shared, &Limits::default()).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::TooLarge { .. }), "{e}");
    }

    #[test]
    fn fat_binary_images() {
        let data = crate::nv_fatbin::tests::sample();
        let c = Container::parse(&data, &Limits::default()).unwrap();
        let images = c.images();
        assert_eq!(images[0].id, "cuda-nvptx64-nvidia-cuda--sm_80");
        assert_eq!(images[0].declared, Some(CodeKind::Cubin));
        assert_eq!(images[1].declared, Some(CodeKind::Ptx));
        assert_eq!(images[1].arch.to_string(), "sm_90");
        assert!(images[2].compressed);
        assert_eq!(images[2].size, 122);
        assert_eq!(images[2].arch.to_string(), "sm_100");
        assert_eq!(c.image_bytes(0).unwrap().len() as u64, images[0].size);
        assert_eq!(c.image_bytes(2).unwrap().len(), 122);
        assert_eq!(c.nv_entry(2).unwrap().sm, 100);
        // A --concat group is not an image; its members are, with their variant.
        let data = crate::nv_fatbin::tests::concat_group();
        let c = Container::parse(&data, &Limits::default()).unwrap();
        let ids: Vec<String> = c.images().iter().map(|i| i.arch.to_string()).collect();
        assert_eq!(ids, ["sm_80", "sm_90a"]);
        assert_eq!(
            &c.image_bytes(1).unwrap()[..],
            &crate::nv_fatbin::tests::elf122()[..]
        );
        assert!(c.read_content(1).is_none());
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
