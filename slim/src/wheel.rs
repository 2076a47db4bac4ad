//! Slimming a wheel as a wheel (PEP 427): each file of GPU code in it
//! slimmed as [`slim_file`] slims a file, written into a new wheel whose
//! `RECORD` has the new hashes and sizes.
//!
//! Every other entry is copied raw (its compressed bytes, name, times,
//! permissions and extra fields as they were), in the original order; a
//! slimmed entry is compressed again with its own method and keeps its
//! time and permissions. No entry is dropped: a file for other GPUs stays,
//! since the package may open it by name. With a local version label
//! (PEP 440, `+sm90`) the label goes into the file name, the `Version:` of
//! `METADATA` and the names of the `.dist-info` and `.data` directories
//! (and their rows of `RECORD`), consistently. The wheel is written to a
//! temporary file in the output directory, then renamed.
//!
//! Entries are taken out one at a time into a scratch directory, so memory
//! does not grow with the wheel; those that may hold GPU code (their
//! headers say, as a directory scan decides) are slimmed in parallel.

pub mod record;

use std::fs::{self, File};
use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use offload_loader::MappedFile;
use rayon::prelude::*;
use zip::write::SimpleFileOptions;
use zip::{ZipArchive, ZipWriter};

use crate::file::{slim_file, Destination, FileReport, Options};
use record::{Row, WheelName};

/// What slimming a wheel did.
#[derive(Debug, Default)]
pub struct WheelReport {
    /// The wheel.
    pub path: PathBuf,
    /// The wheel written (`None`: a dry run, or an error).
    pub output: Option<PathBuf>,
    /// Its size, and the new wheel's (the same when nothing is written).
    pub before: u64,
    pub after: u64,
    /// Each entry that may hold GPU code, slimmed (its `path`: the wheel's
    /// path, `!/`, the entry's name).
    pub files: Vec<FileReport>,
    /// Why no wheel was written, if none was (but for a dry run).
    pub error: Option<String>,
}

/// The wheel at `path` slimmed for `options` into directory `out` (made if
/// missing), with local version label `label` if given; with `dry_run`,
/// the entries' sizes only.
pub fn slim_wheel(
    path: &Path,
    options: &Options,
    out: &Path,
    label: Option<&str>,
    dry_run: bool,
) -> WheelReport {
    let mut report = WheelReport {
        path: path.to_path_buf(),
        ..WheelReport::default()
    };
    if let Err(e) = run(&mut report, options, out, label, dry_run) {
        report.error = Some(e);
    }
    report.after = match &report.output {
        Some(o) => fs::metadata(o).map_or(0, |m| m.len()),
        None => report.before,
    };
    report
}

fn run(
    report: &mut WheelReport,
    options: &Options,
    out: &Path,
    label: Option<&str>,
    dry_run: bool,
) -> Result<(), String> {
    let path = report.path.clone();
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let file_name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let name = WheelName::parse(file_name).ok_or_else(|| {
        at(&"not a wheel's name (distribution-version-…-python-abi-platform.whl)")
    })?;
    if let Some(l) = label.filter(|l| !record::valid_label(l)) {
        return Err(format!(
            "{l:?} is not a local version label: ASCII letters, digits and dots"
        ));
    }
    report.before = fs::metadata(&path).map_err(|e| at(&e))?.len();
    let mut zip = ZipArchive::new(BufReader::new(File::open(&path).map_err(|e| at(&e))?))
        .map_err(|e| at(&e))?;
    let scratch = Scratch::new(out).map_err(|e| at(&e))?;
    // The entries that may hold GPU code, taken out one at a time.
    let mut candidates: Vec<(usize, String, PathBuf)> = Vec::new();
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).map_err(|e| at(&e))?;
        if entry.is_dir() {
            continue;
        }
        let taken = scratch.0.join(format!("{i}.in"));
        io::copy(&mut entry, &mut File::create(&taken).map_err(|e| at(&e))?)
            .map_err(|e| at(&format!("{}: {e}", entry.name())))?;
        if MappedFile::open_if_offload(&taken).is_ok_and(|f| f.is_some()) {
            candidates.push((i, entry.name().to_string(), taken));
        } else {
            fs::remove_file(&taken).map_err(|e| at(&e))?;
        }
    }
    let slimmed: Vec<(usize, FileReport, PathBuf)> = candidates
        .into_par_iter()
        .map(|(i, entry, taken)| {
            let result = scratch.0.join(format!("{i}.out"));
            let destination = if dry_run {
                Destination::DryRun
            } else {
                Destination::To(result.clone())
            };
            let mut r = slim_file(&taken, options, &destination);
            r.path = PathBuf::from(format!("{}!/{entry}", path.display()));
            if r.other_gpus.take().is_some() {
                r.notes.push(
                    "GPU code for other GPUs only: kept in the wheel, whose package may open it by name"
                        .into(),
                );
            }
            (i, r, result)
        })
        .collect();
    // A file for other GPUs stays: the package may open it by name.
    let changed: Vec<(usize, PathBuf)> = slimmed
        .iter()
        .filter(|(_, r, _)| r.written && r.error.is_none())
        .map(|(i, _, result)| (*i, result.clone()))
        .collect();
    report.files = slimmed.into_iter().map(|(_, r, _)| r).collect();
    if dry_run {
        return Ok(());
    }
    let new_name = match label {
        Some(l) => name.with_label(l),
        None => name.clone(),
    };
    let target = out.join(new_name.to_string());
    let temp = out.join(format!(".{new_name}.{}.tmp", scratch.1));
    let written = write(&mut zip, &name, &new_name, &changed, &temp)
        .and_then(|()| fs::rename(&temp, &target).map_err(|e| e.to_string()));
    if let Err(e) = written {
        let _ = fs::remove_file(&temp);
        return Err(at(&e));
    }
    report.output = Some(target);
    Ok(())
}

