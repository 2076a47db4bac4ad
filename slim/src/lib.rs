//! # offload-slim
//!
//! Rewrites a file's offload containers with only the images a caller keeps,
//! and the ELF file around them so that it really shrinks (module `elf`
//! says how, and what makes a layout unsafe to touch). It decides nothing
//! about devices: [`slim`] is handed, for each container, which images to
//! keep (`offload-probe slim` asks `offload-loader`'s selection).
//!
//! Data flows one way: `pieces` (an output as runs of the input and new
//! bytes, written with holes for blocks of zeros) → `container` (one
//! container rewritten with the format writers of `offload-loader`, packed
//! or where it stands) → `elf` (the file compacted around one section) →
//! `claims` (no byte that would change is also another section's or a
//! header table's) → this file ([`slim`]: which containers, which section,
//! compacted or, where that is not safe, rewritten in place with
//! [`Holes`]; what to report) →
//! `file` ([`slim_file`]: the images each device selects, one pass per
//! section, the result written, read back and verified, renamed into
//! place).

mod archive;
mod claims;
mod compare;
mod container;
mod elf;
mod file;
pub mod image;
mod pieces;
mod refs;
mod refusal;
pub mod wheel;

use offload_loader::discover::{OffloadSection, SectionRole};
use offload_loader::target::OffloadKind;
use offload_loader::{Container, Format, Limits, SectionContainers};
use rayon::prelude::*;

use container::InPlace;

pub use container::Outcome;
pub use file::{
    copy_file, install_sigbus_guard, is_temporary, keep_directory, link_name, remove_leftovers,
    slim_file, symlink_name, ContainerSummary, Copied, CopyError, Destination, FileReport,
    GuardError, How, Options, OtherGpus, Removed,
};
pub use image::{slim_image, ImageReport, Reference};
pub use pieces::{Output, Piece};
pub use refusal::Unsafe;
pub use wheel::{slim_wheel, WheelReport};

/// The name a file inside another (a file in an image's layer, an entry of
/// a wheel) is reported under: the holder's name, `!/`, the file's path in
/// it (`oci:DIR:TAG!/usr/lib/libx.so`, `x.whl!/pkg/libx.so`), as the code
/// object URIs of a file inside another are written.
///
/// ```
/// let name = offload_slim::inner_name("oci:img:v1", "usr/lib/libx.so");
/// assert_eq!(name, std::path::Path::new("oci:img:v1!/usr/lib/libx.so"));
/// ```
pub fn inner_name(
    holder: impl std::fmt::Display,
    path: impl std::fmt::Display,
) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("{holder}!/{path}"))
}

/// What became of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerReport {
    /// The section it is in.
    pub section: String,
    /// Its offset in the file.
    pub offset: u64,
    /// Its format.
    pub format: Format,
    /// Bytes before and after.
    pub before: u64,
    /// Bytes after (0 when removed).
    pub after: u64,
    /// The images kept and removed, by index in the container.
    pub kept: Vec<usize>,
    /// The images removed.
    pub removed: Vec<usize>,
    /// What became of it.
    pub outcome: Outcome,
}

/// A file slimmed: its new bytes (`None`: nothing changes) and a report per
/// container, and per section that could not be compacted.
#[derive(Debug)]
pub struct Slimmed<'a> {
    /// The new file, when anything changes.
    pub output: Option<Output<'a>>,
    /// Each container of each offload section.
    pub containers: Vec<ContainerReport>,
    /// Sections left as they were though some of their images could go, and
    /// why (a layout that cannot be compacted safely).
    pub sections_left: Vec<(String, String)>,
    /// Sections that could not be compacted safely, rewritten where they
    /// stand instead: the removed bytes are holes in the file.
    pub holes: Vec<Holes>,
    /// Sections that could be compacted but wait for the next pass: one
    /// section is compacted per file (or archive member) and pass
    /// ([`slim_file`] runs passes until none waits).
    pub deferred: Vec<String>,
}

