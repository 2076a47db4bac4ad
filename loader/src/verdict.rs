//! What a file means for a device: a verdict for each group of its modules
//! that one runtime's rule ([`Rule`]) governs, and the file's verdict, the
//! worst of them. One truth for the probe's report, its exit status, and
//! `slim`'s.
//!
//! A module is one selection scope (a fat binary, a bundle, the offload
//! binaries of one section). Every module counts, whatever is left in it: a
//! fat binary whose images were all removed is a module with no image, not
//! no module. Which modules count does not depend on the device: nvlink's
//! kernel-less `*_dlink` stub is decided once per module, so the counts for
//! two devices add up to the same whole.
//!
//! An `-rdc` program is the exception to "one scope, one module": its
//! objects' fat binaries (`__nv_relfatbin` of a linked file) are no modules
//! of their own but the inputs of its device-link stub, whose wrapper
//! (version 2, crt/link.stub) hands them to the runtime. A stub with no
//! image for a device is linked for it at load, as libcudart does, where
//! every input has an image for the device ([`Link`]).

use crate::container::{Format, Scope};
use crate::discover::OffloadSection;
use crate::rule::Rule;
use crate::select::ImageSource;
use crate::target::Vendor;

/// One module of a file, as a verdict needs it: whose rule governs it, whose
/// GPU code it is, and whether it is nvlink's kernel-less stub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Module {
    /// The rule of the runtime that loads it.
    pub rule: Rule,
    /// It holds (or, emptied, held) AMD GPU code.
    pub amd: bool,
    /// It holds (or, emptied, held) NVIDIA GPU code.
    pub nvidia: bool,
    /// An NVIDIA fat binary without kernels: no device needs an image of it.
    pub kernel_less: bool,
    /// Its part in an `-rdc` program.
    pub link: Link,
}

/// A module's part in an `-rdc` program (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Link {
    /// None: it stands alone.
    #[default]
    None,
    /// A device-link stub: where it has no image for a device, the
    /// runtime links the inputs for it.
    Stub,
    /// An object's fat binary, one of the stubs' inputs, never loaded by
    /// itself.
    Input,
}

impl Module {
    /// The module `scope` of `section`. Its vendors are those of its GPU
    /// images; a module with none left is its format's: an NVIDIA fat binary
    /// holds NVIDIA code, a bundle registered with HIP AMD code. The
    /// kernel-less test inflates at most a small cubin per fat binary, and
    /// is asked only where nvlink writes its stub (not of a fat binary kept
    /// among host data, which is the library's own module). `stubs` are the
    /// addresses the file's version 2 CUDA wrappers point at
    /// ([`crate::discover::link_stubs`]): a fat binary there is a
    /// device-link stub; one in a linked file's `__nv_relfatbin` is an input.
    pub fn of(section: &OffloadSection, scope: &Scope<'_, '_>, stubs: &[u64]) -> Module {
        let first = scope.containers()[0];
        let address = first
            .offset()
            .checked_sub(section.file_offset)
            .and_then(|o| section.address.checked_add(o))
            .filter(|_| section.address != 0);
        let rule = Rule::of(section, first);
        let has = |v: Vendor| {
            scope
                .images()
                .iter()
                .any(|i| i.triple.gpu_vendor() == Some(v))
        };
        let (mut amd, mut nvidia) = (has(Vendor::Amd), has(Vendor::Nvidia));
        if !amd && !nvidia {
            match first.format() {
                Format::NvFatbin => nvidia = true,
                Format::Bundle | Format::CompressedBundle if rule == Rule::Hip => amd = true,
                _ => {}
            }
        }
        let kernel_less =
            rule != Rule::Data && scope.containers().iter().all(|c| c.is_kernel_less());
        let link = if section.name == crate::discover::NV_RELFATBIN && section.address != 0 {
            Link::Input
        } else if rule == Rule::Cuda && address.is_some_and(|a| stubs.contains(&a)) {
            Link::Stub
        } else {
            Link::None
        };
        Module {
            rule,
            amd,
            nvidia,
            kernel_less,
            link,
        }
    }

    /// Whether it holds code of `vendor`'s GPUs.
    pub fn targets(&self, vendor: Vendor) -> bool {
        match vendor {
            Vendor::Amd => self.amd,
            Vendor::Nvidia => self.nvidia,
        }
    }
}

