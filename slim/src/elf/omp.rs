//! OpenMP's device-image table (clang-linker-wrapper's
//! `.omp_offloading.device_images`): entries go with their images.

use object::elf;
use object::read::elf::{Rela, SectionHeader};
use object::LittleEndian as LE;

use crate::refusal::{unsafe_, Unsafe};

use super::patches::Patches;
use super::point::Point;

/// OpenMP's device-image table (clang-linker-wrapper's
/// `.omp_offloading.device_images`): `__tgt_device_image` entries of 32
/// bytes (ImageStart, ImageEnd, EntriesBegin, EntriesEnd) whose image
/// pointers point into the section, and the `__tgt_bin_desc` that counts
/// them (u32 NumDeviceImages at 0, the array's address at 8), found from
/// their `R_*_RELATIVE` relocations. When an image goes, its entry goes:
/// the later entries move down, the count drops, and the relocations of a
/// removed entry are pointed at the table's unused tail (glibc applies the
/// first `DT_RELACOUNT` relocations as relative whatever their type, so
/// they cannot simply become `R_*_NONE`).
pub(super) struct OmpTable {
    /// The array's address, its entries, and the file offset of the count.
    pub(super) array: u64,
    pub(super) entries: u64,
    pub(super) count_at: u64,
    pub(super) array_at: u64,
    /// Each entry's new slot.
    pub(super) slots: Vec<u64>,
    pub(super) kept: u64,
    /// Which entries go.
    pub(super) gone: Vec<bool>,
}

pub(super) const IMAGE_ENTRY: u64 = 32;

/// Every relative relocation of a file's `SHT_RELA` tables: where, and what
/// it points to, sorted by where (of two at one place, the later).
pub(super) struct Words(pub(super) Vec<(u64, u64)>);

impl Words {
    pub(super) fn relative(
        data: &[u8],
        shdrs: &[elf::SectionHeader64<LE>],
        endian: LE,
        relative: u32,
    ) -> Words {
        let mut words = Vec::new();
        for s in shdrs.iter().filter(|s| s.sh_type(endian) == elf::SHT_RELA) {
            let Ok(relas) = s.data_as_array::<elf::Rela64<LE>, _>(endian, data) else {
                continue;
            };
            words.extend(
                relas
                    .iter()
                    .filter(|r| r.r_type(endian, false) == relative && r.r_sym(endian, false) == 0)
                    .map(|r| (r.r_offset(endian), r.r_addend(endian) as u64)),
            );
        }
        // Stable, and linear on tables already sorted, as linkers write them.
        words.sort_by_key(|&(at, _)| at);
        let mut last: Vec<(u64, u64)> = Vec::with_capacity(words.len());
        for w in words {
            match last.last_mut() {
                Some(l) if l.0 == w.0 => *l = w,
                _ => last.push(w),
            }
        }
        Words(last)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.0.iter().copied()
    }

