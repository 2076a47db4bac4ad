//! The rest of an output tree: the files slim leaves as they are copied or
//! linked, other names of a file made again, symbolic links made again (the
//! same target text, never followed), directories given what they were.
//!
//! A copy shares the original's blocks where the file system can
//! (`FICLONE`: Btrfs, XFS, bcachefs), and is otherwise copied in the kernel
//! (`copy_file_range`) extent by extent, its holes kept as holes; it keeps
//! the original's mode, owner (as root), extended attributes ([`keep`]) and
//! times. Every name is made under a temporary name beside its place
//! ([`temp`]: a copy unnamed until complete) and renamed over it, so a kill
//! leaves the old name or the new one, and a name already there (a run
//! before) is replaced. A source that is not a regular file is never
//! opened for reading (`O_NONBLOCK`, then `fstat`): a pipe would wait for a
//! writer. A source that changes while it is copied is an error.
//!
//! [`keep`]: super::keep
//! [`temp`]: super::temp

use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::keep::{Attributes, KeepError, Strictness};
use super::temp::{self, Temp, TempError};

/// How an unchanged file goes into an output tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// A file of its own with the same bytes.
    Copy,
    /// A hard link to the original: no space, but the same file (a change
    /// to one is a change to both).
    Link,
}

/// How a file went into the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Copied {
    /// A copy sharing the original's blocks (`FICLONE`).
    Cloned,
    /// A copy of the bytes.
    Copied,
    /// A hard link to the original.
    Linked,
}

/// Why a name could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// Opening or reading what is copied.
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Not a regular file (a pipe, socket or device): never read.
    #[error("{}: not a regular file", .0.display())]
    NotRegular(PathBuf),
    /// Writing the copy or making the name.
    #[error("{}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// It changed while it was copied: the copy is not put in place.
    #[error("{}: changed while it was copied: nothing written", .0.display())]
    Changed(PathBuf),
    /// Keeping what it was.
    #[error("{}: {source}", path.display())]
    Keep { path: PathBuf, source: KeepError },
    /// The new file or its name.
    #[error(transparent)]
    Temp(#[from] TempError),
}

/// Puts the regular file `from` at `to` as `how` says, replacing what is
/// there; how it went, and what the copy could not keep of what the file
/// was (in words, as for a result). A hard link that cannot be made because
/// `to` is on another file system is a copy instead, and said.
pub fn copy_file(from: &Path, to: &Path, how: How) -> Result<(Copied, Vec<String>), CopyError> {
    let source = open_regular(from)?;
    let dir = parent(to);
    fs::create_dir_all(&dir).map_err(|e| write_error(&dir, e))?;
    if how == How::Copy {
        return copy_bytes(from, &source, to);
    }
    match link_name(from, to) {
        Ok(()) => Ok((Copied::Linked, Vec::new())),
        Err(CopyError::Write { source: e, .. }) if e.raw_os_error() == Some(libc::EXDEV) => {
            let (copied, mut notes) = copy_bytes(from, &source, to)?;
            notes.push("a hard link cannot cross file systems: copied".into());
            Ok((copied, notes))
        }
        Err(e) => Err(e),
    }
}

/// Makes `to` another name of the file at `existing` (a hard link),
/// replacing what is there; nothing to do where it already is one.
pub fn link_name(existing: &Path, to: &Path) -> Result<(), CopyError> {
    let key = |p: &Path| fs::symlink_metadata(p).ok().map(|m| (m.dev(), m.ino()));
    if key(to).is_some() && key(to) == key(existing) {
        return Ok(());
    }
    let link = temp::temp_path(&parent(to), to, "link");
    fs::hard_link(existing, &link).map_err(|e| write_error(to, e))?;
    rename(&link, to)
}

/// Makes `to` a symbolic link with the text `target` (never followed), with
/// the times and, as root, the owner of the link `like`; replacing what is
/// there.
pub fn symlink_name(target: &Path, like: &Path, to: &Path) -> Result<(), CopyError> {
    let m = fs::symlink_metadata(like).map_err(|e| read_error(like, e))?;
    let dir = parent(to);
    fs::create_dir_all(&dir).map_err(|e| write_error(&dir, e))?;
    let link = temp::temp_path(&dir, to, "link");
    std::os::unix::fs::symlink(target, &link).map_err(|e| write_error(to, e))?;
    let c = temp::c_path(&link).map_err(|e| write_error(to, e))?;
    // SAFETY: `c` is a NUL-terminated path that outlives the call; the
    // owner is only tried (a link's owner matters little; only root may
    // give it away).
    unsafe {
        libc::lchown(c.as_ptr(), m.uid(), m.gid());
    }
    let times = times(&m);
    // SAFETY: `c` is NUL-terminated and `times` two timespecs, both
    // outliving the call.
    let rc = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        let _ = fs::remove_file(&link);
        return Err(write_error(to, e));
    }
    rename(&link, to)
}

