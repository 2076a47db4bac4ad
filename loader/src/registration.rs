//! Registration structures as they sit in a binary's data or in memory:
//! the HIP/CUDA fat-binary wrapper, OpenMP's `__tgt_bin_desc` and
//! `__tgt_device_image`, and AOMP's `__tgt_image_info` and `.offload_arch_list`.
//! Pointers are read as `u64` values; nothing here dereferences them.

use crate::error::{Error, ErrorKind, Result};
use crate::read::Bytes;

/// `__CudaFatBinaryWrapper` magic of HIP (`.hipFatBinSegment`; clang CGCUDANV.cpp).
pub const HIP_WRAPPER_MAGIC: u32 = 0x4849_5046;
/// `__CudaFatBinaryWrapper` magic of CUDA (`.nvFatBinSegment`).
pub const CUDA_WRAPPER_MAGIC: u32 = 0x4662_43b1;
/// Size of a wrapper on 64-bit targets: u32 magic, u32 version, ptr, ptr.
pub const WRAPPER_SIZE: u64 = 24;

/// A fat-binary wrapper: `{u32 magic, u32 version (1), ptr fatbin, ptr unused}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FatbinWrapper {
    /// Its magic: [`HIP_WRAPPER_MAGIC`] or [`CUDA_WRAPPER_MAGIC`].
    pub magic: u32,
    /// Its version (1).
    pub version: u32,
    /// Address of the fat binary.
    pub fatbin: u64,
}

impl FatbinWrapper {
    /// Parses the wrapper at the start of `data`.
    pub fn parse(data: &[u8]) -> Result<FatbinWrapper> {
        let b = Bytes(data);
        let magic = b.u32(0, "fat binary wrapper magic")?;
        if magic != HIP_WRAPPER_MAGIC && magic != CUDA_WRAPPER_MAGIC {
            return Err(Error::new(
                0,
                ErrorKind::BadMagic {
                    what: "fat binary wrapper",
                },
            ));
        }
        let version = b.u32(4, "fat binary wrapper version")?;
        if version != 1 {
            return Err(Error::new(
                4,
                ErrorKind::UnsupportedVersion {
                    what: "fat binary wrapper",
                    version: version.into(),
                },
            ));
        }
        Ok(FatbinWrapper {
            magic,
            version,
            fatbin: b.u64(8, "fat binary pointer")?,
        })
    }

    /// Every wrapper in a `.hipFatBinSegment`/`.nvFatBinSegment` section (one per
    /// translation unit, 8-byte aligned), with its offset.
    pub fn all(section: &[u8]) -> impl Iterator<Item = (u64, Result<FatbinWrapper>)> + '_ {
        let count = section.len() as u64 / WRAPPER_SIZE;
        (0..count).map(move |i| {
            let at = i * WRAPPER_SIZE;
            (
                at,
                FatbinWrapper::parse(&section[at as usize..]).map_err(|e| e.at(at)),
            )
        })
    }
}

/// A range of addresses `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressRange {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
}

