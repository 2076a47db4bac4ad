//! # offload-loader
//!
//! Finds GPU offload images in host binaries, lists them with their kind, triple
//! and target ID, and picks the one image each GPU should run by the target-ID
//! rules, with a reason for every image not picked.
//!
//! The file tree is the architecture:
//!
//! | module | what it reads or decides |
//! |---|---|
//! | [`read`], [`error`] | checked little-endian reads; the one error type |
//! | [`bundle`] | clang offload bundles (`__CLANG_OFFLOAD_BUNDLE__`) |
//! | [`compressed`] | compressed bundles (`CCOB` v1, v2, v3; zlib and zstd; MD5 check) |
//! | [`offload_binary`] | LLVM offload binaries (`0x10FF10AD`, v1 and v2) |
//! | [`nv_fatbin`] | NVIDIA fat binaries (`0xBA55ED50`) |
//! | [`entries`] | offload entry tables (legacy 32-byte and LLVM 20+ 56-byte) |
//! | [`registration`] | HIP/CUDA fatbin wrappers, `__tgt_bin_desc`, `.offload_arch_list` |
//! | [`elf`] | AMDGPU code-object and NVPTX cubin ELF headers, PTX text |
//! | [`target`] | target IDs, the AMDGPU processor table, triples, offload kinds |
//! | [`container`] | one section's bytes → the containers in it → their images |
//! | [`select`] | which image a device runs, ranked, with a reason per rejection |
//! | [`discover`] | offload sections in files and in the running process |

pub mod bundle;
pub mod compressed;
pub mod container;
pub mod discover;
pub mod elf;
pub mod entries;
pub mod error;
pub mod nv_fatbin;
pub mod offload_binary;
pub mod read;
pub mod registration;
pub mod select;
pub mod target;

pub use error::{Error, ErrorKind, Result};
