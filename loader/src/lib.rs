//! # offload-loader
//!
//! Finds GPU offload images in host binaries, lists them with their kind, triple
//! and target ID, and picks the one image each GPU should run by the target-ID
//! rules, with a reason for every image not picked.
//!
//! The common path is at the crate root:
//!
//! ```no_run
//! use offload_loader::{select, DeviceTarget, Limits, MappedFile, Policy};
//!
//! let file = MappedFile::open("/usr/lib/x86_64-linux-gnu/librocsparse.so.0")?;
//! let device = DeviceTarget::parse("gfx90a:sramecc+:xnack-")?;
//! for section in file.containers(&Limits::default())? {
//!     for container in section.containers.iter().flatten() {
//!         // Ranks the images, then checks the chosen one against its own header.
//!         let selection = select(&device, container, &Policy::default());
//!         if let Some(i) = selection.chosen {
//!             println!("{device} loads {}", container.images()[i].id);
//!         }
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Data flows one way, and the module tree is the architecture (each module
//! uses only those above it):
//!
//! | module | what it reads or decides |
//! |---|---|
//! | `read`, [`error`], [`limits`], [`magic`] | checked little-endian reads; the one error type; bounds on untrusted input; the one table of magic numbers |
//! | [`target`] | target IDs, the AMDGPU processor table, NVIDIA archs, triples, offload kinds |
//! | [`image`] | the image model ([`Image`], [`Content`], [`CodeKind`]) and the readers of an image's own header (AMDGPU code objects, cubins, PTX) |
//! | [`bundle`], [`text_bundle`], [`compressed`], [`offload_binary`], [`nv_fatbin`], [`entries`], [`registration`] | one format each; each returns its own records |
//! | [`select()`] | which image a device runs, ranked, with a reason per rejection |
//! | [`container`] | one section's bytes → containers → [`Image`]s; a [`Container`] is an [`ImageSource`] |
//! | [`discover`] | offload sections in files, archives and raw containers |

#![deny(missing_docs)]

pub mod bundle;
pub mod compressed;
pub mod container;
pub mod discover;
pub mod entries;
pub mod error;
pub mod image;
pub mod limits;
pub mod magic;
pub mod nv_fatbin;
pub mod offload_binary;
mod read;
pub mod registration;
pub mod rule;
pub mod select;
pub mod target;
pub mod text_bundle;
pub mod verdict;

pub use container::{scan, Container, Format, Scope};
pub use discover::file::{MappedFile, SectionContainers};
pub use discover::FileError;
pub use error::{Error, ErrorKind, Result};
pub use image::{CodeKind, Content, Image};
pub use limits::Limits;
pub use select::{
    first_fit_contested, first_fit_order, first_fit_order_on, headers_agree, named_by_headers,
    preference, select, DeviceTarget, ImageSource, Policy, Present, Rejection, Selection,
    VendorRuntime,
};
