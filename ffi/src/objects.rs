//! The loaded objects that hold live registrations, remembered so that the
//! next fat binary an object registers is checked without asking the dynamic
//! loader again: a library's constructor registers its fat binaries one after
//! another (rocSPARSE: 111), and all but the first cost one compare-and-swap.
//!
//! The registry rests on one promise of the code that registers: an object
//! stays loaded while a registration it made is live (clang's destructors
//! unregister before `dlclose` unmaps). An entry here is trusted exactly while
//! that promise covers it. It counts the live registrations pinned to it; a
//! registration pins it only by raising a count that is above zero, in one
//! compare-and-swap that also proves the entry was not rewritten since its
//! segments were read; and an entry whose count falls to zero is never
//! trusted again, only rewritten under a new generation. So an address found
//! in a pinned entry's segments is mapped for as long as the pin is held.
//!
//! No lock and no allocation: a thread forked beside a rewrite leaves at most
//! that one entry unusable in the child.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::process::{Located, ObjectName, Segments};

/// Objects remembered at once; a process registering from more objects at the
/// same time looks the others up (still without a walk, see `process::locate`).
const ENTRIES: usize = 16;
/// The pin count of an entry being rewritten.
const BUSY: u32 = u32::MAX;

struct Entry {
    /// `generation << 32 | pins`.
    state: AtomicU64,
    /// The object's [`ObjectName`], raw.
    object: AtomicUsize,
    len: AtomicUsize,
    segments: [[AtomicUsize; 2]; Segments::CAPACITY],
}

impl Entry {
    const fn new() -> Entry {
        Entry {
            state: AtomicU64::new(0),
            object: AtomicUsize::new(0),
            len: AtomicUsize::new(0),
            segments: [const { [AtomicUsize::new(0), AtomicUsize::new(0)] }; Segments::CAPACITY],
        }
    }

    fn containing(&self, addr: usize) -> Option<Range<usize>> {
        let len = self.len.load(Ordering::Relaxed).min(Segments::CAPACITY);
        self.segments[..len].iter().find_map(|[start, end]| {
            let (start, end) = (start.load(Ordering::Relaxed), end.load(Ordering::Relaxed));
            (start <= addr && addr < end).then_some(start..end)
        })
    }
}

static TABLE: [Entry; ENTRIES] = [const { Entry::new() }; ENTRIES];
/// The entry pinned last: where the next search starts.
static LAST: AtomicUsize = AtomicUsize::new(0);

fn pins(state: u64) -> u32 {
    state as u32
}

fn generation(state: u64) -> u32 {
    (state >> 32) as u32
}

/// A live registration's hold on a remembered object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pin {
    entry: usize,
    generation: u32,
}

impl Pin {
    /// Packed into one word, for a registration slot (never 0).
    pub(crate) fn to_raw(self) -> u64 {
        (u64::from(self.generation) << 32) | (self.entry as u64 + 1)
    }

    /// The pin [`Pin::to_raw`] packed, or `None` for 0.
    pub(crate) fn from_raw(raw: u64) -> Option<Pin> {
        let entry = (raw as u32 as usize).checked_sub(1)?;
        (entry < ENTRIES).then_some(Pin {
            entry,
            generation: (raw >> 32) as u32,
        })
    }

    /// The pinned object's segment that contains `addr`.
    pub(crate) fn segment(self, addr: usize) -> Option<Range<usize>> {
        TABLE[self.entry].containing(addr)
    }
}

/// The loaded segment that holds `addr`, a place a registration names:
/// found in the object its pin (`Pin::to_raw`, 0 for none) holds, or else
/// by `locate`.
pub(crate) fn segment_of(
    pin: u64,
    addr: usize,
    mut locate: impl FnMut(usize) -> Option<Located>,
) -> Option<Range<usize>> {
    Pin::from_raw(pin)
        .and_then(|pin| pin.segment(addr))
        .or_else(|| Some(locate(addr)?.segment))
}

/// An object found for an address, pinned for the registration being made:
/// dropped, it lets go; [`Pinned::keep`] hands the pin to the registration.
pub(crate) struct Pinned {
    pin: Option<Pin>,
    pub object: ObjectName,
    pub segment: Range<usize>,
}

