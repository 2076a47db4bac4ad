//! A wheel's name and its `RECORD`, as PEP 427 and PEP 376 (the binary
//! distribution format, "Recording installed files") lay them out: pure
//! text work, no file touched.
//!
//! - File name: `{distribution}-{version}(-{build tag})?-{python tag}-{abi
//!   tag}-{platform tag}.whl`, each part free of `-` (PEP 427 escapes it).
//! - `RECORD`: one CSV row per file, `path,hash,size`, the hash
//!   `sha256=` and the digest in URL-safe base64 without `=` padding; the
//!   row of `RECORD` itself has neither hash nor size. Rows are CSV as
//!   Python's `csv` module writes them: a field with a comma, a quote or a
//!   line break is quoted, its quotes doubled.
//! - A local version label (PEP 440, "Local version identifiers") follows
//!   the public version after `+`; a second label is joined to the first
//!   with `.`.

use std::fmt;

/// The parts of a wheel's file name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WheelName {
    /// The distribution, as escaped in the name (`torch`, `nvidia_curand`).
    pub distribution: String,
    /// The version, with any local label.
    pub version: String,
    /// The rest: the optional build tag and the three compatibility tags,
    /// joined by `-` as they were.
    pub tags: String,
}

impl WheelName {
    /// Parses a wheel's file name; `None` for one that is not
    /// `{distribution}-{version}-…-{python}-{abi}-{platform}.whl`.
    pub fn parse(file_name: &str) -> Option<WheelName> {
        let stem = file_name.strip_suffix(".whl")?;
        let parts: Vec<&str> = stem.split('-').collect();
        if !(5..=6).contains(&parts.len()) || parts.iter().any(|p| p.is_empty()) {
            return None;
        }
        Some(WheelName {
            distribution: parts[0].to_string(),
            version: parts[1].to_string(),
            tags: parts[2..].join("-"),
        })
    }

    /// The name with local version label `label` added.
    pub fn with_label(&self, label: &str) -> WheelName {
        WheelName {
            version: labelled(&self.version, label),
            ..self.clone()
        }
    }

    /// The `.dist-info` directory's name (no slash).
    pub fn dist_info(&self) -> String {
        format!("{}-{}.dist-info", self.distribution, self.version)
    }

    /// The `.data` directory's name (no slash).
    pub fn data(&self) -> String {
        format!("{}-{}.data", self.distribution, self.version)
    }
}

impl fmt::Display for WheelName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}-{}-{}.whl",
            self.distribution, self.version, self.tags
        )
    }
}

/// Whether `label` may be a local version label: ASCII letters, digits and
/// `.` (PEP 440 also allows `-` and `_`, normalised to `.`; a wheel's file
/// name cannot hold `-`), not starting or ending with `.`, no `..`.
pub fn valid_label(label: &str) -> bool {
    !label.is_empty()
        && !label.starts_with('.')
        && !label.ends_with('.')
        && !label.contains("..")
        && label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.')
}

/// `version` with local label `label`: `1.0+sm90`, or `1.0+cu12.sm90`
/// where it has one.
pub fn labelled(version: &str, label: &str) -> String {
    if version.contains('+') {
        format!("{version}.{label}")
    } else {
        format!("{version}+{label}")
    }
}

/// `METADATA` with its `Version:` header (the first, among the headers
/// before the first empty line) set to `version`; `None` where it has none.
pub fn set_metadata_version(metadata: &str, version: &str) -> Option<String> {
    let mut out = String::with_capacity(metadata.len() + 16);
    let mut done = false;
    let mut in_headers = true;
    for line in metadata.split_inclusive('\n') {
        let body = line.trim_end_matches(['\r', '\n']);
        if body.is_empty() {
            in_headers = false;
        }
        if in_headers && !done && body.starts_with("Version:") {
            let ending = &line[body.len()..];
            out.push_str("Version: ");
            out.push_str(version);
            out.push_str(ending);
            done = true;
        } else {
            out.push_str(line);
        }
    }
    done.then_some(out)
}

/// One row of `RECORD`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The file's path in the wheel.
    pub path: String,
    /// `sha256=…`, or empty (the row of `RECORD` itself).
    pub hash: String,
    /// Its size in bytes, as text, or empty.
    pub size: String,
}

/// The rows of a `RECORD`; `None` for text that is not CSV of three
/// fields per row (an unterminated quote, a row of another width).
pub fn parse_record(text: &str) -> Option<Vec<Row>> {
    let mut rows = Vec::new();
    let mut fields: Vec<String> = Vec::new();
    let mut field = String::new();
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    let mut any = false;
    while let Some(c) = chars.next() {
        any = true;
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') if field.is_empty() => quoted = true,
            (false, ',') => fields.push(std::mem::take(&mut field)),
            (false, '\r') if chars.peek() == Some(&'\n') => {}
            (false, '\n') => {
                fields.push(std::mem::take(&mut field));
                rows.push(row(std::mem::take(&mut fields))?);
                any = false;
            }
            (false, c) => field.push(c),
        }
    }
    if quoted {
        return None;
    }
    if any {
        fields.push(field);
        rows.push(row(fields)?);
    }
    Some(rows)
}

