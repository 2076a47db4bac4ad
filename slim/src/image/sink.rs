//! An image written: into an OCI image layout (blobs added by digest, the
//! index's entry for the tag replaced) or as a `docker save` archive. Every
//! file is written under a temporary name and renamed: a reader sees the
//! old layout or archive, or the new one.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::digest;
use super::source::{blob_path, Layer, OCI_MANIFEST, REF_NAME};

/// A layer of the image written: the original blob, or a new one (a file
/// in the scratch directory, on the output's file system).
pub enum Blob {
    Original(Layer),
    New(PathBuf),
}

/// An image to write: its layers' blobs and descriptors, its config and
/// manifest (with the descriptors in it).
pub struct Out {
    pub blobs: Vec<(Blob, Value)>,
    pub config: Vec<u8>,
    pub manifest: Vec<u8>,
    pub tags: Vec<String>,
}

/// `out` into OCI layout `dir` (made if missing), named `tag` in its
/// index; returns the manifest's digest.
pub fn oci(dir: &Path, tag: Option<&str>, out: Out, scratch: &Path) -> io::Result<String> {
    let blobs = dir.join("blobs").join(digest::ALGORITHM);
    fs::create_dir_all(&blobs)?;
    let layout = dir.join("oci-layout");
    if !layout.exists() {
        replace(&layout, scratch, br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    }
    for (blob, descriptor) in &out.blobs {
        let digest = descriptor["digest"].as_str().unwrap_or_default();
        let path = blob_path(dir, digest).map_err(io::Error::other)?;
        if path.exists() {
            continue;
        }
        match blob {
            Blob::Original(layer) => replace(&path, scratch, layer.bytes())?,
            Blob::New(file) => fs::rename(file, &path)?,
        }
    }
    let config = digest::of(&out.config);
    let manifest = digest::of(&out.manifest);
    for (bytes, d) in [(&out.config, &config), (&out.manifest, &manifest)] {
        replace(
            &blob_path(dir, d).map_err(io::Error::other)?,
            scratch,
            bytes,
        )?;
    }
    let index_path = dir.join("index.json");
    let mut index: Value = match fs::read(&index_path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(io::Error::other)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [],
        }),
        Err(e) => return Err(e),
    };
    let media = serde_json::from_slice::<Value>(&out.manifest)
        .ok()
        .and_then(|m| m["mediaType"].as_str().map(String::from))
        .unwrap_or_else(|| OCI_MANIFEST.into());
    let mut descriptor = json!({
        "mediaType": media,
        "digest": manifest,
        "size": out.manifest.len(),
    });
    if let Some(tag) = tag {
        descriptor["annotations"] = json!({ REF_NAME: tag });
    }
    let manifests = index["manifests"]
        .as_array_mut()
        .ok_or_else(|| io::Error::other("index.json has no manifests array"))?;
    // The tag now names this image; an untagged write replaces nothing.
    manifests.retain(|d| tag.is_none() || d["annotations"][REF_NAME].as_str() != tag);
    manifests.push(descriptor);
    let index = serde_json::to_vec(&index).map_err(io::Error::other)?;
    replace(&index_path, scratch, &index)?;
    Ok(manifest)
}

/// `out` as a `docker save` archive at `file`: `manifest.json`, the
/// config as `<hex>.json`, each layer as `<hex>.tar` (its blob as it is:
/// Docker and skopeo tell compression from the first bytes).
pub fn archive(file: &Path, out: Out, scratch: &Path) -> io::Result<()> {
    let temp = scratch.join("archive.tar");
    let mut tar = tar::Builder::new(BufWriter::with_capacity(1 << 20, File::create(&temp)?));
    let config_hex = digest::of(&out.config)[7..].to_string();
    let config_name = format!("{config_hex}.json");
    let mut layer_names = Vec::new();
    for (blob, descriptor) in &out.blobs {
        let digest = descriptor["digest"].as_str().unwrap_or_default();
        let name = format!("{}.tar", digest::hex(digest).unwrap_or(digest));
        if !layer_names.contains(&name) {
            match blob {
                Blob::Original(layer) => member(&mut tar, &name, layer.len as u64, layer.bytes())?,
                Blob::New(path) => {
                    let len = fs::metadata(path)?.len();
                    member(&mut tar, &name, len, File::open(path)?)?;
                }
            }
        }
        layer_names.push(name);
    }
    member(
        &mut tar,
        &config_name,
        out.config.len() as u64,
        out.config.as_slice(),
    )?;
    let manifest = serde_json::to_vec(&json!([{
        "Config": config_name,
        "RepoTags": out.tags,
        "Layers": layer_names,
    }]))
    .map_err(io::Error::other)?;
    member(
        &mut tar,
        "manifest.json",
        manifest.len() as u64,
        manifest.as_slice(),
    )?;
    let file_out = tar.into_inner()?.into_inner().map_err(|e| e.into_error())?;
    file_out.sync_all()?;
    fs::rename(&temp, file)
}

/// A regular member of a `docker save` archive: mode 0644, owned by root,
/// time 0 (the archive's bytes depend on the image only).
fn member<W: Write>(
    tar: &mut tar::Builder<W>,
    name: &str,
    len: u64,
    data: impl io::Read,
) -> io::Result<()> {
    let mut h = tar::Header::new_ustar();
    h.set_size(len);
    h.set_mode(0o644);
    h.set_mtime(0);
    h.set_entry_type(tar::EntryType::Regular);
    tar.append_data(&mut h, name, data)
}

/// `bytes` written to `path` through a temporary file in `scratch` (on the
/// same file system), synced, renamed.
fn replace(path: &Path, scratch: &Path, bytes: &[u8]) -> io::Result<()> {
    let temp = scratch.join(format!(
        "{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("blob")
    ));
    let mut f = File::create(&temp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    fs::rename(&temp, path)
}
