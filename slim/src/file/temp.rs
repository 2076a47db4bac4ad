//! New files that no kill can leave behind: made unnamed (`O_TMPFILE`) in
//! the directory they will end up in, and given a name only once they are
//! complete. Where the file system has no unnamed files, a named one
//! (`.NAME.slim-TAG-PID-N`, a name the probe's walk knows and skips) is
//! made instead and removed unless published.

use std::ffi::CString;
use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Why a new file could not be made or put in place.
#[derive(Debug, thiserror::Error)]
pub enum TempError {
    /// Making the file, in this directory.
    #[error("{}: making a new file: {source}", dir.display())]
    Create {
        dir: PathBuf,
        source: std::io::Error,
    },
    /// Giving it a name beside its destination.
    #[error("{}: {source}", path.display())]
    Link {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Renaming it over its destination.
    #[error("{}: {source}", path.display())]
    Rename {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A file being made in `dir`.
pub struct Temp {
    file: File,
    dir: PathBuf,
    /// Its name where it has one (the fallback); removed on drop.
    named: Option<PathBuf>,
}

impl Temp {
    /// A new, empty file in `dir` for a file named like `like`, readable and
    /// writable by its owner only: unnamed where the file system allows it.
    pub fn new(dir: &Path, like: &Path, tag: &str) -> Result<Temp, TempError> {
        let create = |source| TempError::Create {
            dir: dir.to_path_buf(),
            source,
        };
        let unnamed = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
            .open(dir);
        match unnamed {
            Ok(file) => {
                return Ok(Temp {
                    file,
                    dir: dir.to_path_buf(),
                    named: None,
                })
            }
            // No unnamed files here (or, before Linux 3.11, no O_TMPFILE:
            // the flags then read as a directory opened for writing).
            Err(e) if unsupported(&e) => {}
            Err(e) => return Err(create(e)),
        }
        let path = temp_path(dir, like, tag);
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(&path)
            .map_err(create)?;
        Ok(Temp {
            file,
            dir: dir.to_path_buf(),
            named: Some(path),
        })
    }

    /// The open file.
    pub fn file(&mut self) -> &mut File {
        &mut self.file
    }

    /// A path that opens this file, while it is open here: its name, or its
    /// descriptor's entry in `/proc/self/fd`.
    pub fn path(&self) -> PathBuf {
        match &self.named {
            Some(p) => p.clone(),
            None => PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd())),
        }
    }

    /// Puts the file at `target` (in the same directory): an unnamed file is
    /// linked in under a temporary name, then renamed over `target`
    /// atomically, so `target` is always either what it was or this file.
    pub fn publish(mut self, target: &Path) -> Result<(), TempError> {
        let from = match self.named.take() {
            Some(p) => p,
            None => {
                let link = temp_path(&self.dir, target, "link");
                self.link(&link)?;
                link
            }
        };
        fs::rename(&from, target).map_err(|source| {
            let _ = fs::remove_file(&from);
            TempError::Rename {
                path: target.to_path_buf(),
                source,
            }
        })
    }

    /// Gives the unnamed file the name `link`: through `/proc/self/fd`
    /// (which anyone may), or, without `/proc`, by its descriptor
    /// (`AT_EMPTY_PATH`, which needs `CAP_DAC_READ_SEARCH`).
    fn link(&self, link: &Path) -> Result<(), TempError> {
        let err = |source| TempError::Link {
            path: link.to_path_buf(),
            source,
        };
        let to = c_path(link).map_err(err)?;
        let proc = c_path(&self.path()).map_err(err)?;
        // SAFETY: both paths are NUL-terminated strings that outlive the call.
        let rc = unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                proc.as_ptr(),
                libc::AT_FDCWD,
                to.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let first = std::io::Error::last_os_error();
        if first.kind() != std::io::ErrorKind::NotFound {
            return Err(err(first));
        }
        // SAFETY: the descriptor is open; "" with AT_EMPTY_PATH names it;
        // `to` is NUL-terminated and outlives the call.
        let rc = unsafe {
            libc::linkat(
                self.file.as_raw_fd(),
                c"".as_ptr(),
                libc::AT_FDCWD,
                to.as_ptr(),
                libc::AT_EMPTY_PATH,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(err(std::io::Error::last_os_error()))
        }
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if let Some(p) = &self.named {
            let _ = fs::remove_file(p);
        }
    }
}

/// Whether opening with `O_TMPFILE` failed for want of unnamed files.
fn unsupported(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
    )
}

/// `path` as a C string.
pub(super) fn c_path(path: &Path) -> std::io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
}

/// A path in `dir` for a new file made from `path`: `.NAME.slim-TAG-PID-N`,
/// unique among this process's files too (files of one name from several
/// directories may be slimmed at once). `offload-probe`'s directory walk
/// skips such names.
pub fn temp_path(dir: &Path, path: &Path, tag: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("slim");
    dir.join(format!(".{name}.slim-{tag}-{}-{n}", std::process::id()))
}

/// Whether `name` is one `temp_path` gives the files slim is making (a
/// directory walk skips them):
/// `.NAME.slim-TAG-PID-N`, TAG one of `pass`, `result`, `link`, `copy`.
pub fn is_temporary(name: &std::ffi::OsStr) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let name = name.as_bytes();
    let Some(rest) = name.strip_prefix(b".") else {
        return false;
    };
    let Some(at) = rest.windows(6).rposition(|w| w == b".slim-") else {
        return false;
    };
    let mut parts = rest[at + 6..].split(|&b| b == b'-');
    let digits =
        |p: Option<&[u8]>| p.is_some_and(|p| !p.is_empty() && p.iter().all(u8::is_ascii_digit));
    matches!(parts.next(), Some(b"pass" | b"result" | b"link" | b"copy"))
        && digits(parts.next())
        && digits(parts.next())
        && parts.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// An unnamed file is nowhere in its directory until published; then it
    /// is exactly at its target, and nothing else is left.
    #[test]
    fn unnamed_until_published() {
        let dir = std::env::temp_dir().join(format!("offload-slim-temp-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let target = dir.join("lib.so");
        fs::write(&target, b"old").unwrap();
        let mut t = Temp::new(&dir, &target, "result").unwrap();
        t.file().write_all(b"new").unwrap();
        assert_eq!(fs::read(t.path()).unwrap(), b"new");
        let names = || {
            let mut v: Vec<String> = fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        assert_eq!(names(), ["lib.so"]);
        t.publish(&target).unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"new");
        assert_eq!(names(), ["lib.so"]);
        // Dropped unpublished: nothing left.
        drop(Temp::new(&dir, &target, "result").unwrap());
        assert_eq!(names(), ["lib.so"]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn slim_temporary_names() {
        let yes = [
            ".a.slim-pass-1-0",
            ".lib.so.1.slim-result-123-45",
            ".x.slim-link-9-9",
            ".y.py.slim-copy-7-3",
        ];
        let no = [
            "a.slim-pass-1-0",
            ".a.slim-pass-1",
            ".a.slim-other-1-0",
            ".a.slim-pass-1-0-2",
            ".a.slim-pass-x-0",
            ".slim",
        ];
        for n in yes {
            assert!(is_temporary(std::ffi::OsStr::new(n)), "{n}");
        }
        for n in no {
            assert!(!is_temporary(std::ffi::OsStr::new(n)), "{n}");
        }
    }
}