fn row(fields: Vec<String>) -> Option<Row> {
    let [path, hash, size]: [String; 3] = fields.try_into().ok()?;
    Some(Row { path, hash, size })
}

/// `rows` as CSV, as Python's `csv` module writes them (`\n` ends each row,
/// as `wheel` and pip write `RECORD`).
pub fn write_record(rows: &[Row]) -> String {
    let mut out = String::new();
    for r in rows {
        for (i, f) in [&r.path, &r.hash, &r.size].into_iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            if f.contains([',', '"', '\n', '\r']) {
                out.push('"');
                out.push_str(&f.replace('"', "\"\""));
                out.push('"');
            } else {
                out.push_str(f);
            }
        }
        out.push('\n');
    }
    out
}

/// A `RECORD` hash of `bytes`: `sha256=` and the URL-safe base64 of the
/// digest, without padding.
pub fn hash(bytes: &[u8]) -> String {
    use base64::Engine;
    use sha2::Digest;
    let digest = sha2::Sha256::digest(bytes);
    format!(
        "sha256={}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest)
    )
}

/// [`hash`] of what `reader` gives, read through in blocks.
pub fn hash_reader(mut reader: impl std::io::Read) -> std::io::Result<String> {
    use base64::Engine;
    use sha2::Digest;
    let mut digest = sha2::Sha256::new();
    let mut block = vec![0u8; 1 << 16];
    loop {
        match reader.read(&mut block)? {
            0 => break,
            n => digest.update(&block[..n]),
        }
    }
    Ok(format!(
        "sha256={}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest.finalize())
    ))
}

/// `path` with a leading `{from}/` directory replaced by `{to}/`.
pub fn renamed(path: &str, from: &str, to: &str) -> String {
    match path.strip_prefix(from).and_then(|r| r.strip_prefix('/')) {
        Some(rest) => format!("{to}/{rest}"),
        None => path.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let n =
            WheelName::parse("nvidia_curand-10.4.5.25-py3-none-manylinux_2_27_x86_64.whl").unwrap();
        assert_eq!(n.distribution, "nvidia_curand");
        assert_eq!(n.version, "10.4.5.25");
        assert_eq!(n.dist_info(), "nvidia_curand-10.4.5.25.dist-info");
        let l = n.with_label("sm90");
        assert_eq!(
            l.to_string(),
            "nvidia_curand-10.4.5.25+sm90-py3-none-manylinux_2_27_x86_64.whl"
        );
        assert_eq!(l.with_label("x").version, "10.4.5.25+sm90.x");
        let built = WheelName::parse("a-1-2build-cp311-cp311-linux_x86_64.whl").unwrap();
        assert_eq!(built.tags, "2build-cp311-cp311-linux_x86_64");
        for bad in [
            "a-1-py3-none.whl",
            "a-1-py3-none-any.zip",
            "a--1-py3-none-any.whl",
        ] {
            assert_eq!(WheelName::parse(bad), None, "{bad}");
        }
        assert!(valid_label("sm90") && valid_label("cu12.sm90"));
        for bad in ["", ".a", "a.", "a..b", "a-b", "a+b", "é"] {
            assert!(!valid_label(bad), "{bad}");
        }
    }

    #[test]
    fn metadata_version() {
        let m = "Metadata-Version: 2.1\r\nName: x\r\nVersion: 1.0\r\n\r\nVersion: body\n";
        assert_eq!(
            set_metadata_version(m, "1.0+sm90").unwrap(),
            "Metadata-Version: 2.1\r\nName: x\r\nVersion: 1.0+sm90\r\n\r\nVersion: body\n"
        );
        assert_eq!(set_metadata_version("Name: x\n\nVersion: 1\n", "2"), None);
    }

    #[test]
    fn records_round_trip_as_python_writes_them() {
        let text =
            "a/b.so,sha256=abc,12\n\"odd,\"\"name\"\".py\",sha256=d,3\nx.dist-info/RECORD,,\n";
        let rows = parse_record(text).unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[1].path, "odd,\"name\".py");
        assert_eq!(rows[2].hash, "");
        assert_eq!(write_record(&rows), text);
        assert_eq!(parse_record("a,b\n"), None);
        assert_eq!(parse_record("\"a,b,c\n"), None);
        assert_eq!(parse_record("a,b,c").unwrap().len(), 1);
        assert_eq!(parse_record("a,b,c\r\n").unwrap()[0].size, "c");
    }

    #[test]
    fn hashes_as_pip_writes_them() {
        // python3 -c "import hashlib,base64;print(base64.urlsafe_b64encode(
        //   hashlib.sha256(b'hello').digest()).rstrip(b'=').decode())"
        assert_eq!(
            hash(b"hello"),
            "sha256=LPJNul-wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ"
        );
        let big: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        assert_eq!(hash_reader(&big[..]).unwrap(), hash(&big));
        assert_eq!(
            renamed("a-1.dist-info/RECORD", "a-1.dist-info", "a-1+x.dist-info"),
            "a-1+x.dist-info/RECORD"
        );
        assert_eq!(
            renamed("a-1.dist-infox/R", "a-1.dist-info", "b"),
            "a-1.dist-infox/R"
        );
    }
}