/// Gives the directory `to` what the directory `from` is: mode, owner (as
/// root), extended attributes (default ACLs too) and times. Done once
/// everything in it is made (a read-only directory could take nothing
/// more, and each new name changes its times). What could not be kept, in
/// words.
pub fn keep_directory(from: &Path, to: &Path) -> Result<Vec<String>, CopyError> {
    let open = |p: &Path| {
        fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(p)
    };
    let source = open(from).map_err(|e| read_error(from, e))?;
    let dest = open(to).map_err(|e| write_error(to, e))?;
    let notes = keep(from, &source, to, &dest)?;
    Ok(notes)
}

/// `to` made a copy of `from` (open as `source`): its blocks shared where
/// the file system can, else its bytes copied with its holes; checked
/// unchanged, given what `from` was, then renamed into place.
fn copy_bytes(from: &Path, source: &File, to: &Path) -> Result<(Copied, Vec<String>), CopyError> {
    let before = source.metadata().map_err(|e| read_error(from, e))?;
    let mut temp = Temp::new(&parent(to), to, "copy")?;
    // SAFETY: FICLONE with two open descriptors: the new file takes the
    // source's blocks, or the call fails and changes nothing.
    let cloned =
        unsafe { libc::ioctl(temp.file().as_raw_fd(), libc::FICLONE, source.as_raw_fd()) } == 0;
    if !cloned {
        copy_data(source, temp.file(), before.len()).map_err(|e| write_error(to, e))?;
    }
    let after = source.metadata().map_err(|e| read_error(from, e))?;
    if (after.len(), after.mtime(), after.mtime_nsec())
        != (before.len(), before.mtime(), before.mtime_nsec())
    {
        return Err(CopyError::Changed(from.to_path_buf()));
    }
    let notes = keep(from, source, to, temp.file())?;
    temp.publish(to)?;
    Ok((
        if cloned {
            Copied::Cloned
        } else {
            Copied::Copied
        },
        notes,
    ))
}

/// Gives `dest` (the new file or directory at `to`) what `source` (at
/// `from`) is: owner, extended attributes, mode, then times (last: setting
/// the others changes none of them, a write would).
fn keep(from: &Path, source: &File, to: &Path, dest: &File) -> Result<Vec<String>, CopyError> {
    let attributes = Attributes::of(source).map_err(|e| CopyError::Keep {
        path: from.to_path_buf(),
        source: e,
    })?;
    let notes = attributes
        .apply(dest, Strictness::Copy)
        .map_err(|e| CopyError::Keep {
            path: to.to_path_buf(),
            source: e,
        })?;
    let m = source.metadata().map_err(|e| read_error(from, e))?;
    let times = times(&m);
    // SAFETY: futimens on an open descriptor with two timespecs that
    // outlive the call.
    if unsafe { libc::futimens(dest.as_raw_fd(), times.as_ptr()) } != 0 {
        return Err(write_error(to, std::io::Error::last_os_error()));
    }
    Ok(notes)
}

/// The bytes of `source` (`len` long) copied into the empty `dest`, data
/// extent by data extent (`SEEK_DATA`/`SEEK_HOLE`), so that holes stay
/// holes; in the kernel where it can (`copy_file_range`).
fn copy_data(source: &File, dest: &File, len: u64) -> std::io::Result<()> {
    let mut at = 0;
    while at < len {
        let Some(data) = seek(source, at, libc::SEEK_DATA)? else {
            break;
        };
        let end = seek(source, data, libc::SEEK_HOLE)?.unwrap_or(len).min(len);
        copy_range(source, dest, data, end)?;
        at = end;
    }
    dest.set_len(len)
}

