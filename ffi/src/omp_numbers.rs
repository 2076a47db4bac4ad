//! libomptarget's device numbers across every OpenMP library of the
//! process.
//!
//! libomptarget (LLVM 22 `PluginManager::registerLib`) numbers a device the
//! first time an image of a registered descriptor is compatible with it:
//! descriptors in registration order, the images of each in the order it is
//! handed them, for each image the plugins in build order (amdgpu, then
//! cuda), for each plugin its devices in order. A number, once given, stays
//! for the life of the process (unregistering a descriptor removes no
//! device). So a library's devices are numbered by every library registered
//! before it, and by those registered since.
//!
//! Registration happens in library constructors, where devices may not be
//! detected (detection may `dlopen`): each descriptor's images are kept
//! until devices are known, then folded into the numbers in registration
//! order. A descriptor registered again (a `dlopen`/`dlclose` cycle) with the
//! images of one kept or folded before numbers nothing new, and is not kept
//! again; at most [`MAX_PENDING`] distinct image lists are kept, past which
//! the numbers are not known (and each library is numbered alone). Its lock
//! is only tried, for a while: in a child forked while another thread held
//! it, the numbers are not known either, and nothing waits for ever.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use offload_detect::Device;
use offload_loader::select::check;
use offload_loader::target::Vendor;
use offload_loader::{DeviceTarget, Image, Policy};

use crate::slots::Runtime;

/// The most distinct image lists kept while devices are unknown.
const MAX_PENDING: usize = 256;

/// What is known of the numbering.
struct Numbering {
    /// The image lists registered while devices were unknown, each once, in
    /// registration order.
    pending: Vec<Vec<Image>>,
    /// More than [`MAX_PENDING`] lists were registered while devices were
    /// unknown: the numbers cannot be known.
    overflowed: bool,
    /// The devices numbered, once known (with the number of each).
    devices: Option<Vec<(DeviceTarget, Option<usize>)>>,
    /// The lists folded in since devices were known (to pass over repeats).
    folded: Vec<Vec<Image>>,
    next: usize,
}

static NUMBERING: Mutex<Numbering> = Mutex::new(Numbering {
    pending: Vec::new(),
    overflowed: false,
    devices: None,
    folded: Vec::new(),
    next: 0,
});

/// Set where a registration could not be recorded: the numbers cannot be
/// known.
static LOST: AtomicBool = AtomicBool::new(false);

/// The state, or `None` where its lock stays taken: in a child forked
/// while another thread held it (a thread the child does not have), where
/// waiting would never end. The lock is held for a few microseconds of
/// pure work, so a free one is taken at once.
fn state() -> Option<MutexGuard<'static, Numbering>> {
    for tries in 0..1000u32 {
        match NUMBERING.try_lock() {
            Ok(guard) => return Some(guard),
            Err(TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(TryLockError::WouldBlock) if tries < 100 => std::thread::yield_now(),
            Err(TryLockError::WouldBlock) => {
                std::thread::sleep(std::time::Duration::from_micros(20))
            }
        }
    }
    None
}

/// A descriptor registered with libomptarget, its images in the order it is
/// handed them.
pub(crate) fn registered(images: Vec<Image>) {
    let Some(mut n) = state() else {
        LOST.store(true, Ordering::Relaxed);
        return;
    };
    if n.pending.contains(&images) || n.folded.contains(&images) {
        return;
    }
    if n.devices.is_some() {
        n.fold(&images);
        if n.folded.len() < MAX_PENDING {
            n.folded.push(images);
        }
    } else if n.pending.len() < MAX_PENDING {
        n.pending.push(images);
    } else {
        n.overflowed = true;
    }
}

/// libomptarget's number for each of `devices` now (`None`: none yet, it
/// skips the device); `None` when it cannot be known (too many distinct
/// descriptors before devices were known, a registration not recorded, or
/// other devices than those numbered before).
pub(crate) fn numbers(devices: &[Device]) -> Option<Vec<Option<usize>>> {
    let mut n = state()?;
    if n.overflowed || LOST.load(Ordering::Relaxed) {
        return None;
    }
    if n.devices.is_none() {
        n.devices = Some(devices.iter().map(|d| (d.target, None)).collect());
        for images in std::mem::take(&mut n.pending) {
            n.fold(&images);
            n.folded.push(images);
        }
    }
    let known = n.devices.as_ref()?;
    let same =
        known.len() == devices.len() && known.iter().zip(devices).all(|((t, _), d)| *t == d.target);
    same.then(|| known.iter().map(|(_, number)| *number).collect())
}

impl Numbering {
    /// Numbers the devices `images` make libomptarget number.
    fn fold(&mut self, images: &[Image]) {
        let Some(devices) = self.devices.as_mut() else {
            return;
        };
        number(images, devices, &mut self.next);
    }
}

/// Gives each of `devices` without a number that an image of `images` (in
/// order) is compatible with the next number, as libomptarget does.
pub(crate) fn number<'i>(
    images: impl IntoIterator<Item = &'i Image>,
    devices: &mut [(DeviceTarget, Option<usize>)],
    next: &mut usize,
) {
    let policy = Policy {
        offload_kind: Some(Runtime::OpenMp.offload_kind()),
    };
    for image in images {
        for vendor in [Vendor::Amd, Vendor::Nvidia] {
            for (target, number) in devices.iter_mut() {
                if target.vendor() == vendor
                    && number.is_none()
                    && check(target, image, &policy).is_ok()
                {
                    *number = Some(*next);
                    *next += 1;
                }
            }
        }
    }
}
