//! Selection scopes: the images a runtime weighs against each other.
//!
//! The HIP runtime chooses within one bundle, the CUDA runtime within one fat
//! binary, but libomptarget sees every image of a program's `__tgt_bin_desc`
//! together. In a file, those images are the offload binaries of one
//! `.llvm.offloading` section (one binary per architecture, back to back:
//! clang-linker-wrapper, `llvm-offload-binary`), so selecting inside each
//! binary alone would report "no image" for a device another binary serves.

use super::Container;
use crate::image::{Content, Image};
use crate::select::ImageSource;

/// Containers whose images are alternatives to each other, numbered as one
/// list: image `i` of the scope is image `j` of container `k`.
#[derive(Debug)]
pub struct Scope<'c, 'a> {
    containers: Vec<&'c Container<'a>>,
    images: Vec<Image>,
    origin: Vec<(usize, usize)>,
}

impl<'c, 'a> Scope<'c, 'a> {
    /// The scope of one container.
    pub fn single(container: &'c Container<'a>) -> Scope<'c, 'a> {
        Scope::of(vec![container])
    }

    /// The scope of `containers`, their images in order.
    pub fn of(containers: Vec<&'c Container<'a>>) -> Scope<'c, 'a> {
        let mut images = Vec::new();
        let mut origin = Vec::new();
        for (k, c) in containers.iter().enumerate() {
            for (j, image) in c.images().iter().enumerate() {
                let mut image = image.clone();
                image.index = images.len();
                images.push(image);
                origin.push((k, j));
            }
        }
        Scope {
            containers,
            images,
            origin,
        }
    }

    /// The containers, in order.
    pub fn containers(&self) -> &[&'c Container<'a>] {
        &self.containers
    }

    /// The container holding image `index`, and the image's index in it.
    pub fn locate(&self, index: usize) -> Option<(&'c Container<'a>, usize)> {
        let &(k, j) = self.origin.get(index)?;
        Some((self.containers[k], j))
    }
}

impl ImageSource for Scope<'_, '_> {
    fn images(&self) -> &[Image] {
        &self.images
    }

    fn read_content(&self, index: usize) -> Option<Content> {
        let (c, j) = self.locate(index)?;
        c.read_content(j)
    }
}
