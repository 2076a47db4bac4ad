//! Offload entry tables: the kernels and variables a host program registers.
//!
//! Two layouts, little-endian, 64-bit pointers, read byte-wise (sections may be
//! misaligned):
//!
//! - legacy `__tgt_offload_entry` (LLVM ≤ 19), 32 bytes: ptr address, ptr name,
//!   u64 size, i32 flags, i32 reserved (LLVM 18/19 call it `data`). Sections
//!   `omp_offloading_entries`, `cuda_offloading_entries`, `hip_offloading_entries`
//!   and AOMP's `.omp_offloading_entries` (seed 000); clang-19 gives them align 1.
//! - `llvm::offloading::EntryTy` (LLVM 20+), 56 bytes, align 8, one section
//!   `llvm_offload_entries` shared by every runtime: u64 reserved (0), u16 version
//!   (1), u16 kind (offload-kind bits), u32 flags, ptr address, ptr symbol name,
//!   u64 size, u64 data, ptr aux address (llvm/include/llvm/Frontend/Offloading/Utility.h).
//!
//! libomptarget (`PluginManager::upgradeLegacyEntries`, offload/libomptarget/PluginManager.cpp)
//! tells them apart by the first word of the first entry: zero is the LLVM 20+
//! layout, anything else a legacy address. That holds in relocated memory, which
//! is what libomptarget sees. In file bytes the legacy address is often still zero
//! because it lives in a relocation: in relocatable objects, and in PIEs and shared
//! libraries linked by lld, which does not write dynamic-relocation addends into
//! the section (checked with clang-19 and ld.lld 22). For file bytes, pick the
//! layout by section name with [`Layout::of_section`].
//!
//! Addresses and names are pointer values: this module never follows them.

use std::fmt;

use crate::error::{Error, ErrorKind, Result};
use crate::read::Bytes;
use crate::target::OffloadKind;

/// The LLVM 20+ entry section (`getOffloadEntrySection` in
/// llvm/lib/Frontend/Offloading/Utility.cpp, ELF and COFF).
pub const SECTION: &str = "llvm_offload_entries";

/// The legacy entry sections with the runtime each belongs to: clang ≤ 19
/// (`omp_`, `cuda_`, `hip_offloading_entries`) and AOMP's clang-offload-wrapper
/// (`.omp_offloading_entries`, seed 000).
pub const LEGACY_SECTIONS: [(&str, OffloadKind); 4] = [
    ("omp_offloading_entries", OffloadKind::OpenMp),
    (".omp_offloading_entries", OffloadKind::OpenMp),
    ("cuda_offloading_entries", OffloadKind::Cuda),
    ("hip_offloading_entries", OffloadKind::Hip),
];

/// Which entry layout a table uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layout {
    /// 32-byte `__tgt_offload_entry` (LLVM ≤ 19).
    Legacy,
    /// 56-byte `llvm::offloading::EntryTy`, version 1 (LLVM 20+).
    V1,
}

impl Layout {
    /// Size of one entry: 32 bytes legacy, 56 bytes LLVM 20+ (both on 64-bit hosts).
    pub const fn entry_size(self) -> u64 {
        match self {
            Layout::Legacy => 32,
            Layout::V1 => 56,
        }
    }

    /// The layout of a table by libomptarget's rule (`upgradeLegacyEntries`): a
    /// non-zero first word is a legacy address; zero is the LLVM 20+ reserved
    /// word. An empty table counts as legacy, a non-empty one shorter than a word
    /// as LLVM 20+ (so its length check fails). Reliable on relocated memory; for
    /// file bytes see the module documentation and [`Layout::of_section`].
    pub fn detect(table: &[u8]) -> Layout {
        match Bytes(table).u64(0, "offload entry") {
            Ok(0) => Layout::V1,
            _ if table.is_empty() => Layout::Legacy,
            Ok(_) => Layout::Legacy,
            // Too short for one word: neither layout fits; the length check reports it.
            Err(_) => Layout::V1,
        }
    }

    /// The layout a section of this name holds ([`SECTION`] or one of
    /// [`LEGACY_SECTIONS`]), or `None` for another name.
    pub fn of_section(name: &str) -> Option<Layout> {
        if name == SECTION {
            Some(Layout::V1)
        } else {
            legacy_runtime(name).map(|_| Layout::Legacy)
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layout::Legacy => "legacy (32-byte entries)",
            Layout::V1 => "LLVM 20+ (56-byte entries)",
        })
    }
}

