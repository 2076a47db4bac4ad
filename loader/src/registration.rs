//! Registration structures as they sit in a binary's data sections or in
//! memory: the HIP/CUDA fat-binary wrapper, OpenMP's `__tgt_bin_desc` and
//! `__tgt_device_image`, and AOMP's `__tgt_image_info` and `.offload_arch_list`.
//!
//! Little-endian, 64-bit pointers, read byte-wise. Pointers are returned as `u64`
//! values: this module never follows them, and no count read from the input sizes
//! an allocation.

use std::fmt;

use crate::error::{Error, ErrorKind, Result};
use crate::read::{utf8, Bytes};

/// Wrapper magic of HIP, 0x48495046 (bytes "FPIH"): `HIPFatMagic` in
/// clang/lib/CodeGen/CGCUDANV.cpp and llvm/lib/Frontend/Offloading/OffloadWrapper.cpp,
/// `__hipFatMAGIC2` in ROCm clr.
pub const HIP_WRAPPER_MAGIC: u32 = 0x4849_5046;
/// Wrapper magic of CUDA, 0x466243b1: `CudaFatMagic` in clang, `FATBINC_MAGIC` in
/// CUDA's fatbinary_section.h.
pub const CUDA_WRAPPER_MAGIC: u32 = 0x4662_43b1;
/// Size of a wrapper with 64-bit pointers: u32 magic, u32 version, ptr, ptr.
pub const WRAPPER_SIZE: u64 = 24;
/// Alignment clang gives each wrapper (`createFatbinDesc` in OffloadWrapper.cpp:
/// `Align(8)`; CGCUDANV.cpp: the pointer alignment).
pub const WRAPPER_ALIGN: u64 = 8;

/// Which runtime a fat-binary wrapper is for, by its magic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WrapperKind {
    /// [`HIP_WRAPPER_MAGIC`], section `.hipFatBinSegment`, data in `.hip_fatbin`
    /// (a clang offload bundle).
    Hip,
    /// [`CUDA_WRAPPER_MAGIC`], section `.nvFatBinSegment`, data in `.nv_fatbin`
    /// (an NVIDIA fat binary).
    Cuda,
}

impl fmt::Display for WrapperKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WrapperKind::Hip => "HIP",
            WrapperKind::Cuda => "CUDA",
        })
    }
}

/// A fat-binary wrapper (`__CudaFatBinaryWrapper` / `__fatBinC_Wrapper_t`):
/// `{u32 magic, u32 version, ptr fatbin, ptr aux}`, what `__hipRegisterFatBinary`
/// and `__cudaRegisterFatBinary` receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FatbinWrapper {
    /// The runtime, from the magic.
    pub kind: WrapperKind,
    /// 1; CUDA also has 2 (`FATBINC_LINK_VERSION`, nvcc `-rdc` links).
    pub version: u32,
    /// Address of the fat binary (HIP: an offload bundle; CUDA: a fatbin).
    pub fatbin: u64,
    /// The last pointer: null from clang; for CUDA version 2 the prelinked
    /// fat binaries (`filename_or_fatbins` in fatbinary_section.h).
    pub aux: u64,
}

impl FatbinWrapper {
    /// Parses the wrapper at the start of `data`. The magic must be HIP's or
    /// CUDA's. HIP takes only version 1 (clr's `__hipRegisterFatBinary` rejects
    /// others); CUDA takes 1 (`FATBINC_VERSION`, what clang writes) and 2
    /// (`FATBINC_LINK_VERSION`).
    pub fn parse(data: &[u8]) -> Result<FatbinWrapper> {
        let b = Bytes(data);
        let kind = match b.u32(0, "fat binary wrapper magic")? {
            HIP_WRAPPER_MAGIC => WrapperKind::Hip,
            CUDA_WRAPPER_MAGIC => WrapperKind::Cuda,
            _ => {
                return Err(Error::new(
                    0,
                    ErrorKind::BadMagic {
                        what: "fat binary wrapper",
                    },
                ))
            }
        };
        let version = b.u32(4, "fat binary wrapper version")?;
        let known = match kind {
            WrapperKind::Hip => version == 1,
            WrapperKind::Cuda => version == 1 || version == 2,
        };
        if !known {
            return Err(Error::new(
                4,
                ErrorKind::UnsupportedVersion {
                    what: "fat binary wrapper",
                    version: version.into(),
                },
            ));
        }
        Ok(FatbinWrapper {
            kind,
            version,
            fatbin: b.u64(8, "fat binary pointer")?,
            aux: b.u64(16, "fat binary wrapper reserved pointer")?,
        })
    }