/// What a file, or one rule's group of its modules, means for a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    /// Every module has an image for it.
    Loads,
    /// Some modules have no image for it, which their runtime allows.
    Partly,
    /// GPU code for other GPUs only: the device does not load it.
    ForOtherGpus,
    /// It cannot run on the device.
    Fails,
}

impl Verdict {
    /// Its name in reports: `loads`, `partly`, `for-other-gpus`, `fails`.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Loads => "loads",
            Verdict::Partly => "partly",
            Verdict::ForOtherGpus => "for-other-gpus",
            Verdict::Fails => "fails",
        }
    }
}

/// The verdict for one device on the modules one rule governs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// The rule.
    pub rule: Rule,
    /// What its modules mean for the device.
    pub verdict: Verdict,
    /// Its modules with code of the device's vendor, whatever is left in
    /// them: the same for every device of that vendor.
    pub modules: usize,
    /// How many of them are kernel-less stubs, which no device needs an
    /// image of (never counted as without one).
    pub kernel_less: usize,
    /// How many of them have no image for the device.
    pub without_image: usize,
    /// The first module without one (an index into the file's modules).
    pub first_without: Option<usize>,
    /// How many device-link stubs have no image of their own for the
    /// device but are linked for it from their inputs (counted as having
    /// one).
    pub linked: usize,
}

impl Group {
    /// The group's verdict in words, for `device`.
    pub fn why(&self, device: &str) -> String {
        let why = match self.linked {
            0 => self.why_needed(device),
            1 => format!(
                "{}; 1 device-link stub has it by linking its objects' code at load, as libcudart does",
                self.why_needed(device)
            ),
            k => format!(
                "{}; {k} device-link stubs have it by linking their objects' code at load, as libcudart does",
                self.why_needed(device)
            ),
        };
        match self.kernel_less {
            0 => why,
            1 => format!("{why} (and 1 kernel-less stub, which needs none)"),
            k => format!("{why} (and {k} kernel-less stubs, which need none)"),
        }
    }

    /// [`Self::why`] of the modules with kernels.
    fn why_needed(&self, device: &str) -> String {
        let (n, without) = (self.modules - self.kernel_less, self.without_image);
        let unit = if n == 1 { "module" } else { "modules" };
        let have = if without == 1 { "has" } else { "have" };
        match self.verdict {
            Verdict::Loads if n == 1 => format!("its one module has an image for {device}"),
            Verdict::Loads => format!("all {n} modules have an image for {device}"),
            Verdict::ForOtherGpus => {
                format!("GPU code for other GPUs only: {device} does not load it")
            }
            Verdict::Fails if self.rule.registered() => format!(
                "{without} of {n} {unit} {have} no image for {device}: {}",
                self.rule.consequence()
            ),
            Verdict::Fails if n == 1 => {
                format!("its one module has no image for {device}: no kernel of it can run there")
            }
            Verdict::Fails => format!(
                "none of its {n} modules has an image for {device}: no kernel of them can run there"
            ),
            Verdict::Partly => format!(
                "{without} of {n} {unit} {have} no image for {device}, which its runtime allows: {}",
                self.rule.consequence()
            ),
        }
    }
}

/// A file's verdict for one device: the worst of its groups'.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileVerdict {
    /// The file's verdict.
    pub verdict: Verdict,
    /// One per rule that governs modules of the device's vendor, in
    /// [`RULES`] order.
    pub groups: Vec<Group>,
}

/// The rules in the order groups are reported.
pub const RULES: [Rule; 5] = [Rule::Hip, Rule::Openmp, Rule::Cuda, Rule::Data, Rule::File];

