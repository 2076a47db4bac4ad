//! Slimming a container image as an image: an OCI image layout
//! (`oci:DIR[:TAG]`) or a `docker save` archive (`docker-archive:FILE`),
//! named as skopeo names them.
//!
//! Each layer that holds GPU code is inflated once into a scratch file; its
//! files of GPU code are slimmed where they lie in it, as
//! [`slim_file`](crate::file::slim_file) slims a file (in parallel), and
//! the layer written again, every other byte of its tar stream as it was
//! (headers with owner, mode, times, xattrs and links; whiteouts),
//! compressed as it was. A layer in which nothing changes is
//! kept by digest, never compressed again. The config's `diff_ids` and the
//! manifest's descriptors follow the new layers; the config's history gains
//! an entry saying what was done, and the manifest annotations naming the
//! devices kept. A file for other GPUs is kept: something in the image may
//! open it by name.
//!
//! [`gpu_files`] gives the files of GPU code an image's root file system
//! holds once its layers are applied (whiteouts and opaque directories
//! respected), where they lie, for the probe to report what it reports of
//! a tree.

mod digest;
mod layer;
mod sink;
mod source;

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use offload_loader::discover::file::offload_sections;
use rayon::prelude::*;
use serde_json::{json, Value};

use crate::file::{slim_part, Destination, FileReport, Options};
use layer::{Entry, Kind};
use sink::{Blob, Out};
use source::Layer;

/// An image, named as skopeo names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reference {
    /// `oci:DIR[:TAG]`: an OCI image layout, the image its index tags
    /// `TAG` (without one: the only image in it).
    Oci { dir: PathBuf, tag: Option<String> },
    /// `docker-archive:FILE[:NAME:TAG]`: a `docker save` archive.
    DockerArchive { file: PathBuf, tag: Option<String> },
}

impl Reference {
    /// Parses `oci:…` or `docker-archive:…`: the path ends at the first
    /// `:`, as skopeo reads it (containers/image `SplitPathAndImage`).
    pub fn parse(s: &str) -> Option<Reference> {
        let split = |rest: &str| -> (PathBuf, Option<String>) {
            match rest.split_once(':') {
                Some((path, tag)) if !tag.is_empty() => (path.into(), Some(tag.into())),
                Some((path, _)) => (path.into(), None),
                None => (rest.into(), None),
            }
        };
        if let Some(rest) = s.strip_prefix("oci:") {
            let (dir, tag) = split(rest);
            Some(Reference::Oci { dir, tag })
        } else if let Some(rest) = s.strip_prefix("docker-archive:") {
            let (file, tag) = split(rest);
            Some(Reference::DockerArchive { file, tag })
        } else {
            None
        }
    }

    /// The directory a scratch directory goes in: the output's file system
    /// (a new blob is renamed into place).
    fn scratch_parent(&self) -> PathBuf {
        match self {
            Reference::Oci { dir, .. } => dir.clone(),
            Reference::DockerArchive { file, .. } => file
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf),
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, path, tag) = match self {
            Reference::Oci { dir, tag } => ("oci", dir, tag),
            Reference::DockerArchive { file, tag } => ("docker-archive", file, tag),
        };
        write!(f, "{kind}:{}", path.display())?;
        if let Some(tag) = tag {
            write!(f, ":{tag}")?;
        }
        Ok(())
    }
}

/// What slimming an image did.
#[derive(Debug, Default)]
pub struct ImageReport {
    /// The image, and the one written (`None`: a dry run, or an error).
    pub image: String,
    pub output: Option<String>,
    /// The platform (`os/architecture`) whose image was read, where the
    /// name is of an index of images for several: this machine's, as
    /// skopeo chooses without `--all`. The output holds that image alone.
    pub platform: Option<String>,
    /// Its layers.
    pub layers: Vec<LayerReport>,
    /// Each file of GPU code in a layer, slimmed (its `path`: the image,
    /// `!/`, the file's path in the layer).
    pub files: Vec<FileReport>,
    /// Why no image was written, if none was (but for a dry run).
    pub error: Option<String>,
}

