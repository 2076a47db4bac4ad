//! Writing compressed bundles (`CCOB` v2 and v3) as
//! `clang-offload-bundler -compress` writes them
//! (clang/lib/Driver/OffloadBundler.cpp, `CompressedOffloadBundle::compress`):
//! the header of the version, the method, the sizes, the first 8 bytes of the
//! bundle's MD5 ([`hash`]), then one zstd frame that records its content size
//! (written with long-distance matching) or one zlib stream. The compressor's
//! output depends on its library's version, so `tests/writers.rs` compares
//! with the bundler's output field by field and by what inflates, not byte
//! for byte.

use std::io::Write;

use super::{hash, Method};
use crate::error::{Error, ErrorKind, Result};
use crate::magic;

/// The zstd level clang-offload-bundler uses when given none: 3, with
/// long-distance matching. (Not LLVM's `zstd::DefaultCompression`, 5: the
/// payloads of clang-19's and clang-22's bundlers are reproduced byte for
/// byte by `zstd -3 --long --no-check` of Debian's libzstd 1.5.4, which
/// they link, and by no other level.) This crate's libzstd (1.5.7) writes
/// other bytes for the same level.
pub const DEFAULT_ZSTD_LEVEL: i32 = 3;
/// The zlib level it uses when given none (LLVM's `zlib::DefaultCompression`).
pub const DEFAULT_ZLIB_LEVEL: u32 = 6;

/// `bundle` compressed with `method` into a `CCOB` of `version` (2 or 3);
/// `level` is the method's level (`None`: the bundler's default). A version
/// 2 header holds 32-bit sizes: a larger bundle is an error.
pub fn compress(
    bundle: &[u8],
    version: u16,
    method: Method,
    level: Option<i32>,
) -> Result<Vec<u8>> {
    let payload = match method {
        Method::Zstd => {
            let mut c = zstd::bulk::Compressor::new(level.unwrap_or(DEFAULT_ZSTD_LEVEL))
                .and_then(|mut c| {
                    c.long_distance_matching(true)?;
                    c.include_contentsize(true)?;
                    c.include_checksum(false)?;
                    Ok(c)
                })
                .map_err(|e| compress_error(method, e))?;
            c.compress(bundle).map_err(|e| compress_error(method, e))?
        }
        Method::Zlib => {
            let level = level.map_or(DEFAULT_ZLIB_LEVEL, |l| l.clamp(0, 9) as u32);
            let mut e =
                flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(level));
            e.write_all(bundle).map_err(|e| compress_error(method, e))?;
            e.finish().map_err(|e| compress_error(method, e))?
        }
    };
    let header_len: u64 = match version {
        2 => 24,
        3 => 32,
        v => {
            return Err(Error::new(
                4,
                ErrorKind::UnsupportedVersion {
                    what: "compressed bundle (writing)",
                    version: v.into(),
                },
            ))
        }
    };
    let total = header_len + payload.len() as u64;
    let size = bundle.len() as u64;
    let mut out = Vec::with_capacity(total as usize);
    out.extend_from_slice(magic::COMPRESSED_BUNDLE);
    out.extend(version.to_le_bytes());
    out.extend((method as u16).to_le_bytes());
    if version == 2 {
        let narrow = |value: u64, what| {
            u32::try_from(value).map_err(|_| {
                Error::new(
                    8,
                    ErrorKind::TooLarge {
                        what,
                        value,
                        limit: u32::MAX.into(),
                    },
                )
            })
        };
        out.extend(narrow(total, "compressed bundle v2 total size")?.to_le_bytes());
        out.extend(narrow(size, "compressed bundle v2 uncompressed size")?.to_le_bytes());
    } else {
        out.extend(total.to_le_bytes());
        out.extend(size.to_le_bytes());
    }
    out.extend(hash(bundle).to_le_bytes());
    out.extend(payload);
    Ok(out)
}

fn compress_error(method: Method, e: std::io::Error) -> Error {
    Error::new(
        0,
        ErrorKind::Compress {
            method: method.name(),
            message: e.to_string(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compressed::CompressedBundle;
    use crate::limits::Limits;

    #[test]
    fn what_it_writes_reads_back() {
        let bundle = b"__CLANG_OFFLOAD_BUNDLE__ and what follows".repeat(50);
        for version in [2, 3] {
            for method in [Method::Zstd, Method::Zlib] {
                let bytes = compress(&bundle, version, method, None).unwrap();
                let c = CompressedBundle::parse(&bytes).unwrap();
                assert_eq!((c.version, c.method), (version, method));
                assert_eq!(c.len(), bytes.len() as u64);
                assert_eq!(c.uncompressed_size, bundle.len() as u64);
                assert_eq!(c.decompress(&Limits::default()).unwrap(), bundle);
            }
        }
        assert!(compress(&bundle, 1, Method::Zstd, None).is_err());
    }
}
