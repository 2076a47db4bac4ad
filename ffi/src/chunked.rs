//! Tables that grow by chunks that never move: chunk `k` holds
//! `FIRST << k` items, so the table doubles as a `Vec` does, but an item
//! stays where it was written and growing copies nothing. The slots (read
//! without a lock while the table grows) and the symbol table (where a
//! `Vec`'s doublings copied and faulted in every entry again, the largest
//! part of a kernel's registration beside libamdhip64) are kept so.

/// Items in the first chunk.
pub(crate) const FIRST: usize = 64;

/// The chunk and the place in it of item `index`.
pub(crate) fn place(index: usize) -> (usize, usize) {
    let n = index / FIRST + 1;
    let chunk = (usize::BITS - 1 - n.leading_zeros()) as usize;
    (chunk, index - FIRST * ((1 << chunk) - 1))
}

/// An append-only table of `T` in chunks.
pub(crate) struct Chunked<T> {
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Chunked {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Chunked<T> {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Appends `item`; its index.
    pub(crate) fn push(&mut self, item: T) -> usize {
        let index = self.len;
        let (chunk, _) = place(index);
        // Items are appended in index order, so the chunk is the last one
        // (which has room: it holds `FIRST << chunk` items, every place
        // before this one's written) or the next, made now.
        match self.chunks.get_mut(chunk) {
            Some(items) => items.push(item),
            None => {
                let mut items = Vec::with_capacity(FIRST << chunk);
                items.push(item);
                self.chunks.push(items);
            }
        }
        self.len += 1;
        index
    }

    pub(crate) fn get(&self, index: usize) -> Option<&T> {
        let (chunk, at) = place(index);
        self.chunks.get(chunk)?.get(at)
    }

    pub(crate) fn get_mut(&mut self, index: usize) -> Option<&mut T> {
        let (chunk, at) = place(index);
        self.chunks.get_mut(chunk)?.get_mut(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_double_and_indices_map_one_to_one() {
        let mut seen = std::collections::HashSet::new();
        for index in 0..FIRST * 40 {
            let (chunk, at) = place(index);
            assert!(at < FIRST << chunk, "{index}");
            assert!(seen.insert((chunk, at)), "{index}");
        }
        assert_eq!(place(0), (0, 0));
        assert_eq!(place(FIRST - 1), (0, FIRST - 1));
        assert_eq!(place(FIRST), (1, 0));
        assert_eq!(place(3 * FIRST), (2, 0));
    }

    #[test]
    fn items_stay_where_they_were_written() {
        let mut table = Chunked::default();
        let first = {
            table.push(0usize);
            table.get(0).map(|item| item as *const usize)
        };
        for i in 1..FIRST * 20 {
            assert_eq!(table.push(i), i);
        }
        assert_eq!(table.len(), FIRST * 20);
        assert_eq!(table.get(0).map(|item| item as *const usize), first);
        assert!((0..table.len()).all(|i| table.get(i) == Some(&i)));
        assert_eq!(table.get(table.len()), None);
        *table.get_mut(5).unwrap() = 99;
        assert_eq!(table.get(5), Some(&99));
        // No chunk grew past the size it was made with (`with_capacity`
        // allocates exactly that for a sized type, today): none was moved.
        assert!(table
            .chunks
            .iter()
            .enumerate()
            .all(|(k, items)| items.capacity() == FIRST << k));
    }
}
