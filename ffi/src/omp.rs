//! The OpenMP registration ABI: `__tgt_register_lib` with a `__tgt_bin_desc`
//! (clang's offload wrapper, llvm/lib/Frontend/Offloading/OffloadWrapper.cpp),
//! the obsolete `__tgt_register_requires`, `__tgt_init_all_rtls`, and AOMP's
//! `__tgt_register_image_info` (seed 000).
//!
//! Beside libomptarget ([`crate::vendor`]) each hook passes the call on
//! after its own work. libomptarget gives each device the first compatible
//! image of the descriptor (LLVM 22 `PluginManager::registerLib`), so it is
//! handed a copy whose image table is in [`offload_loader::first_fit_order`],
//! where the first compatible image is the one this library selects; a
//! descriptor whose own order already gives that is handed over as it is.

use std::ffi::{c_void, CStr};

use offload_detect::Vendors;
use offload_loader::container::from_descriptor_image;
use offload_loader::entries::{EntryKind, EntryTable};
use offload_loader::registration::{BinaryDescriptor, DeviceImage, ImageInfo, DEVICE_IMAGE_SIZE};
use offload_loader::target::OffloadKind;
use offload_loader::Image;

use crate::error::RegistrationError;
use crate::library::{Images, Origin, Symbol, SymbolKind};
use crate::omp_numbers;
use crate::process;
use crate::registry;
use crate::slots::Runtime;
use crate::vendor::Next;
use crate::{guard, info, runtime, set_last_error};

/// libomptarget's hooks, where it is in the process after this library.
static REGISTER: Next = Next::new(c"__tgt_register_lib");
static UNREGISTER: Next = Next::new(c"__tgt_unregister_lib");
static REQUIRES: Next = Next::new(c"__tgt_register_requires");
static INIT_ALL: Next = Next::new(c"__tgt_init_all_rtls");

/// Looks libomptarget's hooks up (see [`crate::vendor`]).
pub(crate) fn find_vendor() {
    REGISTER.resolve(__tgt_register_lib as *const () as usize);
    UNREGISTER.resolve(__tgt_unregister_lib as *const () as usize);
    REQUIRES.resolve(__tgt_register_requires as *const () as usize);
    INIT_ALL.resolve(__tgt_init_all_rtls as *const () as usize);
}

/// Most images one descriptor may list.
const MAX_IMAGES: u32 = 4096;

