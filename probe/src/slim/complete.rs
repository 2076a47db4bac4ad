//! The output tree made whole once the files are slimmed: every directory
//! made, every file slim left as it was copied (or hard-linked, asked for),
//! every file slim could not read, verify or shrink copied as it is,
//! every further name of a file made a hard link to its first, every
//! symbolic link made again, files for other GPUs and links to them left
//! out, what is not a regular file skipped; last, each directory given its
//! mode, owner, attributes and times, the deepest first.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use offload_slim::{copy_file, keep_directory, link_name, symlink_name, Copied, How};
use rayon::prelude::*;

use super::tree::{Entry, Key, Kind, Tree};

/// Why a file is left out: it is for other GPUs (reported with the file).
pub const FOR_OTHER_GPUS: &str = "for other GPUs";

/// Why a file is copied as it is: slimming it failed (said with the file).
const FAILED: &str = "slimming it failed (said above)";

/// What slim made of a file of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// Its result is at its first place.
    Slimmed,
    /// Its result is in its first place's directory under this name (a
    /// wheel given a local version label); each further name of it is a
    /// hard link under this name in its own directory.
    SlimmedAs(OsString),
    /// GPU code for other GPUs only: left out.
    OtherGpus,
    /// An error (said with the file): copied as it is, so that the tree
    /// still holds every input file (as `cp -r` would copy it, changing or
    /// not).
    Failed,
}