impl AddressRange {
    fn read(b: Bytes<'_>, at: u64, what: &'static str) -> Result<AddressRange> {
        let (start, end) = (b.u64(at, what)?, b.u64(at + 8, what)?);
        if start > end {
            return Err(Error::new(
                at,
                ErrorKind::Malformed {
                    what,
                    why: "range ends before it starts",
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

/// `__tgt_device_image`: image start/end, entries begin/end (32 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceImage {
    /// The image bytes.
    pub image: AddressRange,
    /// Its entry table.
    pub entries: AddressRange,
}

/// Size of a `__tgt_device_image`.
pub const DEVICE_IMAGE_SIZE: u64 = 32;

impl DeviceImage {
    /// Parses one at the start of `data`.
    pub fn parse(data: &[u8]) -> Result<DeviceImage> {
        let b = Bytes(data);
        Ok(DeviceImage {
            image: AddressRange::read(b, 0, "device image range")?,
            entries: AddressRange::read(b, 16, "device image entries")?,
        })
    }
}

/// `__tgt_bin_desc`: i32 image count, pointer to the images, host entries
/// begin/end (32 bytes on 64-bit targets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BinaryDescriptor {
    /// Number of device images.
    pub image_count: u32,
    /// Address of the `__tgt_device_image` array.
    pub images: u64,
    /// The host entry table.
    pub host_entries: AddressRange,
}

/// Size of a `__tgt_bin_desc`.
pub const BINARY_DESCRIPTOR_SIZE: u64 = 32;

impl BinaryDescriptor {
    /// Parses one at the start of `data`; a negative count or one above
    /// `max_images` is an error.
    pub fn parse(data: &[u8], max_images: u32) -> Result<BinaryDescriptor> {
        let b = Bytes(data);
        let count = b.u32(0, "device image count")? as i32;
        if count < 0 || count as u32 > max_images {
            return Err(Error::new(
                0,
                ErrorKind::TooLarge {
                    what: "device image count",
                    value: count as i64 as u64,
                    limit: max_images.into(),
                },
            ));
        }
        Ok(BinaryDescriptor {
            image_count: count as u32,
            images: b.u64(8, "device images pointer")?,
            host_entries: AddressRange::read(b, 16, "host entries")?,
        })
    }
}

/// AOMP's `__tgt_image_info`: i32 version, i32 image number, i32 image count,
/// ptr offload arch, ptr compile options (seed 000, clang offload wrapper).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageInfo {
    /// Struct version.
    pub version: i32,
    /// Which image of the descriptor it describes (from 0).
    pub image_number: i32,
    /// How many images the descriptor has.
    pub image_count: i32,
    /// Address of the target-ID string.
    pub offload_arch: u64,
    /// Address of the compile options (reserved).
    pub compile_options: u64,
}

impl ImageInfo {
    /// Parses one at the start of `data`.
    pub fn parse(data: &[u8]) -> Result<ImageInfo> {
        let b = Bytes(data);
        Ok(ImageInfo {
            version: b.u32(0, "image info version")? as i32,
            image_number: b.u32(4, "image number")? as i32,
            image_count: b.u32(8, "image count")? as i32,
            offload_arch: b.u64(16, "offload arch pointer")?,
            compile_options: b.u64(24, "compile options pointer")?,
        })
    }
}

/// The target-ID strings of an `.offload_arch_list` section: NUL-terminated,
/// back to back (padding NULs skipped), each with its offset.
pub fn offload_arch_list(section: &[u8]) -> impl Iterator<Item = (u64, Result<&str>)> + '_ {
    let b = Bytes(section);
    let mut pos = 0u64;
    std::iter::from_fn(move || {
        while section.get(pos as usize) == Some(&0) {
            pos += 1;
        }
        if pos >= b.len() {
            return None;
        }
        let at = pos;
        let s = b.c_str(at, "offload arch");
        pos = match &s {
            Ok(s) => at + s.len() as u64 + 1,
            Err(_) => b.len(),
        };
        Some((at, s))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapper() {
        let mut w = HIP_WRAPPER_MAGIC.to_le_bytes().to_vec();
        w.extend(1u32.to_le_bytes());
        w.extend(0x1234u64.to_le_bytes());
        w.extend(0u64.to_le_bytes());
        assert_eq!(FatbinWrapper::parse(&w).unwrap().fatbin, 0x1234);
        let mut two = w.clone();
        two.extend(&w);
        assert_eq!(
            FatbinWrapper::all(&two).filter(|(_, w)| w.is_ok()).count(),
            2
        );
        w[4] = 2;
        assert!(FatbinWrapper::parse(&w).is_err());
        assert!(FatbinWrapper::parse(&w[..10]).is_err());
        w[0] = 0;
        assert!(FatbinWrapper::parse(&w).is_err());
    }

    #[test]
    fn descriptor_and_images() {
        let mut d = 2u32.to_le_bytes().to_vec();
        d.extend([0; 4]);
        for v in [0x1000u64, 0x2000, 0x2040] {
            d.extend(v.to_le_bytes());
        }
        let desc = BinaryDescriptor::parse(&d, 64).unwrap();
        assert_eq!((desc.image_count, desc.host_entries.len()), (2, 0x40));
        assert!(BinaryDescriptor::parse(&d, 1).is_err());
        d[0..4].copy_from_slice(&(-1i32).to_le_bytes());
        assert!(BinaryDescriptor::parse(&d, 64).is_err());
        let mut img = vec![];
        for v in [0x10u64, 0x8, 0, 0] {
            img.extend(v.to_le_bytes());
        }
        assert!(DeviceImage::parse(&img).is_err());
    }

    #[test]
    fn arch_list() {
        let list: Vec<_> = offload_arch_list(b"gfx90a:xnack+\0\0gfx1100\0\xff\xfe\0")
            .map(|(o, s)| (o, s.map(str::to_owned)))
            .collect();
        assert_eq!(list[0], (0, Ok("gfx90a:xnack+".into())));
        assert_eq!(list[1], (15, Ok("gfx1100".into())));
        assert!(list[2].1.is_err());
        assert_eq!(offload_arch_list(b"").count(), 0);
        assert_eq!(offload_arch_list(b"\0\0\0").count(), 0);
    }
}
