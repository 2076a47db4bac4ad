//! `offload-probe slim` on container images, checked with the tools that
//! move and unpack them, none of which this project wrote:
//!
//! - an image built by `umoci` from trees holding real GPU libraries
//!   (Debian's rocSPARSE; cuRAND from NVIDIA's wheel) is pushed by `skopeo`
//!   to a real registry on 127.0.0.1 (Debian's `docker-registry`), pulled
//!   to an OCI layout, slimmed, pushed back and pulled again (skopeo
//!   verifies every digest on the way); `umoci unpack` of the result holds
//!   each GPU file byte-identical to `offload-probe slim` of the original
//!   file and every other file as it was; Python's `tarfile` finds every
//!   tar header of the rewritten layer (owner, mode, times, xattrs, links)
//!   as it was but the slimmed files' sizes; the probe on the image reports
//!   the coverage it reports on the unpacked tree;
//! - a `docker save` archive written by skopeo is slimmed into another,
//!   which skopeo reads back.

mod support;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use support::*;

const ROCM: &str = "gfx90a:sramecc+:xnack-";
const CUDA: &str = "sm_90";

/// The tools, or `None` (a failure under `CI=true`).
struct Tools {
    probe: PathBuf,
    umoci: PathBuf,
    skopeo: PathBuf,
    registry: PathBuf,
}

fn tools() -> Option<Tools> {
    Some(Tools {
        probe: built("offload-probe")?,
        umoci: system_tool("umoci", "umoci")?,
        skopeo: system_tool("skopeo", "skopeo")?,
        registry: system_tool("docker-registry", "docker-registry")?,
    })
}

/// cuRAND's library from NVIDIA's wheel (`.ci/cuda-wheels.sh`).
fn curand() -> Option<Vec<u8>> {
    Some(std::fs::read(nvidia_library("libcurand.so.10")?).unwrap())
}

/// A registry on 127.0.0.1, stopped when dropped.
struct Registry {
    child: Child,
    address: String,
}