impl Pinned {
    /// The remembered object whose segments contain `addr`, pinned; else the
    /// dynamic loader's answer (remembered and pinned when an entry is free).
    /// `None` when no loaded object maps `addr`.
    pub(crate) fn find(addr: usize) -> Option<Pinned> {
        if let Some(found) = pin(addr) {
            return Some(found);
        }
        let located = crate::process::locate(addr)?;
        Some(Pinned {
            pin: remember(&located),
            object: located.object,
            segment: located.segment,
        })
    }

    /// Keeps the pin for a registration, which releases it with [`unpin`].
    pub(crate) fn keep(mut self) -> Option<Pin> {
        self.pin.take()
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Some(pin) = self.pin {
            unpin(pin);
        }
    }
}

/// Pins the remembered object that maps `addr`.
fn pin(addr: usize) -> Option<Pinned> {
    let first = LAST.load(Ordering::Relaxed);
    for k in 0..ENTRIES {
        let i = (first + k) % ENTRIES;
        let entry = &TABLE[i];
        let state = entry.state.load(Ordering::Acquire);
        if pins(state) == 0 || pins(state) >= BUSY - 1 {
            continue;
        }
        let Some(segment) = entry.containing(addr) else {
            continue;
        };
        let object = entry.object.load(Ordering::Relaxed);
        // Succeeds only if nothing rewrote the entry since `state` was read,
        // so `segment` and `object` are this generation's.
        if entry
            .state
            .compare_exchange(state, state + 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            if i != first {
                LAST.store(i, Ordering::Relaxed);
            }
            return Some(Pinned {
                pin: Some(Pin {
                    entry: i,
                    generation: generation(state),
                }),
                object: ObjectName::from_raw(object),
                segment,
            });
        }
    }
    None
}

/// Remembers `located`'s object in a free entry, pinned once.
fn remember(located: &Located) -> Option<Pin> {
    if !located.segments.is_complete() {
        return None;
    }
    for (i, entry) in TABLE.iter().enumerate() {
        let state = entry.state.load(Ordering::Relaxed);
        if pins(state) != 0 {
            continue;
        }
        let busy = (state & !u64::from(u32::MAX)) | u64::from(BUSY);
        if entry
            .state
            .compare_exchange(state, busy, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            continue;
        }
        entry
            .object
            .store(located.object.to_raw(), Ordering::Relaxed);
        let mut len = 0;
        for (slot, s) in entry.segments.iter().zip(located.segments.iter()) {
            slot[0].store(s.start, Ordering::Relaxed);
            slot[1].store(s.end, Ordering::Relaxed);
            len += 1;
        }
        entry.len.store(len, Ordering::Relaxed);
        let generation = generation(state).wrapping_add(1);
        entry
            .state
            .store((u64::from(generation) << 32) | 1, Ordering::Release);
        LAST.store(i, Ordering::Relaxed);
        return Some(Pin {
            entry: i,
            generation,
        });
    }
    None
}

/// Lets go of a registration's pin.
pub(crate) fn unpin(pin: Pin) {
    let entry = &TABLE[pin.entry];
    let mut state = entry.state.load(Ordering::Relaxed);
    loop {
        if generation(state) != pin.generation || pins(state) == 0 || pins(state) == BUSY {
            // Not this pin's generation: nothing of it to let go.
            return;
        }
        match entry.state.compare_exchange_weak(
            state,
            state - 1,
            Ordering::Release,
            Ordering::Relaxed,
        ) {
            Ok(_) => return,
            Err(now) => state = now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static DATA: [u8; 64] = [1; 64];

    #[test]
    fn an_object_is_trusted_only_while_pinned() {
        let addr = DATA.as_ptr() as usize;
        let first = Pinned::find(addr).expect("this test binary maps its data");
        let raw = first.keep().expect("a free entry");
        let pin = Pin::from_raw(raw.to_raw()).unwrap();
        assert_eq!(pin, raw);
        // A second address in the same object is found in the entry.
        let second = super::pin(addr + 8).expect("pinned entry found");
        assert_eq!(second.pin.map(|p| p.entry), Some(pin.entry));
        assert!(second.segment.contains(&(addr + 8)));
        drop(second);
        unpin(pin);
        // Count at zero: the entry is no longer trusted.
        assert!(super::pin(addr).is_none());
        // A stale pin of an old generation changes nothing.
        unpin(pin);
        let again = Pinned::find(addr).unwrap();
        assert!(again
            .pin
            .is_some_and(|p| p.generation != pin.generation || p.entry != pin.entry));
        assert_eq!(Pin::from_raw(0), None);
    }
}
