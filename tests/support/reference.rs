//! What the reference tools say: `clang-offload-bundler -list`/`-unbundle`,
//! `llvm-objdump --offloading`, `llvm-offload-binary`, `llvm-readobj -S` and
//! `roc-obj-ls -v`, parsed.

use std::fmt::Write as _;
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::process::Command;

use super::build::{run_tool, temp_dir};
use super::tools::in_path;
use super::{missing, Toolchain};

/// One image in `llvm-objdump --offloading`'s listing of offload binaries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffloadingImage {
    /// The `file format` header it came under: the file, or `lib.a(member.o)`.
    pub file: String,
    /// `N` of `OFFLOADING IMAGE [N]:`.
    pub index: usize,
    /// `elf`, `llvm ir`, `cubin`, `fatbinary`, `ptx`, `spir-v`, `<none>`.
    pub kind: String,
    pub arch: String,
    pub triple: String,
    /// From the offload kind: `openmp`, `cuda`, `hip`, `sycl`, `none`.
    pub producer: String,
}

/// One bundle entry `llvm-objdump --offloading` extracted from a `.hip_fatbin`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtractedEntry {
    /// Which bundle of the section (0-based), compressed or not.
    pub bundle: usize,
    /// Bundle ID as written in the file (e.g. `hipv4-amdgcn-amd-amdhsa--gfx906`).
    pub id: String,
    pub bytes: Vec<u8>,
}

/// What `llvm-objdump --offloading` says about a file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Offloading {
    /// Offload binaries found in `.llvm.offloading` (or the file itself).
    pub images: Vec<OffloadingImage>,
    /// Entries of the bundles in `.hip_fatbin`, which it writes to
    /// `<input>.<bundle>.<id>` next to the input.
    pub entries: Vec<ExtractedEntry>,
}

/// A section, from `llvm-readobj --elf-output-style=JSON -S`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    pub index: u64,
    pub name: String,
    /// `sh_type` (`SHT_LLVM_OFFLOADING` = 0x6fff4c0b).
    pub kind: u32,
    pub kind_name: String,
    pub flags: u64,
    pub address: u64,
    pub offset: u64,
    pub size: u64,
    pub align: u64,
}

/// One line of `roc-obj-ls -v`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RocObjEntry {
    /// 1-based bundle number.
    pub bundle: usize,
    pub id: String,
    /// `file://<path>#offset=<n>&size=<n>` (path as given, URI-encoded).
    pub uri: String,
    /// Absolute file offset of the code object.
    pub offset: u64,
    pub size: u64,
}

