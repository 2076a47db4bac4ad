//! A guard against `SIGBUS` from a mapped input that shrinks while it is
//! read (a package upgrade truncating a library beside the slimming).
//!
//! Reading a page of a file mapping that lies wholly past the file's end
//! raises `SIGBUS`, which kills the process: every other file's report lost,
//! temporary files left. With the guard installed ([`install`], once, by a
//! program: never by library code on its own), a fault inside a range that
//! is [registered](register) is answered by mapping an anonymous page of
//! zeros over the faulting page and marking the range damaged; the read
//! then sees zeros, the parsers (bounds-checked) go on, and the owner of
//! the registration turns the mark into an error for that file. A fault
//! anywhere else goes to the handler that was there before (Rust's
//! stack-overflow report), or, where there was none, to the default action.
//!
//! The table of ranges is a fixed array of atomics: registering takes a free
//! slot with a compare-and-swap, and the handler reads the slots without
//! locking or allocating (everything it calls, `mmap`, `sigaction` and
//! `raise`, is async-signal-safe).

use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// How many ranges may be registered at once (a file's input per thread,
/// with room to spare); a registration beyond that is unguarded.
const SLOTS: usize = 1024;

/// A slot's states.
const FREE: u8 = 0;
const CLAIMED: u8 = 1;
const LIVE: u8 = 2;

/// One registered range.
struct Slot {
    state: AtomicU8,
    start: AtomicUsize,
    len: AtomicUsize,
    damaged: AtomicBool,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            state: AtomicU8::new(FREE),
            start: AtomicUsize::new(0),
            len: AtomicUsize::new(0),
            damaged: AtomicBool::new(false),
        }
    }

    /// Whether `addr` lies in this slot's live range.
    fn holds(&self, addr: usize) -> bool {
        if self.state.load(Ordering::Acquire) != LIVE {
            return false;
        }
        let start = self.start.load(Ordering::Relaxed);
        let len = self.len.load(Ordering::Relaxed);
        addr >= start && addr - start < len
    }
}

static TABLE: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];

/// The page size, read once before the handler is installed.
static PAGE: AtomicUsize = AtomicUsize::new(0);

/// The `SIGBUS` action in place before [`install`]; set once, before the
/// handler can run.
static PREVIOUS: OnceLock<Previous> = OnceLock::new();

/// The result of the one installation.
static INSTALLED: OnceLock<Result<(), GuardError>> = OnceLock::new();

/// A saved `sigaction`.
struct Previous(libc::sigaction);

// SAFETY: a `sigaction` is plain data (a handler address, flags, a mask and a
// restorer address); nothing in it is tied to a thread.
unsafe impl Sync for Previous {}
// SAFETY: as above.
unsafe impl Send for Previous {}

/// Why the guard could not be installed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuardError {
    /// `sigaction` failed.
    #[error("installing the SIGBUS handler: {0}")]
    Sigaction(String),
    /// The page size is unknown.
    #[error("the page size is unknown")]
    PageSize,
}

/// Installs the process-wide `SIGBUS` handler (once; later calls return the
/// first call's result). Meant for programs: a library installing signal
/// handlers behind its host's back would replace the host's own.
pub fn install() -> Result<(), GuardError> {
    INSTALLED.get_or_init(install_once).clone()
}

fn install_once() -> Result<(), GuardError> {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let page = usize::try_from(page)
        .ok()
        .filter(|p| p.is_power_of_two())
        .ok_or(GuardError::PageSize)?;
    PAGE.store(page, Ordering::SeqCst);
    // SAFETY: an all-zero sigaction is a valid value (no handler, no flags,
    // an empty mask), filled in below.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = on_sigbus as *const () as usize;
    // On the alternate stack where a thread has one (Rust gives its threads
    // one, for the stack-overflow report this handler hands faults on to).
    action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
    // SAFETY: an all-zero sigaction, as above; the kernel fills it in.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // The previous action is saved before the handler is installed, so the
    // handler always finds it. SAFETY: sigemptyset initialises the mask it
    // is given; sigaction with no new action writes the current one to
    // valid memory.
    let rc = unsafe {
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut old)
    };
    if rc != 0 {
        return Err(GuardError::Sigaction(
            std::io::Error::last_os_error().to_string(),
        ));
    }
    let _ = PREVIOUS.set(Previous(old));
    // SAFETY: as above; `action` is fully initialised.
    let rc = unsafe { libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(GuardError::Sigaction(
            std::io::Error::last_os_error().to_string(),
        ));
    }
    Ok(())
}

/// A range registered with the guard, for as long as the bytes it covers
/// are borrowed: a registration never outlives its mapping, so the handler
/// never maps zeros over memory that has been handed to someone else.
pub struct Registration<'a> {
    slot: Option<&'static Slot>,
    _bytes: PhantomData<&'a [u8]>,
}