/// Where the next data (`SEEK_DATA`) or hole (`SEEK_HOLE`) of `file` is at
/// or after `at`: `None` past the last data. Where the file system cannot
/// say, everything is data.
fn seek(file: &File, at: u64, whence: i32) -> std::io::Result<Option<u64>> {
    // SAFETY: lseek on an open descriptor.
    let got = unsafe { libc::lseek(file.as_raw_fd(), at as libc::off_t, whence) };
    if got >= 0 {
        return Ok(Some(got as u64));
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENXIO) => Ok(None),
        Some(libc::EINVAL) if whence == libc::SEEK_DATA => Ok(Some(at)),
        Some(libc::EINVAL) => Ok(None),
        _ => Err(e),
    }
}

/// Bytes `start..end` of `source` copied to the same place in `dest`: by
/// `copy_file_range`, or by reads and writes where it cannot be used.
fn copy_range(source: &File, dest: &File, start: u64, end: u64) -> std::io::Result<()> {
    let mut at = start;
    while at < end {
        let mut from = at as libc::loff_t;
        let mut to = at as libc::loff_t;
        let want = (end - at).min(1 << 30) as usize;
        // The system call itself, not glibc's wrapper: the wheel's binary
        // links against glibc 2.17 (manylinux2014), which has none (2.27
        // added it); a kernel older than 4.5 answers ENOSYS, and the copy
        // falls back to reads and writes as for any other refusal.
        // SAFETY: both descriptors are open; the offsets are ours, updated
        // by the call; the arguments are those copy_file_range(2) takes.
        let n = unsafe {
            libc::syscall(
                libc::SYS_copy_file_range,
                source.as_raw_fd(),
                &mut from as *mut libc::loff_t,
                dest.as_raw_fd(),
                &mut to as *mut libc::loff_t,
                want,
                0u32,
            )
        };
        match n {
            0 => return Err(shrank()),
            n if n > 0 => at += n as u64,
            _ => {
                let e = std::io::Error::last_os_error();
                return match e.raw_os_error() {
                    Some(libc::ENOSYS | libc::EXDEV | libc::EINVAL | libc::EOPNOTSUPP) => {
                        read_write(source, dest, at, end)
                    }
                    _ => Err(e),
                };
            }
        }
    }
    Ok(())
}

/// Bytes `start..end` of `source` copied to `dest` by reads and writes.
fn read_write(source: &File, dest: &File, start: u64, end: u64) -> std::io::Result<()> {
    let mut buf = vec![0u8; (end - start).min(1 << 20) as usize];
    let mut at = start;
    while at < end {
        let want = (end - at).min(buf.len() as u64) as usize;
        let n = source.read_at(&mut buf[..want], at)?;
        if n == 0 {
            return Err(shrank());
        }
        dest.write_all_at(&buf[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

fn shrank() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        "it shrank while it was copied",
    )
}

/// `from` opened for reading without blocking and without following a
/// link, refused unless it is a regular file.
fn open_regular(from: &Path) -> Result<File, CopyError> {
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(from)
        .map_err(|e| read_error(from, e))?;
    let m = file.metadata().map_err(|e| read_error(from, e))?;
    if !m.is_file() {
        return Err(CopyError::NotRegular(from.to_path_buf()));
    }
    Ok(file)
}

/// A file's access and modification times, for `futimens`/`utimensat`.
fn times(m: &fs::Metadata) -> [libc::timespec; 2] {
    [
        libc::timespec {
            tv_sec: m.atime() as libc::time_t,
            tv_nsec: m.atime_nsec() as libc::c_long,
        },
        libc::timespec {
            tv_sec: m.mtime() as libc::time_t,
            tv_nsec: m.mtime_nsec() as libc::c_long,
        },
    ]
}

/// `link` (a temporary name) renamed over `to`; removed if that fails.
fn rename(link: &Path, to: &Path) -> Result<(), CopyError> {
    fs::rename(link, to).map_err(|e| {
        let _ = fs::remove_file(link);
        write_error(to, e)
    })
}

/// The directory `path` is in (`.` for a bare name).
fn parent(path: &Path) -> PathBuf {
    super::dir_of(path)
}

fn read_error(path: &Path, source: std::io::Error) -> CopyError {
    CopyError::Read {
        path: path.to_path_buf(),
        source,
    }
}

fn write_error(path: &Path, source: std::io::Error) -> CopyError {
    CopyError::Write {
        path: path.to_path_buf(),
        source,
    }
}
