//! Directory input: the regular files under the directories given, found
//! without ever looping or opening what is not a regular file, and inspected
//! while the walk goes on.
//!
//! Symbolic links to files are followed; links to directories are not (the
//! only way a walk can loop), and each directory is entered once by device
//! and inode. Pipes, sockets and devices are never opened (opening a pipe
//! would wait for a writer). A file reached by several names (a library and
//! its `.so` links) is inspected once and reported under its first name in
//! sorted order.
//!
//! Directories are read in parallel and each file is inspected as soon as its
//! directory is read, on the same thread pool (`rayon`), so the walk and the
//! inspection overlap. A regular file is inspected under the first name its
//! own directory gives it (its `.so` links usually sit beside it); the rare
//! file whose first name lies in another directory, or that only a link
//! reaches, is inspected under that name once the walk is over, and only if
//! its report would be shown at all.

use std::collections::{HashMap, HashSet};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rayon::prelude::*;

/// One file inspected.
#[derive(Debug, Clone)]
pub struct Input {
    pub path: PathBuf,
    /// Named on the command line (reported even without GPU code), rather
    /// than found in a directory.
    pub explicit: bool,
}

/// What is done with each file found.
pub trait Inspector: Sync {
    type Report: Send;
    /// Inspects the file at `path` (a regular file, or a link to one).
    fn inspect(&self, path: &Path) -> Self::Report;
    /// Whether the report of a file found in a directory is shown: a report
    /// that is not shown is kept whatever name it was made under.
    fn shown(&self, report: &Self::Report) -> bool;
    /// `files` more files were found (for a progress bar).
    fn found(&self, _files: usize) {}
}

/// What the walk found: every file in order with its report, and the
/// directories it could not read.
#[derive(Debug)]
pub struct Found<R> {
    pub inputs: Vec<(Input, R)>,
    pub errors: Vec<(PathBuf, String)>,
}

/// Device and inode: what a file or directory is, whatever its name.
type Key = (u64, u64);

/// Reports made during the walk, by file, with the name each was made under.
type Made<R> = HashMap<Key, Vec<(PathBuf, R)>>;

/// What the walk found, in sorted order.
enum Node {
    /// A file found in a directory, by one of its names.
    Found { path: PathBuf, key: Key },
    /// A file named on the command line.
    Named(PathBuf),
    /// A directory that could not be read.
    Unreadable { path: PathBuf, message: String },
}

struct Walk<'a, I: Inspector> {
    inspector: &'a I,
    dirs: Mutex<HashSet<Key>>,
    reports: Mutex<Made<I::Report>>,
}

/// `paths`, with every directory among them replaced by the files under it
/// in sorted order, each inspected once.
pub fn scan<I: Inspector>(paths: &[PathBuf], inspector: &I) -> Found<I::Report> {
    let walk = Walk {
        inspector,
        dirs: Mutex::new(HashSet::new()),
        reports: Mutex::new(HashMap::new()),
    };
    let nodes: Vec<Vec<Node>> = paths
        .par_iter()
        .map(|path| match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => walk.dir(path, (m.dev(), m.ino())),
            _ => vec![Node::Named(path.clone())],
        })
        .collect();
    let mut reports = walk.reports.into_inner().unwrap_or_else(|e| e.into_inner());

    // Each file once, at its first name; its report is the one made under
    // that name, or one that is not shown, or else (`None`) made now.
    let mut seen = HashSet::new();
    let mut errors = Vec::new();
    let mut order: Vec<(Input, Option<I::Report>)> = Vec::new();
    for node in nodes.into_iter().flatten() {
        match node {
            Node::Unreadable { path, message } => errors.push((path, message)),
            Node::Named(path) => order.push((
                Input {
                    path,
                    explicit: true,
                },
                None,
            )),
            Node::Found { path, key } => {
                if !seen.insert(key) {
                    continue;
                }
                let made = reports.remove(&key).unwrap_or_default();
                let mut fallback = None;
                let mut exact = None;
                for (name, report) in made {
                    if name == path {
                        exact = Some(report);
                    } else if !inspector.shown(&report) {
                        fallback = Some(report);
                    }
                }
                order.push((
                    Input {
                        path,
                        explicit: false,
                    },
                    exact.or(fallback),
                ));
            }
        }
    }
    inspector.found(order.iter().filter(|(_, made)| made.is_none()).count());
    let inputs = order
        .into_par_iter()
        .map(|(input, made)| {
            let report = made.unwrap_or_else(|| inspector.inspect(&input.path));
            (input, report)
        })
        .collect();
    Found { inputs, errors }
}

/// What an entry of a directory is, for the walk.
enum Entry {
    Dir(Key),
    /// A regular file, or a link to one (`regular` false).
    File {
        key: Key,
        regular: bool,
    },
}

