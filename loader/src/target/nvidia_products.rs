//! NVIDIA products and their compute capabilities.
//!
//! Source: NVIDIA's "CUDA GPU Compute Capability" list
//! (developer.nvidia.com/cuda-gpus: its Data Center, Workstation/Consumer and
//! Jetson columns, 12.1 down to 7.5) and its "Legacy CUDA GPU Compute
//! Capability" list (developer.nvidia.com/cuda-legacy-gpus: 7.2 down to 5.3,
//! the data-center, TITAN, GeForce GTX 10 and Jetson entries).
//! Names are as the lists write them. Not on either list, and so not here:
//! cloud-only parts such as A10G.
//!
//! Checked for issue 35 against the list as it stands, newest capability
//! 12.1 (GB10): it has every Blackwell part here (B200/GB200 10.0,
//! B300/GB300 10.3, Jetson T5000/T4000 11.0, RTX PRO Blackwell and GeForce
//! RTX 50 12.0, GB10/DGX Spark 12.1). It names no laptop GPUs and no Rubin
//! part, and no other NVIDIA page seen gives a Rubin compute capability, so
//! neither is here: a name is added when NVIDIA's list states its capability.

use super::names::Product;

/// A product of NVIDIA's list whose compute capability is `target` (`sm_XY`).
const fn p(name: &'static str, target: &'static str) -> Product {
    Product { name, target }
}

