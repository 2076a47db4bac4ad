//! Which image a device runs: compatibility by the target-ID rules, best fit
//! among the compatible images, and a reason for every image not chosen.
//!
//! Selection reads images through [`ImageSource`]: the images as their
//! container describes them, and on demand the header of the one image about
//! to be chosen. [`select`] is the one selection function; the probe and the
//! runtime both call it, so they name the same image.

use std::fmt;

use crate::image::{CodeKind, Content, Image};
use crate::target::{
    names, Arch, ArchVariant, ComputeCapability, Feature, FeatureSetting, NvArch, OffloadKind,
    Platform, Processor, PtxVersion, TargetId, TargetIdError, Triple, Vendor,
};

/// What a device can run, as selection needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceTarget {
    /// An AMD GPU: its processor and its xnack/sramecc settings
    /// ([`crate::target::FeatureSetting::Any`] where the source could not tell).
    Amdgpu(TargetId),
    /// An NVIDIA GPU.
    Nvidia {
        /// Its compute capability.
        capability: ComputeCapability,
        /// The newest PTX ISA its driver can JIT, if known.
        max_ptx: Option<PtxVersion>,
    },
}

impl DeviceTarget {
    /// Parses a device as a person writes it, the one spelling `offload-probe
    /// --device`, `OFFLOAD_LOADER_DEVICES` and the library accept alike,
    /// case-insensitively and with a tool's label before it (rocminfo's
    /// `Name:`, `Marketing Name:`) ignored:
    ///
    /// - an AMDGPU target ID whose features are the device's settings
    ///   (`gfx90a:sramecc+:xnack-`, as `offload-arch` prints it; a feature
    ///   left out is unknown), or a legacy alias (`fiji`);
    /// - an NVIDIA device as its architecture, `sm_90`, `sm90`, `90`, or its
    ///   compute capability `9.0` (as `nvidia-smi --query-gpu=compute_cap`
    ///   prints it); `sm_90a` / `sm_100f` name the device of that capability
    ///   (`a` and `f` name code, and every device runs its own arch's code);
    /// - a product name from [`crate::target::Product::amd`] or
    ///   [`crate::target::Product::nvidia`]
    ///   (`MI300X`, `AMD Instinct MI250X`, `H100`, `NVIDIA H100 80GB HBM3`,
    ///   `RTX 4090`): vendor and line words (`AMD`, `Radeon`, `Instinct`,
    ///   `NVIDIA`, `GeForce`, `Tesla`) and board words (`80GB`, `HBM3`,
    ///   `PCIe`, `SXM4`) do not count, nor do case, spaces and dashes.
    ///
    /// The device is its architecture, displayed canonically (`gfx942`,
    /// `sm_90`). Names of code that no one device is are refused with what to
    /// write instead: PTX (`compute_80`) and generic AMDGPU targets
    /// (`gfx11-generic`). A name that is none of these is refused with the
    /// nearest known names; one that names products of different
    /// architectures, with each.
    pub fn parse(s: &str) -> Result<DeviceTarget, TargetIdError> {
        let written = names::strip_label(s);
        if written.is_empty() {
            return Err(TargetIdError::Empty);
        }
        let lower = written.to_lowercase();
        if let Some(capability) = names::nvidia_arch(&lower, written) {
            return capability.map(DeviceTarget::nvidia);
        }
        if names::looks_like_amdgpu_processor(&lower) {
            return DeviceTarget::amdgpu(&lower, written);
        }
        match names::product_target(written)? {
            Some(target) => DeviceTarget::parse(target),
            None => Err(TargetIdError::UnknownDevice {
                name: written.into(),
                suggestions: names::suggestions(written),
            }),
        }
    }

    /// The NVIDIA device of `capability`, its driver's PTX bound unknown.
    fn nvidia(capability: ComputeCapability) -> DeviceTarget {
        DeviceTarget::Nvidia {
            capability,
            max_ptx: None,
        }
    }

    /// The AMD device of target ID `id` (lower-cased; `written` as given,
    /// for errors): a specific processor, not a generic one.
    fn amdgpu(id: &str, written: &str) -> Result<DeviceTarget, TargetIdError> {
        let id = TargetId::parse(id)?;
        if id.processor.is_generic() {
            return Err(TargetIdError::NotADevice {
                name: written.into(),
                hint: "code for a family of processors; write the device's own processor".into(),
            });
        }
        Ok(DeviceTarget::Amdgpu(id))
    }

    /// The devices this one may be: itself where every feature its
    /// processor supports is stated, else one device per setting of the
    /// features left unstated (`gfx90a` is `gfx90a:sramecc+:xnack+`,
    /// `:sramecc+:xnack-`, `:sramecc-:xnack+` and `:sramecc-:xnack-`: an
    /// MI250X runs with xnack off by default and on where the system enables
    /// it, AMDGPUUsage "Target Features"). What a person did not say is
    /// unknown, not "any": code a tool keeps for such a device must be what
    /// each of these would load. An NVIDIA device is itself.
    pub fn settings(&self) -> Vec<DeviceTarget> {
        let DeviceTarget::Amdgpu(id) = self else {
            return vec![*self];
        };
        let mut devices = vec![*id];
        for feature in Feature::ALL {
            if id.processor.supports(feature) && id.setting(feature) == FeatureSetting::Any {
                devices = devices
                    .into_iter()
                    .flat_map(|d| {
                        [FeatureSetting::On, FeatureSetting::Off].map(|s| d.with(feature, s))
                    })
                    .collect();
            }
        }
        devices.into_iter().map(DeviceTarget::Amdgpu).collect()
    }

    /// The device's vendor.
    pub fn vendor(&self) -> Vendor {
        match self {
            DeviceTarget::Amdgpu(_) => Vendor::Amd,
            DeviceTarget::Nvidia { .. } => Vendor::Nvidia,
        }
    }
}

/// The device's target: `gfx90a:sramecc+:xnack-` or `sm_90`.
impl fmt::Display for DeviceTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceTarget::Amdgpu(id) => id.fmt(f),
            DeviceTarget::Nvidia { capability, .. } => capability.fmt(f),
        }
    }
}

/// Which images selection considers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// Only images of this offload kind (the HIP runtime takes `hip`, libomptarget
    /// `openmp`); `None` takes any kind but `host`.
    pub offload_kind: Option<OffloadKind>,
}

/// How well a compatible image fits a device. Compared field by field, in
/// declaration order; greater is better. This is the ranking:
///
/// 1. native code (an AMDGPU code object, a cubin) beats code the driver must
///    JIT-compile (PTX);
/// 2. a specific processor beats its generic family (`gfx1100` over `gfx11-generic`);
/// 3. an image whose feature settings are all known to hold beats one that
///    relies on settings the device did not report (detected through KFD);
/// 4. more features stated and equal to the device's beats "any"
///    (`gfx90a:xnack-` over `gfx90a` on an xnack- device);
/// 5. for NVIDIA, the newest architecture not above the device, arch- and
///    family-specific code over the base arch;
/// 6. on a tie, the earlier image (bundle order, what the HIP runtime would take).
///
/// The HIP runtime and comgr take the first compatible image in bundle order
/// (clr `hip_code_object.cpp`); ranking instead picks the best one whatever the
/// order, and says why the others lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Fit {
    /// Native code rather than PTX.
    pub native: bool,
    /// A specific processor rather than a generic family.
    pub specific: bool,
    /// No feature setting taken on trust.
    pub certain: bool,
    /// Number of features the image states that equal the device's.
    pub exact_features: u8,
    /// NVIDIA only: the image's capability (closer to the device is better).
    pub capability: (u8, u8),
    /// NVIDIA only: 2 arch-specific, 1 family-specific, 0 base.
    pub variant: u8,
}

