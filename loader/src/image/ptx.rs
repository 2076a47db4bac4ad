//! PTX text: the module directives `.version`, `.target` and `.address_size`.
//!
//! The PTX ISA manual ("PTX Module Directives") requires every module to open,
//! after comments and white space, with `.version major.minor`, then `.target`
//! with a comma-separated list (one `sm_XY[a|f]` or `compute_XY` plus options
//! such as `texmode_independent`, `debug`, `map_f64_to_f32`), then an optional
//! `.address_size 32|64`. Comments are C-style: `//` to the end of the line and
//! `/* ... */`.
//!
//! The scan reads tokens until the first token that is not one of these
//! directives (`.visible`, `.entry`, `.func`, `.global`, ...) and never looks
//! past [`MAX_HEADER`] bytes or a NUL (PTX stored in images is NUL-terminated).
//! It allocates nothing. The bytes it read must be UTF-8.

use crate::error::{Error, ErrorKind, Result};
use crate::target::{NvArch, PtxVersion};

/// How far into a PTX file the header directives are looked for: 64 KiB.
pub const MAX_HEADER: usize = 64 << 10;

/// A PTX module's header directives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// `.version X.Y`: the PTX ISA version.
    pub version: PtxVersion,
    /// The first `sm_XY[a|f]` or `compute_XY[a|f]` of `.target`; `None` when
    /// `.target` is absent or names none.
    pub target: Option<NvArch>,
    /// `.address_size` (32 or 64), if given (the PTX default is 32).
    pub address_size: Option<u8>,
    /// Byte offset just past the last header directive read.
    pub end: usize,
}

/// A token of PTX text.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Token<'a> {
    /// A run of bytes other than white space, `,`, `;` and `/`.
    Word(&'a [u8]),
    /// `,`.
    Comma,
    /// `;`, `/` not opening a comment: ends the header.
    Other,
    /// End of input, a NUL, the scan limit or an unterminated comment.
    End,
}

struct Scanner<'a> {
    text: &'a [u8],
    pos: usize,
}

impl<'a> Scanner<'a> {
    /// Skips white space and comments, then returns the next token.
    fn next(&mut self) -> Token<'a> {
        let t = self.text;
        loop {
            match t.get(self.pos..).unwrap_or_default() {
                [] | [0, ..] => return Token::End,
                [b' ' | b'\t' | b'\r' | b'\n' | 0x0b | 0x0c, ..] => self.pos += 1,
                [b'/', b'/', ..] => {
                    let rest = &t[self.pos..];
                    self.pos += rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
                }
                [b'/', b'*', ..] => {
                    let rest = &t[self.pos + 2..];
                    match rest.windows(2).position(|w| w == b"*/") {
                        Some(end) => self.pos += 2 + end + 2,
                        None => {
                            self.pos = t.len();
                            return Token::End;
                        }
                    }
                }
                [b',', ..] => {
                    self.pos += 1;
                    return Token::Comma;
                }
                [b';' | b'/', ..] => {
                    self.pos += 1;
                    return Token::Other;
                }
                rest => {
                    let len = rest
                        .iter()
                        .position(|b| b.is_ascii_whitespace() || b",;/\0\x0b".contains(b))
                        .unwrap_or(rest.len());
                    let word = &rest[..len];
                    self.pos += len;
                    return Token::Word(word);
                }
            }
        }
    }

    /// The next token, without consuming it.
    fn peek(&mut self) -> Token<'a> {
        let at = self.pos;
        let token = self.next();
        self.pos = at;
        token
    }
}

/// Whether `text` opens, after white space and comments, with `.version`
/// (as PTX must): `None` when it ends before its first token does, so that
/// only more of the text can tell.
pub(crate) fn opens_with_version(text: &[u8]) -> Option<bool> {
    let mut s = Scanner { text, pos: 0 };
    let token = s.next();
    (s.pos < text.len()).then_some(token == Token::Word(b".version"))
}

fn malformed(offset: usize, why: &'static str) -> Error {
    Error::new(
        offset as u64,
        ErrorKind::Malformed {
            what: "PTX header",
            why,
        },
    )
}

