//! Whether a vendor's kernel driver is here at all, looked up before any
//! driver library is opened: loading `libhsa-runtime64` (with libhsakmt,
//! libdrm, libnuma, libelf) costs about 13 ms on a machine with no GPU, a
//! `stat` a few microseconds.
//!
//! What each driver needs, and where it is looked for:
//!
//! - AMD: `/dev/kfd`, the KFD character device that ROCm's libhsakmt opens in
//!   `hsaKmtOpenKFD` (ROCR-Runtime `libhsakmt/src/openclose.c`); without it
//!   `hsa_init` fails. `/dev/dxg` stands for WSL2, where ROCm reaches the GPU
//!   through the DirectX kernel interface instead.
//! - NVIDIA: `/proc/driver/nvidia`, made by the `nvidia` kernel module
//!   whenever it is loaded, and `/dev/nvidiactl`, its control device (the
//!   NVIDIA container toolkit mounts both into containers). The device
//!   nodes alone are not enough to look for: when udev did not make them,
//!   libcuda makes them itself through `nvidia-modprobe`, so the module's
//!   procfs entry also counts. `/dev/dxg` stands for WSL2 (libcuda there is
//!   `/usr/lib/wsl/lib/libcuda.so.1`, over the DirectX kernel interface).
//!
//! A driver library named in the environment (`OFFLOAD_LOADER_HSA_LIBRARY`,
//! `OFFLOAD_LOADER_CUDA_LIBRARY`) is opened whatever is found here.

use std::path::{Path, PathBuf};

use offload_loader::target::Vendor;

use crate::report::Reason;

/// The paths, under `/`, whose presence says that `vendor`'s driver may
/// answer.
fn signs(vendor: Vendor) -> &'static [&'static str] {
    match vendor {
        Vendor::Amd => &["dev/kfd", "dev/dxg"],
        Vendor::Nvidia => &["proc/driver/nvidia", "dev/nvidiactl", "dev/dxg"],
    }
}

/// `Ok` when one of `vendor`'s signs exists under `root`; otherwise the
/// reason, naming every path looked at.
pub(crate) fn look(vendor: Vendor, root: &Path) -> Result<(), Reason> {
    let paths: Vec<PathBuf> = signs(vendor).iter().map(|p| root.join(p)).collect();
    // `symlink_metadata`: a stat that does not open the device.
    if paths.iter().any(|p| p.symlink_metadata().is_ok()) {
        Ok(())
    } else {
        Err(Reason::NoKernelDriver {
            vendor: vendor.brand(),
            looked: paths,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sign_of_the_driver_is_enough() {
        let root =
            std::env::temp_dir().join(format!("offload-detect-nodes-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("dev")).unwrap();
        std::fs::create_dir_all(root.join("proc/driver")).unwrap();
        for vendor in [Vendor::Amd, Vendor::Nvidia] {
            let e = look(vendor, &root).unwrap_err();
            let Reason::NoKernelDriver { looked, .. } = &e else {
                panic!("{e:?}")
            };
            assert_eq!(looked.len(), signs(vendor).len());
        }
        assert_eq!(
            look(Vendor::Amd, &root).unwrap_err().to_string(),
            format!(
                "no AMD GPU kernel driver here: none of {0}/dev/kfd, {0}/dev/dxg exists",
                root.display()
            )
        );
        std::fs::write(root.join("dev/kfd"), "").unwrap();
        assert!(look(Vendor::Amd, &root).is_ok());
        assert!(look(Vendor::Nvidia, &root).is_err());
        std::fs::create_dir(root.join("proc/driver/nvidia")).unwrap();
        assert!(look(Vendor::Nvidia, &root).is_ok());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
