//! What detection reads from the environment, gathered in one value so that
//! tests and tools can pass it explicitly ([`crate::detect_with`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use offload_loader::target::Vendor;

/// The detection settings. [`Config::from_env`] reads them from the process
/// environment; [`Config::default`] is "detect normally, no overrides".
///
/// Two environment variables are deliberately not fields, because the drivers
/// read them themselves from the process environment, whatever this value
/// says: `ROCR_VISIBLE_DEVICES` for the HSA runtime (its `RvdFilter`) and
/// `CUDA_VISIBLE_DEVICES` for the CUDA driver. [`Config::rocr_visible`] is
/// applied by this crate only to devices found through KFD, where no runtime
/// is involved.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// `OFFLOAD_LOADER_DEVICES`: devices to report instead of detecting.
    pub devices: Option<String>,
    /// `OFFLOAD_LOADER_HSA_LIBRARY`: the only HSA library to try.
    pub hsa_library: Option<PathBuf>,
    /// `OFFLOAD_LOADER_CUDA_LIBRARY`: the only CUDA driver library to try.
    pub cuda_library: Option<PathBuf>,
    /// `OFFLOAD_LOADER_KFD_ROOT`: the KFD topology's `nodes` directory
    /// (default `/sys/devices/virtual/kfd/kfd/topology/nodes`).
    pub kfd_root: Option<PathBuf>,
    /// `HSA_OVERRIDE_GFX_VERSION` (node `None`) and
    /// `HSA_OVERRIDE_GFX_VERSION_<node>`, applied to KFD devices (the HSA
    /// runtime applies them itself, in libhsakmt's topology code).
    pub gfx_overrides: Vec<(Option<u32>, String)>,
    /// `ROCR_VISIBLE_DEVICES`, applied to KFD devices as ROCR applies it;
    /// `Some("")` (set but empty) hides every GPU, as in ROCR.
    pub rocr_visible: Option<String>,
    /// `HIP_VISIBLE_DEVICES`, applied to AMD devices (from HSA or KFD) as the
    /// HIP runtime applies it; empty means unset, as in HIP.
    pub hip_visible: Option<String>,
    /// `OFFLOAD_LOADER_DETECT_TIMEOUT_MS`: how long one driver may take
    /// (default 10 s).
    pub timeout: Option<Duration>,
    /// The vendors whose GPUs to look for (default: all). A driver library
    /// named explicitly (`hsa_library`, `cuda_library`) is opened anyway.
    pub vendors: Vendors,
    /// Where `/dev`, `/proc` and `/sys` are looked up for the signs of a
    /// kernel driver (default `/`; a test's or a chroot's copy).
    pub system_root: Option<PathBuf>,
}

/// A set of GPU vendors. The default is every vendor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Vendors(u8);

impl Vendors {
    /// No vendor.
    pub const NONE: Vendors = Vendors(0);
    /// AMD and NVIDIA.
    pub const ALL: Vendors = Vendors(0b11);

    const fn bit(vendor: Vendor) -> u8 {
        match vendor {
            Vendor::Amd => 0b01,
            Vendor::Nvidia => 0b10,
        }
    }

    /// The set of one vendor.
    pub const fn of(vendor: Vendor) -> Vendors {
        Vendors(Vendors::bit(vendor))
    }

    /// This set and `other`'s vendors.
    pub const fn union(self, other: Vendors) -> Vendors {
        Vendors(self.0 | other.0)
    }

    /// Whether `vendor` is in the set.
    pub const fn contains(self, vendor: Vendor) -> bool {
        self.0 & Vendors::bit(vendor) != 0
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The set as bits (AMD 1, NVIDIA 2), to keep in an atomic.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// The set of [`Vendors::bits`]; unknown bits are dropped.
    pub const fn from_bits(bits: u8) -> Vendors {
        Vendors(bits & Vendors::ALL.0)
    }
}

impl Default for Vendors {
    fn default() -> Vendors {
        Vendors::ALL
    }
}

impl Config {
    /// [`Config::system_root`], or `/`.
    pub(crate) fn system_root(&self) -> &Path {
        self.system_root.as_deref().unwrap_or(Path::new("/"))
    }

