//! Directory input: the regular files under the directories given, found
//! without ever looping or opening what is not a regular file, and inspected
//! while the walk goes on.
//!
//! Files `offload-probe slim` is making (`.NAME.slim-TAG-PID-N`, left only
//! where a kill came between naming one and renaming it, or on a file
//! system without unnamed files) are not inputs, and are skipped.
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
//! inspection overlap: a subdirectory is walked as soon as its directory's
//! listing names it, while the rest is listed, the links looked up and the
//! files inspected. Each report travels with the name it was made under, in
//! the walk's own output (no table shared between threads). A regular file is
//! inspected under the first name its own directory gives it (its `.so` links
//! usually sit beside it); the rare file whose first name lies in another
//! directory, or that only a link reaches, is inspected under that name once
//! the walk is over, and only if its report would be shown at all.

use std::collections::hash_map::Entry;
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
    /// The file's other names the walk found (hard links and symbolic links
    /// to it, after the first in sorted order).
    pub also: Vec<PathBuf>,
}

/// What is done with each file found.
pub trait Inspector: Sync {
    type Report: Send;
    /// Inspects the file at `path` (a regular file, or a link to one):
    /// `named` by the user (read whole), or found in a directory (told from
    /// its headers first).
    fn inspect(&self, path: &Path, named: bool) -> Self::Report;
    /// Whether the report of a file found in a directory is shown. A file
    /// whose report is not shown is left out of the walk's output, whatever
    /// name the report was made under: it is dropped as soon as it is made.
    fn shown(&self, report: &Self::Report) -> bool;
    /// `files` more files were found (for a progress bar).
    fn found(&self, _files: usize) {}
}

/// What the walk found: in order, every file named and every file found
/// whose report is shown (or was made after the walk), each with its
/// report; and the directories it could not read.
#[derive(Debug)]
pub struct Found<R> {
    pub inputs: Vec<(Input, R)>,
    pub errors: Vec<(PathBuf, String)>,
}

/// Device and inode: what a file or directory is, whatever its name.
type Key = (u64, u64);

/// What the walk found, in sorted order.
enum Node<R> {
    /// A file found in a directory, by one of its names, with what its
    /// inspection under that name gave, if it was inspected under it.
    Found {
        path: PathBuf,
        key: Key,
        made: Option<Made<R>>,
    },
    /// A file named on the command line.
    Named(PathBuf),
    /// A directory that could not be read.
    Unreadable { path: PathBuf, message: String },
}

/// What the inspection of a file found in a directory gave.
enum Made<R> {
    Shown(R),
    /// A report not shown, dropped.
    Hidden,
}

/// A directory's entry as it lists it: name, type (where the file system
/// gives it) and inode.
type Listed = (std::ffi::OsString, Option<std::fs::FileType>, u64);

struct Walk<'a, I: Inspector> {
    inspector: &'a I,
    dirs: Mutex<HashSet<Key>>,
}

/// `paths`, with every directory among them replaced by the files under it
/// in sorted order, each inspected once.
pub fn scan<I: Inspector>(paths: &[PathBuf], inspector: &I) -> Found<I::Report> {
    let walk = Walk {
        inspector,
        dirs: Mutex::new(HashSet::new()),
    };
    let nodes: Vec<Vec<Node<I::Report>>> = paths
        .par_iter()
        .map(|path| match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => walk.dir(path, (m.dev(), m.ino())),
            _ => vec![Node::Named(path.clone())],
        })
        .collect();

    // Each file once, at its first name; its report is the one made under
    // that name, or one that is not shown, or else (`None`) made now.
    let count = nodes.iter().map(Vec::len).sum();
    let mut at: HashMap<Key, usize> = HashMap::with_capacity(count);
    let mut errors = Vec::new();
    let mut order: Vec<(Input, Option<Made<I::Report>>)> = Vec::with_capacity(count);
    for node in nodes.into_iter().flatten() {
        match node {
            Node::Unreadable { path, message } => errors.push((path, message)),
            Node::Named(path) => order.push((
                Input {
                    path,
                    explicit: true,
                    also: Vec::new(),
                },
                None,
            )),
            Node::Found { path, key, made } => match at.entry(key) {
                Entry::Vacant(first) => {
                    first.insert(order.len());
                    let input = Input {
                        path,
                        explicit: false,
                        also: Vec::new(),
                    };
                    order.push((input, made));
                }
                Entry::Occupied(first) => {
                    let (input, first) = &mut order[*first.get()];
                    input.also.push(path);
                    if first.is_none() && matches!(made, Some(Made::Hidden)) {
                        *first = made;
                    }
                }
            },
        }
    }
    inspector.found(order.iter().filter(|(_, made)| made.is_none()).count());
    let inputs = order
        .into_par_iter()
        .filter_map(|(input, made)| match made {
            Some(Made::Shown(report)) => Some((input, report)),
            Some(Made::Hidden) => None,
            None => {
                let report = inspector.inspect(&input.path, input.explicit);
                Some((input, report))
            }
        })
        .collect();
    Found { inputs, errors }
}

