//! An image read: from an OCI image layout (`image-layout.md`: `oci-layout`,
//! `index.json`, `blobs/sha256/…`) or a `docker save` archive (a tar of
//! `manifest.json`, the config and the layers). Manifests, configs and
//! indexes are JSON values: every field the tools wrote is kept.

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use offload_loader::MappedFile;
use rayon::prelude::*;
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
    /// The platform it was chosen for (`os/architecture`) where the tag
    /// names an index of images for several.
    pub platform: Option<String>,
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
    /// Whether `digest` was hashed from its bytes when the image was read
    /// (an archive's): then it is what they hash to.
    pub hashed: bool,
    /// Its descriptor in the manifest (an archive's: made here).
    pub descriptor: Value,
    /// The config's `diff_id` for it.
    pub diff_id: Option<String>,
}

impl Layer {
    pub fn bytes(&self) -> &[u8] {
        &self.file.bytes()[self.at..self.at + self.len]
    }

    /// What its bytes hash to: hashed now, unless they were when the image
    /// was read.
    pub fn blob_digest(&self) -> String {
        if self.hashed {
            self.digest.clone()
        } else {
            digest::of(self.bytes())
        }
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
    let (manifest_descriptor, platform) = match descriptor["mediaType"].as_str() {
        Some(OCI_INDEX | DOCKER_LIST) => {
            let (chosen, platform) = for_this_platform(dir, descriptor).map_err(at)?;
            (chosen, Some(platform))
        }
        _ => (descriptor.clone(), None),
    };
    let media = manifest_descriptor["mediaType"]
        .as_str()
        .unwrap_or(OCI_MANIFEST);
    let digest = manifest_descriptor["digest"].as_str().unwrap_or_default();
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
            hashed: false,
            descriptor,
            diff_id: Some(diff_id),
        });
    }
    Ok(Image {
        manifest: Some(manifest),
        config,
        layers,
        tags: tag_of(descriptor).into_iter().collect(),
        platform,
    })
}

/// The platform an image is chosen for from an index: this machine's, as
/// skopeo and the container runtimes choose without `--all`
/// (containers/image `platform.WantedPlatforms`), in the names of OCI
/// `image-index.md`'s `platform` (Go's `GOOS` and `GOARCH`).
fn this_platform() -> (&'static str, &'static str) {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "loongarch64" => "loong64",
        other => other,
    };
    ("linux", arch)
}

/// The descriptor, in the index `descriptor` names, of the image for this
/// machine's platform ([`this_platform`]), and that platform.
fn for_this_platform(dir: &Path, descriptor: &Value) -> Result<(Value, String), String> {
    let digest = descriptor["digest"].as_str().unwrap_or_default();
    let index = json(&small_blob(dir, digest)?, "index")?;
    let (os, arch) = this_platform();
    let manifests = index["manifests"].as_array().cloned().unwrap_or_default();
    let chosen = choose_platform(&manifests, os, arch).ok_or_else(|| {
        let listed: Vec<String> = manifests.iter().map(platform_of).collect();
        format!(
            "the tag names an index of images for several platforms, none for {os}/{arch} \
             (this machine's; it has {}): copy one into a layout (skopeo copy \
             --override-arch …) and name it",
            listed.join(", ")
        )
    })?;
    if matches!(chosen["mediaType"].as_str(), Some(OCI_INDEX | DOCKER_LIST)) {
        return Err(format!(
            "the index's entry for {os}/{arch} is an index again: not read"
        ));
    }
    Ok((chosen, format!("{os}/{arch}")))
}

/// The first of `manifests` (an index's descriptors) for `os` and `arch`,
/// one without a variant or with the architecture's first (`arm64`'s
/// `v8`) before any other, as containers/image ranks them.
fn choose_platform(manifests: &[Value], os: &str, arch: &str) -> Option<Value> {
    let matching = |d: &&Value| {
        d["platform"]["os"].as_str() == Some(os)
            && d["platform"]["architecture"].as_str() == Some(arch)
    };
    let plain = |d: &&Value| match d["platform"]["variant"].as_str() {
        None | Some("") => true,
        Some(v) => arch == "arm64" && v == "v8",
    };
    let all: Vec<&Value> = manifests.iter().filter(matching).collect();
    all.iter()
        .find(|d| plain(d))
        .or_else(|| all.first())
        .map(|d| (*d).clone())
}