    /// The wrapper's bytes: what [`FatbinWrapper::parse`] reads (64-bit
    /// pointers, little-endian). Behind the `write` feature.
    #[cfg(feature = "write")]
    pub fn to_bytes(&self) -> [u8; WRAPPER_SIZE as usize] {
        let magic = match self.kind {
            WrapperKind::Hip => HIP_WRAPPER_MAGIC,
            WrapperKind::Cuda => CUDA_WRAPPER_MAGIC,
        };
        let mut out = [0u8; WRAPPER_SIZE as usize];
        out[..4].copy_from_slice(&magic.to_le_bytes());
        out[4..8].copy_from_slice(&self.version.to_le_bytes());
        out[8..16].copy_from_slice(&self.fatbin.to_le_bytes());
        out[16..24].copy_from_slice(&self.aux.to_le_bytes());
        out
    }

    /// Every wrapper in a `.hipFatBinSegment` / `.nvFatBinSegment` section (one per
    /// translation unit, 24 bytes at 8-byte alignment, so normally back to back),
    /// with its offset. Zero 8-byte words between wrappers are skipped as padding;
    /// the walk stops after the first error, since the next wrapper's place is then
    /// unknown.
    pub fn all(section: &[u8]) -> Wrappers<'_> {
        Wrappers {
            section,
            pos: 0,
            done: false,
        }
    }
}

/// Iterator over the wrappers of a section, from [`FatbinWrapper::all`]: each
/// item is the wrapper's offset and the wrapper or the error found there.
#[derive(Debug, Clone)]
pub struct Wrappers<'a> {
    section: &'a [u8],
    pos: u64,
    done: bool,
}

impl Iterator for Wrappers<'_> {
    type Item = (u64, Result<FatbinWrapper>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let b = Bytes(self.section);
        // Skip zero padding words; every step moves 8 bytes, so this ends.
        while let Ok(0) = b.u64(self.pos, "padding") {
            self.pos += WRAPPER_ALIGN;
        }
        let tail = usize::try_from(self.pos)
            .ok()
            .and_then(|p| self.section.get(p..))
            .unwrap_or_default();
        if tail.iter().all(|&x| x == 0) {
            self.done = true;
            return None;
        }
        let at = self.pos;
        let item = FatbinWrapper::parse(tail).map_err(|e| e.at(at));
        match item {
            Ok(_) => self.pos += WRAPPER_SIZE,
            Err(_) => self.done = true,
        }
        Some((at, item))
    }
}

impl std::iter::FusedIterator for Wrappers<'_> {}

/// A range of addresses `[start, end)`, checked to have `start <= end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressRange {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
}

impl AddressRange {
    /// Reads two pointers at `at`; a range that ends before it starts is an error
    /// at the start pointer.
    fn read(b: Bytes<'_>, at: u64, what: &'static str) -> Result<AddressRange> {
        let start = b.u64(at, what)?;
        let end = b.u64(at + 8, what)?;
        if start > end {
            return Err(Error::new(
                at,
                ErrorKind::Malformed {
                    what,
                    why: "the range ends before it starts",
                },
            ));
        }
        Ok(AddressRange { start, end })
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }
}

/// Size of a `__tgt_device_image` with 64-bit pointers.
pub const DEVICE_IMAGE_SIZE: u64 = 32;

/// `__tgt_device_image`: ptr image start, ptr image end, ptr entries begin, ptr
/// entries end (seed 000; `getDeviceImageTy` in llvm/lib/Frontend/Offloading/OffloadWrapper.cpp).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceImage {
    /// The image bytes (an ELF, or with the new driver the inner image of an
    /// offload binary).
    pub image: AddressRange,
    /// The entry table the image's symbols are looked up from.
    pub entries: AddressRange,
}

