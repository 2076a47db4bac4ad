//! What a file was, kept by its replacement: owner and group, mode (setuid,
//! setgid and sticky bits included), and every extended attribute (POSIX
//! ACLs, SELinux labels, file capabilities, `user.*`).
//!
//! The order matters: the owner first (`chown` clears setuid, setgid and
//! file capabilities), then the attributes (capabilities last), then the
//! mode (setting an ACL rewrites the group bits; the original's mode and
//! ACL agree). Everything is set on the open, still unnamed file, after its
//! bytes are written (a write clears setuid and capabilities too).

use std::ffi::{CStr, CString};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;

/// The extended attribute that holds file capabilities.
const CAPABILITY: &[u8] = b"security.capability";

/// Why an attribute could not be read or kept.
#[derive(Debug, thiserror::Error)]
pub enum KeepError {
    /// Reading the original's metadata.
    #[error("reading its attributes: {0}")]
    Read(std::io::Error),
    /// Setting the owner.
    #[error("keeping its owner {uid}:{gid}: {source}")]
    Owner {
        uid: u32,
        gid: u32,
        source: std::io::Error,
    },
    /// Setting or removing an extended attribute.
    #[error("keeping its extended attribute {name}: {source}")]
    Attribute {
        name: String,
        source: std::io::Error,
    },
    /// Setting the mode.
    #[error("keeping its mode {mode:o}: {source}")]
    Mode { mode: u32, source: std::io::Error },
}

/// A file's owner, mode and extended attributes.
#[derive(Debug, Clone)]
pub struct Attributes {
    uid: u32,
    gid: u32,
    /// Permission bits with setuid, setgid and sticky.
    mode: u32,
    /// Name and value of each extended attribute.
    xattrs: Vec<(CString, Vec<u8>)>,
}

/// How strictly a result keeps what its original was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strictness {
    /// Replacing the original (`--in-place`): an attribute that cannot be
    /// set is an error; an owner that cannot be kept is said.
    InPlace,
    /// A copy elsewhere (`--output`): what cannot be kept is said only
    /// where it takes a privilege away (setuid, setgid, capabilities).
    Copy,
}

impl Attributes {
    /// What `file` (open for reading) is.
    pub fn of(file: &File) -> Result<Attributes, KeepError> {
        let m = file.metadata().map_err(KeepError::Read)?;
        let xattrs = names(file)
            .map_err(KeepError::Read)?
            .into_iter()
            .map(|name| {
                let value = get(file, &name).map_err(KeepError::Read)?;
                Ok((name, value))
            })
            .collect::<Result<Vec<_>, KeepError>>()?;
        Ok(Attributes {
            uid: m.uid(),
            gid: m.gid(),
            mode: m.mode() & 0o7777,
            xattrs,
        })
    }

