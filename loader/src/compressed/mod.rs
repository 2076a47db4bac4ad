//! Compressed offload bundles (`CCOB`), versions 1, 2 and 3.
//!
//! Header layout (clang/lib/Driver/OffloadBundler.cpp `CompressedOffloadBundle`),
//! little-endian:
//!
//! | offset | v1 (20 bytes) | v2 (24 bytes) | v3 (32 bytes) |
//! |---|---|---|---|
//! | 0 | `CCOB` | `CCOB` | `CCOB` |
//! | 4 | u16 version | u16 version | u16 version |
//! | 6 | u16 method (0 zlib, 1 zstd) | same | same |
//! | 8 | u32 uncompressed size | u32 total size (with header) | u64 total size |
//! | 12 | u64 hash | u32 uncompressed size | |
//! | 16 | | u64 hash | u64 uncompressed size |
//! | 24 | | | u64 hash |
//!
//! The hash is the first 8 bytes of the MD5 of the uncompressed bundle. clang's
//! tools never check it (they print it with `-verbose`); this crate checks it on
//! every full decompression unless [`Limits::verify_hash`] is off. Version 1 has
//! no total size: its payload runs to the next `CCOB` or the end of the input.
//! The decompressed bytes are an ordinary [`crate::bundle::Bundle`].

use std::io::Read;

/// Writing `CCOB`s ([`write::compress()`]): behind the `write` feature.
#[cfg(feature = "write")]
pub mod write;

use md5::{Digest, Md5};

use crate::error::{Error, ErrorKind, Result};
use crate::limits::Limits;
use crate::magic;
use crate::read::Bytes;

/// The compression method of a `CCOB` payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// zlib stream (RFC 1950), method 0.
    Zlib,
    /// zstd frame, method 1 (written with long-distance matching).
    Zstd,
}

impl Method {
    /// The method's name.
    pub fn name(self) -> &'static str {
        match self {
            Method::Zlib => "zlib",
            Method::Zstd => "zstd",
        }
    }
}

/// A parsed `CCOB` header with its payload (zero-copy).
#[derive(Debug, Clone, Copy)]
pub struct CompressedBundle<'a> {
    /// Format version: 1, 2 or 3.
    pub version: u16,
    /// Compression method.
    pub method: Method,
    /// Size of the uncompressed bundle, as the header promises.
    pub uncompressed_size: u64,
    /// First 8 bytes of the MD5 of the uncompressed bundle, as stored.
    pub hash: u64,
    /// Header length: 20, 24 or 32.
    pub header_len: u64,
    /// The compressed payload.
    pub payload: &'a [u8],
}