impl<I: Inspector> Walk<'_, I> {
    /// The nodes under `dir` (whose device and inode are `key`), in sorted
    /// order; its files inspected meanwhile.
    fn dir(&self, dir: &Path, key: Key) -> Vec<Node<I::Report>> {
        if !lock(&self.dirs).insert(key) {
            return Vec::new();
        }
        let dev = key.0;
        let list = match std::fs::read_dir(dir) {
            Ok(list) => list,
            Err(e) => {
                return vec![Node::Unreadable {
                    path: dir.to_path_buf(),
                    message: e.to_string(),
                }]
            }
        };
        // Each subdirectory is walked as soon as the listing names it (by
        // another thread, where one is free) while the rest is listed, the
        // links looked up and the files inspected. The entries carry their
        // type and inode: a regular file or a directory costs no system call
        // here.
        let subdirs = Mutex::new(Vec::new());
        let (entries, (files, more)) = rayon::scope(|scope| {
            let mut entries: Vec<Listed> = Vec::new();
            for e in list.filter_map(|e| e.ok()) {
                let (name, kind, ino) = (e.file_name(), e.file_type().ok(), e.ino());
                if kind.is_some_and(|k| k.is_dir()) {
                    let (subdirs, name) = (&subdirs, name.clone());
                    scope.spawn(move |_| {
                        let nodes = self.dir(&dir.join(&name), (dev, ino));
                        lock(subdirs).push((name, nodes));
                    });
                }
                entries.push((name, kind, ino));
            }
            // Names in one directory: byte order is path order.
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            let files = self.files(dir, dev, &entries);
            (entries, files)
        });
        let index = |name: &std::ffi::OsStr| {
            entries
                .binary_search_by(|e| e.0.as_bytes().cmp(name.as_bytes()))
                .unwrap_or(entries.len())
        };
        let subdirs: Vec<(usize, Vec<Node<I::Report>>)> = lock(&subdirs)
            .drain(..)
            .map(|(name, nodes)| (index(&name), nodes))
            .collect();
        // Directories the file system gave no type for, told by a stat.
        let more: Vec<(usize, Vec<Node<I::Report>>)> = more
            .into_par_iter()
            .map(|(i, path, key)| (i, self.dir(&path, key)))
            .collect();
        // Subdirectories and files, merged in entry order.
        let mut dirs = subdirs.into_iter().chain(more).collect::<Vec<_>>();
        dirs.sort_unstable_by_key(|&(i, _)| i);
        let mut dirs = dirs.into_iter().peekable();
        let mut out = Vec::with_capacity(files.len());
        for (i, node) in files {
            while let Some((_, nodes)) = dirs.next_if(|&(d, _)| d < i) {
                out.extend(nodes);
            }
            out.push(node);
        }
        out.extend(dirs.flat_map(|(_, nodes)| nodes));
        out
    }

    /// The files among the `entries` of `dir` (on device `dev`), with the
    /// index of each entry, each regular file inspected under the first name
    /// the directory gives it; and the entries of unknown type that are
    /// directories, to be walked.
    #[allow(clippy::type_complexity)]
    fn files(
        &self,
        dir: &Path,
        dev: u64,
        entries: &[Listed],
    ) -> (Vec<(usize, Node<I::Report>)>, Vec<(usize, PathBuf, Key)>) {
        let classified: Vec<(usize, PathBuf, Kind)> = entries
            .par_iter()
            .enumerate()
            .filter(|(_, (_, kind, _))| !kind.is_some_and(|k| k.is_dir()))
            .filter(|(_, (name, _, _))| !offload_slim::is_temporary(name))
            .filter_map(|(i, (name, kind, ino))| {
                let path = dir.join(name);
                let kind = Kind::of(&path, *kind, (dev, *ino))?;
                Some((i, path, kind))
            })
            .collect();
        // Files (entry index, path, key, whether a regular entry) and the
        // directories of unknown type.
        let mut found = Vec::with_capacity(classified.len());
        let mut dirs = Vec::new();
        for (i, path, kind) in classified {
            match kind {
                Kind::File { key, regular } => found.push((i, path, key, regular)),
                Kind::Dir(key) => dirs.push((i, path, key)),
            }
        }
        // Each regular file is inspected under the first name this directory
        // gives it (once, however many names it has here); a file only links
        // here reach is left to the end of the walk. Per file: the first of
        // its names here, and whether one of them is a regular entry.
        let mut names: HashMap<Key, (usize, bool)> = HashMap::with_capacity(found.len());
        for (at, &(_, _, key, regular)) in found.iter().enumerate() {
            names.entry(key).or_insert((at, false)).1 |= regular;
        }
        let inspect: Vec<bool> = found
            .iter()
            .enumerate()
            .map(|(at, (_, _, key, _))| names.get(key) == Some(&(at, true)))
            .collect();
        self.inspector.found(inspect.iter().filter(|&&i| i).count());
        let files = found
            .into_par_iter()
            .zip(inspect)
            .map(|((i, path, key, _), inspect)| {
                let made = inspect.then(|| {
                    let report = self.inspector.inspect(&path, false);
                    if self.inspector.shown(&report) {
                        Made::Shown(report)
                    } else {
                        Made::Hidden
                    }
                });
                (i, Node::Found { path, key, made })
            })
            .collect();
        (files, dirs)
    }
}