/// An index entry's platform as `os/architecture[/variant]`.
fn platform_of(d: &Value) -> String {
    let p = &d["platform"];
    let mut s = format!(
        "{}/{}",
        p["os"].as_str().unwrap_or("?"),
        p["architecture"].as_str().unwrap_or("?")
    );
    if let Some(v) = p["variant"].as_str().filter(|v| !v.is_empty()) {
        s.push('/');
        s.push_str(v);
    }
    s
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
    let placed: Vec<(usize, usize, String)> = paired(&image["Layers"], &config, "manifest.json")
        .and_then(|layers| {
            layers
                .into_iter()
                .map(|(path, diff_id)| {
                    let (l_at, l_len) = member(path.as_str().unwrap_or_default())?;
                    Ok((l_at, l_len, diff_id))
                })
                .collect()
        })
        .map_err(at)?;
    // Each layer hashed for the digest that names it, on every core.
    let layers: Vec<Layer> = placed
        .into_par_iter()
        .map(|(l_at, l_len, diff_id)| {
            let bytes = &map.bytes()[l_at..l_at + l_len];
            let digest = digest::of(bytes);
            let media = match super::layer::Compression::of(bytes) {
                super::layer::Compression::Gzip => "application/vnd.oci.image.layer.v1.tar+gzip",
                super::layer::Compression::Zstd => "application/vnd.oci.image.layer.v1.tar+zstd",
                super::layer::Compression::None => "application/vnd.oci.image.layer.v1.tar",
            };
            Layer {
                file: map.clone(),
                at: l_at,
                len: l_len,
                descriptor: serde_json::json!({
                    "mediaType": media, "digest": digest, "size": l_len,
                }),
                digest,
                hashed: true,
                diff_id: Some(diff_id),
            }
        })
        .collect();
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
        platform: None,
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Writes `bytes` as a blob of layout `dir`; its descriptor.
    fn blob(dir: &Path, media: &str, bytes: &[u8]) -> Value {
        let digest = digest::of(bytes);
        let path = blob_path(dir, &digest).unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, bytes).unwrap();
        json!({ "mediaType": media, "digest": digest, "size": bytes.len() })
    }

    /// An image of one layer holding `name`, in layout `dir`: its
    /// manifest's descriptor.
    fn image(dir: &Path, name: &str) -> Value {
        let mut tar = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_ustar();
        h.set_size(0);
        tar.append_data(&mut h, name, &[][..]).unwrap();
        let layer = tar.into_inner().unwrap();
        let layer_d = blob(dir, "application/vnd.oci.image.layer.v1.tar", &layer);
        let config = json!({ "rootfs": { "type": "layers", "diff_ids": [digest::of(&layer)] } });
        let config_d = blob(
            dir,
            "application/vnd.oci.image.config.v1+json",
            &serde_json::to_vec(&config).unwrap(),
        );
        let manifest = json!({
            "schemaVersion": 2, "mediaType": OCI_MANIFEST,
            "config": config_d, "layers": [layer_d],
        });
        blob(dir, OCI_MANIFEST, &serde_json::to_vec(&manifest).unwrap())
    }

    /// A layout whose tag `multi` names an index of `images` (platform,
    /// the file its one layer holds).
    fn layout(tag: &str, images: &[(Value, &str)]) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("offload-slim-index-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
        let manifests: Vec<Value> = images
            .iter()
            .map(|(platform, name)| {
                let mut d = image(&dir, name);
                d["platform"] = platform.clone();
                d
            })
            .collect();
        let index = json!({ "schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests });
        let mut index_d = blob(&dir, OCI_INDEX, &serde_json::to_vec(&index).unwrap());
        index_d["annotations"] = json!({ REF_NAME: "multi" });
        let top = json!({ "schemaVersion": 2, "manifests": [index_d] });
        std::fs::write(dir.join("index.json"), serde_json::to_vec(&top).unwrap()).unwrap();
        dir
    }

    /// The one file the image read holds.
    fn file_of(image: &Image) -> String {
        let bytes = image.layers[0].bytes();
        let mut a = tar::Archive::new(bytes);
        let e = a.entries().unwrap().next().unwrap().unwrap();
        e.path().unwrap().display().to_string()
    }

    #[test]
    fn an_index_gives_the_image_for_this_machines_platform() {
        let (os, arch) = this_platform();
        let here = json!({ "os": os, "architecture": arch });
        let dir = layout(
            "here",
            &[
                (
                    json!({ "os": "unknown", "architecture": "unknown" }),
                    "attestation",
                ),
                (json!({ "os": os, "architecture": "not-this-one" }), "other"),
                (
                    json!({ "os": os, "architecture": arch, "variant": "v9" }),
                    "variant",
                ),
                (here, "this"),
            ],
        );
        let image = oci(&dir, Some("multi")).unwrap();
        assert_eq!(
            image.platform.as_deref(),
            Some(format!("{os}/{arch}").as_str())
        );
        assert_eq!(file_of(&image), "this");
        assert_eq!(image.tags, ["multi"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_layers_bytes_are_hashed_unless_its_digest_was_hashed_from_them() {
        let (os, arch) = this_platform();
        let dir = layout(
            "hashed",
            &[(json!({ "os": os, "architecture": arch }), "a")],
        );
        let image = oci(&dir, Some("multi")).unwrap();
        let layer = &image.layers[0];
        // A layout's digest is the manifest's word: the bytes are hashed.
        assert!(!layer.hashed);
        let mut named = layer.clone();
        named.digest = digest::of(b"not these bytes");
        assert_eq!(named.blob_digest(), layer.digest);
        // An archive's was hashed from the bytes as it was read.
        named.hashed = true;
        assert_eq!(named.blob_digest(), named.digest);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_index_without_this_machines_platform_is_refused_naming_those_it_has() {
        let dir = layout(
            "none",
            &[(json!({ "os": "linux", "architecture": "mips64le" }), "a")],
        );
        let e = oci(&dir, Some("multi")).err().unwrap();
        assert!(e.contains("it has linux/mips64le"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_variant_is_taken_only_where_no_plain_entry_is() {
        let d = |arch: &str, variant: Option<&str>| {
            let mut p = json!({ "os": "linux", "architecture": arch });
            if let Some(v) = variant {
                p["variant"] = json!(v);
            }
            json!({ "platform": p })
        };
        let arm = [
            d("arm64", Some("v9")),
            d("arm64", Some("v8")),
            d("arm64", None),
        ];
        let chosen = choose_platform(&arm, "linux", "arm64").unwrap();
        assert_eq!(chosen["platform"]["variant"], "v8");
        let only = [d("amd64", Some("v3"))];
        assert_eq!(
            choose_platform(&only, "linux", "amd64").unwrap()["platform"]["variant"],
            "v3"
        );
        assert!(choose_platform(&only, "linux", "arm64").is_none());
        assert_eq!(platform_of(&arm[0]), "linux/arm64/v9");
    }
}