/// The verdict of a file of `modules` for a device of `vendor`, where
/// `has_image(i)` says whether module `i` has an image for it; `None` where
/// no module holds code of that vendor. A group of modules registered at
/// start-up (HIP, OpenMP) fails if any lacks an image; one the CUDA runtime
/// or the program loads when needed (CUDA, data) fails only if all do, and
/// is partly served if some do (a data group none of whose modules fits is
/// partly served where the file's CUDA modules run); per-GPU files without
/// an image are for other GPUs. A file with modules of several groups and
/// one group for other GPUs is partly served.
///
/// An `-rdc` program's inputs ([`Link::Input`]) are no group's modules; a
/// stub ([`Link::Stub`]) without an image has one where the file's inputs
/// of the vendor all have one (the runtime links them for the device).
pub fn judge(
    modules: &[Module],
    vendor: Vendor,
    has_image: impl Fn(usize) -> bool,
) -> Option<FileVerdict> {
    let mut inputs = (0..modules.len())
        .filter(|&i| modules[i].link == Link::Input && modules[i].targets(vendor))
        .peekable();
    let linkable = inputs.peek().is_some() && inputs.all(&has_image);
    let linked = |i: usize| linkable && modules[i].link == Link::Stub && !has_image(i);
    let has = |i: usize| has_image(i) || linked(i);
    let mut groups: Vec<Group> = RULES
        .iter()
        .filter_map(|&rule| group(modules, vendor, rule, &has, &linked))
        .collect();
    // Modules kept among host data are loaded when the program chooses: a
    // library whose CUDA modules run picks among them the ones that fit
    // (cuSPARSELt keeps Hopper-only kernels as data beside modules for
    // every GPU), so none of them fitting fails the file only on its own.
    let cuda_runs = groups
        .iter()
        .any(|g| g.rule == Rule::Cuda && g.without_image < g.modules - g.kernel_less);
    for g in &mut groups {
        if g.rule == Rule::Data && g.verdict == Verdict::Fails && cuda_runs {
            g.verdict = Verdict::Partly;
        }
    }
    let worst = groups.iter().map(|g| g.verdict).max()?;
    let verdict = match worst {
        Verdict::ForOtherGpus if groups.iter().any(|g| g.verdict != worst) => Verdict::Partly,
        v => v,
    };
    Some(FileVerdict { verdict, groups })
}