impl Toolchain {
    /// `clang-offload-bundler -list -type=o -input=<file>`: the bundle IDs of
    /// the FIRST bundle in the file, in the tool's (hash) order, not file
    /// order. `Err(stderr)` when the tool fails.
    pub fn bundler_list(&self, file: &Path) -> Result<Vec<String>, String> {
        let out = run_tool(
            Command::new(&self.bundler)
                .arg("-list")
                .arg("-type=o")
                .arg(format!("-input={}", file.display())),
        )?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.trim().to_string())
            .collect())
    }

    /// `clang-offload-bundler -unbundle -type=o -targets=<id> -input=<file>
    /// -output=<tmp>`: the entry's bytes (first bundle only; decompresses).
    pub fn unbundle(&self, file: &Path, id: &str) -> Result<Vec<u8>, String> {
        let dir = temp_dir();
        let out = dir.join("entry");
        run_tool(
            Command::new(&self.bundler)
                .arg("-unbundle")
                .arg("-type=o")
                .arg(format!("-targets={id}"))
                .arg(format!("-input={}", file.display()))
                .arg(format!("-output={}", out.display())),
        )?;
        fs::read(&out).map_err(|e| e.to_string())
    }

    /// `llvm-objdump --offloading <file>`, run on a link to the file in a
    /// scratch directory so the extracted bundle entries land there. Beware:
    /// on librocsparse it would write 1.3 GB.
    pub fn objdump_offloading(&self, file: &Path) -> Result<Offloading, String> {
        let dir = temp_dir();
        let link = dir.join("input");
        let target = fs::canonicalize(file).map_err(|e| format!("{}: {e}", file.display()))?;
        std::os::unix::fs::symlink(target, &link).unwrap();
        let out = run_tool(
            Command::new(&self.objdump)
                .arg("--offloading")
                .arg("input")
                .current_dir(&*dir),
        )?;
        let text = String::from_utf8_lossy(&out.stdout);
        let mut result = Offloading::default();
        let mut file_name = String::new();
        let mut current: Option<OffloadingImage> = None;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("OFFLOADING IMAGE [") {
                result.images.extend(current.take());
                let index = rest.trim_end_matches("]:").parse().unwrap_or(usize::MAX);
                current = Some(OffloadingImage {
                    file: file_name.clone(),
                    index,
                    kind: String::new(),
                    arch: String::new(),
                    triple: String::new(),
                    producer: String::new(),
                });
            } else if let Some(name) = line.strip_prefix("Extracting offload bundle: ") {
                let name = name.trim();
                let rest = name
                    .strip_prefix("input.")
                    .ok_or_else(|| format!("unexpected extracted name {name}"))?;
                let (n, id) = rest
                    .split_once('.')
                    .ok_or_else(|| format!("unexpected extracted name {name}"))?;
                let bytes = fs::read(dir.join(name)).map_err(|e| format!("{name}: {e}"))?;
                let _ = fs::remove_file(dir.join(name));
                result.entries.push(ExtractedEntry {
                    bundle: n
                        .parse()
                        .map_err(|_| format!("bad bundle index in {name}"))?,
                    id: id.to_string(),
                    bytes,
                });
            } else if let Some((name, _)) = line.split_once(":\tfile format ") {
                result.images.extend(current.take());
                let name = name.trim();
                file_name = match name.strip_prefix("input") {
                    Some(member) => format!("{}{member}", file.display()),
                    None => name.to_string(),
                };
            } else if let Some(img) = current.as_mut() {
                if let Some((key, value)) = line.split_once(char::is_whitespace) {
                    let value = value.trim().to_string();
                    match key {
                        "kind" => img.kind = value,
                        "arch" => img.arch = value,
                        "triple" => img.triple = value,
                        "producer" => img.producer = value,
                        _ => {}
                    }
                }
            }
        }
        result.images.extend(current.take());
        Ok(result)
    }

    /// `llvm-offload-binary <file> --image=file=<tmp>,<k>=<v>...`: the bytes
    /// of the image matching the keys (e.g. `[("arch", "gfx90a")]`). Works on
    /// raw offload binaries and on ELF files with `.llvm.offloading`.
    pub fn offload_binary_extract(
        &self,
        file: &Path,
        keys: &[(&str, &str)],
    ) -> Result<Vec<u8>, String> {
        let dir = temp_dir();
        let out = dir.join("image");
        let mut spec = format!("--image=file={}", out.display());
        for (k, v) in keys {
            write!(spec, ",{k}={v}").unwrap();
        }
        run_tool(Command::new(&self.offload_binary).arg(file).arg(spec))?;
        fs::read(&out).map_err(|e| format!("no image matched {keys:?}: {e}"))
    }

    /// The sections of an ELF file (`llvm-readobj --elf-output-style=JSON -S`).
    pub fn sections(&self, file: &Path) -> Result<Vec<Section>, String> {
        let out = run_tool(
            Command::new(&self.readobj)
                .arg("--elf-output-style=JSON")
                .arg("-S")
                .arg(file),
        )?;
        let json: serde_json::Value =
            serde_json::from_slice(&out.stdout).map_err(|e| format!("readobj JSON: {e}"))?;
        let list = json[0]["Sections"]
            .as_array()
            .ok_or("readobj JSON: no Sections")?;
        Ok(list
            .iter()
            .map(|s| {
                let s = &s["Section"];
                let n = |k: &str| s[k].as_u64().unwrap_or(0);
                Section {
                    index: n("Index"),
                    name: s["Name"]["Name"].as_str().unwrap_or("").to_string(),
                    kind: s["Type"]["Value"].as_u64().unwrap_or(0) as u32,
                    kind_name: s["Type"]["Name"].as_str().unwrap_or("").to_string(),
                    flags: s["Flags"]["Value"].as_u64().unwrap_or(0),
                    address: n("Address"),
                    offset: n("Offset"),
                    size: n("Size"),
                    align: n("AddressAlignment"),
                }
            })
            .collect())
    }

    /// The first section called `name`, if any.
    pub fn section(&self, file: &Path, name: &str) -> Option<Section> {
        self.sections(file)
            .unwrap_or_else(|e| panic!("{e}"))
            .into_iter()
            .find(|s| s.name == name)
    }

    /// The `.hip_fatbin` section of `file` and its contents; panics if there
    /// is none.
    pub fn hip_fatbin(&self, file: &Path) -> (Section, Vec<u8>) {
        let s = self
            .section(file, ".hip_fatbin")
            .unwrap_or_else(|| panic!("{} has no .hip_fatbin", file.display()));
        let bytes = read_range(file, s.offset, s.size);
        (s, bytes)
    }

    /// The contents of section `name` (e.g. `.hip_fatbin`, `.llvm.offloading`),
    /// read from the file at the offset `llvm-readobj` gives.
    pub fn section_bytes(&self, file: &Path, name: &str) -> Option<Vec<u8>> {
        let s = self.section(file, name)?;
        Some(read_range(file, s.offset, s.size))
    }
}

