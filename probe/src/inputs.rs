//! Which files to inspect: the paths given, the shared libraries they load
//! (`--deps`), or the objects mapped in a running process (`--pid`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use object::read::elf::{Dyn, ElfFile64, SectionHeader};
use object::{elf, Endianness};
use offload_loader::discover::file::MappedFile;

/// `paths` followed by every shared library they load, resolved as the dynamic
/// loader does (DT_RPATH when there is no DT_RUNPATH, LD_LIBRARY_PATH,
/// DT_RUNPATH, the ld.so.conf directories, the default directories), each once.
pub fn with_dependencies(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut seen: BTreeSet<PathBuf> = BTreeSet::new();
    let mut out = Vec::new();
    let mut queue: Vec<PathBuf> = paths.to_vec();
    let system = system_dirs();
    while let Some(path) = queue.pop() {
        let key = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        if !seen.insert(key) {
            continue;
        }
        if let Ok(deps) = needed(&path) {
            for name in deps.needed.iter().rev() {
                if let Some(found) = resolve(name, &path, &deps, &system) {
                    queue.push(found);
                }
            }
        }
        out.push(path);
    }
    out
}

struct Dynamic {
    needed: Vec<String>,
    rpath: Vec<String>,
    runpath: Vec<String>,
}

fn needed(path: &Path) -> Result<Dynamic, Box<dyn std::error::Error>> {
    let file = MappedFile::open(path)?;
    let data = file.bytes();
    let elf = ElfFile64::<Endianness>::parse(data)?;
    let endian = elf.endian();
    let sections = elf.elf_section_table();
    let mut dynamic = Dynamic {
        needed: vec![],
        rpath: vec![],
        runpath: vec![],
    };
    for section in sections.iter() {
        let Some((entries, link)) = section.dynamic(endian, data)? else {
            continue;
        };
        let strings = sections.strings(endian, data, link)?;
        for d in entries {
            let tag = d.d_tag(endian) as u32;
            let Ok(value) = d.string(endian, strings) else {
                continue;
            };
            let value = String::from_utf8_lossy(value).into_owned();
            match tag {
                elf::DT_NEEDED => dynamic.needed.push(value),
                elf::DT_RPATH => dynamic.rpath.extend(value.split(':').map(String::from)),
                elf::DT_RUNPATH => dynamic.runpath.extend(value.split(':').map(String::from)),
                _ => {}
            }
        }
    }
    Ok(dynamic)
}

fn resolve(name: &str, from: &Path, deps: &Dynamic, system: &[PathBuf]) -> Option<PathBuf> {
    if name.contains('/') {
        return Some(PathBuf::from(name));
    }
    let origin = from
        .canonicalize()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_default();
    let expand = |d: &String| PathBuf::from(d.replace("$ORIGIN", &origin.to_string_lossy()));
    let env: Vec<PathBuf> = std::env::var("LD_LIBRARY_PATH")
        .unwrap_or_default()
        .split(':')
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .collect();
    let rpath = if deps.runpath.is_empty() {
        deps.rpath.iter().map(expand).collect()
    } else {
        vec![]
    };
    let runpath: Vec<PathBuf> = deps.runpath.iter().map(expand).collect();
    rpath
        .iter()
        .chain(&env)
        .chain(&runpath)
        .chain(system)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// The directories of /etc/ld.so.conf (and its includes) and the defaults.
fn system_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    read_conf(Path::new("/etc/ld.so.conf"), &mut dirs, 0);
    for d in [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib64",
        "/usr/lib64",
        "/lib",
        "/usr/lib",
    ] {
        dirs.push(PathBuf::from(d));
    }
    dirs
}

fn read_conf(path: &Path, dirs: &mut Vec<PathBuf>, depth: u32) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    for line in text.lines().map(str::trim) {
        if let Some(pattern) = line.strip_prefix("include ") {
            if depth > 4 {
                continue;
            }
            let pattern = pattern.trim();
            let (dir, suffix) = pattern.rsplit_once("/*").unwrap_or((pattern, ""));
            if let Ok(entries) = std::fs::read_dir(dir) {
                let mut files: Vec<PathBuf> = entries
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.to_string_lossy().ends_with(suffix))
                    .collect();
                files.sort();
                for f in files {
                    read_conf(&f, dirs, depth + 1);
                }
            }
        } else if line.starts_with('/') {
            dirs.push(PathBuf::from(line));
        }
    }
}

/// The files mapped in process `pid` (from `/proc/PID/maps`), each once, in
/// mapping order.
pub fn process_objects(pid: u32) -> std::io::Result<Vec<PathBuf>> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    let mut seen = BTreeSet::new();
    Ok(maps
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .filter(|p| p.starts_with('/'))
        .filter(|p| seen.insert(p.to_string()))
        .map(PathBuf::from)
        .collect())
}
