//! Clang offload bundles (`__CLANG_OFFLOAD_BUNDLE__`), binary layout.
//!
//! Layout (clang/docs/ClangOffloadBundler.rst, "Bundled Binary File Layout";
//! clang/lib/Driver/OffloadBundler.cpp `BinaryFileHandler`), little-endian:
//!
//! | offset | field |
//! |---|---|
//! | 0 | magic `__CLANG_OFFLOAD_BUNDLE__` (24 bytes, no NUL) |
//! | 24 | u64 number of entries |
//! | 32 | per entry: u64 offset, u64 size, u64 ID length, ID bytes (no NUL) |
//!
//! Entry offsets are absolute from the bundle start. Entries may be aligned
//! (`-bundle-align`, 4096 for HIP), the host entry has size 0 and may be absent.

use crate::error::{Error, ErrorKind, Result};
use crate::limits::Limits;
use crate::magic;
use crate::read::{utf8, Bytes};
use crate::target::{Arch, OffloadKind, Processor, Triple};

/// Writing bundles ([`write::write()`], [`write::keep()`]): behind the `write` feature.
#[cfg(feature = "write")]
pub mod write;

mod pattern;
pub use pattern::IdsPattern;

/// Size of the fixed header: magic and entry count.
const HEADER_LEN: u64 = 32;
/// Size of an entry's fixed fields: offset, size, ID length.
const ENTRY_FIXED_LEN: u64 = 24;

/// A parsed bundle, borrowing its bytes.
#[derive(Debug, Clone)]
pub struct Bundle<'a> {
    data: &'a [u8],
    len: u64,
    entries: Vec<BundleEntry<'a>>,
}

/// One entry of a bundle's table.
#[derive(Debug, Clone)]
pub struct BundleEntry<'a> {
    /// The bundle entry ID, e.g. `hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+`.
    pub id: &'a str,
    /// Offset of the code object from the bundle start.
    pub offset: u64,
    /// Size of the code object.
    pub size: u64,
    /// Offset of this entry's table record from the bundle start.
    pub record_offset: u64,
}

