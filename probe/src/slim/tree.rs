//! `--output DIR` as a whole tree: every entry under the inputs, at its path
//! relative to the input it was found under (a file named itself: at its
//! name), listed without following a symbolic link, so that DIR can stand
//! in for the inputs. Which name of a file gets the slimmed result, which
//! names are copies, links, or left out, is `complete`'s business; this
//! lists, and refuses what would overwrite an input.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Device and inode: what a file is, whatever its name.
pub type Key = (u64, u64);

/// One entry of the tree: where it is, where it goes, what it is.
#[derive(Debug, Clone)]
pub struct Entry {
    pub from: PathBuf,
    pub to: PathBuf,
    pub kind: Kind,
}

/// What an entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A directory (made, then given its mode once full).
    Dir,
    /// A regular file (or, named itself, what a link named names).
    File(Key),
    /// A symbolic link: its text, and the regular file it names, if any.
    Link { target: PathBuf, names: Option<Key> },
    /// A pipe, socket or device: never opened, reported and skipped.
    Other(&'static str),
}

/// The tree: its entries in order (a directory before what it holds), and
/// what could not be listed or is refused.
#[derive(Debug, Default)]
pub struct Tree {
    pub entries: Vec<Entry>,
    pub errors: Vec<String>,
}

impl Tree {
    /// The entries of the inputs `paths` under `dir`; an error when `dir`
    /// and an input directory overlap: a copy that would hold itself, or
    /// write among its own inputs. `linking`: the files left as they are
    /// are hard-linked, so a place that already is the file it would link
    /// (a run before) is no clash.
    pub fn list(paths: &[PathBuf], dir: &Path, linking: bool) -> Result<Tree, String> {
        let out = resolved_dir(dir);
        for p in paths.iter().filter(|p| p.is_dir()) {
            let input = std::fs::canonicalize(p).map_err(|e| format!("{}: {e}", p.display()))?;
            if out.starts_with(&input) || input.starts_with(&out) {
                return Err(format!(
                    "--output {} and the input {} overlap: the tree must go elsewhere",
                    dir.display(),
                    p.display()
                ));
            }
        }
        let mut tree = Tree::default();
        for p in paths {
            match std::fs::metadata(p) {
                Ok(m) if m.is_dir() => tree.dir(p, dir.to_path_buf()),
                Ok(m) => tree.named(p, dir, &m),
                Err(e) => tree.errors.push(format!("{}: {e}", p.display())),
            }
        }
        tree.claim();
        tree.refuse_inputs(linking);
        Ok(tree)
    }

    /// A file named itself: at its name, what it names (a link followed).
    fn named(&mut self, path: &Path, dir: &Path, m: &std::fs::Metadata) {
        let to = dir.join(path.file_name().unwrap_or(path.as_os_str()));
        let kind = match other(&m.file_type()) {
            Some(kind) => Kind::Other(kind),
            None => Kind::File((m.dev(), m.ino())),
        };
        self.entries.push(Entry {
            from: path.to_path_buf(),
            to,
            kind,
        });
    }

    /// The directory `from`, going to `to`, and everything under it, in
    /// sorted order; `slim`'s own temporary files are not entries.
    fn dir(&mut self, from: &Path, to: PathBuf) {
        self.entries.push(Entry {
            from: from.to_path_buf(),
            to: to.clone(),
            kind: Kind::Dir,
        });
        let list = match std::fs::read_dir(from) {
            Ok(list) => list,
            Err(e) => return self.errors.push(format!("{}: {e}", from.display())),
        };
        let mut names: Vec<std::ffi::OsString> = Vec::new();
        for e in list {
            match e {
                Ok(e) if !offload_slim::is_temporary(&e.file_name()) => names.push(e.file_name()),
                Ok(_) => {}
                Err(e) => self.errors.push(format!("{}: {e}", from.display())),
            }
        }
        names.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        for name in names {
            let (path, to) = (from.join(&name), to.join(&name));
            match std::fs::symlink_metadata(&path) {
                Ok(m) if m.is_dir() => self.dir(&path, to),
                Ok(m) => self.entry(path, to, &m),
                Err(e) => self.errors.push(format!("{}: {e}", path.display())),
            }
        }
    }