impl DeviceImage {
    /// Parses the image record at the start of `data`; a reversed range is an error.
    pub fn parse(data: &[u8]) -> Result<DeviceImage> {
        let b = Bytes(data);
        Ok(DeviceImage {
            image: AddressRange::read(b, 0, "device image range")?,
            entries: AddressRange::read(b, 16, "device image entry range")?,
        })
    }
}

/// Size of a `__tgt_bin_desc` with 64-bit pointers.
pub const BINARY_DESCRIPTOR_SIZE: u64 = 32;

/// `__tgt_bin_desc`: i32 image count, 4 bytes padding, ptr to the
/// `__tgt_device_image` array, ptr host entries begin, ptr host entries end
/// (seed 000; `getBinDescTy` in OffloadWrapper.cpp), what `__tgt_register_lib` receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BinaryDescriptor {
    /// Number of device images, checked to be in `0..=max_images`.
    pub image_count: u32,
    /// Address of the `__tgt_device_image` array.
    pub images: u64,
    /// The host entry table.
    pub host_entries: AddressRange,
}

impl BinaryDescriptor {
    /// Parses the descriptor at the start of `data`. A negative image count or one
    /// above `max_images` is an error (nothing is sized by it); so is a reversed
    /// host-entry range.
    pub fn parse(data: &[u8], max_images: u32) -> Result<BinaryDescriptor> {
        let b = Bytes(data);
        let count = b.u32(0, "device image count")? as i32;
        if count < 0 {
            return Err(Error::new(
                0,
                ErrorKind::Malformed {
                    what: "device image count",
                    why: "the count is negative",
                },
            ));
        }
        let count = count.unsigned_abs();
        if count > max_images {
            return Err(Error::new(
                0,
                ErrorKind::TooLarge {
                    what: "device image count",
                    value: count.into(),
                    limit: max_images.into(),
                },
            ));
        }
        Ok(BinaryDescriptor {
            image_count: count,
            images: b.u64(8, "device images pointer")?,
            host_entries: AddressRange::read(b, 16, "host entry range")?,
        })
    }

    /// The address range of the `__tgt_device_image` array (`image_count` records
    /// of [`DEVICE_IMAGE_SIZE`] bytes), or an error at the array pointer if it
    /// wraps the address space.
    pub fn image_array(&self) -> Result<AddressRange> {
        let size = u64::from(self.image_count) * DEVICE_IMAGE_SIZE;
        match self.images.checked_add(size) {
            Some(end) => Ok(AddressRange {
                start: self.images,
                end,
            }),
            None => Err(Error::new(
                8,
                ErrorKind::OutOfBounds {
                    what: "device image array",
                    start: self.images,
                    size,
                    len: u64::MAX,
                },
            )),
        }
    }
}

/// Size of an AOMP `__tgt_image_info` with 64-bit pointers.
pub const IMAGE_INFO_SIZE: u64 = 32;

/// AOMP's `__tgt_image_info`: i32 version, i32 image number, i32 number of
/// images, 4 bytes padding, ptr offload arch (a target-ID string), ptr compile
/// options (reserved). AOMP's clang-offload-wrapper emits one per image
/// (`.offload_image_info.N`) and passes it to `__tgt_register_image_info` (seed 000).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageInfo {
    /// Version of the struct.
    pub version: i32,
    /// Which image of the descriptor it describes, from 0.
    pub image_number: i32,
    /// How many images the descriptor has.
    pub image_count: i32,
    /// Address of the NUL-terminated target-ID string.
    pub offload_arch: u64,
    /// Address of the compile options (reserved, usually null).
    pub compile_options: u64,
}

