//! Device names as people write them: NVIDIA architectures in their common
//! spellings (`sm90`, `SM_90`, `90`, `9.0`), product names (`H100`,
//! `AMD Instinct MI300X`, `GeForce RTX 4090`), the labels tools print before
//! a name (rocminfo's `Name:` and `Marketing Name:`), and the nearest known
//! names when a name is not understood.
//!
//! [`crate::select::DeviceTarget::parse`] is the one parser of a device; this
//! module holds the product tables and the matching it does with them.

use std::collections::HashSet;

use super::amd_products::AMD_PRODUCTS;
use super::nvidia_products::NVIDIA_PRODUCTS;
use super::rocm_products::ROCM_PRODUCTS;
use super::{ComputeCapability, NvArch, Processor, TargetIdError, Vendor};

/// A product and the architecture its GPU has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Product {
    /// The name as its source writes it, e.g. `AMD Instinct MI300X`.
    pub name: &'static str,
    /// Its architecture, canonical: an AMDGPU processor (`gfx942`) or an
    /// NVIDIA compute capability (`sm_90`).
    pub target: &'static str,
}

/// `a` followed by `b`, `N` long (their lengths together).
const fn concat<const N: usize>(a: &[Product], b: &[Product]) -> [Product; N] {
    let mut out = [Product {
        name: "",
        target: "",
    }; N];
    let mut i = 0;
    while i < a.len() {
        out[i] = a[i];
        i += 1;
    }
    while i < N {
        out[i] = b[i - a.len()];
        i += 1;
    }
    out
}

/// AMD's products from both of its sources, LLVM's table first.
static AMD: [Product; AMD_PRODUCTS.len() + ROCM_PRODUCTS.len()] =
    concat(AMD_PRODUCTS, ROCM_PRODUCTS);

impl Product {
    /// AMD's products: the "Example Products" of LLVM 22's AMDGPUUsage
    /// processor table, then the products of ROCm's GPU specifications
    /// (Instinct, Radeon PRO, Radeon and Ryzen APUs, with their LLVM
    /// targets). A name both tables give is in both; were they to give it
    /// different processors, it would be ambiguous (none is today).
    pub fn amd() -> &'static [Product] {
        &AMD
    }

    /// NVIDIA's products: NVIDIA's CUDA GPUs list.
    pub fn nvidia() -> &'static [Product] {
        NVIDIA_PRODUCTS
    }

    /// Every product of every table, with its vendor.
    pub fn all() -> impl Iterator<Item = (Vendor, &'static Product)> {
        let amd = Product::amd().iter().map(|p| (Vendor::Amd, p));
        amd.chain(NVIDIA_PRODUCTS.iter().map(|p| (Vendor::Nvidia, p)))
    }
}

/// Words that name a vendor or a product line rather than a product, dropped
/// before matching: `AMD Instinct MI300X` is `MI300X`.
const VENDOR_WORDS: &[&str] = &[
    "amd",
    "nvidia",
    "geforce",
    "radeon",
    "instinct",
    "accelerator",
    "tesla",
];

/// Words dropped from AMD names only: AMD's `PRO` marks a line
/// (`Radeon PRO W7900` is the W7900), while NVIDIA's `RTX PRO 6000` is not
/// its `Quadro RTX 6000`.
const AMD_WORDS: &[&str] = &["pro"];

/// Words that describe a board rather than its GPU (form factor, memory),
/// as `nvidia-smi` prints them: `NVIDIA H100 80GB HBM3`, `NVIDIA A100-SXM4-80GB`.
const BOARD_WORDS: &[&str] = &[
    "pcie",
    "sxm",
    "sxm2",
    "sxm3",
    "sxm4",
    "sxm5",
    "sxm6",
    "nvl",
    "oam",
    "gpu",
    "generation",
    "gb",
    "hbm",
    "hbm2",
    "hbm2e",
    "hbm3",
    "hbm3e",
    "gddr6",
    "gddr6x",
    "gddr7",
];

