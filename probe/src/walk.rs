//! Directory input: the regular files under the directories given, found
//! without ever looping or opening what is not a regular file.
//!
//! Symbolic links to files are followed; links to directories are not (the
//! only way a walk can loop), and each directory is entered once by device
//! and inode. Pipes, sockets and devices are never opened (opening a pipe
//! would wait for a writer). A file reached by several names (a library and
//! its `.so` links) is inspected once, under the first name in sorted order.

use std::collections::HashSet;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Path, PathBuf};

/// One file to inspect.
#[derive(Debug, Clone)]
pub struct Input {
    pub path: PathBuf,
    /// Named on the command line (reported even without GPU code), rather
    /// than found in a directory.
    pub explicit: bool,
}

/// What the walk found: the files, and the directories it could not read.
#[derive(Debug, Default)]
pub struct Found {
    pub inputs: Vec<Input>,
    pub errors: Vec<(PathBuf, String)>,
    /// Whether any directory was walked.
    pub walked: bool,
}

/// `paths` with every directory among them replaced by the regular files
/// under it, in sorted order.
pub fn expand(paths: &[PathBuf]) -> Found {
    let mut found = Found::default();
    let mut dirs = HashSet::new();
    let mut files = HashSet::new();
    for path in paths {
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => {
                found.walked = true;
                walk(path, &mut dirs, &mut files, &mut found);
            }
            _ => found.inputs.push(Input {
                path: path.clone(),
                explicit: true,
            }),
        }
    }
    found
}

fn walk(
    dir: &Path,
    dirs: &mut HashSet<(u64, u64)>,
    files: &mut HashSet<(u64, u64)>,
    found: &mut Found,
) {
    let Ok(meta) = std::fs::metadata(dir) else {
        return;
    };
    let dev = meta.dev();
    if !dirs.insert((dev, meta.ino())) {
        return;
    }
    // The directory's entries carry their type and inode: a regular file
    // costs no system call here (it is opened and checked once, later).
    let mut entries: Vec<(PathBuf, Option<std::fs::FileType>, u64)> = match std::fs::read_dir(dir) {
        Ok(list) => list
            .filter_map(|e| e.ok())
            .map(|e| (e.path(), e.file_type().ok(), e.ino()))
            .collect(),
        Err(e) => {
            found.errors.push((dir.to_path_buf(), e.to_string()));
            return;
        }
    };
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    for (path, kind, ino) in entries {
        let (is_dir, is_file, key) = match kind {
            Some(k) if k.is_dir() => (true, false, (dev, ino)),
            Some(k) if k.is_file() => (false, true, (dev, ino)),
            // A link is followed to what it names (a dangling one is
            // skipped, a link to a directory is not followed); an entry of
            // unknown type is looked at.
            Some(k) if !k.is_symlink() => continue,
            _ => match std::fs::metadata(&path) {
                Ok(m) if kind.is_none() && m.is_dir() => (true, false, (m.dev(), m.ino())),
                Ok(m) if m.is_file() => (false, true, (m.dev(), m.ino())),
                _ => continue,
            },
        };
        if is_dir {
            walk(&path, dirs, files, found);
        } else if is_file && files.insert(key) {
            found.inputs.push(Input {
                path,
                explicit: false,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_loops_pipes_and_duplicates() {
        let root = std::env::temp_dir().join(format!("offload-probe-walk-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/lib.so.1"), b"x").unwrap();
        std::os::unix::fs::symlink("lib.so.1", root.join("a/b/lib.so")).unwrap();
        std::os::unix::fs::symlink("..", root.join("a/b/up")).unwrap();
        std::os::unix::fs::symlink("nowhere", root.join("a/dangling")).unwrap();
        let fifo = std::ffi::CString::new(root.join("a/pipe").to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a NUL-terminated path and a mode.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let found = expand(std::slice::from_ref(&root));
        let names: Vec<String> = found
            .inputs
            .iter()
            .map(|i| i.path.strip_prefix(&root).unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["a/b/lib.so"]);
        assert!(found.walked && found.errors.is_empty());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