/// A layer: its blob's digest and size before and after (the same when
/// nothing in it changed: kept by digest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerReport {
    pub digest: String,
    pub before: u64,
    pub new_digest: String,
    pub after: u64,
    /// Files of GPU code in it.
    pub gpu_files: usize,
}

/// The image `source` slimmed for `options` into `output` (`None`: a dry
/// run).
pub fn slim_image(
    source: &Reference,
    options: &Options,
    output: Option<&Reference>,
) -> ImageReport {
    let mut report = ImageReport {
        image: source.to_string(),
        ..ImageReport::default()
    };
    let scratch_parent = output.unwrap_or(source).scratch_parent();
    let scratch = match Scratch::new(&scratch_parent) {
        Ok(s) => s,
        Err(e) => {
            report.error = Some(format!("{}: {e}", scratch_parent.display()));
            return report;
        }
    };
    if let Err(e) = run(&mut report, source, options, output, &scratch.0) {
        report.error = Some(e);
    }
    report
}

fn run(
    report: &mut ImageReport,
    source: &Reference,
    options: &Options,
    output: Option<&Reference>,
    scratch: &Path,
) -> Result<(), String> {
    let image = source::open(source)?;
    report.platform = image.platform.clone();
    let name = source.to_string();
    let dry_run = output.is_none();
    let slimmed: Vec<Result<Slimmed, String>> = image
        .layers
        .par_iter()
        .enumerate()
        .map(|(i, l)| slim_layer(l, i, &name, options, scratch, dry_run))
        .collect();
    let mut blobs = Vec::new();
    let mut diff_ids = Vec::new();
    for (l, s) in image.layers.iter().zip(slimmed) {
        let s = s?;
        report.files.extend(s.files);
        let (blob, descriptor, diff_id) = match s.written {
            Some((path, w)) => {
                let mut d = l.descriptor.clone();
                d["digest"] = json!(w.digest);
                d["size"] = json!(w.size);
                (Blob::New(path), d, w.diff_id)
            }
            None => (
                Blob::Original(l.clone()),
                l.descriptor.clone(),
                l.diff_id.clone().unwrap_or_default(),
            ),
        };
        report.layers.push(LayerReport {
            digest: l.digest.clone(),
            before: l.len as u64,
            new_digest: descriptor["digest"].as_str().unwrap_or_default().into(),
            after: descriptor["size"].as_u64().unwrap_or_default(),
            gpu_files: s.gpu_files,
        });
        blobs.push((blob, descriptor));
        diff_ids.push(diff_id);
    }
    let Some(output) = output else {
        return Ok(());
    };
    let summary = summary(options, report);
    let config = config(&image.config, &diff_ids, &summary)?;
    let manifest = manifest(image.manifest.as_ref(), &config, &blobs, options, &summary)?;
    let out = Out {
        blobs,
        config,
        manifest,
        tags: match output {
            Reference::DockerArchive { tag: Some(t), .. } => vec![t.clone()],
            _ => image.tags.clone(),
        },
    };
    match output {
        Reference::Oci { dir, tag } => {
            sink::oci(dir, tag.as_deref(), out, scratch).map_err(|e| format!("{output}: {e}"))?;
        }
        Reference::DockerArchive { file, .. } => {
            sink::archive(file, out, scratch).map_err(|e| format!("{output}: {e}"))?;
        }
    }
    report.output = Some(output.to_string());
    Ok(())
}

/// A layer slimmed: its files' reports, and its new blob (in the scratch
/// directory) if anything in it changed.
struct Slimmed {
    files: Vec<FileReport>,
    gpu_files: usize,
    written: Option<(PathBuf, layer::Written)>,
}

