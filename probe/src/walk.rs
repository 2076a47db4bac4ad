//! Directory input: the regular files under the directories given, found
//! without ever looping or opening what is not a regular file.
//!
//! Symbolic links to files are followed; links to directories are not (the
//! only way a walk can loop), and each directory is entered once by device
//! and inode. Pipes, sockets and devices are never opened (opening a pipe
//! would wait for a writer). A file reached by several names (a library and
//! its `.so` links) is inspected once, under the first name in sorted order.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
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
    if !dirs.insert((meta.dev(), meta.ino())) {
        return;
    }
    let mut entries: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(list) => list.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(e) => {
            found.errors.push((dir.to_path_buf(), e.to_string()));
            return;
        }
    };
    entries.sort();
    for path in entries {
        let Ok(own) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if own.is_dir() {
            walk(&path, dirs, files, found);
            continue;
        }
        // A link is followed to what it names; a dangling one is skipped.
        let Ok(target) = std::fs::metadata(&path) else {
            continue;
        };
        if target.is_file() && files.insert((target.dev(), target.ino())) {
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
