//! What a missing image means, by the rule of the runtime that loads the
//! container ([`Rule`], shared with `slim`): a verdict per file and device,
//! which the report, `--json` and the exit status share.

pub use offload_loader::rule::Rule;
use serde::{Serialize, Serializer};

use crate::report::{targets_vendor, ContainerReport, DeviceRow, ObjectReport};

/// A rule as `--json` writes it: its name.
pub fn rule_name<S: Serializer>(rule: &Rule, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(rule.name())
}

/// An optional rule as `--json` writes it: its name, or `null`.
pub fn optional_rule_name<S: Serializer>(rule: &Option<Rule>, s: S) -> Result<S::Ok, S::Error> {
    match rule {
        Some(r) => s.serialize_str(r.name()),
        None => s.serialize_none(),
    }
}

/// What a file means for a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Every container with code of the device's vendor has an image for it.
    Loads,
    /// Some modules have no image for it, which their runtime allows.
    Partly,
    /// It cannot run on the device (exit status 1).
    Fails,
    /// GPU code for other GPUs only: these devices do not load it.
    ForOtherGpus,
}

/// One file's verdict for one device.
#[derive(Debug, Serialize)]
pub struct VerdictRow {
    /// Index into the report's devices.
    pub device: usize,
    pub verdict: Verdict,
    /// The rule that decided it.
    #[serde(serialize_with = "rule_name")]
    pub rule: Rule,
    /// Containers with code of the device's vendor, and how many of them have no image for it.
    pub containers: usize,
    pub without_image: usize,
    /// The verdict in words.
    pub why: String,
}

/// The verdict of `object` for each of `devices` that it has code for.
pub fn of(object: &ObjectReport, devices: &[DeviceRow]) -> Vec<VerdictRow> {
    devices
        .iter()
        .enumerate()
        .filter_map(|(d, device)| verdict(object, d, device))
        .collect()
}

fn verdict(object: &ObjectReport, d: usize, device: &DeviceRow) -> Option<VerdictRow> {
    let mine: Vec<&ContainerReport> = object
        .containers
        .iter()
        .filter(|c| c.error.is_none() && !c.kernel_less && targets_vendor(c, device))
        .collect();
    if mine.is_empty() {
        return None;
    }
    let has = |c: &&&ContainerReport| c.selected[d].image.is_some();
    let count = |rules: &[Rule]| {
        let of: Vec<&&ContainerReport> = mine
            .iter()
            .filter(|c| c.rule.is_some_and(|r| rules.contains(&r)))
            .collect();
        let without = of.iter().filter(|c| !has(c)).count();
        (of.len(), without)
    };
    let row =
        |verdict, rule, (containers, without_image): (usize, usize), why: String| VerdictRow {
            device: d,
            verdict,
            rule,
            containers,
            without_image,
            why,
        };
    let target = &device.target_id;
    // Registered at start-up: one without an image is a failure.
    for rule in [Rule::Hip, Rule::Openmp] {
        let (n, without) = count(&[rule]);
        if without > 0 {
            let why = format!(
                "{without} of {n} containers have no image for {target}: {}",
                rule.consequence()
            );
            return Some(row(Verdict::Fails, rule, (n, without), why));
        }
    }
    // Modules the program or the CUDA runtime loads when needed.
    let (n, without) = count(&[Rule::Cuda, Rule::Data]);
    if n > 0 && without == n {
        let rule = if count(&[Rule::Data]).0 == n {
            Rule::Data
        } else {
            Rule::Cuda
        };
        let why = format!(
            "none of its {n} modules has an image for {target}: no kernel of it can run there"
        );
        return Some(row(Verdict::Fails, rule, (n, without), why));
    }
    let (files, files_without) = count(&[Rule::File]);
    if files == mine.len() && files_without == files {
        let why = format!("GPU code for other GPUs only: {target} does not load it");
        return Some(row(
            Verdict::ForOtherGpus,
            Rule::File,
            (files, files_without),
            why,
        ));
    }
    let (all, all_without) = (mine.len(), without + files_without);
    // The rule of the first container without an image (or of the first).
    let rule = mine
        .iter()
        .find(|c| !has(c))
        .or(mine.first())
        .and_then(|c| c.rule)
        .unwrap_or(Rule::Cuda);
    if all_without == 0 {
        let why = format!("every container has an image for {target}");
        return Some(row(Verdict::Loads, rule, (all, 0), why));
    }
    let why = format!(
        "{all_without} of {all} modules have no image for {target}, which its runtime allows: {}",
        rule.consequence()
    );
    Some(row(Verdict::Partly, rule, (all, all_without), why))
}