    /// Gives `file` (the new, written file) these attributes; what could not
    /// be kept, in words (for the report).
    pub fn apply(&self, file: &File, strictness: Strictness) -> Result<Vec<String>, KeepError> {
        let mut notes = Vec::new();
        let mut mode = self.mode;
        let owner_kept = self.owner(file, strictness, &mut mode, &mut notes)?;
        self.attributes(file, strictness, owner_kept, &mut notes)?;
        // SAFETY: fchmod on an open descriptor.
        if unsafe { libc::fchmod(file.as_raw_fd(), mode) } != 0 {
            return Err(KeepError::Mode {
                mode,
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(notes)
    }

    /// Sets the owner and group; where this process may not (it is not
    /// root), the setuid and setgid bits go from `mode`, as `cp -p` does,
    /// and `notes` say so. Whether the owner was kept.
    fn owner(
        &self,
        file: &File,
        strictness: Strictness,
        mode: &mut u32,
        notes: &mut Vec<String>,
    ) -> Result<bool, KeepError> {
        let now = file.metadata().map_err(KeepError::Read)?;
        if (now.uid(), now.gid()) == (self.uid, self.gid) {
            return Ok(true);
        }
        let err = |source| KeepError::Owner {
            uid: self.uid,
            gid: self.gid,
            source,
        };
        // SAFETY: fchown on an open descriptor.
        if unsafe { libc::fchown(file.as_raw_fd(), self.uid, self.gid) } == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EPERM) {
            return Err(err(e));
        }
        // The group alone may be ours to give (a group this process is in).
        // SAFETY: fchown on an open descriptor; -1 keeps the owner.
        let group = unsafe { libc::fchown(file.as_raw_fd(), u32::MAX, self.gid) } == 0;
        let dropped = *mode & (libc::S_ISUID | libc::S_ISGID);
        *mode &= !(libc::S_ISUID | libc::S_ISGID);
        let who = if group {
            format!("{}:{}", now.uid(), self.gid)
        } else {
            format!("{}:{}", now.uid(), now.gid())
        };
        if strictness == Strictness::InPlace || dropped != 0 {
            let bits = if dropped != 0 {
                "; its setuid/setgid bits are dropped"
            } else {
                ""
            };
            notes.push(format!(
                "its owner {}:{} is not kept (only root may give a file away): the result belongs to {who}{bits}",
                self.uid, self.gid
            ));
        }
        Ok(false)
    }

    /// Sets every extended attribute the original has (capabilities last)
    /// and removes those the new file has that it had not (an ACL inherited
    /// from the directory). Capabilities that may not be set (this process
    /// lacks `CAP_SETFCAP`, or the owner was not kept) are dropped and said;
    /// any other failure is an error in place, said in a copy.
    fn attributes(
        &self,
        file: &File,
        strictness: Strictness,
        owner_kept: bool,
        notes: &mut Vec<String>,
    ) -> Result<(), KeepError> {
        let mut order: Vec<&(CString, Vec<u8>)> = self.xattrs.iter().collect();
        order.sort_by_key(|(name, _)| name.as_bytes() == CAPABILITY);
        for (name, value) in order {
            let Err(source) = set(file, name, value) else {
                continue;
            };
            let shown = name.to_string_lossy().into_owned();
            if name.as_bytes() == CAPABILITY
                && (!owner_kept || source.raw_os_error() == Some(libc::EPERM))
            {
                notes.push(format!(
                    "its file capabilities ({shown}) are dropped: {source}"
                ));
            } else if strictness == Strictness::InPlace {
                return Err(KeepError::Attribute {
                    name: shown,
                    source,
                });
            } else {
                notes.push(format!(
                    "its extended attribute {shown} is not kept: {source}"
                ));
            }
        }
        let extra = names(file).map_err(KeepError::Read)?;
        for name in extra {
            if self.xattrs.iter().any(|(n, _)| *n == name) {
                continue;
            }
            if let Err(source) = remove(file, &name) {
                let shown = name.to_string_lossy().into_owned();
                if strictness == Strictness::InPlace {
                    return Err(KeepError::Attribute {
                        name: shown,
                        source,
                    });
                }
                notes.push(format!(
                    "the result has an extended attribute the original has not ({shown}): {source}"
                ));
            }
        }
        Ok(())
    }
}

/// The names of `file`'s extended attributes (none where the file system
/// has none).
fn names(file: &File) -> std::io::Result<Vec<CString>> {
    let fd = file.as_raw_fd();
    loop {
        // SAFETY: a NULL buffer of size 0 asks for the size only.
        let size = unsafe { libc::flistxattr(fd, std::ptr::null_mut(), 0) };
        if size < 0 {
            let e = std::io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ENOTSUP) => Ok(Vec::new()),
                _ => Err(e),
            };
        }
        let mut buf = vec![0u8; size as usize];
        // SAFETY: `buf` is valid for writes of its length.
        let got = unsafe { libc::flistxattr(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if got < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ERANGE) {
                continue; // grew meanwhile
            }
            return Err(e);
        }
        buf.truncate(got as usize);
        return Ok(buf
            .split(|&b| b == 0)
            .filter(|n| !n.is_empty())
            .filter_map(|n| CString::new(n).ok())
            .collect());
    }
}

/// The value of `file`'s extended attribute `name`.
fn get(file: &File, name: &CStr) -> std::io::Result<Vec<u8>> {
    let fd = file.as_raw_fd();
    loop {
        // SAFETY: `name` is NUL-terminated; a NULL buffer of size 0 asks for
        // the size only.
        let size = unsafe { libc::fgetxattr(fd, name.as_ptr(), std::ptr::null_mut(), 0) };
        if size < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut buf = vec![0u8; size as usize];
        // SAFETY: `name` is NUL-terminated; `buf` is valid for writes of its
        // length.
        let got = unsafe { libc::fgetxattr(fd, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if got < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ERANGE) {
                continue;
            }
            return Err(e);
        }
        buf.truncate(got as usize);
        return Ok(buf);
    }
}

/// Sets `file`'s extended attribute `name` to `value`.
fn set(file: &File, name: &CStr, value: &[u8]) -> std::io::Result<()> {
    // SAFETY: `name` is NUL-terminated; `value` is valid for reads of its
    // length.
    let rc = unsafe {
        libc::fsetxattr(
            file.as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Removes `file`'s extended attribute `name`.
fn remove(file: &File, name: &CStr) -> std::io::Result<()> {
    // SAFETY: `name` is NUL-terminated.
    if unsafe { libc::fremovexattr(file.as_raw_fd(), name.as_ptr()) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
