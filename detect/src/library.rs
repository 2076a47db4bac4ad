//! Opening a driver library at run time, once per process and path, and never
//! closing it.
//!
//! Driver libraries start threads (ROCR's async-event thread, the CUDA
//! driver's own): unmapping one while such a thread runs would crash, so every
//! library this crate opens stays loaded for the life of the process (as the
//! reference tools do with `llvm::sys::DynamicLibrary::getPermanentLibrary`):
//! its handle is never closed, even when its symbols turn out to be missing,
//! and the resolved entry points are kept in a `'static` cache. A failed
//! `dlopen` costs a few microseconds, so a machine without the driver pays
//! nothing.

use std::mem::ManuallyDrop;
use std::path::PathBuf;
use std::sync::Mutex;

use crate::report::Reason;

/// Resolves the C function `$name` from the never-closed `Library` `$lib`
/// (opened from `$path`) into a value whose type is the signature the vendor's header
/// declares (the field's type it is assigned to), or returns
/// [`Reason::MissingSymbol`].
macro_rules! resolve {
    ($lib:expr, $path:expr, $name:literal) => {{
        // SAFETY: the symbol is looked up by its C name and given the C
        // signature the vendor's header declares for it (the type of the field
        // it is assigned to); the library is never unloaded, so the function
        // pointer stays valid.
        match unsafe { $lib.get(concat!($name, "\0").as_bytes()) } {
            Ok(symbol) => *symbol,
            Err(_) => {
                return Err($crate::report::Reason::MissingSymbol {
                    symbol: $name,
                    library: $path.clone(),
                })
            }
        }
    }};
}
pub(crate) use resolve;

/// Opens `library` if one is named (`OFFLOAD_LOADER_*_LIBRARY`), else the
/// first of `defaults` that loads. The handle is wrapped in
/// `ManuallyDrop`: it is never closed, whatever happens next. A name that
/// fails for another reason than "not found" (wrong ELF class, missing
/// dependency) is reported as such.
pub(crate) fn open(
    library: Option<PathBuf>,
    defaults: &[&str],
) -> Result<(ManuallyDrop<libloading::Library>, PathBuf), Reason> {
    let candidates: Vec<PathBuf> = match library {
        Some(path) => vec![path],
        None => defaults.iter().map(PathBuf::from).collect(),
    };
    let mut refused = None;
    for path in &candidates {
        // SAFETY: loading a driver library runs its initialisers; these are the
        // vendor's runtime libraries (or the path the user named), loaded the
        // way the vendor's own runtimes and LLVM's offload-arch load them.
        match unsafe { libloading::Library::new(path) } {
            Ok(lib) => return Ok((ManuallyDrop::new(lib), path.clone())),
            Err(e) => {
                let detail = e.to_string();
                if !detail.contains("No such file or directory") && refused.is_none() {
                    refused = Some(Reason::LibraryUnloadable {
                        library: path.display().to_string(),
                        detail,
                    });
                }
            }
        }
    }
    let mut names = candidates.iter().map(|p| p.display().to_string());
    Err(refused.unwrap_or_else(|| Reason::LibraryNotFound {
        library: names.next().unwrap_or_default(),
        also_tried: names.collect(),
    }))
}

/// Resolved driver entry points, one per requested path (`None` = the default
/// candidates), each leaked so that devices and loaded images can hold a
/// `&'static` to it.
pub(crate) struct Cache<T: 'static> {
    entries: Mutex<Vec<(Option<PathBuf>, &'static T)>>,
}

impl<T: Sync + 'static> Cache<T> {
    pub(crate) const fn new() -> Self {
        Cache {
            entries: Mutex::new(Vec::new()),
        }
    }

    /// The entry for `key`, opened with `open` the first time. A failure is
    /// not remembered: the next detection tries again (it is cheap).
    pub(crate) fn get_or_open(
        &self,
        key: Option<PathBuf>,
        open: impl FnOnce(Option<PathBuf>) -> Result<T, Reason>,
    ) -> Result<&'static T, Reason> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, api)) = entries.iter().find(|(k, _)| *k == key) {
            return Ok(api);
        }
        let api: &'static T = Box::leak(Box::new(open(key.clone())?));
        entries.push((key, api));
        Ok(api)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_refused_libraries() {
        let e = open(None, &["/nonexistent/libhsa.so", "libnotthere.so.9"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/nonexistent/libhsa.so not found (nor libnotthere.so.9)"
        );
        // A file that is not a shared object is refused, not "not found".
        let not_elf =
            std::env::temp_dir().join(format!("detect-not-elf-{}.so", std::process::id()));
        std::fs::write(&not_elf, b"hello").unwrap();
        let e = open(Some(not_elf.clone()), &[]).unwrap_err();
        let _ = std::fs::remove_file(&not_elf);
        assert!(matches!(e, Reason::LibraryUnloadable { .. }), "{e}");
    }
}