/// Why an image will not be used on a device: one plain sentence each.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// The bundle's host entry.
    #[error("it is the host entry, which no device runs")]
    HostEntry,
    /// The offload kind is not the one being registered.
    #[error("it is a {image} image and {wanted} images are being registered")]
    OffloadKind {
        /// The image's kind.
        image: OffloadKind,
        /// The kind asked for.
        wanted: OffloadKind,
    },
    /// The triple is not a GPU one.
    #[error("its triple {0} is not a GPU target")]
    NotGpuTriple(Triple),
    /// Built for the other vendor.
    #[error("it is {} code and the device is an {} GPU", .image.brand(), .device.brand())]
    WrongVendor {
        /// The image's vendor.
        image: Vendor,
        /// The device's vendor.
        device: Vendor,
    },
    /// The image names no processor.
    #[error("it names no processor")]
    NoArch,
    /// The processor is not valid.
    #[error("its target {name} is not valid: {error}")]
    UnknownArch {
        /// The name as written.
        name: String,
        /// Why.
        error: crate::target::TargetIdError,
    },
    /// The image's header contradicts its container's claim.
    #[error("its header says it is for {actual}, not {claimed} as its container claims")]
    ClaimMismatch {
        /// What the container says.
        claimed: Box<Arch>,
        /// What the image header says.
        actual: Box<Arch>,
    },
    /// Code that cannot be loaded as is.
    #[error("it holds {0}, which the driver cannot load as is")]
    NotLoadable(&'static str),
    /// An entry of a kind no rule here models: its container declares it
    /// neither PTX nor a cubin (nor any kind read here). cuFFT's fat binaries
    /// hold 93 MB of kind-8 entries, nvJitLink input by all appearances,
    /// which the library links itself. Never chosen; a rewriter keeps it.
    #[error(
        "its container declares a kind of code that is neither PTX nor a cubin, and no rule \
         for loading it is modelled"
    )]
    Unmodelled,
    /// Built for another AMDGPU processor.
    #[error("it is built for {image}, the device is {device}")]
    OtherProcessor {
        /// The image's processor.
        image: &'static str,
        /// The device's processor.
        device: &'static str,
    },
    /// A generic image whose family does not include the device.
    #[error("{generic} code does not run on {device}, which is not in that family")]
    NotInFamily {
        /// The generic processor.
        generic: &'static str,
        /// The device's processor.
        device: &'static str,
    },
    /// A generic image older than the device's membership in the family.
    #[error("its generic version {version} predates {device}, which joined the family at version {joined}")]
    GenericVersionTooOld {
        /// The image's generic version.
        version: u8,
        /// The device's processor.
        device: &'static str,
        /// The version at which it joined.
        joined: u8,
    },
    /// A feature the image sets differently from the device.
    #[error("it needs {feature}{} but the device is {feature}{}", sign(*.image), sign(*.device))]
    Feature {
        /// The feature.
        feature: &'static str,
        /// The image's setting.
        image: FeatureSetting,
        /// The device's setting.
        device: FeatureSetting,
    },
    /// A cubin that does not run natively on the device.
    #[error("{image} code runs only on {}, the device is {device}", native_range(.image))]
    NativeArch {
        /// The cubin's arch.
        image: NvArch,
        /// The device.
        device: ComputeCapability,
    },
    /// PTX for a newer device.
    #[error("PTX for {image} cannot be compiled for {}", ptx_target(.image, .device))]
    PtxArch {
        /// The PTX's target.
        image: NvArch,
        /// The device.
        device: ComputeCapability,
    },
    /// A Tegra device and a cubin built for another GPU.
    #[error("{image} code does not run on {device}: a Tegra GPU runs only cubins built for exactly its own capability (binary compatibility is desktop only)")]
    TegraArch {
        /// The cubin's arch.
        image: NvArch,
        /// The device.
        device: ComputeCapability,
    },
    /// A cubin for a Tegra GPU and a device that is another GPU.
    #[error("{image} code is for the Tegra GPU {} alone and does not run on {device} (binary compatibility between Tegra and desktop GPUs is not supported)", .image.capability)]
    TegraCode {
        /// The cubin's arch.
        image: NvArch,
        /// The device.
        device: ComputeCapability,
    },
    /// A cubin that runs on a later minor of its major on the desktop, and a
    /// device or a cubin whose capability NVIDIA's tables do not class.
    #[error("{image} code is not known to run on {device}: NVIDIA's tables do not say whether {} is a desktop GPU, so only code built for exactly it is taken", .unlisted)]
    UnlistedArch {
        /// The cubin's arch.
        image: NvArch,
        /// The device.
        device: ComputeCapability,
        /// Which of the two the tables do not class.
        unlisted: ComputeCapability,
    },
    /// PTX of an ISA version newer than the driver can JIT.
    #[error("its PTX ISA {ptx} is newer than the driver can compile (up to {max})")]
    PtxTooNew {
        /// The PTX's `.version`.
        ptx: PtxVersion,
        /// The newest the driver takes.
        max: PtxVersion,
    },
    /// Compatible, but another image fits better.
    #[error("it would run, but image {by} fits better ({why})")]
    Outranked {
        /// Index of the chosen image.
        by: usize,
        /// What made the chosen image better.
        why: &'static str,
    },
}

fn sign(s: FeatureSetting) -> &'static str {
    match s {
        FeatureSetting::On => "+",
        FeatureSetting::Off => "-",
        FeatureSetting::Any => " unknown",
    }
}

fn ptx_target(image: &NvArch, device: &ComputeCapability) -> String {
    match image.variant {
        ArchVariant::Base => format!("the older {device}"),
        ArchVariant::ArchSpecific => {
            format!(
                "{device}: arch-specific PTX compiles only for exactly {}",
                image.capability
            )
        }
        ArchVariant::FamilySpecific => format!(
            "{device}: family PTX compiles only for {}",
            native_range(image)
        ),
    }
}

fn native_range(arch: &NvArch) -> String {
    let cc = arch.capability;
    match arch.variant {
        ArchVariant::ArchSpecific => format!("exactly {cc}"),
        ArchVariant::FamilySpecific => {
            let members: Vec<String> = match cc.family() {
                [] => vec![cc.to_string()],
                family => family.iter().map(|sm| format!("sm_{sm}")).collect(),
            };
            format!("its family ({})", members.join(", "))
        }
        _ if cc.platform() != Platform::Desktop || cc.minor == 9 => format!("exactly {cc}"),
        _ => format!("desktop GPUs {cc} to sm_{}9", cc.major),
    }
}

/// The outcome of selecting among a container's images for one device.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selection {
    /// Index of the chosen image, if any image fits.
    pub chosen: Option<usize>,
    /// Every compatible image, best first, with its fit.
    pub compatible: Vec<(usize, Fit)>,
    /// Every image not chosen, with the reason, in image order.
    pub rejected: Vec<(usize, Rejection)>,
    /// Feature settings the chosen image states that the device did not
    /// report (`xnack+` on a device found through KFD): the image is taken,
    /// as the runtimes take it, but its fit is assumed, not known.
    pub assumed: Vec<String>,
    /// What the vendor's own runtime would load, by its rule ([`Vendor`]).
    pub vendor: Option<VendorChoice>,
}

/// The image a vendor runtime would load from the same images, by its own
/// rule rather than best fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VendorChoice {
    /// The runtime whose rule this is.
    pub runtime: VendorRuntime,
    /// The image it takes, if any.
    pub image: Option<usize>,
}

/// The vendor runtimes whose choice selection predicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VendorRuntime {
    /// The HIP runtime (clr) and comgr: the first compatible code object in
    /// bundle order, a specific processor before a generic family (comgr
    /// `amd_comgr_lookup_code_object`, checked against Debian's comgr 5.2,
    /// which takes the first compatible entry; clr `hip_code_object.cpp`,
    /// which looks for the specific ISA before the generic one).
    Hip,
    /// LLVM's libomptarget: the first image of the descriptor whose target
    /// the device's plugin accepts (`omptarget` `registerImage`, in order).
    Libomptarget,
}

impl VendorRuntime {
    /// The runtime's name in reports: `hip`, `libomptarget`.
    pub fn name(self) -> &'static str {
        match self {
            VendorRuntime::Hip => "hip",
            VendorRuntime::Libomptarget => "libomptarget",
        }
    }

    /// Its rule, as one phrase.
    pub fn rule(self) -> &'static str {
        match self {
            VendorRuntime::Hip => {
                "the first compatible code object in bundle order, specific before generic"
            }
            VendorRuntime::Libomptarget => "the first compatible image in descriptor order",
        }
    }

    /// Whether the runtime, given two images a device can run, takes the one
    /// earlier in its table (fits `earlier` and `later`), so that their
    /// order decides. libomptarget does for any two (`omptarget`
    /// `registerImage`, in order). clr does within one tier only: it takes
    /// native code objects before SPIR-V, and a processor's own code before
    /// its generic family's whatever the order (clr `hip_code_object.cpp`
    /// `extractCodeObjectFromFatBinaryUsingComgr`: a specific code object
    /// found later replaces a generic one; clr before generic targets, as
    /// ROCm 5.2's hipamd, matches only the device's own processor).
    pub fn in_table_order(self, earlier: &Fit, later: &Fit) -> bool {
        match self {
            VendorRuntime::Libomptarget => true,
            VendorRuntime::Hip => {
                (earlier.native, earlier.specific) == (later.native, later.specific)
            }
        }
    }

    /// The runtime that loads images of `kind`, if its rule differs from
    /// best fit at all (the CUDA driver picks the best cubin itself).
    fn of(kind: &OffloadKind) -> Option<VendorRuntime> {
        match kind {
            OffloadKind::Hip => Some(VendorRuntime::Hip),
            OffloadKind::OpenMp => Some(VendorRuntime::Libomptarget),
            _ => None,
        }
    }
}

/// Images to select among, and a way to read one image's own header.
///
/// Implemented by [`crate::Container`] (headers read from the container's
/// bytes), by the runtime's registered libraries, and by a plain `[Image]`
/// (which has no bytes: only what the images already record is known).
pub trait ImageSource {
    /// The images, in table order.
    fn images(&self) -> &[Image];

    /// What image `index`'s own first bytes say it is, if they can be read
    /// cheaply: `None` for an image inside a compressed payload, an image whose
    /// bytes are out of reach, or an index out of range.
    fn read_content(&self, index: usize) -> Option<Content>;
}

impl ImageSource for [Image] {
    fn images(&self) -> &[Image] {
        self
    }

    fn read_content(&self, _index: usize) -> Option<Content> {
        None
    }
}

impl ImageSource for Vec<Image> {
    fn images(&self) -> &[Image] {
        self
    }

    fn read_content(&self, _index: usize) -> Option<Content> {
        None
    }
}

