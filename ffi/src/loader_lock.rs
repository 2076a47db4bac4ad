//! The rule that keeps this library from hanging its host under the dynamic
//! loader's lock, and the debug-build check that holds the code to it.
//!
//! glibc keeps one recursive lock (`dl_load_lock`) across every constructor
//! a `dlopen` runs and every destructor `dlclose` (or `exit`) runs, and takes
//! it in `dlopen`, `dlsym`, `dl_iterate_phdr` and `__cxa_thread_atexit_impl`
//! (which registers the destructor of a thread-local the first time a thread
//! uses it). HIP, CUDA and OpenMP programs register their GPU code from
//! constructors and unregister it from destructors, so the thread that
//! registers or unregisters may hold that lock; and unregistering must wait
//! until no thread reads the library's memory, which `dlclose` unmaps next
//! ([`crate::library`]). A thread that waits for the loader's lock while
//! another waits for it is a hang no timeout ends.
//!
//! The rule, which the `SAFETY` comments of `library` and `registry` rely on:
//!
//! 1. **Readers and the registry's lock do pure work.** A thread inside a
//!    library (a `library::Reading`) or holding the registry's lock parses,
//!    selects, copies, allocates and builds message text, and nothing else:
//!    no device detection, no driver call (a driver may `dlopen`, as CUDA's
//!    PTX JIT does), no `dlopen`, `dlsym` or `dl_iterate_phdr`, no output to
//!    stderr or `tracing` (whose per-thread buffers register destructors).
//!    Then `revoke`, which waits for readers, and the registry's lock, which
//!    a destructor takes, are only ever waited for while their holder makes
//!    progress.
//! 2. **Constructors and destructors wait for no other thread** beyond
//!    rule 1: registration records where the code is and returns;
//!    unregistration takes the registry's lock, revokes the library (waiting
//!    for its readers) and hands its loaded modules to the next query
//!    (`runtime::settle`), which unloads them on the caller's thread. Neither
//!    detects devices (detection holds its own lock across a `dlopen`) nor
//!    calls a driver. `OFFLOAD_LOADER_EAGER` loads at the next query (or at
//!    exit), and `OFFLOAD_LOADER_INFO` reports a selection
//!    at unregistration only when the devices are already known (else at
//!    exit, from a copy).
//! 3. **Effects run outside.** Detection, driver loads and lookups, driver
//!    unloads, messages and the last error (kept with a `pthread` key, which
//!    registers nothing with the loader) happen in `runtime`, `info` and
//!    `abi`, on the caller's thread, with no library entered and no lock
//!    held.
//!
//! In debug builds every reader and every holder of the registry's lock is
//! counted on its thread ([`Inside`]), and every effect calls [`check`] first:
//! an effect reached from inside aborts the process with the effect's name,
//! so the suite fails loudly rather than hanging one run in a thousand.

/// Marks the current thread as inside a reader or the registry's lock for
/// as long as it lives (debug builds; nothing in release builds).
pub(crate) struct Inside(());

#[cfg(debug_assertions)]
mod depth {
    use std::cell::Cell;

    thread_local! {
        // A `const` thread-local without a destructor: its first use on a
        // thread registers nothing with the loader.
        pub(super) static DEPTH: Cell<u32> = const { Cell::new(0) };
    }
}

impl Inside {
    /// Counts the current thread in.
    #[inline]
    pub(crate) fn enter() -> Inside {
        #[cfg(debug_assertions)]
        depth::DEPTH.with(|d| d.set(d.get() + 1));
        Inside(())
    }
}

impl Drop for Inside {
    #[inline]
    fn drop(&mut self) {
        #[cfg(debug_assertions)]
        depth::DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// Called before `effect` (something that may take the loader's lock or wait
/// on a thread that does): in debug builds, aborts if the current thread is
/// inside a reader or holds the registry's lock.
#[inline]
pub(crate) fn check(effect: &str) {
    #[cfg(debug_assertions)]
    if depth::DEPTH.with(|d| d.get()) > 0 {
        let message = format!(
            "offload-loader: loader-lock rule broken: {effect} inside a library reader or the registry's lock\n"
        );
        // SAFETY: writes the message's bytes, which outlive the call, to
        // stderr; a plain `write`, which takes no lock of the loader's.
        unsafe { libc::write(2, message.as_ptr().cast(), message.len()) };
        std::process::abort();
    }
    #[cfg(not(debug_assertions))]
    let _ = effect;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An effect reached inside a reader aborts a debug build, loudly: run
    /// in a child (this test binary again), which must die of `SIGABRT`
    /// with the rule's message.
    #[test]
    #[cfg(debug_assertions)]
    fn an_effect_inside_a_reader_aborts() {
        if std::env::var_os("OFFLOAD_LOADER_RULE_CHILD").is_some() {
            let _reading = Inside::enter();
            check("a test effect");
            return;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "loader_lock::tests::an_effect_inside_a_reader_aborts",
                "--test-threads=1",
            ])
            .env("OFFLOAD_LOADER_RULE_CHILD", "1")
            .output()
            .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(
            "loader-lock rule broken: a test effect inside a library reader or the registry's lock"
        ));
    }

    #[test]
    fn inside_counts_nested_readers() {
        check("nothing, outside");
        {
            let _a = Inside::enter();
            let _b = Inside::enter();
        }
        // Both left: effects are allowed again.
        check("nothing, outside again");
    }
}