impl ImageInfo {
    /// Parses the record at the start of `data`. The image number must lie in
    /// `0..image_count` (AOMP's runtime indexes an array of `image_count` with it).
    pub fn parse(data: &[u8]) -> Result<ImageInfo> {
        let b = Bytes(data);
        let info = ImageInfo {
            version: b.u32(0, "image info version")? as i32,
            image_number: b.u32(4, "image number")? as i32,
            image_count: b.u32(8, "image count")? as i32,
            offload_arch: b.u64(16, "offload arch pointer")?,
            compile_options: b.u64(24, "compile options pointer")?,
        };
        if info.image_count <= 0 {
            return Err(Error::new(
                8,
                ErrorKind::Malformed {
                    what: "image info image count",
                    why: "the count is not positive",
                },
            ));
        }
        if info.image_number < 0 || info.image_number >= info.image_count {
            return Err(Error::new(
                4,
                ErrorKind::Malformed {
                    what: "image info image number",
                    why: "the number is outside 0..image count",
                },
            ));
        }
        Ok(info)
    }
}

/// The target-ID strings of an AOMP `.offload_arch_list` section (seed 000: an
/// array of NUL-terminated strings, `__offload_arch.N` for image N), each with its
/// offset. Empty strings (NUL padding) are skipped. A string that is not UTF-8 is
/// an error at its first bad byte, and the walk goes on after its NUL; a last
/// string without a NUL is an error that ends the walk.
pub fn offload_arch_list(section: &[u8]) -> ArchList<'_> {
    ArchList { section, pos: 0 }
}

/// Iterator over an `.offload_arch_list` section, from [`offload_arch_list`].
#[derive(Debug, Clone)]
pub struct ArchList<'a> {
    section: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for ArchList<'a> {
    type Item = (u64, Result<&'a str>);

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.section.get(self.pos..)?;
        let skip = rest.iter().position(|&c| c != 0)?;
        let start = self.pos + skip;
        let tail = &self.section[start..];
        let at = start as u64;
        match tail.iter().position(|&c| c == 0) {
            Some(len) => {
                self.pos = start + len + 1;
                Some((at, utf8(&tail[..len], at, "offload arch")))
            }
            None => {
                self.pos = self.section.len();
                Some((
                    at,
                    Err(Error::new(
                        at,
                        ErrorKind::Malformed {
                            what: "offload arch",
                            why: "the string has no terminating NUL",
                        },
                    )),
                ))
            }
        }
    }
}

