//! The symbols registered against every library, in one table owned by the
//! registry (see [`crate::registry`]): a registration appends an entry (no
//! hashing, and no allocation but a new chunk each time the table doubles:
//! [`crate::chunked`], so no entry is ever copied), each library's
//! entries chained from its last, which its slot keeps
//! ([`crate::slots::Slot::last_symbol`]). An unregistered library's entries
//! are reused by later registrations, so the table is as large as the most
//! symbols registered at once, however many libraries come and go.

use crate::chunked::Chunked;
use crate::library::Symbol;

/// Where an entry is: its index in the table.
pub(crate) type At = u32;

struct Entry {
    symbol: Symbol,
    /// The library's id; [`FREE`] for a free entry.
    library: usize,
    /// The library's symbol registered before this one; for a free entry,
    /// the next free entry.
    prev: Option<At>,
}

const FREE: usize = usize::MAX;

#[derive(Default)]
pub(crate) struct SymbolTable {
    entries: Chunked<Entry>,
    /// The first free entry.
    free: Option<At>,
}

impl SymbolTable {
    /// Appends `symbol` to library `library`, whose last symbol so far is
    /// `last`; the new entry, which is now its last. `None` when the table
    /// holds as many entries as an [`At`] below `At::MAX` can name (a slot
    /// stores one more).
    pub(crate) fn push(&mut self, library: usize, last: Option<At>, symbol: Symbol) -> Option<At> {
        let entry = Entry {
            symbol,
            library,
            prev: last,
        };
        // The free list holds entries of the table only (`release` puts
        // them there); were its head ever not one, the list is dropped
        // rather than followed again.
        if let Some(at) = self.free.take() {
            if let Some(slot) = self.entries.get_mut(at as usize) {
                self.free = slot.prev;
                *slot = entry;
                return Some(at);
            }
        }
        let at = At::try_from(self.entries.len())
            .ok()
            .filter(|&at| at < At::MAX)?;
        self.entries.push(entry);
        Some(at)
    }

    /// The entries of the library whose last symbol is `last`, last first.
    /// A chain is never longer than the table (its entries are distinct).
    pub(crate) fn chain(&self, last: Option<At>) -> impl Iterator<Item = (At, &Symbol)> + '_ {
        std::iter::successors(last, |&at| self.entries.get(at as usize)?.prev)
            .take(self.entries.len())
            .filter_map(|at| Some((at, &self.entries.get(at as usize)?.symbol)))
    }

    /// The symbols of the library whose last symbol is `last`, in the
    /// order they were registered, with their entries.
    pub(crate) fn in_order(&self, last: Option<At>) -> Vec<(At, Symbol)> {
        let mut symbols: Vec<(At, Symbol)> = self.chain(last).map(|(at, s)| (at, *s)).collect();
        symbols.reverse();
        symbols
    }

    /// The library and symbol of entry `at`, if it is in use.
    pub(crate) fn get(&self, at: At) -> Option<(usize, Symbol)> {
        let entry = self.entries.get(at as usize)?;
        (entry.library != FREE).then_some((entry.library, entry.symbol))
    }

    /// Frees the entries of the library whose last symbol is `last`, for
    /// later registrations: each is put on the free list as its chain is
    /// walked, with no list of them made first.
    pub(crate) fn release(&mut self, last: Option<At>) {
        let mut next = last;
        // A chain is never longer than the table (its entries are distinct).
        for _ in 0..self.entries.len() {
            let Some(at) = next else { break };
            let Some(entry) = self.entries.get_mut(at as usize) else {
                break;
            };
            next = entry.prev;
            entry.library = FREE;
            entry.prev = self.free;
            self.free = Some(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::library::SymbolKind;

    fn symbol(host: usize) -> Symbol {
        Symbol {
            host,
            name: 0,
            kind: SymbolKind::Kernel,
        }
    }

    fn hosts(table: &SymbolTable, last: Option<At>) -> Vec<usize> {
        table.in_order(last).iter().map(|(_, s)| s.host).collect()
    }

    #[test]
    fn libraries_chain_their_symbols_and_free_entries_are_reused() {
        let mut table = SymbolTable::default();
        // Two libraries registering in turns, as two threads may.
        let mut a = None;
        let mut b = None;
        for host in 1..=3 {
            a = table.push(7, a, symbol(host));
            b = table.push(9, b, symbol(100 + host));
        }
        assert_eq!(hosts(&table, a), [1, 2, 3]);
        assert_eq!(hosts(&table, b), [101, 102, 103]);
        assert_eq!(table.get(a.unwrap()), Some((7, symbol(3))));
        assert_eq!(table.chain(None).count(), 0);
        // Unregistered, a library's entries are free and reused; the other
        // library's chain is untouched.
        table.release(a);
        assert_eq!(table.get(a.unwrap()), None);
        let mut c = None;
        for host in 201..=204 {
            c = table.push(11, c, symbol(host));
        }
        assert_eq!(table.entries.len(), 7, "three reused, one appended");
        assert_eq!(hosts(&table, c), [201, 202, 203, 204]);
        assert_eq!(hosts(&table, b), [101, 102, 103]);
        // Libraries that come and go grow the table once.
        for round in 0..1000 {
            let mut d = None;
            for host in 0..5 {
                d = table.push(20 + round, d, symbol(host));
            }
            table.release(d);
        }
        assert_eq!(table.entries.len(), 12);
    }

    #[test]
    fn chains_run_across_chunks() {
        // Two libraries of 150 symbols each, registering in turns: their
        // chains cross the table's first chunks (64, then 128 entries).
        let mut table = SymbolTable::default();
        let (mut a, mut b) = (None, None);
        for host in 0..150 {
            a = table.push(1, a, symbol(host));
            b = table.push(2, b, symbol(1000 + host));
        }
        assert_eq!(hosts(&table, a), (0..150).collect::<Vec<_>>());
        assert_eq!(hosts(&table, b), (1000..1150).collect::<Vec<_>>());
        table.release(a);
        let mut c = None;
        for host in 0..150 {
            c = table.push(3, c, symbol(2000 + host));
        }
        assert_eq!(table.entries.len(), 300, "every freed entry reused");
        assert_eq!(hosts(&table, c), (2000..2150).collect::<Vec<_>>());
        assert_eq!(hosts(&table, b), (1000..1150).collect::<Vec<_>>());
    }
}