impl<'a> CompressedBundle<'a> {
    /// Parses the header at the start of `data` and takes the payload it covers.
    pub fn parse(data: &'a [u8]) -> Result<CompressedBundle<'a>> {
        let b = Bytes(data);
        if !data.starts_with(magic::COMPRESSED_BUNDLE) {
            return Err(Error::new(
                0,
                ErrorKind::BadMagic {
                    what: "compressed bundle",
                },
            ));
        }
        let version = b.u16(4, "compressed bundle version")?;
        let method = match b.u16(6, "compressed bundle method")? {
            0 => Method::Zlib,
            1 => Method::Zstd,
            m => {
                return Err(Error::new(
                    6,
                    ErrorKind::BadValue {
                        what: "compressed bundle method",
                        value: m.into(),
                    },
                ))
            }
        };
        let (header_len, total, uncompressed_size, hash) = match version {
            1 => (
                20,
                None,
                b.u32(8, "uncompressed size")?.into(),
                b.u64(12, "hash")?,
            ),
            2 => (
                24,
                Some(u64::from(b.u32(8, "total size")?)),
                b.u32(12, "uncompressed size")?.into(),
                b.u64(16, "hash")?,
            ),
            3 => (
                32,
                Some(b.u64(8, "total size")?),
                b.u64(16, "uncompressed size")?,
                b.u64(24, "hash")?,
            ),
            v => {
                return Err(Error::new(
                    4,
                    ErrorKind::UnsupportedVersion {
                        what: "compressed bundle",
                        version: v.into(),
                    },
                ))
            }
        };
        let total = match total {
            Some(t) if t < header_len => {
                return Err(Error::new(
                    8,
                    ErrorKind::Malformed {
                        what: "compressed bundle total size",
                        why: "smaller than the header",
                    },
                ))
            }
            Some(t) => t,
            // Version 1 states no size: the payload runs to the next `CCOB`
            // or the end of the data, less what follows a zstd frame, which
            // states its own length (a linked `.hip_fatbin` pads each bundle
            // to its alignment with zeros, which are not payload).
            None => {
                let end = next_magic(data, header_len as usize).unwrap_or(data.len());
                let rest = &data[header_len as usize..end];
                let frame = match method {
                    Method::Zstd => zstd::zstd_safe::find_frame_compressed_size(rest).ok(),
                    Method::Zlib => None,
                };
                header_len + frame.map_or(rest.len(), |n| n.min(rest.len())) as u64
            }
        };
        let payload = b
            .slice(header_len, total - header_len, "compressed bundle payload")
            .map_err(|e| Error::new(8, e.kind))?;
        Ok(CompressedBundle {
            version,
            method,
            uncompressed_size,
            hash,
            header_len,
            payload,
        })
    }

    /// Bytes this compressed bundle occupies: header and payload.
    pub fn len(&self) -> u64 {
        self.header_len + self.payload.len() as u64
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.payload.is_empty()
    }

    /// Decompresses the whole bundle, checking the promised size (against the
    /// limit first, then exactly) and, unless disabled, the hash.
    pub fn decompress(&self, limits: &Limits) -> Result<Vec<u8>> {
        if self.uncompressed_size > limits.max_uncompressed {
            return Err(Error::new(
                self.size_field_offset(),
                ErrorKind::TooLarge {
                    what: "compressed bundle uncompressed size",
                    value: self.uncompressed_size,
                    limit: limits.max_uncompressed,
                },
            ));
        }
        let out = match self.decompress_whole(limits)? {
            Some(out) => out,
            None => self.decompress_prefix(self.uncompressed_size + 1, limits)?,
        };
        if out.len() as u64 != self.uncompressed_size {
            return Err(self.decompress_error(format!(
                "produced {} bytes, header promises {}",
                out.len(),
                self.uncompressed_size
            )));
        }
        if limits.verify_hash {
            let actual = hash(&out);
            if actual != self.hash {
                return Err(Error::new(
                    self.header_len - 8,
                    ErrorKind::HashMismatch {
                        expected: self.hash,
                        actual,
                    },
                ));
            }
        }
        Ok(out)
    }

    /// The largest zstd window this bundle's payload may declare: one power
    /// of two beyond its promised uncompressed size, or 2^27 (128 MiB, the
    /// window zstd's own decoder accepts without `--long`) if that is more,
    /// since an encoder that was not told the size declares its level's
    /// window whatever the input (`zstd -19` from a pipe: 8 MiB); never
    /// beyond [`Limits::max_uncompressed`], nor 2^31 (zstd's largest).
    fn window_log(&self, limits: &Limits) -> u32 {
        let log2_ceil = |n: u64| u64::BITS - n.max(1).saturating_sub(1).leading_zeros();
        let wanted = (log2_ceil(self.uncompressed_size) + 1).max(27);
        wanted.min(log2_ceil(limits.max_uncompressed)).clamp(10, 31)
    }

    /// A zstd payload whose frame records the size the header promises is
    /// inflated in one call straight into a buffer of that size (no window
    /// buffer, no regrowth: how clang's own one-shot frames decode fastest).
    /// `None` for other payloads, which stream.
    fn decompress_whole(&self, limits: &Limits) -> Result<Option<Vec<u8>>> {
        if self.method != Method::Zstd
            || !matches!(
                zstd::zstd_safe::get_frame_content_size(self.payload),
                Ok(Some(n)) if n == self.uncompressed_size
            )
        {
            return Ok(None);
        }
        let size = usize::try_from(self.uncompressed_size)
            .map_err(|_| self.decompress_error("larger than memory".into()))?;
        let mut out = Vec::with_capacity(size);
        let inflate = |out: &mut Vec<u8>| -> std::io::Result<usize> {
            let mut d = zstd::bulk::Decompressor::new()?;
            d.window_log_max(self.window_log(limits))?;
            d.decompress_to_buffer(self.payload, out)
        };
        inflate(&mut out).map_err(|e| self.decompress_error(e.to_string()))?;
        Ok(Some(out))
    }

    /// Decompresses at most `max` bytes from the start of the bundle: enough to
    /// read the bundle's table without inflating its code objects. The output
    /// grows as data arrives, so a lying header costs nothing up front; the
    /// zstd window is bounded by `limits` (see `window_log`).
    pub fn decompress_prefix(&self, max: u64, limits: &Limits) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        let result = match self.method {
            Method::Zlib => flate2::read::ZlibDecoder::new(self.payload)
                .take(max)
                .read_to_end(&mut out),
            Method::Zstd => {
                zstd::stream::read::Decoder::with_buffer(self.payload).and_then(|mut d| {
                    // clang compresses with long-distance matching, and
                    // other encoders declare their level's window: the
                    // window may be large, but a hostile frame header would
                    // otherwise reserve zstd's largest (2 GiB) whatever the
                    // CCOB promises.
                    d.window_log_max(self.window_log(limits))?;
                    d.take(max).read_to_end(&mut out)
                })
            }
        };
        result.map_err(|e| self.decompress_error(e.to_string()))?;
        Ok(out)
    }

