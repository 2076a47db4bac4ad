//! [`Device`]: the one place where what a backend reports (an HSA agent, a
//! KFD node, a CUDA device, an override entry) becomes a device, and the
//! entry point for loading images on it.

use std::fmt;

use offload_loader::select::DeviceTarget;

use crate::driver::{Driver, LoadedImage};
use crate::image::DriverError;
use crate::report::Source;
use crate::{cuda, hsa, kfd, visible};

/// A GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// Position in [`crate::Detection::devices`], from 0.
    pub index: usize,
    /// What it runs.
    pub target: DeviceTarget,
    /// Where it was found.
    pub source: Source,
    /// Marketing name, if known (`AMD Instinct MI210`, `NVIDIA H100 80GB HBM3`).
    pub name: Option<String>,
    /// The HSA agent's KFD node (`HSA_AGENT_INFO_NODE`), the KFD node, the
    /// CUDA device ordinal (after `CUDA_VISIBLE_DEVICES`), or the position in
    /// `OFFLOAD_LOADER_DEVICES`.
    pub ordinal: u32,
    /// `GPU-<16 hex digits>` for AMD GPUs that have one (HSA
    /// `HSA_AMD_AGENT_INFO_UUID`, KFD `unique_id`).
    pub uuid: Option<String>,
    /// PCI bus ID, `0000:41:00.0` (CUDA).
    pub pci_bus_id: Option<String>,
    /// CUDA driver version, 1000 × major + 10 × minor.
    pub driver_version: Option<u32>,
    /// ISA names the HSA runtime reports, the device's own first, then the
    /// generic one (`amdgcn-amd-amdhsa--gfx11-generic`).
    pub isas: Vec<String>,
    /// Whether the source could not tell the xnack/sramecc settings (KFD):
    /// they are then `Any` in [`Device::target`].
    pub unknown_features: bool,
    /// The driver that found it, used to load images; `None` for overrides
    /// and KFD.
    driver: Option<Driver>,
}

impl Device {
    /// Entry `index` of `OFFLOAD_LOADER_DEVICES`.
    pub(crate) fn from_override(index: usize, target: DeviceTarget) -> Device {
        Device {
            index,
            ..Device::new(Source::Override, target, index as u32)
        }
    }

    /// A GPU agent of the HSA runtime.
    pub(crate) fn from_hsa(gpu: hsa::Gpu) -> Device {
        Device {
            name: gpu.name,
            uuid: gpu.uuid,
            isas: gpu.isas,
            driver: Some(Driver::Hsa(gpu.driver)),
            ..Device::new(Source::Hsa, DeviceTarget::Amdgpu(gpu.target), gpu.node)
        }
    }

    /// A GPU node of the KFD topology: its features are unknown.
    pub(crate) fn from_kfd(node: kfd::Node) -> Device {
        Device {
            uuid: node.uuid,
            unknown_features: true,
            ..Device::new(Source::Kfd, DeviceTarget::Amdgpu(node.target), node.node)
        }
    }

    /// A device of the CUDA driver.
    pub(crate) fn from_cuda(gpu: cuda::Gpu) -> Device {
        Device {
            name: gpu.name,
            pci_bus_id: gpu.pci_bus_id,
            driver_version: gpu.driver_version,
            driver: Some(Driver::Cuda(gpu.driver)),
            ..Device::new(Source::Cuda, gpu.target, gpu.ordinal)
        }
    }

    fn new(source: Source, target: DeviceTarget, ordinal: u32) -> Device {
        Device {
            index: 0,
            target,
            source,
            name: None,
            ordinal,
            uuid: None,
            pci_bus_id: None,
            driver_version: None,
            isas: Vec::new(),
            unknown_features: false,
            driver: None,
        }
    }

    /// Whether images can be loaded on this device (it was found through a
    /// driver, not named by `OFFLOAD_LOADER_DEVICES` or read from KFD).
    pub fn can_load(&self) -> bool {
        self.driver.is_some()
    }

    /// Loads `image` (an AMDGPU code object; a cubin, NVIDIA fat binary or
    /// PTX) on this device through the driver that found it.
    pub fn load(&self, image: &[u8]) -> Result<LoadedImage, DriverError> {
        self.driver()?.load(image)
    }

    /// Links `inputs`, the fat binaries of an `-rdc` program's objects, with
    /// the driver's own linker for this device and loads the result, as
    /// libcudart does where the device-link stub's fat binary has no image
    /// for the device: CUDA devices only.
    pub fn link(&self, inputs: &[&[u8]]) -> Result<LoadedImage, DriverError> {
        self.driver()?.link(inputs)
    }

    fn driver(&self) -> Result<Driver, DriverError> {
        self.driver.ok_or(DriverError::NoDriver {
            device: self.index,
            origin: self.source,
        })
    }
}

impl visible::Listed for Device {
    fn uuid(&self) -> Option<&str> {
        self.uuid.as_deref()
    }
}

impl fmt::Display for Device {
    /// `gfx90a:sramecc+:xnack- (hsa) AMD Instinct MI210`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.target, self.source.name())?;
        if let Some(name) = &self.name {
            write!(f, " {name}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_have_no_driver() {
        let device = Device::from_override(0, DeviceTarget::parse("sm_80").unwrap());
        assert!(!device.can_load());
        assert_eq!(
            device.load(b"x").unwrap_err().to_string(),
            "device 0 came from override and has no driver to load images with"
        );
        let device = Device::from_override(1, DeviceTarget::parse("sm_80").unwrap());
        assert_eq!(device.source, Source::Override);
        assert_eq!((device.index, device.ordinal), (1, 1));
    }
}