fn slim_layer(
    l: &Layer,
    index: usize,
    image: &str,
    options: &Options,
    scratch: &Path,
    dry_run: bool,
) -> Result<Slimmed, String> {
    let tar = Tar::open(l, scratch.join(format!("{index}.tar")))?;
    let (bytes, entries) = (tar.bytes(), tar.entries(l)?);
    let gpu: Vec<(usize, &Entry)> = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| is_gpu_file(bytes, e))
        .collect();
    let results: Vec<(FileReport, PathBuf)> = gpu
        .par_iter()
        .map(|&(i, e)| {
            let output = scratch.join(format!("{index}-{i}.out"));
            // Slimmed where it lies in the stream, not copied out.
            let (file, offset, size) = tar.part_of(e);
            let slim = |to| slim_part(file, Some((offset, size)), options, to);
            let mut r = if e.pax_size {
                let mut r = slim(&Destination::DryRun);
                r.notes
                    .push("left as it is: its size is in a PAX record, which is not rewritten".into());
                r
            } else if dry_run {
                slim(&Destination::DryRun)
            } else {
                slim(&Destination::To(output.clone()))
            };
            r.path = crate::inner_name(image, &e.path);
            r.notes.push(format!("in layer {index} ({})", l.digest));
            if r.other_gpus.take().is_some() {
                r.notes.push(
                    "GPU code for other GPUs only: kept in the image, where something may open it by name"
                        .into(),
                );
            }
            (r, output)
        })
        .collect();
    let replaced: Vec<layer::Replacement<'_>> = gpu
        .iter()
        .zip(&results)
        .filter(|(_, (r, _))| r.written && r.error.is_none())
        .map(|(&(_, entry), (_, file))| layer::Replacement { entry, file })
        .collect();
    let written = if replaced.is_empty() {
        None
    } else {
        let blob = scratch.join(format!("{index}.blob"));
        let compression = layer::Compression::of(l.bytes());
        let w = layer::write(bytes, &replaced, compression, &blob)
            .map_err(|e| format!("layer {}: {e}", l.digest))?;
        Some((blob, w))
    };
    for (_, out) in &results {
        let _ = fs::remove_file(out);
    }
    Ok(Slimmed {
        gpu_files: results.len(),
        files: results.into_iter().map(|(r, _)| r).collect(),
        written,
    })
}

/// Whether entry `e` of the tar stream `tar` is a file of GPU code: one
/// the loader finds an offload section in (the full reading of what a
/// directory scan's quick look lets through).
fn is_gpu_file(tar: &[u8], e: &Entry) -> bool {
    if e.kind != Kind::File {
        return false;
    }
    let Some(data) = (e.data as usize)
        .checked_add(e.size as usize)
        .and_then(|end| tar.get(e.data as usize..end))
    else {
        return false;
    };
    offload_sections(data).is_ok_and(|s| !s.is_empty())
}

/// What the image's annotation and history entry say.
fn summary(options: &Options, report: &ImageReport) -> String {
    let devices: Vec<String> = options.devices.iter().map(|d| d.to_string()).collect();
    let slimmed = report.files.iter().filter(|f| f.written).count();
    let (before, after) = report
        .layers
        .iter()
        .fold((0, 0), |(b, a), l| (b + l.before, a + l.after));
    format!(
        "offload-probe slim: kept the GPU code {}{} load; {slimmed} files slimmed, layers {before} -> {after} bytes",
        devices.join(", "),
        if options.keep_portable {
            " and portable code (PTX, SPIR-V)"
        } else {
            ""
        },
    )
}

/// The config with new `diff_ids` and a history entry (an empty layer:
/// history entries stay one per layer).
fn config(config: &[u8], diff_ids: &[String], summary: &str) -> Result<Vec<u8>, String> {
    let mut c: Value = serde_json::from_slice(config).map_err(|e| format!("config: {e}"))?;
    c["rootfs"]["diff_ids"] = json!(diff_ids);
    let entry =
        json!({ "created_by": summary, "comment": "offload-probe slim", "empty_layer": true });
    match c.get_mut("history").and_then(Value::as_array_mut) {
        Some(h) => h.push(entry),
        None => c["history"] = json!([entry]),
    }
    serde_json::to_vec(&c).map_err(|e| e.to_string())
}

