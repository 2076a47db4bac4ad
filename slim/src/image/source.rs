//! An image read: from an OCI image layout (`image-layout.md`: `oci-layout`,
//! `index.json`, `blobs/sha256/…`) or a `docker save` archive (a tar of
//! `manifest.json`, the config and the layers). Manifests, configs and
//! indexes are JSON values: every field the tools wrote is kept.

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use offload_loader::MappedFile;
use serde_json::Value;

use super::digest;
use super::Reference;

/// The most bytes of JSON (index, manifest, config) read: a config of some
/// thousands of history entries is well under a MiB.
const MAX_JSON: usize = 16 << 20;

/// The most layers an image may have (Docker's own limit is 127 on
/// overlayfs; OCI sets none).
const MAX_LAYERS: usize = 4096;

/// The media types of an OCI manifest and index, and Docker's (Image
/// Manifest V2, Schema 2).
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";

/// The annotation an OCI layout's index names an image by (its tag).
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";

/// An image: its manifest (an OCI layout's; `None` from an archive), its
/// config, and its layers.
pub struct Image {
    pub manifest: Option<Value>,
    pub config: Vec<u8>,
    pub layers: Vec<Layer>,
    /// Its name: an OCI tag, or a `docker save` archive's `RepoTags`.
    pub tags: Vec<String>,
}

/// A layer's blob, where it lies.
#[derive(Clone)]
pub struct Layer {
    /// The file it is in, and its place there.
    pub file: Arc<MappedFile>,
    pub at: usize,
    pub len: usize,
    /// Its digest, as the manifest gives it or (an archive) as hashed.
    pub digest: String,
    /// Its descriptor in the manifest (an archive's: made here).
    pub descriptor: Value,
    /// The config's `diff_id` for it.
    pub diff_id: Option<String>,
}

impl Layer {
    pub fn bytes(&self) -> &[u8] {
        &self.file.bytes()[self.at..self.at + self.len]
    }
}

/// The image `reference` names.
pub fn open(reference: &Reference) -> Result<Image, String> {
    match reference {
        Reference::Oci { dir, tag } => oci(dir, tag.as_deref()),
        Reference::DockerArchive { file, tag } => archive(file, tag.as_deref()),
    }
}

/// Reads a JSON file of at most [`MAX_JSON`] bytes.
fn json(bytes: &[u8], what: &str) -> Result<Value, String> {
    if bytes.len() > MAX_JSON {
        return Err(format!("{what}: more than {MAX_JSON} bytes"));
    }
    serde_json::from_slice(bytes).map_err(|e| format!("{what}: {e}"))
}

fn read_small(path: &Path) -> Result<Vec<u8>, String> {
    let map = MappedFile::open(path).map_err(|e| e.to_string())?;
    if map.bytes().len() > MAX_JSON {
        return Err(format!("{}: more than {MAX_JSON} bytes", path.display()));
    }
    Ok(map.bytes().to_vec())
}

/// The path of blob `digest` in layout `dir`.
pub fn blob_path(dir: &Path, digest: &str) -> Result<PathBuf, String> {
    let hex = digest::hex(digest)
        .ok_or_else(|| format!("{digest:?}: not a sha256 digest (the only algorithm read here)"))?;
    Ok(dir.join("blobs").join(digest::ALGORITHM).join(hex))
}

/// A small blob of layout `dir`, its digest checked.
fn small_blob(dir: &Path, digest: &str) -> Result<Vec<u8>, String> {
    let bytes = read_small(&blob_path(dir, digest)?)?;
    let got = digest::of(&bytes);
    if got != digest {
        return Err(format!("blob {digest}: its bytes hash to {got}"));
    }
    Ok(bytes)
}

