//! One layer: a tar stream (OCI image specification, `layer.md`), perhaps
//! compressed. It is inflated once into a scratch file (an uncompressed
//! one is read where it lies), its entries listed
//! where they lie (`tar` reads the headers, PAX and GNU extensions
//! included), and, when some of its files change, written again: every byte
//! as it was (headers, their extensions, whiteouts, links, the trailer)
//! but for the changed files' data and the size and checksum of their
//! headers.

use std::fs::File;
use std::io::{self, BufWriter, Cursor, Read, Write};
use std::path::Path;

use offload_loader::MappedFile;
use tar::EntryType;

use super::digest::{Hashing, HashingReader};

/// The most entries one layer may have (a distribution's whole root file
/// system has some 10⁵): past it the layer is refused, not listed forever.
pub const MAX_ENTRIES: usize = 1 << 22;

/// How a layer's stream is compressed, told from its first bytes (what
/// containerd and the containers/image library do too), whatever its media
/// type says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    /// The compression of a stream starting with `head`.
    pub fn of(head: &[u8]) -> Compression {
        if head.starts_with(&[0x1f, 0x8b]) {
            Compression::Gzip
        } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Compression::Zstd
        } else {
            Compression::None
        }
    }

    /// A reader of `bytes` inflated.
    fn reader<'a>(self, bytes: impl Read + 'a) -> io::Result<Box<dyn Read + 'a>> {
        Ok(match self {
            Compression::None => Box::new(bytes),
            // A gzip stream may be several members (pigz, and RFC 1952):
            // all are read, as Go's reader does.
            Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(bytes)),
            Compression::Zstd => Box::new(zstd::Decoder::new(bytes)?),
        })
    }

    /// Compresses what `write` writes into `out`, on the machine's cores:
    /// gzip at zlib's default level 6 (what Go's `gzip.NewWriter` and so
    /// Docker, containerd and skopeo write), zstd at its default level 3.
    fn compress(
        self,
        out: Hashing<BufWriter<File>>,
        write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<Hashing<BufWriter<File>>> {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        match self {
            Compression::None => {
                let mut out = out;
                write(&mut out)?;
                Ok(out)
            }
            Compression::Gzip => {
                use gzp::{deflate::Gzip, par::compress::ParCompressBuilder, ZWriter};
                let mut z = ParCompressBuilder::<Gzip>::new()
                    .num_threads(threads)
                    .map_err(io::Error::other)?
                    .compression_level(gzp::Compression::new(6))
                    .from_writer(out);
                let written = write(&mut z);
                let out = z.finish().map_err(io::Error::other)?;
                written.map(|()| out)
            }
            Compression::Zstd => {
                let mut z = zstd::Encoder::new(out, 3)?;
                z.multithread(threads as u32)?;
                write(&mut z)?;
                z.finish()
            }
        }
    }
}

/// A layer's blob inflated into `scratch`, checked against its `digest`
/// (of the blob) and, when known, its `diff_id` (of the tar stream).
pub fn inflate(
    blob: &[u8],
    digest: &str,
    diff_id: Option<&str>,
    scratch: &Path,
) -> Result<MappedFile, String> {
    let compression = Compression::of(blob);
    let mut read = HashingReader::new(blob);
    let mut tar = Hashing::new(BufWriter::new(
        File::create(scratch).map_err(|e| e.to_string())?,
    ));
    {
        let mut inflated = compression
            .reader(&mut read)
            .map_err(|e| format!("layer {digest}: {e}"))?;
        io::copy(&mut inflated, &mut tar).map_err(|e| format!("layer {digest}: {e}"))?;
        // What a decoder left unread (a gzip stream's trailing bytes) is
        // read too: the digest is of every byte.
        io::copy(&mut inflated, &mut io::sink()).map_err(|e| e.to_string())?;
    }
    io::copy(&mut read, &mut io::sink()).map_err(|e| e.to_string())?;
    let (file, tar_digest, _) = tar.finish();
    // Flushed, not synced: a scratch file, read back through the page
    // cache and removed; syncing it wrote a gigabyte to disk for nothing.
    file.into_inner().map_err(|e| e.to_string())?;
    check(digest, &read.digest(), diff_id, &tar_digest)?;
    MappedFile::open(scratch).map_err(|e| e.to_string())
}

