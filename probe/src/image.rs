//! Images named on the command line, as skopeo names them (`oci:DIR[:TAG]`,
//! `docker-archive:FILE`): the files of GPU code of each one's root file
//! system (its layers applied, whiteouts respected) are written under a
//! temporary directory, walked as any directory is, and reported under the
//! image's name: `oci:DIR:TAG!/usr/lib/libx.so`. The coverage per device
//! is then the image's: what a scheduler asks before placing it.

use std::path::{Path, PathBuf};

use offload_slim::Reference;

/// The images named, each's temporary directory (removed when dropped).
pub struct Images {
    dirs: Vec<(PathBuf, String)>,
    /// Images that could not be read: (name, why).
    pub errors: Vec<(PathBuf, String)>,
}

impl Images {
    /// `paths` with each image replaced by the directory its GPU files are
    /// written under.
    pub fn open(paths: &[PathBuf]) -> (Vec<PathBuf>, Images) {
        let mut images = Images {
            dirs: Vec::new(),
            errors: Vec::new(),
        };
        let mut out = Vec::new();
        for path in paths {
            let Some(reference) = reference(path) else {
                out.push(path.clone());
                continue;
            };
            let dir = std::env::temp_dir().join(format!(
                "offload-probe-image.{}.{}",
                std::process::id(),
                images.dirs.len()
            ));
            images.dirs.push((dir.clone(), reference.to_string()));
            match offload_slim::image::gpu_files(&reference, &dir) {
                Ok(_) => out.push(dir),
                Err(e) => images.errors.push((path.clone(), e)),
            }
        }
        (out, images)
    }

    /// The name `path` (of a file under an image's directory) is reported
    /// under.
    pub fn name(&self, path: &str) -> Option<String> {
        self.dirs.iter().find_map(|(dir, image)| {
            let rest = Path::new(path).strip_prefix(dir).ok()?;
            Some(format!("{image}!/{}", rest.display()))
        })
    }
}

impl Drop for Images {
    fn drop(&mut self) {
        for (dir, _) in &self.dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
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
