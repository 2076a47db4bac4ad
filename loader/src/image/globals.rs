//! The initial value of a device variable, read from the image that
//! defines it: what a runtime copies into the memory it gives a CUDA
//! `__managed__` variable when no driver allocates it.
//!
//! - A cubin (ELF, `EM_CUDA`): the symbol's bytes in its section, at its
//!   value's offset (`ptxas` puts initialised variables in
//!   `.nv.global.init`, the others in the `SHT_NOBITS` `.nv.global`, which
//!   reads as zeros). Managed variables carry `STO_CUDA_MANAGED` (0x4) in
//!   `st_other`, as `nvcc` 12 and 13 write them.
//! - PTX: the `.global` declaration's initialiser (PTX ISA, "Variable
//!   Declarations" and "Initializers"): integers in decimal, hex (`0x`),
//!   octal or binary, `0f`/`0d` hexadecimal floats, decimal floats, one
//!   value or a `{…}` list, little-endian at the element type's width; an
//!   uninitialised variable is zeros.

use std::borrow::Cow;

use object::read::elf::{ElfFile64, SectionHeader, Sym};
use object::{LittleEndian as LE, Object, ObjectSection};

/// `st_other` bit of a managed variable in a cubin.
pub const STO_CUDA_MANAGED: u8 = 0x4;

/// The initial bytes of variable `name` in `image` (a cubin or PTX), at
/// most `max` of them; `None` when the image defines no such variable, its
/// initialiser cannot be read, or it is larger than `max`.
pub fn initial_value<'a>(image: &'a [u8], name: &str, max: u64) -> Option<Cow<'a, [u8]>> {
    if image.starts_with(b"\x7fELF") {
        cubin(image, name, max)
    } else {
        ptx(image, name, max).map(Cow::Owned)
    }
}

fn cubin<'a>(image: &'a [u8], name: &str, max: u64) -> Option<Cow<'a, [u8]>> {
    let file = ElfFile64::<LE>::parse(image).ok()?;
    let endian = file.endian();
    let symbols = file.elf_symbol_table();
    let (at, symbol) = symbols
        .iter()
        .enumerate()
        .find(|(_, s)| symbols.symbol_name(endian, s).ok() == Some(name.as_bytes()))?;
    let size = symbol.st_size(endian);
    if size > max {
        return None;
    }
    let index = symbols
        .symbol_section(endian, symbol, object::SymbolIndex(at))
        .ok()??;
    let section = file.elf_section_table().section(index).ok()?;
    if section.sh_type(endian) == object::elf::SHT_NOBITS {
        return Some(Cow::Owned(vec![0; usize::try_from(size).ok()?]));
    }
    let offset = symbol
        .st_value(endian)
        .checked_sub(section.sh_addr(endian))?;
    let data = file.section_by_index(index).ok()?.data().ok()?;
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(usize::try_from(size).ok()?)?;
    data.get(start..end).map(Cow::Borrowed)
}

/// PTX `text`'s declaration of variable `name` in the global state space,
/// from `.global` to before its `;`, comments removed. A statement ends at
/// `;`, and directives such as `.version` before it on earlier lines, which
/// end at their line, are not part of it.
fn declaration(text: &str, name: &str) -> Option<String> {
    text.split(';').find_map(|statement| {
        let lines: Vec<&str> = statement
            .lines()
            .map(|l| l.split("//").next().unwrap_or_default().trim())
            .collect();
        let unlinked = |line: &str| {
            let mut rest = line;
            for linkage in [".visible", ".extern", ".weak"] {
                rest = rest.strip_prefix(linkage).map_or(rest, str::trim_start);
            }
            rest.to_string()
        };
        let first = lines
            .iter()
            .position(|l| unlinked(l).starts_with(".global "))?;
        let decl = unlinked(&lines[first..].join(" "));
        // The name is the token after the element type: `.b8 arr[24]`.
        let mut tokens = decl.split_whitespace();
        tokens.find(|t| element_width(t).is_some())?;
        let declared = tokens.next()?.split(['[', '=']).next()?;
        (declared == name).then_some(decl)
    })
}

fn ptx(image: &[u8], name: &str, max: u64) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(image.split(|&b| b == 0).next()?).ok()?;
    let decl = declaration(text, name)?;
    let (head, init) = match decl.split_once('=') {
        Some((head, init)) => (head, Some(init.trim())),
        None => (decl.as_str(), None),
    };
    let mut tokens = head.split_whitespace();
    let width = tokens.find_map(element_width)?;
    // `arr[24]` (or `arr [24]`), `x`: the name, then its count if an array.
    let declarator: String = tokens.collect();
    let after = declarator.strip_prefix(name)?;
    let count = match after.strip_prefix('[') {
        Some(rest) => rest.split(']').next()?.trim().parse::<u64>().ok()?,
        None => 1,
    };
    let size = count.checked_mul(width)?;
    if size > max {
        return None;
    }
    let mut out = Vec::with_capacity(usize::try_from(size).ok()?);
    if let Some(init) = init {
        let values = init.trim_start_matches('{').trim_end_matches('}');
        for value in values.split(',').map(str::trim).filter(|v| !v.is_empty()) {
            let bits = number(value, width)?;
            out.extend_from_slice(&bits.to_le_bytes()[..width as usize]);
        }
    }
    if out.len() as u64 > size {
        return None;
    }
    out.resize(size as usize, 0);
    Some(out)
}