/// NVIDIA's products, newest capability first, as its lists order them.
#[rustfmt::skip]
pub(crate) static NVIDIA_PRODUCTS: &[Product] = &[
    // 12.1
    p("NVIDIA GB10", "sm_121"),
    p("DGX Spark", "sm_121"),
    // 12.0
    p("NVIDIA RTX PRO 6000 Blackwell Server Edition", "sm_120"),
    p("NVIDIA RTX PRO 4500 Blackwell Server Edition", "sm_120"),
    p("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "sm_120"),
    p("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "sm_120"),
    // The card as people name it: every RTX PRO 6000 Blackwell edition above is 12.0.
    p("NVIDIA RTX PRO 6000 Blackwell", "sm_120"),
    p("NVIDIA RTX PRO 5000 Blackwell", "sm_120"),
    p("NVIDIA RTX PRO 4500 Blackwell", "sm_120"),
    p("NVIDIA RTX PRO 4000 Blackwell", "sm_120"),
    p("NVIDIA RTX PRO 4000 Blackwell SFF Edition", "sm_120"),
    p("NVIDIA RTX PRO 2000 Blackwell", "sm_120"),
    p("GeForce RTX 5090", "sm_120"),
    p("GeForce RTX 5080", "sm_120"),
    p("GeForce RTX 5070 Ti", "sm_120"),
    p("GeForce RTX 5070", "sm_120"),
    p("GeForce RTX 5060 Ti", "sm_120"),
    p("GeForce RTX 5060", "sm_120"),
    p("GeForce RTX 5050", "sm_120"),
    // 11.0
    p("Jetson T5000", "sm_110"),
    p("Jetson T4000", "sm_110"),
    // 10.3
    p("NVIDIA GB300", "sm_103"),
    p("NVIDIA B300", "sm_103"),
    // 10.0
    p("NVIDIA GB200", "sm_100"),
    p("NVIDIA B200", "sm_100"),
    // 9.0
    p("NVIDIA GH200", "sm_90"),
    p("NVIDIA H200", "sm_90"),
    p("NVIDIA H100", "sm_90"),
    // 8.9
    p("NVIDIA L4", "sm_89"),
    p("NVIDIA L40", "sm_89"),
    p("NVIDIA L40S", "sm_89"),
    p("NVIDIA RTX 6000 Ada", "sm_89"),
    p("NVIDIA RTX 5000 Ada", "sm_89"),
    p("NVIDIA RTX 4500 Ada", "sm_89"),
    p("NVIDIA RTX 4000 Ada", "sm_89"),
    p("NVIDIA RTX 4000 SFF Ada", "sm_89"),
    p("NVIDIA RTX 2000 Ada", "sm_89"),
    p("GeForce RTX 4090", "sm_89"),
    p("GeForce RTX 4080", "sm_89"),
    p("GeForce RTX 4070 Ti", "sm_89"),
    p("GeForce RTX 4070", "sm_89"),
    p("GeForce RTX 4060 Ti", "sm_89"),
    p("GeForce RTX 4060", "sm_89"),
    p("GeForce RTX 4050", "sm_89"),
    // 8.7
    p("Jetson AGX Orin", "sm_87"),
    p("Jetson Orin NX", "sm_87"),
    p("Jetson Orin Nano", "sm_87"),
    // The family as people name it: every Jetson Orin module above is 8.7.
    p("Jetson Orin", "sm_87"),
    // 8.6
    p("NVIDIA A40", "sm_86"),
    p("NVIDIA A10", "sm_86"),
    p("NVIDIA A16", "sm_86"),
    p("NVIDIA A2", "sm_86"),
    p("NVIDIA RTX A6000", "sm_86"),
    p("NVIDIA RTX A5000", "sm_86"),
    p("NVIDIA RTX A4000", "sm_86"),
    p("NVIDIA RTX A3000", "sm_86"),
    p("NVIDIA RTX A2000", "sm_86"),
    p("GeForce RTX 3090 Ti", "sm_86"),
    p("GeForce RTX 3090", "sm_86"),
    p("GeForce RTX 3080 Ti", "sm_86"),
    p("GeForce RTX 3080", "sm_86"),
    p("GeForce RTX 3070 Ti", "sm_86"),
    p("GeForce RTX 3070", "sm_86"),
    p("GeForce RTX 3060 Ti", "sm_86"),
    p("GeForce RTX 3060", "sm_86"),
    p("GeForce RTX 3050 Ti", "sm_86"),
    p("GeForce RTX 3050", "sm_86"),
    // 8.0
    p("NVIDIA A100", "sm_80"),
    p("NVIDIA A30", "sm_80"),
    // 7.5
    p("NVIDIA T4", "sm_75"),
    p("Quadro RTX 8000", "sm_75"),
    p("Quadro RTX 6000", "sm_75"),
    p("Quadro RTX 5000", "sm_75"),
    p("Quadro RTX 4000", "sm_75"),
    p("NVIDIA T1000", "sm_75"),
    p("NVIDIA T600", "sm_75"),
    p("NVIDIA T400", "sm_75"),
    p("NVIDIA TITAN RTX", "sm_75"),
    p("GeForce RTX 2080 Ti", "sm_75"),
    p("GeForce RTX 2080", "sm_75"),
    p("GeForce RTX 2070", "sm_75"),
    p("GeForce RTX 2060", "sm_75"),
    p("GeForce GTX 1650 Ti", "sm_75"),
    // 7.2 (legacy list)
    p("Jetson AGX Xavier", "sm_72"),
    p("Jetson Xavier NX", "sm_72"),
    // The family as people name it: every Jetson Xavier module above is 7.2.
    p("Jetson Xavier", "sm_72"),
    // 7.0
    p("NVIDIA V100", "sm_70"),
    p("Quadro GV100", "sm_70"),
    p("NVIDIA TITAN V", "sm_70"),
    // 6.2
    p("Jetson TX2", "sm_62"),
    // 6.1
    p("Tesla P40", "sm_61"),
    p("Tesla P4", "sm_61"),
    p("Quadro P6000", "sm_61"),
    p("NVIDIA TITAN Xp", "sm_61"),
    p("NVIDIA TITAN X", "sm_61"),
    p("GeForce GTX 1080 Ti", "sm_61"),
    p("GeForce GTX 1080", "sm_61"),
    p("GeForce GTX 1070 Ti", "sm_61"),
    p("GeForce GTX 1070", "sm_61"),
    p("GeForce GTX 1060", "sm_61"),
    p("GeForce GTX 1050", "sm_61"),
    // 6.0
    p("Tesla P100", "sm_60"),
    p("Quadro GP100", "sm_60"),
    // 5.3
    p("Jetson Nano", "sm_53"),
];