/// The `len` bytes at `addr` of this process, checked to lie in one loaded segment.
fn memory(addr: u64, len: u64, what: &'static str) -> Result<&'static [u8], RegistrationError> {
    let located = usize::try_from(addr).ok().and_then(process::locate).ok_or(
        RegistrationError::NotLoaded {
            what,
            address: addr,
        },
    )?;
    let start = addr as usize;
    if ((located.segment.end - start) as u64) < len {
        return Err(RegistrationError::PastSegment {
            what,
            address: addr,
            len,
        });
    }
    // SAFETY: the range lies inside a loaded segment, which stays mapped while
    // the descriptor is registered.
    Ok(unsafe { process::memory(start..start + len as usize) })
}

/// The address of the NUL-terminated string at `addr`, checked to start in
/// a loaded segment; it stays borrowed, read when needed.
fn c_string_at(addr: u64) -> Option<usize> {
    memory(addr, 1, "string").ok().map(|b| b.as_ptr() as usize)
}

fn c_string(addr: u64) -> Option<String> {
    let at = c_string_at(addr)?;
    // SAFETY: the name pointer of an entry points to a NUL-terminated string in
    // the binary's read-only data (checked to be mapped above).
    Some(
        unsafe { CStr::from_ptr(at as *const std::ffi::c_char) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// Registers the images and host entries of a `__tgt_bin_desc`, then hands
/// the descriptor to libomptarget, its images in this library's order.
#[no_mangle]
pub extern "C" fn __tgt_register_lib(desc: *mut c_void) {
    let handed = guard(desc, || {
        let registered = match register(desc as u64) {
            Ok(registered) => Some(registered),
            Err(e) => {
                info::warn(e.to_string());
                None
            }
        };
        crate::vendors();
        match registered {
            Some(registered) if REGISTER.found() => reordered(desc, &registered),
            _ => desc,
        }
    });
    guard((), || {
        REGISTER.call_ptr(handed);
    })
}

/// What registration read of a descriptor that hand-over needs again.
struct Registered {
    /// The descriptor's 32 bytes.
    descriptor: &'static [u8],
    /// Its `__tgt_device_image` records.
    table: &'static [u8],
    /// The order of its images for libomptarget
    /// ([`offload_loader::first_fit_order`]); `None` for the table's own.
    order: Option<Vec<usize>>,
}

/// The descriptor to hand libomptarget for `desc`: `desc` itself when its
/// images are already in their order, else a copy with its image records
/// in that order (the images and entries they point to are the program's
/// own). The copy is kept until the process ends: libomptarget keeps
/// pointers to the descriptor and its records after unregistration.
fn reordered(desc: *mut c_void, registered: &Registered) -> *mut c_void {
    let Registered {
        descriptor: bytes,
        table,
        order,
    } = registered;
    let Some(order) = order else {
        return desc;
    };
    let copy = (|| {
        let record = |i: usize| -> Option<[u8; DEVICE_IMAGE_SIZE as usize]> {
            let at = i * DEVICE_IMAGE_SIZE as usize;
            table
                .get(at..at + DEVICE_IMAGE_SIZE as usize)?
                .try_into()
                .ok()
        };
        let records: Vec<[u8; DEVICE_IMAGE_SIZE as usize]> =
            order.iter().map(|&i| record(i)).collect::<Option<_>>()?;
        let records: &'static [[u8; DEVICE_IMAGE_SIZE as usize]] = Box::leak(records.into());
        let mut copy: [u8; 32] = (*bytes).try_into().ok()?;
        copy[8..16].copy_from_slice(&(records.as_ptr() as u64).to_ne_bytes());
        Some(Box::leak(Box::new(Descriptor(copy))) as *mut Descriptor as *mut c_void)
    })();
    match copy {
        Some(copy) => {
            registry::with(|r| r.handed.insert(desc as usize, copy as usize));
            copy
        }
        None => desc,
    }
}

/// A `__tgt_bin_desc`'s 32 bytes, aligned as the struct is.
#[repr(C, align(8))]
struct Descriptor([u8; 32]);

/// Registers the descriptor; what hand-over needs of it.
fn register(desc: u64) -> Result<Registered, RegistrationError> {
    let bytes = memory(desc, 32, "__tgt_bin_desc")?;
    let located = process::locate(desc as usize).ok_or(RegistrationError::NotLoaded {
        what: "__tgt_bin_desc",
        address: desc,
    })?;
    // Only for messages, made when registration fails.
    let origin = || {
        // SAFETY: the descriptor's object is loaded (it is registering).
        let path = unsafe { located.object.path() };
        format!("{} descriptor at {desc:#x}", path.display())
    };
    let malformed = |what: String| {
        move |source| RegistrationError::Malformed {
            origin: origin(),
            what,
            source: Box::new(source),
        }
    };
    let descriptor =
        BinaryDescriptor::parse(bytes, MAX_IMAGES).map_err(malformed("__tgt_bin_desc".into()))?;
    let infos = registry::with(|r| std::mem::take(&mut r.image_info));
    let count = u64::from(descriptor.image_count);
    let table = if count == 0 {
        &[][..]
    } else {
        memory(
            descriptor.images,
            count * DEVICE_IMAGE_SIZE,
            "__tgt_device_image array",
        )?
    };
    let mut images = Vec::new();
    let mut code = Vec::new();
    for i in 0..count {
        let at = (i * DEVICE_IMAGE_SIZE) as usize;
        let device_image =
            DeviceImage::parse(&table[at..]).map_err(malformed(format!("image {i}")))?;
        let data = memory(
            device_image.image.start,
            device_image.image.len(),
            "device image",
        )?;
        let aomp = infos
            .iter()
            .find(|(n, _)| *n as u64 == i)
            .map(|(_, a)| a.as_str());
        let image = from_descriptor_image(i as usize, data, aomp);
        // The image's offset and size lie inside `data` by construction.
        let inner = usize::try_from(image.offset)
            .ok()
            .and_then(|at| data.get(at..))
            .and_then(|rest| rest.get(..usize::try_from(image.size).ok()?))
            .unwrap_or_default();
        code.push(inner);
        images.push(image);
    }
    let order = offload_loader::first_fit_order(&images);
    omp_numbers::registered(match &order {
        Some(order) => order.iter().map(|&i| images[i].clone()).collect(),
        None => images.clone(),
    });
    let vendors = images
        .iter()
        .filter_map(|image: &Image| image.triple.gpu_vendor())
        .fold(Vendors::NONE, |set, vendor| set.union(Vendors::of(vendor)));
    runtime::need(vendors);
    let id = registry::register(
        Runtime::OpenMp,
        Origin {
            object: located.object,
            what: "descriptor",
            address: desc as usize,
        },
        Images::Listed { images, code },
    );
    registry::with(|r| r.descriptors.insert(desc as usize, id));
    runtime::registered(id);
    let entries = descriptor.host_entries;
    if !entries.is_empty() {
        let data = memory(entries.start, entries.len(), "host entry table")?;
        let table = EntryTable::parse(data).map_err(malformed("host entries".into()))?;
        for entry in table.iter() {
            let entry = entry.map_err(malformed("host entries".into()))?;
            // llvm_offload_entries is shared by every runtime: as libomptarget
            // does, take only OpenMP's (legacy entries carry no kind).
            if entry.runtime().is_some_and(|r| r != OffloadKind::OpenMp) {
                continue;
            }
            let kind = match EntryKind::of(&entry, &OffloadKind::OpenMp) {
                EntryKind::Kernel => SymbolKind::Kernel,
                EntryKind::Global | EntryKind::Link => SymbolKind::Variable { size: entry.size },
                // Requirements, indirect functions, vtables, ctors/dtors and
                // unknown flags name nothing to resolve.
                _ => continue,
            };
            let Some(name) = c_string_at(entry.name) else {
                set_last_error(format!(
                    "{}: entry at {:#x} has an unreadable name",
                    origin(),
                    entry.offset
                ));
                continue;
            };
            let symbol = Symbol {
                host: entry.address as usize,
                name,
                kind,
            };
            match registry::add_symbol(id, symbol) {
                Ok(()) => runtime::registered(id),
                Err(e) => set_last_error(e.to_string()),
            }
        }
    }
    Ok(Registered {
        descriptor: bytes,
        table,
        order,
    })
}

/// Unregisters a descriptor registered by `__tgt_register_lib`, then hands
/// libomptarget the descriptor it was handed at registration.
#[no_mangle]
pub extern "C" fn __tgt_unregister_lib(desc: *mut c_void) {
    let handed = guard(desc, || {
        let (id, handed) = registry::with(|r| {
            let handed = r.handed.remove(&(desc as usize));
            (r.descriptors.remove(&(desc as usize)), handed)
        });
        match id {
            Some(id) => {
                runtime::unregister(id);
            }
            None => set_last_error(format!("descriptor {desc:p} was not registered")),
        }
        handed.map_or(desc, |h| h as *mut c_void)
    });
    guard((), || {
        UNREGISTER.call_ptr(handed);
    })
}

/// Obsolete since LLVM 18 (requirements travel as `.requires` entries); the
/// flags are recorded for old binaries that still call it.
#[no_mangle]
pub extern "C" fn __tgt_register_requires(flags: i64) {
    guard((), || {
        registry::with(|r| r.requires |= flags);
        tracing::debug!(flags, "__tgt_register_requires");
        crate::vendors();
        REQUIRES.call_i64(flags);
    })
}

/// libomptarget loads its plugins here. This library detects devices at the
/// first query instead: this is called from constructors, where the dynamic
/// loader's lock may be held, and detection waits on threads that `dlopen`
/// the drivers (see `loader_lock`). Beside libomptarget, the call is passed
/// on.
#[no_mangle]
pub extern "C" fn __tgt_init_all_rtls() {
    guard((), || {
        crate::vendors();
        INIT_ALL.call();
    })
}

/// AOMP: names the target of image `image_number` of the next descriptor.
#[no_mangle]
pub extern "C" fn __tgt_register_image_info(info: *mut c_void) {
    guard((), || {
        let parsed = memory(info as u64, 32, "__tgt_image_info").and_then(|b| {
            ImageInfo::parse(b).map_err(|source| RegistrationError::Malformed {
                origin: format!("__tgt_image_info at {:#x}", info as usize),
                what: "image info".into(),
                source: Box::new(source),
            })
        });
        match parsed {
            Ok(i) => match c_string(i.offload_arch) {
                Some(arch) => registry::with(|r| r.image_info.push((i.image_number, arch))),
                None => set_last_error("__tgt_image_info has an unreadable offload_arch"),
            },
            Err(e) => set_last_error(e.to_string()),
        }
    })
}