/// The labels tools print before a name: rocminfo's `Marketing Name:` and `Name:`.
const LABELS: &[&str] = &["marketing name:", "name:"];

/// `s` without surrounding white space and without a tool's label before it
/// (`Name: gfx90a` is `gfx90a`).
pub(crate) fn strip_label(s: &str) -> &str {
    let trimmed = s.trim();
    LABELS
        .iter()
        .find_map(|label| {
            let head = trimmed.get(..label.len())?;
            head.eq_ignore_ascii_case(label)
                .then(|| trimmed[label.len()..].trim())
        })
        .unwrap_or(trimmed)
}

/// The words of a name, lower-cased: split at white space, `-`, `_`,
/// parentheses and commas.
fn words(name: &str) -> Vec<String> {
    name.split(|c: char| c.is_whitespace() || matches!(c, '-' | '_' | '(' | ')' | ','))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Whether `word` is all ASCII digits (and not empty).
fn is_number(word: &str) -> bool {
    !word.is_empty() && word.bytes().all(|b| b.is_ascii_digit())
}

/// Whether `word` is a memory size such as `80gb`.
fn is_memory_size(word: &str) -> bool {
    word.strip_suffix("gb").is_some_and(is_number)
}

/// The key a name of `vendor` matches under: its words without vendor, line
/// and board words, joined. `NVIDIA H100 80GB HBM3`, `h100` and `H 100` all
/// have the key `h100`.
pub(crate) fn key(name: &str, vendor: Vendor) -> String {
    let words = words(name);
    let dropped = |i: usize, word: &str| {
        let before_gb = words.get(i + 1).is_some_and(|next| next == "gb");
        VENDOR_WORDS.contains(&word)
            || BOARD_WORDS.contains(&word)
            || (vendor == Vendor::Amd && AMD_WORDS.contains(&word))
            || is_memory_size(word)
            || (before_gb && is_number(word))
    };
    words
        .iter()
        .enumerate()
        .filter(|(i, word)| !dropped(*i, word))
        .map(|(_, word)| unglued(word, vendor))
        .collect()
}

/// `word` without the vendor and line words glued before it:
/// `geforcertx4090` is `rtx4090`, `amdinstinctmi300x` is `mi300x`.
fn unglued(mut word: &str, vendor: Vendor) -> &str {
    let amd: &[&str] = if vendor == Vendor::Amd {
        AMD_WORDS
    } else {
        &[]
    };
    while let Some(rest) = VENDOR_WORDS
        .iter()
        .chain(amd)
        .find_map(|v| word.strip_prefix(v).filter(|rest| !rest.is_empty()))
    {
        word = rest;
    }
    word
}

/// The products whose key is `name`'s.
fn products_named(name: &str) -> Vec<&'static Product> {
    Product::all()
        .filter(|(vendor, product)| {
            let wanted = key(name, *vendor);
            !wanted.is_empty() && key(product.name, *vendor) == wanted
        })
        .map(|(_, product)| product)
        .collect()
}

/// The architecture of the product `name` names: `Ok(None)` when it names
/// none, an error when it names products of different architectures. A name
/// with `/` that names nothing whole is read as alternatives, as rocminfo
/// writes `AMD Instinct MI250X/MI250`: they must agree.
pub(crate) fn product_target(name: &str) -> Result<Option<&'static str>, TargetIdError> {
    let mut found = products_named(name);
    if found.is_empty() && name.contains('/') {
        found = name.split('/').flat_map(products_named).collect();
    }
    let mut distinct: Vec<&Product> = Vec::new();
    for product in found {
        if !distinct.iter().any(|p| p.target == product.target) {
            distinct.push(product);
        }
    }
    match distinct.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one.target)),
        several => Err(TargetIdError::AmbiguousDevice {
            name: name.into(),
            candidates: several
                .iter()
                .map(|p| format!("{} ({})", p.name, p.target))
                .collect(),
        }),
    }
}