/// The runtime a legacy entry section belongs to (its name says; the entries do
/// not), or `None` for a name not in [`LEGACY_SECTIONS`].
pub fn legacy_runtime(section: &str) -> Option<OffloadKind> {
    LEGACY_SECTIONS
        .iter()
        .find(|(name, _)| *name == section)
        .map(|(_, kind)| kind.clone())
}

/// One entry, its raw fields. Pointers are the values stored in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Offset of the entry from the start of the table.
    pub offset: u64,
    /// The layout it was read with.
    pub layout: Layout,
    /// Host address of the kernel stub or variable (`addr` / `Address`).
    pub address: u64,
    /// Address of the NUL-terminated symbol name (`name` / `SymbolName`).
    pub name: u64,
    /// Size in bytes: 0 for a kernel.
    pub size: u64,
    /// Flags; their meaning depends on the runtime ([`GpuFlags`], [`OmpFlags`]).
    pub flags: u32,
    /// Offload-kind bits (`Kind`, LLVM 20+): 1 OpenMP, 2 CUDA, 4 HIP, 8 SYCL; 0 in
    /// legacy tables.
    pub kind_bits: u16,
    /// Extra data (`Data`): the requires bits of a `.requires` entry, a managed
    /// variable's alignment, a surface or texture type. In legacy tables this is the
    /// trailing i32, sign-extended as libomptarget's `upgradeLegacyEntries` does.
    pub data: u64,
    /// Auxiliary address (`AuxAddr`, LLVM 20+; a managed variable's shadow
    /// pointer), 0 in legacy tables.
    pub aux: u64,
}

impl Entry {
    /// The runtime the entry names itself (LLVM 20+ kind bits), or `None` when it
    /// does not: a legacy entry (its section decides) or kind 0.
    pub fn runtime(&self) -> Option<OffloadKind> {
        match (self.layout, self.kind_bits) {
            (Layout::Legacy, _) | (_, 0) => None,
            (Layout::V1, bits) => Some(OffloadKind::from_bits(bits)),
        }
    }

    /// What the entry registers: read with the entry's own runtime
    /// ([`Entry::runtime`]) when it names one, else with `section_runtime` (the
    /// runtime of the legacy section it came from).
    pub fn kind(&self, section_runtime: &OffloadKind) -> EntryKind {
        match self.runtime() {
            Some(own) => EntryKind::of(self, &own),
            None => EntryKind::of(self, section_runtime),
        }
    }

    /// The requirements of an OpenMP `.requires` entry (flags `0x10`, the bits in
    /// `data`), or `None` for any other entry; `section_runtime` as for
    /// [`Entry::kind`] (a HIP `__constant__` variable also has flag `0x10`).
    pub fn requires(&self, section_runtime: &OffloadKind) -> Option<Requires> {
        (self.kind(section_runtime) == EntryKind::Requires).then_some(Requires(self.data))
    }

    /// A one-line description such as "kernel", "managed variable (extern)" or
    /// "requires unified_shared_memory"; `section_runtime` as for [`Entry::kind`].
    pub fn describe(&self, section_runtime: &OffloadKind) -> Description {
        let runtime = self.runtime().unwrap_or_else(|| section_runtime.clone());
        Description {
            kind: EntryKind::of(self, &runtime),
            gpu: matches!(runtime, OffloadKind::Hip | OffloadKind::Cuda),
            flags: self.flags,
            data: self.data,
        }
    }
}

/// What an entry registers, by the flag meanings of the runtime that reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// A kernel: size 0 (HIP/CUDA: `__hipRegisterFunction`; OpenMP: a target region).
    Kernel,
    /// A plain device variable (HIP/CUDA type 0; OpenMP `to`/`enter`).
    Global,
    /// A HIP/CUDA `__managed__` variable (type 1).
    Managed,
    /// A HIP/CUDA surface reference (type 2).
    Surface,
    /// A HIP/CUDA texture reference (type 3).
    Texture,
    /// An OpenMP `declare target link` variable (flag 0x1).
    Link,
    /// An OpenMP `declare target indirect` function pointer (flag 0x8).
    Indirect,
    /// An OpenMP indirect vtable (flag 0x20, `OMP_DECLARE_TARGET_INDIRECT_VTABLE`).
    Vtable,
    /// OpenMP requirements (flag 0x10, entry `.requires`; `data` holds [`Requires`]).
    Requires,
    /// An old OpenMP device global constructor (flag 0x2 with size 0; seed 000).
    Ctor,
    /// An old OpenMP device global destructor (flag 0x4 with size 0; seed 000).
    Dtor,
    /// A HIP/CUDA variable type (flags & 7) clang's registration code skips (4-7).
    Unknown,
}

