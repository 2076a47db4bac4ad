//! A lock-free stack that is pushed to and emptied whole: what a
//! constructor or destructor hands to the next query (eager loads, modules to
//! unload) without a lock another thread could hold, or a `fork` could leave
//! held. One compare-and-swap per push; `take` swaps the head for null, so
//! no node is ever popped alone (no ABA).

use std::sync::atomic::{AtomicPtr, Ordering};

struct Node<T> {
    value: T,
    next: *mut Node<T>,
}

pub(crate) struct Stack<T> {
    head: AtomicPtr<Node<T>>,
}

// SAFETY: values move between threads through the stack, which owns them
// while they are in it.
unsafe impl<T: Send> Sync for Stack<T> {}

impl<T> Stack<T> {
    pub(crate) const fn new() -> Stack<T> {
        Stack {
            head: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    pub(crate) fn push(&self, value: T) {
        let node = Box::into_raw(Box::new(Node {
            value,
            next: std::ptr::null_mut(),
        }));
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            // SAFETY: `node` is ours until the exchange publishes it.
            unsafe { (*node).next = head };
            match self
                .head
                .compare_exchange_weak(head, node, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(now) => head = now,
            }
        }
    }

    /// Everything pushed so far, oldest first; the stack is left empty.
    pub(crate) fn take(&self) -> Vec<T> {
        let mut p = self.head.swap(std::ptr::null_mut(), Ordering::AcqRel);
        let mut out = Vec::new();
        while !p.is_null() {
            // SAFETY: the swap made this thread the only owner of the list;
            // each node was leaked by `push` and is freed once, here.
            let node = unsafe { Box::from_raw(p) };
            p = node.next;
            out.push(node.value);
        }
        out.reverse();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_everything_pushed_in_order_across_threads() {
        static STACK: Stack<usize> = Stack::new();
        let threads: Vec<_> = (0..4)
            .map(|t| std::thread::spawn(move || (0..1000).for_each(|i| STACK.push(t * 1000 + i))))
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let mut all = STACK.take();
        assert_eq!(all.len(), 4000);
        // Each thread's values come out in the order it pushed them.
        for t in 0..4 {
            let mine: Vec<usize> = all.iter().copied().filter(|v| v / 1000 == t).collect();
            assert!(mine.windows(2).all(|w| w[0] < w[1]));
        }
        all.sort_unstable();
        assert_eq!(all, (0..4000).collect::<Vec<_>>());
        assert!(STACK.take().is_empty());
    }
}