    /// An entry that is not a directory.
    fn entry(&mut self, from: PathBuf, to: PathBuf, m: &std::fs::Metadata) {
        let t = m.file_type();
        let kind = if t.is_symlink() {
            match std::fs::read_link(&from) {
                Ok(target) => Kind::Link {
                    target,
                    names: std::fs::metadata(&from)
                        .ok()
                        .filter(|m| m.is_file())
                        .map(|m| (m.dev(), m.ino())),
                },
                Err(e) => return self.errors.push(format!("{}: {e}", from.display())),
            }
        } else if let Some(kind) = other(&t) {
            Kind::Other(kind)
        } else {
            Kind::File((m.dev(), m.ino()))
        };
        self.entries.push(Entry { from, to, kind });
    }

    /// One entry per place: a second entry for a place already taken is
    /// an error and left out, but for a directory going where another
    /// directory goes (their entries merge).
    fn claim(&mut self) {
        let mut taken: BTreeMap<PathBuf, (PathBuf, bool)> = BTreeMap::new();
        let mut errors = Vec::new();
        self.entries.retain(|e| {
            let dir = e.kind == Kind::Dir;
            match taken.get(&e.to) {
                None => {
                    taken.insert(e.to.clone(), (e.from.clone(), dir));
                    true
                }
                Some((_, true)) if dir => false,
                Some((first, _)) => {
                    errors.push(format!(
                        "{} and {} would both be written to {}: {} is left out",
                        first.display(),
                        e.from.display(),
                        e.to.display(),
                        e.from.display()
                    ));
                    false
                }
            }
        });
        self.errors.extend(errors);
    }

    /// Leaves out, as errors, the entries that would be written over an
    /// input: a place that is an input file (by device and inode, or by
    /// name, its directory resolved); when `linking`, but for a place that
    /// already is a link to its own file.
    fn refuse_inputs(&mut self, linking: bool) {
        let mut keys = BTreeSet::new();
        let mut names = BTreeMap::new();
        for e in &self.entries {
            if let Kind::File(key) = e.kind {
                keys.insert(key);
            }
            names.insert(resolved(&e.from), e.from.clone());
        }
        let mut errors = Vec::new();
        self.entries.retain(|e| {
            if e.kind == Kind::Dir {
                return true;
            }
            let own = |key: Key| linking && e.kind == Kind::File(key);
            let on = std::fs::symlink_metadata(&e.to)
                .ok()
                .map(|m| (m.dev(), m.ino()))
                .filter(|&key| keys.contains(&key) && !own(key))
                .map(|_| e.to.clone())
                .or_else(|| names.get(&resolved(&e.to)).cloned());
            let Some(clash) = on else { return true };
            errors.push(format!(
                "{}: --output would write its result over the input {}: left out",
                e.from.display(),
                clash.display()
            ));
            false
        });
        self.errors.extend(errors);
    }

    /// The first place a regular name of each file goes: where its
    /// slimmed result is written.
    pub fn firsts(&self) -> BTreeMap<Key, &Path> {
        let mut firsts = BTreeMap::new();
        for e in &self.entries {
            if let Kind::File(key) = e.kind {
                firsts.entry(key).or_insert(e.to.as_path());
            }
        }
        firsts
    }
}

/// What a file that is neither regular, a directory nor a link is.
fn other(t: &std::fs::FileType) -> Option<&'static str> {
    if t.is_fifo() {
        Some("a named pipe")
    } else if t.is_socket() {
        Some("a socket")
    } else if t.is_block_device() {
        Some("a block device")
    } else if t.is_char_device() {
        Some("a character device")
    } else {
        None
    }
}

/// `dir` resolved as far as it exists, the rest appended: where the tree
/// would be, though it is not made yet.
fn resolved_dir(dir: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = dir;
    loop {
        if let Ok(real) = std::fs::canonicalize(at) {
            return rest.iter().rev().fold(real, |p, name| p.join(name));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                at = if parent.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    parent
                };
            }
            _ => return dir.to_path_buf(),
        }
    }
}

/// `path` with its directory resolved (symbolic links, `..`), its own name
/// kept: the name it is reached by, wherever it is spelled from.
pub fn resolved(path: &Path) -> PathBuf {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    match (std::fs::canonicalize(dir), path.file_name()) {
        (Ok(d), Some(name)) => d.join(name),
        _ => path.to_path_buf(),
    }
}
