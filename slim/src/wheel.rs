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

use crate::file::keep::{Attributes, Strictness};
use crate::file::{slim_file, Destination, FileReport, Options};
use record::WheelName;

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
    /// What the new wheel could not keep of the original's owner, mode and
    /// extended attributes.
    pub notes: Vec<String>,
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
    let new_name = match label {
        Some(l) => name.with_label(l),
        None => name.clone(),
    };
    let target = out.join(new_name.to_string());
    if !dry_run && same_file(&target, &path) {
        return Err(at(&format!(
            "the slimmed wheel would replace it ({}): name another --output directory, or a local version label",
            target.display()
        )));
    }
    let file = File::open(&path).map_err(|e| at(&e))?;
    // What the new wheel keeps of the file it is made from.
    let attributes = Attributes::of(&file).map_err(|e| at(&e))?;
    let mut zip = ZipArchive::new(BufReader::new(file)).map_err(|e| at(&e))?;
    // A dry run writes nothing to `out`: its scratch is the temporary
    // directory's.
    let scratch_in = if dry_run {
        std::env::temp_dir()
    } else {
        out.to_path_buf()
    };
    let scratch = Scratch::new(&scratch_in).map_err(|e| at(&e))?;
    // The entries that may hold GPU code, taken out one at a time.
    let mut candidates: Vec<(usize, String, PathBuf)> = Vec::new();
    for i in 0..zip.len() {
        let entry = zip.by_index(i).map_err(|e| at(&e))?;
        // An entry larger than the limits allow is copied as it is, never
        // taken out (a zip bomb fills no disk); one whose data runs past
        // its declared size is an error of the zip reader.
        if entry.is_dir() || entry.size() > options.limits.max_uncompressed {
            continue;
        }
        let name = entry.name().to_string();
        let taken = scratch.0.join(format!("{i}.in"));
        let mut limited = entry.take(options.limits.max_uncompressed);
        io::copy(&mut limited, &mut File::create(&taken).map_err(|e| at(&e))?)
            .map_err(|e| at(&format!("{name}: {e}")))?;
        if MappedFile::open_if_offload(&taken).is_ok_and(|f| f.is_some()) {
            candidates.push((i, name, taken));
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
            r.path = crate::inner_name(path.display(), entry);
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
    let temp = out.join(format!(".{new_name}.{}.tmp", scratch.1));
    let written = write(&mut zip, &name, &new_name, &changed, &temp).and_then(|file| {
        // The new wheel is the original's: its owner, mode and attributes.
        let notes = attributes
            .apply(&file, Strictness::Copy)
            .map_err(|e| e.to_string())?;
        file.sync_all().map_err(|e| e.to_string())?;
        fs::rename(&temp, &target).map_err(|e| e.to_string())?;
        Ok(notes)
    });
    match written {
        Ok(notes) => report.notes = notes,
        Err(e) => {
            let _ = fs::remove_file(&temp);
            return Err(at(&e));
        }
    }
    report.output = Some(target);
    Ok(())
}

/// An entry's new content: a slimmed file, streamed from the scratch
/// directory; or small text made here (`METADATA`, `RECORD`).
enum Content {
    File(PathBuf),
    Text(Vec<u8>),
}

impl Content {
    fn len(&self) -> io::Result<u64> {
        match self {
            Content::File(p) => Ok(fs::metadata(p)?.len()),
            Content::Text(t) => Ok(t.len() as u64),
        }
    }

    /// Its `RECORD` hash, read through once.
    fn hash(&self) -> io::Result<String> {
        match self {
            Content::File(p) => record::hash_reader(File::open(p)?),
            Content::Text(t) => Ok(record::hash(t)),
        }
    }

    fn copy_to(&self, w: &mut impl Write) -> io::Result<()> {
        match self {
            Content::File(p) => io::copy(&mut File::open(p)?, w).map(drop),
            Content::Text(t) => w.write_all(t),
        }
    }
}

/// The new wheel, written to `temp` (flushed, not yet synced).
fn write(
    zip: &mut ZipArchive<BufReader<File>>,
    name: &WheelName,
    new_name: &WheelName,
    changed: &[(usize, PathBuf)],
    temp: &Path,
) -> Result<File, String> {
    let (info, new_info) = (name.dist_info(), new_name.dist_info());
    let (data, new_data) = (name.data(), new_name.data());
    let rename = |p: &str| record::renamed(&record::renamed(p, &info, &new_info), &data, &new_data);
    // What changes: the slimmed entries, METADATA's version, RECORD.
    let mut contents: std::collections::HashMap<usize, Content> = changed
        .iter()
        .map(|(i, result)| (*i, Content::File(result.clone())))
        .collect();
    if name.version != new_name.version {
        let (i, text) = read_text(zip, &format!("{info}/METADATA"))?;
        let text = record::set_metadata_version(&text, &new_name.version)
            .ok_or_else(|| format!("{info}/METADATA has no Version header"))?;
        contents.insert(i, Content::Text(text.into_bytes()));
    }
    let (record_at, text) = read_text(zip, &format!("{info}/RECORD"))?;
    let mut rows = record::parse_record(&text)
        .ok_or_else(|| format!("{info}/RECORD is not CSV of path, hash, size"))?;
    let mut by_name: std::collections::HashMap<String, &Content> = Default::default();
    for (&i, content) in &contents {
        let entry = zip.by_index_raw(i).map_err(|e| e.to_string())?;
        by_name.insert(entry.name().to_string(), content);
    }
    for row in &mut rows {
        if let Some(content) = by_name.get(&row.path) {
            row.hash = content.hash().map_err(|e| format!("{}: {e}", row.path))?;
            row.size = content.len().map_err(|e| e.to_string())?.to_string();
        }
        row.path = rename(&row.path);
    }
    contents.insert(
        record_at,
        Content::Text(record::write_record(&rows).into_bytes()),
    );
    let file = File::create(temp).map_err(|e| format!("{}: {e}", temp.display()))?;
    let mut writer = ZipWriter::new(io::BufWriter::new(file));
    for i in 0..zip.len() {
        let entry = zip.by_index_raw(i).map_err(|e| e.to_string())?;
        let new_entry_name = rename(entry.name());
        match contents.get(&i) {
            Some(content) => {
                let len = content.len().map_err(|e| e.to_string())?;
                let options: SimpleFileOptions =
                    entry.options().large_file(len >= u64::from(u32::MAX));
                drop(entry);
                writer
                    .start_file(new_entry_name, options)
                    .map_err(|e| e.to_string())?;
                content.copy_to(&mut writer).map_err(|e| e.to_string())?;
            }
            None if new_entry_name != entry.name() => writer
                .raw_copy_file_rename(entry, new_entry_name)
                .map_err(|e| e.to_string())?,
            None => writer.raw_copy_file(entry).map_err(|e| e.to_string())?,
        }
    }
    let mut inner = writer.finish().map_err(|e| e.to_string())?;
    inner.flush().map_err(|e| e.to_string())?;
    inner.into_inner().map_err(|e| e.to_string())
}

/// The index and text of entry `name` (a small text file of the
/// `.dist-info` directory, read whole, at most 64 MiB).
fn read_text(zip: &mut ZipArchive<BufReader<File>>, name: &str) -> Result<(usize, String), String> {
    let i = zip
        .index_for_name(name)
        .ok_or_else(|| format!("no {name}"))?;
    let mut text = String::new();
    zip.by_index(i)
        .map_err(|e| e.to_string())?
        .take(64 << 20)
        .read_to_string(&mut text)
        .map_err(|e| format!("{name}: {e}"))?;
    Ok((i, text))
}

/// Whether `a` and `b` name one file (`a` need not exist).
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (fs::metadata(a), fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
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
