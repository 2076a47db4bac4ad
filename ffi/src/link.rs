//! `-rdc` programs, linked at load as libcudart links them.
//!
//! `nvcc -rdc=true` objects are joined by a device-link stub (`nvcc -dlink`,
//! CUDA's crt/link.stub): each object's constructor hands the stub its fat
//! binary (`__cudaRegisterLinkedBinary_*`), and once all have, the stub
//! registers its own fat binary (the objects linked by nvlink for the
//! `-arch` asked) with a version 2 wrapper (`FATBINC_LINK_VERSION`) whose
//! last pointer is `__cudaPrelinkedFatbins`, the objects' fat binaries in a
//! NULL-terminated array. For a device the stub's fat binary has no image
//! for, libcudart links the objects' fat binaries with the driver's own
//! linker (`cuLinkCreate`, `cuLinkAddData` of each as
//! `CU_JIT_INPUT_FATBINARY`, `cuLinkComplete`), which takes from each the
//! code that fits the device (PTX it compiles, or a cubin), and loads the
//! result. This library does the same ([`offload_detect::Device::link`]).
//!
//! Whether a device can be linked for is decided here by the selection the
//! probe makes ([`offload_loader::select()`]) of each object's fat binary:
//! every object must have an image for the device.

use offload_detect::Device;
use offload_loader::select::DeviceTarget;
use offload_loader::target::OffloadKind;
use offload_loader::{select, Container, Content, Image, ImageSource, Limits, Policy, Selection};

use crate::objects::segment_of;
use crate::process::{self, Located};
use crate::slots::Fatbin;

/// The most objects read from a stub's array: nvcc writes one entry per
/// object linked (NCCL 2.32 links 129).
const MAX_OBJECTS: usize = 1 << 16;

/// One object's fat binary, as a device-link stub names it.
pub(crate) struct Linked {
    /// Where the stub's array points.
    address: usize,
    /// From there to the end of its segment; `None` when no loaded segment
    /// holds it.
    bytes: Option<&'static [u8]>,
}

/// The objects' fat binaries of the stub `fatbin` records, if it is one,
/// read from its array (bounded by the array's segment and [`MAX_OBJECTS`]).
/// An array in no loaded segment is as none: the stub's own fat binary
/// then decides alone. The caller keeps the object loaded.
pub(crate) fn inputs(
    fatbin: &Fatbin,
    mut locate: impl FnMut(usize) -> Option<Located>,
) -> Vec<Linked> {
    let mut found = Vec::new();
    if fatbin.linked == 0 {
        return found;
    }
    let Some(array) = segment_of(fatbin.pin, fatbin.linked, &mut locate) else {
        return found;
    };
    let mut at = fatbin.linked;
    while at.checked_add(8).is_some_and(|end| end <= array.end) && found.len() < MAX_OBJECTS {
        // SAFETY: 8 bytes inside a loaded segment of the registering object,
        // which stays loaded while the caller holds it; written by the stub
        // before it registered, never after.
        let word = unsafe { process::memory(at..at + 8) };
        let address = usize::from_le_bytes(word.try_into().unwrap_or_default());
        if address == 0 {
            break;
        }
        let bytes = segment_of(fatbin.pin, address, &mut locate).map(|segment| {
            // SAFETY: as above, a loaded segment of the registering object.
            unsafe { process::memory(address..segment.end) }
        });
        found.push(Linked { address, bytes });
        at += 8;
    }
    found
}

/// One object's images ([`Copied`]), or why its fat binary cannot be read.
pub(crate) type Object = Result<Copied, String>;

/// Images copied out of a library's memory, each with what its header says
/// where that is cheap to read (what the source gave, else its own first
/// bytes): what a report needs once the memory may be gone.
#[derive(Debug, Clone)]
pub(crate) struct Copied(Vec<Image>);

impl Copied {
    /// `source`'s images, copied.
    pub(crate) fn of(source: &impl ImageSource) -> Copied {
        let mut images = source.images().to_vec();
        for (i, image) in images.iter_mut().enumerate() {
            if image.content.is_none() {
                image.content = source.read_content(i);
            }
        }
        Copied(images)
    }
}

impl ImageSource for Copied {
    fn images(&self) -> &[Image] {
        &self.0
    }

    fn read_content(&self, index: usize) -> Option<Content> {
        self.0.get(index)?.content.clone()
    }
}

/// The objects `linked` names, read.
pub(crate) fn objects(linked: &[Linked]) -> Vec<Object> {
    linked
        .iter()
        .enumerate()
        .map(|(i, object)| {
            let container = parse(object).map_err(|e| format!("object {i}: {e}"))?;
            Ok(Copied::of(&container))
        })
        .collect()
}

/// What the driver's linker would take for a device: per object, the image
/// selection chose (`Ok`), or why an object has none (`Err`).
pub(crate) type Plan = Result<Vec<String>, String>;

/// The plan for `target` over `objects`; `None` when there is no object.
pub(crate) fn plan(objects: &[Object], target: &DeviceTarget) -> Option<Plan> {
    if objects.is_empty() {
        return None;
    }
    let policy = Policy {
        offload_kind: Some(OffloadKind::Cuda),
    };
    let taken = objects.iter().enumerate().map(|(i, object)| {
        let object = object.as_ref().map_err(Clone::clone)?;
        let images = object.images();
        let selection = select(target, object, &policy);
        match selection.chosen {
            Some(j) => Ok(format!("object {i} [{j}] {}", describe(&images[j]))),
            None => Err(format!(
                "object {i} has no image for it ({})",
                selection
                    .rejected
                    .iter()
                    .map(|(j, why)| format!("[{j}] {}: {why}", images[*j].id))
                    .collect::<Vec<_>>()
                    .join("; ")
            )),
        }
    });
    Some(taken.collect())
}

/// The plan for each of `devices` whose `selections` chose no image of the
/// stub; `None` for the others, and for all where there is no object.
pub(crate) fn plans(
    objects: &[Object],
    devices: &[Device],
    selections: &[Selection],
) -> Vec<Option<Plan>> {
    devices
        .iter()
        .zip(selections)
        .map(|(d, s)| match s.chosen {
            Some(_) => None,
            None => plan(objects, &d.target),
        })
        .collect()
}

/// Copies of the objects' fat binaries, each exactly as long as its header
/// says, for the driver's linker: the driver never reads the library's
/// memory.
pub(crate) fn copies(linked: &[Linked]) -> Result<Vec<Vec<u8>>, String> {
    linked
        .iter()
        .enumerate()
        .map(|(i, object)| {
            let container = parse(object).map_err(|e| format!("object {i}: {e}"))?;
            let bytes = object.bytes.unwrap_or_default();
            let end = usize::try_from(container.len()).unwrap_or(usize::MAX);
            bytes
                .get(..end)
                .map(<[u8]>::to_vec)
                .ok_or_else(|| format!("object {i}: its fat binary is cut short"))
        })
        .collect()
}

fn parse(object: &Linked) -> Result<Container<'static>, String> {
    let bytes = object.bytes.ok_or_else(|| {
        format!(
            "its fat binary at {:#x} is in no loaded segment",
            object.address
        )
    })?;
    Container::parse(bytes, &Limits::default()).map_err(|e| e.to_string())
}

/// `cuda-nvptx64-nvidia-cuda--sm_80 (PTX)`.
fn describe(image: &Image) -> String {
    let ptx = matches!(image.declared, Some(offload_loader::image::CodeKind::Ptx));
    format!("{}{}", image.id, if ptx { " (PTX)" } else { "" })
}
