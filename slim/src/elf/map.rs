//! Where each container of the section goes: a place in the section
//! before, its place after, and what a pointer to a place means.

use object::elf;
use object::read::elf::SectionHeader;

use crate::refusal::Unsafe;

pub(super) use super::point::Point;
use super::target::Target;
use crate::pieces::Output;

/// One container of the section: where it was, and its new bytes.
#[derive(Debug)]
pub struct Placed<'a> {
    /// Offset from the section's start.
    pub old: u64,
    /// Its old length.
    pub old_len: u64,
    /// Its new bytes (empty: removed).
    pub output: Output<'a>,
    /// Whether the new bytes are the old ones (so a pointer anywhere into it
    /// moves with it).
    pub same: bool,
}

/// Where each container went, in section-relative offsets.
pub(super) struct Map {
    /// (old start, old length, new start, new length, same bytes).
    pub(super) moves: Vec<(u64, u64, u64, u64, bool)>,
    /// (old start, old length) of the containers that go.
    pub(super) removed: Vec<(u64, u64)>,
    pub(super) old_size: u64,
    pub(super) new_size: u64,
    /// Whether another section starts where this one ends, so that a pointer
    /// to the end could as well be a pointer to that section's start.
    pub(super) shared_end: bool,
    /// Whether `moves` and `removed` are each in order of their old starts,
    /// none empty and none overlapping another (what discovery finds): then
    /// a place is looked up by binary search, else in each of them.
    pub(super) sorted: bool,
}

impl Map {
    /// The new offset of old section offset `at`: a container's start or end,
    /// anywhere in a container kept as it was, or the section's end. `None`
    /// for a place that has no new one (inside a rewritten container, in or at
    /// the start of one that goes), or a boundary whose two readings differ.
    pub(super) fn map(&self, at: u64, point: Point) -> Option<u64> {
        let start = self.starting(at).map(|m| m.2);
        let end = self
            .ending(at)
            .map(|m| m.2 + m.3)
            .or((at == self.old_size && !self.shared_end).then_some(self.new_size));
        let inside = self.inside_same(at).map(|m| m.2 + (at - m.0));
        let removed_start = self.removed_at(at);
        match point {
            Point::Start if removed_start => None,
            Point::Start => start.or(inside),
            Point::End => end.or(inside),
            Point::Unknown => match (start, end) {
                (Some(s), Some(e)) if s != e => None,
                (Some(s), _) => Some(s),
                (None, _) if removed_start => None,
                (None, Some(e)) => Some(e),
                (None, None) => inside,
            },
        }
    }
}

impl Map {
    /// The section offsets of the containers' bounds that compaction
    /// moves (a start or end whose new offset is not its old one, and the
    /// bounds of those that go), in order, and of their starts alone:
    /// where an exact pointer that no relocation describes would go stale.
    pub(super) fn moving_bounds(&self) -> (Vec<u64>, Vec<u64>) {
        let (mut bounds, mut starts) = (Vec::new(), Vec::new());
        for &(old, len, new, new_len, _) in &self.moves {
            if old != new {
                bounds.push(old);
                starts.push(old);
            }
            if old + len != new + new_len {
                bounds.push(old + len);
            }
        }
        for &(old, len) in &self.removed {
            bounds.extend([old, old + len]);
            starts.push(old);
        }
        sorted(bounds, starts)
    }

    /// Every bound a plan of these containers may move, whatever it pins:
    /// each container's start and end, and the starts ([`Map::moving_bounds`]
    /// gives those this plan moves).
    pub(super) fn all_bounds(&self) -> (Vec<u64>, Vec<u64>) {
        let (mut bounds, mut starts) = (Vec::new(), Vec::new());
        let moved = self.moves.iter().map(|&(old, len, ..)| (old, len));
        for (old, len) in moved.chain(self.removed.iter().copied()) {
            bounds.extend([old, old + len]);
            starts.push(old);
        }
        sorted(bounds, starts)
    }

    /// Whether section offset `at` means the same place when the section is
    /// rewritten where it stands (holes): a kept container's start or end,
    /// a place inside one kept as it was, or the section's bounds.
    pub(super) fn stays_in_place(&self, at: u64) -> bool {
        at == 0
            || at == self.old_size
            || self.starting(at).is_some()
            || self.ending(at).is_some()
            || self.inside_same(at).is_some()
    }
}

/// A container's move: (old start, old length, new start, new length, same
/// bytes).
pub(super) type Move = (u64, u64, u64, u64, bool);

impl Map {
    pub(super) fn new(
        moves: Vec<Move>,
        removed: Vec<(u64, u64)>,
        old_size: u64,
        new_size: u64,
        shared_end: bool,
    ) -> Map {
        let sorted = apart(moves.iter().map(|m| (m.0, m.1))) && apart(removed.iter().copied());
        Map {
            moves,
            removed,
            old_size,
            new_size,
            shared_end,
            sorted,
        }
    }

    /// The first move that starts at `at`.
    pub(super) fn starting(&self, at: u64) -> Option<&Move> {
        if !self.sorted {
            return self.moves.iter().find(|m| m.0 == at);
        }
        let i = self.moves.partition_point(|m| m.0 < at);
        self.moves.get(i).filter(|m| m.0 == at)
    }

