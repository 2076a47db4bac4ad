//! Offload entry tables: the kernels and variables a host program registers.
//!
//! Two layouts (llvm/include/llvm/Frontend/Offloading/Utility.h,
//! offload/include/Shared/APITypes.h), little-endian, 64-bit pointers:
//!
//! - legacy (LLVM ≤ 19), 32 bytes: ptr address, ptr name, u64 size, i32 flags,
//!   i32 reserved; sections `omp_offloading_entries`, `cuda_offloading_entries`,
//!   `hip_offloading_entries`, `.omp_offloading_entries`;
//! - LLVM 20+, 56 bytes, section `llvm_offload_entries`: u64 reserved (0),
//!   u16 version (1), u16 kind (offload-kind bits), u32 flags, ptr address,
//!   ptr symbol name, u64 size, u64 data, ptr aux address.
//!
//! libomptarget tells them apart by the first word: non-zero (a real address)
//! means legacy. Names are pointers: resolving them is the caller's business.

use crate::error::{Error, ErrorKind, Result};
use crate::read::Bytes;
use crate::target::OffloadKind;

/// Which entry layout a table uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// 32-byte `__tgt_offload_entry` (LLVM ≤ 19).
    Legacy,
    /// 56-byte `llvm::offloading::EntryTy` (LLVM 20+).
    V1,
}

impl Layout {
    /// Size of one entry.
    pub fn entry_size(self) -> u64 {
        match self {
            Layout::Legacy => 32,
            Layout::V1 => 56,
        }
    }
}

/// One raw entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Offset of the entry in the table.
    pub offset: u64,
    /// Host address of the kernel stub or variable.
    pub address: u64,
    /// Address of the NUL-terminated symbol name.
    pub name: u64,
    /// Size: 0 for a kernel.
    pub size: u64,
    /// Flags (meaning depends on the runtime, see [`EntryKind`]).
    pub flags: u32,
    /// Offload-kind bits (LLVM 20+ only; 0 in legacy tables).
    pub kind_bits: u16,
    /// Extra data (LLVM 20+: the requires bits of a `.requires` entry).
    pub data: u64,
    /// Auxiliary address (LLVM 20+).
    pub aux: u64,
}

/// What an entry registers, by its runtime's flag meanings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A kernel (size 0).
    Kernel,
    /// A global variable (HIP/CUDA flag type 0, or OpenMP without flags).
    Global,
    /// A managed variable (HIP/CUDA type 1).
    Managed,
    /// A surface reference (HIP/CUDA type 2).
    Surface,
    /// A texture reference (HIP/CUDA type 3).
    Texture,
    /// An OpenMP `declare target link` variable (flag 0x1).
    Link,
    /// An OpenMP indirect function (flag 0x8).
    Indirect,
    /// OpenMP requirements (flag 0x10, entry `.requires`): `data` holds the bits.
    Requires,
    /// An OpenMP vtable (flag 0x20).
    Vtable,
}

impl EntryKind {
    /// The entry's kind, given the runtime it belongs to (legacy tables do not
    /// say; their section does).
    pub fn of(entry: &Entry, runtime: &OffloadKind) -> EntryKind {
        match runtime {
            OffloadKind::OpenMp => match entry.flags {
                f if f & 0x10 != 0 => EntryKind::Requires,
                f if f & 0x20 != 0 => EntryKind::Vtable,
                f if f & 0x8 != 0 => EntryKind::Indirect,
                f if f & 0x1 != 0 => EntryKind::Link,
                _ if entry.size == 0 => EntryKind::Kernel,
                _ => EntryKind::Global,
            },
            _ if entry.size == 0 && entry.flags & 0x7 == 0 => EntryKind::Kernel,
            _ => match entry.flags & 0x7 {
                1 => EntryKind::Managed,
                2 => EntryKind::Surface,
                3 => EntryKind::Texture,
                _ => EntryKind::Global,
            },
        }
    }

    /// The kind's name.
    pub fn name(self) -> &'static str {
        match self {
            EntryKind::Kernel => "kernel",
            EntryKind::Global => "global",
            EntryKind::Managed => "managed",
            EntryKind::Surface => "surface",
            EntryKind::Texture => "texture",
            EntryKind::Link => "link",
            EntryKind::Indirect => "indirect",
            EntryKind::Requires => "requires",
            EntryKind::Vtable => "vtable",
        }
    }
}

/// OpenMP `requires` bits carried by a `.requires` entry
/// (offload/include/Shared/Requirements.h `OMP_REQ_*`).
pub const REQUIRES: &[(u64, &str)] = &[
    (0x2, "reverse_offload"),
    (0x4, "unified_address"),
    (0x8, "unified_shared_memory"),
    (0x10, "dynamic_allocators"),
];

/// HIP/CUDA variable flag: `extern` (0x8).
pub const FLAG_EXTERN: u32 = 0x8;
/// HIP/CUDA variable flag: `__constant__` (0x10).
pub const FLAG_CONSTANT: u32 = 0x10;
/// HIP/CUDA texture flag: normalised coordinates (0x20).
pub const FLAG_NORMALIZED: u32 = 0x20;

/// An entry table, zero-copy.
#[derive(Debug, Clone, Copy)]
pub struct EntryTable<'a> {
    /// Its layout.
    pub layout: Layout,
    bytes: Bytes<'a>,
}