/// A section that could not be compacted safely ([`Unsafe`]): its containers
/// rewritten where they stand, each followed by zeros up to where it ended.
/// The file keeps its length and every address; the zeros are written as
/// holes, which take no disk blocks. A container that something outside may
/// point into (an offload binary: OpenMP's device-image table points at its
/// images), or whose new bytes would not fit, is left whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holes {
    /// The section.
    pub section: String,
    /// Why it could not be compacted, or (`compacted`) why containers kept
    /// their addresses.
    pub why: String,
    /// Bytes of zeros in place of removed images.
    pub bytes: u64,
    /// The section was compacted around containers kept at their
    /// addresses, the zeros the gaps before them; else it was rewritten
    /// where it stands (the file keeps its length).
    pub compacted: bool,
}

/// How a section's new containers are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Compacted where that is safe (the file shrinks), else rewritten in
    /// place with holes.
    Compact,
    /// Rewritten in place with holes, every section: the fallback when a
    /// compacted result is refused (`why` says by what). Addresses and the
    /// file's length stay; only the removed images' bytes change, to zeros.
    InPlace {
        /// Why the file is not compacted.
        why: &'static str,
    },
}

/// Slims `data` (a whole file), whose offload sections are `sections`
/// ([`offload_loader::MappedFile::containers`]): `keep` says, for each
/// container, which of its images to keep (by index in
/// [`Container::images`]); `None` leaves the container alone.
///
/// A raw container file is rewritten whole; an ELF file has its offload
/// section compacted (one per pass: the one that frees most, the others are
/// [`Slimmed::deferred`]), or, where that is not safe, rewritten in place
/// with holes ([`Holes`]), and in the same pass its sections of containers
/// among host data rewritten in place; an archive has each member
/// compacted so, and its symbol index moved with the members. With
/// [`Layout::InPlace`], every section is rewritten where it stands.
pub fn slim<'a>(
    data: &'a [u8],
    sections: &[SectionContainers<'a>],
    keep: &dyn Fn(&SectionContainers<'a>, &Container<'a>) -> Option<Vec<bool>>,
    limits: &Limits,
    layout: Layout,
) -> Slimmed<'a> {
    let labels = labels(sections);
    let mut reports = Vec::new();
    let mut left = Vec::new();
    let mut candidates: Vec<Candidate<'a>> = Vec::new();
    for (si, s) in sections.iter().enumerate() {
        if !matches!(
            s.section.role,
            SectionRole::Containers | SectionRole::Embedded
        ) {
            continue;
        }
        let name = labels[si].clone();
        if s.containers.iter().any(|c| c.is_err()) {
            left.push((name, "a container in it cannot be read".into()));
            continue;
        }
        // Offload binaries are weighed together: one may go when another
        // keeps an image.
        let masks: Vec<Option<Vec<bool>>> =
            s.containers.iter().flatten().map(|c| keep(s, c)).collect();
        let any_binary_kept = s.containers.iter().flatten().zip(&masks).any(|(c, m)| {
            c.format() == Format::OffloadBinary && m.as_ref().is_none_or(|m| m.iter().any(|&k| k))
        });
        let mut placed = Vec::new();
        let mut in_place = Vec::new();
        let mut freed = 0u64;
        let containers: Vec<&Container<'a>> = s.containers.iter().flatten().collect();
        // Rewritten in parallel (a compressed bundle costs its inflation and
        // compression), collected in order: the same bytes whatever the
        // thread count.
        let rewrites: Vec<(Vec<bool>, container::Rewrite<'a>)> = containers
            .par_iter()
            .zip(masks)
            .map(|(c, mask)| {
                let start = c.offset() as usize;
                let bytes = &data[start..start + c.len() as usize];
                let mask = mask.unwrap_or_else(|| vec![true; c.images().len()]);
                let rewrite = container::rewrite(c, bytes, &mask, limits, any_binary_kept);
                (mask, rewrite)
            })
            .collect();
        for (c, (mask, rewrite)) in containers.into_iter().zip(rewrites) {
            // A bundle's host entry is always kept.
            let (kept, removed): (Vec<usize>, Vec<usize>) = (0..c.images().len()).partition(|&i| {
                mask.get(i).copied().unwrap_or(true)
                    || c.images()[i].offload_kind == OffloadKind::Host
            });
            let after = rewrite.output.len();
            freed += c.len().saturating_sub(after);
            let same = matches!(rewrite.outcome, Outcome::Unchanged | Outcome::Whole(_));
            reports.push(ContainerReport {
                section: name.clone(),
                offset: c.offset(),
                format: c.format(),
                before: c.len(),
                after,
                kept: if same {
                    (0..c.images().len()).collect()
                } else {
                    kept
                },
                removed: if same { Vec::new() } else { removed },
                outcome: rewrite.outcome,
            });
            placed.push(elf::Placed {
                old: c.offset() - s.section.file_offset,
                old_len: c.len(),
                output: rewrite.output,
                same,
            });
            in_place.push(rewrite.in_place);
        }
        if freed > 0 {
            candidates.push(Candidate {
                section: si,
                placed,
                in_place_bytes: in_place,
                freed,
                in_place: match (s.section.role, layout) {
                    (SectionRole::Embedded, _) => Some(AMONG_HOST_DATA),
                    (_, Layout::InPlace { why }) => Some(why),
                    (_, Layout::Compact) => None,
                },
            });
        }
    }
    candidates.sort_by_key(|c| std::cmp::Reverse(c.freed));
    let mut compacted = Vec::new();
    let mut deferred = Vec::new();
    let mut holes = Vec::new();
    let mut kept_whole = Vec::new();
    let mut done = Done {
        left: &mut left,
        compacted: &mut compacted,
        deferred: &mut deferred,
        holes: &mut holes,
        kept_whole: &mut kept_whole,
    };
    let output = if archive::is_archive(data) {
        archive_output(data, sections, &labels, candidates, &mut done)
    } else {
        file_output(data, sections, &labels, candidates, &mut done)
    };
    // Containers of a section that was not rewritten are as they were; so
    // are those a section rewritten in place had to leave whole.
    for r in &mut reports {
        let rewritten = matches!(r.outcome, Outcome::Rewritten | Outcome::Removed);
        let pinned = kept_whole
            .iter()
            .find(|(section, at, _)| *section == r.section && *at == r.offset);
        if rewritten && (output.is_none() || !compacted.contains(&r.section) || pinned.is_some()) {
            r.outcome = Outcome::Whole(
                pinned
                    .map_or("its section was not rewritten", |p| p.2)
                    .into(),
            );
            r.after = r.before;
            r.kept.append(&mut r.removed);
            r.kept.sort_unstable();
        }
    }
    Slimmed {
        output,
        containers: reports,
        sections_left: left,
        holes,
        deferred,
    }
}