impl Registry {
    fn start(binary: &Path, dir: &Path) -> Registry {
        // A free port: bound, read, released, then given to the registry.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let address = format!("127.0.0.1:{port}");
        let config = dir.join("registry.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {address}\n",
                dir.join("storage").display()
            ),
        )
        .unwrap();
        let child = Command::new(binary)
            .arg("serve")
            .arg(&config)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let registry = Registry { child, address };
        // Ready when it answers: the registry's API root (no timing
        // assumption: it is asked until it answers, or has exited).
        let mut registry = registry;
        loop {
            if std::net::TcpStream::connect(&registry.address).is_ok() {
                break;
            }
            if let Ok(Some(status)) = registry.child.try_wait() {
                panic!("docker-registry exited: {status}");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        registry
    }

    fn image(&self, name: &str) -> String {
        format!("docker://{}/{name}", self.address)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn skopeo_copy(t: &Tools, from: &str, to: &str) {
    run_ok(
        Command::new(&t.skopeo)
            .args(["--insecure-policy", "copy", "--quiet"])
            .args(["--src-tls-verify=false", "--dest-tls-verify=false"])
            .args([from, to]),
    );
}

/// An OCI layout at `dir` with image `tag` of three layers built by umoci:
/// the first with rocSPARSE (if given), a symbolic link to it, a text file
/// with an extended attribute and a file to be deleted; the second with
/// cuRAND under two names (a hard link), and the deletion (a whiteout); the
/// third with a text file only.
fn build_image(t: &Tools, dir: &Path, tag: &str, rocsparse: Option<&Path>, curand: &[u8]) {
    let layout = dir.join("layout");
    let image = format!("{}:{tag}", layout.display());
    if !layout.exists() {
        run_ok(
            Command::new(&t.umoci)
                .args(["init", "--layout"])
                .arg(&layout),
        );
    }
    run_ok(Command::new(&t.umoci).args(["new", "--image", &image]));
    let bundle = dir.join(format!("bundle-{tag}"));
    run_ok(
        Command::new(&t.umoci)
            .args(["unpack", "--rootless", "--image", &image])
            .arg(&bundle),
    );
    let root = bundle.join("rootfs");
    let lib = root.join("usr/lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::create_dir_all(root.join("etc")).unwrap();
    if let Some(r) = rocsparse {
        std::fs::copy(r, lib.join("librocsparse.so.0.1")).unwrap();
        std::os::unix::fs::symlink("librocsparse.so.0.1", lib.join("librocsparse.so.0")).unwrap();
    }
    std::fs::write(root.join("etc/motd"), "GPU image\n").unwrap();
    std::fs::write(root.join("etc/gone"), "deleted by the next layer\n").unwrap();
    run_ok(
        Command::new("setfattr")
            .args(["-n", "user.origin", "-v", "test"])
            .arg(root.join("etc/motd")),
    );
    // Each repack adds a layer on the last (the bundle refreshed to it).
    let repack = || {
        run_ok(
            Command::new(&t.umoci)
                .args(["repack", "--refresh-bundle", "--image", &image])
                .arg(&bundle),
        )
    };
    repack();
    std::fs::write(lib.join("libcurand.so.10"), curand).unwrap();
    std::fs::hard_link(lib.join("libcurand.so.10"), lib.join("libcurand-again.so")).unwrap();
    std::fs::remove_file(root.join("etc/gone")).unwrap();
    repack();
    std::fs::write(root.join("etc/hostname"), "gpu\n").unwrap();
    repack();
}

/// `umoci unpack` of `image` into `dir`: its root file system.
fn unpack(t: &Tools, image: &str, dir: &Path) -> PathBuf {
    run_ok(
        Command::new(&t.umoci)
            .args(["unpack", "--rootless", "--image", image])
            .arg(dir),
    );
    dir.join("rootfs")
}

/// What is under `root`: per path, a regular file's bytes, a symbolic
/// link's target, or a directory.
fn tree(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = e.path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            let m = std::fs::symlink_metadata(&path).unwrap();
            let what = if m.file_type().is_symlink() {
                format!("link {}", std::fs::read_link(&path).unwrap().display())
            } else if m.is_dir() {
                stack.push(path);
                "dir".into()
            } else {
                format!("file {:x}", fnv_of(&std::fs::read(&path).unwrap()))
            };
            out.insert(rel, what);
        }
    }
    out
}

fn fnv_of(bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325;
    fnv(&mut h, bytes);
    h
}

/// `offload-probe slim` of one file, for the devices: the bytes it writes
/// (the original's when it writes nothing).
fn slim_alone(t: &Tools, file: &Path, out: &Path) -> Vec<u8> {
    let status = Command::new(&t.probe)
        .args(["slim", "--device", ROCM, "--device", CUDA, "--output"])
        .arg(out)
        .arg(file)
        .status()
        .unwrap();
    assert!(status.code().is_some_and(|c| c <= 1), "{status}");
    let name = file.file_name().unwrap();
    std::fs::read(out.join(name)).unwrap_or_else(|_| std::fs::read(file).unwrap())
}

/// The probe's coverage and per-file verdicts, as JSON, with each file's
/// path cut to its path in the image.
fn coverage(t: &Tools, what: &str, prefix: &str) -> (serde_json::Value, BTreeMap<String, String>) {
    let out = Command::new(&t.probe)
        .args(["--json", "--device", ROCM, "--device", CUDA, what])
        .output()
        .unwrap();
    assert!(out.status.code().is_some_and(|c| c <= 1), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let files = v["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let path = o["path"].as_str().unwrap();
            let rel = path
                .strip_prefix(prefix)
                .unwrap_or(path)
                .trim_start_matches('/');
            (rel.to_string(), o["verdicts"].to_string())
        })
        .collect();
    (v["coverage"].clone(), files)
}

/// Asserts that the probe gives image `image` the coverage and per-file
/// verdicts it gives `other` (an unpacked tree, or an image), `files` files
/// of GPU code.
fn same_coverage(t: &Tools, image: &str, other: &str, files: usize) {
    let prefix = |name: &str| match std::path::Path::new(name).is_dir() {
        true => name.to_string(),
        false => format!("{name}!"),
    };
    let (image_coverage, image_files) = coverage(t, image, &prefix(image));
    let (other_coverage, other_files) = coverage(t, other, &prefix(other));
    assert_eq!(image_coverage, other_coverage);
    assert_eq!(image_files, other_files);
    assert_eq!(image_files.len(), files, "{image_files:?}");
}

/// Python's `tarfile` (a reader this project did not write) on two layer
/// blobs: every header field of every member, the old against the new, but
/// the size of the members slimmed; prints the names whose data changed.
const COMPARE_LAYERS: &str = r#"
import sys, tarfile
def members(p):
    with tarfile.open(p) as t:
        return [(m, t.extractfile(m).read() if m.isreg() else None) for m in t.getmembers()]
old, new = members(sys.argv[1]), members(sys.argv[2])
assert [m.name for m, _ in old] == [m.name for m, _ in new], "names differ"
xattrs = 0
for (a, da), (b, db) in zip(old, new):
    for f in ("mode", "uid", "gid", "uname", "gname", "mtime", "type", "linkname", "devmajor", "devminor", "pax_headers"):
        assert getattr(a, f) == getattr(b, f), (a.name, f, getattr(a, f), getattr(b, f))
    xattrs += sum(k.startswith("SCHILY.xattr.") for k in a.pax_headers)
    if da != db:
        print("changed", a.name)
print("xattrs", xattrs)
"#;

/// The layer blobs of `tag` in OCI layout `dir`, in order.
fn layers(dir: &Path, tag: &str) -> Vec<PathBuf> {
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
    let m = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == tag)
        .unwrap();
    let blob = |d: &serde_json::Value| {
        dir.join("blobs/sha256")
            .join(d.as_str().unwrap().trim_start_matches("sha256:"))
    };
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(blob(&m["digest"])).unwrap()).unwrap();
    assert!(
        manifest["annotations"]["org.offload-loader.slim.devices"].is_string() || tag == "base",
        "{manifest}"
    );
    manifest["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| blob(&l["digest"]))
        .collect()
}

#[test]
fn an_image_slimmed_through_a_registry_unpacks_to_the_slimmed_files() {
    let (Some(t), Some(rocsparse), Some(curand)) = (tools(), rocsparse(), curand()) else {
        return;
    };
    let dir = scratch("slim-images-registry");
    build_image(&t, &dir, "base", Some(&rocsparse), &curand);
    let registry = Registry::start(&t.registry, &dir);
    let built = format!("oci:{}:base", dir.join("layout").display());
    skopeo_copy(&t, &built, &registry.image("gpu:base"));
    let pulled = dir.join("pulled");
    let pulled_base = format!("oci:{}:base", pulled.display());
    skopeo_copy(&t, &registry.image("gpu:base"), &pulled_base);

    let slimmed = format!("oci:{}:slim", pulled.display());
    let out = run_ok(
        Command::new(&t.probe)
            .args(["slim", "--device", ROCM, "--device", CUDA, "--json"])
            .arg(&pulled_base)
            .args(["--output", &slimmed]),
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let image = &report["images"][0];
    assert_eq!(image["output"], slimmed.as_str(), "{report}");
    let layers_report = image["layers"].as_array().unwrap();
    assert_eq!(layers_report.len(), 3, "{image}");
    // The layer without GPU code is kept by digest; both GPU layers shrink.
    assert_eq!(layers_report[2]["digest"], layers_report[2]["new_digest"]);
    for l in &layers_report[..2] {
        assert!(
            l["after"].as_u64() < l["before"].as_u64(),
            "a GPU layer did not shrink: {l}"
        );
    }

    // Through the registry and back: skopeo checks every digest.
    skopeo_copy(&t, &slimmed, &registry.image("gpu:slim"));
    let again = dir.join("again");
    let again_slim = format!("oci:{}:slim", again.display());
    skopeo_copy(&t, &registry.image("gpu:slim"), &again_slim);

    // Every file: a GPU file is what slim makes of the original file, any
    // other as it was.
    let before = unpack(
        &t,
        &format!("{}:base", pulled.display()),
        &dir.join("unpacked-base"),
    );
    let after = unpack(
        &t,
        &format!("{}:slim", again.display()),
        &dir.join("unpacked-slim"),
    );
    let (old, new) = (tree(&before), tree(&after));
    assert_eq!(
        old.keys().collect::<Vec<_>>(),
        new.keys().collect::<Vec<_>>()
    );
    assert!(
        !old.contains_key("etc/gone"),
        "the whiteout was not applied"
    );
    let alone = dir.join("alone");
    let mut gpu = 0;
    for (path, what) in &old {
        let file = before.join(path);
        let is_gpu = [
            "librocsparse.so.0.1",
            "libcurand.so.10",
            "libcurand-again.so",
        ]
        .iter()
        .any(|n| path.ends_with(n));
        let expected = if is_gpu && what.starts_with("file") {
            gpu += 1;
            let slim = slim_alone(&t, &file, &alone.join(path.replace('/', "_")));
            assert_ne!(
                fnv_of(&slim),
                fnv_of(&std::fs::read(&file).unwrap()),
                "{path}"
            );
            format!("file {:x}", fnv_of(&slim))
        } else {
            what.clone()
        };
        assert_eq!(new[path], expected, "{path}");
    }
    assert_eq!(gpu, 3);
    // Modes and times as the original's, for every entry.
    for path in old.keys() {
        let (a, b) = (
            std::fs::symlink_metadata(before.join(path)).unwrap(),
            std::fs::symlink_metadata(after.join(path)).unwrap(),
        );
        use std::os::unix::fs::MetadataExt;
        assert_eq!((a.mode(), a.mtime()), (b.mode(), b.mtime()), "{path}");
    }

    // Each rewritten layer's headers, by Python's tarfile.
    let (old_layers, new_layers) = (layers(&pulled, "base"), layers(&again, "slim"));
    let mut changed = Vec::new();
    let mut xattrs = 0;
    for (a, b) in old_layers.iter().zip(&new_layers) {
        let out = run_ok(
            Command::new("python3")
                .arg("-c")
                .arg(COMPARE_LAYERS)
                .arg(a)
                .arg(b),
        );
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some(name) = line.strip_prefix("changed ") {
                changed.push(name.trim_start_matches("./").to_string());
            } else if let Some(n) = line.strip_prefix("xattrs ") {
                xattrs += n.parse::<usize>().unwrap();
            }
        }
    }
    // cuRAND's data is in the entry of its first name in the layer (the
    // other is a hard link entry, with none); nothing else changes.
    changed.sort();
    assert_eq!(changed.len(), 2, "{changed:?}");
    assert!(
        ["usr/lib/libcurand-again.so", "usr/lib/libcurand.so.10"].contains(&changed[0].as_str()),
        "{changed:?}"
    );
    assert_eq!(changed[1], "usr/lib/librocsparse.so.0.1");
    assert!(xattrs > 0, "umoci wrote no extended attribute to compare");

    // The probe on the image gives what it gives on the unpacked tree.
    same_coverage(&t, &again_slim, after.to_str().unwrap(), 2);
    // Gigabytes of layers and trees: kept only when the test fails.
    drop(registry);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_docker_archive_round_trips_through_skopeo() {
    let (Some(t), Some(curand)) = (tools(), curand()) else {
        return;
    };
    let dir = scratch("slim-images-archive");
    build_image(&t, &dir, "small", None, &curand);
    let archive = dir.join("saved.tar");
    skopeo_copy(
        &t,
        &format!("oci:{}:small", dir.join("layout").display()),
        &format!("docker-archive:{}:gpu:small", archive.display()),
    );
    let slimmed = dir.join("slimmed.tar");
    run_ok(
        Command::new(&t.probe)
            .args(["slim", "--device", CUDA])
            .arg(format!("docker-archive:{}", archive.display()))
            .arg("--output")
            .arg(format!("docker-archive:{}:gpu:slim", slimmed.display())),
    );
    assert!(
        std::fs::metadata(&slimmed).unwrap().len() < std::fs::metadata(&archive).unwrap().len()
    );
    // skopeo reads it back (every layer against the config's diff_ids).
    let back = dir.join("back");
    skopeo_copy(
        &t,
        &format!("docker-archive:{}", slimmed.display()),
        &format!("oci:{}:slim", back.display()),
    );
    let root = unpack(
        &t,
        &format!("{}:slim", back.display()),
        &dir.join("unpacked"),
    );
    let original = dir.join("curand/libcurand.so.10");
    std::fs::create_dir_all(original.parent().unwrap()).unwrap();
    std::fs::write(&original, &curand).unwrap();
    let expected = slim_alone_for(&t, &original, &dir.join("alone"), CUDA);
    assert_eq!(
        std::fs::read(root.join("usr/lib/libcurand.so.10")).unwrap(),
        expected
    );
    assert_eq!(
        std::fs::read_to_string(root.join("etc/motd")).unwrap(),
        "GPU image\n"
    );
    // The probe reads the archive's uncompressed layers where they lie and
    // gives what it gives on the unpacked tree.
    let name = format!("docker-archive:{}", slimmed.display());
    same_coverage(&t, &name, root.to_str().unwrap(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `offload-probe slim` of one file for one device: the bytes it writes.
fn slim_alone_for(t: &Tools, file: &Path, out: &Path, device: &str) -> Vec<u8> {
    run_ok(
        Command::new(&t.probe)
            .args(["slim", "--device", device, "--output"])
            .arg(out)
            .arg(file),
    );
    std::fs::read(out.join(file.file_name().unwrap())).unwrap()
}

/// The platform name (Go's `GOARCH`) of this machine's architecture.
fn this_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

#[test]
fn an_index_of_platforms_is_read_for_this_machine_as_skopeo_reads_it() {
    let (Some(t), Some(curand)) = (tools(), curand()) else {
        return;
    };
    let dir = scratch("slim-images-index");
    build_image(&t, &dir, "gpu", None, &curand);
    let layout = dir.join("layout");
    run_ok(Command::new(&t.umoci).args(["new", "--image", &format!("{}:empty", layout.display())]));
    // An index of the two: the empty image for another architecture first.
    let index_path = layout.join("index.json");
    let mut index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&index_path).unwrap()).unwrap();
    let tagged = |tag: &str| {
        let mut d = index["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["annotations"]["org.opencontainers.image.ref.name"] == tag)
            .unwrap()
            .clone();
        d.as_object_mut().unwrap().remove("annotations");
        d
    };
    let other = if this_arch() == "s390x" {
        "amd64"
    } else {
        "s390x"
    };
    let (mut empty, mut gpu) = (tagged("empty"), tagged("gpu"));
    empty["platform"] = serde_json::json!({ "os": "linux", "architecture": other });
    gpu["platform"] = serde_json::json!({ "os": "linux", "architecture": this_arch() });
    let nested = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [empty, gpu],
    }))
    .unwrap();
    // Named by its digest, as `sha256sum` gives it.
    let staged = dir.join("nested-index.json");
    std::fs::write(&staged, &nested).unwrap();
    let sum = run_ok(Command::new("sha256sum").arg(&staged));
    let hex = String::from_utf8(sum.stdout).unwrap()[..64].to_string();
    std::fs::rename(&staged, layout.join("blobs/sha256").join(&hex)).unwrap();
    index["manifests"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "digest": format!("sha256:{hex}"),
            "size": nested.len(),
            "annotations": { "org.opencontainers.image.ref.name": "multi" },
        }));
    std::fs::write(&index_path, serde_json::to_vec(&index).unwrap()).unwrap();
    let multi = format!("oci:{}:multi", layout.display());

    // skopeo, without --all, copies this machine's image out of the index.
    let picked = format!("oci:{}:p", dir.join("picked").display());
    skopeo_copy(&t, &multi, &picked);
    // The probe reads the same image from the index, and says which.
    same_coverage(&t, &multi, &picked, 1);
    // Slim writes that image alone, which skopeo reads back.
    let slimmed = format!("oci:{}:s", dir.join("slimmed").display());
    let out = run_ok(Command::new(&t.probe).args([
        "slim", "--device", CUDA, &multi, "--output", &slimmed, "--json",
    ]));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["images"][0]["platform"],
        format!("linux/{}", this_arch())
    );
    assert_eq!(report["images"][0]["layers"].as_array().unwrap().len(), 3);
    skopeo_copy(
        &t,
        &slimmed,
        &format!("oci:{}:b", dir.join("back").display()),
    );
    let _ = std::fs::remove_dir_all(&dir);
}