/// Checks an uncompressed layer, whose blob is its own tar stream (read
/// where it lies, never copied) and hashes to `read`, against its `digest`
/// and `diff_id`: both are of those bytes.
pub fn check_plain(digest: &str, diff_id: Option<&str>, read: &str) -> Result<(), String> {
    check(digest, read, diff_id, read)
}

/// The digests a layer's bytes hash to (`read`: the blob; `tar`: its tar
/// stream) against those the manifest and the config name.
fn check(digest: &str, read: &str, diff_id: Option<&str>, tar: &str) -> Result<(), String> {
    if read != digest {
        return Err(format!(
            "layer {digest}: its bytes hash to {read}: the blob is not what the manifest names"
        ));
    }
    if let Some(diff_id) = diff_id.filter(|&d| d != tar) {
        return Err(format!(
            "layer {digest}: its tar stream hashes to {tar}, the config says {diff_id}"
        ));
    }
    Ok(())
}

/// An entry of a layer, where it lies in the tar stream.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its path, as the header and its extensions give it.
    pub path: String,
    /// What it is.
    pub kind: Kind,
    /// Where its header block is (after any extension entries), and its
    /// data.
    pub header: u64,
    pub data: u64,
    /// Its data's size in the stream.
    pub size: u64,
    /// Its PAX extension records a `size` (a file of 8 GiB or more): its
    /// data cannot change without that record.
    pub pax_size: bool,
}

/// What an entry is, as far as slimming cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A regular file, its data contiguous.
    File,
    /// A hard link to an earlier entry (its path).
    HardLink(String),
    /// A symbolic link (its target, as written).
    Symlink(String),
    /// A whiteout (`.wh.NAME`: NAME of the layers below is deleted) or an
    /// opaque directory's marker (`.wh..wh..opq`).
    Whiteout,
    /// Anything else: a directory, a device, a sparse file.
    Other,
}

/// Every entry of the tar stream `tar`.
pub fn entries(tar: &[u8]) -> Result<Vec<Entry>, String> {
    let mut archive = tar::Archive::new(Cursor::new(tar));
    let mut out = Vec::new();
    for entry in archive.entries_with_seek().map_err(|e| e.to_string())? {
        if out.len() >= MAX_ENTRIES {
            return Err(format!("more than {MAX_ENTRIES} entries"));
        }
        let mut e = entry.map_err(|e| format!("entry {}: {e}", out.len()))?;
        let path = normal(&e.path_bytes());
        let name = path.rsplit('/').next().unwrap_or("");
        let header = e.header();
        let kind = match header.entry_type() {
            _ if name.starts_with(".wh.") => Kind::Whiteout,
            EntryType::Regular | EntryType::Continuous => Kind::File,
            EntryType::Link => Kind::HardLink(normal(&e.link_name_bytes().unwrap_or_default())),
            EntryType::Symlink => Kind::Symlink(
                String::from_utf8_lossy(&e.link_name_bytes().unwrap_or_default()).into_owned(),
            ),
            _ => Kind::Other,
        };
        let size = header.entry_size().map_err(|e| e.to_string())?;
        let data = e.raw_file_position();
        if data
            .checked_add(size)
            .is_none_or(|end| end > tar.len() as u64)
        {
            return Err(format!("{path}: its data runs past the stream's end"));
        }
        let pax_size = e
            .pax_extensions()
            .ok()
            .flatten()
            .is_some_and(|mut x| x.any(|r| r.is_ok_and(|r| r.key_bytes() == b"size")));
        out.push(Entry {
            path,
            kind,
            header: e.raw_header_position(),
            data,
            size,
            pax_size,
        });
    }
    Ok(out)
}

