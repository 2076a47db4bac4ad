//! # offload-slim
//!
//! Rewrites a file's offload containers with only the images a caller keeps,
//! and the ELF file around them so that it really shrinks (module `elf`
//! says how, and what makes a layout unsafe to touch). It decides nothing
//! about devices: [`slim`] is handed, for each container, which images to
//! keep (`offload-probe slim` asks `offload-loader`'s selection).
//!
//! Data flows one way: `pieces` (an output as runs of the input and new
//! bytes) → `container` (one container rewritten with the format writers of
//! `offload-loader`) → `elf` (the file compacted around one section) → this
//! file ([`slim`]: which containers, which section, what to report) →
//! `file` ([`slim_file`]: the images each device selects, the result
//! written, read back and verified, renamed into place).

mod archive;
mod container;
mod elf;
mod file;
mod pieces;

use offload_loader::discover::{OffloadSection, SectionRole};
use offload_loader::target::OffloadKind;
use offload_loader::{Container, Format, Limits, SectionContainers};
use rayon::prelude::*;

pub use container::Outcome;
pub use elf::Unsafe;
pub use file::{slim_file, ContainerSummary, Destination, FileReport, Options, Removed};
pub use pieces::{Output, Piece};

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
    /// Sections that could be compacted but wait for the next pass: one
    /// section is compacted per file (or archive member) and pass
    /// ([`slim_file`] runs passes until none waits).
    pub deferred: Vec<String>,
}

/// Slims `data` (a whole file), whose offload sections are `sections`
/// ([`offload_loader::MappedFile::containers`]): `keep` says, for each
/// container, which of its images to keep (by index in
/// [`Container::images`]); `None` leaves the container alone.
///
/// A raw container file is rewritten whole; an ELF file has its offload
/// section compacted (one per pass: the one that frees most, the others are
/// [`Slimmed::deferred`]); an archive has each member compacted so, and its
/// symbol index moved with the members.
pub fn slim<'a>(
    data: &'a [u8],
    sections: &[SectionContainers<'a>],
    keep: &dyn Fn(&SectionContainers<'a>, &Container<'a>) -> Option<Vec<bool>>,
    limits: &Limits,
) -> Slimmed<'a> {
    let mut reports = Vec::new();
    let mut left = Vec::new();
    // Per section: (section index in `sections`, the new section, bytes freed).
    let mut candidates: Vec<(usize, Vec<elf::Placed<'a>>, u64)> = Vec::new();
    for (si, s) in sections.iter().enumerate() {
        if s.section.role != SectionRole::Containers {
            continue;
        }
        let name = section_name(&s.section);
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
        }
        if freed > 0 {
            candidates.push((si, placed, freed));
        }
    }
    candidates.sort_by_key(|c| std::cmp::Reverse(c.2));
    let mut compacted = Vec::new();
    let mut deferred = Vec::new();
    let mut done = Done {
        left: &mut left,
        compacted: &mut compacted,
        deferred: &mut deferred,
    };
    let output = if archive::is_archive(data) {
        archive_output(data, sections, candidates, &mut done)
    } else {
        file_output(data, sections, candidates, &mut done)
    };
    // Containers of a section that was not rewritten are as they were.
    for r in &mut reports {
        let rewritten = matches!(r.outcome, Outcome::Rewritten | Outcome::Removed);
        if rewritten && (output.is_none() || !compacted.contains(&r.section)) {
            r.outcome = Outcome::Whole("its section was not rewritten".into());
            r.after = r.before;
            r.kept.append(&mut r.removed);
            r.kept.sort_unstable();
        }
    }
    Slimmed {
        output,
        containers: reports,
        sections_left: left,
        deferred,
    }
}

/// What became of the candidate sections: left (with why), compacted, or
/// deferred to the next pass.
struct Done<'r> {
    left: &'r mut Vec<(String, String)>,
    compacted: &'r mut Vec<String>,
    deferred: &'r mut Vec<String>,
}

/// A section's name in reports: `member.o(.hip_fatbin)` in an archive.
fn section_name(s: &OffloadSection) -> String {
    match &s.member {
        Some(m) => format!("{m}({})", s.name),
        None => s.name.clone(),
    }
}

/// A file that is not an archive: its one section that frees most compacted.
fn file_output<'a>(
    data: &'a [u8],
    sections: &[SectionContainers<'a>],
    candidates: Vec<(usize, Vec<elf::Placed<'a>>, u64)>,
    done: &mut Done<'_>,
) -> Option<Output<'a>> {
    let mut output = None;
    for (si, placed, _) in candidates {
        let name = section_name(&sections[si].section);
        let s = &sections[si].section;
        if output.is_some() {
            done.deferred.push(name);
            continue;
        }
        match compact(data, s.file_offset, s.size, placed) {
            Ok(Some(out)) => {
                output = Some(out);
                done.compacted.push(name);
            }
            Ok(None) => done.left.push((name, "it frees less than a page".into())),
            Err(e) => done.left.push((name, e.to_string())),
        }
    }
    output
}

/// An archive: in each member, its one section that frees most compacted;
/// the archive written again around the members.
fn archive_output<'a>(
    data: &'a [u8],
    sections: &[SectionContainers<'a>],
    candidates: Vec<(usize, Vec<elf::Placed<'a>>, u64)>,
    done: &mut Done<'_>,
) -> Option<Output<'a>> {
    let members = match archive::members(data) {
        Ok(m) => m,
        Err(e) => {
            for (si, _, _) in candidates {
                done.left
                    .push((section_name(&sections[si].section), e.to_string()));
            }
            return None;
        }
    };
    let mut new = std::collections::BTreeMap::new();
    for (si, placed, _) in candidates {
        let s = &sections[si].section;
        let name = section_name(s);
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
        match compact(bytes, s.file_offset - m.data, s.size, placed) {
            Ok(Some(out)) => {
                new.insert(mi, out);
                done.compacted.push(name);
            }
            Ok(None) => done.left.push((name, "it frees less than a page".into())),
            Err(e) => done.left.push((name, e.to_string())),
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
            None
        }
    }
}

/// `data` (a whole file or an archive member) with its section at `offset`
/// of `size` bytes replaced by `placed`: a raw container file packed, an ELF
/// file compacted around the section.
fn compact<'a>(
    data: &'a [u8],
    offset: u64,
    size: u64,
    placed: Vec<elf::Placed<'a>>,
) -> Result<Option<Output<'a>>, Unsafe> {
    if offset == 0 && size == data.len() as u64 && !data.starts_with(b"\x7fELF") {
        return Ok(Some(raw(placed)));
    }
    elf::compact(data, offset, size, placed)
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