/// The annotation naming the devices whose code an image keeps.
pub const DEVICES_ANNOTATION: &str = "org.offload-loader.slim.devices";
/// The annotation saying what was done.
pub const SUMMARY_ANNOTATION: &str = "org.offload-loader.slim.summary";

/// The manifest: the original (an OCI layout's) or a new OCI one (an
/// archive's), with the config's and layers' descriptors and annotations.
fn manifest(
    original: Option<&Value>,
    config: &[u8],
    blobs: &[(Blob, Value)],
    options: &Options,
    summary: &str,
) -> Result<Vec<u8>, String> {
    let mut m = original.cloned().unwrap_or_else(|| {
        json!({
            "schemaVersion": 2,
            "mediaType": source::OCI_MANIFEST,
            "config": { "mediaType": "application/vnd.oci.image.config.v1+json" },
        })
    });
    m["config"]["digest"] = json!(digest::of(config));
    m["config"]["size"] = json!(config.len());
    m["layers"] = Value::Array(blobs.iter().map(|(_, d)| d.clone()).collect());
    let devices: Vec<String> = options.devices.iter().map(|d| d.to_string()).collect();
    if !m["annotations"].is_object() {
        m["annotations"] = json!({});
    }
    m["annotations"][DEVICES_ANNOTATION] = json!(devices.join(","));
    m["annotations"][SUMMARY_ANNOTATION] = json!(summary);
    serde_json::to_vec(&m).map_err(|e| e.to_string())
}

/// The files of GPU code in an image's root file system, each where it
/// lies in its layer's tar stream: read in place, never copied out.
pub struct GpuFiles {
    /// In the order a walk of the unpacked image meets them.
    pub files: Vec<GpuFile>,
    /// The platform whose image was read, where the name is of an index
    /// of images for several ([`ImageReport::platform`]).
    pub platform: Option<String>,
    /// The streams the files lie in, dropped before the scratch directory
    /// that holds those inflated from compressed layers.
    _streams: Vec<Tar>,
    _scratch: Scratch,
}

/// A file of GPU code in an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuFile {
    /// Its paths in the image: its hard links, and the symbolic links that
    /// lead to it, in the order a walk of the unpacked image meets them
    /// (component by component): the first is the one a walk reports.
    pub names: Vec<PathBuf>,
    /// The file its bytes lie in (the layer's blob, or the stream inflated
    /// from it), and where: a part to map with `MappedFile::open_part`.
    pub holder: PathBuf,
    pub offset: u64,
    pub len: u64,
}