    /// What the relocation at `at` points to.
    pub(super) fn get(&self, at: u64) -> Option<u64> {
        let i = self.0.binary_search_by_key(&at, |&(a, _)| a).ok()?;
        Some(self.0[i].1)
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn omp_table(
    data: &[u8],
    shdrs: &[elf::SectionHeader64<LE>],
    endian: LE,
    relative: Option<u32>,
    addr: u64,
    size: u64,
    file_offset: &dyn Fn(u64) -> Option<u64>,
    in_removed: &dyn Fn(u64) -> bool,
) -> Result<Option<OmpTable>, Unsafe> {
    let Some(relative) = relative else {
        return Ok(None);
    };
    let words = Words::relative(data, shdrs, endian, relative);
    let into = |v: u64| v >= addr && v <= addr + size;
    // Slots: ImageStart and ImageEnd both into the section.
    let slots: Vec<u64> = words
        .iter()
        .filter(|&(at, v)| into(v) && words.get(at + 8).is_some_and(|e| into(e) && e > v))
        .map(|(at, _)| at)
        .collect();
    let value = |at: u64| words.get(at).unwrap_or_default();
    if slots.is_empty() || !slots.iter().any(|&at| in_removed(value(at))) {
        return Ok(None);
    }
    let array = slots[0];
    let entries = slots.len() as u64;
    if slots
        .iter()
        .enumerate()
        .any(|(i, &at)| at != array + i as u64 * IMAGE_ENTRY)
    {
        return Err(unsafe_("the OpenMP device images are not one table"));
    }
    // The descriptor: a pointer to the array, after the count.
    let desc = words
        .iter()
        .filter(|&(at, v)| v == array && at >= 8)
        .map(|(at, _)| at - 8)
        .find(|&d| {
            file_offset(d)
                .and_then(|f| data.get(f as usize..f as usize + 4))
                .is_some_and(|b| u64::from(u32::from_le_bytes(b.try_into().unwrap())) == entries)
        })
        .ok_or_else(|| unsafe_("no __tgt_bin_desc counts the OpenMP device images"))?;
    let gone: Vec<bool> = slots.iter().map(|&at| in_removed(value(at))).collect();
    let kept = gone.iter().filter(|g| !**g).count() as u64;
    let mut next_kept = 0;
    let mut next_gone = kept;
    let new_slots = gone
        .iter()
        .map(|&g| {
            let slot = if g { &mut next_gone } else { &mut next_kept };
            *slot += 1;
            *slot - 1
        })
        .collect();
    Ok(Some(OmpTable {
        array,
        entries,
        count_at: file_offset(desc).ok_or_else(|| unsafe_("the descriptor is not in the file"))?,
        array_at: file_offset(array)
            .ok_or_else(|| unsafe_("the device images are not in the file"))?,
        slots: new_slots,
        kept,
        gone,
    }))
}

impl OmpTable {
    pub(super) fn holds(&self, vaddr: u64) -> bool {
        vaddr >= self.array && vaddr < self.array + self.entries * IMAGE_ENTRY
    }

    /// The table's bytes with the entries moved (image pointers written in
    /// place remapped), and the count.
    pub(super) fn patch(
        &self,
        patches: &mut Patches,
        data: &[u8],
        remap: &dyn Fn(u64, u64, Point) -> Result<Option<u64>, Unsafe>,
        addr: u64,
    ) -> Result<(), Unsafe> {
        let len = (self.entries * IMAGE_ENTRY) as usize;
        let old = data
            .get(self.array_at as usize..self.array_at as usize + len)
            .ok_or_else(|| unsafe_("the device images lie past the end"))?;
        let mut new = vec![0u8; len];
        for (i, &slot) in self.slots.iter().enumerate() {
            let mut entry = old[i * 32..i * 32 + 32].to_vec();
            if !self.gone[i] {
                for (field, point) in [(0, Point::Start), (8, Point::End)] {
                    let w = u64::from_le_bytes(entry[field..field + 8].try_into().unwrap());
                    if let Some(v) = remap(w, addr, point)? {
                        entry[field..field + 8].copy_from_slice(&v.to_le_bytes());
                    }
                }
            }
            new[slot as usize * 32..slot as usize * 32 + 32].copy_from_slice(&entry);
        }
        patches.put(self.array_at, &new);
        patches.put(self.count_at, &(self.kept as u32).to_le_bytes());
        Ok(())
    }

    /// A relocation of a slot (at `at` in the file, of address `place`):
    /// moved with its entry, its image pointer remapped unless it goes.
    pub(super) fn move_relocation(
        &self,
        patches: &mut Patches,
        at: u64,
        place: u64,
        addend: u64,
        remap: &dyn Fn(u64, u64, Point) -> Result<Option<u64>, Unsafe>,
        addr: u64,
    ) -> Result<(), Unsafe> {
        let i = ((place - self.array) / IMAGE_ENTRY) as usize;
        let field = (place - self.array) % IMAGE_ENTRY;
        patches.u64(at, self.array + self.slots[i] * IMAGE_ENTRY + field);
        if !self.gone[i] && field < 16 {
            let point = if field < 8 { Point::Start } else { Point::End };
            if let Some(v) = remap(addend, addr, point)? {
                patches.u64(at + 16, v);
            }
        }
        Ok(())
    }
}