/// How an NVIDIA architecture is written, if `lower` (lower-cased) is one:
/// `sm_90`, `sm90`, `sm_90a`, `90`, `100`, `9.0`, `12.1`, or PTX
/// (`compute_90`, `compute90`), which names code rather than a device. `None`
/// for a name that is none of these; an error for one that starts like one
/// and is malformed (`sm_9x`, `9.10`). `written` is the name as given, for errors.
pub(crate) fn nvidia_arch(
    lower: &str,
    written: &str,
) -> Option<Result<ComputeCapability, TargetIdError>> {
    let bad = || TargetIdError::BadNvptxArch(written.into());
    if let Some(rest) = lower.strip_prefix("compute") {
        let rest = rest.strip_prefix('_').unwrap_or(rest);
        return Some(ptx_is_not_a_device(rest, written));
    }
    if let Some(rest) = lower.strip_prefix("sm") {
        let rest = rest.strip_prefix('_').unwrap_or(rest);
        let arch = NvArch::parse(&format!("sm_{rest}")).map_err(|_| bad());
        return Some(arch.map(|a| a.capability));
    }
    if is_number(lower) {
        let arch = NvArch::parse(&format!("sm_{lower}")).map_err(|_| bad());
        return Some(arch.map(|a| a.capability));
    }
    if lower.contains('.') && lower.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Some(capability(lower).ok_or_else(bad));
    }
    None
}

/// The refusal of PTX `compute_<rest>` as a device, with the device to write.
fn ptx_is_not_a_device(rest: &str, written: &str) -> Result<ComputeCapability, TargetIdError> {
    let arch = NvArch::parse(&format!("compute_{rest}"))
        .map_err(|_| TargetIdError::BadNvptxArch(written.into()))?;
    Err(TargetIdError::NotADevice {
        name: written.into(),
        hint: format!(
            "PTX, which a device compiles for itself; write the device's compute capability, {}",
            arch.capability
        ),
    })
}

/// A compute capability written `major.minor` (`9.0`, `12.1`), as
/// `nvidia-smi --query-gpu=compute_cap` prints it.
fn capability(s: &str) -> Option<ComputeCapability> {
    let (major, minor) = s.split_once('.')?;
    let number = |d: &str| {
        (d.len() <= 2 && is_number(d))
            .then(|| d.parse::<u8>().ok())
            .flatten()
    };
    match (number(major)?, number(minor)?) {
        (major, minor) if major > 0 && minor <= 9 => Some(ComputeCapability { major, minor }),
        _ => None,
    }
}

/// Whether `lower` (lower-cased, a target ID's processor part) is written as
/// an AMDGPU processor: `gfx…`, or a legacy alias such as `fiji`.
pub(crate) fn looks_like_amdgpu_processor(lower: &str) -> bool {
    let processor = lower.split(':').next().unwrap_or_default();
    processor.starts_with("gfx") || Processor::lookup(processor).is_some()
}

/// How many suggestions an unknown name gets at most.
const SUGGESTIONS: usize = 3;

/// The known names nearest `name`, best first, at most [`SUGGESTIONS`]:
/// products (shown with their architecture) and AMDGPU processors, by edit
/// distance between keys, a name that begins the other counting as one edit.
pub(crate) fn suggestions(name: &str) -> Vec<String> {
    let wanted = [key(name, Vendor::Amd), key(name, Vendor::Nvidia)];
    let limit = (wanted[1].chars().count() / 3).clamp(1, 3);
    let mut scored: Vec<(usize, String)> = candidates()
        .filter_map(|(vendor, candidate, shown)| {
            let wanted = &wanted[usize::from(vendor == Vendor::Nvidia)];
            let score = nearness(wanted, &candidate);
            (score <= limit).then_some((score, shown))
        })
        .collect();
    scored.sort_by_key(|(score, _)| *score);
    let mut out: Vec<String> = Vec::new();
    for (_, shown) in scored {
        if out.len() < SUGGESTIONS && !out.contains(&shown) {
            out.push(shown);
        }
    }
    out
}