/// The files of GPU code in the root file system of image `source`, its
/// layers applied in order (OCI `layer.md`: `.wh.NAME` deletes NAME of the
/// layers below, `.wh..wh..opq` empties its directory of them; a later
/// entry replaces an earlier one). Names of one file (hard links, and
/// symbolic links that lead to it, resolved inside the image as in a
/// chroot) are one file: what a walk of the unpacked image finds. A
/// compressed layer with GPU files is inflated into a scratch directory
/// under `scratch`, kept while the result is.
pub fn gpu_files(source: &Reference, scratch: &Path) -> Result<GpuFiles, String> {
    let image = source::open(source)?;
    let scratch = Scratch::new(scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
    let mut view: BTreeMap<String, Node> = BTreeMap::new();
    // Per file of GPU code: its stream (an index in `streams`), and its
    // data's place in it.
    let mut parts: Vec<(usize, u64, u64)> = Vec::new();
    let mut streams: Vec<Tar> = Vec::new();
    let layers: Vec<Result<Listed, String>> = image
        .layers
        .par_iter()
        .enumerate()
        .map(|(index, l)| Listed::new(l, scratch.0.join(format!("{index}.tar"))))
        .collect();
    for layer in layers {
        let Listed { tar, entries, gpu } = layer?;
        for e in entries.iter().filter(|e| e.kind == Kind::Whiteout) {
            whiteout(&mut view, &e.path);
        }
        for (e, gpu) in entries.iter().zip(gpu) {
            let node = match (&e.kind, gpu) {
                (Kind::Whiteout, _) => continue,
                (_, Some((offset, size))) => {
                    parts.push((streams.len(), offset, size));
                    Node::Gpu(parts.len() - 1)
                }
                (Kind::HardLink(target), None) => match view.get(target) {
                    Some(Node::Gpu(f)) => Node::Gpu(*f),
                    _ => Node::Other,
                },
                (Kind::Symlink(target), None) => Node::Link(target.clone()),
                _ => Node::Other,
            };
            view.insert(e.path.clone(), node);
        }
        streams.extend(tar);
    }
    let names = names(&view, parts.len());
    let mut used = vec![false; streams.len()];
    let mut files: Vec<GpuFile> = parts
        .into_iter()
        .zip(names)
        .filter(|(_, names)| !names.is_empty())
        .map(|((stream, offset, len), names)| {
            used[stream] = true;
            GpuFile {
                names,
                holder: streams[stream].place().0.to_path_buf(),
                offset,
                len,
            }
        })
        .collect();
    files.sort_by(|a, b| a.names[0].cmp(&b.names[0]));
    // A stream whose GPU files later layers deleted or replaced is let go.
    let streams = streams
        .into_iter()
        .zip(used)
        .filter_map(|(t, used)| used.then_some(t))
        .collect();
    Ok(GpuFiles {
        files,
        platform: image.platform.clone(),
        _streams: streams,
        _scratch: scratch,
    })
}

/// A layer's stream (inflated into `path` where it is compressed) and its
/// entries, with where each file of GPU code among them lies; the stream
/// only if it holds one.
struct Listed {
    tar: Option<Tar>,
    entries: Vec<Entry>,
    /// Per entry, the place of its data where it is a file of GPU code.
    gpu: Vec<Option<(u64, u64)>>,
}

impl Listed {
    fn new(l: &Layer, path: PathBuf) -> Result<Listed, String> {
        let tar = Tar::open(l, path)?;
        let entries = tar.entries(l)?;
        let gpu: Vec<Option<(u64, u64)>> = entries
            .iter()
            .map(|e| {
                let (_, offset, size) = tar.part_of(e);
                is_gpu_file(tar.bytes(), e).then_some((offset, size))
            })
            .collect();
        Ok(Listed {
            tar: gpu.iter().any(Option::is_some).then_some(tar),
            entries,
            gpu,
        })
    }
}

/// The paths of `view` that name each of its `files` files of GPU code
/// (an index of [`Node::Gpu`]), each list in the order a walk meets them:
/// `Path`'s order, component by component.
fn names(view: &BTreeMap<String, Node>, files: usize) -> Vec<Vec<PathBuf>> {
    let mut names = vec![Vec::new(); files];
    let gpu = |path: &str| match view.get(path) {
        Some(Node::Gpu(f)) => Some(*f),
        _ => None,
    };
    for (path, node) in view.iter().filter(|(path, _)| is_safe(path)) {
        let file = match node {
            Node::Gpu(f) => Some(*f),
            Node::Link(_) => resolve(view, path).and_then(|target| gpu(&target)),
            Node::Other => None,
        };
        if let Some(f) = file {
            names[f].push(PathBuf::from(path));
        }
    }
    for n in &mut names {
        n.sort();
    }
    names
}

/// What is at a path of an image's root file system, as far as its GPU
/// files go.
enum Node {
    /// A file of GPU code (an index in the files written).
    Gpu(usize),
    /// A symbolic link, and its target as written.
    Link(String),
    /// Anything else: a directory, another file.
    Other,
}

/// Applies whiteout `path` (a `.wh.` entry) to the layers below: `.wh.NAME`
/// deletes NAME and what is under it, `.wh..wh..opq` what is under its
/// directory.
fn whiteout(view: &mut BTreeMap<String, Node>, path: &str) {
    let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
    let (gone, opaque) = match name.strip_prefix(".wh.") {
        Some(".wh..opq") => (parent.to_string(), true),
        Some(name) if parent.is_empty() => (name.to_string(), false),
        Some(name) => (format!("{parent}/{name}"), false),
        None => return,
    };
    view.retain(|p, _| {
        let under = gone.is_empty()
            || p.strip_prefix(gone.as_str())
                .is_some_and(|rest| rest.starts_with('/'));
        !(under || (!opaque && *p == gone))
    });
}

/// The path symbolic link `path` leads to in `view`, resolved as the
/// kernel resolves it in a chroot (`..` at the root stays there, absolute
/// targets start at the root), through links in its components too; `None`
/// past 40 links (Linux's `MAXSYMLINKS`).
fn resolve(view: &BTreeMap<String, Node>, path: &str) -> Option<String> {
    let mut pending: Vec<String> = path.split('/').rev().map(String::from).collect();
    let mut resolved: Vec<String> = Vec::new();
    let mut hops = 0;
    while let Some(c) = pending.pop() {
        match c.as_str() {
            "" | "." => continue,
            ".." => {
                resolved.pop();
                continue;
            }
            _ => resolved.push(c),
        }
        if let Some(Node::Link(target)) = view.get(&resolved.join("/")) {
            hops += 1;
            if hops > 40 {
                return None;
            }
            resolved.pop();
            if target.starts_with('/') {
                resolved.clear();
            }
            pending.extend(target.split('/').rev().map(String::from));
        }
    }
    Some(resolved.join("/"))
}

/// A path of the image that may be joined to a directory: relative, with
/// no empty, `.` or `..` component.
fn is_safe(path: &str) -> bool {
    !path.is_empty()
        && !path
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
}

/// A scratch directory, removed with what is in it when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(parent: &Path) -> std::io::Result<Scratch> {
        // Unique in the process, which may read several images at once.
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        fs::create_dir_all(parent)?;
        let dir = parent.join(format!(
            ".offload-slim-image.{}.{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&dir)?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A layer's tar stream: its blob itself where that is not compressed
/// (read where it lies, in the layout's blob or the archive), else the
/// blob inflated into a scratch file, removed when this is dropped.
enum Tar {
    Blob(Layer),
    Inflated {
        tar: offload_loader::MappedFile,
        _scratch: Remove,
    },
}

impl Tar {
    /// Layer `l`'s stream (inflated into `path` if it must be), its
    /// digests checked.
    fn open(l: &Layer, path: PathBuf) -> Result<Tar, String> {
        if layer::Compression::of(l.bytes()) == layer::Compression::None {
            layer::check_plain(&l.digest, l.diff_id.as_deref(), &l.blob_digest())?;
            return Ok(Tar::Blob(l.clone()));
        }
        // Removed whether or not the inflation completes.
        let remove = Remove(path);
        let tar = layer::inflate(l.bytes(), &l.digest, l.diff_id.as_deref(), &remove.0)?;
        Ok(Tar::Inflated {
            tar,
            _scratch: remove,
        })
    }

    /// The file the stream lies in, and where in it the stream starts.
    fn place(&self) -> (&Path, u64) {
        match self {
            Tar::Blob(l) => (l.file.path(), l.at as u64),
            Tar::Inflated { tar, .. } => (tar.path(), 0),
        }
    }

    /// The file entry `e`'s data lies in, and where: (file, offset, size).
    fn part_of(&self, e: &Entry) -> (&Path, u64, u64) {
        let (file, at) = self.place();
        (file, at + e.data, e.size)
    }

    /// The tar stream.
    fn bytes(&self) -> &[u8] {
        match self {
            Tar::Blob(l) => l.bytes(),
            Tar::Inflated { tar, .. } => tar.bytes(),
        }
    }

    /// The stream's entries (`l`: the layer, named in errors).
    fn entries(&self, l: &Layer) -> Result<Vec<Entry>, String> {
        layer::entries(self.bytes()).map_err(|e| format!("layer {}: {e}", l.digest))
    }
}

/// A scratch file removed when dropped.
struct Remove(PathBuf);

impl Drop for Remove {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_read_as_skopeo_reads_them() {
        assert_eq!(
            Reference::parse("oci:/tmp/l:v1"),
            Some(Reference::Oci {
                dir: "/tmp/l".into(),
                tag: Some("v1".into())
            })
        );
        assert_eq!(
            Reference::parse("oci:dir"),
            Some(Reference::Oci {
                dir: "dir".into(),
                tag: None
            })
        );
        assert_eq!(
            Reference::parse("docker-archive:a.tar:img:latest"),
            Some(Reference::DockerArchive {
                file: "a.tar".into(),
                tag: Some("img:latest".into())
            })
        );
        assert_eq!(Reference::parse("/usr/lib"), None);
        assert_eq!(
            Reference::parse("oci:/tmp/l:v1").unwrap().to_string(),
            "oci:/tmp/l:v1"
        );
    }

    fn view(nodes: &[(&str, Node)]) -> BTreeMap<String, Node> {
        nodes
            .iter()
            .map(|(p, n)| {
                let n = match n {
                    Node::Gpu(f) => Node::Gpu(*f),
                    Node::Link(t) => Node::Link(t.clone()),
                    Node::Other => Node::Other,
                };
                (p.to_string(), n)
            })
            .collect()
    }

    #[test]
    fn links_resolve_inside_the_image_as_in_a_chroot() {
        let v = view(&[
            ("usr/lib/libx.so.1", Node::Gpu(0)),
            ("usr/lib/libx.so", Node::Link("libx.so.1".into())),
            ("lib", Node::Link("usr/lib".into())),
            ("abs", Node::Link("/usr/lib/libx.so".into())),
            ("escape", Node::Link("../../../../usr/lib/libx.so.1".into())),
            ("loop", Node::Link("loop".into())),
        ]);
        assert_eq!(
            resolve(&v, "usr/lib/libx.so").as_deref(),
            Some("usr/lib/libx.so.1")
        );
        assert_eq!(
            resolve(&v, "lib/libx.so").as_deref(),
            Some("usr/lib/libx.so.1")
        );
        assert_eq!(resolve(&v, "abs").as_deref(), Some("usr/lib/libx.so.1"));
        assert_eq!(resolve(&v, "escape").as_deref(), Some("usr/lib/libx.so.1"));
        assert_eq!(resolve(&v, "loop"), None);
    }

    #[test]
    fn a_file_is_named_by_its_links_in_the_order_a_walk_meets_them() {
        let v = view(&[
            ("usr/lib/libx.so.1", Node::Gpu(0)),
            ("usr/lib/libx.so", Node::Link("libx.so.1".into())),
            ("usr/lib/hard", Node::Gpu(0)),
            ("a.b", Node::Gpu(1)),
            ("a/b", Node::Gpu(1)),
            ("dangling", Node::Link("nowhere".into())),
            ("etc/motd", Node::Other),
        ]);
        let p = |s: &[&str]| s.iter().map(PathBuf::from).collect::<Vec<_>>();
        assert_eq!(
            names(&v, 3),
            [
                p(&["usr/lib/hard", "usr/lib/libx.so", "usr/lib/libx.so.1"]),
                // `a` is walked before `a.b`, though "a." sorts before "a/".
                p(&["a/b", "a.b"]),
                // A file a later layer replaced or deleted has no name.
                p(&[]),
            ]
        );
    }

    #[test]
    fn whiteouts_delete_from_the_layers_below() {
        let mut v = view(&[
            ("etc/a", Node::Other),
            ("etc/ab", Node::Other),
            ("etc/a/x", Node::Other),
            ("opt/d/y", Node::Other),
            ("opt/d", Node::Other),
        ]);
        whiteout(&mut v, "etc/.wh.a");
        whiteout(&mut v, "opt/d/.wh..wh..opq");
        assert_eq!(v.keys().collect::<Vec<_>>(), ["etc/ab", "opt/d"]);
        assert!(!is_safe("a/../b") && !is_safe("") && is_safe("usr/lib/x"));
    }
}