    /// The first move that ends at `at`.
    pub(super) fn ending(&self, at: u64) -> Option<&Move> {
        if !self.sorted {
            return self.moves.iter().find(|m| m.0.checked_add(m.1) == Some(at));
        }
        let i = self.moves.partition_point(|m| m.0 + m.1 < at);
        self.moves.get(i).filter(|m| m.0 + m.1 == at)
    }

    /// The first move of a container kept as it was with `at` inside it,
    /// past its start.
    pub(super) fn inside_same(&self, at: u64) -> Option<&Move> {
        let inside = |m: &&Move| m.4 && at > m.0 && at - m.0 < m.1;
        if !self.sorted {
            return self.moves.iter().find(inside);
        }
        let i = self.moves.partition_point(|m| m.0 < at);
        i.checked_sub(1)
            .and_then(|i| self.moves.get(i))
            .filter(inside)
    }

    /// Whether a container that goes starts at `at`.
    pub(super) fn removed_at(&self, at: u64) -> bool {
        if !self.sorted {
            return self.removed.iter().any(|r| r.0 == at);
        }
        self.removed.binary_search_by_key(&at, |r| r.0).is_ok()
    }
}

/// Whether the extents `(start, length)` are in order of their starts, none
/// empty, none past the end of the address space, and none overlapping the
/// next.
pub(super) fn apart(extents: impl Iterator<Item = (u64, u64)>) -> bool {
    let mut end = 0u64;
    for (start, len) in extents {
        match start.checked_add(len) {
            Some(e) if len > 0 && start >= end => end = e,
            _ => return false,
        }
    }
    true
}

impl Map {
    /// Where each container goes: packed from the section's start at its
    /// alignment; `None` when the section would not shrink.
    pub(super) fn plan(t: &Target<'_>, containers: &[Placed<'_>], pinned: &[u64]) -> Option<Map> {
        let mut new_size = 0u64;
        let mut moves = Vec::new();
        let mut removed = Vec::new();
        for c in containers {
            if c.output.is_empty() {
                removed.push((c.old, c.old_len));
                continue;
            }
            // A container whose start is pinned keeps its place, one whose
            // end is pinned ends there still (what is before it only
            // shrinks, so neither is behind the packed bytes); the gap
            // before it is left as zeros. Where neither fits (both pinned
            // and its length changed, or an end out of alignment), it is
            // packed, and the reference it leaves untrue refuses the file.
            let packed = new_size.next_multiple_of(t.align);
            let len = c.output.len();
            let end = c.old + c.old_len;
            let at = if pinned.contains(&c.old) && c.old >= packed {
                c.old
            } else if pinned.contains(&end)
                && end
                    .checked_sub(len)
                    .is_some_and(|at| at >= packed && at % t.align == 0)
            {
                end - len
            } else {
                packed
            };
            moves.push((c.old, c.old_len, at, len, c.same));
            new_size = at + len;
        }
        if new_size >= t.size {
            return None;
        }
        let e = t.endian;
        let shared_end = t.kind != elf::ET_REL
            && t.shdrs.iter().enumerate().any(|(i, s)| {
                i != t.index
                    && s.sh_flags(e) & u64::from(elf::SHF_ALLOC) != 0
                    && s.sh_size(e) > 0
                    && Some(s.sh_addr(e)) == t.addr.checked_add(t.size)
            });
        Some(Map::new(moves, removed, t.size, new_size, shared_end))
    }

    /// Whether section offset `at` lies in a container that goes.
    pub(super) fn gone(&self, at: u64) -> bool {
        let holds = |&(old, len): &(u64, u64)| at >= old && at - old < len;
        if !self.sorted {
            return self.removed.iter().any(holds);
        }
        let i = self.removed.partition_point(|r| r.0 <= at);
        i.checked_sub(1)
            .and_then(|i| self.removed.get(i))
            .is_some_and(holds)
    }

    /// An address (or section offset, for objects: `base` 0) into the
    /// section, moved; `None` for one outside it; an error for one that has
    /// no place in the result.
    pub(super) fn remap_as(
        &self,
        value: u64,
        base: u64,
        point: Point,
    ) -> Result<Option<u64>, Unsafe> {
        if !self.covers(value, base) {
            return Ok(None);
        }
        // The section's end is where the next section starts: a pointer of
        // unknown kind there is that section's, which keeps its address (a
        // function at the start of `.text` right after `.nv_fatbin`).
        if value - base == self.old_size && self.shared_end && point == Point::Unknown {
            return Ok(None);
        }
        self.map(value - base, point)
            .map(|v| Some(base + v))
            .ok_or_else(|| {
                Unsafe::not_in_place(format!(
                    "something points to {value:#x}, which has no place in the result (inside a rewritten container, in one that goes, or where two places meet)"
                ))
            })
    }

    /// Whether `value` lies in the section at `base`, its end included:
    /// where [`Map::remap_as`] has anything to say of it.
    pub(super) fn covers(&self, value: u64, base: u64) -> bool {
        value >= base && value - base <= self.old_size
    }

    pub(super) fn remap(&self, value: u64, base: u64) -> Result<Option<u64>, Unsafe> {
        self.remap_as(value, base, Point::Unknown)
    }
}

/// `bounds` and `starts`, each sorted, each value once.
fn sorted(mut bounds: Vec<u64>, mut starts: Vec<u64>) -> (Vec<u64>, Vec<u64>) {
    for v in [&mut bounds, &mut starts] {
        v.sort_unstable();
        v.dedup();
    }
    (bounds, starts)
}