/// Every name a device can be given by, as (vendor, key, how it is shown):
/// products and the specific (not generic) AMDGPU processors and aliases.
/// A product two tables name alike (`AMD Instinct MI210 Accelerator` and
/// `MI210`, both gfx90a) is offered once, as the first table writes it.
fn candidates() -> impl Iterator<Item = (Vendor, String, String)> {
    let mut seen = HashSet::new();
    let products = Product::all().filter_map(move |(vendor, p)| {
        let key = key(p.name, vendor);
        let shown = format!("{} ({})", p.name, p.target);
        seen.insert((vendor, key.clone(), p.target))
            .then_some((vendor, key, shown))
    });
    let processors = Processor::all()
        .iter()
        .filter(|p| !p.is_generic())
        .flat_map(|p| std::iter::once(p.name).chain(p.aliases.iter().copied()))
        .map(|name| (Vendor::Amd, name.to_string(), name.to_string()));
    products.chain(processors)
}

/// How far `wanted` is from `candidate`: their edit distance, or 1 where one
/// begins the other (`rtx4090super`, `mi300`), if that is nearer.
fn nearness(wanted: &str, candidate: &str) -> usize {
    let prefix = wanted.len().min(candidate.len()) >= 2
        && (wanted.starts_with(candidate) || candidate.starts_with(wanted));
    let distance = edit_distance(wanted.as_bytes(), candidate.as_bytes());
    if prefix {
        distance.min(1)
    } else {
        distance
    }
}