/// A section some of whose images go.
struct Candidate<'a> {
    /// Its index in `sections`.
    section: usize,
    /// Its containers, with their new bytes.
    placed: Vec<elf::Placed<'a>>,
    /// Per container: its bytes where it stands, for a section that cannot
    /// be compacted, or why it has none.
    in_place_bytes: Vec<Result<container::InPlace<'a>, &'static str>>,
    /// Bytes its containers shrink by.
    freed: u64,
    /// Why it is only rewritten where it stands, if it is: its containers
    /// lie among host data ([`SectionRole::Embedded`]), whose bytes between
    /// them stay, or the [`Layout`] says so.
    in_place: Option<&'static str>,
}

/// Why a section of containers among host data is rewritten in place.
const AMONG_HOST_DATA: &str = "its containers lie among host data, which stays where it is: they \
                               are rewritten where they stand";

/// What became of the candidate sections: left (with why), compacted (or
/// rewritten with holes), or deferred to the next pass.
struct Done<'r> {
    left: &'r mut Vec<(String, String)>,
    compacted: &'r mut Vec<String>,
    deferred: &'r mut Vec<String>,
    holes: &'r mut Vec<Holes>,
    /// (section, container offset in the file, why) of containers a section
    /// rewritten in place leaves whole.
    kept_whole: &'r mut Vec<(String, u64, &'static str)>,
}