/// Selects the image `device` should run among `source`'s images (indices into
/// [`ImageSource::images`]), checking the chosen image against its own header.
///
/// The images are ranked on what their container says; then the header of the
/// best one is read ([`ImageSource::read_content`]): if it contradicts its
/// container's claim (another processor, a feature set the other way, a
/// generic version the device cannot run) the image is rejected with that
/// reason and the next best is taken, and so on. Only headers of images about
/// to be chosen are read, never the others. NVIDIA images whose container does
/// not say cubin or PTX are read first: whether they run natively or need the
/// JIT depends on which.
pub fn select<S: ImageSource + ?Sized>(
    device: &DeviceTarget,
    source: &S,
    policy: &Policy,
) -> Selection {
    let images = source.images();
    let mut read: Vec<Option<Content>> = vec![None; images.len()];
    for (i, image) in images.iter().enumerate() {
        if image.content.is_none()
            && image.declared.is_none()
            && matches!(image.arch, Arch::Nvptx(_))
        {
            read[i] = source.read_content(i);
        }
    }
    let mut tried = vec![false; images.len()];
    loop {
        let selection = rank(device, images, &read, policy);
        match selection.chosen {
            Some(i) if images[i].content.is_none() && !tried[i] => {
                tried[i] = true;
                read[i] = source.read_content(i);
                if read[i].is_none() {
                    return selection;
                }
            }
            _ => return selection,
        }
    }
}

/// The images in an order that needs no device: for every device whose
/// feature settings are known (as a vendor runtime knows them), the first
/// image in this order that [`check`] finds compatible is the one [`select`]
/// chooses. Native code before PTX; a specific processor before its generic
/// family; more stated feature settings before fewer ("any"); the closest
/// architecture first (NVIDIA: the highest capability, then arch- before
/// family-specific before base); ties in table order. Used where a vendor
/// runtime takes the first compatible image of a table it is handed
/// (libomptarget, "the first compatible image in descriptor order").
pub fn preference(images: &[Image]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..images.len()).collect();
    // Stable, best first, as `rank` sorts the compatible ones.
    order.sort_by_key(|&i| std::cmp::Reverse(static_fit(&images[i])));
    order
}

/// A table order in which libomptarget, which takes the first compatible
/// image in descriptor order, takes [`select`]'s choice on every device,
/// moving only GPU images: a host entry stays where it is and the GPU images
/// fill the GPU places in [`preference`] order. `None` when the table's own
/// order already gives that choice ([`first_fit_agrees`]): a caller then
/// hands the original on. A table whose inversions never meet on one device
/// (`gfx908` before `gfx90a:xnack+`, as in clang's bundles) is left alone.
pub fn first_fit_order(images: &[Image]) -> Option<Vec<usize>> {
    order(images, Present::Any, VendorRuntime::Libomptarget)
}

/// [`first_fit_order`] for `runtime`'s rule ([`VendorRuntime::in_table_order`])
/// on the AMD processors `present` only, from what the images record (no
/// header is read): for clr, a generic family before its member is no
/// inversion (clr takes the member's code whatever the order).
pub fn first_fit_order_on(
    images: &[Image],
    present: Present<'_>,
    runtime: VendorRuntime,
) -> Option<Vec<usize>> {
    order(images, present, runtime)
}

/// Whether the headers of `source`'s images `indices` agree with their
/// containers' claims (or cannot be read): then [`named_by_headers`] gives
/// the images as they are, and a caller may keep the order
/// [`first_fit_order_on`] gave for the same IDs.
pub fn headers_agree<S: ImageSource + ?Sized>(source: &S, indices: &[usize]) -> bool {
    indices.iter().all(|&i| {
        let claimed = source.images().get(i).map(|image| &image.arch);
        let read = source.read_content(i).and_then(|c| c.arch);
        match (claimed, read) {
            (Some(claimed), Some(actual)) => !contradicts(claimed, &actual),
            _ => true,
        }
    })
}

/// `source`'s images with the headers of `indices` read, and each of those
/// whose header contradicts its bundle entry ID named by its header: the
/// entry ID's target replaced by the header's (`hipv4-amdgcn-amd-amdhsa--gfx1100`
/// holding gfx1101 code becomes `...--gfx1101`), and its arch with it. A
/// runtime that goes by entry IDs (clr's `extractCodeObjectFromFatBinary`
/// compares them, and looks for the device's own processor before its
/// generic family whatever the table's order) is then never handed such
/// code for the processor its ID claims: no order could keep it from clr.
/// An image whose ID has no target to replace (not in the bundle's
/// `KIND-TRIPLE-TARGET` form) keeps its ID and its contradicting header.
pub fn named_by_headers<S: ImageSource + ?Sized>(source: &S, indices: &[usize]) -> Vec<Image> {
    let mut images = source.images().to_vec();
    for &i in indices {
        let Some(image) = images.get_mut(i) else {
            continue;
        };
        image.content = source.read_content(i);
        let actual = image.content.as_ref().and_then(|c| c.arch.clone());
        if let Some(actual @ Arch::Amdgpu(target)) = actual.filter(|a| contradicts(&image.arch, a))
        {
            // The target follows the triple's empty environment: `TRIPLE--`.
            if let Some(at) = image.id.find("--") {
                image.id = format!("{}{target}", &image.id[..at + 2]);
                image.arch = actual;
            }
        }
    }
    images
}

/// The images whose own header can change what a first-fit runtime is to be
/// handed: those some device would take over another image it can run too
/// (by their IDs), whose header is not read yet. A runtime that compares
/// container IDs only (clr's `extractCodeObjectFromFatBinary` compares
/// bundle entry IDs) would hand such an image to that device even where its
/// header says it is for another processor; read, the header names it
/// ([`named_by_headers`]). Empty for a table whose images never meet on one
/// device, as clang's bundles of distinct processors. An image no other
/// image can replace on any device is not read: without this library or
/// with it, the device has nothing else to run.
pub fn first_fit_contested(images: &[Image], present: Present<'_>) -> Vec<usize> {
    let fits: Vec<Fit> = images.iter().map(static_fit).collect();
    (0..images.len())
        .filter(|&i| {
            images[i].content.is_none()
                && (0..images.len())
                    .any(|j| j != i && fits[i] > fits[j] && meet(&images[i], &images[j], present))
        })
        .collect()
}

fn order(images: &[Image], present: Present<'_>, runtime: VendorRuntime) -> Option<Vec<usize>> {
    if agrees(images, present, runtime) {
        return None;
    }
    let is_gpu = |i: usize| images[i].triple.gpu_vendor().is_some();
    let mut gpu = preference(images).into_iter().filter(|&i| is_gpu(i));
    Some(
        (0..images.len())
            .map(|at| {
                if is_gpu(at) {
                    gpu.next().unwrap_or(at)
                } else {
                    at
                }
            })
            .collect(),
    )
}

/// Whether taking the first compatible image in table order gives
/// [`select`]'s choice on every device whose feature settings are known.
/// It does unless some image comes before one [`preference`] puts first
/// and a device can run both (the first-fit runtime would take the worse):
/// checked pair by pair, on each specific AMD processor the two name or
/// whose generic family one of them names, with every known setting of its
/// features. A pair with NVIDIA code counts as meeting (capabilities are not
/// enumerated here), so such a table is reordered.
pub fn first_fit_agrees(images: &[Image]) -> bool {
    agrees(images, Present::Any, VendorRuntime::Libomptarget)
}

/// [`first_fit_agrees`] on the AMD processors `present` only, for a
/// runtime that takes two images in table order only where
/// [`VendorRuntime::in_table_order`] says so.
fn agrees(images: &[Image], present: Present<'_>, runtime: VendorRuntime) -> bool {
    let fits: Vec<Fit> = images.iter().map(static_fit).collect();
    (0..images.len()).all(|later| {
        (0..later).all(|earlier| {
            fits[later] <= fits[earlier]
                || !runtime.in_table_order(&fits[earlier], &fits[later])
                || !meet(&images[earlier], &images[later], present)
        })
    })
}

/// The AMD processors a first-fit order is decided for.
#[derive(Debug, Clone, Copy)]
pub enum Present<'a> {
    /// Every processor (a device that can be present is not known).
    Any,
    /// Only these: the processors a runtime of this process can find
    /// (`offload_detect::kfd_processors`). NVIDIA devices are not listed:
    /// their images always count as meeting.
    Only(&'a [&'static Processor]),
}

impl Present<'_> {
    fn includes(self, processor: &Processor) -> bool {
        match self {
            Present::Any => true,
            Present::Only(list) => list.iter().any(|p| p.name == processor.name),
        }
    }

    fn any_amd(self) -> bool {
        match self {
            Present::Any => true,
            Present::Only(list) => !list.is_empty(),
        }
    }
}

/// Whether some device with known settings, of a processor `present`, can
/// run both `a` and `b` by their containers' claims (what a first-fit
/// runtime that reads no header goes by).
fn meet(a: &Image, b: &Image, present: Present<'_>) -> bool {
    let claim = |image: &Image| -> Option<Image> {
        image.content.is_some().then(|| Image {
            content: None,
            ..image.clone()
        })
    };
    let (a_claim, b_claim) = (claim(a), claim(b));
    let (a, b) = (a_claim.as_ref().unwrap_or(a), b_claim.as_ref().unwrap_or(b));
    let (x, y) = match (&a.arch, &b.arch) {
        (Arch::Amdgpu(x), Arch::Amdgpu(y)) => (x, y),
        (Arch::Nvptx(_), Arch::Nvptx(_)) => return true,
        // AMD's SPIR-V runs on every AMD GPU.
        (Arch::AmdSpirv, other) | (other, Arch::AmdSpirv) => {
            return other.vendor() == Some(Vendor::Amd) && present.any_amd()
        }
        _ => return false,
    };
    let members = |id: &TargetId| -> Vec<&'static Processor> {
        if id.processor.is_generic() {
            Processor::all()
                .iter()
                .filter(|p| p.generic().is_some_and(|g| g.name == id.processor.name))
                .collect()
        } else {
            vec![id.processor]
        }
    };
    let (xs, ys) = (members(x), members(y));
    let policy = Policy::default();
    xs.into_iter()
        .filter(|p| ys.iter().any(|q| q.name == p.name) && present.includes(p))
        .flat_map(known_settings)
        .any(|device| check(&device, a, &policy).is_ok() && check(&device, b, &policy).is_ok())
}

