//! Whether a file may hold offload code, told from positioned reads of its
//! headers without mapping it: what a directory scan does for each of
//! thousands of libraries and static archives, almost none of which hold GPU
//! code. "May": whatever these reads cannot tell (an unusual layout, a header
//! they cannot read) is left to the full parse, which says what is wrong.

use std::cell::Cell;
use std::fs::File;
use std::os::unix::fs::FileExt;

use object::elf::{FileHeader64, SectionHeader64};
use object::read::elf::{FileHeader, SectionHeader};
use object::{Endianness, FileKind};

use super::{section_role, OffloadSection};
use crate::image::ptx;

/// How many bytes of a file are read first (by `MappedFile::open_if_offload`)
/// and of an archive member: enough for any container's or ELF header, and
/// for most text to show its first token (see [`ptx_past_head`]).
pub(super) const HEAD: usize = 512;

/// How far before the section table the read of an ELF file's tail starts:
/// linkers write the section names just before the table, and this covers
/// them in all but 1 of Debian's 920 libraries here (rocSPARSE's are 300
/// bytes); longer ones take a second read.
const TAIL_BEFORE_TABLE: u64 = 512;

/// The most bytes one read may ask for: a table larger than this is left to
/// the full parse.
const MAX_READ: usize = 1 << 20;

/// The fewest bytes one read of an archive fetches: its smallest members are
/// read several to a read.
const ARCHIVE_WINDOW: usize = 2 << 10;

/// An archive whose members average at most this many bytes (over those
/// read so far, from the eighth on) is dense: it is read [`DENSE_WINDOW`]
/// bytes at a time.
const DENSE_MEMBER: u64 = 8 << 10;

/// The fewest bytes one read of a dense archive fetches. Its members' code
/// is read too, which costs less than a read for each member: Debian's
/// libc.a (2,072 members of 2.6 KiB on average) took 0.9 ms in 1,954 reads
/// of its members' tails and 0.3 ms read whole 64 KiB at a time; scanning
/// Debian's 110 static archives took 12% less CPU time.
const DENSE_WINDOW: usize = 32 << 10;

/// How far before an archive member's section table its tail read starts: a
/// relocatable object's section names (just before the table) are shorter
/// than a library's, this covers 96% of the 8,949 ELF members of Debian's
/// archives here; longer ones take a second read.
const MEMBER_TAIL_BEFORE_TABLE: u64 = 256;

/// What an archive member's tail read takes of what follows it: the padding
/// byte, the next member's header and its ELF header. So each member of an
/// archive of objects costs one read, of about its section table: the
/// members' code, most of the archive's bytes, is never read.
const NEXT_MEMBER_HEAD: u64 = 1 + 60 + 64;

/// Members read before the quick look gives up (and the full parse, with its
/// limits, takes over).
const MAX_MEMBERS: usize = 1 << 20;

/// Positioned reads of a file through one buffer: a read that lies inside the
/// previous one's bytes costs no system call.
struct Reads<'f> {
    file: &'f File,
    /// The fewest bytes one read fetches.
    min: usize,
    /// Where the bytes held start in the file, and how many are held.
    at: u64,
    len: usize,
    /// Holds the `len` bytes read at its start. Never shrunk, and zeroed
    /// only where it grows: it is kept from file to file (see [`BUFFER`]).
    buf: Vec<u8>,
}

