//! Clang offload bundles in text form: what `clang -S` and `-emit-llvm -S`
//! write for offload languages (`-type=s`, `-type=ll`, `-type=i`, ...).
//!
//! Layout (clang/docs/ClangOffloadBundler.rst, "Bundled Text File Layout";
//! clang/lib/Driver/OffloadBundler.cpp `TextFileHandler`): each entry is
//!
//! ```text
//! \n<comment> __CLANG_OFFLOAD_BUNDLE____START__ <bundle entry ID>\n
//! <the entry's text>
//! \n<comment> __CLANG_OFFLOAD_BUNDLE____END__ <bundle entry ID>\n
//! ```
//!
//! with the comment marker of the file's language: `#` for assembly, `;` for
//! LLVM IR, `//` for preprocessed C, C++, CUDA and HIP. The entry's text is
//! what `clang-offload-bundler -unbundle` writes: the bytes after the start
//! line up to the newline that opens the end line (checked on clang-22
//! output). Entries follow in `-targets` order; the host entry has text too.

use crate::error::{Error, ErrorKind, Result};
use crate::limits::Limits;
use crate::read::utf8;

/// The marker that opens an entry, after the comment and a space.
pub const START: &str = "__CLANG_OFFLOAD_BUNDLE____START__ ";
/// The marker that closes an entry.
pub const END: &str = "__CLANG_OFFLOAD_BUNDLE____END__ ";
/// The comment markers clang writes, by language.
pub const COMMENTS: &[&str] = &["#", ";", "//"];

/// One entry of a text bundle: its ID and where its text lies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextEntry<'a> {
    /// The bundle entry ID, e.g. `hip-amdgcn-amd-amdhsa--gfx90a`.
    pub id: &'a str,
    /// Offset of the entry's text from the file's start.
    pub offset: u64,
    /// Length of the entry's text.
    pub size: u64,
}

/// A parsed text bundle.
#[derive(Debug, Clone)]
pub struct TextBundle<'a> {
    /// The comment marker its lines use.
    pub comment: &'static str,
    entries: Vec<TextEntry<'a>>,
}

/// The comment marker of the text bundle `data` starts with (after at most
/// one newline), if it is one.
pub fn sniff(data: &[u8]) -> Option<&'static str> {
    let rest = data.strip_prefix(b"\n").unwrap_or(data);
    COMMENTS.iter().copied().find(|c| {
        rest.strip_prefix(c.as_bytes())
            .and_then(|r| r.strip_prefix(b" "))
            .is_some_and(|r| r.starts_with(START.as_bytes()))
    })
}

fn find(data: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    data.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

impl<'a> TextBundle<'a> {
    /// Parses the text bundle that is the whole of `data`. An entry without
    /// its end line, or more than [`Limits::max_entries`] entries, is an error
    /// naming the offset.
    pub fn parse(data: &'a [u8], limits: &Limits) -> Result<TextBundle<'a>> {
        let comment = sniff(data).ok_or(Error::new(
            0,
            ErrorKind::BadMagic {
                what: "text offload bundle",
            },
        ))?;
        let start = format!("{comment} {START}");
        let mut entries = Vec::new();
        // Each start line follows a newline of its own, after the previous
        // entry's end line (or at the file's start).
        let mut pos = 0;
        while let Some(rest) = data.get(pos..) {
            let at = pos + usize::from(rest.starts_with(b"\n"));
            if !data[at..].starts_with(start.as_bytes()) {
                break;
            }
            if entries.len() as u64 >= limits.max_entries {
                return Err(Error::new(
                    at as u64,
                    ErrorKind::TooLarge {
                        what: "text bundle entry count",
                        value: entries.len() as u64 + 1,
                        limit: limits.max_entries,
                    },
                ));
            }
            let id_at = at + start.len();
            let line_end = find(data, id_at, b"\n").ok_or(truncated(id_at, "start line"))?;
            let id = utf8(&data[id_at..line_end], id_at as u64, "text bundle entry ID")?;
            let text = line_end + 1;
            let end = format!("\n{comment} {END}{id}");
            let close = find(data, line_end, end.as_bytes()).ok_or(truncated(at, "end line"))?;
            entries.push(TextEntry {
                id,
                offset: text.min(close) as u64,
                size: close.saturating_sub(text) as u64,
            });
            // Past the end line and its newline.
            pos = match find(data, close + end.len(), b"\n") {
                Some(nl) => nl + 1,
                None => data.len(),
            };
        }
        Ok(TextBundle { comment, entries })
    }

    /// The entries, in file order.
    pub fn entries(&self) -> &[TextEntry<'a>] {
        &self.entries
    }
}

fn truncated(at: usize, what: &'static str) -> Error {
    Error::new(
        at as u64,
        ErrorKind::Malformed {
            what: "text offload bundle entry",
            why: match what {
                "start line" => "its start line has no end",
                _ => "it has no end line",
            },
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(comment: &str, entries: &[(&str, &str)]) -> String {
        let mut out = String::new();
        for (id, body) in entries {
            out += &format!("\n{comment} {START}{id}\n{body}\n{comment} {END}{id}\n");
        }
        out
    }

    #[test]
    fn every_comment_style() {
        for comment in COMMENTS {
            let data = text(
                comment,
                &[
                    ("hip-amdgcn-amd-amdhsa--gfx90a", "\t.text\nk:\n"),
                    ("host-x86_64-pc-linux-gnu-", "main:"),
                ],
            );
            let b = TextBundle::parse(data.as_bytes(), &Limits::default()).unwrap();
            assert_eq!(b.comment, *comment);
            let got: Vec<(&str, &str)> = b
                .entries()
                .iter()
                .map(|e| (e.id, &data[e.offset as usize..(e.offset + e.size) as usize]))
                .collect();
            assert_eq!(
                got,
                [
                    ("hip-amdgcn-amd-amdhsa--gfx90a", "\t.text\nk:\n"),
                    ("host-x86_64-pc-linux-gnu-", "main:")
                ]
            );
        }
    }

    #[test]
    fn broken_bundles_are_errors_not_panics() {
        let data = text("#", &[("hip-amdgcn-amd-amdhsa--gfx90a", "x")]);
        for cut in 0..data.len() {
            let _ = TextBundle::parse(&data.as_bytes()[..cut], &Limits::default());
        }
        let open = "\n# __CLANG_OFFLOAD_BUNDLE____START__ a\nno end\n";
        assert!(TextBundle::parse(open.as_bytes(), &Limits::default()).is_err());
        assert!(sniff(b"\t.text").is_none());
        let one = Limits {
            max_entries: 1,
            ..Limits::default()
        };
        let two = text(";", &[("a", "1"), ("b", "2")]);
        assert!(TextBundle::parse(two.as_bytes(), &one).is_err());
    }
}
