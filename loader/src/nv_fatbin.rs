//! NVIDIA fat binaries (`0xBA55ED50`, sections `.nv_fatbin` / `__nv_relfatbin`).
//!
//! NVIDIA does not document the format; the layout here is the one
//! reverse-engineered by cuobjdump users and ZLUDA (`zluda_dump` fat-binary
//! reader), little-endian:
//!
//! - header, 16 bytes: u32 magic, u16 version (1), u16 header size (16),
//!   u64 size of the entries that follow;
//! - entry: u16 kind (1 PTX, 2 ELF), u16 version, u32 header size, u64 padded
//!   payload size, u32 at 16, u32 payload size at 20, u32 at 24, u32 SM at 28
//!   (e.g. 90), u32 at 32, u32 at 36, u64 flags at 40 (0x1 64-bit, 0x2000
//!   compressed, 0x8000 compressed with zstd), ..., u64 uncompressed size at 56
//!   (when compressed). The payload follows the entry header; the next entry
//!   starts after the padded payload.
//!
//! Compressed payloads use NVIDIA's own scheme and are listed, not extracted.

use crate::container::{Code, Content, Image};
use crate::error::{Error, ErrorKind, Result};
use crate::offload_binary::ImageKind;
use crate::read::Bytes;
use crate::target::{ArchVariant, ComputeCapability, NvArch, OffloadKind, Triple};

/// The fat binary magic, read as a little-endian `u32`.
pub const MAGIC: u32 = 0xBA55_ED50;
const HEADER_LEN: u64 = 16;
const MIN_ENTRY_HEADER: u64 = 64;

/// One entry of a fat binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// PTX or a cubin.
    pub kind: ImageKind,
    /// The SM it was built for (e.g. 90).
    pub sm: u32,
    /// Flags (0x1 64-bit, 0x2000/0x8000 compressed).
    pub flags: u64,
    /// Offset of the payload from the fat binary's start.
    pub offset: u64,
    /// Payload size as stored.
    pub size: u64,
    /// Uncompressed size, for compressed payloads.
    pub uncompressed_size: Option<u64>,
}

impl Entry {
    /// Whether the payload is compressed (NVIDIA's scheme: not extracted here).
    pub fn is_compressed(&self) -> bool {
        self.flags & 0xa000 != 0
    }
}

/// A parsed fat binary, borrowing its bytes.
#[derive(Debug, Clone)]
pub struct NvFatbin<'a> {
    data: &'a [u8],
    entries: Vec<Entry>,
}

impl<'a> NvFatbin<'a> {
    /// Parses the fat binary at the start of `data`.
    pub fn parse(data: &'a [u8]) -> Result<NvFatbin<'a>> {
        let b = Bytes(data);
        if b.u32(0, "NVIDIA fat binary magic")? != MAGIC {
            return Err(Error::new(
                0,
                ErrorKind::BadMagic {
                    what: "NVIDIA fat binary",
                },
            ));
        }
        let version = b.u16(4, "NVIDIA fat binary version")?;
        if version != 1 {
            return Err(Error::new(
                4,
                ErrorKind::UnsupportedVersion {
                    what: "NVIDIA fat binary",
                    version: version.into(),
                },
            ));
        }
        let header_len = u64::from(b.u16(6, "NVIDIA fat binary header size")?);
        if header_len < HEADER_LEN {
            return Err(Error::new(
                6,
                ErrorKind::BadValue {
                    what: "NVIDIA fat binary header size",
                    value: header_len,
                },
            ));
        }
        let size = b.u64(8, "NVIDIA fat binary size")?;
        let body = Bytes(
            b.slice(0, header_len.saturating_add(size), "NVIDIA fat binary")
                .map_err(|e| Error::new(8, e.kind))?,
        );
        let mut entries = Vec::new();
        let mut at = header_len;
        // Every entry takes at least MIN_ENTRY_HEADER bytes, so this ends.
        while at < body.len() {
            let kind = match body.u16(at, "fat binary entry kind")? {
                1 => ImageKind::Ptx,
                2 => ImageKind::Cubin,
                k => {
                    return Err(Error::new(
                        at,
                        ErrorKind::BadValue {
                            what: "fat binary entry kind (1 PTX, 2 ELF)",
                            value: k.into(),
                        },
                    ))
                }
            };
            let entry_header = u64::from(body.u32(at + 4, "fat binary entry header size")?);
            if entry_header < MIN_ENTRY_HEADER {
                return Err(Error::new(
                    at + 4,
                    ErrorKind::BadValue {
                        what: "fat binary entry header size",
                        value: entry_header,
                    },
                ));
            }
            let padded = body.u64(at + 8, "fat binary entry padded size")?;
            let payload = u64::from(body.u32(at + 20, "fat binary entry size")?);
            let sm = body.u32(at + 28, "fat binary entry SM")?;
            let flags = body.u64(at + 40, "fat binary entry flags")?;
            let offset = at + entry_header;
            body.slice(offset, padded.max(payload), "fat binary entry payload")
                .map_err(|e| Error::new(at + 8, e.kind))?;
            let mut entry = Entry {
                kind,
                sm,
                flags,
                offset,
                size: payload,
                uncompressed_size: None,
            };
            if entry.is_compressed() {
                entry.uncompressed_size = Some(body.u64(at + 56, "uncompressed size")?);
            }
            entries.push(entry);
            at = offset + padded.max(payload);
        }
        Ok(NvFatbin {
            data: &data[..body.len() as usize],
            entries,
        })
    }

    /// Bytes the fat binary occupies.
    pub fn len(&self) -> u64 {
        self.data.len() as u64
    }

    /// Whether it has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The payload of entry `index`; compressed payloads are an error.
    pub fn payload(&self, index: usize) -> Result<&'a [u8]> {
        let e = self.entries.get(index).ok_or(Error::new(
            0,
            ErrorKind::BadValue {
                what: "fat binary entry index",
                value: index as u64,
            },
        ))?;
        if e.is_compressed() {
            return Err(Error::new(
                e.offset,
                ErrorKind::Malformed {
                    what: "fat binary entry",
                    why: "compressed with NVIDIA's scheme, which is not supported",
                },
            ));
        }
        Bytes(self.data).slice(e.offset, e.size, "fat binary entry payload")
    }