/// `X.Y` with decimal `X` and `Y` that fit a byte.
fn parse_version(word: &[u8]) -> Option<PtxVersion> {
    let text = std::str::from_utf8(word).ok()?;
    let (major, minor) = text.split_once('.')?;
    let digits = |s: &str| !s.is_empty() && s.len() <= 3 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(major) || !digits(minor) {
        return None;
    }
    Some(PtxVersion {
        major: major.parse().ok()?,
        minor: minor.parse().ok()?,
    })
}

impl Header {
    /// Reads the header directives of the PTX text at the start of `data`.
    ///
    /// Fails when the first token is not `.version` (which makes this a cheap
    /// test for "is this PTX"), when a directive's operand is malformed, or
    /// when the bytes scanned are not UTF-8.
    pub fn parse(data: &[u8]) -> Result<Header> {
        let text = &data[..data.len().min(MAX_HEADER)];
        let mut s = Scanner { text, pos: 0 };
        let result = Self::scan(&mut s);
        // Everything the scan consumed must be UTF-8; a character cut by the
        // scan limit is not an error.
        let scanned = &text[..s.pos.min(text.len())];
        if let Err(e) = std::str::from_utf8(scanned) {
            let cut_at_limit = e.error_len().is_none() && s.pos >= MAX_HEADER;
            if !cut_at_limit {
                return Err(Error::new(
                    e.valid_up_to() as u64,
                    ErrorKind::NotUtf8 { what: "PTX text" },
                ));
            }
        }
        result
    }