impl Done<'_> {
    /// Records section `name`, at `base` in the file, rewritten where it
    /// stands: `bytes` of zeros, the containers `whole` left whole.
    fn record_holes(
        &mut self,
        name: String,
        base: u64,
        why: String,
        bytes: u64,
        whole: Vec<(u64, &'static str)>,
    ) {
        for (at, reason) in whole {
            self.kept_whole.push((name.clone(), base + at, reason));
        }
        self.holes.push(Holes {
            section: name.clone(),
            why,
            bytes,
            compacted: false,
        });
        self.compacted.push(name);
    }

    /// Records what `compacted` says of section `name`, at `base` in the file.
    fn record<'a>(
        &mut self,
        name: String,
        base: u64,
        compacted: Result<Option<Compacted<'a>>, Unsafe>,
    ) -> Option<Output<'a>> {
        match compacted {
            Ok(Some(Compacted::Packed(out, pinned))) => {
                if let Some(pinned) = pinned {
                    self.holes.push(Holes {
                        section: name.clone(),
                        why: pinned.why,
                        bytes: pinned.gaps,
                        compacted: true,
                    });
                }
                self.compacted.push(name);
                Some(out)
            }
            Ok(Some(Compacted::Holes {
                output,
                why,
                bytes,
                whole,
            })) => {
                self.record_holes(name, base, why, bytes, whole);
                Some(output)
            }
            Ok(None) => {
                self.left.push((name, "it frees less than a page".into()));
                None
            }
            Err(e) => {
                self.left.push((name, e.to_string()));
                None
            }
        }
    }
}

/// Each section's name in reports: `member.o(.hip_fatbin)` in an archive;
/// a name that more than one section has (members of one name) numbered,
/// `member.o(.hip_fatbin) #2`, so that each names one section.
fn labels(sections: &[SectionContainers<'_>]) -> Vec<String> {
    let names: Vec<String> = sections.iter().map(|s| section_name(&s.section)).collect();
    let mut total: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for name in &names {
        *total.entry(name).or_default() += 1;
    }
    let mut seen: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    names
        .iter()
        .map(|name| {
            if total[name.as_str()] < 2 {
                return name.clone();
            }
            let k = seen.entry(name).or_default();
            *k += 1;
            format!("{name} #{k}")
        })
        .collect()
}

/// A section's name: `member.o(.hip_fatbin)` in an archive.
fn section_name(s: &OffloadSection) -> String {
    match &s.member {
        Some(m) => format!("{m}({})", s.name),
        None => s.name.clone(),
    }
}

/// A file that is not an archive: its one section that frees most compacted
/// (the others wait for the next pass), and in the same pass each section
/// whose containers lie among host data rewritten where it stands: its new
/// bytes laid over the output where that copies its old ones
/// ([`Output::overlay`]); where it cannot be, it waits too.
fn file_output<'a>(
    data: &'a [u8],
    sections: &[SectionContainers<'a>],
    labels: &[String],
    candidates: Vec<Candidate<'a>>,
    done: &mut Done<'_>,
) -> Option<Output<'a>> {
    let mut output = None;
    let mut in_place = Vec::new();
    let gpu = gpu_code(sections, 0..data.len() as u64);
    for c in candidates {
        let s = &sections[c.section].section;
        let name = labels[c.section].clone();
        if c.in_place.is_some() {
            let rewritten = rewrite(data, s.file_offset, s.size, c, &gpu);
            in_place.push((name, s.file_offset, rewritten));
        } else if output.is_some() {
            done.deferred.push(name);
        } else {
            let compacted = rewrite(data, s.file_offset, s.size, c, &gpu);
            output = done.record(name, s.file_offset, compacted);
        }
    }
    for (name, base, rewritten) in in_place {
        output = match (output, rewritten) {
            (None, rewritten) => done.record(name, base, rewritten),
            (
                Some(out),
                Ok(Some(Compacted::Holes {
                    output: edits,
                    why,
                    bytes,
                    whole,
                })),
            ) => match out.overlay(data, edits) {
                Ok(out) => {
                    done.record_holes(name, base, why, bytes, whole);
                    Some(out)
                }
                Err(out) => {
                    done.deferred.push(name);
                    Some(out)
                }
            },
            (Some(out), rewritten) => {
                // Not rewritten (refused, or too little to free): recorded
                // as left, with why.
                done.record(name, base, rewritten);
                Some(out)
            }
        };
    }
    output
}

