//! Images named on the command line, as skopeo names them (`oci:DIR[:TAG]`,
//! `docker-archive:FILE`): the files of GPU code of each one's root file
//! system (its layers applied, whiteouts respected) are inspected where they
//! lie in the layers' tar streams, never copied out, and reported under the
//! image's name: `oci:DIR:TAG!/usr/lib/libx.so`. The coverage per device
//! is then the image's: what a scheduler asks before placing it.

use std::path::{Path, PathBuf};

use offload_loader::discover::FileError;
use offload_loader::MappedFile;
use offload_slim::image::GpuFiles;
use offload_slim::Reference;

/// The images named, opened.
pub struct Images {
    /// Each image's name and GPU files (holding the scratch files of their
    /// inflated layers until dropped).
    opened: Vec<(String, GpuFiles)>,
    /// Images that could not be read: (name, why).
    pub errors: Vec<(PathBuf, String)>,
}

/// A file that lies inside another (a file in an image's layer): mapped
/// from there, reported under its own name.
#[derive(Debug, Clone, Copy)]
pub struct Part<'a> {
    pub holder: &'a Path,
    pub offset: u64,
    pub len: u64,
}

impl Part<'_> {
    /// Maps the part; an error names the file `name` it is.
    pub fn open(&self, name: &Path) -> Result<MappedFile, FileError> {
        MappedFile::open_part(self.holder, self.offset, self.len).map_err(|e| renamed(e, name))
    }
}

/// `e` naming `name`: a part's errors name the file it is, not its holder.
pub fn renamed(e: FileError, name: &Path) -> FileError {
    FileError {
        path: name.to_path_buf(),
        ..e
    }
}

impl Images {
    /// The paths that are not images, and the images among `paths`, opened.
    pub fn open(paths: &[PathBuf]) -> (Vec<PathBuf>, Images) {
        let mut images = Images {
            opened: Vec::new(),
            errors: Vec::new(),
        };
        let mut rest = Vec::new();
        for path in paths {
            let Some(reference) = reference(path) else {
                rest.push(path.clone());
                continue;
            };
            match offload_slim::image::gpu_files(&reference, &std::env::temp_dir()) {
                Ok(files) => {
                    if let Some(platform) = &files.platform {
                        eprintln!(
                            "offload-probe: {reference} names an index of images for several \
                             platforms: reading the one for {platform}, this machine's"
                        );
                    }
                    images.opened.push((reference.to_string(), files));
                }
                Err(e) => images.errors.push((path.clone(), e)),
            }
        }
        (rest, images)
    }

    /// Every GPU file of the images, in order: the name it is reported
    /// under (`IMAGE!/PATH`, its first path in a walk of the image) and
    /// where it lies.
    pub fn files(&self) -> Vec<(PathBuf, Part<'_>)> {
        self.opened
            .iter()
            .flat_map(|(image, gpu)| {
                gpu.files.iter().map(move |f| {
                    let name = offload_slim::inner_name(image, f.names[0].display());
                    let part = Part {
                        holder: &f.holder,
                        offset: f.offset,
                        len: f.len,
                    };
                    (name, part)
                })
            })
            .collect()
    }
}

/// An image named on the command line (`oci:…`, `docker-archive:…`),
/// unless a file of that name is there: what the probe and slim both read.
pub fn reference(path: &Path) -> Option<Reference> {
    if path.exists() {
        return None;
    }
    Reference::parse(path.to_str()?)
}