/// `size` bytes of `file` from `offset`.
pub fn read_range(file: &Path, offset: u64, size: u64) -> Vec<u8> {
    let mut f = fs::File::open(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    f.seek(SeekFrom::Start(offset)).unwrap();
    let mut buf = vec![0; size as usize];
    f.read_exact(&mut buf)
        .unwrap_or_else(|e| panic!("{}: {size} bytes at {offset}: {e}", file.display()));
    buf
}

/// `roc-obj-ls -v <file>` (Debian `hipcc`; a Perl script that walks
/// uncompressed bundles in `.hip_fatbin` at 4096-byte steps and prints nothing
/// for compressed ones; it needs GNU `objdump`). `None` if it is not
/// installed (outside CI); `Err` when it fails (e.g. no `.hip_fatbin`).
pub fn roc_obj_ls(file: &Path) -> Option<Result<Vec<RocObjEntry>, String>> {
    let Some(tool) = in_path("roc-obj-ls") else {
        missing("roc-obj-ls", "hipcc");
        return None;
    };
    if in_path("objdump").is_none() {
        missing("objdump (GNU, used by roc-obj-ls)", "binutils");
        return None;
    }
    Some(parse_roc_obj_ls(run_tool(
        Command::new(tool).arg("-v").arg(file),
    )))
}

fn parse_roc_obj_ls(out: Result<std::process::Output, String>) -> Result<Vec<RocObjEntry>, String> {
    let out = out?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut entries = Vec::new();
    for line in text.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() != 3 || cols[0] == "Bundle#" {
            continue;
        }
        let Ok(bundle) = cols[0].parse() else {
            continue;
        };
        let uri = cols[2].to_string();
        let query = uri.rsplit_once('#').map(|(_, q)| q).unwrap_or("");
        let mut offset = None;
        let mut size = None;
        for kv in query.split('&') {
            match kv.split_once('=') {
                Some(("offset", v)) => offset = v.parse().ok(),
                Some(("size", v)) => size = v.parse().ok(),
                _ => {}
            }
        }
        let (Some(offset), Some(size)) = (offset, size) else {
            return Err(format!("roc-obj-ls: cannot parse {line:?}"));
        };
        entries.push(RocObjEntry {
            bundle,
            id: cols[1].to_string(),
            uri,
            offset,
            size,
        });
    }
    Ok(entries)
}