    fn size_field_offset(&self) -> u64 {
        match self.version {
            1 => 8,
            2 => 12,
            _ => 16,
        }
    }

    fn decompress_error(&self, message: String) -> Error {
        Error::new(
            self.header_len,
            ErrorKind::Decompress {
                method: self.method.name(),
                message,
            },
        )
    }
}

/// The stored hash of `data`: the first 8 bytes of its MD5, read little-endian.
pub fn hash(data: &[u8]) -> u64 {
    let digest = Md5::digest(data);
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(first)
}

/// Offset of the next `CCOB` magic at or after `from`.
fn next_magic(data: &[u8], from: usize) -> Option<usize> {
    data.get(from..)?
        .windows(magic::COMPRESSED_BUNDLE.len())
        .position(|w| w == magic::COMPRESSED_BUNDLE)
        .map(|p| p + from)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Write;

    /// `raw` as a `CCOB` of `version` compressed with `method`.
    pub(crate) fn ccob(version: u16, method: Method, raw: &[u8]) -> Vec<u8> {
        let payload = match method {
            // One-shot, as clang compresses: the frame records its content
            // size and a window no larger than the content.
            Method::Zstd => zstd::bulk::compress(raw, 3).unwrap(),
            Method::Zlib => {
                let mut e = flate2::write::ZlibEncoder::new(Vec::new(), Default::default());
                e.write_all(raw).unwrap();
                e.finish().unwrap()
            }
        };
        let mut out = magic::COMPRESSED_BUNDLE.to_vec();
        out.extend(version.to_le_bytes());
        out.extend((method as u16).to_le_bytes());
        let n = raw.len() as u64;
        match version {
            1 => out.extend((n as u32).to_le_bytes()),
            2 => {
                out.extend(((24 + payload.len()) as u32).to_le_bytes());
                out.extend((n as u32).to_le_bytes());
            }
            _ => {
                out.extend((32 + payload.len() as u64).to_le_bytes());
                out.extend(n.to_le_bytes());
            }
        }
        out.extend(hash(raw).to_le_bytes());
        out.extend(payload);
        out
    }

    #[test]
    fn round_trips_every_version_and_method() {
        let raw: Vec<u8> = (0..10_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        for version in [1, 2, 3] {
            for method in [Method::Zlib, Method::Zstd] {
                let data = ccob(version, method, &raw);
                let c = CompressedBundle::parse(&data).unwrap();
                assert_eq!((c.version, c.method), (version, method));
                assert_eq!(c.len(), data.len() as u64);
                assert_eq!(c.decompress(&Limits::default()).unwrap(), raw);
                assert_eq!(
                    c.decompress_prefix(100, &Limits::default()).unwrap(),
                    &raw[..100]
                );
            }
        }
    }

    #[test]
    fn v1_payload_stops_at_next_magic() {
        let mut data = ccob(1, Method::Zstd, b"first");
        let first_len = data.len();
        data.extend(ccob(1, Method::Zstd, b"second"));
        assert_eq!(
            CompressedBundle::parse(&data).unwrap().len(),
            first_len as u64
        );
    }

    /// A v1 bundle states no size. In a linked `.hip_fatbin` each bundle is
    /// aligned (4096 bytes for clang's) and the gap zero-filled, so the next
    /// magic is not where the payload ends: a zstd frame states its own
    /// length, and the zeros after it are padding, not payload.
    #[test]
    fn v1_zstd_payload_ends_with_its_frame_not_the_padding() {
        let raw = b"first bundle's bytes".repeat(20);
        let mut data = ccob(1, Method::Zstd, &raw);
        let first_len = data.len();
        data.resize(4096, 0);
        data.extend(ccob(1, Method::Zstd, b"second"));
        let c = CompressedBundle::parse(&data).unwrap();
        assert_eq!(c.len(), first_len as u64);
        assert_eq!(c.decompress(&Limits::default()).unwrap(), raw);
        // At the end of a section too.
        let mut alone = ccob(1, Method::Zstd, &raw);
        alone.resize(4096, 0);
        let c = CompressedBundle::parse(&alone).unwrap();
        assert_eq!(c.len(), first_len as u64);
        assert_eq!(c.decompress(&Limits::default()).unwrap(), raw);
    }

    #[test]
    fn a_zstd_window_beyond_the_promised_size_is_refused_not_reserved() {
        // A frame with no content size and window descriptor 0xA8 (2 GiB),
        // in a CCOB that promises one byte: the decoder must refuse it rather
        // than reserve the window.
        let frame = [0x28, 0xb5, 0x2f, 0xfd, 0x00, 0xa8, 0x01, 0x00, 0x00, b'x'];
        let mut data = magic::COMPRESSED_BUNDLE.to_vec();
        data.extend(3u16.to_le_bytes());
        data.extend((Method::Zstd as u16).to_le_bytes());
        data.extend((32 + frame.len() as u64).to_le_bytes());
        data.extend(1u64.to_le_bytes());
        data.extend(0u64.to_le_bytes());
        data.extend(frame);
        let c = CompressedBundle::parse(&data).unwrap();
        let e = c.decompress_prefix(1, &Limits::default()).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Decompress { .. }), "{e}");
    }

    /// What an encoder that was not told the size writes (`zstd -19` from a
    /// pipe, or a streaming encoder): a frame with no content size and its
    /// level's window (8 MiB at level 19) over a small bundle. It inflates.
    #[test]
    fn a_streamed_frame_with_its_levels_window_inflates() {
        let raw = b"a small bundle ".repeat(100);
        let mut e = zstd::stream::write::Encoder::new(Vec::new(), 19).unwrap();
        e.write_all(&raw).unwrap();
        let frame = e.finish().unwrap();
        assert!(matches!(
            zstd::zstd_safe::get_frame_content_size(&frame),
            Ok(None)
        ));
        let mut data = ccob(3, Method::Zstd, &raw);
        data.truncate(32);
        data[8..16].copy_from_slice(&(32 + frame.len() as u64).to_le_bytes());
        data.extend(&frame);
        let c = CompressedBundle::parse(&data).unwrap();
        assert_eq!(c.decompress(&Limits::default()).unwrap(), raw);
        // A limit below the window refuses it, with the decoder's reason.
        let small = Limits {
            max_uncompressed: 1 << 20,
            ..Limits::default()
        };
        assert!(matches!(
            c.decompress(&small).unwrap_err().kind,
            ErrorKind::Decompress { .. }
        ));
    }

    #[test]
    fn rejects_lies_and_bombs() {
        let raw = vec![7u8; 4096];
        let mut data = ccob(3, Method::Zstd, &raw);
        // Hash mismatch, and the opt-out.
        data[24] ^= 1;
        let c = CompressedBundle::parse(&data).unwrap();
        assert!(matches!(
            c.decompress(&Limits::default()).unwrap_err().kind,
            ErrorKind::HashMismatch { .. }
        ));
        let lax = Limits {
            verify_hash: false,
            ..Limits::default()
        };
        assert_eq!(c.decompress(&lax).unwrap(), raw);
        // 1 TiB promised: refused before decompressing.
        data[16..24].copy_from_slice(&(1u64 << 40).to_le_bytes());
        let c = CompressedBundle::parse(&data).unwrap();
        assert!(matches!(
            c.decompress(&Limits::default()).unwrap_err().kind,
            ErrorKind::TooLarge { .. }
        ));
        // Promises less than the payload holds: never inflates past the promise.
        data[16..24].copy_from_slice(&10u64.to_le_bytes());
        let c = CompressedBundle::parse(&data).unwrap();
        assert!(matches!(
            c.decompress(&lax).unwrap_err().kind,
            ErrorKind::Decompress { .. }
        ));
        // Total size past the end, smaller than the header, unknown version/method.
        let mut long = ccob(3, Method::Zstd, &raw);
        long[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(CompressedBundle::parse(&long).is_err());
        long[8..16].copy_from_slice(&3u64.to_le_bytes());
        assert!(CompressedBundle::parse(&long).is_err());
        long[4] = 9;
        assert!(matches!(
            CompressedBundle::parse(&long).unwrap_err().kind,
            ErrorKind::UnsupportedVersion { .. }
        ));
        let mut garbage = ccob(2, Method::Zlib, &raw);
        garbage[30] ^= 0xff;
        let c = CompressedBundle::parse(&garbage).unwrap();
        assert!(c.decompress(&lax).is_err());
        for cut in 0..32 {
            let _ = CompressedBundle::parse(&data[..cut]);
        }
    }
}