fn group(
    modules: &[Module],
    vendor: Vendor,
    rule: Rule,
    has_image: &impl Fn(usize) -> bool,
    linked: &impl Fn(usize) -> bool,
) -> Option<Group> {
    let mine: Vec<usize> = (0..modules.len())
        .filter(|&i| {
            modules[i].rule == rule && modules[i].targets(vendor) && modules[i].link != Link::Input
        })
        .collect();
    // Modules with kernels: those a device can lack.
    let needed: Vec<usize> = mine
        .iter()
        .copied()
        .filter(|&i| !modules[i].kernel_less)
        .collect();
    if needed.is_empty() {
        return None;
    }
    let without: Vec<usize> = needed.iter().copied().filter(|&i| !has_image(i)).collect();
    let (n, w) = (needed.len(), without.len());
    let verdict = match rule {
        _ if w == 0 => Verdict::Loads,
        Rule::Hip | Rule::Openmp => Verdict::Fails,
        Rule::Cuda | Rule::Data if w == n => Verdict::Fails,
        Rule::File if w == n => Verdict::ForOtherGpus,
        _ => Verdict::Partly,
    };
    Some(Group {
        rule,
        verdict,
        modules: mine.len(),
        kernel_less: mine.len() - n,
        without_image: w,
        first_without: without.first().copied(),
        linked: needed.iter().filter(|&&i| linked(i)).count(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(rule: Rule, kernel_less: bool) -> Module {
        Module {
            rule,
            amd: false,
            nvidia: true,
            kernel_less,
            link: Link::None,
        }
    }

    #[test]
    fn stubs_are_linked_from_their_inputs() {
        let stub = Module {
            link: Link::Stub,
            ..m(Rule::Cuda, false)
        };
        let input = Module {
            link: Link::Input,
            ..m(Rule::Cuda, false)
        };
        let alone = m(Rule::Cuda, false);
        // A stub and two inputs: the stub with no image of its own loads
        // where both inputs have one; the inputs are no modules.
        let file = [stub, input, input];
        let v = judge(&file, Vendor::Nvidia, |i| i != 0).unwrap();
        assert_eq!(v.verdict, Verdict::Loads);
        assert_eq!((v.groups[0].modules, v.groups[0].linked), (1, 1));
        assert!(v.groups[0]
            .why("sm_90")
            .contains("1 device-link stub has it by linking"));
        // One input without: nothing to link, the stub has no image.
        let v = judge(&file, Vendor::Nvidia, |i| i == 1).unwrap();
        assert_eq!((v.verdict, v.groups[0].linked), (Verdict::Fails, 0));
        // The stub's own image needs no link.
        let v = judge(&file, Vendor::Nvidia, |i| i == 0).unwrap();
        assert_eq!((v.verdict, v.groups[0].linked), (Verdict::Loads, 0));
        // A module that is no stub is never served by the inputs.
        let v = judge(&[stub, alone, input], Vendor::Nvidia, |i| i == 2).unwrap();
        assert_eq!(
            (v.verdict, v.groups[0].without_image, v.groups[0].linked),
            (Verdict::Partly, 1, 1)
        );
        // Inputs alone (an object's code in a linked file with no stub):
        // no module, no verdict.
        assert_eq!(judge(&[input], Vendor::Nvidia, |_| true), None);
    }

    #[test]
    fn groups_by_rule_and_the_worst_decides() {
        // libtorch_cuda.so's shape: CUDA modules and modules kept as data.
        let mut modules = vec![m(Rule::Cuda, false); 4];
        modules.extend([m(Rule::Data, false); 2]);
        modules.push(m(Rule::Cuda, true));
        let v = judge(&modules, Vendor::Nvidia, |i| i != 1).unwrap();
        assert_eq!(v.verdict, Verdict::Partly);
        assert_eq!(v.groups.len(), 2);
        assert_eq!(
            (
                v.groups[0].rule,
                v.groups[0].modules,
                v.groups[0].without_image
            ),
            (Rule::Cuda, 5, 1)
        );
        assert_eq!(v.groups[0].first_without, Some(1));
        assert_eq!(v.groups[1].verdict, Verdict::Loads);
        // No module kept as data fits, but CUDA modules run: the program
        // picks what fits.
        let v = judge(&modules, Vendor::Nvidia, |i| i < 4).unwrap();
        assert_eq!(
            (v.verdict, v.groups[1].verdict),
            (Verdict::Partly, Verdict::Partly)
        );
        // Every CUDA module emptied: the file fails, whatever the data does.
        let v = judge(&modules, Vendor::Nvidia, |i| i >= 4).unwrap();
        assert_eq!(v.verdict, Verdict::Fails);
        assert_eq!(
            v.groups[0].why("sm_80"),
            "none of its 4 modules has an image for sm_80: no kernel of them can run there \
             (and 1 kernel-less stub, which needs none)"
        );
        // The stub counts as a module, the same for every device, and never
        // as one without an image.
        for has in [true, false] {
            let v = judge(&modules, Vendor::Nvidia, |_| has).unwrap();
            let total: usize = v.groups.iter().map(|g| g.modules).sum();
            assert_eq!((total, v.groups[0].kernel_less), (7, 1));
            assert_eq!(v.groups[0].without_image, if has { 0 } else { 4 });
        }
        // A group of stubs alone needs nothing: no verdict.
        assert_eq!(
            judge(&[m(Rule::Cuda, true)], Vendor::Nvidia, |_| false),
            None
        );
        assert_eq!(judge(&modules, Vendor::Amd, |_| true), None);
    }

    #[test]
    fn registered_modules_fail_on_one_without_and_files_are_for_others() {
        let hip = Module {
            rule: Rule::Hip,
            amd: true,
            nvidia: false,
            kernel_less: false,
            link: Link::None,
        };
        let file = Module {
            rule: Rule::File,
            ..hip
        };
        let v = judge(&[hip, hip], Vendor::Amd, |i| i == 0).unwrap();
        assert_eq!((v.verdict, v.groups[0].without_image), (Verdict::Fails, 1));
        let v = judge(&[file, file], Vendor::Amd, |_| false).unwrap();
        assert_eq!(v.verdict, Verdict::ForOtherGpus);
        let v = judge(&[file, hip], Vendor::Amd, |i| i == 1).unwrap();
        assert_eq!(v.verdict, Verdict::Partly);
        let v = judge(&[file, file], Vendor::Amd, |i| i == 1).unwrap();
        assert_eq!(v.verdict, Verdict::Partly);
    }
}