/// `processor` with each setting a runtime can report for the features it
/// supports (on or off; "any" where it has no such feature).
fn known_settings(processor: &'static Processor) -> impl Iterator<Item = DeviceTarget> {
    DeviceTarget::Amdgpu(TargetId::new(processor))
        .settings()
        .into_iter()
}

/// The [`Fit`] `image` has on any device it is compatible with and whose
/// feature settings are all known: what it is, not where it runs.
fn static_fit(image: &Image) -> Fit {
    // An image whose header contradicts its container's claim is rejected
    // by `check` on every device.
    if image
        .content
        .as_ref()
        .and_then(|c| c.arch.as_ref())
        .is_some_and(|actual| contradicts(&image.arch, actual))
    {
        return NEVER_FIT;
    }
    let code = image.content.as_ref().map(|c| c.code);
    match &image.arch {
        Arch::Amdgpu(id) => Fit {
            native: true,
            specific: !id.processor.is_generic(),
            certain: true,
            exact_features: id.stated_features() as u8,
            capability: (0, 0),
            variant: 0,
        },
        Arch::AmdSpirv => SPIRV_FIT,
        Arch::Nvptx(arch) => Fit {
            native: !(code == Some(CodeKind::Ptx) || image.declared == Some(CodeKind::Ptx)),
            specific: true,
            certain: true,
            exact_features: 0,
            capability: (arch.capability.major, arch.capability.minor),
            variant: match arch.variant {
                ArchVariant::ArchSpecific => 2,
                ArchVariant::FamilySpecific => 1,
                ArchVariant::Base => 0,
            },
        },
        // Never compatible: their place does not matter.
        _ => NEVER_FIT,
    }
}

/// The fit of an image no device runs: last in every order.
const NEVER_FIT: Fit = Fit {
    native: false,
    specific: false,
    certain: false,
    exact_features: 0,
    capability: (0, 0),
    variant: 0,
};

/// Ranks `images` for `device`, with `read[i]` the header content read for
/// image `i` where the image records none.
fn rank(
    device: &DeviceTarget,
    images: &[Image],
    read: &[Option<Content>],
    policy: &Policy,
) -> Selection {
    let mut selection = Selection::default();
    for (i, image) in images.iter().enumerate() {
        let content = image.content.as_ref().or(read[i].as_ref());
        match check_content(device, image, content, policy) {
            Ok(fit) => selection.compatible.push((i, fit)),
            Err(r) => selection.rejected.push((i, r)),
        }
    }
    // Stable sort, best first: ties keep image order.
    selection.compatible.sort_by_key(|c| std::cmp::Reverse(c.1));
    if let Some(&(best, best_fit)) = selection.compatible.first() {
        selection.chosen = Some(best);
        for &(i, fit) in &selection.compatible[1..] {
            selection.rejected.push((
                i,
                Rejection::Outranked {
                    by: best,
                    why: why_better(&best_fit, &fit),
                },
            ));
        }
        selection.rejected.sort_by_key(|(i, _)| *i);
        if let DeviceTarget::Amdgpu(dev) = device {
            selection.assumed = assumed(dev, &images[best].arch);
        }
    }
    let kind = policy.offload_kind.as_ref().or_else(|| {
        let chosen = selection.chosen.map(|i| &images[i].offload_kind);
        chosen.or_else(|| {
            images
                .iter()
                .map(|i| &i.offload_kind)
                .find(|k| **k != OffloadKind::Host)
        })
    });
    if let Some(runtime) = kind.and_then(VendorRuntime::of) {
        // The first compatible image in order, by tiers: the vendor runtime
        // knows the device's feature settings, so images that rely on
        // settings not reported here come last (clang's
        // `isCompatibleTargetID`, which comgr and the bundler apply, does
        // not match a stated feature against an unstated one).
        // clr takes native code objects before SPIR-V, which it compiles
        // only where no code object fits.
        let first = |native: Option<bool>, specific: Option<bool>, certain: bool| {
            selection
                .compatible
                .iter()
                .filter(|(_, fit)| {
                    native != Some(!fit.native)
                        && fit.certain == certain
                        && specific != Some(!fit.specific)
                })
                .map(|&(i, _)| i)
                .min()
        };
        let image = match runtime {
            VendorRuntime::Hip => first(Some(true), Some(true), true)
                .or_else(|| first(Some(true), Some(false), true))
                .or_else(|| first(Some(true), Some(true), false))
                .or_else(|| first(Some(true), Some(false), false))
                .or_else(|| first(Some(false), None, true)),
            VendorRuntime::Libomptarget => {
                first(None, None, true).or_else(|| first(None, None, false))
            }
        };
        selection.vendor = Some(VendorChoice { runtime, image });
    }
    selection
}

/// The feature settings `image` states that `device` did not report.
fn assumed(device: &TargetId, image: &Arch) -> Vec<String> {
    let Arch::Amdgpu(image) = image else {
        return Vec::new();
    };
    Feature::ALL
        .into_iter()
        .filter(|&f| {
            device.setting(f) == FeatureSetting::Any && image.setting(f) != FeatureSetting::Any
        })
        .map(|f| format!("{}{}", f.name(), sign(image.setting(f))))
        .collect()
}

fn why_better(best: &Fit, other: &Fit) -> &'static str {
    if best.native != other.native {
        "native code needs no JIT compilation"
    } else if best.specific != other.specific {
        "code for the specific processor beats its generic family"
    } else if best.certain != other.certain {
        "it relies on no unreported feature setting"
    } else if best.exact_features != other.exact_features {
        "its features match the device exactly"
    } else if best.capability != other.capability {
        "it is built for a closer architecture"
    } else if best.variant != other.variant {
        "its architecture-specific code is tuned for this device"
    } else {
        "it comes first"
    }
}

/// Whether `image` runs on `device`, and how well, from what the image records.
pub fn check(device: &DeviceTarget, image: &Image, policy: &Policy) -> Result<Fit, Rejection> {
    check_content(device, image, image.content.as_ref(), policy)
}

fn check_content(
    device: &DeviceTarget,
    image: &Image,
    content: Option<&Content>,
    policy: &Policy,
) -> Result<Fit, Rejection> {
    if image.is_host() {
        return Err(Rejection::HostEntry);
    }
    if let Some(wanted) = &policy.offload_kind {
        if &image.offload_kind != wanted {
            return Err(Rejection::OffloadKind {
                image: image.offload_kind.clone(),
                wanted: wanted.clone(),
            });
        }
    }
    let code = content.map_or(CodeKind::Unknown, |c| c.code);
    if image.declared == Some(CodeKind::Unknown) && code == CodeKind::Unknown {
        return Err(Rejection::Unmodelled);
    }
    // SPIR-V is loadable as AMD's portable code (`amdgcnspirv`), which the
    // HIP runtime compiles; under any other name no runtime loads it.
    let portable = image.arch == Arch::AmdSpirv;
    for kind in [Some(code), image.declared] {
        match kind {
            Some(CodeKind::Bitcode) => return Err(Rejection::NotLoadable("LLVM bitcode")),
            Some(CodeKind::SpirV) if portable => {}
            Some(CodeKind::SpirV) => return Err(Rejection::NotLoadable("SPIR-V")),
            Some(CodeKind::Text) => {
                return Err(Rejection::NotLoadable("text (assembly, LLVM IR or source)"))
            }
            _ => {}
        }
    }
    let Some(vendor) = image.triple.gpu_vendor() else {
        return Err(Rejection::NotGpuTriple(image.triple.clone()));
    };
    if vendor != device.vendor() {
        return Err(Rejection::WrongVendor {
            image: vendor,
            device: device.vendor(),
        });
    }
    if let Some(actual) = content.and_then(|c| c.arch.as_ref()) {
        if contradicts(&image.arch, actual) {
            return Err(Rejection::ClaimMismatch {
                claimed: Box::new(image.arch.clone()),
                actual: Box::new(actual.clone()),
            });
        }
    }
    let arch = match (&image.arch, content.and_then(|c| c.arch.as_ref())) {
        (Arch::None, Some(actual)) => actual,
        (claimed, _) => claimed,
    };
    match (device, arch) {
        (_, Arch::None) => Err(Rejection::NoArch),
        (_, Arch::Unknown { name, error }) => Err(Rejection::UnknownArch {
            name: name.clone(),
            error: error.clone(),
        }),
        (DeviceTarget::Amdgpu(dev), Arch::Amdgpu(img)) => {
            check_amdgpu(dev, img, content.and_then(|c| c.generic_version))
        }
        (DeviceTarget::Amdgpu(_), Arch::AmdSpirv) if image.offload_kind == OffloadKind::Hip => {
            Ok(SPIRV_FIT)
        }
        (DeviceTarget::Amdgpu(_), Arch::AmdSpirv) => Err(Rejection::NotLoadable(
            "SPIR-V (only the HIP runtime compiles AMD's at load)",
        )),
        (
            DeviceTarget::Nvidia {
                capability,
                max_ptx,
            },
            Arch::Nvptx(img),
        ) => {
            let ptx = code == CodeKind::Ptx || image.declared == Some(CodeKind::Ptx);
            check_nvidia(
                *capability,
                *max_ptx,
                img,
                ptx,
                content.and_then(|c| c.ptx_version),
            )
        }
        (_, other) => Err(Rejection::WrongVendor {
            image: other.vendor().unwrap_or(vendor),
            device: device.vendor(),
        }),
    }
}

