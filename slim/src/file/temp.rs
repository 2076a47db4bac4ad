//! New files that a kill leaves behind at most for the moment of their
//! naming: made unnamed (`O_TMPFILE`) in the directory they will end up in,
//! and given a name only once they are complete. Where the file system has
//! no unnamed files, a named one (`.NAME.slim-TAG-PID-N`, a name the
//! probe's walk knows and skips) is made instead and removed unless
//! published. What a killed run left, [`remove_leftovers`] removes.

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
    made_by(name).is_some()
}

/// The process that made the temporary file `name` (the PID in
/// `.NAME.slim-TAG-PID-N`), where `name` is one and its PID a process ID.
fn maker(name: &std::ffi::OsStr) -> Option<u32> {
    std::str::from_utf8(made_by(name)?).ok()?.parse().ok()
}

/// The PID digits of `.NAME.slim-TAG-PID-N`, where `name` has that shape
/// (PID and N decimal digits, TAG one of `temp_path`'s).
fn made_by(name: &std::ffi::OsStr) -> Option<&[u8]> {
    let rest = name.as_bytes().strip_prefix(b".")?;
    let at = rest.windows(6).rposition(|w| w == b".slim-")?;
    let mut parts = rest[at + 6..].split(|&b| b == b'-');
    fn digits(p: Option<&[u8]>) -> Option<&[u8]> {
        p.filter(|p| !p.is_empty() && p.iter().all(u8::is_ascii_digit))
    }
    if !matches!(parts.next(), Some(b"pass" | b"result" | b"link" | b"copy")) {
        return None;
    }
    let pid = digits(parts.next())?;
    digits(parts.next())?;
    parts.next().is_none().then_some(pid)
}

/// Removes from `dir` the temporary files of slim runs that are gone, and
/// returns their paths.
///
/// An unnamed file is given its name in two steps, a link under a
/// temporary name and a rename over the target (Linux has no link that
/// replaces), and a run killed between the two leaves the complete result
/// under the temporary name. Such a file is removed here once no process
/// of its PID runs (`kill(PID, 0)` fails with `ESRCH`). Where the PID is
/// in use again, or the name came from another PID namespace whose process
/// still runs, the file is kept: the safe side. A run in another PID
/// namespace that this one cannot see may lose its temporary name; its
/// rename then fails and its target stays what it was. Only files and
/// symbolic links are removed, never a directory.
pub fn remove_leftovers(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let Some(pid) = maker(&entry.file_name()) else {
            continue;
        };
        if entry.file_type()?.is_dir() || !gone(pid) {
            continue;
        }
        let path = entry.path();
        match fs::remove_file(&path) {
            Ok(()) => removed.push(path),
            // Removed by another run meanwhile.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

/// Whether no process `pid` runs (as far as this PID namespace shows).
fn gone(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 || pid == libc::pid_t::try_from(std::process::id()).unwrap_or(0) {
        return false;
    }
    // SAFETY: signal 0 sends nothing; it only asks whether `pid` exists.
    let rc = unsafe { libc::kill(pid, 0) };
    rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
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

    /// What a run that is gone left is removed; a running process's
    /// temporary file, a directory, and other names are kept.
    #[test]
    fn leftovers_of_runs_that_are_gone() {
        let dir = std::env::temp_dir().join(format!("offload-slim-left-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        // A process that has been reaped: its PID names no process (unless
        // reused at once, which would keep its file: the safe side).
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let me = std::process::id();
        let stale = [
            format!(".lib.so.slim-link-{dead}-0"),
            format!(".lib.so.slim-result-{dead}-3"),
        ];
        let kept = [
            format!(".lib.so.slim-link-{me}-0"),
            ".lib.so.slim-copy-1-0".to_string(),
            format!(".lib.so.slim-links-{dead}-0"),
            "lib.so".to_string(),
        ];
        for name in stale.iter().chain(&kept) {
            fs::write(dir.join(name), b"x").unwrap();
        }
        fs::create_dir(dir.join(format!(".d.slim-copy-{dead}-1"))).unwrap();
        std::os::unix::fs::symlink("lib.so", dir.join(format!(".l.slim-link-{dead}-2"))).unwrap();

        let mut removed = remove_leftovers(&dir).unwrap();
        removed.sort();
        let mut expected: Vec<PathBuf> = stale
            .iter()
            .chain([&format!(".l.slim-link-{dead}-2")])
            .map(|n| dir.join(n))
            .collect();
        expected.sort();
        assert_eq!(removed, expected);
        let mut left: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        let mut want: Vec<String> = kept.to_vec();
        want.push(format!(".d.slim-copy-{dead}-1"));
        want.sort();
        assert_eq!(left, want);
        assert!(remove_leftovers(&dir).unwrap().is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn slim_temporary_names() {
        let yes = [
            ".a.slim-pass-1-0",
            ".lib.so.1.slim-result-123-45",
            ".x.slim-link-9-9",
            ".y.py.slim-copy-7-3",
            ".z.slim-copy-99999999999-123456789012345678901234567890",
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
        // A name of that shape whose PID is no process ID is skipped by a
        // walk, and no process's leftover.
        let huge = std::ffi::OsStr::new(".z.slim-copy-99999999999-1");
        assert!(is_temporary(huge) && maker(huge).is_none());
        // Every name `temp_path` gives names this process as its maker.
        for tag in ["pass", "result", "link", "copy"] {
            for like in ["lib.so.1", "x", ".hidden", "a-1-2.slim-pass-3-4"] {
                let path = temp_path(Path::new("/d"), Path::new(like), tag);
                let name = path.file_name().unwrap();
                assert_eq!(maker(name), Some(std::process::id()), "{path:?}");
            }
        }
    }
}