impl std::iter::FusedIterator for ArchList<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(values: &[u64]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    fn wrapper(magic: u32, version: u32, fatbin: u64) -> Vec<u8> {
        let mut w = magic.to_le_bytes().to_vec();
        w.extend(version.to_le_bytes());
        w.extend(fatbin.to_le_bytes());
        w.extend(0u64.to_le_bytes());
        w
    }

    #[test]
    fn hip_and_cuda_wrappers() {
        let w = FatbinWrapper::parse(&wrapper(HIP_WRAPPER_MAGIC, 1, 0x1234)).unwrap();
        assert_eq!(
            (w.kind, w.version, w.fatbin, w.aux),
            (WrapperKind::Hip, 1, 0x1234, 0)
        );
        assert_eq!(&HIP_WRAPPER_MAGIC.to_le_bytes(), b"FPIH");
        let c = FatbinWrapper::parse(&wrapper(CUDA_WRAPPER_MAGIC, 2, 0x99)).unwrap();
        assert_eq!((c.kind, c.version), (WrapperKind::Cuda, 2));
        assert_eq!(c.kind.to_string(), "CUDA");
    }

    /// Written back, every wrapper the reader takes is the same 24 bytes.
    #[cfg(feature = "write")]
    #[test]
    fn wrappers_write_back_as_read() {
        for (magic, version) in [
            (HIP_WRAPPER_MAGIC, 1),
            (CUDA_WRAPPER_MAGIC, 1),
            (CUDA_WRAPPER_MAGIC, 2),
        ] {
            let mut bytes = wrapper(magic, version, 0x1234_5678_9abc);
            bytes[16..24].copy_from_slice(&0x4242u64.to_le_bytes());
            let w = FatbinWrapper::parse(&bytes).unwrap();
            assert_eq!(w.to_bytes().to_vec(), bytes);
            assert_eq!(FatbinWrapper::parse(&w.to_bytes()).unwrap(), w);
        }
    }

    #[test]
    fn wrapper_errors_name_the_field() {
        let err = FatbinWrapper::parse(&wrapper(HIP_WRAPPER_MAGIC, 2, 0)).unwrap_err();
        assert_eq!(err.offset, 4);
        assert!(matches!(
            err.kind,
            ErrorKind::UnsupportedVersion { version: 2, .. }
        ));
        assert!(FatbinWrapper::parse(&wrapper(CUDA_WRAPPER_MAGIC, 3, 0)).is_err());
        let err = FatbinWrapper::parse(&wrapper(0xdead_beef, 1, 0)).unwrap_err();
        assert_eq!(err.offset, 0);
        assert!(matches!(err.kind, ErrorKind::BadMagic { .. }));
        let err = FatbinWrapper::parse(&wrapper(HIP_WRAPPER_MAGIC, 1, 0)[..20]).unwrap_err();
        assert_eq!(err.offset, 16);
        assert!(matches!(err.kind, ErrorKind::Truncated { .. }));
    }

    #[test]
    fn section_walk_yields_offsets_and_skips_padding() {
        // Three wrappers, the third after one zero padding word, then zero tail.
        let mut s = wrapper(HIP_WRAPPER_MAGIC, 1, 0x1000);
        s.extend(wrapper(HIP_WRAPPER_MAGIC, 1, 0x2000));
        s.extend([0; 8]);
        s.extend(wrapper(HIP_WRAPPER_MAGIC, 1, 0x3000));
        s.extend([0; 4]);
        let found: Vec<(u64, u64)> = FatbinWrapper::all(&s)
            .map(|(at, w)| (at, w.unwrap().fatbin))
            .collect();
        assert_eq!(found, [(0, 0x1000), (24, 0x2000), (56, 0x3000)]);
        assert_eq!(FatbinWrapper::all(&[]).count(), 0);
        assert_eq!(FatbinWrapper::all(&[0; 30]).count(), 0);
    }

    #[test]
    fn section_walk_stops_at_the_first_bad_wrapper() {
        let mut s = wrapper(HIP_WRAPPER_MAGIC, 1, 0x1000);
        s.extend(wrapper(0x1111_1111, 1, 0x2000));
        s.extend(wrapper(HIP_WRAPPER_MAGIC, 1, 0x3000));
        let items: Vec<_> = FatbinWrapper::all(&s).collect();
        assert_eq!(items.len(), 2);
        let err = items[1].1.clone().unwrap_err();
        assert_eq!((items[1].0, err.offset), (24, 24));
        // A truncated last wrapper, misaligned input.
        let mut t = vec![0xff];
        t.extend(wrapper(CUDA_WRAPPER_MAGIC, 1, 0x1000));
        t.extend(&wrapper(CUDA_WRAPPER_MAGIC, 1, 0x2000)[..12]);
        let items: Vec<_> = FatbinWrapper::all(&t[1..]).collect();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].1.clone().unwrap().fatbin, 0x1000);
        assert!(matches!(
            items[1].1.clone().unwrap_err().kind,
            ErrorKind::Truncated { .. }
        ));
    }

    #[test]
    fn device_image_ranges() {
        let img = DeviceImage::parse(&words(&[0x1000, 0x1800, 0x40, 0x80])).unwrap();
        assert_eq!((img.image.len(), img.entries.len()), (0x800, 0x40));
        assert!(!img.image.is_empty());
        let err = DeviceImage::parse(&words(&[0x10, 0x8, 0, 0])).unwrap_err();
        assert_eq!(err.offset, 0);
        let err = DeviceImage::parse(&words(&[0, 0, 0x80, 0x40])).unwrap_err();
        assert_eq!(err.offset, 16);
        assert!(matches!(err.kind, ErrorKind::Malformed { .. }));
        // Misaligned and truncated input.
        let mut shifted = vec![0];
        shifted.extend(words(&[1, 2, 3, 4]));
        assert_eq!(DeviceImage::parse(&shifted[1..]).unwrap().entries.end, 4);
        assert!(matches!(
            DeviceImage::parse(&shifted[1..31]).unwrap_err().kind,
            ErrorKind::Truncated { .. }
        ));
    }

    #[test]
    fn descriptor_counts_are_limited() {
        let mut d = 2u32.to_le_bytes().to_vec();
        d.extend([0; 4]);
        d.extend(words(&[0x1000, 0x2000, 0x2040]));
        let desc = BinaryDescriptor::parse(&d, 64).unwrap();
        assert_eq!(desc.image_count, 2);
        assert_eq!(desc.images, 0x1000);
        assert_eq!(desc.host_entries.len(), 0x40);
        assert_eq!(
            desc.image_array().unwrap(),
            AddressRange {
                start: 0x1000,
                end: 0x1040
            }
        );
        let err = BinaryDescriptor::parse(&d, 1).unwrap_err();
        assert!(matches!(
            err.kind,
            ErrorKind::TooLarge {
                value: 2,
                limit: 1,
                ..
            }
        ));
        let mut neg = d.clone();
        neg[..4].copy_from_slice(&(-1i32).to_le_bytes());
        assert!(matches!(
            BinaryDescriptor::parse(&neg, u32::MAX).unwrap_err().kind,
            ErrorKind::Malformed { .. }
        ));
        let mut rev = d.clone();
        rev[16..24].copy_from_slice(&0x3000u64.to_le_bytes());
        assert_eq!(BinaryDescriptor::parse(&rev, 64).unwrap_err().offset, 16);
        assert!(BinaryDescriptor::parse(&d[..31], 64).is_err());
        let mut wrap = d.clone();
        wrap[8..16].copy_from_slice(&(u64::MAX - 8).to_le_bytes());
        let desc = BinaryDescriptor::parse(&wrap, 64).unwrap();
        assert_eq!(desc.image_array().unwrap_err().offset, 8);
    }

    fn info(version: i32, number: i32, count: i32) -> Vec<u8> {
        let mut i = Vec::new();
        for v in [version, number, count, 0] {
            i.extend(v.to_le_bytes());
        }
        i.extend(words(&[0x4000, 0]));
        i
    }

    #[test]
    fn image_info() {
        let i = ImageInfo::parse(&info(1, 1, 2)).unwrap();
        assert_eq!(
            (i.version, i.image_number, i.image_count, i.offload_arch),
            (1, 1, 2, 0x4000)
        );
        assert_eq!(ImageInfo::parse(&info(1, 2, 2)).unwrap_err().offset, 4);
        assert_eq!(ImageInfo::parse(&info(1, -1, 2)).unwrap_err().offset, 4);
        assert_eq!(ImageInfo::parse(&info(1, 0, 0)).unwrap_err().offset, 8);
        assert!(ImageInfo::parse(&info(1, 0, 1)[..24]).is_err());
    }

    #[test]
    fn arch_list() {
        let s = b"gfx90a:xnack+\0\0gfx1100\0\xff\xfe\0sm_80\0\0\0";
        let list: Vec<(u64, Result<&str>)> = offload_arch_list(s).collect();
        assert_eq!(list.len(), 4);
        assert_eq!(list[0], (0, Ok("gfx90a:xnack+")));
        assert_eq!(list[1], (15, Ok("gfx1100")));
        let err = list[2].1.clone().unwrap_err();
        assert_eq!((list[2].0, err.offset), (23, 23));
        assert!(matches!(err.kind, ErrorKind::NotUtf8 { .. }));
        assert_eq!(list[3], (26, Ok("sm_80")));
        assert_eq!(offload_arch_list(b"").count(), 0);
        assert_eq!(offload_arch_list(b"\0\0\0").count(), 0);
        // Misaligned input, and a last string with no NUL.
        let t = b"xgfx906\0gfx908";
        let list: Vec<_> = offload_arch_list(&t[1..]).collect();
        assert_eq!(list[0], (0, Ok("gfx906")));
        assert_eq!(list[1].0, 7);
        assert!(matches!(
            list[1].1.clone().unwrap_err().kind,
            ErrorKind::Malformed { .. }
        ));
        assert_eq!(list.len(), 2);
        // UTF-8 error offsets point at the bad byte.
        let bad: Vec<_> = offload_arch_list(b"ab\xffc\0").collect();
        assert_eq!(bad[0].1.clone().unwrap_err().offset, 2);
    }
}