/// Registers the mapped `bytes`. Unguarded (a fault still kills) when the
/// table is full or the bytes are empty.
pub fn register(bytes: &[u8]) -> Registration<'_> {
    let slot = (!bytes.is_empty())
        .then(|| {
            TABLE.iter().find(|s| {
                s.state
                    .compare_exchange(FREE, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            })
        })
        .flatten();
    if let Some(s) = slot {
        s.start.store(bytes.as_ptr() as usize, Ordering::Relaxed);
        s.len.store(bytes.len(), Ordering::Relaxed);
        s.damaged.store(false, Ordering::Relaxed);
        s.state.store(LIVE, Ordering::Release);
    }
    Registration {
        slot,
        _bytes: PhantomData,
    }
}

impl Registration<'_> {
    /// Whether a read faulted past the file's end: the bytes read there
    /// were zeros, not the file's.
    pub fn damaged(&self) -> bool {
        self.slot.is_some_and(|s| s.damaged.load(Ordering::SeqCst))
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.slot {
            s.state.store(FREE, Ordering::Release);
        }
    }
}

/// The handler: zeros over a faulting page of a registered range, marked;
/// any other fault handed on.
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler;
    // si_addr is the faulting address for a fault (and meaningless, but
    // readable, for a signal sent by a process, which no range holds but
    // by chance: si_code tells them apart).
    let (addr, code) = unsafe { ((*info).si_addr() as usize, (*info).si_code) };
    let page = PAGE.load(Ordering::Relaxed);
    if code > 0 && page != 0 {
        if let Some(slot) = TABLE.iter().find(|s| s.holds(addr)) {
            let at = addr & !(page - 1);
            // SAFETY: the page lies in a registered range, a mapping that
            // its registration keeps borrowed (so alive, and the caller's):
            // replacing it with zeros changes only what its reader sees.
            // mmap is async-signal-safe.
            let mapped = unsafe {
                libc::mmap(
                    at as *mut libc::c_void,
                    page,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if mapped != libc::MAP_FAILED {
                slot.damaged.store(true, Ordering::SeqCst);
                return;
            }
        }
    }
    hand_on(sig, info, ctx);
}

/// Hands a fault the guard does not answer to the action that was there
/// before; where that was the default (or to ignore it, which would fault
/// for ever), restores the default and raises the signal again: it is
/// delivered, and kills, as soon as the handler returns.
fn hand_on(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let previous = PREVIOUS.get().map(|p| p.0);
    if let Some(p) = previous {
        let handler = p.sa_sigaction;
        if handler != libc::SIG_DFL && handler != libc::SIG_IGN {
            if p.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the previous action's handler, installed with
                // SA_SIGINFO: it takes these three arguments.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    unsafe { std::mem::transmute(handler) };
                f(sig, info, ctx);
            } else {
                // SAFETY: the previous action's plain handler.
                let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
                f(sig);
            }
            return;
        }
    }
    // SAFETY: an all-zero sigaction with SIG_DFL (0) as its handler is the
    // default action; sigaction and raise are async-signal-safe.
    unsafe {
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(sig, &default, std::ptr::null_mut());
        libc::raise(sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A registration's slot is taken while it lives and freed after.
    #[test]
    fn slots_are_taken_and_freed() {
        let bytes = vec![1u8; 100];
        let live = |p: usize| TABLE.iter().any(|s| s.holds(p));
        let at = bytes.as_ptr() as usize;
        {
            let r = register(&bytes);
            assert!(live(at) && live(at + 99) && !live(at + 100));
            assert!(!r.damaged());
        }
        assert!(!live(at));
        assert!(register(&[]).slot.is_none());
    }

    /// A mapped file truncated under a registered reader: the read past the
    /// new end sees zeros and marks the registration, and the process lives.
    #[test]
    fn a_read_past_a_moved_end_is_zeros_and_marked() {
        install().unwrap();
        let path = std::env::temp_dir().join(format!("offload-slim-guard-{}", std::process::id()));
        let page = PAGE.load(Ordering::SeqCst);
        std::fs::write(&path, vec![7u8; 3 * page]).unwrap();
        let map = offload_loader::MappedFile::open(&path).unwrap();
        let bytes = map.bytes();
        let r = register(bytes);
        assert_eq!(bytes[2 * page], 7);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(page as u64)
            .unwrap();
        // Read through a volatile load: the compiler may not reuse the 7.
        // SAFETY: the address lies in the live mapping.
        let past = unsafe { std::ptr::read_volatile(bytes.as_ptr().add(2 * page + 5)) };
        assert_eq!(past, 0);
        assert!(r.damaged());
        // SAFETY: as above.
        let before = unsafe { std::ptr::read_volatile(bytes.as_ptr().add(10)) };
        assert_eq!(before, 7);
        drop(r);
        drop(map);
        std::fs::remove_file(&path).unwrap();
    }
}