/// What the tree got.
#[derive(Debug, Default)]
pub struct Summary {
    /// Slimmed results.
    pub slimmed: usize,
    /// Files copied sharing the originals' blocks.
    pub cloned: usize,
    /// Files copied byte for byte.
    pub copied: usize,
    /// Files hard-linked to their originals.
    pub linked: usize,
    /// Further names of a file already in the tree (as in the input).
    pub names: usize,
    pub symlinks: usize,
    pub directories: usize,
    /// Left out: (input, why).
    pub left_out: Vec<(PathBuf, &'static str)>,
    /// Copied as they are though they hold GPU code: (input, why).
    pub as_is: Vec<(PathBuf, &'static str)>,
    /// Not regular files: (input, what it is).
    pub skipped: Vec<(PathBuf, &'static str)>,
    /// What a copy could not keep of what its file was.
    pub notes: Vec<String>,
    pub errors: Vec<String>,
}

/// Makes `tree` whole around the results `fates` says (by file), the files
/// left as they are put there as `how` says; with `dry_run`, only counts.
/// Written as `cp -r` writes: the kernel writes the files back.
pub fn complete(tree: &Tree, fates: &BTreeMap<Key, Fate>, how: How, dry_run: bool) -> Summary {
    let mut s = Summary::default();
    let write = !dry_run;
    for e in tree.entries.iter().filter(|e| e.kind == Kind::Dir) {
        s.directories += 1;
        if write {
            if let Err(err) = std::fs::create_dir_all(&e.to) {
                s.errors.push(format!("{}: {err}", e.to.display()));
            }
        }
    }
    let done = files(tree, fates, how, dry_run, &mut s);
    let firsts = tree.firsts();
    for e in &tree.entries {
        match &e.kind {
            Kind::File(key) if firsts.get(key) == Some(&e.to.as_path()) => {}
            Kind::File(key) => further_name(e, *key, &done, fates, how, dry_run, &mut s),
            Kind::Link { target, names } => link(e, target, *names, fates, dry_run, &mut s),
            Kind::Other(what) => s.skipped.push((e.from.clone(), what)),
            Kind::Dir => {}
        }
    }
    if write {
        for e in tree.entries.iter().rev().filter(|e| e.kind == Kind::Dir) {
            match keep_directory(&e.from, &e.to) {
                Ok(notes) => s.notes.extend(notes.into_iter().map(|n| note(&e.to, n))),
                Err(err) => s.errors.push(err.to_string()),
            }
        }
    }
    s
}

/// The first place of each file: the slimmed result's, or the file copied
/// (in parallel) or linked there; left out for other GPUs. The places that
/// hold the file now, by file.
fn files(
    tree: &Tree,
    fates: &BTreeMap<Key, Fate>,
    how: How,
    dry_run: bool,
    s: &mut Summary,
) -> BTreeMap<Key, PathBuf> {
    let mut done = BTreeMap::new();
    let mut copies = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for e in &tree.entries {
        let Kind::File(key) = e.kind else { continue };
        if !seen.insert(key) {
            continue;
        }
        match fates.get(&key) {
            Some(Fate::Slimmed) => {
                s.slimmed += 1;
                done.insert(key, e.to.clone());
            }
            Some(Fate::SlimmedAs(name)) => {
                s.slimmed += 1;
                done.insert(key, e.to.with_file_name(name));
            }
            Some(Fate::OtherGpus) => s.left_out.push((e.from.clone(), FOR_OTHER_GPUS)),
            Some(Fate::Failed) => {
                s.as_is.push((e.from.clone(), FAILED));
                copies.push((key, e));
            }
            None => copies.push((key, e)),
        }
    }
    let made: Vec<_> = copies
        .par_iter()
        .map(|(key, e)| {
            let result = if dry_run {
                Ok((dry(how), Vec::new()))
            } else {
                copy_file(&e.from, &e.to, how)
            };
            (*key, *e, result)
        })
        .collect();
    for (key, e, result) in made {
        match result {
            Ok((copied, notes)) => {
                count(s, copied);
                s.notes.extend(notes.into_iter().map(|n| note(&e.to, n)));
                done.insert(key, e.to.clone());
            }
            Err(err) => s.errors.push(err.to_string()),
        }
    }
    done
}

/// Another place of a file already placed (`done`: where each is): a hard
/// link to its first place in the tree, as the input's names are one file
/// (with `How::Link`: to the original, the same file); left out with it.
fn further_name(
    e: &Entry,
    key: Key,
    done: &BTreeMap<Key, PathBuf>,
    fates: &BTreeMap<Key, Fate>,
    how: How,
    dry_run: bool,
    s: &mut Summary,
) {
    if fates.get(&key) == Some(&Fate::OtherGpus) {
        return s
            .left_out
            .push((e.from.clone(), "another name of a file for other GPUs"));
    }
    let Some(first) = done.get(&key) else {
        // Its first place failed (said there): this one is not made either.
        return;
    };
    let made = match (dry_run, how, fates.get(&key)) {
        (true, _, _) => Ok(()),
        (false, How::Link, None | Some(Fate::Failed)) => copy_file(&e.from, &e.to, how).map(|_| ()),
        (false, _, Some(Fate::SlimmedAs(name))) => link_name(first, &e.to.with_file_name(name)),
        (false, _, _) => link_name(first, &e.to),
    };
    match made {
        Ok(()) => s.names += 1,
        Err(err) => s.errors.push(err.to_string()),
    }
}

/// A symbolic link made again, with its text; left out with the file for
/// other GPUs it names.
fn link(
    e: &Entry,
    target: &Path,
    names: Option<Key>,
    fates: &BTreeMap<Key, Fate>,
    dry_run: bool,
    s: &mut Summary,
) {
    if names.and_then(|k| fates.get(&k)) == Some(&Fate::OtherGpus) {
        return s
            .left_out
            .push((e.from.clone(), "a symbolic link to a file for other GPUs"));
    }
    if let Some(Fate::SlimmedAs(name)) = names.and_then(|k| fates.get(&k)) {
        s.notes.push(format!(
            "{}: made as it was, with the old name of the wheel it names, now {}",
            e.to.display(),
            name.to_string_lossy()
        ));
    }
    // A link to a file that failed is made all the same: the file is
    // copied as it is.
    let made = if dry_run {
        Ok(())
    } else {
        symlink_name(target, &e.from, &e.to)
    };
    match made {
        Ok(()) => s.symlinks += 1,
        Err(err) => s.errors.push(err.to_string()),
    }
}

/// What a dry run counts a file left as it is as.
fn dry(how: How) -> Copied {
    match how {
        How::Copy => Copied::Copied,
        How::Link => Copied::Linked,
    }
}

fn count(s: &mut Summary, copied: Copied) {
    match copied {
        Copied::Cloned => s.cloned += 1,
        Copied::Copied => s.copied += 1,
        Copied::Linked => s.linked += 1,
    }
}

fn note(path: &Path, note: String) -> String {
    format!("{}: {note}", path.display())
}