impl<'a> Bundle<'a> {
    /// Parses the bundle at the start of `data`. Bytes after the bundle's last
    /// entry (further bundles, padding) are left alone; see [`Bundle::len`].
    ///
    /// Like clang's reader, rejects entries past the end; it also rejects
    /// non-empty entries that overlap the header or each other.
    ///
    /// A table of more than [`Limits::max_entries`] entries is refused.
    pub fn parse(data: &'a [u8], limits: &Limits) -> Result<Bundle<'a>> {
        Self::parse_table(data, data.len() as u64, limits)
    }

    /// Parses only the table of a bundle whose first bytes are `prefix` and whose
    /// full length is `full_len`: how a compressed bundle is listed from a
    /// partial decompression. Code-object ranges are checked against `full_len`,
    /// so [`Bundle::code_object`] must not be called unless `prefix` is whole.
    pub fn parse_table(prefix: &'a [u8], full_len: u64, limits: &Limits) -> Result<Bundle<'a>> {
        let mut records = Records::new(prefix, full_len, limits)?;
        let mut entries = Vec::with_capacity(records.left.min(1024) as usize);
        while let Some(record) = records.next_record()? {
            let id = utf8(record.id, record.at + ENTRY_FIXED_LEN, "bundle entry ID")?;
            match record.offset.checked_add(record.size) {
                Some(end) if end <= full_len => {}
                _ => {
                    return Err(Error::new(
                        record.at,
                        ErrorKind::OutOfBounds {
                            what: "bundle entry code object",
                            start: record.offset,
                            size: record.size,
                            len: full_len,
                        },
                    ))
                }
            }
            entries.push(BundleEntry {
                id,
                offset: record.offset,
                size: record.size,
                record_offset: record.at,
            });
        }
        let table_end = records.pos;
        check_layout(&entries, table_end)?;
        let len = entries
            .iter()
            .map(|e| e.offset + e.size)
            .fold(table_end, u64::max);
        Ok(Bundle {
            data: prefix,
            len,
            entries,
        })
    }

    /// The entries, in table order (the `-targets` order).
    pub fn entries(&self) -> &[BundleEntry<'a>] {
        &self.entries
    }

    /// The bundle's length: the end of its table or of its last code object,
    /// whichever is later.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the bundle has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The code object of `entry` (zero-copy), or an error if this bundle was
    /// parsed from a prefix that does not hold it.
    pub fn code_object(&self, entry: &BundleEntry<'a>) -> Result<&'a [u8]> {
        Bytes(self.data).slice(entry.offset, entry.size, "bundle entry code object")
    }
}

/// Rejects non-empty code objects that overlap the header/table or each other.
fn check_layout(entries: &[BundleEntry<'_>], table_end: u64) -> Result<()> {
    let mut ranges: Vec<&BundleEntry<'_>> = entries.iter().filter(|e| e.size > 0).collect();
    ranges.sort_by_key(|e| e.offset);
    let mut prev_end = table_end;
    for e in ranges {
        if e.offset < prev_end {
            let why = if prev_end == table_end {
                "code object overlaps the bundle header"
            } else {
                "code object overlaps another entry's code object"
            };
            return Err(Error::new(
                e.record_offset,
                ErrorKind::Malformed {
                    what: "bundle entry",
                    why,
                },
            ));
        }
        prev_end = e.offset + e.size;
    }
    Ok(())
}

/// The entry IDs of a bundle's table, in table order, read in place: what
/// [`entry_ids`] returns.
#[derive(Debug, Clone)]
pub struct EntryIds<'a> {
    records: Records<'a>,
}

/// Reads the entry IDs of the bundle whose table starts `prefix`, one at a
/// time, without building the bundle: no allocation, and none of the checks
/// [`Bundle::parse_table`] adds (code-object ranges, the IDs' encoding). A
/// caller that asks whether tables list IDs it already holds compares them
/// with an [`IdsPattern`] (tested against this reader); a table whose IDs
/// it does not know is for [`Bundle::parse_table`].
///
/// The header is checked as [`Bundle::parse_table`] checks it (the entry
/// count against the limit and against what `prefix` can hold); each ID is
/// bounds-checked as it is read, and the first error ends the iteration.
pub fn entry_ids<'a>(prefix: &'a [u8], limits: &Limits) -> Result<EntryIds<'a>> {
    Ok(EntryIds {
        records: Records::new(prefix, prefix.len() as u64, limits)?,
    })
}

impl<'a> Iterator for EntryIds<'a> {
    type Item = Result<&'a [u8]>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.records.next_record() {
            Ok(record) => record.map(|r| Ok(r.id)),
            Err(e) => {
                self.records.left = 0;
                Some(Err(e))
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, usize::try_from(self.records.left).ok())
    }
}

/// One record of a bundle's table, as written.
struct Record<'a> {
    /// Its offset from the bundle start.
    at: u64,
    offset: u64,
    size: u64,
    id: &'a [u8],
}

/// A cursor over a bundle's table records: the header checked once, each
/// record bounds-checked as it is read.
#[derive(Debug, Clone)]
struct Records<'a> {
    bytes: Bytes<'a>,
    /// The next record's offset.
    pos: u64,
    /// Records not yet read.
    left: u64,
}

