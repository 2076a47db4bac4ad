//! `--extract DIR`: the image each device would load (with `--all`, every
//! image) written into DIR, named and shaped as the vendors' own tools write
//! it.
//!
//! - **NVIDIA fat-binary entries**, as `cuobjdump -xelf all` / `-xptx all`
//!   (CUDA 13.4) write them: `<stem>.<n>.<arch>.cubin` and
//!   `<stem>.<n>.<arch>.ptx`. `<stem>` is the file's name less its last
//!   extension (everything from its last `.`; an archive's name for its
//!   members; spaces as `-`): `libcurand.so.10` → `libcurand.so`. `n`
//!   counts cubins and PTX apart, from 1, through every fat binary cuobjdump
//!   reads (`.nv_fatbin`, the `__nv_relfatbin` of an object or archive, a
//!   `.fatbin` file), in file order. `arch` is `sm_80`, `sm_90a`, and family
//!   code (`sm_100f`) by its plain arch. An entry with an identifier
//!   (`nvcc -Xfatbin=--ident=foo.cu`) is `<identifier stem>.<arch>.<ext>`
//!   (`foo.sm_80.cubin`), and still counts. A cubin file is
//!   `<stem>.<arch>.cubin`; a PTX file (cuobjdump extracts nothing from one)
//!   `<stem>.<arch>.ptx` likewise. Cubins are byte for byte what cuobjdump
//!   writes; PTX is the text without the NUL (and padding) the fat binary
//!   keeps for the driver, as cuobjdump writes it. Entries that are neither
//!   (cuFFT's kind-8 entries) are not written: cuobjdump extracts none.
//! - **Clang offload bundles**, plain or compressed, as `llvm-objdump
//!   --offloading` (LLVM 22; ROCm 6.4 deprecated `roc-obj-ls`,
//!   `roc-obj-extract` and `roc-obj` for it) writes them:
//!   `<file>.<n>.<bundle entry id>`, `n` counting the bundles of the file (of
//!   each archive member, then named by the member) from 0 in file order:
//!   `librocsparse.so.0.1.0.hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-`. A
//!   bundle file on its own (rocBLAS's Tensile `.co` / `.hsaco`) is bundle 0.
//!   Empty host entries are not written. (LLVM 22's llvm-objdump writes a
//!   compressed bundle's entries as ranges of the compressed bytes, fixed
//!   upstream in llvm/llvm-project#192729; these are the code objects, as
//!   `clang-offload-bundler -unbundle` writes them.)
//! - **A fat binary or bundle kept among host data** (`.rodata`, `.data`,
//!   cuFFT's `.ldata`; a linked file's `__nv_relfatbin`), which those tools
//!   do not read in the file, is named as they name its entries once it is
//!   cut out to a file of its own named as ROCm's `roc-obj-extract` names a
//!   range of a file, `<file>-offset<N>-size<M>` (decimal; the container's
//!   place in the file): `<file>-offset<N>-size<M>.<n>.<arch>.cubin` (what
//!   cuobjdump names them in `<file>-offset<N>-size<M>.fatbin`; numbered even
//!   where an entry has an identifier, so that each fat binary's files stay
//!   apart) and `<file>-offset<N>-size<M>.0.<bundle entry id>`.
//! - **Every other image** (LLVM offload binaries, OpenMP descriptors,
//!   object-file bundles, text bundles, a code object file on its own), which
//!   no tool extracts under a name of its own (`llvm-offload-binary` writes
//!   only to names it is given), as `roc-obj-extract` names the image's
//!   code-object URI (the report's `uri`, `file://<path>#offset=N&size=M`):
//!   `<file>-offset<N>-size<M>.co`, with `.cubin`, `.ptx` or `.fatbin` for
//!   NVIDIA code.
//!
//! `<file>` is the file's name without its directory. A `/` in a name taken
//! from the file (a bundle entry ID, a member name) is written `_`. DIR is
//! flat: files of the same name in different directories write the same
//! names, the last one written staying (as cuobjdump's own duplicates do).

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use offload_loader::discover::{SectionRole, NV_RELFATBIN};
use offload_loader::target::{Arch, ArchVariant};
use offload_loader::{
    CodeKind, Container, Format, Image, ImageSource, Limits, MappedFile, Scope, Selection,
};

use crate::image::{renamed, Part};
use crate::report::DeviceRow;

