//! The registry's lock, made safe across `fork`: a pthread mutex that the
//! process takes before `fork` and releases after it on both sides
//! (`pthread_atfork`), so no thread's registration or lookup can be holding
//! it in the child. Not poisoned by a panic: the guard releases it while
//! unwinding, and the registry's invariants hold between statements.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::Once;

pub(crate) struct ForkSafeMutex<T> {
    raw: UnsafeCell<libc::pthread_mutex_t>,
    data: UnsafeCell<T>,
    /// Runs in the child after `fork`, with the lock held, before it is released.
    in_child: fn(&mut T),
    atfork: Once,
}

// SAFETY: `data` is only reached through a guard, which holds the mutex.
unsafe impl<T: Send> Sync for ForkSafeMutex<T> {}
// SAFETY: as above; the mutex itself may move between threads before use.
unsafe impl<T: Send> Send for ForkSafeMutex<T> {}

pub(crate) struct Guard<'a, T> {
    lock: &'a ForkSafeMutex<T>,
}

/// What the atfork handlers do with the one lock that installed them.
trait AtFork: Sync {
    fn prepare(&self);
    fn parent(&self);
    fn child(&self);
}

/// The one instance's address, for the atfork handlers (they take no argument).
static mut INSTANCE: Option<&'static dyn AtFork> = None;

impl<T> ForkSafeMutex<T> {
    pub(crate) const fn new(data: T, in_child: fn(&mut T)) -> Self {
        ForkSafeMutex {
            raw: UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER),
            data: UnsafeCell::new(data),
            in_child,
            atfork: Once::new(),
        }
    }

    fn raw_lock(&self) {
        // SAFETY: `raw` is an initialised mutex that never moves (a static).
        unsafe { libc::pthread_mutex_lock(self.raw.get()) };
    }

    fn raw_unlock(&self) {
        // SAFETY: called only by the thread holding the mutex (or its copy in
        // a forked child).
        unsafe { libc::pthread_mutex_unlock(self.raw.get()) };
    }
}

impl<T: Send + 'static> AtFork for ForkSafeMutex<T> {
    fn prepare(&self) {
        self.raw_lock();
    }

    fn parent(&self) {
        self.raw_unlock();
    }

    fn child(&self) {
        // SAFETY: `prepare` took the lock on the thread that forked, which is
        // the child's only thread: it has exclusive access.
        let data = unsafe { &mut *self.data.get() };
        // No panic may unwind out of an `extern "C"` handler.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.in_child)(data)));
        self.raw_unlock();
    }
}

impl<T: Send + 'static> ForkSafeMutex<T> {
    /// Installs the `fork` handlers (once): from the library's constructor,
    /// before the program has threads (glibc ignores handlers installed
    /// during a concurrent fork, which could then copy the lock held).
    pub(crate) fn install(&'static self) {
        self.atfork.call_once(|| {
            // SAFETY: written once, before the handlers that read it are installed.
            unsafe { INSTANCE = Some(self) };
            // SAFETY: the handlers are `extern "C" fn()` with no preconditions.
            unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
        });
    }

    /// Takes the lock (installing the handlers, if the constructor did not).
    pub(crate) fn lock(&'static self) -> Guard<'static, T> {
        self.install();
        self.raw_lock();
        Guard { lock: self }
    }
}

fn instance() -> Option<&'static dyn AtFork> {
    // SAFETY: written once before any handler can run, read-only after.
    unsafe { *std::ptr::addr_of!(INSTANCE) }
}

extern "C" fn prepare() {
    if let Some(m) = instance() {
        m.prepare();
    }
}

extern "C" fn parent() {
    if let Some(m) = instance() {
        m.parent();
    }
}

extern "C" fn child() {
    if let Some(m) = instance() {
        m.child();
    }
}

impl<T> Deref for Guard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the mutex.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T> DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard holds the mutex.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T> Drop for Guard<'_, T> {
    fn drop(&mut self) {
        self.lock.raw_unlock();
    }
}