/// An archive: in each member, its one section that frees most compacted;
/// the archive written again around the members.
fn archive_output<'a>(
    data: &'a [u8],
    sections: &[SectionContainers<'a>],
    labels: &[String],
    candidates: Vec<Candidate<'a>>,
    done: &mut Done<'_>,
) -> Option<Output<'a>> {
    let members = match archive::members(data) {
        Ok(m) => m,
        Err(e) => {
            for c in candidates {
                done.left.push((labels[c.section].clone(), e.to_string()));
            }
            return None;
        }
    };
    let mut new = std::collections::BTreeMap::new();
    for c in candidates {
        let s = &sections[c.section].section;
        let name = labels[c.section].clone();
        let Some((mi, m)) = members
            .iter()
            .enumerate()
            .find(|(_, m)| m.data <= s.file_offset && s.file_offset + s.size <= m.data + m.size)
        else {
            done.left.push((name, "it lies in no member".into()));
            continue;
        };
        if new.contains_key(&mi) {
            done.deferred.push(name);
            continue;
        }
        let bytes = &data[m.data as usize..(m.data + m.size) as usize];
        let gpu = gpu_code(sections, m.data..m.data + m.size);
        let compacted = rewrite(bytes, s.file_offset - m.data, s.size, c, &gpu);
        if let Some(out) = done.record(name, s.file_offset, compacted) {
            new.insert(mi, out);
        }
    }
    if new.is_empty() {
        return None;
    }
    match archive::rewrite(data, &members, new) {
        Ok(out) => Some(out),
        Err(e) => {
            done.left.push(("archive".into(), e.to_string()));
            done.deferred.clear();
            done.holes.clear();
            None
        }
    }
}

/// The ranges `(offset, length)` of the containers read in `sections` that
/// lie in `within` (a whole file, or an archive member), relative to its
/// start, in order: the GPU code a compaction's search for host data words
/// passes over.
fn gpu_code(sections: &[SectionContainers<'_>], within: std::ops::Range<u64>) -> Vec<(u64, u64)> {
    let mut gpu: Vec<(u64, u64)> = sections
        .iter()
        .flat_map(|s| s.containers.iter().flatten())
        .map(|c| (c.offset(), c.len()))
        .filter(|&(o, l)| within.start <= o && o.saturating_add(l) <= within.end)
        .map(|(o, l)| (o - within.start, l))
        .collect();
    gpu.sort_unstable();
    gpu
}

/// A section's new bytes.
enum Compacted<'a> {
    /// The file (or member) with the section packed: shorter; with the
    /// containers kept at their addresses and the gaps before them, if any.
    Packed(Output<'a>, Option<elf::Pinned>),
    /// The section could not be compacted (`why`): its containers rewritten
    /// where they stand, `bytes` of zeros after them; `whole`: the
    /// section-relative offsets of containers left whole, and why.
    Holes {
        output: Output<'a>,
        why: String,
        bytes: u64,
        whole: Vec<(u64, &'static str)>,
    },
}

/// `data` (a whole file or an archive member) with the section of `c` at
/// `offset` rewritten: compacted, or, for containers among host data, where
/// they stand. `gpu`: the ranges of `data` that containers hold, in order
/// ([`gpu_code`]).
fn rewrite<'a>(
    data: &'a [u8],
    offset: u64,
    size: u64,
    c: Candidate<'a>,
    gpu: &[(u64, u64)],
) -> Result<Option<Compacted<'a>>, Unsafe> {
    if data.starts_with(b"\x7fELF") {
        // What changes: the containers among host data, or the whole
        // section (compacted, or its containers rewritten in it).
        let ranges: Vec<(u64, u64)> = if c.in_place == Some(AMONG_HOST_DATA) {
            c.placed
                .iter()
                .filter(|p| !p.same)
                .map(|p| (offset + p.old, p.old_len))
                .collect()
        } else {
            vec![(offset, size)]
        };
        claims::sole_owner(data, &ranges)?;
    }
    if let Some(why) = c.in_place {
        return holes(
            data,
            offset,
            size,
            c.placed,
            c.in_place_bytes,
            Unsafe::new(why),
        );
    }
    compact(data, offset, size, c.placed, c.in_place_bytes, gpu)
}