/// How a portable image becomes code for the device, where it must: AMD's
/// SPIR-V is compiled at load by the HIP runtime, which looks for the
/// device's own ISA, then its generic ISA, then `spirv64-amd-amdhsa--
/// amdgcnspirv` (clr `hipamd/src/hip_fatbin.cpp`,
/// `FatBinaryInfo::ExtractFatBinaryUsingCOMGR`; in ROCm 7.0, beta in 6.4)
/// and compiles it through comgr 3 (`AMD_COMGR_ACTION_TRANSLATE_SPIRV_TO_BC`,
/// new in comgr 3.0, then codegen and link for the agent's ISA); NVIDIA's
/// PTX is JIT-compiled by the CUDA driver. `None` for native code: whether
/// the image is native is its `fit`'s, which selection decided, reading the
/// image's own header where its container did not say.
pub fn compiled_at_load(image: &Image, fit: &Fit) -> Option<&'static str> {
    if fit.native {
        return None;
    }
    match &image.arch {
        Arch::AmdSpirv => Some(
            "compiled at load from SPIR-V by the HIP runtime (ROCm 7.0 and later, beta in 6.4; \
             needs comgr 3.0 or later)",
        ),
        Arch::Nvptx(_) => Some("JIT-compiled from PTX by the CUDA driver"),
        _ => None,
    }
}

/// How AMD's SPIR-V fits any AMD GPU: compiled for it at load, so below
/// every native code object, a generic family's included (clr's order:
/// the device's own ISA, its generic ISA, then SPIR-V).
const SPIRV_FIT: Fit = Fit {
    native: false,
    specific: false,
    certain: true,
    exact_features: 0,
    capability: (0, 0),
    variant: 0,
};

/// Whether a header's arch contradicts a container's claim: another processor,
/// or a feature set one way in the claim and the other way in the header.
fn contradicts(claimed: &Arch, actual: &Arch) -> bool {
    match (claimed, actual) {
        (Arch::Amdgpu(c), Arch::Amdgpu(a)) => {
            c.processor != a.processor
                || Feature::ALL.into_iter().any(|f| {
                    let (c, a) = (c.setting(f), a.setting(f));
                    c != FeatureSetting::Any && a != FeatureSetting::Any && c != a
                })
        }
        (Arch::Nvptx(c), Arch::Nvptx(a)) => c.capability != a.capability,
        (Arch::None, _) => false,
        (Arch::Unknown { .. }, _) => false,
        (c, a) => c.vendor() != a.vendor(),
    }
}

fn check_amdgpu(
    dev: &TargetId,
    img: &TargetId,
    generic_version: Option<u8>,
) -> Result<Fit, Rejection> {
    let specific = !img.processor.is_generic();
    if specific {
        if img.processor != dev.processor {
            return Err(Rejection::OtherProcessor {
                image: img.processor.name,
                device: dev.processor.name,
            });
        }
    } else {
        if dev.processor.generic() != Some(img.processor) {
            return Err(Rejection::NotInFamily {
                generic: img.processor.name,
                device: dev.processor.name,
            });
        }
        // A member runs any generic version at or after the one it joined the
        // family at; there is no upper bound (LLVM 22 ELF.h
        // `EF_AMDGPU_GENERIC_VERSION_MAX` is 0xff; ROCr's ISA registry takes
        // any `codeGenericVersion` at or above the minimum; clr treats every
        // version >= 1 as generic). Version 0 is invalid and predates all.
        let version = generic_version.unwrap_or(img.processor.generic_version);
        let joined = dev.processor.generic_join_version();
        if version < joined {
            return Err(Rejection::GenericVersionTooOld {
                version,
                device: dev.processor.name,
                joined,
            });
        }
    }
    let mut exact_features = 0;
    let mut certain = true;
    for feature in Feature::ALL {
        let (want, have) = (img.setting(feature), dev.setting(feature));
        match (want, have) {
            (FeatureSetting::Any, _) => {}
            (_, FeatureSetting::Any) => certain = false,
            (w, h) if w == h => exact_features += 1,
            _ => {
                return Err(Rejection::Feature {
                    feature: feature.name(),
                    image: want,
                    device: have,
                })
            }
        }
    }
    Ok(Fit {
        native: true,
        specific,
        certain,
        exact_features,
        capability: (0, 0),
        variant: 0,
    })
}

fn check_nvidia(
    device: ComputeCapability,
    max_ptx: Option<PtxVersion>,
    img: &NvArch,
    ptx: bool,
    ptx_version: Option<PtxVersion>,
) -> Result<Fit, Rejection> {
    if ptx {
        if !img.jits_on(device) {
            return Err(Rejection::PtxArch {
                image: *img,
                device,
            });
        }
        if let (Some(ptx), Some(max)) = (ptx_version, max_ptx) {
            if ptx > max {
                return Err(Rejection::PtxTooNew { ptx, max });
            }
        }
    } else if !img.runs_natively_on(device) {
        return Err(native_rejection(*img, device));
    }
    Ok(Fit {
        native: !ptx,
        specific: true,
        certain: true,
        exact_features: 0,
        capability: (img.capability.major, img.capability.minor),
        variant: match img.variant {
            ArchVariant::ArchSpecific => 2,
            ArchVariant::FamilySpecific => 1,
            ArchVariant::Base => 0,
        },
    })
}

