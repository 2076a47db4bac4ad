//! One file slimmed for a set of devices, end to end: which images each
//! device selects (`offload_loader::select`, the same call the probe and the
//! runtime make), the file rewritten with those ([`crate::slim`]), the result
//! written beside its destination and read back (every device must select
//! byte-identical images from it), then renamed into place.
//!
//! What a file was is kept ([`keep`]): a replacement has its original's
//! owner, mode and extended attributes. A file is never split from its other
//! hard links, and never written over by its own result ([`input`]). New
//! files are unnamed until complete ([`temp`]), so a kill leaves nothing
//! behind. An input that changes while it is read is an error for that file
//! ([`input`], and [`guard`] for reads past an end that moved). A file of
//! GPU code only that no named device loads is told apart ([`other`]):
//! nothing is written for it, and in place it is removed when asked.
//! Unchanged files of an output tree are copied or linked ([`copy`]).

mod copy;
mod guard;
mod input;
pub(crate) mod keep;
mod other;
mod temp;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use offload_loader::bundle::Bundle;
use offload_loader::discover::link_stubs;
use offload_loader::rule::Rule;
use offload_loader::verdict::{judge, Module, Verdict};
use offload_loader::{
    select, DeviceTarget, Limits, MappedFile, Policy, Rejection, SectionContainers,
};

use crate::{ContainerReport, Layout, Outcome};

pub use copy::{copy_file, keep_directory, link_name, symlink_name, Copied, CopyError, How};
pub use guard::GuardError;
use guard::Registration;
use input::{Input, InputError};
use keep::Strictness;
pub use other::OtherGpus;
use temp::Temp;
pub use temp::{is_temporary, remove_leftovers};

/// What to keep.
#[derive(Debug, Clone)]
pub struct Options {
    /// The devices: every image one of them selects is kept.
    pub devices: Vec<DeviceTarget>,
    /// Also keep the portable code a device could compile at load (NVIDIA's
    /// PTX, AMD's SPIR-V), not only the image it selects.
    pub keep_portable: bool,
    /// Bounds on reading.
    pub limits: Limits,
}

/// Where the result goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// Nowhere: sizes only.
    DryRun,
    /// Over the file itself (atomically: a temporary file in its directory,
    /// renamed), and over `also`, other names of the same file.
    InPlace {
        /// Hard links to the same file, replaced by links to the result.
        also: Vec<PathBuf>,
        /// Remove a file for other GPUs ([`OtherGpus`]) with all its names,
        /// rather than leave it.
        remove_other_gpus: bool,
    },
    /// To this path (its directory made if missing).
    To(PathBuf),
}

/// An image removed, and why: what each device said of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed {
    /// Its index in its container.
    pub index: usize,
    /// Its bundle-style ID.
    pub id: String,
    /// `device: reason` for each device.
    pub reasons: Vec<String>,
}

/// A container's report with the images' IDs.
#[derive(Debug, Clone)]
pub struct ContainerSummary {
    /// What the writer did.
    pub report: ContainerReport,
    /// The kept images' IDs, by index.
    pub kept: Vec<(usize, String)>,
    /// The removed images, with why.
    pub removed: Vec<Removed>,
}

/// What was done to one file.
#[derive(Debug, Clone, Default)]
pub struct FileReport {
    /// The file.
    pub path: PathBuf,
    /// Its size.
    pub before: u64,
    /// Its size after (the same when nothing changes).
    pub after: u64,
    /// Whether a result was written.
    pub written: bool,
    /// Its containers.
    pub containers: Vec<ContainerSummary>,
    /// Sections left whole, and why.
    pub sections_left: Vec<(String, String)>,
    /// Sections that could not be compacted, rewritten in place with holes.
    pub holes: Vec<crate::Holes>,
    /// Devices on which the file fails by the rule of the runtime that loads
    /// it ([`offload_loader::rule::Rule`]): a HIP or OpenMP container
    /// without an image for the device, or the first of the file's CUDA
    /// modules when none has one: (device, section, container offset).
    pub missing: Vec<(String, String, u64)>,
    /// Devices for which some of the file's modules of one rule (CUDA, or
    /// kept as data) have no image, which that rule allows: (device, rule,
    /// modules of it without one, modules of it).
    pub partly: Vec<(String, Rule, usize, usize)>,
    /// A read, write or verification error: the file is untouched.
    pub error: Option<String>,
    /// What the result could not keep of what the file was (its owner, and
    /// so its setuid/setgid bits; its file capabilities), in words.
    pub notes: Vec<String>,
    /// The file is GPU code only and no named device loads any of it: for
    /// other GPUs. Nothing is written for it (an output tree does without
    /// it); in place it is removed only when the destination asks.
    pub other_gpus: Option<OtherGpus>,
}

/// Installs the process-wide `SIGBUS` handler that turns an input
/// shrinking while it is read into an error for that file ("changed while
/// it was read") instead of the death of the process. Once per process, by
/// the program (`offload-probe slim` calls it): a library must not install
/// signal handlers behind its host's back. Without it, such a read kills
/// the process, as any read past a mapping's end does.
pub fn install_sigbus_guard() -> Result<(), GuardError> {
    guard::install()
}

/// Slims `path` for `options` into `destination`.
pub fn slim_file(path: &Path, options: &Options, destination: &Destination) -> FileReport {
    slim_part(path, None, options, destination)
}