impl<'a> Records<'a> {
    /// Checks the magic and the entry count of the bundle whose first bytes
    /// are `prefix` and whose full length is `full_len`.
    fn new(prefix: &'a [u8], full_len: u64, limits: &Limits) -> Result<Records<'a>> {
        if !prefix.starts_with(magic::BUNDLE) {
            return Err(Error::new(
                0,
                ErrorKind::BadMagic {
                    what: "clang offload bundle",
                },
            ));
        }
        let bytes = Bytes(prefix);
        let count = bytes.u64(24, "bundle entry count")?;
        // Each entry needs at least its fixed fields, so the count is bounded
        // by the input, and by the limit: an inflated bundle of zeros would
        // otherwise list millions of empty entries.
        let max = (full_len.saturating_sub(HEADER_LEN) / ENTRY_FIXED_LEN).min(limits.max_entries);
        if count > max {
            return Err(Error::new(
                24,
                ErrorKind::TooLarge {
                    what: "bundle entry count",
                    value: count,
                    limit: max,
                },
            ));
        }
        Ok(Records {
            bytes,
            pos: HEADER_LEN,
            left: count,
        })
    }

    /// The next record, `None` after the last.
    fn next_record(&mut self) -> Result<Option<Record<'a>>> {
        if self.left == 0 {
            return Ok(None);
        }
        let at = self.pos;
        let offset = self.bytes.u64(at, "bundle entry offset")?;
        let size = self.bytes.u64(at + 8, "bundle entry size")?;
        let id_len = self.bytes.u64(at + 16, "bundle entry ID length")?;
        let id = self
            .bytes
            .slice(at + ENTRY_FIXED_LEN, id_len, "bundle entry ID")?;
        // In bounds: the ID's end lies within the input.
        self.pos = at + ENTRY_FIXED_LEN + id_len;
        self.left -= 1;
        Ok(Some(Record {
            at,
            offset,
            size,
            id,
        }))
    }
}

/// A bundle entry ID split into its parts: `<kind>-<triple>[-<target ID>]`.
///
/// Split as clang 22's `OffloadTargetInfo` does: kind, then the triple's
/// arch, vendor and OS, then the environment (empty in
/// `hipv4-amdgcn-amd-amdhsa--gfx90a`), then the target ID, which may itself
/// hold a `-` (`gfx11-generic`). Older IDs with a three-field triple
/// (`hip-amdgcn-amd-amdhsa-gfx906`) are recognised by the GPU name where the
/// environment would be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleId {
    /// The offload kind (`hip`, `hipv4`, `hcc`, `openmp`, `host`, ...).
    pub kind: OffloadKind,
    /// The triple.
    pub triple: Triple,
    /// The target ID as written (empty when the ID has none).
    pub target_id: String,
    /// The target ID parsed against the triple's vendor; an AMDGPU alias is
    /// [`Arch::Unknown`] with [`crate::target::TargetIdError::Alias`].
    pub arch: Arch,
}

impl BundleId {
    /// Splits a bundle entry ID. Never fails: an ID without a recognisable
    /// kind or triple yields empty fields, which selection reports.
    pub fn parse(id: &str) -> BundleId {
        let (kind, rest) = id.split_once('-').unwrap_or((id, ""));
        let mut fields = rest.splitn(4, '-');
        let mut next = || fields.next().unwrap_or_default();
        let (arch, vendor, os, tail) = (next(), next(), next(), next());
        let first = tail.split([':', '-']).next().unwrap_or_default();
        let (env, target_id) = if names_gpu(first) {
            ("", tail)
        } else {
            tail.split_once('-').unwrap_or((tail, ""))
        };
        let triple = Triple {
            arch: arch.into(),
            vendor: vendor.into(),
            os: os.into(),
            env: env.into(),
        };
        let parsed = Arch::parse_bundle_target(triple.gpu_vendor(), target_id);
        BundleId {
            kind: OffloadKind::from_bundle(kind),
            triple,
            target_id: target_id.into(),
            arch: parsed,
        }
    }
}

