//! The `--json` report, written byte for byte as `serde_json::to_writer_pretty`
//! writes it (two spaces a level), but with each line's break and indentation
//! in one write: the pretty formatter writes the indentation two bytes at a
//! time, a call per level, which was 3.3 of the 7.4 million instructions
//! that writing rocSPARSE's 525 KB report (70,000 keys) took.

use std::io::{self, Write};

use serde::Serialize;
use serde_json::ser::{Formatter, Serializer};

/// `value` as pretty JSON, followed by a newline.
pub fn write_pretty<W: Write, T: Serialize>(writer: W, value: &T) -> io::Result<()> {
    let mut serializer = Serializer::with_formatter(writer, Pretty::default());
    value.serialize(&mut serializer).map_err(io::Error::from)?;
    serializer.into_inner().write_all(b"\n")
}

/// `serde_json::ser::PrettyFormatter` with a two-space indent, but for how
/// it writes the indentation.
#[derive(Default)]
struct Pretty {
    depth: usize,
    has_value: bool,
}

/// How many spaces of indentation one write takes.
const INDENT: usize = 64;

/// A comma, a line break and [`INDENT`] spaces.
const BREAK: &[u8; 2 + INDENT] =
    b",\n                                                                ";

impl Pretty {
    /// An array or object opens a level.
    fn open<W: ?Sized + Write>(&mut self, writer: &mut W, bracket: &[u8]) -> io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        writer.write_all(bracket)
    }

    /// And closes it: on a line of its own, unless it was empty.
    fn close<W: ?Sized + Write>(&mut self, writer: &mut W, bracket: &[u8]) -> io::Result<()> {
        self.depth -= 1;
        if self.has_value {
            self.new_line(writer, true)?;
        }
        writer.write_all(bracket)
    }

    /// A line break (after a comma unless `first`) and the current
    /// indentation, in one write but for levels deeper than [`INDENT`] allows.
    fn new_line<W: ?Sized + Write>(&self, writer: &mut W, first: bool) -> io::Result<()> {
        let indent = 2 * self.depth;
        let here = indent.min(INDENT);
        writer.write_all(&BREAK[usize::from(first)..2 + here])?;
        let mut rest = indent - here;
        while rest > 0 {
            let n = rest.min(INDENT);
            writer.write_all(&BREAK[2..2 + n])?;
            rest -= n;
        }
        Ok(())
    }
}

impl Formatter for Pretty {
    fn begin_array<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.open(writer, b"[")
    }

    fn end_array<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.close(writer, b"]")
    }

    fn begin_array_value<W: ?Sized + Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.new_line(writer, first)
    }

    fn end_array_value<W: ?Sized + Write>(&mut self, _writer: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn begin_object<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.open(writer, b"{")
    }

    fn end_object<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.close(writer, b"}")
    }

    fn begin_object_key<W: ?Sized + Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.new_line(writer, first)
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        writer.write_all(b": ")
    }

    fn end_object_value<W: ?Sized + Write>(&mut self, _writer: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn writes_what_serde_json_writes() {
        // Empty arrays and objects, and levels deeper than one write's worth.
        let mut deep = json!("leaf");
        for i in 0..40 {
            deep = json!({ "k": [deep, i, [], {}], "e": {} });
        }
        let value = json!({ "a": [1, { "b": "x\n\"" }, []], "c": {}, "d": deep });
        let mut ours = Vec::new();
        super::write_pretty(&mut ours, &value).unwrap();
        let theirs = serde_json::to_string_pretty(&value).unwrap() + "\n";
        assert_eq!(String::from_utf8(ours).unwrap(), theirs);
    }
}