/// [`slim_file`], or with `part` (offset, length) the file that those bytes
/// of `path` are (a tar stream's member, slimmed where it lies), into a
/// file of its own or not at all: it has none to replace in place.
pub(crate) fn slim_part(
    path: &Path,
    part: Option<(u64, u64)>,
    options: &Options,
    destination: &Destination,
) -> FileReport {
    let mut report = FileReport {
        path: path.to_path_buf(),
        ..FileReport::default()
    };
    let in_place = matches!(destination, Destination::InPlace { .. });
    let input = match part {
        Some(_) if in_place => Err(InputError::Open(format!(
            "{}: a part of a file is not slimmed in place",
            path.display()
        ))),
        _ => Input::open(path, part),
    };
    match input {
        Ok(input) => {
            let guard = guard::register(input.map().bytes());
            let source = Source {
                input: &input,
                guard: &guard,
            };
            slim_one(&mut report, &source, options, destination);
            // A result written was checked before it was, a file removed
            // before it was; one not written (a dry run, nothing to remove,
            // an error) is checked now: a change is the first cause of any
            // other error.
            let removed = report.other_gpus.as_ref().is_some_and(|o| o.removed);
            if !report.written && !removed {
                if let Err(e) = input.unchanged(&guard) {
                    report.error = Some(e.to_string());
                }
            }
        }
        Err(e) => report.error = Some(e.to_string()),
    }
    if report.error.is_some() {
        // Nothing was written.
        report.after = report.before;
        report.holes.clear();
        report.notes.clear();
    }
    report
}

/// The input being slimmed, with its registration with the `SIGBUS` guard.
struct Source<'s> {
    input: &'s Input,
    guard: &'s Registration<'s>,
}

/// Slims the file compacted; where the verifier refuses the compacted
/// result, again with every section rewritten in place (holes: no
/// address moves); where that is refused too, the file is left as it is
/// and the refusal is its error.
fn slim_one(
    report: &mut FileReport,
    source: &Source<'_>,
    options: &Options,
    destination: &Destination,
) {
    let Some(refused) = attempt(report, source, options, destination, Layout::Compact) else {
        return;
    };
    *report = FileReport {
        path: report.path.clone(),
        ..FileReport::default()
    };
    let layout = Layout::InPlace {
        why: "the verifier refused the compacted result (see the notes): rewritten where it stands",
    };
    if let Some(again) = attempt(report, source, options, destination, layout) {
        report.error = Some(again);
        report.after = report.before;
        report.holes.clear();
        return;
    }
    report.notes.insert(
        0,
        format!("not compacted: {refused}; rewritten in place with holes instead"),
    );
}

/// One try at slimming the file with `layout`: the report filled in, the
/// result written where `destination` says; `Some(why)` when the verifier
/// refused a result that moved something (nothing written; the caller
/// tries again in place).
fn attempt(
    report: &mut FileReport,
    source: &Source<'_>,
    options: &Options,
    destination: &Destination,
    layout: Layout,
) -> Option<String> {
    let file = source.input.map();
    let path = file.path();
    let data = file.bytes();
    report.before = data.len() as u64;
    report.after = report.before;
    let sections = match file.containers_in_parallel(&options.limits) {
        Ok(s) => s,
        Err(e) => {
            report.error = Some(e.to_string());
            return None;
        }
    };
    let plan = choose(data, &sections, options);
    if let Some(other) = other::of(report.before, &sections, &plan) {
        let other = report.other_gpus.insert(other);
        if let Destination::InPlace {
            also,
            remove_other_gpus: true,
        } = destination
        {
            match other::remove(source, path, also) {
                Ok(()) => other.removed = true,
                Err(e) => report.error = Some(e),
            }
        }
        return None;
    }
    report.missing = plan.missing.clone();
    report.partly = plan.partly.clone();
    let first = crate::slim(data, &sections, &plan.keep_fn(), &options.limits, layout);
    report.sections_left = first.sections_left;
    report.holes = first.holes;
    report.containers = summarise(first.containers, &sections, &plan);
    let output = first.output?;
    let fallback = matches!(layout, Layout::Compact) && output.len() != report.before;
    if first.deferred.is_empty() {
        return finish(
            report,
            output,
            &sections,
            &plan,
            options,
            destination,
            source,
            None,
            fallback,
        );
    }
    // More than one section to compact: each further pass works on the
    // previous pass's result, kept in an unlinked scratch file. Sections keep
    // their order and names from pass to pass.
    let scratch = match scratch_dir(path, destination) {
        Ok(d) => d,
        Err(e) => {
            report.error = Some(e);
            return None;
        }
    };
    let mut current = match Scratch::new(&scratch, path, &output) {
        Ok(f) => f,
        Err(e) => {
            report.error = Some(e);
            return None;
        }
    };
    drop(output);
    // Each pass compacts at least one section, or is the last.
    let output = 'passes: {
        for _ in 0..sections.len() {
            let now = match current.map.containers_in_parallel(&options.limits) {
                Ok(s) => s,
                Err(e) => {
                    report.error = Some(format!("reading a pass's result back: {e}"));
                    return None;
                }
            };
            let pass_plan = choose(current.map.bytes(), &now, options);
            let crate::Slimmed {
                output,
                containers,
                sections_left,
                holes,
                deferred,
            } = crate::slim(
                current.map.bytes(),
                &now,
                &pass_plan.keep_fn(),
                &options.limits,
                layout,
            );
            report.holes.extend(holes);
            // A section an earlier pass rewrote in place may come up again, to
            // be refused again: it is reported once, with its holes.
            report.sections_left = sections_left
                .into_iter()
                .filter(|(s, _)| !report.holes.iter().any(|h| h.section == *s))
                .collect();
            let summaries = summarise(containers, &now, &pass_plan);
            merge(&mut report.containers, summaries, &now, &sections);
            match output {
                Some(out) if !deferred.is_empty() => {
                    let base = Some((current.temp, current.map.bytes()));
                    let next =
                        write_out(&out, base, &scratch, path, PASS).and_then(Scratch::mapped);
                    drop(out);
                    match next {
                        Ok(next) => current = next,
                        Err(e) => {
                            report.error = Some(e);
                            return None;
                        }
                    }
                }
                Some(out) => break 'passes out,
                None => break 'passes crate::Output::whole(current.map.bytes()),
            }
        }
        crate::Output::whole(current.map.bytes())
    };
    let base = Some((current.temp, current.map.bytes()));
    // Earlier passes compacted: a refusal falls back to holes.
    let fallback = matches!(layout, Layout::Compact);
    finish(
        report,
        output,
        &sections,
        &plan,
        options,
        destination,
        source,
        base,
        fallback,
    )
}