/// `data` (a whole file or an archive member) with its section at `offset`
/// of `size` bytes replaced by `placed`: a raw container file packed, an ELF
/// file compacted around the section, or, where that is not safe, the
/// section rewritten in place with holes (`in_place`: each container's bytes
/// where it stands).
fn compact<'a>(
    data: &'a [u8],
    offset: u64,
    size: u64,
    placed: Vec<elf::Placed<'a>>,
    in_place: Vec<Result<container::InPlace<'a>, &'static str>>,
    gpu: &[(u64, u64)],
) -> Result<Option<Compacted<'a>>, Unsafe> {
    if offset == 0 && size == data.len() as u64 && !data.starts_with(b"\x7fELF") {
        return Ok(Some(Compacted::Packed(raw(placed), None)));
    }
    let mut placed = placed;
    match elf::compact(data, offset, size, &mut placed, gpu) {
        Ok(packed) => Ok(packed.map(|(out, pinned)| Compacted::Packed(out, pinned))),
        Err(why) if why.in_place => holes(data, offset, size, placed, in_place, why),
        Err(why) => Err(why),
    }
}

/// Section `offset..offset + size` of `data` with each container that
/// changes rewritten where it stands (see [`Holes`]); `why`, the reason it
/// could not be compacted, when that leaves no whole page of zeros.
fn holes<'a>(
    data: &'a [u8],
    offset: u64,
    size: u64,
    placed: Vec<elf::Placed<'a>>,
    in_place: Vec<Result<container::InPlace<'a>, &'static str>>,
    why: Unsafe,
) -> Result<Option<Compacted<'a>>, Unsafe> {
    let (start, end) = (offset as usize, (offset + size) as usize);
    let section = &data[start..end];
    let mut output = Output::default();
    output.push(Piece::Copy(&data[..start]));
    let mut at = 0usize;
    let mut bytes = 0u64;
    let mut whole = Vec::new();
    for (p, in_place) in placed.into_iter().zip(in_place) {
        let (old, old_end) = (p.old as usize, (p.old + p.old_len) as usize);
        output.push(Piece::Copy(&section[at..old]));
        at = old_end;
        // The new bytes and the removed bytes, or why it stays whole (none
        // when it does not change).
        let new = match in_place {
            _ if p.same => Err(None),
            Ok(InPlace::Padded) if p.output.len() <= p.old_len => {
                let zeros = p.old_len - p.output.len();
                let mut new = p.output;
                new.push(Piece::Zeros(zeros));
                Ok((new, zeros))
            }
            Ok(InPlace::Padded) => Err(Some(
                "the section cannot be compacted, and its new bytes do not fit where it was",
            )),
            Ok(InPlace::Own { output, removed }) => Ok((output, removed)),
            Err(reason) => Err(Some(reason)),
        };
        match new {
            Ok((new, removed)) => {
                bytes += removed;
                output.extend(new);
            }
            Err(reason) => {
                if let Some(reason) = reason {
                    whole.push((p.old, reason));
                }
                output.push(Piece::Copy(&section[old..old_end]));
            }
        }
    }
    output.push(Piece::Copy(&section[at..]));
    output.push(Piece::Copy(&data[end..]));
    if output.zero_blocks() == 0 {
        return Err(why);
    }
    Ok(Some(Compacted::Holes {
        output,
        why: why.why,
        bytes,
        whole,
    }))
}

/// A raw container file: its containers packed, each at 8 bytes (the
/// alignment of offload binaries; bundles and fat binaries need none).
fn raw(placed: Vec<elf::Placed<'_>>) -> Output<'_> {
    let mut out = Output::default();
    for p in placed {
        if p.output.is_empty() {
            continue;
        }
        out.pad_to(out.len().next_multiple_of(8));
        out.extend(p.output);
    }
    out
}