fn oci(dir: &Path, tag: Option<&str>) -> Result<Image, String> {
    let at = |e: String| format!("{}: {e}", dir.display());
    if !dir.join("oci-layout").is_file() {
        return Err(at("not an OCI image layout (no oci-layout file)".into()));
    }
    let index = json(
        &read_small(&dir.join("index.json")).map_err(at)?,
        "index.json",
    )
    .map_err(at)?;
    let descriptors = index["manifests"].as_array().cloned().unwrap_or_default();
    let tag_of = |d: &Value| d["annotations"][REF_NAME].as_str().map(String::from);
    let chosen: Vec<&Value> = descriptors
        .iter()
        .filter(|d| tag.is_none() || tag_of(d).as_deref() == tag)
        .collect();
    let descriptor = match chosen.as_slice() {
        [one] => *one,
        [] => {
            return Err(at(format!(
                "no image tagged {:?} (tags: {})",
                tag.unwrap_or(""),
                tags(&descriptors, &tag_of)
            )))
        }
        _ => {
            return Err(at(format!(
                "{} images: name one (tags: {})",
                chosen.len(),
                tags(&descriptors, &tag_of)
            )))
        }
    };
    let media = descriptor["mediaType"].as_str().unwrap_or(OCI_MANIFEST);
    if media == OCI_INDEX || media == DOCKER_LIST {
        return Err(at(
            "the tag names an index of images for several platforms: copy one platform's image \
             into a layout (skopeo copy --override-arch …) and name it"
                .into(),
        ));
    }
    let digest = descriptor["digest"].as_str().unwrap_or_default();
    let manifest_bytes = small_blob(dir, digest).map_err(at)?;
    let manifest = json(&manifest_bytes, "manifest").map_err(at)?;
    let media = manifest["mediaType"].as_str().unwrap_or(media);
    if media != OCI_MANIFEST && media != DOCKER_MANIFEST {
        return Err(at(format!(
            "manifest of media type {media:?}: not an image manifest"
        )));
    }
    let config_digest = manifest["config"]["digest"].as_str().unwrap_or_default();
    let config = small_blob(dir, config_digest).map_err(at)?;
    let mut layers = Vec::new();
    for (descriptor, diff_id) in paired(&manifest["layers"], &config, "the manifest").map_err(at)? {
        let digest = descriptor["digest"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let path = blob_path(dir, &digest).map_err(at)?;
        let file = MappedFile::open(&path).map_err(|e| e.to_string())?;
        let len = file.bytes().len();
        if descriptor["size"].as_u64() != Some(len as u64) {
            return Err(at(format!(
                "layer {digest}: {len} bytes, the manifest says {}",
                descriptor["size"]
            )));
        }
        layers.push(Layer {
            file: Arc::new(file),
            at: 0,
            len,
            digest,
            descriptor,
            diff_id: Some(diff_id),
        });
    }
    Ok(Image {
        manifest: Some(manifest),
        config,
        layers,
        tags: tag_of(descriptor).into_iter().collect(),
    })
}

fn tags(descriptors: &[Value], tag_of: &dyn Fn(&Value) -> Option<String>) -> String {
    let tags: Vec<String> = descriptors.iter().filter_map(tag_of).collect();
    if tags.is_empty() {
        "none".into()
    } else {
        tags.join(", ")
    }
}

/// The layers `listed` (by `by`: a manifest, `manifest.json`), each with
/// its `diff_id` from `config`: as many of each, at most [`MAX_LAYERS`].
fn paired(listed: &Value, config: &[u8], by: &str) -> Result<Vec<(Value, String)>, String> {
    let diff_ids = diff_ids(config)?;
    let listed = listed.as_array().cloned().unwrap_or_default();
    if listed.len() > MAX_LAYERS || listed.len() != diff_ids.len() {
        return Err(format!(
            "{by} lists {} layers, the config {} diff_ids",
            listed.len(),
            diff_ids.len()
        ));
    }
    Ok(listed.into_iter().zip(diff_ids).collect())
}

/// The config's `rootfs.diff_ids`.
fn diff_ids(config: &[u8]) -> Result<Vec<String>, String> {
    let config = json(config, "config")?;
    config["rootfs"]["diff_ids"]
        .as_array()
        .ok_or("config: no rootfs.diff_ids")?
        .iter()
        .map(|d| {
            d.as_str()
                .map(String::from)
                .ok_or_else(|| "config: a diff_id is not a string".to_string())
        })
        .collect()
}

/// A `docker save` archive (Docker's image tarball, also what
/// `skopeo copy … docker-archive:` writes): `manifest.json` lists, per
/// image, its `Config` and `Layers` by their paths in the archive.
fn archive(file: &Path, tag: Option<&str>) -> Result<Image, String> {
    let at = |e: String| format!("{}: {e}", file.display());
    let map = Arc::new(MappedFile::open(file).map_err(|e| e.to_string())?);
    let members = members(map.bytes()).map_err(at)?;
    let member = |name: &str| {
        let name = name.trim_start_matches("./");
        members
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|&(_, at, len)| (at, len))
            .ok_or_else(|| format!("no {name} in the archive"))
    };
    let (m_at, m_len) = member("manifest.json").map_err(at)?;
    let manifest = json(&map.bytes()[m_at..m_at + m_len], "manifest.json").map_err(at)?;
    let images = manifest.as_array().cloned().unwrap_or_default();
    let chosen: Vec<&Value> = images
        .iter()
        .filter(|i| {
            tag.is_none_or(|t| {
                i["RepoTags"]
                    .as_array()
                    .is_some_and(|tags| tags.iter().any(|x| x.as_str() == Some(t)))
            })
        })
        .collect();
    let [image] = chosen.as_slice() else {
        return Err(at(format!(
            "{} images match: name one (docker-archive:FILE:NAME:TAG)",
            chosen.len()
        )));
    };
    let (c_at, c_len) = member(image["Config"].as_str().unwrap_or_default()).map_err(at)?;
    let config = map.bytes()[c_at..c_at + c_len].to_vec();
    let mut layers = Vec::new();
    for (path, diff_id) in paired(&image["Layers"], &config, "manifest.json").map_err(at)? {
        let (l_at, l_len) = member(path.as_str().unwrap_or_default()).map_err(at)?;
        let bytes = &map.bytes()[l_at..l_at + l_len];
        let digest = digest::of(bytes);
        let media = match super::layer::Compression::of(bytes) {
            super::layer::Compression::Gzip => "application/vnd.oci.image.layer.v1.tar+gzip",
            super::layer::Compression::Zstd => "application/vnd.oci.image.layer.v1.tar+zstd",
            super::layer::Compression::None => "application/vnd.oci.image.layer.v1.tar",
        };
        layers.push(Layer {
            file: map.clone(),
            at: l_at,
            len: l_len,
            descriptor: serde_json::json!({
                "mediaType": media, "digest": digest, "size": l_len,
            }),
            digest,
            diff_id: Some(diff_id),
        });
    }
    Ok(Image {
        manifest: None,
        config,
        layers,
        tags: image["RepoTags"]
            .as_array()
            .map(|t| {
                t.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default(),
    })
}

/// An uncompressed tar's regular members: name, data offset, size.
fn members(tar: &[u8]) -> Result<Vec<(String, usize, usize)>, String> {
    let mut archive = tar::Archive::new(Cursor::new(tar));
    let mut out = Vec::new();
    for entry in archive.entries_with_seek().map_err(|e| e.to_string())? {
        if out.len() >= super::layer::MAX_ENTRIES {
            return Err("too many members".into());
        }
        let e = entry.map_err(|e| e.to_string())?;
        if !e.header().entry_type().is_file() {
            continue;
        }
        let name = String::from_utf8_lossy(&e.path_bytes())
            .trim_start_matches("./")
            .to_string();
        let (at, len) = (e.raw_file_position() as usize, e.size() as usize);
        if at.checked_add(len).is_none_or(|end| end > tar.len()) {
            return Err(format!("{name}: its data runs past the archive's end"));
        }
        out.push((name, at, len));
    }
    Ok(out)
}