/// The result `output` reported, and written where `destination` says
/// (read back and verified against the original's `sections` first; a dry
/// run is verified the same way, in an unlinked scratch file, and not
/// kept). `base`: the last pass's result, in a scratch file beside the
/// destination, and its bytes; `output` may be an edit of them. A result
/// the verifier refuses is the file's error, or, with `may_fall_back`,
/// returned for the caller to try another layout.
#[allow(clippy::too_many_arguments)]
fn finish(
    report: &mut FileReport,
    output: crate::Output<'_>,
    sections: &[SectionContainers<'_>],
    plan: &Plan,
    options: &Options,
    destination: &Destination,
    source: &Source<'_>,
    base: Option<(Temp, &[u8])>,
    may_fall_back: bool,
) -> Option<String> {
    report.after = output.len();
    let target = match destination {
        Destination::DryRun => None,
        Destination::InPlace { .. } => match fs::canonicalize(&report.path) {
            Ok(p) => Some(p),
            Err(e) => {
                report.error = Some(format!("{}: {e}", report.path.display()));
                return None;
            }
        },
        Destination::To(p) => Some(p.clone()),
    };
    // Refused before anything is written: a file whose other hard links
    // would be split off, a result over its own input.
    let refused = match (destination, &target) {
        (Destination::InPlace { also, .. }, _) => source.input.all_links_named(also),
        (_, Some(target)) => source.input.not_at(target),
        (_, None) => Ok(()),
    };
    if let Err(e) = refused {
        report.error = Some(e.to_string());
        return None;
    }
    let expected = Expected {
        sections,
        chosen: &plan.chosen,
        containers: &report.containers,
    };
    match write_verified(
        target.as_deref(),
        source,
        &output,
        base,
        &expected,
        options,
        destination,
    ) {
        Ok(notes) => {
            report.written = target.is_some();
            report.notes = notes;
            None
        }
        Err(Failure::Refused(e)) if may_fall_back => Some(e),
        Err(Failure::Refused(e) | Failure::Other(e)) => {
            report.error = Some(e);
            report.after = report.before;
            report.holes.clear();
            None
        }
    }
}

/// Why a result was not written.
enum Failure {
    /// The verifier refused it: it would not load as the original.
    Refused(String),
    /// Anything else (the input changed, an I/O error).
    Other(String),
}

impl From<String> for Failure {
    fn from(e: String) -> Failure {
        Failure::Other(e)
    }
}

/// What a result must hold: what each device selects in the original's
/// `sections` (`chosen`, see [`Plan`]), and exactly the images the
/// `containers` reports say stay.
struct Expected<'e, 'a> {
    sections: &'e [SectionContainers<'a>],
    chosen: &'e [Vec<(u64, usize)>],
    containers: &'e [ContainerSummary],
}