thread_local! {
    /// Each thread's read buffer, kept from one file to the next so that a
    /// scan allocates it once per thread (up to [`KEEP`] bytes).
    static BUFFER: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// The largest buffer a thread keeps for its next file.
const KEEP: usize = 64 << 10;

impl<'f> Reads<'f> {
    /// Reads of `file` whose first `head` bytes are already read.
    fn new(file: &'f File, head: &[u8], min: usize) -> Reads<'f> {
        let mut buf = BUFFER.take();
        if buf.len() < head.len() {
            buf.resize(head.len(), 0);
        }
        buf[..head.len()].copy_from_slice(head);
        Reads {
            file,
            min,
            at: 0,
            len: head.len(),
            buf,
        }
    }

    /// Up to `len` bytes at `at` (fewer at the end of the file).
    fn upto(&mut self, at: u64, len: usize) -> Option<&[u8]> {
        if len > MAX_READ {
            return None;
        }
        let end = at.checked_add(len as u64)?;
        if at < self.at || end > self.at + self.len as u64 {
            self.fill(at, len)?;
        }
        let from = usize::try_from(at.checked_sub(self.at)?).ok()?;
        let to = (from + len).min(self.len);
        self.buf.get(from..to)
    }

    /// Exactly `len` bytes at `at`.
    fn get(&mut self, at: u64, len: usize) -> Option<&[u8]> {
        self.upto(at, len).filter(|b| b.len() == len)
    }

    fn fill(&mut self, at: u64, len: usize) -> Option<()> {
        let want = len.max(self.min);
        if self.buf.len() < want {
            self.buf.resize(want, 0);
        }
        let mut got = 0;
        while got < want {
            match self.file.read_at(&mut self.buf[got..want], at + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
        self.len = got;
        self.at = at;
        Some(())
    }
}

impl Drop for Reads<'_> {
    fn drop(&mut self) {
        if self.buf.capacity() <= KEEP {
            BUFFER.set(std::mem::take(&mut self.buf));
        }
    }
}

/// Whether `file`, whose first bytes are `head` (of kind `kind`), may hold
/// offload code: a container or image by its first bytes (a raw code object
/// is ELF too), PTX whose directives follow a long comment, an ELF file with
/// an offload section, an archive with such a member, and ELF the quick look
/// cannot read (the full parse says what is wrong with it).
pub(super) fn may_hold_offload_code(
    file: &File,
    head: &[u8],
    kind: &object::Result<FileKind>,
) -> bool {
    OffloadSection::whole(head, 0, None).is_some()
        || match kind {
            Ok(FileKind::Elf64) => elf_may_hold_offload_code(file, head),
            Ok(FileKind::Archive) => archive_may_hold_offload_code(file, head),
            _ => {
                // A head shorter than asked for is the whole file.
                let end = if head.len() < HEAD {
                    head.len() as u64
                } else {
                    u64::MAX
                };
                head.starts_with(crate::magic::ELF)
                    || ptx_past_head(&mut Reads::new(file, head, 0), 0, end, head.len())
            }
        }
}

/// Whether the text at `at` (ending by `end`), of which `head` bytes were
/// looked at already, may be PTX whose header the PTX reader finds only past
/// them: it reads up to [`ptx::MAX_HEADER`] bytes, skipping comments (of any
/// length, NULs and all) before the first directive. The text is read in
/// growing steps until its first token: a C header's licence comment costs
/// one more read, not 64 KiB.
fn ptx_past_head(reads: &mut Reads<'_>, at: u64, end: u64, head: usize) -> bool {
    let len = end.saturating_sub(at).min(ptx::MAX_HEADER as u64) as usize;
    if head >= len {
        return false;
    }
    let mut want = head;
    loop {
        let Some(text) = reads.upto(at, want) else {
            return false;
        };
        match ptx::opens_with_version(text) {
            Some(opens) => return opens,
            // Comments to the end of the file, or of what the reader reads.
            None if text.len() < want || want == len => return false,
            // Grows every time (from nothing, too: a member whose data
            // lies past the end of the file has no head).
            None => want = want.saturating_mul(8).max(HEAD).min(len),
        }
    }
}

/// Whether the 64-bit ELF file `file` (whose first bytes are `head`) has a
/// section the full parse would report, from one more positioned read (the
/// section table and the names before it) or, for an unusual layout, two.
fn elf_may_hold_offload_code(file: &File, head: &[u8]) -> bool {
    elf_may_hold(
        &mut Reads::new(file, head, 0),
        0,
        u64::MAX,
        TAIL_BEFORE_TABLE,
        0,
    )
}

/// [`elf_may_hold_offload_code`] for the ELF object at `base` in the file,
/// `end` being where its bytes end. The read of its tail starts up to
/// `before` bytes before the section table (where linkers put the names)
/// and, when the table ends the object, goes on `ahead` bytes past `end`
/// (an archive's next member header and ELF header, read with it).
fn elf_may_hold(reads: &mut Reads<'_>, base: u64, end: u64, before: u64, ahead: u64) -> bool {
    let Some(bytes) = reads.get(base, std::mem::size_of::<FileHeader64<Endianness>>()) else {
        return true;
    };
    let Ok(header) = FileHeader64::<Endianness>::parse(bytes) else {
        return true;
    };
    let Ok(endian) = header.endian() else {
        return true;
    };
    let (count, index) = (header.e_shnum(endian), header.e_shstrndx(endian));
    // Extended numbering (0 sections or SHN_XINDEX) is left to the full parse.
    if count == 0 || index == object::elf::SHN_XINDEX {
        return true;
    }
    let entry = std::mem::size_of::<SectionHeader64<Endianness>>() as u64;
    let Some((table_at, table_end)) = base
        .checked_add(header.e_shoff(endian))
        .and_then(|at| Some((at, at.checked_add(u64::from(count) * entry)?)))
        .filter(|&(_, table_end)| table_end <= end)
    else {
        return true;
    };
    let start = table_at.saturating_sub(before).max(base);
    let read_end = if ahead > 0 && end - table_end < ahead {
        end.saturating_add(ahead)
    } else {
        table_end
    };
    let Some(tail) = reads
        .upto(start, (read_end - start) as usize)
        .and_then(|t| t.get(..(table_end - start) as usize))
    else {
        return true;
    };
    let Ok(headers) = object::pod::slice_from_all_bytes::<SectionHeader64<Endianness>>(
        &tail[(table_at - start) as usize..],
    ) else {
        return true;
    };
    let Some(names) = headers.get(usize::from(index)) else {
        return true;
    };
    let Some((names_at, names_len)) = base
        .checked_add(names.sh_offset(endian))
        .zip(usize::try_from(names.sh_size(endian)).ok())
    else {
        return true;
    };
    let large_data = headers.iter().any(|h| {
        super::embedded::searched(h.sh_type(endian), h.sh_flags(endian))
            && h.sh_size(endian) >= super::embedded::LARGE_DATA
    });
    if large_data {
        return true;
    }
    let fields = |h: &SectionHeader64<Endianness>| (h.sh_name(endian), h.sh_type(endian));
    // The names, where the tail holds them (as linkers place them).
    if let Some(names) = names_at
        .checked_sub(start)
        .and_then(|at| tail.get(usize::try_from(at).ok()?..)?.get(..names_len))
    {
        return any_offload_section(names, headers.iter().map(fields));
    }
    // Else one more read, which reuses the buffer the headers are in.
    let sections: Vec<(u32, u32)> = headers.iter().map(fields).collect();
    match names_at.checked_add(names_len as u64) {
        Some(names_end) if names_end <= end => match reads.get(names_at, names_len) {
            Some(names) => any_offload_section(names, sections.into_iter()),
            None => true,
        },
        _ => true,
    }
}

/// Whether any of `sections` (name offset into `names`, type) is one the full
/// parse reports.
fn any_offload_section(names: &[u8], mut sections: impl Iterator<Item = (u32, u32)>) -> bool {
    sections.any(|(name, kind)| section_role(names, name, kind).is_some())
}

/// Whether the `ar` archive `file` (whose first bytes are `head`) has a
/// member the full parse would report: an ELF object with an offload
/// section, or a container or GPU image on its own. An object member costs
/// one read: its section table and names, with the next member's header
/// and ELF header (see [`NEXT_MEMBER_HEAD`]); its code is not read, but in
/// an archive of small members (see [`DENSE_MEMBER`]).
fn archive_may_hold_offload_code(file: &File, head: &[u8]) -> bool {
    // GNU and System V archives only; thin and AIX archives are left to
    // the full parse.
    if !head.starts_with(b"!<arch>\n") {
        return true;
    }
    let mut reads = Reads::new(file, head, ARCHIVE_WINDOW);
    let mut at = 8u64;
    for members in 1..=MAX_MEMBERS as u64 {
        let Some(header) = reads.upto(at, 60) else {
            return true;
        };
        if header.is_empty() {
            // The end of the archive, if the file reaches it: a member that
            // ran past the end is left to the full parse.
            return reads.get(at - 1, 1).is_none();
        }
        if header.len() < 60 || &header[58..60] != b"`\n" {
            return true;
        }
        let name: [u8; 16] = header[..16].try_into().unwrap_or_default();
        let Some(size) = std::str::from_utf8(&header[48..58])
            .ok()
            .and_then(|s| s.trim_end().parse::<u64>().ok())
        else {
            return true;
        };
        let data = at + 60;
        let Some(next) = data.checked_add(size).map(|end| end + (end & 1)) else {
            return true;
        };
        if member_may_hold(&mut reads, &name, data, size) {
            return true;
        }
        at = next;
        if members >= 8 {
            reads.min = if (at - 8) / members <= DENSE_MEMBER {
                DENSE_WINDOW
            } else {
                ARCHIVE_WINDOW
            };
        }
    }
    true
}

/// Whether the archive member named `name` (its header's 16 bytes), whose
/// `size` bytes start at `data`, may hold offload code.
fn member_may_hold(reads: &mut Reads<'_>, name: &[u8; 16], mut data: u64, mut size: u64) -> bool {
    let name = name.trim_ascii_end();
    // Symbol tables and the long-name table (System V, GNU, BSD).
    if matches!(name, b"/" | b"/SYM64/" | b"//" | b"ARFILENAMES/") || name.starts_with(b"__.SYMDEF")
    {
        return false;
    }
    // A BSD long name is stored at the start of the data.
    if let Some(len) = name.strip_prefix(b"#1/") {
        let Some(len) = std::str::from_utf8(len)
            .ok()
            .and_then(|l| l.parse::<u64>().ok())
        else {
            return true;
        };
        let Some(rest) = size.checked_sub(len) else {
            return true;
        };
        (data, size) = (data + len, rest);
    }
    // An ELF member is told by its first 64 bytes (read with the previous
    // member's tail); other members by their first [`HEAD`] bytes, as a file
    // is.
    let Some(first) = reads.upto(data, size.min(64) as usize) else {
        return true;
    };
    if let Ok(FileKind::Elf64) = FileKind::parse(first) {
        return OffloadSection::whole(first, 0, None).is_some()
            || elf_may_hold(
                reads,
                data,
                data + size,
                MEMBER_TAIL_BEFORE_TABLE,
                NEXT_MEMBER_HEAD,
            );
    }
    let Some(head) = reads.upto(data, size.min(HEAD as u64) as usize) else {
        return true;
    };
    if OffloadSection::whole(head, 0, None).is_some() {
        return true;
    }
    let head = head.len();
    ptx_past_head(reads, data, data + size, head)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str, bytes: &[u8]) -> (std::path::PathBuf, File) {
        let path = std::env::temp_dir().join(format!("quick-{}-{name}", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        let file = File::open(&path).unwrap();
        (path, file)
    }

    #[test]
    fn ptx_past_a_long_comment_is_found() {
        // The fuzzer's find: directives after 4 KiB of comment (NULs and all).
        let mut ptx = b"//\n// Generated by NVIDIA NVVM Compiler\n// ".to_vec();
        ptx.resize(5000, 0);
        ptx.extend(b"\n.version 9.0\n.target sm_90\n.address_size 64\n");
        let (path, file) = temp("long-comment.ptx", &ptx);
        assert!(OffloadSection::whole(&ptx[..HEAD], 0, None).is_none());
        assert!(may_hold_offload_code(
            &file,
            &ptx[..HEAD],
            &FileKind::parse(&ptx[..HEAD])
        ));
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn reads_share_one_buffer_and_stop_at_the_end() {
        let bytes: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let (path, file) = temp("reads", &bytes);
        let mut reads = Reads::new(&file, &bytes[..100], 1000);
        assert_eq!(reads.get(10, 20), Some(&bytes[10..30]));
        assert_eq!(reads.get(5000, 10), Some(&bytes[5000..5010]));
        // Inside the window of the last read: no new read needed.
        assert_eq!(reads.get(5900, 100), Some(&bytes[5900..6000]));
        assert_eq!(reads.upto(9990, 100), Some(&bytes[9990..]));
        assert_eq!(reads.get(9990, 100), None);
        assert_eq!(reads.upto(20_000, 10), Some(&[][..]));
        std::fs::remove_file(path).unwrap();
    }

    /// An `ar` archive of `members` (name, bytes), GNU style.
    fn archive(members: &[(&str, &[u8])]) -> Vec<u8> {
        let mut a = b"!<arch>\n".to_vec();
        for (name, bytes) in members {
            a.extend(
                format!(
                    "{:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n",
                    format!("{name}/"),
                    0,
                    0,
                    0,
                    644,
                    bytes.len()
                )
                .bytes(),
            );
            a.extend_from_slice(bytes);
            if a.len() % 2 == 1 {
                a.push(b'\n');
            }
        }
        a
    }

    #[test]
    fn archives_are_told_by_their_members() {
        let plain = archive(&[("a.txt", b"hello"), ("b.txt", b"odd")]);
        let (path, file) = temp("plain.a", &plain);
        assert!(!archive_may_hold_offload_code(
            &file,
            &plain[..plain.len().min(4096)]
        ));
        std::fs::remove_file(path).unwrap();
        let bundle = archive(&[
            ("a.txt", b"hello"),
            ("k.bc", b"__CLANG_OFFLOAD_BUNDLE__\x01\0\0\0\0\0\0\0"),
        ]);
        let (path, file) = temp("bundle.a", &bundle);
        assert!(archive_may_hold_offload_code(&file, &bundle));
        std::fs::remove_file(path).unwrap();
        // A member whose size runs past the end is left to the full parse.
        let mut broken = plain.clone();
        broken[8 + 48..8 + 58].copy_from_slice(b"999999    ");
        let (path, file) = temp("broken.a", &broken);
        assert!(archive_may_hold_offload_code(&file, &broken));
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn dense_archives_are_read_in_windows_and_miss_nothing() {
        // Thirty members of 3,000 bytes (dense from the eighth on: read 32 KiB
        // at a time), then a bundle, two windows on.
        let filler = vec![b'x'; 3000];
        let mut members: Vec<(String, &[u8])> = (0..30)
            .map(|i| (format!("m{i}.txt"), &filler[..]))
            .collect();
        let plain = archive(
            &members
                .iter()
                .map(|(n, b)| (n.as_str(), *b))
                .collect::<Vec<_>>(),
        );
        let (path, file) = temp("dense.a", &plain);
        assert!(!archive_may_hold_offload_code(&file, &plain[..HEAD]));
        std::fs::remove_file(path).unwrap();
        let bundle = b"__CLANG_OFFLOAD_BUNDLE__\x01\0\0\0\0\0\0\0";
        members.push(("k.bc".into(), bundle));
        let with = archive(
            &members
                .iter()
                .map(|(n, b)| (n.as_str(), *b))
                .collect::<Vec<_>>(),
        );
        assert!(with.len() > 2 * DENSE_WINDOW);
        let (path, file) = temp("dense-bundle.a", &with);
        assert!(archive_may_hold_offload_code(&file, &with[..HEAD]));
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_member_past_the_end_is_left_to_the_full_parse() {
        // The fuzzer's find (fuzz/regressions/quick_look/member-past-the-end):
        // an 8-byte member whose data lies past the end of the file. Its
        // head is empty; the PTX test must still end.
        let mut bytes = b"!<arch>\n".to_vec();
        bytes.extend(
            format!(
                "{:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n",
                "a/", 0, 0, 0, 644, 8
            )
            .bytes(),
        );
        let (path, file) = temp("past-the-end.a", &bytes);
        assert!(archive_may_hold_offload_code(&file, &bytes));
        std::fs::remove_file(path).unwrap();
    }
}