impl EntryKind {
    /// The entry's kind when `runtime` reads it:
    /// - HIP/CUDA, as `createRegisterGlobalsFunction` (llvm/lib/Frontend/Offloading/OffloadWrapper.cpp)
    ///   does: size 0 is a kernel, otherwise the low 3 flag bits give the type
    ///   (`OffloadEntryKindFlag` in Utility.h).
    /// - OpenMP (and any other runtime), as libomptarget does: requires (0x10),
    ///   indirect vtable (0x20) and indirect (0x8) first, then size 0 is a kernel
    ///   (or an old ctor/dtor, 0x2/0x4), then link (0x1), else a variable.
    pub fn of(entry: &Entry, runtime: &OffloadKind) -> EntryKind {
        match runtime {
            OffloadKind::Hip | OffloadKind::Cuda => {
                if entry.size == 0 {
                    return EntryKind::Kernel;
                }
                match entry.flags & GpuFlags::TYPE_MASK {
                    0 => EntryKind::Global,
                    1 => EntryKind::Managed,
                    2 => EntryKind::Surface,
                    3 => EntryKind::Texture,
                    _ => EntryKind::Unknown,
                }
            }
            _ => {
                let f = OmpFlags(entry.flags);
                if f.is_requires() {
                    EntryKind::Requires
                } else if f.0 & OmpFlags::INDIRECT_VTABLE != 0 {
                    EntryKind::Vtable
                } else if f.0 & OmpFlags::INDIRECT != 0 {
                    EntryKind::Indirect
                } else if entry.size == 0 {
                    if f.0 & OmpFlags::CTOR != 0 {
                        EntryKind::Ctor
                    } else if f.0 & OmpFlags::DTOR != 0 {
                        EntryKind::Dtor
                    } else {
                        EntryKind::Kernel
                    }
                } else if f.0 & OmpFlags::LINK != 0 {
                    EntryKind::Link
                } else {
                    EntryKind::Global
                }
            }
        }
    }

    /// The kind in words ("kernel", "managed variable", ...).
    pub fn name(self) -> &'static str {
        match self {
            EntryKind::Kernel => "kernel",
            EntryKind::Global => "variable",
            EntryKind::Managed => "managed variable",
            EntryKind::Surface => "surface",
            EntryKind::Texture => "texture",
            EntryKind::Link => "link variable",
            EntryKind::Indirect => "indirect function",
            EntryKind::Vtable => "indirect vtable",
            EntryKind::Requires => "requires",
            EntryKind::Ctor => "constructor",
            EntryKind::Dtor => "destructor",
            EntryKind::Unknown => "unknown entry",
        }
    }
}

impl fmt::Display for EntryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An entry in words, from [`Entry::describe`]: its kind, then the requirement
/// names of a `.requires` entry or the HIP/CUDA modifier flags of a variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Description {
    kind: EntryKind,
    gpu: bool,
    flags: u32,
    data: u64,
}

impl Description {
    /// The entry's kind.
    pub fn kind(&self) -> EntryKind {
        self.kind
    }
}