/// Where a pass's result waits for the next pass: beside the destination
/// (the same file system), or the temporary directory for a dry run.
fn scratch_dir(path: &Path, destination: &Destination) -> Result<PathBuf, String> {
    let dir = match destination {
        Destination::DryRun => return Ok(std::env::temp_dir()),
        Destination::InPlace { .. } => {
            dir_of(&fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?)
        }
        Destination::To(p) => dir_of(p),
    };
    fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// The directory `path` is in (`.` for a bare name).
fn dir_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A pass's result in a scratch file (unnamed where the file system allows:
/// a kill leaves nothing), and mapped.
struct Scratch {
    temp: Temp,
    map: MappedFile,
}

impl Scratch {
    /// `output` written to a scratch file in `dir`, and mapped.
    fn new(dir: &Path, path: &Path, output: &crate::Output<'_>) -> Result<Scratch, String> {
        write_out(output, None, dir, path, PASS).and_then(Scratch::mapped)
    }

    /// The scratch file `temp`, mapped.
    fn mapped(temp: Temp) -> Result<Scratch, String> {
        let map = MappedFile::open(temp.path())
            .map_err(|e| format!("reading a pass's result back: {e}"))?;
        Ok(Scratch { temp, map })
    }
}

/// What a file [`write_out`] writes is: its temporary name's tag, and its
/// name in errors.
const PASS: (&str, &str) = ("pass", "a pass's result");
const RESULT: (&str, &str) = ("result", "the result");

/// `output` in a temporary file of `dir` (named like `like`, with the tag
/// and the name in errors of [`PASS`] or [`RESULT`]): written into `base`, the previous pass's scratch file, and
/// its bytes, where it only rewrites bytes there where they stand
/// ([`crate::Output::edits`]); otherwise written anew, to a new file.
fn write_out(
    output: &crate::Output<'_>,
    base: Option<(Temp, &[u8])>,
    dir: &Path,
    like: &Path,
    (tag, what): (&str, &str),
) -> Result<Temp, String> {
    let io = |e: std::io::Error| format!("{}: writing {what}: {e}", dir.display());
    match base {
        Some((mut temp, bytes)) if output.edits(bytes) => {
            output.write_edits(temp.file()).map_err(io)?;
            Ok(temp)
        }
        _ => {
            let mut temp = Temp::new(dir, like, tag).map_err(|e| e.to_string())?;
            output.write_sparse(temp.file()).map_err(io)?;
            Ok(temp)
        }
    }
}

/// Puts a later pass's summaries of the sections it rewrote in place of
/// those the report had, their offsets those of the original file (`now`
/// and `original` list the same sections, in the same order).
fn merge(
    report: &mut Vec<ContainerSummary>,
    pass: Vec<ContainerSummary>,
    now: &[SectionContainers<'_>],
    original: &[SectionContainers<'_>],
) {
    let rewritten: BTreeSet<String> = pass
        .iter()
        .filter(|c| matches!(c.report.outcome, Outcome::Rewritten | Outcome::Removed))
        .map(|c| c.report.section.clone())
        .collect();
    for section in rewritten {
        let at = report
            .iter()
            .position(|c| c.report.section == section)
            .unwrap_or(report.len());
        report.retain(|c| c.report.section != section);
        let mut new: Vec<ContainerSummary> = pass
            .iter()
            .filter(|c| c.report.section == section)
            .cloned()
            .collect();
        for c in &mut new {
            c.report.offset = remap(c.report.offset, now, original);
        }
        let at = at.min(report.len());
        report.splice(at..at, new);
    }
}

/// `offset` (in a pass's result, whose sections are `now`) as the same
/// place in the original, whose sections are `original`.
fn remap(offset: u64, now: &[SectionContainers<'_>], original: &[SectionContainers<'_>]) -> u64 {
    for (a, b) in now.iter().zip(original) {
        let s = &a.section;
        if s.file_offset <= offset && offset < s.file_offset + s.size && s.name == b.section.name {
            return b.section.file_offset + (offset - s.file_offset);
        }
    }
    offset
}

/// Which images to keep: (container offset, image index), and which
/// devices find no image in a container of their kind.
struct Plan {
    keep: BTreeSet<(u64, usize)>,
    /// Per device, the images it selects, in order: (container offset, index).
    chosen: Vec<Vec<(u64, usize)>>,
    /// (container offset, image index) → `device: why not`, for reports.
    reasons: BTreeMap<(u64, usize), Vec<String>>,
    missing: Vec<(String, String, u64)>,
    /// (device, modules without an image, modules) where some of a file's
    /// CUDA modules have none for a device, which the CUDA rule allows.
    partly: Vec<(String, Rule, usize, usize)>,
}

impl Plan {
    /// The keep-mask of each container, for [`crate::slim`].
    fn keep_fn(
        &self,
    ) -> impl Fn(&SectionContainers<'_>, &offload_loader::Container<'_>) -> Option<Vec<bool>> + '_
    {
        |_, c| {
            let n = c.images().len();
            Some(
                (0..n)
                    .map(|i| self.keep.contains(&(c.offset(), i)))
                    .collect(),
            )
        }
    }
}

/// What each device selects in `sections` (`offload_loader::select`), and
/// so which images stay.
/// The other images of one module that NVIDIA's driver may load on the
/// device instead of the one `selection` chose: where it chose an arch- or
/// family-specific cubin (`sm_90a`, `sm_100f`), the cubins of the same
/// capability with a less specific variant (`sm_90`). Which of them the
/// driver takes is not documented, and not verified here on a GPU: the safe
/// side keeps them all (CUDA's compatibility rules allow each).
fn driver_may_take(selection: &offload_loader::Selection) -> Vec<usize> {
    let Some(fit) = selection
        .chosen
        .and_then(|c| selection.compatible.iter().find(|(i, _)| *i == c))
        .map(|&(_, fit)| fit)
    else {
        return Vec::new();
    };
    if !fit.native || fit.variant == 0 {
        return Vec::new();
    }
    selection
        .compatible
        .iter()
        .filter(|(_, other)| {
            other.native && other.capability == fit.capability && other.variant < fit.variant
        })
        .map(|&(i, _)| i)
        .collect()
}

fn choose(data: &[u8], sections: &[SectionContainers<'_>], options: &Options) -> Plan {
    let stubs = link_stubs(data);
    let mut keep = BTreeSet::new();
    let mut chosen = vec![Vec::new(); options.devices.len()];
    let mut reasons: BTreeMap<(u64, usize), Vec<String>> = BTreeMap::new();
    // Every module of the file (whatever is left in it), where it is, and
    // per device whether it has an image there: the verdict's input
    // (`offload_loader::verdict`, as the probe judges the result).
    let mut modules = Vec::new();
    let mut places = Vec::new();
    let mut has = vec![Vec::new(); options.devices.len()];
    for s in sections {
        for scope in s.scopes() {
            let Some(first) = scope.containers().first().copied() else {
                continue;
            };
            let module = Module::of(&s.section, &scope, &stubs);
            // nvlink's kernel-less stub is no device's code and stays whole
            // (about 1.5 KiB): emptied, it would read as a module without an
            // image, and the result's verdict would not be the original's.
            if module.kernel_less {
                for c in scope.containers() {
                    keep.extend((0..c.images().len()).map(|j| (c.offset(), j)));
                }
            }
            modules.push(module);
            places.push((s.section.name.clone(), first.offset()));
            for (d, device) in options.devices.iter().enumerate() {
                let selection = select(device, &scope, &Policy::default());
                if let Some(i) = selection.chosen {
                    if let Some((c, j)) = scope.locate(i) {
                        keep.insert((c.offset(), j));
                        chosen[d].push((c.offset(), j));
                    }
                }
                has[d].push(selection.chosen.is_some());
                for i in driver_may_take(&selection) {
                    if let Some((c, j)) = scope.locate(i) {
                        keep.insert((c.offset(), j));
                    }
                }
                if options.keep_portable {
                    for &(i, fit) in &selection.compatible {
                        if !fit.native {
                            if let Some((c, j)) = scope.locate(i) {
                                keep.insert((c.offset(), j));
                            }
                        }
                    }
                }
                for (i, why) in &selection.rejected {
                    if let Some((c, j)) = scope.locate(*i) {
                        // What no rule here models stays: the library may load it.
                        if *why == Rejection::Unmodelled {
                            keep.insert((c.offset(), j));
                        }
                        reasons
                            .entry((c.offset(), j))
                            .or_default()
                            .push(format!("{device}: {why}"));
                    }
                }
                for &(i, _) in &selection.compatible {
                    if Some(i) != selection.chosen {
                        if let Some((c, j)) = scope.locate(i) {
                            reasons
                                .entry((c.offset(), j))
                                .or_default()
                                .push(format!("{device}: another image fits it better"));
                        }
                    }
                }
            }
        }
    }
    let (missing, partly) = shortfalls(&modules, &places, &has, &options.devices);
    Plan {
        keep,
        chosen,
        reasons,
        missing,
        partly,
    }
}

/// Where devices find no image, by the verdict of each rule's group of the
/// file's modules: every module of a group registered at start-up that has
/// none, and the first of a CUDA or data group none of whose modules has
/// one (`missing`); (device, modules without an image, modules) where some
/// of such a group have none, which its runtime allows (`partly`).
type Shortfalls = (
    Vec<(String, String, u64)>,
    Vec<(String, Rule, usize, usize)>,
);

fn shortfalls(
    modules: &[Module],
    places: &[(String, u64)],
    has: &[Vec<bool>],
    devices: &[DeviceTarget],
) -> Shortfalls {
    let (mut missing, mut partly) = (Vec::new(), Vec::new());
    for (d, device) in devices.iter().enumerate() {
        let Some(file) = judge(modules, device.vendor(), |m| has[d][m]) else {
            continue;
        };
        let place = |m: usize| (device.to_string(), places[m].0.clone(), places[m].1);
        for g in &file.groups {
            match g.verdict {
                Verdict::Fails if g.rule.registered() => missing.extend(
                    (0..modules.len())
                        .filter(|&m| {
                            let module = &modules[m];
                            module.rule == g.rule
                                && module.targets(device.vendor())
                                && !module.kernel_less
                                && !has[d][m]
                        })
                        .map(place),
                ),
                Verdict::Fails => missing.extend(g.first_without.map(place)),
                Verdict::Partly => {
                    partly.push((device.to_string(), g.rule, g.without_image, g.modules));
                }
                Verdict::Loads | Verdict::ForOtherGpus => {}
            }
        }
    }
    (missing, partly)
}

/// Each container's report with the IDs of the images it kept and removed,
/// and why each removed one was (the containers looked up by offset once:
/// a file holds thousands).
fn summarise(
    reports: Vec<ContainerReport>,
    sections: &[SectionContainers<'_>],
    plan: &Plan,
) -> Vec<ContainerSummary> {
    let mut by_offset = HashMap::new();
    for c in sections.iter().flat_map(|s| s.containers.iter().flatten()) {
        by_offset.entry(c.offset()).or_insert(c);
    }
    reports
        .into_iter()
        .map(|report| {
            let container = by_offset.get(&report.offset);
            let id = |i: usize| {
                container
                    .and_then(|c| c.images().get(i))
                    .map_or_else(String::new, |image| image.id.clone())
            };
            ContainerSummary {
                kept: report.kept.iter().map(|&i| (i, id(i))).collect(),
                removed: report
                    .removed
                    .iter()
                    .map(|&i| Removed {
                        index: i,
                        id: id(i),
                        reasons: plan
                            .reasons
                            .get(&(report.offset, i))
                            .cloned()
                            .unwrap_or_default(),
                    })
                    .collect(),
                report,
            }
        })
        .collect()
}

/// Every image `device` selects in `sections`, in order: (container, index).
fn selected<'c, 'a>(
    sections: &'c [SectionContainers<'a>],
    device: &DeviceTarget,
) -> Vec<(&'c offload_loader::Container<'a>, usize)> {
    let mut out = Vec::new();
    for s in sections {
        for scope in s.scopes() {
            if let Some(i) = select(device, &scope, &Policy::default()).chosen {
                if let Some(found) = scope.locate(i) {
                    out.push(found);
                }
            }
        }
    }
    out
}

/// Where each kept image of the original is in the result: (container
/// offset, image index) in one → the same in the other.
type Pairs = BTreeMap<(u64, usize), (u64, usize)>;

/// Whether every device selects, from `after`, the images it selects in the
/// original (`chosen`, see [`Plan`]), in the same order: through `pairs`,
/// whose images [`same_kept`] found byte-identical.
fn same_selections(
    chosen: &[Vec<(u64, usize)>],
    pairs: &Pairs,
    after: &[SectionContainers<'_>],
    devices: &[DeviceTarget],
) -> Result<(), String> {
    for (device, b) in devices.iter().zip(chosen) {
        let a = selected(after, device);
        if b.len() != a.len() {
            return Err(format!(
                "{device} selects {} images from the result, {} from the original",
                a.len(),
                b.len()
            ));
        }
        for (old, (ac, ai)) in b.iter().zip(a) {
            if pairs.get(old) != Some(&(ac.offset(), ai)) {
                return Err(format!(
                    "{device} would load {} from the result, not the image it loads from the original",
                    ac.images()[ai].id
                ));
            }
        }
    }
    Ok(())
}

/// Whether `after` holds exactly the images the `containers` reports keep
/// from `before`, in order, each with its ID and byte for byte (a container
/// without a report, or left whole, keeps every image; one removed, none);
/// where each is, and where each container that stays is (one that keeps
/// no image included: an emptied fat binary). Every container but a removed
/// one has its counterpart in the result, in order; a compressed bundle is
/// inflated once on each side (without the hash check: the bytes are
/// compared instead).
fn same_kept(
    before: &[SectionContainers<'_>],
    containers: &[ContainerSummary],
    after: &[SectionContainers<'_>],
    limits: &Limits,
) -> Result<(Pairs, Vec<crate::compare::Kept>), String> {
    let reports: BTreeMap<u64, &ContainerSummary> =
        containers.iter().map(|c| (c.report.offset, c)).collect();
    let mut want = Vec::new();
    for c in before.iter().flat_map(|s| s.containers.iter().flatten()) {
        match reports.get(&c.offset()) {
            Some(r) if r.report.outcome == Outcome::Removed => {}
            Some(r) => want.push((c, r.report.kept.clone())),
            None => want.push((c, (0..c.images().len()).collect())),
        }
    }
    let got: Vec<_> = after
        .iter()
        .flat_map(|s| s.containers.iter().flatten())
        .collect();
    if want.len() != got.len() {
        return Err(format!(
            "the result has {} containers, {} were to stay",
            got.len(),
            want.len()
        ));
    }
    let limits = Limits {
        verify_hash: false,
        ..*limits
    };
    let mut pairs = Pairs::new();
    let mut stay = Vec::new();
    for ((bc, kept), ac) in want.into_iter().zip(got) {
        stay.push(crate::compare::Kept {
            old: bc.offset(),
            new: ac.offset(),
        });
        if kept.len() != ac.images().len() {
            return Err(format!(
                "the container at {:#x} of the result holds {} images, {} were to stay",
                ac.offset(),
                ac.images().len(),
                kept.len()
            ));
        }
        let (old, new) = (Code::of(bc, &limits)?, Code::of(ac, &limits)?);
        for (ai, &bi) in kept.iter().enumerate() {
            let id = &bc.images()[bi].id;
            if *id != ac.images()[ai].id {
                return Err(format!(
                    "the result holds {} where {id} was to stay",
                    ac.images()[ai].id
                ));
            }
            if old.image(bc, bi, &limits)? != new.image(ac, ai, &limits)? {
                return Err(format!("{id} in the result is not the original's bytes"));
            }
            pairs.insert((bc.offset(), bi), (ac.offset(), ai));
        }
    }
    Ok((pairs, stay))
}

/// A container's images, for comparing: a compressed bundle inflated once;
/// other containers' images read one by one (borrowed where stored).
enum Code {
    Inflated(Vec<u8>),
    Each,
}

impl Code {
    fn of(c: &offload_loader::Container<'_>, limits: &Limits) -> Result<Code, String> {
        match c.compression() {
            Some(ccob) => ccob
                .decompress(limits)
                .map(Code::Inflated)
                .map_err(|e| format!("inflating the container at {:#x}: {e}", c.offset())),
            None => Ok(Code::Each),
        }
    }

    /// The bytes of image `i` of `c` (the container this was made of).
    fn image<'x>(
        &'x self,
        c: &'x offload_loader::Container<'_>,
        i: usize,
        limits: &Limits,
    ) -> Result<std::borrow::Cow<'x, [u8]>, String> {
        let bad = |e: offload_loader::Error| format!("the container at {:#x}: {e}", c.offset());
        // A fat binary's entries are kept as stored: compared so, header
        // and payload, without inflating them.
        let stored = c
            .nv_fatbin()
            .zip(c.nv_entry(i))
            .and_then(|(fatbin, entry)| {
                let at = fatbin.entries().iter().position(|e| e == entry)?;
                fatbin.stored(at)
            });
        match self {
            Code::Each if stored.is_some() => Ok(stored.unwrap_or_default().into()),
            Code::Each => c.take_image(i).map_err(bad),
            Code::Inflated(bytes) => {
                let bundle = Bundle::parse(bytes, limits).map_err(bad)?;
                let entry = bundle
                    .entries()
                    .get(c.images()[i].index)
                    .ok_or_else(|| format!("the container at {:#x} lost an entry", c.offset()))?;
                bundle
                    .code_object(entry)
                    .map(std::borrow::Cow::Borrowed)
                    .map_err(bad)
            }
        }
    }
}

/// Writes `output` to a temporary file beside `target` (with the input's
/// attributes), reads it back and verifies it (it holds what `expected`
/// says, every device selects in it what it selects in the original),
/// checks that the original has not changed meanwhile, and only then puts
/// it at `target` (atomically); for an in-place write, other hard links
/// are pointed at the result too. Without a `target` (a dry run) the
/// result is written to an unlinked scratch file in the temporary
/// directory, verified, and dropped. What could not be kept, in words.
fn write_verified(
    target: Option<&Path>,
    source: &Source<'_>,
    output: &crate::Output<'_>,
    base: Option<(Temp, &[u8])>,
    expected: &Expected<'_, '_>,
    options: &Options,
    destination: &Destination,
) -> Result<Vec<String>, Failure> {
    let dir = match target {
        Some(t) => dir_of(t),
        None => scratch_dir(source.input.map().path(), destination)?,
    };
    fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let like = target.unwrap_or(source.input.map().path());
    let mut temp = write_out(output, base, &dir, like, RESULT)?;
    let Some(target) = target else {
        let written = temp.path();
        verify(
            &written,
            source.input.map().bytes(),
            output,
            expected,
            options,
        )
        .map_err(Failure::Refused)?;
        source
            .input
            .unchanged(source.guard)
            .map_err(|e| e.to_string())?;
        return Ok(Vec::new());
    };
    let strictness = match destination {
        Destination::InPlace { .. } => Strictness::InPlace,
        _ => Strictness::Copy,
    };
    let attributes = source.input.attributes().map_err(|e| e.to_string())?;
    let io = |e: std::io::Error| format!("{}: writing the result: {e}", dir.display());
    // After the bytes: a write clears setuid bits and capabilities.
    let notes = attributes
        .apply(temp.file(), strictness)
        .map_err(|e| e.to_string())?;
    // In place, the result replaces the original: its bytes reach the disk
    // before the rename (a crash leaves the original or the result, never a
    // file half written), while they are read back: `fsync` waits on the
    // device, the verification on the processors. Into --output, a new
    // file is written as `cp` writes one: the kernel writes it back.
    let durable = matches!(destination, Destination::InPlace { .. });
    let written = temp.path();
    let file: &fs::File = temp.file();
    let (synced, verified) = std::thread::scope(|s| {
        let synced = durable.then(|| s.spawn(|| file.sync_all()));
        let verified = verify(
            &written,
            source.input.map().bytes(),
            output,
            expected,
            options,
        );
        let synced = synced.map_or(Ok(()), |synced| {
            synced
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("the fsync thread failed")))
        });
        (synced, verified)
    });
    synced.map_err(io)?;
    // A change to the input explains a failed verification first.
    source
        .input
        .unchanged(source.guard)
        .map_err(|e| e.to_string())?;
    verified.map_err(Failure::Refused)?;
    temp.publish(target).map_err(|e| e.to_string())?;
    // In place, the rename itself reaches the disk before we say it is done.
    if durable {
        if let Ok(d) = fs::File::open(&dir) {
            let _ = d.sync_all();
        }
    }
    if let Destination::InPlace { also, .. } = destination {
        for other in also {
            link_name(target, other).map_err(|e| e.to_string())?;
        }
    }
    Ok(notes)
}

/// Reads the result at `written` back through the same readers: it must
/// hold what `expected` says, and every device must select the same images.
fn verify(
    written: &Path,
    original: &[u8],
    output: &crate::Output<'_>,
    expected: &Expected<'_, '_>,
    options: &Options,
) -> Result<(), String> {
    let written = MappedFile::open(written).map_err(|e| format!("reading the result back: {e}"))?;
    if written.bytes().len() as u64 != output.len() {
        return Err("the result's size is not the one written".into());
    }
    let new_sections = written
        .containers_in_parallel(&options.limits)
        .map_err(|e| format!("reading the result back: {e}"))?;
    same_kept(
        expected.sections,
        expected.containers,
        &new_sections,
        &options.limits,
    )
    .and_then(|(pairs, kept)| {
        same_selections(expected.chosen, &pairs, &new_sections, &options.devices)?;
        // Outside the GPU code: loads as the original did.
        crate::compare::same_behaviour(
            original,
            expected.sections,
            written.bytes(),
            &new_sections,
            &kept,
        )
        .map_err(|e| format!("the result does not load as the original: {e}"))
    })
    .map_err(|e| format!("verification failed: {e}; nothing written"))
}

impl FileReport {
    /// Whether anything in the file would change.
    pub fn changes(&self) -> bool {
        self.after != self.before || !self.holes.is_empty()
    }

    /// The containers left whole though they target a named device's kind
    /// of GPU and have no image for it.
    pub fn whole(&self) -> impl Iterator<Item = &ContainerSummary> {
        self.containers
            .iter()
            .filter(|c| matches!(c.report.outcome, Outcome::Whole(_)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use offload_loader::bundle::{self, Bundle};

    /// A clang-22 bundle: host, gfx11-generic, gfx1100, gfx90a:xnack-.
    const BUNDLE: &[u8] = include_bytes!("../../fuzz/corpus/bundle/plain");

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("offload-slim-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn options() -> Options {
        Options {
            devices: vec![DeviceTarget::parse("gfx1100").unwrap()],
            keep_portable: false,
            limits: Limits::default(),
        }
    }

    /// What is in `dir`, by name.
    fn listing(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// A file that lies inside another (a tar member, 41 blocks in) is
    /// slimmed as that file alone would be, into a file of its own; in
    /// place it is refused, and the file holding it is left as it was.
    #[test]
    fn a_part_of_a_file_is_slimmed_as_the_file_alone() {
        let dir = scratch("part");
        let alone = dir.join("alone.bundle");
        fs::write(&alone, BUNDLE).unwrap();
        let mut holder = vec![0x55u8; 41 * 512];
        holder.extend(BUNDLE);
        holder.extend([0u8; 1000]);
        let tar = dir.join("layer.tar");
        fs::write(&tar, &holder).unwrap();
        let part = Some((41 * 512, BUNDLE.len() as u64));
        let (a, b) = (dir.join("a.out"), dir.join("b.out"));
        let from_alone = slim_file(&alone, &options(), &Destination::To(a.clone()));
        let from_part = slim_part(&tar, part, &options(), &Destination::To(b.clone()));
        assert!(
            from_part.written && from_part.error.is_none(),
            "{from_part:?}"
        );
        assert_eq!(fs::read(&a).unwrap(), fs::read(&b).unwrap());
        assert!(fs::read(&b).unwrap().len() < BUNDLE.len());
        assert_eq!(
            (
                from_part.before,
                from_part.after,
                from_part.containers.len()
            ),
            (
                from_alone.before,
                from_alone.after,
                from_alone.containers.len()
            )
        );
        let in_place = Destination::InPlace {
            also: Vec::new(),
            remove_other_gpus: false,
        };
        let refused = slim_part(&tar, part, &options(), &in_place);
        assert!(refused
            .error
            .is_some_and(|e| e.contains("not slimmed in place")));
        assert_eq!(fs::read(&tar).unwrap(), holder);
        let _ = fs::remove_dir_all(&dir);
    }

    /// A linked program: ld.bfd's PIE with three bundles in `.hip_fatbin`
    /// (the fuzz seed; its first byte is the fuzzer's mask).
    const PROGRAM: &[u8] = include_bytes!("../../fuzz/corpus/slim_elf/x86_64-seed-pie");

    /// A compacted program that would load differently outside its GPU code
    /// is refused by the comparison with the original: a byte of code, a
    /// pointer's relocation, the entry point, a segment's permissions, a
    /// symbol, a program header; the right result passes.
    #[test]
    fn a_program_that_would_load_differently_is_not_written() {
        use object::read::elf::{FileHeader, ProgramHeader, SectionHeader};
        let dir = scratch("verify-elf");
        let path = dir.join("app");
        fs::write(&path, &PROGRAM[1..]).unwrap();
        let options = options();
        let out = dir.join("out");
        let right = out.join("right");
        let report = slim_file(&path, &options, &Destination::To(right.clone()));
        assert!(report.written, "{:?}", report.error);
        assert!(report.after + 4096 <= report.before, "not compacted");

        let result = fs::read(&right).unwrap();
        let header = object::elf::FileHeader64::<object::LittleEndian>::parse(&*result).unwrap();
        let e = object::LittleEndian;
        let shdrs = header.section_headers(e, &*result).unwrap();
        let strings = header.section_strings(e, &*result, shdrs).unwrap();
        let section = |name: &str| {
            shdrs
                .iter()
                .find(|s| s.name(e, strings).unwrap() == name.as_bytes())
                .unwrap()
        };
        let phdrs = header.program_headers(e, &*result).unwrap();
        let mut cases: Vec<(Vec<u8>, &str)> = Vec::new();
        let with = |at: u64, bytes: &[u8]| {
            let mut v = result.clone();
            v[at as usize..at as usize + bytes.len()].copy_from_slice(bytes);
            v
        };
        // One byte of code.
        let text = section(".text").sh_offset(e);
        cases.push((
            with(text + 3, &[result[text as usize + 3] ^ 0x40]),
            "differs",
        ));
        // The wrapper's relocation points 8 bytes further.
        let rela = section(".rela.dyn");
        let relas: &[object::elf::Rela64<object::LittleEndian>] =
            rela.data_as_array(e, &*result).unwrap();
        let wrapper = section(".hipFatBinSegment").sh_addr(e) + 8;
        let i = relas
            .iter()
            .position(|r| r.r_offset.get(e) == wrapper)
            .unwrap();
        let at = rela.sh_offset(e) + i as u64 * 24 + 16;
        let addend = relas[i].r_addend.get(e) as u64 + 8;
        cases.push((with(at, &addend.to_le_bytes()), "relocation"));
        // The entry point.
        let entry = header.e_entry(e) + 4;
        cases.push((with(0x18, &entry.to_le_bytes()), "entry point"));
        // The code segment made writable.
        let code = phdrs
            .iter()
            .position(|p| p.p_flags(e) & object::elf::PF_X != 0)
            .unwrap() as u64;
        let flags = object::elf::PF_R | object::elf::PF_W | object::elf::PF_X;
        cases.push((
            with(header.e_phoff(e) + code * 56 + 4, &flags.to_le_bytes()),
            "permissions",
        ));
        // A symbol's value.
        let symtab = section(".dynsym");
        let value_at = symtab.sh_offset(e) + 24 + 8;
        let value = u64::from_le_bytes(result[value_at as usize..][..8].try_into().unwrap());
        cases.push((with(value_at, &(value + 1).to_le_bytes()), "symbol"));
        // Where the unwinder finds its table.
        let eh = phdrs
            .iter()
            .position(|p| p.p_type(e) == object::elf::PT_GNU_EH_FRAME)
            .unwrap() as u64;
        let vaddr = phdrs[eh as usize].p_vaddr(e) + 4;
        cases.push((
            with(header.e_phoff(e) + eh * 56 + 16, &vaddr.to_le_bytes()),
            "program header",
        ));

        let file = MappedFile::open(&path).unwrap();
        let sections = file.containers(&options.limits).unwrap();
        let plan = choose(file.bytes(), &sections, &options);
        let expected = Expected {
            sections: &sections,
            chosen: &plan.chosen,
            containers: &report.containers,
        };
        let input = Input::open(&path, None).unwrap();
        let guard = guard::register(input.map().bytes());
        let source = Source {
            input: &input,
            guard: &guard,
        };
        let attempt = |bytes: &[u8]| {
            let target = out.join("wrong");
            write_verified(
                Some(&target),
                &source,
                &crate::Output::whole(bytes),
                None,
                &expected,
                &options,
                &Destination::To(target.clone()),
            )
        };
        for (bytes, why) in cases {
            let Err(Failure::Refused(err)) = attempt(&bytes) else {
                panic!("not refused: {why}");
            };
            assert!(
                err.contains("does not load as the original") && err.contains(why),
                "{why}: {err}"
            );
            assert_eq!(listing(&out), ["right"]);
        }
        assert!(attempt(&result).is_ok());
        let _ = fs::remove_dir_all(&dir);
    }

    /// A result in which the device would load other bytes, or nothing, is
    /// refused by the read-back: nothing is written and no temporary file
    /// is left; the right result is written.
    #[test]
    fn a_result_that_loads_differently_is_not_written() {
        let dir = scratch("verify");
        let path = dir.join("app.bundle");
        fs::write(&path, BUNDLE).unwrap();
        let options = options();
        let out = dir.join("out");
        let right = out.join("right.bundle");
        let report = slim_file(&path, &options, &Destination::To(right.clone()));
        assert!(report.written, "{:?}", report.error);
        assert!(report.after < report.before);

        let file = MappedFile::open(&path).unwrap();
        let sections = file.containers(&options.limits).unwrap();
        let plan = choose(file.bytes(), &sections, &options);
        let expected = Expected {
            sections: &sections,
            chosen: &plan.chosen,
            containers: &report.containers,
        };
        let result = fs::read(&right).unwrap();
        let read = Bundle::parse(&result, &options.limits).unwrap();
        let code = read
            .entries()
            .iter()
            .find(|e| e.id.ends_with("--gfx1100"))
            .unwrap();
        // One byte of the selected code object changed.
        let mut changed = result.clone();
        changed[code.offset as usize + 200] ^= 1;
        let original = Bundle::parse(BUNDLE, &options.limits).unwrap();
        let without = |gone: &str| {
            bundle::write::keep(&original, |i| !original.entries()[i].id.contains(gone)).unwrap()
        };
        let cases = [
            (changed, "gfx1100 in the result is not the original's bytes"),
            // The selected image dropped (gfx1100 then takes gfx11-generic).
            (without("--gfx1100"), "holds 3 images, 2 were to stay"),
            // One more image than the report keeps: the device selects as
            // before, but the result is not what was promised.
            (without("gfx11-"), "holds 3 images, 2 were to stay"),
            // No image for the device at all.
            (
                without("gfx11"),
                "gfx90a:xnack- where hipv4-amdgcn-amd-amdhsa--gfx1100 was to stay",
            ),
        ];
        let input = Input::open(&path, None).unwrap();
        let guard = guard::register(input.map().bytes());
        let source = Source {
            input: &input,
            guard: &guard,
        };
        for (bytes, why) in cases {
            let target = out.join("wrong.bundle");
            // Written, or a dry run (verified in a scratch file): refused
            // alike.
            for (to, destination) in [
                (Some(target.as_path()), Destination::To(target.clone())),
                (None, Destination::DryRun),
            ] {
                let Err(Failure::Refused(err)) = write_verified(
                    to,
                    &source,
                    &crate::Output::whole(&bytes),
                    None,
                    &expected,
                    &options,
                    &destination,
                ) else {
                    panic!("not refused: {why}");
                };
                assert!(
                    err.contains("verification failed") && err.contains(why),
                    "{err}"
                );
                assert_eq!(listing(&out), ["right.bundle"]);
            }
        }
        // A device that selects another of the kept images than it did.
        let result = MappedFile::open(&right).unwrap();
        let after = result.containers(&options.limits).unwrap();
        let (pairs, _) = same_kept(&sections, &report.containers, &after, &options.limits).unwrap();
        assert!(same_selections(&plan.chosen, &pairs, &after, &options.devices).is_ok());
        let mut wrong = pairs.clone();
        for v in wrong.values_mut() {
            v.1 = 0;
        }
        let err = same_selections(&plan.chosen, &wrong, &after, &options.devices).unwrap_err();
        assert!(
            err.contains("not the image it loads from the original"),
            "{err}"
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