    /// The entries as images (kind `cuda`, triple `nvptx64-nvidia-cuda`).
    pub fn images(&self) -> Vec<Image> {
        self.entries
            .iter()
            .enumerate()
            .map(|(index, e)| {
                let arch = ComputeCapability::from_sm(e.sm).map(|capability| NvArch {
                    capability,
                    variant: ArchVariant::Base,
                });
                let code = if e.kind == ImageKind::Ptx {
                    Code::Ptx
                } else {
                    Code::Cubin
                };
                Image {
                    index,
                    id: crate::container::bundle_style_id(
                        &OffloadKind::Cuda,
                        &Triple::parse("nvptx64-nvidia-cuda"),
                        &arch.map(|a| a.to_string()).unwrap_or_default(),
                    ),
                    offload_kind: OffloadKind::Cuda,
                    triple: Triple::parse("nvptx64-nvidia-cuda"),
                    arch: arch.map_or(crate::target::Arch::None, crate::target::Arch::Nvptx),
                    image_kind: e.kind,
                    offset: e.offset,
                    size: e.size,
                    compressed: e.is_compressed(),
                    content: Some(Content {
                        code,
                        ..Content::default()
                    }),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kind: u16, sm: u32, flags: u64, payload: &[u8]) -> Vec<u8> {
        let padded = payload.len().next_multiple_of(8);
        let mut e = kind.to_le_bytes().to_vec();
        e.extend(0x0101u16.to_le_bytes());
        e.extend(64u32.to_le_bytes());
        e.extend((padded as u64).to_le_bytes());
        e.extend(0u32.to_le_bytes());
        e.extend((payload.len() as u32).to_le_bytes());
        e.extend(0u32.to_le_bytes());
        e.extend(sm.to_le_bytes());
        e.extend([0u8; 8]);
        e.extend(flags.to_le_bytes());
        e.extend([0u8; 8]);
        e.extend(1000u64.to_le_bytes());
        e.extend(payload);
        e.resize(64 + padded, 0);
        e
    }

    fn fatbin(entries: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = entries.concat();
        let mut f = MAGIC.to_le_bytes().to_vec();
        f.extend(1u16.to_le_bytes());
        f.extend(16u16.to_le_bytes());
        f.extend((body.len() as u64).to_le_bytes());
        f.extend(body);
        f
    }

    #[test]
    fn lists_and_extracts() {
        let data = fatbin(&[
            entry(2, 80, 0x1, b"\x7fELFcubin"),
            entry(1, 90, 0x1, b".version 8.0"),
            entry(2, 90, 0x2001, b"lz4data"),
        ]);
        let f = NvFatbin::parse(&data).unwrap();
        assert_eq!(f.len(), data.len() as u64);
        let images = f.images();
        assert_eq!(images[0].id, "cuda-nvptx64-nvidia-cuda--sm_80");
        assert_eq!(f.payload(0).unwrap(), b"\x7fELFcubin");
        assert_eq!(f.payload(1).unwrap(), b".version 8.0");
        assert!(images[2].compressed);
        assert_eq!(f.entries()[2].uncompressed_size, Some(1000));
        assert!(f.payload(2).is_err());
    }

    #[test]
    fn rejects_bad_sizes() {
        let data = fatbin(&[entry(2, 80, 1, b"x")]);
        for cut in 0..data.len() {
            assert!(NvFatbin::parse(&data[..cut]).is_err(), "{cut}");
        }
        let mut small = data.clone();
        small[16 + 4..16 + 8].copy_from_slice(&0u32.to_le_bytes());
        assert!(NvFatbin::parse(&small).is_err());
        let mut huge = data.clone();
        huge[16 + 8..16 + 16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(NvFatbin::parse(&huge).is_err());
    }
}