    /// The configuration the process environment gives.
    pub fn from_env() -> Config {
        Config::from_vars(
            std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
        )
    }

    /// The configuration a list of environment variables gives.
    pub fn from_vars(vars: impl IntoIterator<Item = (String, String)>) -> Config {
        let mut config = Config::default();
        let non_empty = |v: String| Some(v).filter(|v| !v.is_empty());
        for (key, value) in vars {
            match key.as_str() {
                "OFFLOAD_LOADER_DEVICES" => config.devices = non_empty(value),
                "OFFLOAD_LOADER_HSA_LIBRARY" => {
                    config.hsa_library = non_empty(value).map(PathBuf::from)
                }
                "OFFLOAD_LOADER_CUDA_LIBRARY" => {
                    config.cuda_library = non_empty(value).map(PathBuf::from)
                }
                "OFFLOAD_LOADER_KFD_ROOT" => config.kfd_root = non_empty(value).map(PathBuf::from),
                "OFFLOAD_LOADER_DETECT_TIMEOUT_MS" => {
                    config.timeout = value.trim().parse().ok().map(Duration::from_millis)
                }
                "ROCR_VISIBLE_DEVICES" => config.rocr_visible = Some(value),
                "HIP_VISIBLE_DEVICES" => config.hip_visible = non_empty(value),
                _ => {
                    if let Some(node) = gfx_override_node(&key) {
                        config.gfx_overrides.push((node, value));
                    }
                }
            }
        }
        config
    }
}

/// `HSA_OVERRIDE_GFX_VERSION` → `Some(None)`, `HSA_OVERRIDE_GFX_VERSION_3` →
/// `Some(Some(3))`. libhsakmt looks the per-node name up with `"%d"`, so only
/// the canonical decimal spelling of a node counts (`_03` names no node).
fn gfx_override_node(key: &str) -> Option<Option<u32>> {
    let rest = key.strip_prefix("HSA_OVERRIDE_GFX_VERSION")?;
    if rest.is_empty() {
        return Some(None);
    }
    let digits = rest.strip_prefix('_')?;
    let node: u32 = digits.parse().ok()?;
    (node.to_string() == digits).then_some(Some(node))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(list: &[(&str, &str)]) -> Config {
        Config::from_vars(list.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    #[test]
    fn reads_the_variables() {
        let c = vars(&[
            ("OFFLOAD_LOADER_DEVICES", ""),
            ("OFFLOAD_LOADER_HSA_LIBRARY", "/x/libhsa.so"),
            ("HSA_OVERRIDE_GFX_VERSION", "10.3.0"),
            ("HSA_OVERRIDE_GFX_VERSION_2", "9.0.8"),
            ("HSA_OVERRIDE_GFX_VERSION_02", "9.0.6"),
            ("HSA_OVERRIDE_GFX_VERSION_X", "9.0.6"),
            ("ROCR_VISIBLE_DEVICES", ""),
            ("HIP_VISIBLE_DEVICES", ""),
            ("OFFLOAD_LOADER_DETECT_TIMEOUT_MS", "250"),
        ]);
        assert_eq!(c.devices, None);
        assert_eq!(c.hsa_library, Some("/x/libhsa.so".into()));
        assert_eq!(
            c.gfx_overrides,
            [(None, "10.3.0".to_string()), (Some(2), "9.0.8".to_string())]
        );
        assert_eq!(c.rocr_visible.as_deref(), Some(""));
        assert_eq!(c.hip_visible, None);
        assert_eq!(c.timeout, Some(Duration::from_millis(250)));
        assert_eq!(c.vendors, Vendors::ALL);
    }

    #[test]
    fn vendor_sets() {
        let amd = Vendors::of(Vendor::Amd);
        assert!(amd.contains(Vendor::Amd) && !amd.contains(Vendor::Nvidia));
        assert_eq!(amd.union(Vendors::of(Vendor::Nvidia)), Vendors::ALL);
        assert!(Vendors::NONE.is_empty());
        assert_eq!(Vendors::from_bits(0xff), Vendors::ALL);
        assert_eq!(Vendors::from_bits(amd.bits()), amd);
    }
}