impl<'a> EntryTable<'a> {
    /// Parses a table, telling the layout by its first word as libomptarget
    /// does. An empty table is a legacy one with no entries.
    pub fn parse(data: &'a [u8]) -> Result<EntryTable<'a>> {
        let layout = match Bytes(data).u64(0, "offload entry").ok() {
            Some(0) => Layout::V1,
            _ => Layout::Legacy,
        };
        Self::parse_with(data, layout)
    }

    /// Parses a table of a known layout; its length must be a multiple of the
    /// entry size.
    pub fn parse_with(data: &'a [u8], layout: Layout) -> Result<EntryTable<'a>> {
        let size = layout.entry_size();
        let len = data.len() as u64;
        if !len.is_multiple_of(size) {
            return Err(Error::new(
                len - len % size,
                ErrorKind::Truncated {
                    what: "offload entry",
                    needed: len - len % size + size,
                    available: len,
                },
            ));
        }
        Ok(EntryTable {
            layout,
            bytes: Bytes(data),
        })
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        (self.bytes.len() / self.layout.entry_size()) as usize
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The entries, read lazily; a bad LLVM 20+ version is an error for that entry.
    pub fn iter(&self) -> impl Iterator<Item = Result<Entry>> + '_ {
        (0..self.len() as u64).map(move |i| self.entry(i * self.layout.entry_size()))
    }

    fn entry(&self, at: u64) -> Result<Entry> {
        let b = self.bytes;
        match self.layout {
            Layout::Legacy => Ok(Entry {
                offset: at,
                address: b.u64(at, "entry address")?,
                name: b.u64(at + 8, "entry name")?,
                size: b.u64(at + 16, "entry size")?,
                flags: b.u32(at + 24, "entry flags")?,
                kind_bits: 0,
                data: 0,
                aux: 0,
            }),
            Layout::V1 => {
                let version = b.u16(at + 8, "entry version")?;
                if version != 1 {
                    return Err(Error::new(
                        at + 8,
                        ErrorKind::UnsupportedVersion {
                            what: "offload entry",
                            version: version.into(),
                        },
                    ));
                }
                Ok(Entry {
                    offset: at,
                    kind_bits: b.u16(at + 10, "entry kind")?,
                    flags: b.u32(at + 12, "entry flags")?,
                    address: b.u64(at + 16, "entry address")?,
                    name: b.u64(at + 24, "entry name")?,
                    size: b.u64(at + 32, "entry size")?,
                    data: b.u64(at + 40, "entry data")?,
                    aux: b.u64(at + 48, "entry aux address")?,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v1(kind: u16, flags: u32, addr: u64, size: u64, data: u64) -> Vec<u8> {
        let mut e = 0u64.to_le_bytes().to_vec();
        e.extend(1u16.to_le_bytes());
        e.extend(kind.to_le_bytes());
        e.extend(flags.to_le_bytes());
        e.extend(addr.to_le_bytes());
        e.extend(0x5000u64.to_le_bytes());
        e.extend(size.to_le_bytes());
        e.extend(data.to_le_bytes());
        e.extend(0u64.to_le_bytes());
        e
    }

    fn legacy(addr: u64, size: u64, flags: u32) -> Vec<u8> {
        let mut e = addr.to_le_bytes().to_vec();
        e.extend(0x6000u64.to_le_bytes());
        e.extend(size.to_le_bytes());
        e.extend(flags.to_le_bytes());
        e.extend(0u32.to_le_bytes());
        e
    }

    #[test]
    fn tells_layouts_apart_and_decodes_kinds() {
        let mut t = v1(4, 0, 0x1000, 0, 0);
        t.extend(v1(4, 1, 0x2000, 8, 0));
        t.extend(v1(1, 0x10, 0, 0, 0x8));
        let table = EntryTable::parse(&t).unwrap();
        assert_eq!(table.layout, Layout::V1);
        let e: Vec<Entry> = table.iter().collect::<Result<_>>().unwrap();
        assert_eq!(EntryKind::of(&e[0], &OffloadKind::Hip), EntryKind::Kernel);
        assert_eq!(EntryKind::of(&e[1], &OffloadKind::Hip), EntryKind::Managed);
        assert_eq!(
            EntryKind::of(&e[2], &OffloadKind::OpenMp),
            EntryKind::Requires
        );
        assert_eq!(e[2].data, 8);

        let mut l = legacy(0x1000, 0, 0);
        l.extend(legacy(0x2000, 4, 1));
        let table = EntryTable::parse(&l[..]).unwrap();
        assert_eq!(table.layout, Layout::Legacy);
        let e: Vec<Entry> = table.iter().collect::<Result<_>>().unwrap();
        assert_eq!(e[1].address, 0x2000);
        assert_eq!(EntryKind::of(&e[1], &OffloadKind::OpenMp), EntryKind::Link);
        assert_eq!(EntryKind::of(&e[1], &OffloadKind::Cuda), EntryKind::Managed);
    }

    #[test]
    fn rejects_partial_entries_and_bad_versions() {
        let t = v1(4, 0, 0x1000, 0, 0);
        assert!(EntryTable::parse(&t[..55]).is_err());
        let mut shifted = vec![0];
        shifted.extend(&t);
        assert_eq!(EntryTable::parse(&shifted[1..]).unwrap().len(), 1);
        let mut bad = t.clone();
        bad[8] = 2;
        assert!(matches!(
            EntryTable::parse(&bad)
                .unwrap()
                .iter()
                .next()
                .unwrap()
                .unwrap_err()
                .kind,
            ErrorKind::UnsupportedVersion { version: 2, .. }
        ));
        assert!(EntryTable::parse(&[]).unwrap().is_empty());
    }
}