impl fmt::Display for Description {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.kind)?;
        match self.kind {
            EntryKind::Requires => write!(f, " {}", Requires(self.data)),
            EntryKind::Kernel => Ok(()),
            _ if self.gpu => {
                let mods = GpuFlags(self.flags & !GpuFlags::TYPE_MASK);
                if mods.0 != 0 {
                    write!(f, " ({mods})")?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// Writes the names of the set bits of `value` from `names`, then any bits left
/// over in hex, separated by ", "; `none` when no bit is set.
fn write_bits(f: &mut fmt::Formatter<'_>, value: u64, names: &[(u64, &str)]) -> fmt::Result {
    if value == 0 {
        return f.write_str("none");
    }
    let mut rest = value;
    let mut sep = "";
    for &(bit, name) in names {
        if value & bit != 0 {
            write!(f, "{sep}{name}")?;
            sep = ", ";
            rest &= !bit;
        }
    }
    if rest != 0 {
        write!(f, "{sep}{rest:#x}")?;
    }
    Ok(())
}

/// HIP/CUDA entry flags (`OffloadEntryKindFlag`, llvm/include/llvm/Frontend/Offloading/Utility.h):
/// the low 3 bits are the type (0 global, 1 managed, 2 surface, 3 texture), the
/// others modifiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GpuFlags(pub u32);

impl GpuFlags {
    /// The type field (`flags & 7`).
    pub const TYPE_MASK: u32 = 0x7;
    /// `OffloadGlobalExtern`: the variable is `extern`.
    pub const EXTERN: u32 = 0x8;
    /// `OffloadGlobalConstant`: a `__constant__` variable.
    pub const CONSTANT: u32 = 0x10;
    /// `OffloadGlobalNormalized`: a texture with normalised coordinates.
    pub const NORMALIZED: u32 = 0x20;

    /// The type field: 0 global, 1 managed, 2 surface, 3 texture.
    pub fn type_bits(self) -> u32 {
        self.0 & Self::TYPE_MASK
    }

    /// Whether [`GpuFlags::EXTERN`] is set.
    pub fn is_extern(self) -> bool {
        self.0 & Self::EXTERN != 0
    }

    /// Whether [`GpuFlags::CONSTANT`] is set.
    pub fn is_constant(self) -> bool {
        self.0 & Self::CONSTANT != 0
    }

    /// Whether [`GpuFlags::NORMALIZED`] is set.
    pub fn is_normalized(self) -> bool {
        self.0 & Self::NORMALIZED != 0
    }
}

impl fmt::Display for GpuFlags {
    /// The type unless it is 0 (global), then the modifiers: "managed, extern";
    /// unknown bits in hex, "none" for 0.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: [(u64, &str); 3] = [
            (Self::EXTERN.into(), "extern"),
            (Self::CONSTANT.into(), "constant"),
            (Self::NORMALIZED.into(), "normalized"),
        ];
        let mods = u64::from(self.0 & !Self::TYPE_MASK);
        let ty = match self.type_bits() {
            1 => "managed",
            2 => "surface",
            3 => "texture",
            // 0 is a plain variable; 4-7 are unknown and shown in hex.
            other => return write_bits(f, mods | u64::from(other), &names),
        };
        f.write_str(ty)?;
        if mods != 0 {
            f.write_str(", ")?;
            write_bits(f, mods, &names)?;
        }
        Ok(())
    }
}

/// OpenMP entry flags (`OpenMPOffloadingDeclareTargetFlags`, offload/include/omptarget.h;
/// ctor/dtor from the older table in seed 000).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OmpFlags(pub u32);

impl OmpFlags {
    /// `OMP_DECLARE_TARGET_LINK`: a `declare target link` variable.
    pub const LINK: u32 = 0x1;
    /// `OMP_DECLARE_TARGET_CTOR` (removed from libomptarget): a device global
    /// constructor. OMPIRBuilder's `OMPTargetGlobalVarEntryEnter` reuses 0x2, but
    /// clang writes `enter` variables with flags 0.
    pub const CTOR: u32 = 0x2;
    /// `OMP_DECLARE_TARGET_DTOR` (removed from libomptarget): a device global destructor.
    pub const DTOR: u32 = 0x4;
    /// `OMP_DECLARE_TARGET_INDIRECT`: an indirectly callable function.
    pub const INDIRECT: u32 = 0x8;
    /// `OMP_REGISTER_REQUIRES`: the `.requires` entry; `data` holds [`Requires`] bits.
    pub const REQUIRES: u32 = 0x10;
    /// `OMP_DECLARE_TARGET_INDIRECT_VTABLE`: an indirect vtable.
    pub const INDIRECT_VTABLE: u32 = 0x20;

    /// Whether [`OmpFlags::REQUIRES`] is set.
    pub fn is_requires(self) -> bool {
        self.0 & Self::REQUIRES != 0
    }
}

impl fmt::Display for OmpFlags {
    /// The flag names, "link, indirect", or "none".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_bits(
            f,
            self.0.into(),
            &[
                (Self::LINK.into(), "link"),
                (Self::CTOR.into(), "ctor"),
                (Self::DTOR.into(), "dtor"),
                (Self::INDIRECT.into(), "indirect"),
                (Self::REQUIRES.into(), "requires"),
                (Self::INDIRECT_VTABLE.into(), "vtable"),
            ],
        )
    }
}

