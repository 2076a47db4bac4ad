//! Content digests as the OCI image specification writes them
//! (`descriptor.md`, "Digests"): `sha256:` and 64 lowercase hex digits, of
//! a blob's bytes as stored (a layer's compressed stream) or, for a layer's
//! `diff_id`, of its uncompressed tar stream.

use std::io::{self, Read, Write};

use sha2::{Digest as _, Sha256};

/// The one algorithm read and written: the one every registry and runtime
/// supports (the specification's `sha256`; `sha512` is optional).
pub const ALGORITHM: &str = "sha256";

/// `sha256:<hex>` of `bytes`.
pub fn of(bytes: &[u8]) -> String {
    format(Sha256::digest(bytes).as_slice())
}

fn format(hash: &[u8]) -> String {
    let mut s = String::with_capacity(7 + 64);
    s.push_str(ALGORITHM);
    s.push(':');
    for b in hash {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// The hex part of a `sha256:` digest, if it is one (64 lowercase hex
/// digits: a name safe to join to a directory).
pub fn hex(digest: &str) -> Option<&str> {
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))).then_some(hex)
}

/// A writer that hashes and counts what passes through it.
pub struct Hashing<W> {
    inner: W,
    hash: Sha256,
    len: u64,
}

impl<W> Hashing<W> {
    pub fn new(inner: W) -> Self {
        Hashing {
            inner,
            hash: Sha256::new(),
            len: 0,
        }
    }

    /// The writer, the digest and the byte count.
    pub fn finish(self) -> (W, String, u64) {
        (
            self.inner,
            format(self.hash.finalize().as_slice()),
            self.len,
        )
    }
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A reader that hashes what is read through it.
pub struct HashingReader<R> {
    inner: R,
    hash: Sha256,
}

impl<R> HashingReader<R> {
    pub fn new(inner: R) -> Self {
        HashingReader {
            inner,
            hash: Sha256::new(),
        }
    }

    /// The digest of what was read.
    pub fn digest(self) -> String {
        format(self.hash.finalize().as_slice())
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_written_as_the_specification_does() {
        // sha256 of the empty string.
        assert_eq!(
            of(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert!(hex(&of(b"x")).is_some());
        assert_eq!(hex("sha256:../../etc"), None);
        assert_eq!(hex("sha512:00"), None);
        assert_eq!(hex(&of(b"x").to_uppercase()), None);
        let mut w = Hashing::new(Vec::new());
        w.write_all(b"abc").unwrap();
        let (bytes, digest, len) = w.finish();
        assert_eq!(
            (bytes.as_slice(), digest, len),
            (&b"abc"[..], of(b"abc"), 3)
        );
    }
}