    fn scan(s: &mut Scanner<'_>) -> Result<Header> {
        let start = s.pos;
        match s.next() {
            Token::Word(b".version") => {}
            _ => return Err(malformed(start, "does not start with a .version directive")),
        }
        let at = s.pos;
        let version = match s.next() {
            Token::Word(w) => parse_version(w),
            _ => None,
        }
        .ok_or_else(|| malformed(at, ".version is not followed by major.minor"))?;
        let mut header = Header {
            version,
            target: None,
            address_size: None,
            end: s.pos,
        };
        let (mut seen_target, mut seen_address_size) = (false, false);
        loop {
            match s.peek() {
                Token::Word(b".target") if !seen_target => {
                    s.next();
                    seen_target = true;
                    loop {
                        let at = s.pos;
                        let Token::Word(name) = s.next() else {
                            return Err(malformed(at, ".target names no target"));
                        };
                        if header.target.is_none() {
                            header.target = std::str::from_utf8(name)
                                .ok()
                                .and_then(|n| NvArch::parse(n).ok());
                        }
                        if s.peek() != Token::Comma {
                            break;
                        }
                        s.next();
                    }
                }
                Token::Word(b".address_size") if !seen_address_size => {
                    s.next();
                    seen_address_size = true;
                    let at = s.pos;
                    header.address_size = match s.next() {
                        Token::Word(b"32") => Some(32),
                        Token::Word(b"64") => Some(64),
                        _ => return Err(malformed(at, ".address_size is not 32 or 64")),
                    };
                }
                _ => break,
            }
            header.end = s.pos;
        }
        Ok(header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_token_tells_whether_more_text_is_needed() {
        assert_eq!(opens_with_version(b"// x\n.version 7.0"), Some(true));
        assert_eq!(
            opens_with_version(b"/* licence */\n#include <x>"),
            Some(false)
        );
        assert_eq!(opens_with_version(b"//\0\0\n.version 9.0\n"), Some(true));
        assert_eq!(opens_with_version(b"\0.version"), Some(false));
        // The text ends inside a comment, or inside (or just after) the
        // first token, or at a slash that may open a comment.
        for cut in [
            &b"/* licence"[..],
            b"// x",
            b"  .vers",
            b".version",
            b"/",
            b"",
        ] {
            assert_eq!(opens_with_version(cut), None, "{cut:?}");
        }
    }

    #[test]
    fn reads_clang_22_ptx() {
        // loader/tests/data/regenerate.sh: clang-22 -march=sm_80 (+ptx70) -S.
        let ptx = include_bytes!("../../tests/data/sm_80.ptx");
        let h = Header::parse(ptx).unwrap();
        assert_eq!(h.version.to_string(), "7.0");
        assert_eq!(h.target.unwrap().to_string(), "sm_80");
        assert_eq!(h.address_size, Some(64));
        let directives = b"\n.version 7.0\n.target sm_80\n.address_size 64";
        let at = ptx
            .windows(directives.len())
            .position(|w| w == directives)
            .unwrap();
        assert_eq!(h.end, at + directives.len());
    }

    #[test]
    fn comments_lists_and_layout() {
        let h = Header::parse(
            b"/* a\n b */ .version 8.5 // x\n.target texmode_independent,sm_90a , debug\n\0junk",
        )
        .unwrap();
        assert_eq!(h.version.to_string(), "8.5");
        assert_eq!(h.target.unwrap().to_string(), "sm_90a");
        assert_eq!(h.address_size, None);
        let h = Header::parse(b".version 8.8 .target sm_100f .address_size 32 .visible").unwrap();
        assert_eq!(h.target.unwrap().to_string(), "sm_100f");
        assert_eq!(h.address_size, Some(32));
        let h = Header::parse(b".version 9.0\n.target compute_120\n.entry k()").unwrap();
        assert_eq!(h.target.unwrap().to_string(), "sm_120");
        let h = Header::parse(b".version 7.8\n.visible .entry k() {}").unwrap();
        assert_eq!(h.target, None);
        // The header ends at the first other directive: a later `.target` is not read.
        let h = Header::parse(b".version 7.0\n.file 1 \"x\"\n.target sm_80\n").unwrap();
        assert_eq!(h.target, None);
        // Unknown architectures leave the target unstated.
        let h = Header::parse(b".version 7.0\n.target sm_1000, sm_75").unwrap();
        assert_eq!(h.target.unwrap().to_string(), "sm_75");
    }

    #[test]
    fn rejects_what_is_not_a_ptx_header() {
        let bad: &[&[u8]] = &[
            b"",
            b"\0.version 7.0",
            b".target sm_80\n.version 7.0",
            b".version\n",
            b".version 7\n",
            b".version 7.x\n",
            b".version 7.0.1\n",
            b".version 1000.0\n",
            b".version 7.0 .target",
            b".version 7.0 .target ,",
            b".version 7.0 .target sm_80 .address_size 48",
            b"/* unterminated",
            b"// only a comment",
            b"\x7fELF\x02\x01\x01",
        ];
        for data in bad {
            assert!(
                Header::parse(data).is_err(),
                "{:?}",
                String::from_utf8_lossy(data)
            );
        }
    }

    #[test]
    fn utf8_is_checked_where_read() {
        let e = Header::parse(b"\xff\xfe").unwrap_err();
        assert!(matches!(e.kind, ErrorKind::NotUtf8 { .. }));
        let e = Header::parse(b"// caf\xc3\n.version 7.0").unwrap_err();
        assert!(matches!(e.kind, ErrorKind::NotUtf8 { .. }));
        assert_eq!(e.offset, 6);
        // UTF-8 in comments is fine, and bytes after the header are not read.
        let h =
            Header::parse("// café\n.version 7.0\n.target sm_80\n.visible \u{0}\u{ff}".as_bytes());
        assert!(h.is_ok());
        assert!(Header::parse(b".version 7.0\n.target sm_80\n.entry \xff").is_ok());
    }

    #[test]
    fn bounded_by_the_scan_limit() {
        let mut long = b"/*".to_vec();
        long.resize(MAX_HEADER + 100, b'x');
        long.extend(b"*/.version 7.0");
        assert!(Header::parse(&long).is_err());
        // A character cut by the limit inside a token the scan reads is fine.
        let prefix = b".version 7.0\n.target sm_80,";
        let mut cut = vec![b' '; MAX_HEADER - prefix.len() - 1];
        cut.extend(prefix);
        cut.extend("\u{e9}".as_bytes());
        let h = Header::parse(&cut).unwrap();
        assert_eq!(h.target.unwrap().to_string(), "sm_80");
        assert_eq!(h.end, MAX_HEADER);
    }

    #[test]
    fn never_panics_on_any_prefix_or_byte() {
        let ptx = b"/*c*/.version 8.0//x\n.target sm_90a,debug\n.address_size 64\n.visible";
        for cut in 0..=ptx.len() {
            let _ = Header::parse(&ptx[..cut]);
        }
        for b in 0..=255u8 {
            for at in 0..ptx.len() {
                let mut v = ptx.to_vec();
                v[at] = b;
                let _ = Header::parse(&v);
            }
        }
    }
}