/// OpenMP `requires` clause bits carried in a `.requires` entry's `data`
/// (`OpenMPOffloadingRequiresDirFlags`, offload/include/OpenMP/Requirements.h and
/// llvm/lib/Frontend/OpenMP/OMPIRBuilder.cpp).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Requires(pub u64);

impl Requires {
    /// `OMP_REQ_NONE`: no requires directive.
    pub const NONE: u64 = 0x1;
    /// `OMP_REQ_REVERSE_OFFLOAD`.
    pub const REVERSE_OFFLOAD: u64 = 0x2;
    /// `OMP_REQ_UNIFIED_ADDRESS`.
    pub const UNIFIED_ADDRESS: u64 = 0x4;
    /// `OMP_REQ_UNIFIED_SHARED_MEMORY`.
    pub const UNIFIED_SHARED_MEMORY: u64 = 0x8;
    /// `OMP_REQ_DYNAMIC_ALLOCATORS`.
    pub const DYNAMIC_ALLOCATORS: u64 = 0x10;

    /// Whether every bit of `bits` is set.
    pub fn has(self, bits: u64) -> bool {
        self.0 & bits == bits
    }
}

impl fmt::Display for Requires {
    /// The clause names as written in `#pragma omp requires`, "unified_shared_memory".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_bits(
            f,
            self.0,
            &[
                (Self::NONE, "none"),
                (Self::REVERSE_OFFLOAD, "reverse_offload"),
                (Self::UNIFIED_ADDRESS, "unified_address"),
                (Self::UNIFIED_SHARED_MEMORY, "unified_shared_memory"),
                (Self::DYNAMIC_ALLOCATORS, "dynamic_allocators"),
            ],
        )
    }
}

/// An entry table over borrowed bytes, checked to hold whole entries; entries
/// are read on demand.
#[derive(Debug, Clone, Copy)]
pub struct EntryTable<'a> {
    /// Its layout.
    pub layout: Layout,
    bytes: &'a [u8],
}

impl<'a> EntryTable<'a> {
    /// A table whose layout is told by libomptarget's rule ([`Layout::detect`]):
    /// right for memory a loader relocated. For file bytes use
    /// [`EntryTable::parse_with`] and [`Layout::of_section`], since unrelocated
    /// legacy addresses read as zero.
    pub fn parse(data: &'a [u8]) -> Result<EntryTable<'a>> {
        Self::parse_with(data, Layout::detect(data))
    }

    /// A table of a known layout. Its length must be a multiple of the entry size
    /// (entries are 8-byte multiples, so linkers put them back to back); otherwise
    /// the error names the offset of the partial entry.
    pub fn parse_with(data: &'a [u8], layout: Layout) -> Result<EntryTable<'a>> {
        let size = layout.entry_size();
        let len = data.len() as u64;
        let partial = len % size;
        if partial != 0 {
            let at = len - partial;
            return Err(Error::new(
                at,
                ErrorKind::Truncated {
                    what: match layout {
                        Layout::Legacy => "legacy offload entry",
                        Layout::V1 => "offload entry",
                    },
                    needed: at + size,
                    available: len,
                },
            ));
        }
        Ok(EntryTable {
            layout,
            bytes: data,
        })
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        // Bounded by the slice length, so it fits a usize.
        self.bytes.len() / self.layout.entry_size() as usize
    }

    /// Whether the table has no entries.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The entries in order, read lazily. An LLVM 20+ entry whose reserved word is
    /// not 0 or whose version is not 1 is an error; the next entries are still read.
    pub fn iter(&self) -> Entries<'a> {
        Entries {
            table: *self,
            next: 0,
        }
    }
}

impl<'a> IntoIterator for &EntryTable<'a> {
    type Item = Result<Entry>;
    type IntoIter = Entries<'a>;

    fn into_iter(self) -> Entries<'a> {
        self.iter()
    }
}

/// Iterator over the entries of an [`EntryTable`].
#[derive(Debug, Clone)]
pub struct Entries<'a> {
    table: EntryTable<'a>,
    next: usize,
}

impl Iterator for Entries<'_> {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Result<Entry>> {
        if self.next >= self.table.len() {
            return None;
        }
        let at = self.next as u64 * self.table.layout.entry_size();
        self.next += 1;
        Some(read_entry(Bytes(self.table.bytes), at, self.table.layout))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.table.len().saturating_sub(self.next);
        (left, Some(left))
    }
}

impl ExactSizeIterator for Entries<'_> {}

