//! Writing LLVM offload binaries as LLVM's `OffloadBinary::write` lays them
//! out (llvm/lib/Object/OffloadBinary.cpp):
//!
//! - version 1 (LLVM 22, one image): header, the entry, its string entries
//!   (key offset, value offset), the string table, zeros to 8, the image,
//!   zeros to 8;
//! - version 2 (LLVM 23, several images): header (whose u64 at 24 counts the
//!   entries), every entry, every string entry (key offset, value offset,
//!   value size), one string table for all, zeros to 8, the images back to
//!   back, zeros to 8.
//!
//! The string table is laid out as LLVM's `StringTableBuilder` of kind ELF
//! lays it out: a NUL first, then each distinct string once, in descending
//! order of its reversed bytes, a string that ends the one before it taking
//! that one's tail instead of a place of its own. `tests/writers.rs`
//! compares with what `llvm-offload-binary` (LLVM 22) writes.

use std::collections::BTreeMap;

use super::{OffloadBinary, ENTRY_LEN, HEADER_LEN};
use crate::error::{Error, ErrorKind, Result};
use crate::magic;

/// One image to write, with what describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image<'a> {
    /// Its image kind ([`super::image_kind`]).
    pub image_kind: u16,
    /// Its offload kind bits (1 OpenMP, 2 CUDA, 4 HIP, 8 SYCL).
    pub offload_kind: u16,
    /// Its flags.
    pub flags: u32,
    /// Its string map, in the order to write it.
    pub strings: Vec<(&'a str, &'a str)>,
    /// Its bytes.
    pub image: &'a [u8],
}

/// The string table of `strings`: its bytes and each string's offset.
fn string_table<'s>(strings: impl Iterator<Item = &'s str>) -> (Vec<u8>, BTreeMap<&'s str, u64>) {
    let mut unique: Vec<&str> = strings.collect();
    unique.sort_unstable();
    unique.dedup();
    // Descending by reversed bytes; a string that is another's suffix after it.
    unique.sort_by(|a, b| b.bytes().rev().cmp(a.bytes().rev()));
    let mut table = vec![0u8];
    let mut offsets = BTreeMap::new();
    let mut previous: &str = "";
    for s in unique {
        if previous.ends_with(s) {
            offsets.insert(s, (table.len() - s.len() - 1) as u64);
            continue;
        }
        offsets.insert(s, table.len() as u64);
        table.extend_from_slice(s.as_bytes());
        table.push(0);
        previous = s;
    }
    (table, offsets)
}