/// Whether `s` names a GPU processor (known or not): `gfx*`, `sm_*`, `compute_*`
/// or an AMDGPU alias such as `fiji`.
fn names_gpu(s: &str) -> bool {
    s.starts_with("gfx")
        || s.starts_with("sm_")
        || s.starts_with("compute_")
        || Processor::lookup(s).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::{FeatureSetting, TargetIdError};

    /// A bundle of `entries`, each code object aligned to `align`.
    pub(super) fn build(entries: &[(&str, &[u8])], align: usize) -> Vec<u8> {
        let mut out = magic::BUNDLE.to_vec();
        out.extend((entries.len() as u64).to_le_bytes());
        let table_len: usize = entries.iter().map(|(id, _)| 24 + id.len()).sum();
        let mut next = (32 + table_len).next_multiple_of(align);
        let mut offsets = vec![];
        for (id, obj) in entries {
            offsets.push(next);
            out.extend((next as u64).to_le_bytes());
            out.extend((obj.len() as u64).to_le_bytes());
            out.extend((id.len() as u64).to_le_bytes());
            out.extend(id.as_bytes());
            next = (next + obj.len()).next_multiple_of(align);
        }
        for ((_, obj), off) in entries.iter().zip(offsets) {
            out.resize(off, 0);
            out.extend(*obj);
        }
        out
    }

    #[test]
    fn parses_entries_and_objects() {
        let data = build(
            &[
                ("host-x86_64-unknown-linux-gnu-", b""),
                ("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+", b"AAAA"),
                ("hipv4-amdgcn-amd-amdhsa--gfx1100", b"BB"),
            ],
            16,
        );
        let b = Bundle::parse(&data, &Limits::default()).unwrap();
        assert_eq!(b.entries().len(), 3);
        assert_eq!(b.code_object(&b.entries()[1]).unwrap(), b"AAAA");
        assert_eq!(b.code_object(&b.entries()[2]).unwrap(), b"BB");
        assert_eq!(b.len(), data.len() as u64);
        // Misaligned input parses the same.
        let mut shifted = vec![0];
        shifted.extend(&data);
        assert_eq!(
            Bundle::parse(&shifted[1..], &Limits::default())
                .unwrap()
                .entries()
                .len(),
            3
        );
    }

    #[test]
    fn entry_ids_are_the_tables_read_in_place() {
        let data = build(
            &[
                ("host-x86_64-unknown-linux-gnu-", b""),
                ("hipv4-amdgcn-amd-amdhsa--gfx11-generic", b"AAAA"),
                ("hipv4-amdgcn-amd-amdhsa--gfx1100", b"BB"),
            ],
            4096,
        );
        let limits = Limits::default();
        let parsed = Bundle::parse(&data, &limits).unwrap();
        let ids: Vec<&[u8]> = entry_ids(&data, &limits)
            .unwrap()
            .collect::<Result<_>>()
            .unwrap();
        let want: Vec<&[u8]> = parsed.entries().iter().map(|e| e.id.as_bytes()).collect();
        assert_eq!(ids, want);
        // The table alone is enough: code objects are not looked at.
        let table_end = parsed.entries().last().map(|e| e.record_offset).unwrap() as usize
            + 24
            + "hipv4-amdgcn-amd-amdhsa--gfx1100".len();
        assert_eq!(entry_ids(&data[..table_end], &limits).unwrap().count(), 3);
        // A table cut inside an ID yields the IDs before it, then the error,
        // then nothing.
        let mut cut = entry_ids(&data[..table_end - 1], &limits).unwrap();
        assert!(cut.next().unwrap().is_ok());
        assert!(cut.next().unwrap().is_ok());
        let err = cut.next().unwrap().unwrap_err();
        assert!(matches!(err.kind, ErrorKind::OutOfBounds { .. }), "{err:?}");
        assert!(cut.next().is_none());
        // The header is checked as the parser checks it.
        assert!(entry_ids(&data[1..], &limits).is_err());
        let mut huge = data.clone();
        huge[24..32].copy_from_slice(&(1u64 << 48).to_le_bytes());
        assert!(matches!(
            entry_ids(&huge, &limits).unwrap_err().kind,
            ErrorKind::TooLarge { .. }
        ));
    }

    #[test]
    fn bundle_without_host_entry() {
        // HIP bundles may carry device entries only.
        let data = build(
            &[
                ("hip-amdgcn-amd-amdhsa--gfx90a", b"CODE"),
                ("hip-amdgcn-amd-amdhsa--gfx1100", b"MORE"),
            ],
            4096,
        );
        let b = Bundle::parse(&data, &Limits::default()).unwrap();
        assert_eq!(b.entries().len(), 2);
        assert!(b
            .entries()
            .iter()
            .all(|e| BundleId::parse(e.id).kind == OffloadKind::Hip));
        assert_eq!(b.code_object(&b.entries()[1]).unwrap(), b"MORE");
        assert_eq!(b.entries()[0].offset % 4096, 0);
    }

    #[test]
    fn rejects_bad_tables() {
        let data = build(&[("hip-amdgcn-amd-amdhsa--gfx906", b"XXXX")], 8);
        for cut in [0, 10, 24, 31, 40, 60] {
            assert!(
                Bundle::parse(&data[..cut], &Limits::default()).is_err(),
                "cut at {cut}"
            );
        }
        let mut huge = data.clone();
        huge[24..32].copy_from_slice(&(1u64 << 48).to_le_bytes());
        assert!(matches!(
            Bundle::parse(&huge, &Limits::default()).unwrap_err().kind,
            ErrorKind::TooLarge { .. }
        ));
        let mut wrap = data.clone();
        wrap[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(
            Bundle::parse(&wrap, &Limits::default()).unwrap_err().kind,
            ErrorKind::OutOfBounds { .. }
        ));
        let mut overlap = data.clone();
        overlap[32..40].copy_from_slice(&8u64.to_le_bytes());
        assert!(matches!(
            Bundle::parse(&overlap, &Limits::default())
                .unwrap_err()
                .kind,
            ErrorKind::Malformed { .. }
        ));
        let mut bad_utf8 = data;
        bad_utf8[56] = 0xff;
        assert!(matches!(
            Bundle::parse(&bad_utf8, &Limits::default())
                .unwrap_err()
                .kind,
            ErrorKind::NotUtf8 { .. }
        ));
    }

    #[test]
    fn splits_ids_like_clang() {
        let id = BundleId::parse("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+");
        assert_eq!(id.kind, OffloadKind::Hip);
        assert_eq!(id.triple.to_string(), "amdgcn-amd-amdhsa");
        assert_eq!(id.target_id, "gfx90a:xnack+");
        let Arch::Amdgpu(t) = id.arch else { panic!() };
        assert_eq!(t.xnack, FeatureSetting::On);

        let host = BundleId::parse("host-x86_64-unknown-linux-gnu");
        assert_eq!(host.kind, OffloadKind::Host);
        assert_eq!(host.triple.env, "gnu");
        assert_eq!(host.arch, Arch::None);

        let nv = BundleId::parse("openmp-nvptx64-nvidia-cuda-unknown-sm_80");
        assert_eq!(nv.arch.to_string(), "sm_80");
        assert_eq!(nv.triple.arch, "nvptx64");

        let alias = BundleId::parse("hcc-amdgcn-amd-amdhsa--fiji");
        // comgr and clr compare bundle IDs as written: `fiji` is not gfx803.
        assert!(
            matches!(
                &alias.arch,
                Arch::Unknown {
                    error: TargetIdError::Alias {
                        processor: "gfx803",
                        ..
                    },
                    ..
                }
            ),
            "{:?}",
            alias.arch
        );
        let generic = BundleId::parse("hipv4-amdgcn-amd-amdhsa--gfx11-generic");
        assert_eq!(generic.arch.to_string(), "gfx11-generic");
        let old = BundleId::parse("hip-amdgcn-amd-amdhsa-gfx906:xnack-");
        assert_eq!(
            (old.triple.env.as_str(), old.target_id.as_str()),
            ("", "gfx906:xnack-")
        );
        let old_generic = BundleId::parse("hip-amdgcn-amd-amdhsa-gfx10-3-generic");
        assert_eq!(old_generic.arch.to_string(), "gfx10-3-generic");
        let unknown = BundleId::parse("hip-amdgcn-amd-amdhsa--gfx9999:xnack-");
        assert!(matches!(unknown.arch, Arch::Unknown { .. }));
        assert_eq!(unknown.target_id, "gfx9999:xnack-");
        for odd in ["", "-", "hip", "hip-", ":::", "a-b-c-d-e-f-gfx90a"] {
            let _ = BundleId::parse(odd);
        }
    }
}