/// Reads the entry at `at` (known to lie wholly in `b`).
fn read_entry(b: Bytes<'_>, at: u64, layout: Layout) -> Result<Entry> {
    match layout {
        Layout::Legacy => Ok(Entry {
            offset: at,
            layout,
            address: b.u64(at, "entry address")?,
            name: b.u64(at + 8, "entry name")?,
            size: b.u64(at + 16, "entry size")?,
            flags: b.u32(at + 24, "entry flags")?,
            kind_bits: 0,
            data: b.u32(at + 28, "entry data")? as i32 as i64 as u64,
            aux: 0,
        }),
        Layout::V1 => {
            let reserved = b.u64(at, "entry reserved word")?;
            if reserved != 0 {
                return Err(Error::new(
                    at,
                    ErrorKind::BadValue {
                        what: "offload entry reserved word (must be 0)",
                        value: reserved,
                    },
                ));
            }
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
                layout,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An LLVM 20+ entry as Utility.h lays it out.
    fn v1(kind: u16, flags: u32, addr: u64, size: u64, data: u64, aux: u64) -> Vec<u8> {
        let mut e = Vec::new();
        e.extend(0u64.to_le_bytes());
        e.extend(1u16.to_le_bytes());
        e.extend(kind.to_le_bytes());
        e.extend(flags.to_le_bytes());
        e.extend(addr.to_le_bytes());
        e.extend(0x5000u64.to_le_bytes());
        e.extend(size.to_le_bytes());
        e.extend(data.to_le_bytes());
        e.extend(aux.to_le_bytes());
        assert_eq!(e.len(), 56);
        e
    }

    /// A legacy `__tgt_offload_entry`.
    fn legacy(addr: u64, size: u64, flags: u32, data: i32) -> Vec<u8> {
        let mut e = Vec::new();
        e.extend(addr.to_le_bytes());
        e.extend(0x6000u64.to_le_bytes());
        e.extend(size.to_le_bytes());
        e.extend(flags.to_le_bytes());
        e.extend(data.to_le_bytes());
        assert_eq!(e.len(), 32);
        e
    }

    fn all(table: &EntryTable<'_>) -> Vec<Entry> {
        table.iter().collect::<Result<_>>().unwrap()
    }

    #[test]
    fn new_layout_hip_table() {
        // What clang-22 writes for kernels.hip: two kernels, a __constant__ and a
        // __managed__ variable (data = alignment, aux = shadow pointer).
        let mut t = v1(4, 0, 0x1000, 0, 0, 0);
        t.extend(v1(4, 0, 0x1008, 0, 0, 0));
        t.extend(v1(4, 0x10, 0x2000, 4, 0, 0));
        t.extend(v1(4, 0x1, 0x2010, 4, 4, 0x2018));
        t.extend(v1(4, 0x3 | 0x20 | 0x8, 0x2020, 8, 2, 0));
        let table = EntryTable::parse(&t).unwrap();
        assert_eq!(table.layout, Layout::V1);
        assert_eq!(table.len(), 5);
        assert_eq!(table.iter().len(), 5);
        let e = all(&table);
        let omp = OffloadKind::OpenMp;
        assert_eq!(e[0].runtime(), Some(OffloadKind::Hip));
        assert_eq!(e[1].offset, 56);
        assert_eq!(e[1].address, 0x1008);
        assert_eq!(e[0].kind(&omp), EntryKind::Kernel);
        assert_eq!(e[2].kind(&omp), EntryKind::Global);
        assert_eq!(e[3].kind(&omp), EntryKind::Managed);
        assert_eq!((e[3].data, e[3].aux), (4, 0x2018));
        assert_eq!(e[4].kind(&omp), EntryKind::Texture);
        assert_eq!(e[2].describe(&omp).to_string(), "variable (constant)");
        assert_eq!(e[3].describe(&omp).to_string(), "managed variable");
        assert_eq!(
            e[4].describe(&omp).to_string(),
            "texture (extern, normalized)"
        );
        assert_eq!(e[0].describe(&omp).to_string(), "kernel");
        assert_eq!(e[0].requires(&omp), None);
        assert_eq!(e[2].requires(&omp), None);
    }

    #[test]
    fn new_layout_openmp_table() {
        let mut t = v1(1, 0, 0x1000, 0, 0, 0); // target region
        t.extend(v1(1, 0x1, 0x2000, 8, 0, 0)); // link
        t.extend(v1(1, 0x8, 0x3000, 8, 0, 0)); // indirect
        t.extend(v1(1, 0x10, 0, 0, 0x8, 0)); // .requires
        t.extend(v1(1, 0x20, 0x4000, 24, 0, 0)); // vtable
        t.extend(v1(1, 0, 0x5000, 4, 0, 0)); // to/enter variable
        let table = EntryTable::parse(&t).unwrap();
        let hip = OffloadKind::Hip;
        let kinds: Vec<EntryKind> = all(&table).iter().map(|e| e.kind(&hip)).collect();
        assert_eq!(
            kinds,
            [
                EntryKind::Kernel,
                EntryKind::Link,
                EntryKind::Indirect,
                EntryKind::Requires,
                EntryKind::Vtable,
                EntryKind::Global
            ]
        );
        let req = all(&table)[3];
        assert_eq!(req.requires(&hip), Some(Requires(8)));
        assert!(req
            .requires(&hip)
            .unwrap()
            .has(Requires::UNIFIED_SHARED_MEMORY));
        assert_eq!(
            req.describe(&hip).to_string(),
            "requires unified_shared_memory"
        );
    }

    #[test]
    fn legacy_tables_take_the_runtime_of_their_section() {
        // clang-19 OpenMP: a link variable, a kernel and `.requires` with its bits
        // in the trailing i32.
        let mut t = legacy(0x1000, 8, 0x1, 0);
        t.extend(legacy(0x2000, 0, 0, 0));
        t.extend(legacy(0, 0, 0x10, 0x8 | 0x2));
        let table = EntryTable::parse(&t).unwrap();
        assert_eq!(table.layout, Layout::Legacy);
        let e = all(&table);
        let omp = legacy_runtime("omp_offloading_entries").unwrap();
        assert_eq!(e[0].runtime(), None);
        assert_eq!(e[0].kind(&omp), EntryKind::Link);
        assert_eq!(e[1].kind(&omp), EntryKind::Kernel);
        assert_eq!(e[2].kind(&omp), EntryKind::Requires);
        assert_eq!(
            e[2].describe(&omp).to_string(),
            "requires reverse_offload, unified_shared_memory"
        );
        // The same link entry read as HIP: flags type 1 is managed.
        let hip = legacy_runtime("hip_offloading_entries").unwrap();
        assert_eq!(e[0].kind(&hip), EntryKind::Managed);
        assert_eq!(e[2].requires(&omp), Some(Requires(0xa)));
        // Flag 0x10 in a HIP table is __constant__, not requires.
        assert_eq!(e[2].requires(&hip), None);
        // Negative trailing i32 sign-extends like libomptarget's upgrade.
        let neg = legacy(0x1000, 4, 0, -1);
        let e = all(&EntryTable::parse(&neg).unwrap());
        assert_eq!(e[0].data, u64::MAX);
    }

    #[test]
    fn old_openmp_ctor_and_dtor() {
        let mut t = legacy(0x1000, 0, OmpFlags::CTOR, 0);
        t.extend(legacy(0x1008, 0, OmpFlags::DTOR, 0));
        let e = all(&EntryTable::parse(&t).unwrap());
        assert_eq!(e[0].kind(&OffloadKind::OpenMp), EntryKind::Ctor);
        assert_eq!(e[1].kind(&OffloadKind::OpenMp), EntryKind::Dtor);
    }

    #[test]
    fn sections_name_their_layout() {
        assert_eq!(Layout::of_section("llvm_offload_entries"), Some(Layout::V1));
        assert_eq!(
            Layout::of_section(".omp_offloading_entries"),
            Some(Layout::Legacy)
        );
        assert_eq!(Layout::of_section(".text"), None);
        assert_eq!(
            legacy_runtime("cuda_offloading_entries"),
            Some(OffloadKind::Cuda)
        );
        assert_eq!(legacy_runtime("llvm_offload_entries"), None);
    }

    #[test]
    fn relocatable_legacy_table_needs_its_section_name() {
        // In a .o the address is a relocation, so the first word reads 0 and
        // libomptarget's rule says LLVM 20+; the section name gets it right.
        let mut t = legacy(0, 0, 0, 0);
        t.extend(legacy(0, 4, 0, 0));
        assert!(EntryTable::parse(&t).is_err());
        let table = EntryTable::parse_with(&t, Layout::Legacy).unwrap();
        assert_eq!(table.len(), 2);
        assert_eq!(all(&table)[1].size, 4);
    }

    #[test]
    fn partial_entries_are_errors_with_offset() {
        let mut t = v1(4, 0, 0x1000, 0, 0, 0);
        t.extend(v1(4, 0, 0x1008, 0, 0, 0));
        let err = EntryTable::parse(&t[..100]).unwrap_err();
        assert_eq!(err.offset, 56);
        assert!(matches!(
            err.kind,
            ErrorKind::Truncated {
                needed: 112,
                available: 100,
                ..
            }
        ));
        // Shorter than a word: too short for either layout.
        assert!(EntryTable::parse(&[0, 0, 0]).is_err());
        assert!(EntryTable::parse(&[1, 0, 0]).is_err());
        let l = legacy(0x1000, 0, 0, 0);
        let err = EntryTable::parse(&l[..31]).unwrap_err();
        assert_eq!(err.offset, 0);
        assert!(EntryTable::parse_with(&t, Layout::Legacy).is_err());
    }

    #[test]
    fn misaligned_input_reads_the_same() {
        let mut t = v1(2, 0x1, 0x1234_5678_9abc_def0, 16, 8, 0x42);
        t.extend(v1(2, 0, 0x1000, 0, 0, 0));
        let mut shifted = vec![0xee];
        shifted.extend(&t);
        let aligned = all(&EntryTable::parse(&t).unwrap());
        let table = EntryTable::parse(&shifted[1..]).unwrap();
        assert_eq!(all(&table), aligned);
        assert_eq!(aligned[0].address, 0x1234_5678_9abc_def0);
        assert_eq!(aligned[0].kind(&OffloadKind::OpenMp), EntryKind::Managed);
    }

    #[test]
    fn bad_version_or_reserved_word_is_an_error_for_that_entry() {
        let mut t = v1(4, 0, 0x1000, 0, 0, 0);
        t.extend(v1(4, 0, 0x1008, 0, 0, 0));
        t.extend(v1(4, 0, 0x1010, 0, 0, 0));
        t[56 + 8] = 2; // second entry: version 2
        t[112 + 3] = 1; // third entry: reserved word non-zero
        let r: Vec<Result<Entry>> = EntryTable::parse(&t).unwrap().iter().collect();
        assert!(r[0].is_ok());
        let err = r[1].clone().unwrap_err();
        assert_eq!(err.offset, 64);
        assert!(matches!(
            err.kind,
            ErrorKind::UnsupportedVersion { version: 2, .. }
        ));
        let err = r[2].clone().unwrap_err();
        assert_eq!(err.offset, 112);
        assert!(matches!(
            err.kind,
            ErrorKind::BadValue {
                value: 0x0100_0000,
                ..
            }
        ));
        // Version 0 in the first entry.
        let mut z = v1(1, 0, 0, 0, 0, 0);
        z[8] = 0;
        let first = EntryTable::parse(&z).unwrap().iter().next().unwrap();
        assert!(matches!(
            first.unwrap_err().kind,
            ErrorKind::UnsupportedVersion { version: 0, .. }
        ));
    }

    #[test]
    fn empty_table_has_no_entries() {
        let table = EntryTable::parse(&[]).unwrap();
        assert!(table.is_empty());
        assert_eq!(table.iter().count(), 0);
        assert_eq!((&table).into_iter().size_hint(), (0, Some(0)));
    }

    #[test]
    fn flags_display() {
        assert_eq!(GpuFlags(0x1 | 0x8).to_string(), "managed, extern");
        assert_eq!(GpuFlags(0x10).to_string(), "constant");
        assert_eq!(GpuFlags(0).to_string(), "none");
        assert_eq!(GpuFlags(0x5 | 0x40).to_string(), "0x45");
        assert!(GpuFlags(0x23).is_normalized());
        assert_eq!(GpuFlags(0x23).type_bits(), 3);
        assert_eq!(OmpFlags(0x9).to_string(), "link, indirect");
        assert_eq!(OmpFlags(0).to_string(), "none");
        assert_eq!(OmpFlags(0x100).to_string(), "0x100");
        assert_eq!(Requires(0x1).to_string(), "none");
        assert_eq!(
            Requires(0x14 | 0x40).to_string(),
            "unified_address, dynamic_allocators, 0x40"
        );
        assert_eq!(EntryKind::Managed.to_string(), "managed variable");
        assert_eq!(Layout::V1.entry_size(), 56);
        assert_eq!(Layout::Legacy.entry_size(), 32);
    }
}