/// The width in bytes of a PTX fundamental type token (`.u32`, `.b8`, …).
fn element_width(token: &str) -> Option<u64> {
    let t = token.strip_prefix('.')?;
    let bits = t
        .strip_prefix(['u', 's', 'b', 'f'])
        .filter(|b| b.bytes().all(|c| c.is_ascii_digit()))?;
    match bits.parse::<u64>().ok()? {
        b @ (8 | 16 | 32 | 64) => Some(b / 8),
        _ => None,
    }
}

/// A PTX constant as the `width` bytes it stores, in the low bits.
fn number(value: &str, width: u64) -> Option<u64> {
    let (negative, digits) = match value.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, value),
    };
    let lower = digits.to_ascii_lowercase();
    let magnitude = if let Some(hex) = lower.strip_prefix("0f").filter(|h| h.len() == 8) {
        u64::from_str_radix(hex, 16).ok()?
    } else if let Some(hex) = lower.strip_prefix("0d").filter(|h| h.len() == 16) {
        u64::from_str_radix(hex, 16).ok()?
    } else if let Some(hex) = lower.strip_prefix("0x") {
        u64::from_str_radix(hex.trim_end_matches('u'), 16).ok()?
    } else if let Some(bin) = lower.strip_prefix("0b") {
        u64::from_str_radix(bin.trim_end_matches('u'), 2).ok()?
    } else if lower.contains(['.', 'e']) {
        let f: f64 = lower.parse().ok()?;
        let f = if negative { -f } else { f };
        return Some(if width == 4 {
            u64::from((f as f32).to_bits())
        } else {
            f.to_bits()
        });
    } else if lower.len() > 1 && lower.starts_with('0') {
        u64::from_str_radix(lower.trim_end_matches('u'), 8).ok()?
    } else {
        lower.trim_end_matches('u').parse().ok()?
    };
    Some(if negative {
        magnitude.wrapping_neg()
    } else {
        magnitude
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `nvcc -arch=sm_80 -ptx` 13.0 writes for
    /// `__device__ int dv = 3; __managed__ int mv = 5;
    /// __managed__ double arr[3] = {1.5, 2.5, 3.5}; __managed__ int zero;`.
    const PTX: &str = "\
.version 9.0
.target sm_80
.address_size 64

.global .align 4 .u32 dv = 3;
.global .attribute(.managed) .align 4 .u32 mv = 5;
.global .attribute(.managed) .align 8 .b8 arr[24] = {0, 0, 0, 0, 0, 0, 248, 63, 0, 0, 0, 0, 0, 0, 4, 64, 0, 0, 0, 0, 0, 0, 12, 64};
.global .attribute(.managed) .align 4 .u32 zero;
.global .align 4 .f32 f = 0f3FC00000;
.global .align 8 .s64 neg[2] = {-2, 0x10};
";

    fn value(name: &str) -> Option<Vec<u8>> {
        initial_value(PTX.as_bytes(), name, 1 << 20).map(Cow::into_owned)
    }

    #[test]
    fn ptx_initialisers() {
        assert_eq!(value("dv").unwrap(), 3u32.to_le_bytes());
        assert_eq!(value("mv").unwrap(), 5u32.to_le_bytes());
        let arr: Vec<u8> = [1.5f64, 2.5, 3.5]
            .iter()
            .flat_map(|f| f.to_le_bytes())
            .collect();
        assert_eq!(value("arr").unwrap(), arr);
        assert_eq!(value("zero").unwrap(), [0; 4]);
        assert_eq!(value("f").unwrap(), 1.5f32.to_le_bytes());
        let neg: Vec<u8> = [-2i64, 16].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(value("neg").unwrap(), neg);
        assert_eq!(value("missing"), None);
        // A prefix of a name is not the name, nor is a type or a value.
        assert_eq!(value("ar"), None);
        assert_eq!(value("u32"), None);
        assert_eq!(value("248"), None);
        // Larger than allowed.
        assert_eq!(initial_value(PTX.as_bytes(), "arr", 16), None);
    }

    #[test]
    fn hostile_text_is_refused_not_a_panic() {
        for text in [
            ".global .u32 x = ;",
            ".global .u32 x[",
            ".global .b8 x[2] = {1, 2, 3};",
            ".global .u32 x = 0fZZ;",
            ".global x = 1;",
            ".global .b8 x[99999999999999999999];",
            ".global .align 4 .u32 a = 1;",
            // The fuzzer's first find: a lone `.` (a type token cut short).
            "mv\n.global .attribute(.managed) . nigla4 = 5;",
        ] {
            let _ = initial_value(text.as_bytes(), "x", 1 << 20);
        }
        assert_eq!(
            initial_value(b".global .b8 x[2] = {1, 2, 3};", "x", 16),
            None
        );
    }
}
