//! Selection scopes: the images a runtime weighs against each other.
//!
//! The HIP runtime chooses within one bundle, the CUDA runtime within one fat
//! binary, but libomptarget sees every image of a program's `__tgt_bin_desc`
//! together. In a file, those images are the offload binaries of one
//! `.llvm.offloading` section (one binary per architecture, back to back:
//! clang-linker-wrapper, `llvm-offload-binary`), so selecting inside each
//! binary alone would report "no image" for a device another binary serves.

use std::borrow::Cow;

use super::Container;
use crate::image::{Content, Image};
use crate::select::ImageSource;

/// Containers whose images are alternatives to each other, numbered as one
/// list: image `i` of the scope is image `j` of container `k`. A scope of one
/// container borrows its images (the common case: every bundle, every fat
/// binary); only a scope of several renumbers copies of them.
#[derive(Debug)]
pub struct Scope<'c, 'a> {
    containers: Vec<&'c Container<'a>>,
    images: Cow<'c, [Image]>,
    /// For a scope of several: (container, index in it) of each image.
    origin: Vec<(usize, usize)>,
}

impl<'c, 'a> Scope<'c, 'a> {
    /// The scope of one container.
    pub fn single(container: &'c Container<'a>) -> Scope<'c, 'a> {
        Scope {
            containers: vec![container],
            images: Cow::Borrowed(container.images()),
            origin: Vec::new(),
        }
    }

    /// The scope of `containers`, their images in order.
    pub fn of(containers: Vec<&'c Container<'a>>) -> Scope<'c, 'a> {
        if let [one] = containers[..] {
            return Scope::single(one);
        }
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
            images: Cow::Owned(images),
            origin,
        }
    }

    /// The containers, in order.
    pub fn containers(&self) -> &[&'c Container<'a>] {
        &self.containers
    }

    /// The container holding image `index`, and the image's index in it.
    pub fn locate(&self, index: usize) -> Option<(&'c Container<'a>, usize)> {
        if let [one] = self.containers[..] {
            return (index < self.images.len()).then_some((one, index));
        }
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