/// The optimal-string-alignment distance: insertions, deletions,
/// substitutions and transpositions of neighbours (`4900` → `4090`) cost 1.
fn edit_distance(a: &[u8], b: &[u8]) -> usize {
    let width = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * width];
    for (i, row) in d.chunks_mut(width).enumerate() {
        row[0] = i;
    }
    for (j, cell) in d.iter_mut().take(width).enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[(i - 1) * width + j] + 1)
                .min(d[i * width + j - 1] + 1)
                .min(d[(i - 1) * width + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[(i - 2) * width + j - 2] + 1);
            }
            d[i * width + j] = best;
        }
    }
    d[a.len() * width + b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::select::DeviceTarget;

    fn parse(s: &str) -> String {
        DeviceTarget::parse(s)
            .unwrap_or_else(|e| panic!("{s}: {e}"))
            .to_string()
    }

    fn error(s: &str) -> String {
        DeviceTarget::parse(s).unwrap_err().to_string()
    }

    /// Every product of every table (LLVM's and ROCm's for AMD, NVIDIA's) is
    /// the device of its architecture, as written and as
    /// `nvidia-smi`/`rocminfo` would print it.
    #[test]
    fn every_product_is_its_architecture() {
        assert!(Product::amd().len() > 200 && Product::nvidia().len() > 100);
        for (vendor, product) in Product::all() {
            let arch = DeviceTarget::parse(product.target).unwrap();
            assert_eq!(arch.vendor(), vendor, "{}", product.name);
            assert_eq!(arch.to_string(), product.target, "{}", product.name);
            let prefix = match vendor {
                Vendor::Amd => "Marketing Name:    AMD",
                Vendor::Nvidia => "NVIDIA",
            };
            for spelling in [
                product.name.to_string(),
                product.name.to_uppercase(),
                product.name.replace(' ', "  "),
                product.name.replace(' ', "-"),
                format!("{prefix} {}", product.name),
            ] {
                assert_eq!(
                    DeviceTarget::parse(&spelling).map_err(|e| e.to_string()),
                    Ok(arch),
                    "{spelling}"
                );
            }
        }
    }

    /// No two products of different architectures share a key, so no table
    /// name is ambiguous.
    #[test]
    fn product_keys_are_unambiguous() {
        for (vendor, product) in Product::all() {
            assert_eq!(
                product_target(product.name),
                Ok(Some(product.target)),
                "{vendor:?} {}",
                product.name
            );
        }
        // AMD AMDGPU processors and aliases are no product's key.
        for p in Processor::all() {
            assert_eq!(product_target(p.name), Ok(None), "{}", p.name);
        }
    }

    /// `Product::amd()` is LLVM's table, then ROCm's, each product on a
    /// specific processor of the processor table; where both tables name a
    /// product, they agree on its processor.
    #[test]
    fn amd_products_are_llvm_then_rocm() {
        let amd = Product::amd();
        assert!(AMD_PRODUCTS.len() > 100 && ROCM_PRODUCTS.len() > 90);
        assert_eq!(amd.len(), AMD_PRODUCTS.len() + ROCM_PRODUCTS.len());
        assert_eq!(&amd[..AMD_PRODUCTS.len()], AMD_PRODUCTS);
        assert_eq!(&amd[AMD_PRODUCTS.len()..], ROCM_PRODUCTS);
        for product in amd {
            let processor = Processor::lookup(product.target);
            assert!(
                processor.is_some_and(|p| p.name == product.target && !p.is_generic()),
                "{} ({})",
                product.name,
                product.target
            );
        }
        let mut shared = 0;
        for rocm in ROCM_PRODUCTS {
            let wanted = key(rocm.name, Vendor::Amd);
            for llvm in AMD_PRODUCTS {
                if key(llvm.name, Vendor::Amd) == wanted {
                    assert_eq!(llvm.target, rocm.target, "{} / {}", llvm.name, rocm.name);
                    shared += 1;
                }
            }
        }
        assert!(shared > 20, "{shared}");
    }

    /// The names of current products (issue 35): AMD's from ROCm's table,
    /// NVIDIA's Blackwell parts.
    #[test]
    fn current_products() {
        for (typed, device) in [
            ("MI355X", "gfx950"),
            ("AMD Instinct MI355X", "gfx950"),
            ("Marketing Name:          AMD Instinct MI355X", "gfx950"),
            ("mi355x", "gfx950"),
            ("MI350X", "gfx950"),
            ("AMD Instinct MI350X", "gfx950"),
            ("MI350P", "gfx950"),
            ("MI325X", "gfx942"),
            ("AMD Instinct MI325X", "gfx942"),
            ("MI300X", "gfx942"),
            ("MI300A", "gfx942"),
            ("MI250X", "gfx90a"),
            ("MI50 (32GB)", "gfx906"),
            ("Radeon RX 9070 XT", "gfx1201"),
            ("AMD Radeon RX 9070 GRE", "gfx1201"),
            ("RX 9070", "gfx1201"),
            ("Radeon RX 9060 XT", "gfx1200"),
            ("Radeon RX 9060 XT LP", "gfx1200"),
            ("Radeon RX 9060", "gfx1200"),
            ("Radeon RX 9050", "gfx1200"),
            ("Radeon RX 9050 (4GB)", "gfx1200"),
            ("Radeon AI PRO R9700", "gfx1201"),
            ("AMD Radeon AI PRO R9700S", "gfx1201"),
            ("Radeon AI PRO R9600D", "gfx1201"),
            ("Radeon PRO V710", "gfx1101"),
            ("Radeon PRO W7800 48GB", "gfx1100"),
            ("W7700", "gfx1101"),
            ("RX 7900 XTX", "gfx1100"),
            ("AMD Ryzen AI Max+ 395", "gfx1151"),
            ("Ryzen AI Max PRO 390", "gfx1151"),
            ("Ryzen AI 9 HX 370", "gfx1150"),
            ("AMD Ryzen AI 7 350", "gfx1152"),
            ("AMD Ryzen 7 7840U", "gfx1103"),
            ("Radeon 8060S", "gfx1151"),
            ("AMD Radeon 780M", "gfx1103"),
            ("B300", "sm_103"),
            ("NVIDIA B300", "sm_103"),
            ("GB300", "sm_103"),
            ("B200", "sm_100"),
            ("RTX PRO 6000 Blackwell", "sm_120"),
            ("NVIDIA RTX PRO 6000 Blackwell", "sm_120"),
            (
                "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
                "sm_120",
            ),
            ("RTX PRO 4500 Blackwell Server Edition", "sm_120"),
            ("RTX PRO 2000 Blackwell", "sm_120"),
            ("RTX 5090", "sm_120"),
            ("NVIDIA GeForce RTX 5060 Ti", "sm_120"),
            ("RTX 5050", "sm_120"),
            ("GB10", "sm_121"),
            ("DGX Spark", "sm_121"),
            ("Jetson T5000", "sm_110"),
            ("Jetson T4000", "sm_110"),
        ] {
            assert_eq!(parse(typed), device, "{typed}");
        }
        // A product both AMD tables name is suggested once, as LLVM writes it.
        let e = error("MI21");
        assert!(e.contains("AMD Instinct MI210 Accelerator (gfx90a)"), "{e}");
        assert_eq!(e.matches("MI210").count(), 1, "{e}");
        let e = error("MI355");
        assert!(e.contains("did you mean MI355X (gfx950)"), "{e}");
    }

    #[test]
    fn nvidia_spellings() {
        for (typed, device) in [
            ("sm_90", "sm_90"),
            ("sm90", "sm_90"),
            ("SM_90", "sm_90"),
            ("Sm90a", "sm_90"),
            ("90", "sm_90"),
            ("9.0", "sm_90"),
            ("100", "sm_100"),
            ("sm_100f", "sm_100"),
            ("12.1", "sm_121"),
            ("  8.6 ", "sm_86"),
            ("H100", "sm_90"),
            ("h100", "sm_90"),
            ("NVIDIA H100 80GB HBM3", "sm_90"),
            ("NVIDIA H100 PCIe", "sm_90"),
            ("NVIDIA H100 NVL", "sm_90"),
            ("NVIDIA A100-SXM4-80GB", "sm_80"),
            ("NVIDIA A100 80 GB PCIe", "sm_80"),
            ("Tesla V100-SXM2-16GB", "sm_70"),
            ("Tesla T4", "sm_75"),
            ("A10", "sm_86"),
            ("A30", "sm_80"),
            ("A40", "sm_86"),
            ("L4", "sm_89"),
            ("L40S", "sm_89"),
            ("P100", "sm_60"),
            ("RTX 4090", "sm_89"),
            ("rtx4090", "sm_89"),
            ("GeForceRTX4090", "sm_89"),
            ("nvidia-h100", "sm_90"),
            ("GeForce RTX 4090", "sm_89"),
            ("NVIDIA GeForce RTX 3090", "sm_86"),
            ("RTX A6000", "sm_86"),
            ("NVIDIA RTX 6000 Ada Generation", "sm_89"),
            ("Quadro RTX 6000", "sm_75"),
            ("RTX PRO 6000 Blackwell Server Edition", "sm_120"),
            ("B200", "sm_100"),
            ("GB200", "sm_100"),
            ("NVIDIA GH200 480GB", "sm_90"),
            ("Jetson Orin", "sm_87"),
            ("Jetson AGX Orin", "sm_87"),
        ] {
            assert_eq!(parse(typed), device, "{typed}");
        }
    }

    #[test]
    fn amd_spellings() {
        for (typed, device) in [
            ("gfx90a:sramecc+:xnack-", "gfx90a:sramecc+:xnack-"),
            ("GFX90A:xnack-", "gfx90a:xnack-"),
            ("gfx1100", "gfx1100"),
            ("Name:                    gfx90a", "gfx90a"),
            ("Marketing Name:          AMD Instinct MI250X", "gfx90a"),
            ("AMD Instinct MI250X/MI250", "gfx90a"),
            ("MI300X", "gfx942"),
            ("mi300a", "gfx942"),
            ("AMD Instinct MI300X", "gfx942"),
            ("MI250X", "gfx90a"),
            ("MI210", "gfx90a"),
            ("MI100", "gfx908"),
            ("MI50", "gfx906"),
            ("MI60", "gfx906"),
            ("Radeon VII", "gfx906"),
            ("RX 7900 XTX", "gfx1100"),
            ("Radeon RX 7900 XTX", "gfx1100"),
            ("AMD Radeon RX 7900 XTX", "gfx1100"),
            ("RX 6800 XT", "gfx1030"),
            ("RX7900XTX", "gfx1100"),
            ("AMDInstinctMI300X", "gfx942"),
            ("RadeonPROW7900", "gfx1100"),
            ("W7900", "gfx1100"),
            ("AMD Radeon PRO W7900", "gfx1100"),
            ("Radeon Pro VII", "gfx906"),
            ("RX 9070 XT", "gfx1201"),
            ("fiji", "gfx803"),
        ] {
            assert_eq!(parse(typed), device, "{typed}");
        }
    }

    #[test]
    fn unknown_names_get_the_nearest_known_ones() {
        let e = error("H10");
        assert!(
            e.starts_with("`H10` is not a device name known here"),
            "{e}"
        );
        assert!(e.contains("did you mean NVIDIA H100 (sm_90)"), "{e}");
        assert!(
            error("RTX 4900").contains("GeForce RTX 4090 (sm_89)"),
            "{}",
            error("RTX 4900")
        );
        let e = error("MI300");
        assert!(e.contains("AMD Instinct MI300X (gfx942)"), "{e}");
        assert!(e.contains("AMD Instinct MI300A (gfx942)"), "{e}");
        let e = error("Radeon RX 7900 XTZ");
        assert!(e.contains("Radeon RX 7900 XTX (gfx1100)"), "{e}");
        let e = error("RTX 4080 SUPER");
        assert!(e.contains("GeForce RTX 4080 (sm_89)"), "{e}");
        // At most three, and none when nothing is near.
        assert!(e.matches(" (").count() <= 5, "{e}");
        let e = error("toaster");
        assert_eq!(
            e,
            "`toaster` is not a device name known here: write an AMDGPU processor (gfx90a), \
             an NVIDIA architecture (sm_90, 9.0) or a product (MI300X, H100)"
        );
    }

    #[test]
    fn nothing_nvidia_is_called_an_amd_processor() {
        for name in [
            "H1000",
            "sm_9x",
            "sm9",
            "compute_9x",
            "H10",
            "9.10",
            "RTX 40900",
            "1000",
        ] {
            let e = error(name);
            assert!(!e.contains("AMDGPU processor `"), "{name}: {e}");
        }
        // Names that look like AMD processors keep the precise message.
        assert_eq!(error("gfx9999"), "unknown AMDGPU processor `gfx9999`");
        assert_eq!(
            error("sm_9x"),
            "`sm_9x` is not an NVPTX architecture (sm_XY or compute_XY)"
        );
    }

    #[test]
    fn code_names_and_ambiguity_are_refused() {
        for ptx in ["compute_80", "COMPUTE_80", "compute80"] {
            assert!(error(ptx).contains("names code, not a device"), "{ptx}");
            assert!(error(ptx).ends_with("sm_80"), "{ptx}");
        }
        assert!(error("gfx11-generic").contains("names code, not a device"));
        assert_eq!(
            error("H100/A100"),
            "`H100/A100` names devices of different architectures: \
             NVIDIA H100 (sm_90), NVIDIA A100 (sm_80); write one of them"
        );
        assert_eq!(DeviceTarget::parse("  "), Err(TargetIdError::Empty));
        assert_eq!(DeviceTarget::parse("Name:"), Err(TargetIdError::Empty));
    }

    #[test]
    fn keys_and_distances() {
        assert_eq!(key("NVIDIA H100 80GB HBM3", Vendor::Nvidia), "h100");
        assert_eq!(key("AMD Radeon PRO W7900", Vendor::Amd), "w7900");
        assert_eq!(key("NVIDIA RTX PRO 6000", Vendor::Nvidia), "rtxpro6000");
        assert_eq!(edit_distance(b"rtx4900", b"rtx4090"), 1);
        assert_eq!(edit_distance(b"", b"abc"), 3);
        assert_eq!(edit_distance(b"kitten", b"sitting"), 3);
        assert_eq!(strip_label("Name: gfx90a"), "gfx90a");
        assert_eq!(strip_label("name:"), "");
        assert_eq!(strip_label("é"), "é");
    }
}