/// `--extract DIR` (`--all`) for a whole run: what it writes, and how much.
pub struct Extract<'a> {
    dir: &'a Path,
    all: bool,
    /// Files written.
    written: AtomicUsize,
    /// Images there were to write (not counting bundles' empty host entries).
    images: AtomicUsize,
}

impl<'a> Extract<'a> {
    pub fn new(dir: &'a Path, all: bool) -> Extract<'a> {
        Extract {
            dir,
            all,
            written: AtomicUsize::new(0),
            images: AtomicUsize::new(0),
        }
    }

    /// Writes the images of `scope` chosen in `selections` (all of them with
    /// `--all`), named by `names`; returns what failed.
    pub fn scope(
        &self,
        names: &FileNames<'_>,
        scope: &Scope<'_, '_>,
        selections: &[Selection],
    ) -> Vec<String> {
        let mut wanted: Vec<usize> = if self.all {
            (0..scope.images().len()).collect()
        } else {
            selections.iter().filter_map(|s| s.chosen).collect()
        };
        wanted.retain(|&i| writable(scope, i));
        wanted.sort_unstable();
        wanted.dedup();
        let images = (0..scope.images().len())
            .filter(|&i| writable(scope, i))
            .count();
        self.images.fetch_add(images, Ordering::Relaxed);
        if wanted.is_empty() {
            return Vec::new();
        }
        let names = match names.get() {
            Ok(n) => n,
            Err(e) => return vec![e.clone()],
        };
        if let Err(e) = std::fs::create_dir_all(self.dir) {
            return vec![format!("{}: {e}", self.dir.display())];
        }
        let mut errors = Vec::new();
        for (container, local) in wanted.into_iter().filter_map(|i| scope.locate(i)) {
            match self.write(names, container, local) {
                Ok(()) => {
                    self.written.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => errors.push(e),
            }
        }
        errors
    }

    /// Writes image `local` of `container` under its name.
    fn write(&self, names: &Names, container: &Container<'_>, local: usize) -> Result<(), String> {
        let (name, cuobjdump) = names.name(container, local);
        let bytes = container
            .take_image(local)
            .map_err(|e| format!("{}: {name}: {e}", names.path))?;
        let bytes: &[u8] = if cuobjdump && container.images()[local].code() == CodeKind::Ptx {
            // PTX text as `cuobjdump -xptx` writes it: no NUL, no padding.
            let end = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
            &bytes[..end]
        } else {
            &bytes
        };
        let path = self.dir.join(&name);
        std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Why nothing was written, when nothing was and no error says why:
    /// the files hold no GPU image, or none was selected (no device, or
    /// none of them has an image here).
    pub fn nothing_written(&self, devices: &[DeviceRow]) -> Option<String> {
        if self.written.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let why = if self.images.load(Ordering::Relaxed) == 0 {
            "no GPU image was found in the files".to_string()
        } else if devices.is_empty() {
            "no GPU was detected here and no --device was given, so no image is selected; \
             name the GPU with --device (e.g. --device gfx90a, --device sm_90), \
             or write every image with --all"
                .to_string()
        } else {
            // Each device as it was named (`gfx90a`, not its four settings).
            let mut ids: Vec<&str> = Vec::new();
            for d in devices {
                let id = d.setting_of.as_deref().unwrap_or(&d.target_id);
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
            format!(
                "no image is selected for {} (the report says why); --all writes every image",
                ids.join(", ")
            )
        };
        Some(format!(
            "--extract {}: nothing written: {why}",
            self.dir.display()
        ))
    }
}

/// Whether image `i` of `scope` is code to write: not a bundle's empty host
/// entry, nor a fat-binary entry that is neither a cubin nor PTX (cuFFT's
/// kind-8 entries, which cuobjdump does not extract either).
fn writable(scope: &Scope<'_, '_>, i: usize) -> bool {
    let Some((c, local)) = scope.locate(i) else {
        return false;
    };
    let image = &c.images()[local];
    image.size > 0 && (c.format() != Format::NvFatbin || nv_kind(image) < 2)
}

/// The names of one file's images, worked out from the whole file at its
/// first scope with something to write (numbers run through the file).
pub struct FileNames<'p> {
    path: &'p Path,
    /// Where its bytes lie, when inside another file.
    part: Option<Part<'p>>,
    limits: &'p Limits,
    names: OnceLock<Result<Names, String>>,
}

impl<'p> FileNames<'p> {
    pub fn new(path: &'p Path, part: Option<Part<'p>>, limits: &'p Limits) -> FileNames<'p> {
        FileNames {
            path,
            part,
            limits,
            names: OnceLock::new(),
        }
    }

    fn get(&self) -> Result<&Names, &String> {
        self.names
            .get_or_init(|| Names::of(self.path, self.part, self.limits))
            .as_ref()
    }
}

/// How each container of a file names its images, by (offset, format).
struct Names {
    /// The path, for messages, and the file's name.
    path: String,
    file: String,
    containers: HashMap<(u64, Format), Naming>,
}

enum Naming {
    /// cuobjdump's: `<stem>.<n>.<arch>.<ext>`, `n` counted on from these
    /// (cubin, PTX, other), or `<identifier>.<arch>.<ext>` for an image with
    /// an identifier in `ids`; `None` for a cubin or PTX file, `<stem>.<arch>.<ext>`.
    Cuobjdump {
        stem: String,
        first: Option<[usize; 3]>,
        ids: Vec<Option<String>>,
    },
    /// llvm-objdump `--offloading`'s: `<file>.<n>.<bundle entry id>`.
    Objdump { file: String, n: usize },
    /// roc-obj-extract's, of the image's URI: `<file>-offset<N>-size<M>.<ext>`.
    Range { file: String },
}

impl Names {
    fn of(path: &Path, part: Option<Part<'_>>, limits: &Limits) -> Result<Names, String> {
        let file = match part {
            Some(part) => part.open(path),
            None => MappedFile::open(path),
        }
        .map_err(|e| e.to_string())?;
        let sections = file
            .containers(limits)
            .map_err(|e| renamed(e, path).to_string())?;
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let stem = cuobjdump_stem(&name);
        // An ELF relocatable object (e_type 1), or an archive of them.
        let bytes = file.bytes();
        let relocatable = (bytes.starts_with(b"\x7fELF") && bytes.get(16) == Some(&1))
            || bytes.starts_with(b"!<arch>");
        let mut next = [1; 3];
        let mut bundles: HashMap<Option<&str>, usize> = HashMap::new();
        let mut containers = HashMap::new();
        for found in &sections {
            let section = &found.section;
            // What cuobjdump and llvm-objdump read: not host data, and
            // `__nv_relfatbin` in relocatable files only.
            let read = section.role != SectionRole::Embedded
                && (section.name != NV_RELFATBIN || relocatable);
            for c in found.containers.iter().flatten() {
                let cut = || format!("{name}-offset{}-size{}", c.offset(), c.len());
                let naming = match c.format() {
                    Format::NvFatbin if read => {
                        let first = next;
                        for image in c.images() {
                            next[nv_kind(image)] += 1;
                        }
                        Naming::Cuobjdump {
                            stem: stem.clone(),
                            first: Some(first),
                            ids: identifiers(c),
                        }
                    }
                    // Numbered even where entries carry an identifier (as
                    // cuBLAS's and cuRAND's `lto` entries among data do), so
                    // that each fat binary's files stay apart.
                    Format::NvFatbin => Naming::Cuobjdump {
                        stem: cut(),
                        first: Some([1; 3]),
                        ids: Vec::new(),
                    },
                    Format::Bundle | Format::CompressedBundle if read => {
                        let member = section.member.as_deref();
                        let n = bundles.entry(member).or_default();
                        let naming = Naming::Objdump {
                            file: member.map_or_else(|| name.to_string(), str::to_string),
                            n: *n,
                        };
                        *n += 1;
                        naming
                    }
                    Format::Bundle | Format::CompressedBundle => {
                        Naming::Objdump { file: cut(), n: 0 }
                    }
                    Format::Image
                        if c.images()
                            .iter()
                            .all(|i| matches!(i.code(), CodeKind::Cubin | CodeKind::Ptx)) =>
                    {
                        Naming::Cuobjdump {
                            stem: stem.clone(),
                            first: None,
                            ids: Vec::new(),
                        }
                    }
                    _ => Naming::Range {
                        file: name.to_string(),
                    },
                };
                containers.insert((c.offset(), c.format()), naming);
            }
        }
        Ok(Names {
            path: path.display().to_string(),
            file: name.to_string(),
            containers,
        })
    }

    /// The name of image `local` of `c`, and whether it is named (and so
    /// shaped) as cuobjdump writes it.
    fn name(&self, c: &Container<'_>, local: usize) -> (String, bool) {
        let images = c.images();
        let image = &images[local];
        let naming = self.containers.get(&(c.offset(), c.format()));
        let cuobjdump = matches!(naming, Some(Naming::Cuobjdump { .. }));
        let name = match naming {
            Some(Naming::Cuobjdump { stem, first, ids }) => {
                let k = nv_kind(image);
                let ext = ["cubin", "ptx", "bin"][k];
                let arch = cuobjdump_arch(&image.arch);
                match first {
                    _ if ids.get(local).is_some_and(Option::is_some) => {
                        let id = ids[local].as_deref().unwrap_or_default();
                        format!("{id}.{arch}.{ext}")
                    }
                    Some(first) => {
                        let n =
                            first[k] + images[..local].iter().filter(|i| nv_kind(i) == k).count();
                        format!("{stem}.{n}.{arch}.{ext}")
                    }
                    None => format!("{stem}.{arch}.{ext}"),
                }
            }
            Some(Naming::Objdump { file, n }) => format!("{file}.{n}.{}", image.id),
            Some(Naming::Range { file }) => range_name(file, c, image),
            // Not in the file as read a moment ago (it changed): by its range.
            None => range_name(&self.file, c, image),
        };
        (name.replace('/', "_"), cuobjdump)
    }
}

/// roc-obj-extract's name for the image's code-object URI.
fn range_name(file: &str, c: &Container<'_>, image: &Image) -> String {
    let ext = match image.code() {
        CodeKind::Cubin => "cubin",
        CodeKind::Ptx => "ptx",
        CodeKind::NvFatbin => "fatbin",
        _ => "co",
    };
    format!(
        "{file}-offset{}-size{}.{ext}",
        c.offset() + image.offset,
        image.size
    )
}

/// cuobjdump's stem of a name: its last path component less its last
/// extension (everything from the last `.`, even a leading one), spaces as
/// `-` (`a b.cu` → `a-b`, `libcurand.so.10` → `libcurand.so`).
fn cuobjdump_stem(name: &str) -> String {
    let base = name.rsplit('/').next().unwrap_or_default();
    let stem = base.rsplit_once('.').map_or(base, |(stem, _)| stem);
    stem.replace(' ', "-")
}

/// The identifier (`fatbinary --ident`, `nvcc -Xfatbin=--ident=NAME`) of
/// each image of fat binary `c`, as cuobjdump names the image after it:
/// [`cuobjdump_stem`] of it. Empty when no entry has one. Entry header
/// fields at 32 and 36: the name's offset from the entry start and its
/// length. (A `--concat` group's members are read as numbered.)
fn identifiers(c: &Container<'_>) -> Vec<Option<String>> {
    let Some(fatbin) = c.nv_fatbin() else {
        return Vec::new();
    };
    let u32_at = |h: &[u8], at: usize| -> Option<usize> {
        let b = h.get(at..at + 4)?;
        usize::try_from(u32::from_le_bytes(b.try_into().ok()?)).ok()
    };
    let ids: Vec<Option<String>> = (0..fatbin.entries().len())
        .filter(|&i| fatbin.entries()[i].kind != offload_loader::nv_fatbin::kind::CONCAT)
        .map(|i| {
            let header = fatbin.stored(i)?;
            let (at, len) = (u32_at(header, 32)?, u32_at(header, 36)?);
            let name = header.get(at..at.checked_add(len)?)?;
            let name = name.split(|&b| b == 0).next().filter(|n| !n.is_empty())?;
            Some(cuobjdump_stem(&String::from_utf8_lossy(name)))
        })
        .collect();
    if ids.iter().any(Option::is_some) {
        ids
    } else {
        Vec::new()
    }
}

/// Which of cuobjdump's numberings an image counts in: cubin, PTX, other.
fn nv_kind(image: &Image) -> usize {
    match image.declared.unwrap_or_else(|| image.code()) {
        CodeKind::Cubin => 0,
        CodeKind::Ptx => 1,
        _ => 2,
    }
}

/// The arch as cuobjdump's file names spell it: `sm_90a`, family code by
/// its plain arch (`sm_100f` → `sm_100`).
fn cuobjdump_arch(arch: &Arch) -> String {
    match arch {
        Arch::Nvptx(a) if a.variant == ArchVariant::FamilySpecific => a.capability.to_string(),
        other => other.to_string(),
    }
}
