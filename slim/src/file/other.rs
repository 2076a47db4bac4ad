//! Files for other GPUs: a file that is GPU code and nothing else (an AMDGPU
//! code object, a bundle, a `CCOB`, an offload binary, a fat binary, a
//! cubin or PTX on its own, as rocBLAS and hipBLASLt ship their Tensile
//! kernels: one file per GPU) from which no named device selects any image.
//! No device here loads it, so a slimmed tree can do without it.
//!
//! The decision is the code's, never the file's name: each image's target
//! weighed by `offload_loader::select` for each device, as the probe and
//! the runtime weigh it. A file with host code (an executable, a library,
//! an object, an archive), a container that cannot be read, a bundle whose
//! host entry holds anything, or only nvlink's kernel-less stubs, is never
//! one: its host side may be needed whatever the GPUs.
//!
//! rocBLAS's own loader agrees where it matters (rocBLAS 2.47, ROCm 5.5.1,
//! `library/src/tensile_host.cpp` and `rocblas_auxiliary.cpp`, and Tensile's
//! `Source/lib/source/hip/HipSolutionAdapter.cpp`): it builds the names it
//! opens from the device's processor with the features cut off
//! (`gcnArchName` up to the first `:`, so `gfx90a`), globs
//! `library/*gfx90a*co` (which matches `TensileLibrary_gfx90a.co` and both
//! `Kernels.so-000-gfx90a-xnack±.hsaco`) and hands each file to
//! `hipModuleLoadData`, ignoring a failure; it never falls back to another
//! processor's files. So the files it can use for a device are those whose
//! code the HIP runtime accepts for it: the same target-ID rules the
//! selection applies. Where the names and the code disagree, the code
//! decides here: the `xnack+` file rocBLAS opens for an `xnack-` device
//! (and whose load fails there) is for other GPUs; a compatible file under
//! another processor's name (a generic `gfx9-generic` object) is kept,
//! though rocBLAS would not open it. Files without GPU code
//! (`TensileLibrary.dat`, `TensileLibrary_lazy_gfx*.dat`, `.yaml`) are kept
//! whatever their names.

use std::fs;
use std::path::{Path, PathBuf};

use offload_loader::discover::SectionRole;
use offload_loader::target::OffloadKind;
use offload_loader::SectionContainers;

use super::{Plan, Removed};

/// A file of GPU code only for other GPUs, and what became of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtherGpus {
    /// Its images, each with what every device said of it.
    pub images: Vec<Removed>,
    /// Whether it was removed (`--in-place`, asked for).
    pub removed: bool,
}

/// The file of `len` bytes whose offload sections are `sections`, when it
/// is GPU code only and no device selects anything from it (`plan`): its
/// images with the devices' reasons.
pub(super) fn of(len: u64, sections: &[SectionContainers<'_>], plan: &Plan) -> Option<OtherGpus> {
    if !gpu_code_only(len, sections) || !plan.keep.is_empty() {
        return None;
    }
    let images: Vec<Removed> = sections
        .iter()
        .flat_map(|s| s.containers.iter().flatten())
        .flat_map(|c| {
            c.images()
                .iter()
                .enumerate()
                .filter(|(_, image)| image.offload_kind != OffloadKind::Host)
                .map(move |(i, image)| Removed {
                    index: i,
                    id: image.id.clone(),
                    reasons: plan
                        .reasons
                        .get(&(c.offset(), i))
                        .cloned()
                        .unwrap_or_default(),
                })
        })
        .collect();
    (!images.is_empty()).then_some(OtherGpus {
        images,
        removed: false,
    })
}

/// Whether the file of `len` bytes is its offload sections and nothing
/// else: one section that is the whole file (a raw container or one GPU
/// image, not an archive member), every container read, every host entry
/// empty, and some code that is not a kernel-less stub.
fn gpu_code_only(len: u64, sections: &[SectionContainers<'_>]) -> bool {
    let [s] = sections else {
        return false;
    };
    let whole = s.section.member.is_none()
        && s.section.file_offset == 0
        && s.section.size == len
        && matches!(s.section.role, SectionRole::Containers | SectionRole::Image);
    if !whole || s.containers.iter().any(|c| c.is_err()) {
        return false;
    }
    let containers: Vec<_> = s.containers.iter().flatten().collect();
    let host_empty = containers
        .iter()
        .flat_map(|c| c.images())
        .all(|image| image.offload_kind != OffloadKind::Host || image.size == 0);
    let code = containers.iter().any(|c| !c.is_kernel_less());
    host_empty && code
}

/// Removes the file `source` reads (at `path`) and its other names `also`
/// (all its hard links: as for a replacement, one left would keep the
/// bytes): only if it has not changed since it was read.
pub(super) fn remove(
    source: &super::Source<'_>,
    path: &Path,
    also: &[PathBuf],
) -> Result<(), String> {
    source
        .input
        .unchanged(source.guard)
        .map_err(|e| e.to_string())?;
    source
        .input
        .all_links_named(also)
        .map_err(|e| e.to_string())?;
    let path = fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?;
    for name in std::iter::once(&path).chain(also) {
        fs::remove_file(name).map_err(|e| format!("{}: removing it: {e}", name.display()))?;
        // The removal itself reaches the disk before we say it is done.
        if let Ok(d) = fs::File::open(super::dir_of(name)) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}
