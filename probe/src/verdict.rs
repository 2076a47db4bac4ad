//! The verdicts of a file as the report carries them: for each device it
//! has code for, the file's verdict and one per rule group, decided by
//! [`offload_loader::verdict`] (shared with `slim`); this module only shapes
//! them for `--json` and the human report.

pub use offload_loader::rule::Rule;
pub use offload_loader::verdict::Verdict;
use offload_loader::verdict::{judge, Group, Module};
use offload_loader::DeviceTarget;
use serde::{Serialize, Serializer};

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

/// A verdict as `--json` writes it: its name.
fn verdict_name<S: Serializer>(verdict: &Verdict, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(verdict.name())
}

/// One file's verdict for one device.
#[derive(Debug, Serialize)]
pub struct VerdictRow {
    /// Index into the report's devices.
    pub device: usize,
    #[serde(serialize_with = "verdict_name")]
    pub verdict: Verdict,
    /// The rule of the group that decided it (the worst group's).
    #[serde(serialize_with = "rule_name")]
    pub rule: Rule,
    /// Modules with code of the device's vendor, and how many of them have
    /// no image for it, over every group.
    pub containers: usize,
    pub without_image: usize,
    /// The verdict in words.
    pub why: String,
    /// One per rule that governs some of the file's modules.
    pub groups: Vec<GroupRow>,
}

/// The verdict on the modules one rule governs.
#[derive(Debug, Serialize)]
pub struct GroupRow {
    #[serde(serialize_with = "rule_name")]
    pub rule: Rule,
    #[serde(serialize_with = "verdict_name")]
    pub verdict: Verdict,
    /// Every module under the rule, kernel-less stubs included: the same
    /// for every device of the vendor.
    pub modules: usize,
    /// Of them, nvlink's kernel-less stubs, never without an image.
    pub kernel_less: usize,
    pub without_image: usize,
    /// Of them, `-rdc` device-link stubs with no image of their own that
    /// the runtime links for the device from their objects' code.
    pub linked_at_load: usize,
    pub why: String,
}

/// The verdict of a file of `modules` for each of `devices` that it has
/// code for; `has_image(m, d)` says whether module `m` has an image for
/// device `d`.
pub fn of(
    modules: &[Module],
    devices: &[DeviceTarget],
    has_image: impl Fn(usize, usize) -> bool,
) -> Vec<VerdictRow> {
    devices
        .iter()
        .enumerate()
        .filter_map(|(d, device)| {
            let file = judge(modules, device.vendor(), |m| has_image(m, d))?;
            let target = device.to_string();
            let groups: Vec<GroupRow> = file.groups.iter().map(|g| row(g, &target)).collect();
            let decided = decisive(&file.groups, file.verdict);
            Some(VerdictRow {
                device: d,
                verdict: file.verdict,
                rule: decided.rule,
                containers: groups.iter().map(|g| g.modules).sum(),
                without_image: groups.iter().map(|g| g.without_image).sum(),
                why: why(&groups, decided, &target),
                groups,
            })
        })
        .collect()
}

/// The group whose verdict is the file's (the first of the worst), or where
/// the file is partly served by groups that each load, the first with
/// modules left without an image.
fn decisive(groups: &[Group], verdict: Verdict) -> &Group {
    groups
        .iter()
        .find(|g| g.verdict == verdict)
        .or_else(|| groups.iter().find(|g| g.without_image > 0))
        .unwrap_or(&groups[0])
}

/// The file's verdict in words: the one group's, or each group's in turn.
fn why(groups: &[GroupRow], decided: &Group, target: &str) -> String {
    match groups {
        [one] => one.why.clone(),
        _ if groups.iter().all(|g| g.verdict == Verdict::Loads) => {
            let n: usize = groups.iter().map(|g| g.modules).sum();
            format!("all {n} modules have an image for {target}")
        }
        _ => {
            let lead = decided.why(target);
            let rest: Vec<String> = groups
                .iter()
                .filter(|g| g.rule != decided.rule)
                .map(|g| format!("{} rule: {}", g.rule.name(), g.why))
                .collect();
            format!("{lead} ({})", rest.join("; "))
        }
    }
}

fn row(group: &Group, target: &str) -> GroupRow {
    GroupRow {
        rule: group.rule,
        verdict: group.verdict,
        modules: group.modules,
        kernel_less: group.kernel_less,
        without_image: group.without_image,
        linked_at_load: group.linked,
        why: group.why(target),
    }
}