/// The offload binary of `images` in `version` 1 (exactly one image) or 2.
pub fn write(images: &[Image<'_>], version: u32) -> Result<Vec<u8>> {
    if !(version == 1 && images.len() == 1 || version == 2 && !images.is_empty()) {
        return Err(Error::new(
            4,
            ErrorKind::UnsupportedVersion {
                what: "offload binary (writing: v1 holds one image, v2 at least one)",
                version: version.into(),
            },
        ));
    }
    let record: u64 = if version == 1 { 16 } else { 24 };
    let (table, offsets) = string_table(
        images
            .iter()
            .flat_map(|i| i.strings.iter().flat_map(|(k, v)| [*k, *v])),
    );
    let entries_len = ENTRY_LEN * images.len() as u64;
    let string_entries: u64 = images.iter().map(|i| i.strings.len() as u64).sum();
    let table_at = HEADER_LEN + entries_len + record * string_entries;
    let data_at = (table_at + table.len() as u64).next_multiple_of(8);
    let images_len: u64 = images.iter().map(|i| i.image.len() as u64).sum();
    let total = (data_at + images_len).next_multiple_of(8);

    let mut out = Vec::with_capacity(total as usize);
    out.extend_from_slice(magic::OFFLOAD_BINARY);
    out.extend(version.to_le_bytes());
    out.extend(total.to_le_bytes());
    out.extend(HEADER_LEN.to_le_bytes());
    out.extend(
        if version == 1 {
            ENTRY_LEN
        } else {
            images.len() as u64
        }
        .to_le_bytes(),
    );
    let mut strings_at = HEADER_LEN + entries_len;
    let mut image_at = data_at;
    for i in images {
        out.extend(i.image_kind.to_le_bytes());
        out.extend(i.offload_kind.to_le_bytes());
        out.extend(i.flags.to_le_bytes());
        out.extend(strings_at.to_le_bytes());
        out.extend((i.strings.len() as u64).to_le_bytes());
        out.extend(image_at.to_le_bytes());
        out.extend((i.image.len() as u64).to_le_bytes());
        strings_at += record * i.strings.len() as u64;
        image_at += i.image.len() as u64;
    }
    for i in images {
        for (k, v) in &i.strings {
            out.extend((table_at + offsets[k]).to_le_bytes());
            out.extend((table_at + offsets[v]).to_le_bytes());
            if version > 1 {
                out.extend((v.len() as u64).to_le_bytes());
            }
        }
    }
    out.extend_from_slice(&table);
    out.resize(data_at as usize, 0);
    for i in images {
        out.extend_from_slice(i.image);
    }
    out.resize(total as usize, 0);
    Ok(out)
}

/// `binary` with only the entries `keep` says yes to, in its version; `None`
/// when none is kept.
pub fn keep(binary: &OffloadBinary<'_>, keep: impl Fn(usize) -> bool) -> Result<Option<Vec<u8>>> {
    let images: Vec<Image<'_>> = binary
        .entries()
        .iter()
        .enumerate()
        .filter(|(i, _)| keep(*i))
        .map(|(_, e)| Image {
            image_kind: e.image_kind,
            offload_kind: e.offload_kind_bits,
            flags: e.flags,
            strings: e.strings.clone(),
            image: e.image,
        })
        .collect();
    if images.is_empty() {
        return Ok(None);
    }
    write(&images, binary.version).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::Limits;

    #[test]
    fn the_string_table_merges_tails_as_llvm_does() {
        // What llvm-offload-binary (LLVM 22) wrote for arch=sm_80 and
        // triple=nvptx64-nvidia-cuda.
        let (t, o) = string_table(["arch", "sm_80", "triple", "nvptx64-nvidia-cuda"].into_iter());
        assert_eq!(t, b"\0arch\0triple\0nvptx64-nvidia-cuda\0sm_80\0");
        assert_eq!((o["arch"], o["triple"], o["sm_80"]), (1, 6, 33));
        // A suffix takes the tail of the string it ends (the empty string,
        // the last NUL).
        let (t, o) = string_table(["gfx90a:xnack+", "xnack+", "", "gfx90a"].into_iter());
        assert_eq!(t, b"\0gfx90a\0gfx90a:xnack+\0");
        assert_eq!(
            (o["gfx90a"], o["gfx90a:xnack+"], o["xnack+"], o[""]),
            (1, 8, 15, 21)
        );
    }

    #[test]
    fn both_versions_read_back_and_keep_drops_entries() {
        let a = Image {
            image_kind: 1,
            offload_kind: 4,
            flags: 0,
            strings: vec![("triple", "amdgcn-amd-amdhsa"), ("arch", "gfx90a")],
            image: b"\x7fELF-one",
        };
        let b = Image {
            strings: vec![("triple", "amdgcn-amd-amdhsa"), ("arch", "gfx1100")],
            image: b"\x7fELF-two!",
            ..a.clone()
        };
        let one = write(std::slice::from_ref(&a), 1).unwrap();
        let read = OffloadBinary::parse(&one, &Limits::default()).unwrap();
        assert_eq!(read.entries()[0].strings, a.strings);
        assert_eq!(read.entries()[0].image, a.image);
        assert_eq!(keep(&read, |_| true).unwrap().unwrap(), one);
        assert!(write(&[a.clone(), b.clone()], 1).is_err());
        let two = write(&[a.clone(), b.clone()], 2).unwrap();
        let read = OffloadBinary::parse(&two, &Limits::default()).unwrap();
        assert_eq!(read.entries().len(), 2);
        assert_eq!(read.entries()[1].image, b.image);
        assert_eq!(keep(&read, |_| true).unwrap().unwrap(), two);
        let fewer = keep(&read, |i| i == 1).unwrap().unwrap();
        let fewer = OffloadBinary::parse(&fewer, &Limits::default()).unwrap();
        assert_eq!(fewer.entries().len(), 1);
        assert_eq!(fewer.entries()[0].strings, b.strings);
        assert!(keep(&read, |_| false).unwrap().is_none());
    }
}