/// Why cubin `image` does not run on `device`: the rule of
/// [`NvArch::runs_natively_on`] it fails. Where the desktop rule alone would
/// take it (a later minor of its major), the platform is why.
fn native_rejection(image: NvArch, device: ComputeCapability) -> Rejection {
    let cc = image.capability;
    let desktop_would =
        image.variant == ArchVariant::Base && cc.major == device.major && cc.minor <= device.minor;
    if !desktop_would {
        return Rejection::NativeArch { image, device };
    }
    match (cc.platform(), device.platform()) {
        (Platform::Tegra, _) => Rejection::TegraCode { image, device },
        (_, Platform::Tegra) => Rejection::TegraArch { image, device },
        (Platform::Unlisted, _) => Rejection::UnlistedArch {
            image,
            device,
            unlisted: cc,
        },
        _ => Rejection::UnlistedArch {
            image,
            device,
            unlisted: device,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::BundleId;

    fn images(ids: &[&str]) -> Vec<Image> {
        ids.iter()
            .enumerate()
            .map(|(index, id)| {
                let b = BundleId::parse(id);
                Image {
                    index,
                    id: id.to_string(),
                    offload_kind: b.kind,
                    triple: b.triple,
                    arch: b.arch,
                    declared: None,
                    offset: 0,
                    size: 1,
                    compressed: false,
                    content: None,
                }
            })
            .collect()
    }

    fn pick(device: &str, ids: &[&str]) -> Selection {
        select(
            &DeviceTarget::parse(device).unwrap(),
            &images(ids),
            &Policy::default(),
        )
    }

    const ROCM: &[&str] = &[
        "host-x86_64-unknown-linux-gnu",
        "hipv4-amdgcn-amd-amdhsa--gfx906",
        "hipv4-amdgcn-amd-amdhsa--gfx90a",
        "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+",
        "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-",
        "hipv4-amdgcn-amd-amdhsa--gfx11-generic",
        "hipv4-amdgcn-amd-amdhsa--gfx1100",
    ];

    #[test]
    fn best_fit_prefers_exact_features_over_bundle_order() {
        let s = pick("gfx90a:sramecc+:xnack-", ROCM);
        assert_eq!(s.chosen, Some(4));
        let reasons: Vec<String> = s
            .rejected
            .iter()
            .map(|(i, r)| format!("{i}: {r}"))
            .collect();
        assert_eq!(
            reasons,
            [
                "0: it is the host entry, which no device runs",
                "1: it is built for gfx906, the device is gfx90a",
                "2: it would run, but image 4 fits better (its features match the device exactly)",
                "3: it needs xnack+ but the device is xnack-",
                "5: gfx11-generic code does not run on gfx90a, which is not in that family",
                "6: it is built for gfx1100, the device is gfx90a",
            ]
        );
        assert_eq!(pick("gfx90a:xnack+", ROCM).chosen, Some(3));
    }

    #[test]
    fn the_vendor_rule_is_predicted_where_it_differs() {
        // HIP and comgr take the first compatible entry: the "any" gfx90a
        // image, where best fit takes the exact xnack- one.
        let s = pick("gfx90a:sramecc+:xnack-", ROCM);
        assert_eq!(s.chosen, Some(4));
        let vendor = s.vendor.unwrap();
        assert_eq!(
            (vendor.runtime, vendor.image),
            (VendorRuntime::Hip, Some(2))
        );
        // Specific before generic, whatever the order.
        let generic_first = [
            "hipv4-amdgcn-amd-amdhsa--gfx11-generic",
            "hipv4-amdgcn-amd-amdhsa--gfx1100",
        ];
        let s = pick("gfx1100", &generic_first);
        assert_eq!((s.chosen, s.vendor.unwrap().image), (Some(1), Some(1)));
        assert_eq!(
            pick("gfx1151", &generic_first).vendor.unwrap().image,
            Some(0)
        );
        // libomptarget: the first compatible image, generic or not.
        let omp = [
            "openmp-amdgcn-amd-amdhsa--gfx11-generic",
            "openmp-amdgcn-amd-amdhsa--gfx1100",
        ];
        let s = pick("gfx1100", &omp);
        let vendor = s.vendor.unwrap();
        assert_eq!(
            (s.chosen, vendor.runtime, vendor.image),
            (Some(1), VendorRuntime::Libomptarget, Some(0))
        );
        // CUDA's driver picks the best cubin itself: nothing to predict.
        assert_eq!(
            pick("sm_80", &["cuda-nvptx64-nvidia-cuda--sm_80"]).vendor,
            None
        );
    }

    #[test]
    fn features_the_device_did_not_report_are_assumed() {
        let only_xnack_on = ["hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+"];
        let s = pick("gfx90a", &only_xnack_on);
        assert_eq!(
            (s.chosen, s.assumed.clone()),
            (Some(0), vec!["xnack+".to_string()])
        );
        assert!(!s.compatible[0].1.certain);
        assert!(pick("gfx90a:xnack+", &only_xnack_on).assumed.is_empty());
        assert!(pick("gfx90a", ROCM).assumed.is_empty());
    }

    #[test]
    fn aliases_and_invalid_target_ids_in_bundle_ids_never_load() {
        let s = pick(
            "gfx803",
            &[
                "hcc-amdgcn-amd-amdhsa--fiji",
                "hipv4-amdgcn-amd-amdhsa--gfx803",
            ],
        );
        assert_eq!(s.chosen, Some(1));
        assert_eq!(
            s.rejected[0].1.to_string(),
            "its target fiji is not valid: `fiji` is an alias of gfx803, and runtimes compare bundle IDs as written"
        );
        let s = pick("gfx1030", &["hipv4-amdgcn-amd-amdhsa--gfx1030:xnack+"]);
        assert_eq!(s.chosen, None);
        assert_eq!(
            s.rejected[0].1.to_string(),
            "its target gfx1030:xnack+ is not valid: processor gfx1030 does not support xnack"
        );
    }

    #[test]
    fn unknown_device_features_rank_below_certain_ones() {
        // A device seen through KFD: xnack unknown. The "any" image surely runs.
        let s = pick("gfx90a", ROCM);
        assert_eq!(s.chosen, Some(2));
        assert_eq!(s.compatible.len(), 3);
        assert!(s.compatible.iter().skip(1).all(|(_, f)| !f.certain));
    }

    #[test]
    fn specific_beats_generic_and_generic_covers_family() {
        assert_eq!(pick("gfx1100", ROCM).chosen, Some(6));
        let s = pick("gfx1151", ROCM);
        assert_eq!(s.chosen, Some(5));
        let s = pick("gfx1201", ROCM);
        assert_eq!(s.chosen, None);
        assert_eq!(s.rejected.len(), ROCM.len());
    }

    #[test]
    fn generic_version_bounds() {
        let mut imgs = images(&["hip-amdgcn-amd-amdhsa--gfx11-generic"]);
        let dev = DeviceTarget::parse("gfx1103").unwrap();
        for (v, ok) in [(0, false), (1, true), (2, true), (255, true)] {
            imgs[0].content = Some(Content {
                code: CodeKind::AmdgpuElf,
                generic_version: Some(v),
                ..Content::default()
            });
            let s = select(&dev, &imgs, &Policy::default());
            assert_eq!(s.chosen.is_some(), ok, "version {v}: {:?}", s.rejected);
        }
    }

    #[test]
    fn claim_checked_against_header() {
        let mut imgs = images(&["hip-amdgcn-amd-amdhsa--gfx90a"]);
        imgs[0].content = Some(Content {
            code: CodeKind::AmdgpuElf,
            arch: Some(Arch::Amdgpu(TargetId::parse("gfx906").unwrap())),
            ..Content::default()
        });
        let s = select(
            &DeviceTarget::parse("gfx90a").unwrap(),
            &imgs,
            &Policy::default(),
        );
        assert!(matches!(s.rejected[0].1, Rejection::ClaimMismatch { .. }));
    }

    #[test]
    fn offload_kind_policy_and_vendor() {
        let ids = [
            "openmp-amdgcn-amd-amdhsa--gfx90a",
            "hip-amdgcn-amd-amdhsa--gfx90a",
        ];
        let dev = DeviceTarget::parse("gfx90a").unwrap();
        let hip = Policy {
            offload_kind: Some(OffloadKind::Hip),
        };
        assert_eq!(select(&dev, &images(&ids), &hip).chosen, Some(1));
        let s = pick("sm_80", &ids);
        assert_eq!(s.chosen, None);
        assert!(matches!(s.rejected[0].1, Rejection::WrongVendor { .. }));
    }

    fn nv(ids: &[(&str, bool)]) -> Vec<Image> {
        let mut imgs = images(&ids.iter().map(|(id, _)| *id).collect::<Vec<_>>());
        for (img, (_, ptx)) in imgs.iter_mut().zip(ids) {
            img.declared = Some(if *ptx { CodeKind::Ptx } else { CodeKind::Cubin });
        }
        imgs
    }

    #[test]
    fn nvidia_rules() {
        let imgs = nv(&[
            ("cuda-nvptx64-nvidia-cuda--sm_70", false),
            ("cuda-nvptx64-nvidia-cuda--sm_80", false),
            ("cuda-nvptx64-nvidia-cuda--sm_86", false),
            ("cuda-nvptx64-nvidia-cuda--sm_90a", false),
            ("cuda-nvptx64-nvidia-cuda--sm_80", true),
        ]);
        let on = |sm: u32| {
            let dev = DeviceTarget::Nvidia {
                capability: ComputeCapability::from_sm(sm).unwrap(),
                max_ptx: Some(PtxVersion { major: 8, minor: 4 }),
            };
            select(&dev, &imgs, &Policy::default())
        };
        assert_eq!(on(86).chosen, Some(2));
        assert_eq!(on(89).chosen, Some(2));
        assert_eq!(on(80).chosen, Some(1));
        assert_eq!(on(90).chosen, Some(3));
        // sm_100: no cubin runs, PTX for sm_80 is compiled by the driver.
        let s = on(100);
        assert_eq!(s.chosen, Some(4));
        assert_eq!(
            s.rejected[3].1.to_string(),
            "sm_90a code runs only on exactly sm_90, the device is sm_100"
        );
        assert_eq!(
            s.rejected[0].1.to_string(),
            "sm_70 code runs only on desktop GPUs sm_70 to sm_79, the device is sm_100"
        );
        assert_eq!(on(75).chosen, Some(0));
        assert_eq!(on(61).chosen, None);

        let mut ptx = nv(&[("cuda-nvptx64-nvidia-cuda--sm_80", true)]);
        ptx[0].content = Some(Content {
            code: CodeKind::Ptx,
            ptx_version: Some(PtxVersion { major: 8, minor: 8 }),
            ..Content::default()
        });
        let dev = DeviceTarget::Nvidia {
            capability: ComputeCapability::from_sm(90).unwrap(),
            max_ptx: Some(PtxVersion { major: 8, minor: 4 }),
        };
        let s = select(&dev, &ptx, &Policy::default());
        assert_eq!(
            s.rejected[0].1.to_string(),
            "its PTX ISA 8.8 is newer than the driver can compile (up to 8.4)"
        );
    }

    #[test]
    fn cuda_13_variants_and_tegra() {
        // What nvcc 13.5 writes for -gencode sm_100a, sm_100f, sm_100 plus
        // compute_90a PTX, on each device.
        let imgs = nv(&[
            ("cuda-nvptx64-nvidia-cuda--sm_100a", false),
            ("cuda-nvptx64-nvidia-cuda--sm_100f", false),
            ("cuda-nvptx64-nvidia-cuda--sm_90a", true),
            ("cuda-nvptx64-nvidia-cuda--sm_80", false),
        ]);
        let on = |d: &str| select(&DeviceTarget::parse(d).unwrap(), &imgs, &Policy::default());
        assert_eq!(on("sm_100").chosen, Some(0));
        assert_eq!(on("sm_103").chosen, Some(1));
        assert_eq!(
            on("sm_103").rejected[0].1.to_string(),
            "sm_100a code runs only on exactly sm_100, the device is sm_103"
        );
        // The arch-specific PTX is for 9.0 alone.
        assert_eq!(on("sm_90").chosen, Some(2));
        assert_eq!(on("sm_120").chosen, None);
        assert_eq!(
            on("sm_120").rejected[1].1.to_string(),
            "sm_100f code runs only on its family (sm_100, sm_103), the device is sm_120"
        );
        assert_eq!(
            on("sm_120").rejected[2].1.to_string(),
            "PTX for sm_90a cannot be compiled for sm_120: arch-specific PTX compiles only for exactly sm_90"
        );
        // Tegra: an sm_80 cubin is not for Orin (8.7); sm_86 desktop takes it.
        assert_eq!(on("sm_86").chosen, Some(3));
        let orin = on("8.7");
        assert_eq!(orin.chosen, None);
        assert_eq!(
            orin.rejected[3].1.to_string(),
            "sm_80 code does not run on sm_87: a Tegra GPU runs only cubins built for exactly its own capability (binary compatibility is desktop only)"
        );
    }

    #[test]
    fn tegra_code_is_never_chosen_for_a_desktop_gpu() {
        // cuSPARSELt 0.8.1's modules: sm_80, sm_87 (Orin), sm_90 cubins and
        // compute_90 PTX. An RTX 4090 (8.9) runs the sm_80 cubin.
        let sparselt = nv(&[
            ("cuda-nvptx64-nvidia-cuda--sm_80", false),
            ("cuda-nvptx64-nvidia-cuda--sm_87", false),
            ("cuda-nvptx64-nvidia-cuda--sm_90", false),
            ("cuda-nvptx64-nvidia-cuda--sm_90", true),
        ]);
        let on = |d: &str, imgs: &[Image]| {
            select(&DeviceTarget::parse(d).unwrap(), imgs, &Policy::default())
        };
        let rtx = on("RTX 4090", &sparselt);
        assert_eq!(rtx.chosen, Some(0));
        assert_eq!(
            rtx.rejected[0].1.to_string(),
            "sm_87 code is for the Tegra GPU sm_87 alone and does not run on sm_89 (binary \
             compatibility between Tegra and desktop GPUs is not supported)"
        );
        assert_eq!(on("8.7", &sparselt).chosen, Some(1));
        assert_eq!(on("sm_86", &sparselt).chosen, Some(0));
        // jax's `_linalg.so`: sm_100 and sm_101 (Thor, CUDA 12.9) cubins.
        let jax = nv(&[
            ("cuda-nvptx64-nvidia-cuda--sm_100", false),
            ("cuda-nvptx64-nvidia-cuda--sm_101", false),
        ]);
        assert_eq!(on("B300", &jax).chosen, Some(0));
        assert_eq!(on("10.3", &jax).chosen, Some(0));
        assert_eq!(on("10.1", &jax).chosen, Some(1));
        // Thor as a CUDA 13 driver reports it.
        assert_eq!(on("11.0", &jax).chosen, Some(1));
        // A capability no table classes takes only its own code.
        let s = on("sm_107", &jax);
        assert_eq!(s.chosen, None);
        assert_eq!(
            s.rejected[0].1.to_string(),
            "sm_100 code is not known to run on sm_107: NVIDIA's tables do not say whether \
             sm_107 is a desktop GPU, so only code built for exactly it is taken"
        );
    }

    /// AMD's SPIR-V on every device: compatible with every AMD GPU, chosen
    /// only where no code object (specific or generic) runs, as clr takes
    /// it; every spelling of its bundle ID; never for NVIDIA or OpenMP.
    #[test]
    fn amd_spirv_is_taken_only_where_no_code_object_runs() {
        for id in [
            "hip-spirv64-amd-amdhsa--amdgcnspirv",
            "hipv4-spirv64-amd-amdhsa--amdgcnspirv",
            "hipv4-spirv64-amd-amdhsa-unknown-amdgcnspirv",
        ] {
            assert_eq!(images(&[id])[0].arch, Arch::AmdSpirv, "{id}");
        }
        let set = images(&[
            "host-x86_64-unknown-linux-gnu-",
            "hipv4-spirv64-amd-amdhsa--amdgcnspirv",
            "hipv4-amdgcn-amd-amdhsa--gfx11-generic",
            "hipv4-amdgcn-amd-amdhsa--gfx90a",
        ]);
        let mut spirv = 0;
        for device in devices() {
            let s = select(&device, &set, &Policy::default());
            let want = match &device {
                DeviceTarget::Nvidia { .. } => None,
                DeviceTarget::Amdgpu(id) if id.processor.name == "gfx90a" => Some(3),
                DeviceTarget::Amdgpu(id)
                    if id
                        .processor
                        .generic()
                        .is_some_and(|g| g.name == "gfx11-generic") =>
                {
                    Some(2)
                }
                DeviceTarget::Amdgpu(_) => Some(1),
            };
            assert_eq!(s.chosen, want, "{device}");
            // clr's own order takes the same image.
            assert_eq!(s.vendor.and_then(|v| v.image), want, "{device}");
            if want == Some(1) {
                spirv += 1;
                assert!(compiled_at_load(&set[1], &s.compatible[0].1)
                    .unwrap()
                    .contains("SPIR-V"));
            } else if want.is_some() {
                let why = &s.rejected.iter().find(|(i, _)| *i == 1).unwrap().1;
                assert_eq!(
                    why.to_string(),
                    format!(
                        "it would run, but image {} fits better (native code needs no JIT \
                         compilation)",
                        want.unwrap()
                    )
                );
            }
        }
        assert!(spirv > 20, "{spirv}");
        let omp = pick("gfx1030", &["openmp-spirv64-amd-amdhsa--amdgcnspirv"]);
        assert_eq!(omp.chosen, None);
        assert_eq!(
            omp.rejected[0].1.to_string(),
            "it holds SPIR-V (only the HIP runtime compiles AMD's at load), which the driver \
             cannot load as is"
        );
    }

    #[test]
    fn device_parse() {
        for (typed, device) in [
            ("sm_90", "sm_90"),
            ("sm_90a", "sm_90"),
            ("9.0", "sm_90"),
            ("12.1", "sm_121"),
            ("sm_100f", "sm_100"),
        ] {
            assert_eq!(
                DeviceTarget::parse(typed).unwrap().to_string(),
                device,
                "{typed}"
            );
        }
        for bad in ["9.", ".0", "9.10", "0.5", "9.x", "sm_9"] {
            assert!(DeviceTarget::parse(bad).is_err(), "{bad}");
        }
        assert!(DeviceTarget::parse("gfx9999").is_err());
        assert_eq!(
            DeviceTarget::parse("gfx90a:xnack-:sramecc+")
                .unwrap()
                .to_string(),
            "gfx90a:sramecc+:xnack-"
        );
    }

    /// Every image a device of LLVM 22's processor table or of CUDA's
    /// capabilities could be handed: each AMD processor and generic family
    /// with every feature setting it allows, and for each NVIDIA capability
    /// its base, arch- and family-specific cubins and its PTX.
    fn universe() -> Vec<Image> {
        use crate::target::Processor;
        let mut ids = Vec::new();
        for p in Processor::all() {
            let settings = |on: bool| {
                if on {
                    &["", ":xnack+", ":xnack-"][..]
                } else {
                    &[""][..]
                }
            };
            let sram = if p.sramecc {
                &["", ":sramecc+", ":sramecc-"][..]
            } else {
                &[""][..]
            };
            for s in sram {
                for x in settings(p.xnack) {
                    ids.push(format!("openmp-amdgcn-amd-amdhsa--{}{s}{x}", p.name));
                }
            }
        }
        ids.push("hipv4-spirv64-amd-amdhsa--amdgcnspirv".into());
        let mut all = images(&ids.iter().map(String::as_str).collect::<Vec<_>>());
        for sm in NV_SMS {
            for (suffix, ptx) in [("", false), ("a", false), ("f", false), ("", true)] {
                let prefix = if ptx { "compute" } else { "sm" };
                let id = format!("openmp-nvptx64-nvidia-cuda--{prefix}_{sm}{suffix}");
                let mut image = images(&[&id]).remove(0);
                image.index = all.len();
                image.declared = Some(if ptx { CodeKind::Ptx } else { CodeKind::Cubin });
                all.push(image);
            }
        }
        all
    }

    const NV_SMS: [u32; 24] = [
        50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 88, 89, 90, 100, 101, 103, 107, 110, 120,
        121, 35, 37,
    ];

    /// Every device: each specific AMD processor with each known setting of
    /// the features it supports (a vendor runtime always knows them), and
    /// each NVIDIA capability.
    fn devices() -> Vec<DeviceTarget> {
        let mut devices: Vec<DeviceTarget> = Processor::all()
            .iter()
            .filter(|p| !p.is_generic())
            .flat_map(known_settings)
            .collect();
        for sm in NV_SMS {
            devices.push(DeviceTarget::nvidia(
                ComputeCapability::from_sm(sm).unwrap(),
            ));
        }
        devices
    }

    /// The first image of `preference`'s order that `check` accepts.
    fn first_fit(device: &DeviceTarget, images: &[Image]) -> Option<usize> {
        preference(images)
            .into_iter()
            .find(|&i| check(device, &images[i], &Policy::default()).is_ok())
    }

    /// The image sets the first-fit proofs run on: the whole universe in
    /// table order and reversed, and 400 random subsets of 1 to 12 images
    /// in random order (an LCG from `seed`, so a failure reproduces).
    fn table_sets(mut seed: u64) -> Vec<Vec<Image>> {
        let all = universe();
        let mut sets: Vec<Vec<Image>> = vec![all.clone(), all.iter().rev().cloned().collect()];
        let mut next = |n: usize| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            ((seed >> 33) as usize) % n
        };
        for _ in 0..400 {
            let len = 1 + next(12);
            sets.push((0..len).map(|_| all[next(all.len())].clone()).collect());
        }
        for set in &mut sets {
            for (index, image) in set.iter_mut().enumerate() {
                image.index = index;
            }
        }
        sets
    }

    /// The proof `preference` exists for: on every device, a runtime that
    /// takes the first compatible image of the reordered table takes
    /// `select`'s choice, on every set of [`table_sets`].
    #[test]
    fn first_compatible_in_preference_order_is_selects_choice() {
        let sets = table_sets(0x2545_f491_4f6c_dd1d_u64);
        let devices = devices();
        let mut compared = 0;
        for set in &sets {
            // The order hand-over uses: the table's own where that already
            // gives the choice on every device.
            let handed = first_fit_order(set).unwrap_or_else(|| (0..set.len()).collect());
            for device in &devices {
                let chosen = select(device, &set[..], &Policy::default()).chosen;
                assert_eq!(
                    first_fit(device, set),
                    chosen,
                    "{device}: {:?}",
                    set.iter().map(|i| i.id.as_str()).collect::<Vec<_>>()
                );
                let first = handed
                    .iter()
                    .copied()
                    .find(|&i| check(device, &set[i], &Policy::default()).is_ok());
                assert_eq!(first, chosen, "handed over, {device}: {handed:?}");
                compared += usize::from(chosen.is_some());
            }
        }
        // The sets do make devices choose (the test is not vacuous).
        assert!(compared > 2000, "{compared}");
    }

    /// Images whose headers all read as `header`.
    struct Headers {
        images: Vec<Image>,
        header: Option<Content>,
    }

    impl ImageSource for Headers {
        fn images(&self) -> &[Image] {
            &self.images
        }

        fn read_content(&self, _index: usize) -> Option<Content> {
            self.header.clone()
        }
    }

    /// What clr takes on `device` from `images` handed in `order`: the first
    /// compatible one of the best tier there is, native code before SPIR-V,
    /// a processor's own code before its generic family's
    /// ([`VendorRuntime::in_table_order`]).
    fn clr_takes(device: &DeviceTarget, images: &[Image], order: &[usize]) -> Option<usize> {
        let policy = Policy::default();
        let tier = |i: usize| {
            let fit = check(device, &images[i], &policy).ok()?;
            Some((fit.native, fit.specific))
        };
        let best = order.iter().filter_map(|&i| tier(i)).max()?;
        order.iter().copied().find(|&i| tier(i) == Some(best))
    }

    /// The same proof for clr's rule: on every device, clr takes `select`'s
    /// choice from the table [`first_fit_order_on`] hands it, and a table
    /// whose only inversions are a generic family before its member (as
    /// clang writes them) is handed as it is.
    #[test]
    fn clr_takes_selects_choice_from_the_table_handed() {
        let sets = table_sets(0x9e37_79b9_7f4a_7c15_u64);
        let devices = devices();
        let (mut compared, mut kept) = (0, 0);
        for set in &sets {
            let order = first_fit_order_on(set, Present::Any, VendorRuntime::Hip);
            kept += usize::from(order.is_none() && first_fit_order(set).is_some());
            let handed = order.unwrap_or_else(|| (0..set.len()).collect());
            for device in &devices {
                let chosen = select(device, &set[..], &Policy::default()).chosen;
                assert_eq!(
                    clr_takes(device, set, &handed),
                    chosen,
                    "{device}: {:?}",
                    handed
                        .iter()
                        .map(|&i| set[i].id.as_str())
                        .collect::<Vec<_>>()
                );
                compared += usize::from(chosen.is_some());
            }
        }
        assert!(compared > 2000, "{compared}");
        // Some tables libomptarget needs reordered are handed to clr as
        // they are (the test is not vacuous either way).
        assert!(kept > 0, "{kept}");
        let clang = images(&[
            "host-x86_64-unknown-linux-gnu-",
            "hipv4-amdgcn-amd-amdhsa--gfx11-generic",
            "hipv4-amdgcn-amd-amdhsa--gfx1100",
            "hipv4-amdgcn-amd-amdhsa--gfx90a",
        ]);
        assert_eq!(
            first_fit_order_on(&clang, Present::Any, VendorRuntime::Hip),
            None
        );
        assert!(first_fit_order(&clang).is_some());
    }

    /// `first_fit_order` keeps a host entry in its place, leaves an ordered
    /// table alone, and gives the proof's answer: on every device the first
    /// compatible image of its order is `select`'s choice.
    #[test]
    fn first_fit_order_moves_only_gpu_images() {
        let set = images(&[
            "host-x86_64-unknown-linux-gnu-",
            "hipv4-amdgcn-amd-amdhsa--gfx90a",
            "hipv4-amdgcn-amd-amdhsa--gfx11-generic",
            "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+",
            "hipv4-amdgcn-amd-amdhsa--gfx1100",
        ]);
        let order = first_fit_order(&set).unwrap();
        assert_eq!(order, [0, 3, 1, 4, 2]);
        let reordered: Vec<Image> = order.iter().map(|&i| set[i].clone()).collect();
        assert_eq!(first_fit_order(&reordered), None);
        // Inversions that never meet on one device leave the table alone;
        // a generic family before its member does not.
        let apart = images(&[
            "hipv4-amdgcn-amd-amdhsa--gfx908",
            "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+",
        ]);
        assert_eq!(first_fit_order(&apart), None);
        let family = images(&[
            "hipv4-amdgcn-amd-amdhsa--gfx11-generic",
            "hipv4-amdgcn-amd-amdhsa--gfx1100",
        ]);
        assert_eq!(first_fit_order(&family), Some(vec![1, 0]));
        // Decided for the processors present: with no gfx11 GPU no device
        // would take the generic code over gfx1100's, and the table stays.
        // clr takes gfx1100's code first whatever the order: for clr the
        // table stays everywhere.
        let on = |names: &[&str]| -> Vec<&'static Processor> {
            names
                .iter()
                .map(|n| Processor::lookup(n).unwrap())
                .collect()
        };
        for (present, expected) in [
            (on(&[]), None),
            (on(&["gfx90a", "gfx1030"]), None),
            // A gfx1101 runs the generic code only.
            (on(&["gfx90a", "gfx1101"]), None),
            (on(&["gfx90a", "gfx1100"]), Some(vec![1, 0])),
        ] {
            let only = Present::Only(&present);
            let omp = first_fit_order_on(&family, only, VendorRuntime::Libomptarget);
            assert_eq!(omp, expected, "{present:?}");
            let hip = first_fit_order_on(&family, only, VendorRuntime::Hip);
            assert_eq!(hip, None, "{present:?}");
        }
        // For clr an order still decides between "any" and stated features.
        let features = images(&[
            "hipv4-amdgcn-amd-amdhsa--gfx90a",
            "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+",
        ]);
        let gfx90a = on(&["gfx90a"]);
        assert_eq!(
            first_fit_order_on(&features, Present::Only(&gfx90a), VendorRuntime::Hip),
            Some(vec![1, 0])
        );
        // A processor's code whose header says it is another processor's
        // ranks last for libomptarget, and is named by its header for a
        // runtime that goes by IDs.
        let mut mislabelled = images(&[
            "hipv4-amdgcn-amd-amdhsa--gfx1100",
            "hipv4-amdgcn-amd-amdhsa--gfx11-generic",
            "hipv4-amdgcn-amd-amdhsa--gfx90a",
        ]);
        assert_eq!(first_fit_order(&mislabelled), None);
        assert_eq!(first_fit_contested(&mislabelled, Present::Any), [0]);
        let header = |processor: &str| Content {
            code: CodeKind::AmdgpuElf,
            arch: Some(Arch::Amdgpu(TargetId::parse(processor).unwrap())),
            generic_version: None,
            ptx_version: None,
        };
        let read = |image: &str| Headers {
            images: mislabelled.clone(),
            header: Some(header(image)),
        };
        assert!(headers_agree(&read("gfx1100"), &[0]));
        assert_eq!(
            named_by_headers(&read("gfx1100"), &[0])[0].id,
            mislabelled[0].id
        );
        assert!(!headers_agree(&read("gfx1101"), &[0]));
        let named = named_by_headers(&read("gfx1101"), &[0]);
        assert_eq!(named[0].id, "hipv4-amdgcn-amd-amdhsa--gfx1101");
        assert_eq!(named[1..], mislabelled[1..]);
        let gfx1100 = DeviceTarget::parse("gfx1100").unwrap();
        let s = select(&gfx1100, &named[..], &Policy::default());
        assert_eq!((s.chosen, s.vendor.unwrap().image), (Some(1), Some(1)));
        // A bundle entry ID with no target to replace keeps its name.
        let mut odd = mislabelled.clone();
        odd[0].id = "gfx1100".into();
        let named = named_by_headers(
            &Headers {
                images: odd.clone(),
                header: Some(header("gfx1101")),
            },
            &[0],
        );
        assert_eq!(
            (named[0].id.as_str(), &named[0].arch),
            ("gfx1100", &odd[0].arch)
        );
        mislabelled[0].content = Some(header("gfx1101"));
        assert_eq!(first_fit_order(&mislabelled), Some(vec![2, 1, 0]));
        mislabelled[0].content = Some(header("gfx1100"));
        assert_eq!(first_fit_order(&mislabelled), None);
        for device in devices() {
            let chosen = select(&device, &set[..], &Policy::default()).chosen;
            let first = order
                .iter()
                .copied()
                .find(|&i| check(&device, &set[i], &Policy::default()).is_ok());
            assert_eq!(first, chosen, "{device}");
        }
    }

    /// Reordering puts what a first-fit runtime would wrongly take behind
    /// the better image: `gfx11-generic` before `gfx1100`, `gfx90a` "any"
    /// before `gfx90a:xnack+`, PTX before a cubin.
    #[test]
    fn preference_puts_the_better_image_first() {
        let set = images(&[
            "openmp-amdgcn-amd-amdhsa--gfx11-generic",
            "openmp-amdgcn-amd-amdhsa--gfx90a",
            "openmp-amdgcn-amd-amdhsa--gfx1100",
            "openmp-amdgcn-amd-amdhsa--gfx90a:xnack+",
        ]);
        assert_eq!(preference(&set), [3, 1, 2, 0]);
    }
}
