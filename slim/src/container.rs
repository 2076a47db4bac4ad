//! One container rewritten with only the images kept, as pieces: a bundle
//! re-laid with the bundler's own alignment (its code objects borrowed from
//! the input), a `CCOB` inflated, re-laid and compressed again with its
//! version and method, an NVIDIA fat binary with the kept entries byte for
//! byte (a `--concat` group written again with its kept members), an offload
//! binary with its kept entries (LLVM's layout, its version kept), or dropped
//! whole when its scope is served by other binaries. What cannot be rewritten
//! is left whole, with the reason.

use offload_loader::bundle::{self, Bundle};
use offload_loader::compressed;
use offload_loader::nv_fatbin;
use offload_loader::offload_binary::{self, OffloadBinary};
use offload_loader::target::OffloadKind;
use offload_loader::{Container, Format, Limits};

use crate::pieces::{Output, Piece};

/// What became of a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every image kept: the same bytes.
    Unchanged,
    /// Rewritten with fewer images.
    Rewritten,
    /// No image of it is kept and it can go entirely (an offload binary,
    /// whose scope has other binaries).
    Removed,
    /// Left as it was, though not every image is needed, and why.
    Whole(String),
}

/// A container's new bytes.
#[derive(Debug)]
pub struct Rewrite<'a> {
    /// What became of it.
    pub outcome: Outcome,
    /// Its bytes (empty when removed).
    pub output: Output<'a>,
    /// How it is written for a section that cannot be compacted: where it
    /// stands, at its old length, or why it cannot be.
    pub in_place: Result<InPlace<'a>, &'static str>,
}

/// A container rewritten without moving its start, at its old length.
#[derive(Debug)]
pub enum InPlace<'a> {
    /// Its new bytes ([`Rewrite::output`]), then zeros, if they fit.
    Padded,
    /// Bytes of its own: a bundle keeps each kept code object where it
    /// was, and only its table is new; `removed` bytes of code are zeros.
    Own { output: Output<'a>, removed: u64 },
}

/// Why an offload binary is not rewritten in place.
const POINTED_INSIDE: &str =
    "the section cannot be compacted, and something outside this container may point inside it";