/// A tar path made one form: no leading `./` or `/`, no trailing `/`.
fn normal(path: &[u8]) -> String {
    let path = String::from_utf8_lossy(path);
    let mut p: &str = &path;
    loop {
        if let Some(rest) = p.strip_prefix("./") {
            p = rest;
        } else if let Some(rest) = p.strip_prefix('/') {
            p = rest;
        } else {
            break;
        }
    }
    p.trim_end_matches('/').to_string()
}

/// An entry's new data: a file (its size and path).
pub struct Replacement<'a> {
    pub entry: &'a Entry,
    pub file: &'a Path,
}

/// What a layer written again is: its blob's digest and size, and its tar
/// stream's digest (the config's `diff_id`).
pub struct Written {
    pub digest: String,
    pub size: u64,
    pub diff_id: String,
}

/// `tar` written again into `out` (compressed as `compression`), each
/// entry of `replaced` (in stream order) with its file's bytes: its
/// header's size and checksum changed, every other byte of the stream as
/// it was.
pub fn write(
    tar: &[u8],
    replaced: &[Replacement<'_>],
    compression: Compression,
    out: &Path,
) -> io::Result<Written> {
    let file = Hashing::new(BufWriter::with_capacity(1 << 20, File::create(out)?));
    let mut diff_id = String::new();
    let blob = compression.compress(file, |w| {
        let mut w = Hashing::new(w);
        let mut at = 0usize;
        for r in replaced {
            let (header, data) = (r.entry.header as usize, r.entry.data as usize);
            w.write_all(&tar[at..header])?;
            let len = std::fs::metadata(r.file)?.len();
            let mut h = tar::Header::from_byte_slice(&tar[header..header + 512]).clone();
            h.set_size(len);
            h.set_cksum();
            w.write_all(h.as_bytes())?;
            let copied = io::copy(&mut File::open(r.file)?, &mut w)?;
            if copied != len {
                return Err(io::Error::other(format!(
                    "{} changed while it was written",
                    r.file.display()
                )));
            }
            w.write_all(&[0u8; 512][..padding(len)])?;
            // A stream cut short may end before the padding.
            at = (data + (r.entry.size as usize).next_multiple_of(512)).min(tar.len());
        }
        w.write_all(&tar[at..])?;
        let (_, digest, _) = w.finish();
        diff_id = digest;
        Ok(())
    })?;
    let (file, digest, size) = blob.finish();
    file.into_inner()?.sync_all()?;
    Ok(Written {
        digest,
        size,
        diff_id,
    })
}

/// Zeros after `len` bytes of data up to the next 512-byte block.
fn padding(len: u64) -> usize {
    (len.next_multiple_of(512) - len) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_made_one_form() {
        assert_eq!(normal(b"./usr/lib/"), "usr/lib");
        assert_eq!(normal(b"/usr/lib/x.so"), "usr/lib/x.so");
        assert_eq!(normal(b"././a"), "a");
        assert_eq!(normal(b"./"), "");
    }

    #[test]
    fn an_uncompressed_blob_is_checked_against_both_digests() {
        let right = super::super::digest::of(b"usr/lib/x.so");
        let wrong = super::super::digest::of(b"something else");
        assert_eq!(check_plain(&right, Some(&right), &right), Ok(()));
        assert_eq!(check_plain(&right, None, &right), Ok(()));
        let e = check_plain(&wrong, Some(&right), &right).unwrap_err();
        assert!(e.contains("the blob is not what the manifest names"), "{e}");
        let e = check_plain(&right, Some(&wrong), &right).unwrap_err();
        assert!(e.contains(&format!("the config says {wrong}")), "{e}");
    }

    #[test]
    fn compression_is_told_from_the_first_bytes() {
        assert_eq!(Compression::of(&[0x1f, 0x8b, 8]), Compression::Gzip);
        assert_eq!(
            Compression::of(&[0x28, 0xb5, 0x2f, 0xfd]),
            Compression::Zstd
        );
        assert_eq!(Compression::of(b"usr/"), Compression::None);
    }
}
