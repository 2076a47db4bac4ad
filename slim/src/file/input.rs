//! The file being slimmed: mapped, with what it was when mapped (its
//! identity, size and modification time, its attributes), so that a change
//! while it is read (a package upgrade truncating or replacing it) is found
//! and the file's result refused, never written.

use std::fs::File;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use offload_loader::MappedFile;

use super::guard::Registration;
use super::keep::{Attributes, KeepError};

/// Why the input cannot be slimmed.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// Opening or mapping it.
    #[error("{0}")]
    Open(String),
    /// Its attributes.
    #[error("{0}")]
    Keep(#[from] KeepError),
    /// It changed while it was read.
    #[error("changed while it was read ({0}): nothing written")]
    Changed(&'static str),
    /// Other hard links to it are not being slimmed.
    #[error(
        "it has {links} hard links and the files to slim name only {named} of them: \
         replacing it would leave the others with the old contents; name every link \
         (or a directory holding them all), or slim a copy"
    )]
    Links { links: u64, named: usize },
    /// `--output` names the input itself.
    #[error("{} is this file itself: writing there would replace the input", .0.display())]
    OverInput(PathBuf),
}

/// What identifies a file's contents: device and inode, size and
/// modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    nlink: u64,
}

impl Stamp {
    fn of(m: &std::fs::Metadata) -> Stamp {
        Stamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            nlink: m.nlink(),
        }
    }
}

/// A mapped input.
pub struct Input {
    path: PathBuf,
    /// Held open for `fstat`, the same file as the mapping.
    file: File,
    map: MappedFile,
    before: Stamp,
}

impl Input {
    /// Maps `path`, or with `part` (offset, length) only those bytes of it
    /// (a file inside another, a tar stream's member, slimmed as if it were
    /// whole), and records what it is. A file replaced between the open
    /// and the map is an error.
    pub fn open(path: &Path, part: Option<(u64, u64)>) -> Result<Input, InputError> {
        // Without blocking: a pipe would wait for a writer (MappedFile then
        // refuses it).
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| InputError::Open(format!("{}: {e}", path.display())))?;
        let map = match part {
            None => MappedFile::open(path),
            Some((offset, len)) => MappedFile::open_part(path, offset, len),
        };
        let map = map.map_err(|e| InputError::Open(e.to_string()))?;
        let m = file
            .metadata()
            .map_err(|e| InputError::Open(format!("{}: {e}", path.display())))?;
        let before = Stamp::of(&m);
        let input = Input {
            path: path.to_path_buf(),
            file,
            map,
            before,
        };
        let size = part.map_or(before.size, |(_, len)| len);
        if input.map.bytes().len() as u64 != size {
            return Err(InputError::Changed("its size is not the size mapped"));
        }
        input.same_file()?;
        // Slimming reads the whole file (the containers, what may refer to
        // them, the comparison, the copy): each fault reads ahead, as
        // `cp`'s reads do, not page by page.
        input.map.will_read_all();
        Ok(input)
    }

    /// The mapped bytes.
    pub fn map(&self) -> &MappedFile {
        &self.map
    }

    /// Its owner, mode and extended attributes.
    pub fn attributes(&self) -> Result<Attributes, KeepError> {
        Attributes::of(&self.file)
    }

    /// Whether everything read from it was its contents as mapped: no read
    /// past its end (`guard` not damaged), the same size and modification
    /// time, and its path still naming it.
    pub fn unchanged(&self, guard: &Registration<'_>) -> Result<(), InputError> {
        if guard.damaged() {
            return Err(InputError::Changed("it shrank under the reads"));
        }
        let now = self
            .file
            .metadata()
            .map_err(|e| InputError::Open(format!("{}: {e}", self.path.display())))?;
        let now = Stamp::of(&now);
        if now.size != self.before.size {
            return Err(InputError::Changed("its size changed"));
        }
        if now.mtime != self.before.mtime {
            return Err(InputError::Changed("it was written to"));
        }
        self.same_file()
    }

    /// Whether its path still names the file mapped.
    fn same_file(&self) -> Result<(), InputError> {
        match std::fs::metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) == (self.before.dev, self.before.ino) => Ok(()),
            _ => Err(InputError::Changed("its name now names another file")),
        }
    }

    /// Refuses to replace a file whose other hard links are not all among
    /// `also` (names of the same file, being replaced too): the others would
    /// keep the old contents, split off.
    pub fn all_links_named(&self, also: &[PathBuf]) -> Result<(), InputError> {
        let mut names = std::collections::BTreeSet::new();
        let key = (self.before.dev, self.before.ino);
        for p in std::iter::once(&self.path).chain(also) {
            let same = std::fs::metadata(p).is_ok_and(|m| (m.dev(), m.ino()) == key);
            if let (true, Ok(real)) = (same, std::fs::canonicalize(p)) {
                names.insert(real);
            }
        }
        if self.before.nlink > names.len() as u64 {
            return Err(InputError::Links {
                links: self.before.nlink,
                named: names.len(),
            });
        }
        Ok(())
    }

    /// Refuses `target` where it is this file (another of its names).
    pub fn not_at(&self, target: &Path) -> Result<(), InputError> {
        match std::fs::metadata(target) {
            Ok(m) if (m.dev(), m.ino()) == (self.before.dev, self.before.ino) => {
                Err(InputError::OverInput(target.to_path_buf()))
            }
            _ => Ok(()),
        }
    }
}
