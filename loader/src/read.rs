//! Bounds-checked, alignment-free little-endian reads over a byte slice.
//!
//! Offload sections are often misaligned (`objcopy --add-section` gives align 1),
//! so every field is read byte-wise; no parser casts a pointer into the input.

use crate::error::{Error, ErrorKind, Result};

/// A view of an input buffer with checked reads that fail with an [`Error`]
/// naming the field and its offset.
#[derive(Debug, Clone, Copy)]
pub struct Bytes<'a>(pub &'a [u8]);

impl<'a> Bytes<'a> {
    /// Length of the buffer as a `u64`.
    pub fn len(&self) -> u64 {
        self.0.len() as u64
    }

    /// The `size` bytes at `offset`, or an error if they do not all lie in the buffer
    /// (including when `offset + size` overflows).
    pub fn slice(&self, offset: u64, size: u64, what: &'static str) -> Result<&'a [u8]> {
        let len = self.len();
        match offset.checked_add(size) {
            Some(end) if end <= len => Ok(&self.0[offset as usize..end as usize]),
            _ => Err(Error::new(
                offset.min(len),
                ErrorKind::OutOfBounds {
                    what,
                    start: offset,
                    size,
                    len,
                },
            )),
        }
    }

    /// The `N` bytes at `offset`; a short buffer is reported as truncated.
    pub fn array<const N: usize>(&self, offset: u64, what: &'static str) -> Result<[u8; N]> {
        let start = usize::try_from(offset).ok().filter(|&s| s <= self.0.len());
        match start.and_then(|s| self.0.get(s..s.checked_add(N)?)) {
            Some(b) => {
                let mut out = [0u8; N];
                out.copy_from_slice(b);
                Ok(out)
            }
            None => Err(Error::new(
                offset.min(self.len()),
                ErrorKind::Truncated {
                    what,
                    needed: offset.saturating_add(N as u64),
                    available: self.len(),
                },
            )),
        }
    }

    /// Little-endian `u16` at `offset`.
    pub fn u16(&self, offset: u64, what: &'static str) -> Result<u16> {
        self.array(offset, what).map(u16::from_le_bytes)
    }

    /// Little-endian `u32` at `offset`.
    pub fn u32(&self, offset: u64, what: &'static str) -> Result<u32> {
        self.array(offset, what).map(u32::from_le_bytes)
    }

    /// Little-endian `u64` at `offset`.
    pub fn u64(&self, offset: u64, what: &'static str) -> Result<u64> {
        self.array(offset, what).map(u64::from_le_bytes)
    }

    /// The NUL-terminated string starting at `offset` (without the NUL), as UTF-8.
    pub fn c_str(&self, offset: u64, what: &'static str) -> Result<&'a str> {
        let tail = self.slice(offset, self.len().saturating_sub(offset), what)?;
        let end = tail.iter().position(|&b| b == 0).ok_or(Error::new(
            offset,
            ErrorKind::Malformed {
                what,
                why: "string has no terminating NUL",
            },
        ))?;
        utf8(&tail[..end], offset, what)
    }
}

/// `bytes` as UTF-8, or a [`ErrorKind::NotUtf8`] error at `offset`.
pub fn utf8<'a>(bytes: &'a [u8], offset: u64, what: &'static str) -> Result<&'a str> {
    std::str::from_utf8(bytes)
        .map_err(|e| Error::new(offset + e.valid_up_to() as u64, ErrorKind::NotUtf8 { what }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_bounds_checked_and_unaligned() {
        let b = Bytes(&[1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(b.u64(1, "x").unwrap(), 0x0908_0706_0504_0302);
        assert!(matches!(
            b.u64(2, "x").unwrap_err().kind,
            ErrorKind::Truncated { needed: 10, .. }
        ));
        assert!(b.u16(u64::MAX, "x").is_err());
        assert!(b.slice(u64::MAX, 2, "x").is_err());
        assert_eq!(b.slice(9, 0, "x").unwrap(), &[] as &[u8]);
    }

    #[test]
    fn c_str_needs_nul_and_utf8() {
        let b = Bytes(b"ab\0\xff\0cd");
        assert_eq!(b.c_str(0, "s").unwrap(), "ab");
        assert!(matches!(
            b.c_str(3, "s").unwrap_err().kind,
            ErrorKind::NotUtf8 { .. }
        ));
        assert!(b.c_str(5, "s").is_err());
    }
}