impl<I: Inspector> Walk<'_, I> {
    /// The nodes under `dir` (whose device and inode are `key`), in sorted
    /// order; its regular files inspected meanwhile.
    fn dir(&self, dir: &Path, key: Key) -> Vec<Node> {
        if !self
            .dirs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key)
        {
            return Vec::new();
        }
        let dev = key.0;
        // The directory's entries carry their type and inode: a regular file
        // or a directory costs no system call here.
        let mut entries: Vec<(std::ffi::OsString, Option<std::fs::FileType>, u64)> =
            match std::fs::read_dir(dir) {
                Ok(list) => list
                    .filter_map(|e| e.ok())
                    .map(|e| (e.file_name(), e.file_type().ok(), e.ino()))
                    .collect(),
                Err(e) => {
                    return vec![Node::Unreadable {
                        path: dir.to_path_buf(),
                        message: e.to_string(),
                    }]
                }
            };
        // Names in one directory: byte order is path order.
        entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        let entries: Vec<(PathBuf, Entry)> = entries
            .into_iter()
            .filter_map(|(name, kind, ino)| {
                let path = dir.join(name);
                let entry = match kind {
                    Some(k) if k.is_dir() => Entry::Dir((dev, ino)),
                    Some(k) if k.is_file() => Entry::File {
                        key: (dev, ino),
                        regular: true,
                    },
                    // A link is followed to what it names (a dangling one is
                    // skipped, a link to a directory is not followed); an
                    // entry of unknown type is looked at.
                    Some(k) if !k.is_symlink() => return None,
                    _ => match std::fs::metadata(&path) {
                        Ok(m) if kind.is_none() && m.is_dir() => Entry::Dir((m.dev(), m.ino())),
                        Ok(m) if m.is_file() => Entry::File {
                            key: (m.dev(), m.ino()),
                            regular: kind.is_none(),
                        },
                        _ => return None,
                    },
                };
                Some((path, entry))
            })
            .collect();
        // Each regular file is inspected under the first name this directory
        // gives it (once, however many names it has here).
        let mut first: HashMap<Key, usize> = HashMap::new();
        for (i, (_, entry)) in entries.iter().enumerate() {
            if let Entry::File { key, .. } = entry {
                first.entry(*key).or_insert(i);
            }
        }
        let mut claimed = HashSet::new();
        let inspect: Vec<Option<usize>> = entries
            .iter()
            .map(|(_, entry)| match entry {
                Entry::File { key, regular: true } if claimed.insert(*key) => {
                    first.get(key).copied()
                }
                _ => None,
            })
            .collect();
        self.inspector.found(inspect.iter().flatten().count());
        entries
            .par_iter()
            .zip(inspect.into_par_iter())
            .map(|((path, entry), inspect)| match *entry {
                Entry::Dir(key) => self.dir(path, key),
                Entry::File { key, .. } => {
                    if let Some(at) = inspect {
                        let name = &entries[at].0;
                        let report = self.inspector.inspect(name);
                        self.reports
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .entry(key)
                            .or_default()
                            .push((name.clone(), report));
                    }
                    vec![Node::Found {
                        path: path.clone(),
                        key,
                    }]
                }
            })
            .flatten()
            .collect()
    }
}

/// Lists: inspects nothing (for `--deps`, which needs every name first).
pub struct Listing;

impl Inspector for Listing {
    type Report = ();
    fn inspect(&self, _: &Path) {}
    fn shown(&self, _: &()) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records what it inspected; every report is shown.
    struct Record(Mutex<Vec<PathBuf>>);

    impl Inspector for Record {
        type Report = PathBuf;
        fn inspect(&self, path: &Path) -> PathBuf {
            self.0.lock().unwrap().push(path.to_path_buf());
            path.to_path_buf()
        }
        fn shown(&self, _: &PathBuf) -> bool {
            true
        }
    }

    #[test]
    fn links_loops_pipes_and_duplicates() {
        let root = std::env::temp_dir().join(format!("offload-probe-walk-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::create_dir_all(root.join("c")).unwrap();
        std::fs::write(root.join("a/b/lib.so.1"), b"x").unwrap();
        std::os::unix::fs::symlink("lib.so.1", root.join("a/b/lib.so")).unwrap();
        std::os::unix::fs::symlink("..", root.join("a/b/up")).unwrap();
        std::os::unix::fs::symlink("nowhere", root.join("a/dangling")).unwrap();
        // A link in another directory that sorts before the file's own names,
        // and a hard link: both name the same file.
        std::os::unix::fs::symlink("../a/b/lib.so.1", root.join("a/0-first")).unwrap();
        std::fs::hard_link(root.join("a/b/lib.so.1"), root.join("c/hard")).unwrap();
        std::fs::write(root.join("c/other"), b"y").unwrap();
        let fifo = std::ffi::CString::new(root.join("a/pipe").to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a NUL-terminated path and a mode.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let record = Record(Mutex::new(Vec::new()));
        let found = scan(std::slice::from_ref(&root), &record);
        let names: Vec<String> = found
            .inputs
            .iter()
            .map(|(i, r)| {
                assert_eq!(&i.path, r, "reported under the name it was inspected under");
                i.path.strip_prefix(&root).unwrap().display().to_string()
            })
            .collect();
        assert_eq!(names, ["a/0-first", "c/other"]);
        assert!(found.errors.is_empty());
        // lib.so.1 was inspected during the walk (as a/b/lib.so and c/hard),
        // then again under its first name; nothing else twice.
        let mut inspected = record.0.into_inner().unwrap();
        inspected.sort();
        let inspected: Vec<String> = inspected
            .iter()
            .map(|p| p.strip_prefix(&root).unwrap().display().to_string())
            .collect();
        assert_eq!(inspected, ["a/0-first", "a/b/lib.so", "c/hard", "c/other"]);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