/// The new wheel, written to `temp` (synced).
fn write(
    zip: &mut ZipArchive<BufReader<File>>,
    name: &WheelName,
    new_name: &WheelName,
    changed: &[(usize, PathBuf)],
    temp: &Path,
) -> Result<(), String> {
    let (info, new_info) = (name.dist_info(), new_name.dist_info());
    let (data, new_data) = (name.data(), new_name.data());
    let rename = |p: &str| record::renamed(&record::renamed(p, &info, &new_info), &data, &new_data);
    let record_name = format!("{info}/RECORD");
    let metadata_name = format!("{info}/METADATA");
    // What changes: the slimmed entries' bytes, METADATA's version.
    let mut new_bytes: std::collections::HashMap<usize, Vec<u8>> = Default::default();
    for (i, result) in changed {
        new_bytes.insert(*i, fs::read(result).map_err(|e| e.to_string())?);
    }
    let mut record_at = None;
    for i in 0..zip.len() {
        let entry = zip.by_index_raw(i).map_err(|e| e.to_string())?;
        if entry.name() == record_name {
            record_at = Some(i);
        } else if entry.name() == metadata_name && name.version != new_name.version {
            drop(entry);
            let mut text = String::new();
            zip.by_index(i)
                .map_err(|e| e.to_string())?
                .read_to_string(&mut text)
                .map_err(|e| format!("{metadata_name}: {e}"))?;
            let text = record::set_metadata_version(&text, &new_name.version)
                .ok_or_else(|| format!("{metadata_name} has no Version header"))?;
            new_bytes.insert(i, text.into_bytes());
        }
    }
    let record_at = record_at.ok_or_else(|| format!("no {record_name}"))?;
    let record = {
        let mut text = String::new();
        zip.by_index(record_at)
            .map_err(|e| e.to_string())?
            .read_to_string(&mut text)
            .map_err(|e| format!("{record_name}: {e}"))?;
        let mut rows = record::parse_record(&text)
            .ok_or_else(|| format!("{record_name} is not CSV of path, hash, size"))?;
        let mut by_name: std::collections::HashMap<String, &Vec<u8>> = Default::default();
        for (&i, bytes) in &new_bytes {
            let entry = zip.by_index_raw(i).map_err(|e| e.to_string())?;
            by_name.insert(entry.name().to_string(), bytes);
        }
        for row in &mut rows {
            if let Some(bytes) = by_name.get(&row.path) {
                *row = Row {
                    path: row.path.clone(),
                    hash: record::hash(bytes),
                    size: bytes.len().to_string(),
                };
            }
            row.path = rename(&row.path);
        }
        record::write_record(&rows).into_bytes()
    };
    new_bytes.insert(record_at, record);
    let file = File::create(temp).map_err(|e| format!("{}: {e}", temp.display()))?;
    let mut writer = ZipWriter::new(io::BufWriter::new(file));
    for i in 0..zip.len() {
        let entry = zip.by_index_raw(i).map_err(|e| e.to_string())?;
        let new_entry_name = rename(entry.name());
        match new_bytes.get(&i) {
            Some(bytes) => {
                let options: SimpleFileOptions = entry
                    .options()
                    .large_file(bytes.len() as u64 >= u64::from(u32::MAX));
                drop(entry);
                writer
                    .start_file(new_entry_name, options)
                    .map_err(|e| e.to_string())?;
                writer.write_all(bytes).map_err(|e| e.to_string())?;
            }
            None if new_entry_name != entry.name() => writer
                .raw_copy_file_rename(entry, new_entry_name)
                .map_err(|e| e.to_string())?,
            None => writer.raw_copy_file(entry).map_err(|e| e.to_string())?,
        }
    }
    let mut inner = writer.finish().map_err(|e| e.to_string())?;
    inner.flush().map_err(|e| e.to_string())?;
    inner
        .into_inner()
        .map_err(|e| e.to_string())?
        .sync_all()
        .map_err(|e| e.to_string())
}

/// A scratch directory in the output directory, removed when dropped, and
/// the name that makes it (and the wheel's temporary file) this call's.
struct Scratch(PathBuf, String);

impl Scratch {
    fn new(out: &Path) -> io::Result<Scratch> {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let unique = format!("{}-{n}", std::process::id());
        fs::create_dir_all(out)?;
        let dir = out.join(format!(".offload-slim-wheel-{unique}"));
        fs::create_dir(&dir)?;
        Ok(Scratch(dir, unique))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}