impl<'a> Rewrite<'a> {
    fn same(bytes: &'a [u8], outcome: Outcome) -> Rewrite<'a> {
        Rewrite {
            outcome,
            output: Output::whole(bytes),
            in_place: Err("it is not rewritten"),
        }
    }

    fn whole(bytes: &'a [u8], why: impl Into<String>) -> Rewrite<'a> {
        Rewrite::same(bytes, Outcome::Whole(why.into()))
    }

    /// Rewritten as `output`; in place, `output` and zeros.
    fn rewritten(output: Output<'a>) -> Rewrite<'a> {
        Rewrite {
            outcome: Outcome::Rewritten,
            output,
            in_place: Ok(InPlace::Padded),
        }
    }
}

/// `container` (whose bytes are `bytes`) with the images `keep` says yes to
/// (by index in [`Container::images`]). A bundle's host entry is kept
/// always. Keeping none is the caller's call: a bundle no device needs is
/// left whole ([`Outcome::Whole`]: HIP fails at start-up either way), an
/// offload binary whose scope is served by others may be
/// [`Outcome::Removed`], and an NVIDIA fat binary becomes an empty one.
pub fn rewrite<'a>(
    container: &Container<'a>,
    bytes: &'a [u8],
    keep: &[bool],
    limits: &Limits,
    removable: bool,
) -> Rewrite<'a> {
    let images = container.images();
    let kept = |i: usize| keep.get(i).copied().unwrap_or(true);
    if (0..images.len()).all(kept) {
        return Rewrite::same(bytes, Outcome::Unchanged);
    }
    let device_kept = images
        .iter()
        .enumerate()
        .any(|(i, image)| kept(i) && image.offload_kind != OffloadKind::Host);
    // An NVIDIA fat binary is a module the library or the CUDA runtime
    // loads when a kernel of it is first needed: one no named device has an
    // image in fails there as it is, and as the empty fat binary it becomes.
    if !device_kept && container.format() != Format::NvFatbin {
        if removable && container.format() == Format::OffloadBinary {
            return Rewrite {
                outcome: Outcome::Removed,
                output: Output::default(),
                in_place: Err(POINTED_INSIDE),
            };
        }
        return Rewrite::whole(bytes, "no named device selects an image from it");
    }
    // Bundle entries to keep: the images kept, and the host entry.
    let entry_kept = |entries: usize| -> Vec<bool> {
        let mut k = vec![true; entries];
        for (i, image) in images.iter().enumerate() {
            if let Some(slot) = k.get_mut(image.index) {
                *slot = kept(i) || image.offload_kind == OffloadKind::Host;
            }
        }
        k
    };
    match container.format() {
        Format::Bundle => {
            let Ok(read) = Bundle::parse(bytes, limits) else {
                return Rewrite::whole(bytes, "its bundle could not be read again");
            };
            let Some(align) = bundle::write::alignment(&read) else {
                return Rewrite::whole(
                    bytes,
                    "its layout is not one clang-offload-bundler writes, so it cannot be rewritten",
                );
            };
            let k = entry_kept(read.entries().len());
            let entries: Vec<_> = read
                .entries()
                .iter()
                .zip(&k)
                .filter(|(_, keep)| **keep)
                .map(|(e, _)| e)
                .collect();
            let ids: Vec<&str> = entries.iter().map(|e| e.id).collect();
            let sizes: Vec<u64> = entries.iter().map(|e| e.size).collect();
            let layout = bundle::write::Layout::new(&ids, &sizes, align);
            let mut output = Output::default();
            output.push(Piece::Owned(layout.header));
            for (entry, offset) in entries.iter().zip(layout.offsets) {
                output.pad_to(offset);
                match read.code_object(entry) {
                    Ok(code) => output.push(Piece::Copy(code)),
                    Err(_) => return Rewrite::whole(bytes, "a code object could not be read"),
                }
            }
            Rewrite {
                outcome: Outcome::Rewritten,
                output,
                in_place: bundle_in_place(&read, bytes, &k),
            }
        }
        Format::CompressedBundle => {
            let Some(ccob) = container.compression() else {
                return Rewrite::whole(bytes, "its compressed header could not be read again");
            };
            let inflated = match ccob.decompress(limits) {
                Ok(b) => b,
                Err(e) => return Rewrite::whole(bytes, format!("it does not inflate: {e}")),
            };
            let Ok(read) = Bundle::parse(&inflated, limits) else {
                return Rewrite::whole(bytes, "its inflated bundle could not be read again");
            };
            let k = entry_kept(read.entries().len());
            let Some(kept_bundle) = bundle::write::keep(&read, |i| k[i]) else {
                return Rewrite::whole(
                    bytes,
                    "its inflated layout is not one clang-offload-bundler writes, so it cannot be rewritten",
                );
            };
            // Version 1 cannot be written: it becomes version 2, which every
            // reader of version 1 (clang 19+, ROCm 6.2+) reads too.
            let version = ccob.version.max(2);
            match compressed::write::compress(&kept_bundle, version, ccob.method, None) {
                Ok(b) => {
                    let mut output = Output::default();
                    output.push(Piece::Owned(b));
                    Rewrite::rewritten(output)
                }
                Err(e) => Rewrite::whole(bytes, format!("compressing it again failed: {e}")),
            }
        }
        Format::NvFatbin => {
            let Some(fatbin) = container.nv_fatbin() else {
                return Rewrite::whole(bytes, "its fat binary could not be read again");
            };
            // Entries that hold no image (kinds not known) stay.
            let entries = fatbin.entries();
            let mut entry_kept = vec![true; entries.len()];
            for i in 0..images.len() {
                let Some(entry) = container.nv_entry(i) else {
                    continue;
                };
                if let Some(at) = entries.iter().position(|e| e == entry) {
                    entry_kept[at] = kept(i);
                }
            }
            match nv_fatbin::write::keep(fatbin, |i| entry_kept[i], limits) {
                Ok(out) => {
                    let mut output = Output::default();
                    output.push(Piece::Owned(out));
                    Rewrite::rewritten(output)
                }
                Err(e) => Rewrite::whole(
                    bytes,
                    format!("a --concat group of it does not inflate: {e}"),
                ),
            }
        }
        Format::OffloadBinary => {
            let read = match OffloadBinary::parse(bytes, limits) {
                Ok(b) => b,
                Err(e) => return Rewrite::whole(bytes, format!("it cannot be read again: {e}")),
            };
            // An image's index is its entry's.
            let entry_kept = |i: usize| {
                images
                    .iter()
                    .enumerate()
                    .any(|(j, im)| im.index == i && kept(j))
            };
            match offload_binary::write::keep(&read, entry_kept) {
                Ok(Some(b)) => {
                    let mut output = Output::default();
                    output.push(Piece::Owned(b));
                    Rewrite {
                        outcome: Outcome::Rewritten,
                        output,
                        in_place: Err(POINTED_INSIDE),
                    }
                }
                Ok(None) => Rewrite::whole(bytes, "no named device selects an image from it"),
                Err(e) => Rewrite::whole(bytes, format!("writing it again failed: {e}")),
            }
        }
        other => Rewrite::whole(bytes, format!("a {} is not rewritten", other.name())),
    }
}

/// The bundle `read` (whose bytes are `bytes`) with the entries `keep` says
/// yes to, its kept code objects where they were: a new table at its start,
/// zeros where the table shrank and where removed code objects were.
fn bundle_in_place<'a>(
    read: &Bundle<'a>,
    bytes: &'a [u8],
    keep: &[bool],
) -> Result<InPlace<'a>, &'static str> {
    let (kept, removed): (Vec<_>, Vec<_>) = read
        .entries()
        .iter()
        .zip(keep)
        .partition(|(_, keep)| **keep);
    let kept: Vec<_> = kept.into_iter().map(|(e, _)| e).collect();
    let ids: Vec<&str> = kept.iter().map(|e| e.id).collect();
    let sizes: Vec<u64> = kept.iter().map(|e| e.size).collect();
    let offsets: Vec<u64> = kept.iter().map(|e| e.offset).collect();
    let mut output = Output::default();
    output.push(Piece::Owned(bundle::write::table(&ids, &sizes, &offsets)));
    let mut code: Vec<_> = kept.iter().filter(|e| e.size > 0).collect();
    code.sort_by_key(|e| e.offset);
    for e in code {
        // The reader refuses overlaps; a shorter table never reaches them.
        if e.offset < output.len() {
            return Err("its code objects overlap its table");
        }
        output.pad_to(e.offset);
        let Ok(object) = read.code_object(e) else {
            return Err("a code object could not be read");
        };
        output.push(Piece::Copy(object));
    }
    if output.len() > bytes.len() as u64 {
        return Err("its code objects lie past its end");
    }
    output.pad_to(bytes.len() as u64);
    Ok(InPlace::Own {
        output,
        removed: removed.iter().map(|(e, _)| e.size).sum(),
    })
}