/// What an entry of a directory is, for the walk.
enum Kind {
    Dir(Key),
    /// A regular file, or a link to one (`regular` false).
    File {
        key: Key,
        regular: bool,
    },
}

impl Kind {
    /// What the entry at `path` is, given the type and device and inode its
    /// directory lists (`key`): a stat only for a link, followed to what it
    /// names (a dangling link, or one to a directory, is not followed), or an
    /// entry of unknown type. Pipes, sockets and devices are `None`.
    fn of(path: &Path, kind: Option<std::fs::FileType>, key: Key) -> Option<Kind> {
        let (kind, key) = match kind {
            Some(kind) => (kind, key),
            None => {
                let m = std::fs::symlink_metadata(path).ok()?;
                (m.file_type(), (m.dev(), m.ino()))
            }
        };
        if kind.is_file() {
            Some(Kind::File { key, regular: true })
        } else if kind.is_dir() {
            Some(Kind::Dir(key))
        } else if kind.is_symlink() {
            let m = std::fs::metadata(path).ok()?;
            m.is_file().then(|| Kind::File {
                key: (m.dev(), m.ino()),
                regular: false,
            })
        } else {
            None
        }
    }
}

/// The value behind `mutex`, whether or not a thread panicked holding it.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Lists: inspects nothing (for `--deps`, which needs every name first).
pub struct Listing;

impl Inspector for Listing {
    type Report = ();
    fn inspect(&self, _: &Path, _: bool) {}
    /// Every file is listed.
    fn shown(&self, _: &()) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records what it inspected; every report is shown, or none.
    struct Record(Mutex<Vec<PathBuf>>, bool);

    impl Inspector for Record {
        type Report = PathBuf;
        fn inspect(&self, path: &Path, _: bool) -> PathBuf {
            self.0.lock().unwrap().push(path.to_path_buf());
            path.to_path_buf()
        }
        fn shown(&self, _: &PathBuf) -> bool {
            self.1
        }
    }

    /// The names `inspector` reported and those it inspected (sorted), under `root`.
    fn walk(root: &Path, inspector: Record) -> (Vec<String>, Vec<String>) {
        let found = scan(&[root.to_path_buf()], &inspector);
        assert!(found.errors.is_empty());
        let relative = |p: &Path| p.strip_prefix(root).unwrap().display().to_string();
        let names = found
            .inputs
            .iter()
            .map(|(i, r)| {
                assert_eq!(&i.path, r, "reported under the name it was inspected under");
                relative(&i.path)
            })
            .collect();
        let mut inspected = inspector.0.into_inner().unwrap();
        inspected.sort();
        (names, inspected.iter().map(|p| relative(p)).collect())
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
        // What a killed `offload-probe slim` could leave: skipped.
        std::fs::write(root.join("c/.other.slim-result-12-0"), b"\x7fELF").unwrap();
        std::fs::write(root.join("c/.x.so.slim-link-1-22"), b"").unwrap();
        let fifo = std::ffi::CString::new(root.join("a/pipe").to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a NUL-terminated path and a mode.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let (names, inspected) = walk(&root, Record(Mutex::new(Vec::new()), true));
        assert_eq!(names, ["a/0-first", "c/other"]);
        // lib.so.1 was inspected during the walk (as a/b/lib.so and c/hard),
        // then again under its first name; nothing else twice.
        assert_eq!(inspected, ["a/0-first", "a/b/lib.so", "c/hard", "c/other"]);
        // The file's other names, in walk order.
        let found = scan(
            std::slice::from_ref(&root),
            &Record(Mutex::new(Vec::new()), true),
        );
        let also: Vec<PathBuf> = ["a/b/lib.so", "a/b/lib.so.1", "c/hard"]
            .iter()
            .map(|n| root.join(n))
            .collect();
        assert_eq!(found.inputs[0].0.also, also);
        assert!(found.inputs[1].0.also.is_empty());
        // Reports not shown are left out, and one made under any name will
        // do: nothing is inspected again.
        let (names, inspected) = walk(&root, Record(Mutex::new(Vec::new()), false));
        assert!(names.is_empty(), "{names:?}");
        assert_eq!(inspected, ["a/b/lib.so", "c/hard", "c/other"]);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
