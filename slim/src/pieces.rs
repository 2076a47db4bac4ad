//! A file to write, as pieces: runs of the original's bytes (borrowed from
//! the mapped file, never copied), bytes made anew, and runs of zeros. The
//! output of a 1.3 GB library is written from the mapping piece by piece,
//! so memory holds only what was made anew.

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

/// The block size holes are made of: the page size of the machines this
/// runs on, and the block size of their usual file systems.
pub const BLOCK: u64 = 4096;

/// One piece of an output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Bytes of the input, as they are.
    Copy(&'a [u8]),
    /// Bytes made anew.
    Owned(Vec<u8>),
    /// This many zero bytes.
    Zeros(u64),
}

impl Piece<'_> {
    /// The piece's length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Piece::Copy(b) => b.len() as u64,
            Piece::Owned(b) => b.len() as u64,
            Piece::Zeros(n) => *n,
        }
    }

    /// Whether the piece is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The offsets in `base` of the bytes the piece copies from it; `None`
    /// for a piece that copies nothing of `base`.
    fn source(&self, base: &[u8]) -> Option<std::ops::Range<u64>> {
        let Piece::Copy(b) = self else {
            return None;
        };
        let at = (b.as_ptr() as usize).checked_sub(base.as_ptr() as usize)?;
        (at + b.len() <= base.len()).then_some(at as u64..(at + b.len()) as u64)
    }
}

/// An output: pieces in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Output<'a> {
    pieces: Vec<Piece<'a>>,
    len: u64,
}

impl<'a> Output<'a> {
    /// All of `bytes`, as they are.
    pub fn whole(bytes: &'a [u8]) -> Output<'a> {
        let mut output = Output::default();
        output.push(Piece::Copy(bytes));
        output
    }

    /// Appends `piece` (an empty one is dropped).
    pub fn push(&mut self, piece: Piece<'a>) {
        if !piece.is_empty() {
            self.len += piece.len();
            self.pieces.push(piece);
        }
    }

    /// Appends zeros up to `offset` (nothing if the output is already there).
    pub fn pad_to(&mut self, offset: u64) {
        if offset > self.len {
            self.push(Piece::Zeros(offset - self.len));
        }
    }

    /// Appends every piece of `other`.
    pub fn extend(&mut self, other: Output<'a>) {
        for piece in other.pieces {
            self.push(piece);
        }
    }

    /// The output's length.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the output is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Writes the output to `w`.
    pub fn write_to(&self, w: &mut impl Write) -> io::Result<()> {
        for piece in &self.pieces {
            Output::write_piece(piece, w)?;
        }
        Ok(())
    }

    fn write_piece(piece: &Piece<'_>, w: &mut impl Write) -> io::Result<()> {
        static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
        match piece {
            Piece::Copy(b) => w.write_all(b),
            Piece::Owned(b) => w.write_all(b),
            Piece::Zeros(n) => {
                let mut left = *n;
                while left > 0 {
                    let step = left.min(ZEROS.len() as u64) as usize;
                    w.write_all(&ZEROS[..step])?;
                    left -= step as u64;
                }
                Ok(())
            }
        }
    }

    /// Writes the output to `file` (new and empty), leaving every
    /// 4 KiB-aligned block of zeros unwritten (as `cp --sparse` does):
    /// holes, which read as zeros and take no disk blocks where the file
    /// system supports them. Zeros the output was given ([`Piece::Zeros`])
    /// and zeros in the bytes it copies (a hole of an earlier pass) alike.
    pub fn write_sparse(&self, file: &mut File) -> io::Result<()> {
        let mut w = Sparse {
            w: io::BufWriter::with_capacity(1 << 20, file),
            pos: 0,
        };
        for piece in &self.pieces {
            match piece {
                Piece::Copy(b) => {
                    // The input is mapped for scattered reads (no
                    // read-ahead): a cold file would fault in page by
                    // page. Each window is asked for while the one before
                    // it is written.
                    let mut rest: &[u8] = b;
                    will_need(&rest[..rest.len().min(READ_WINDOW)]);
                    while !rest.is_empty() {
                        let (now, later) = rest.split_at(rest.len().min(READ_WINDOW));
                        will_need(&later[..later.len().min(READ_WINDOW)]);
                        w.bytes(now)?;
                        rest = later;
                    }
                }
                Piece::Owned(b) => w.bytes(b)?,
                Piece::Zeros(n) => w.zeros(*n)?,
            }
        }
        w.w.flush()?;
        let file = w.w.into_inner().map_err(|e| e.into_error())?;
        // A hole at the end: the length says where the file ends.
        file.set_len(self.len)
    }

    /// Whether the output is `base` with some of its bytes made anew: as
    /// long, and each copied piece `base`'s own bytes at their own offset.
    pub fn edits(&self, base: &[u8]) -> bool {
        let mut pos = 0u64;
        self.len == base.len() as u64
            && self.pieces.iter().all(|piece| {
                let at = pos;
                pos += piece.len();
                match piece {
                    Piece::Copy(_) => piece.source(base).is_some_and(|s| s.start == at),
                    Piece::Owned(_) | Piece::Zeros(_) => true,
                }
            })
    }

    /// This output with `edits`, an output that [edits](Output::edits)
    /// `base`, laid over it: each run of pieces of `edits` that are not
    /// `base`'s own bytes at their own offset takes the place of those bytes
    /// where this output copies them. `Err(self)` unless each such run of
    /// `base` is copied here exactly once, whole, by a multiple of 4 KiB
    /// from where it was (its blocks of zeros stay whole blocks, holes as
    /// they would be in `base`).
    pub fn overlay(self, base: &'a [u8], edits: Output<'a>) -> Result<Output<'a>, Output<'a>> {
        if !edits.edits(base) {
            return Err(self);
        }
        // Per piece of this output, the runs laid over it: (offset in the
        // piece, length, pieces).
        let mut over: Vec<Vec<(u64, u64, Vec<Piece<'a>>)>> = vec![Vec::new(); self.pieces.len()];
        for (start, run) in runs(base, edits) {
            let end = start + run.iter().map(Piece::len).sum::<u64>();
            let mut pos = 0u64;
            let mut place = None;
            for (i, piece) in self.pieces.iter().enumerate() {
                let at = pos;
                pos += piece.len();
                let Some(from) = piece.source(base) else {
                    continue;
                };
                if from.end <= start || end <= from.start {
                    continue;
                }
                if place.is_some() || start < from.start || from.end < end {
                    return Err(self);
                }
                // Wrapping: 2^64 is a multiple of the block too.
                let moved = (at + (start - from.start)).wrapping_sub(start);
                if moved % BLOCK != 0 {
                    return Err(self);
                }
                place = Some((i, start - from.start));
            }
            let Some((i, offset)) = place else {
                return Err(self);
            };
            over[i].push((offset, end - start, run));
        }
        let mut out = Output::default();
        for (piece, mut runs) in self.pieces.into_iter().zip(over) {
            let Piece::Copy(bytes) = piece else {
                out.push(piece);
                continue;
            };
            runs.sort_by_key(|r| r.0);
            let mut at = 0usize;
            for (offset, len, run) in runs {
                out.push(Piece::Copy(&bytes[at..offset as usize]));
                for p in run {
                    out.push(p);
                }
                at = (offset + len) as usize;
            }
            out.push(Piece::Copy(&bytes[at..]));
        }
        Ok(out)
    }

    /// Writes into `file`, which holds the bytes the output
    /// [edits](Output::edits), what the output makes anew: its new bytes where
    /// they go, its zeros as holes where they fill whole 4 KiB blocks (as
    /// [`Output::write_sparse`] leaves them), else written.
    pub fn write_edits(&self, file: &File) -> io::Result<()> {
        let mut pos = 0u64;
        for piece in &self.pieces {
            match piece {
                Piece::Copy(_) => {}
                Piece::Owned(b) => file.write_all_at(b, pos)?,
                Piece::Zeros(n) => zero(file, pos, *n)?,
            }
            pos += piece.len();
        }
        Ok(())
    }

    /// Bytes of the 4 KiB-aligned blocks (from the output's start) that
    /// lie wholly in runs of [`Piece::Zeros`].
    pub fn zero_blocks(&self) -> u64 {
        let mut pos = 0u64;
        let mut run: Option<u64> = None;
        let mut total = 0u64;
        let blocks = |start: u64, end: u64| {
            let (first, last) = (start.next_multiple_of(BLOCK), end / BLOCK * BLOCK);
            last.saturating_sub(first)
        };
        for piece in &self.pieces {
            let end = pos + piece.len();
            match piece {
                Piece::Zeros(_) => {
                    run.get_or_insert(pos);
                }
                _ => {
                    if let Some(start) = run.take() {
                        total += blocks(start, pos);
                    }
                }
            }
            pos = end;
        }
        if let Some(start) = run {
            total += blocks(start, pos);
        }
        total
    }

    /// The output as one buffer (tests, small files).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len as usize);
        self.write_to(&mut out).expect("writing to a Vec");
        out
    }
}

/// The runs of pieces of `edits` (an output that [edits](Output::edits)
/// `base`) that are not `base`'s own bytes at their own offset: (offset,
/// pieces).
fn runs<'a>(base: &'a [u8], edits: Output<'a>) -> Vec<(u64, Vec<Piece<'a>>)> {
    let mut runs: Vec<(u64, Vec<Piece<'a>>)> = Vec::new();
    let mut pos = 0u64;
    let mut open = false;
    for piece in edits.pieces {
        let at = pos;
        pos += piece.len();
        let own = piece.source(base).is_some_and(|s| s.start == at);
        match runs.last_mut() {
            _ if own => open = false,
            Some((_, run)) if open => run.push(piece),
            _ => {
                runs.push((at, vec![piece]));
                open = true;
            }
        }
    }
    runs
}

/// How much of a copied piece is asked to be read ahead at a time: large
/// enough that the disk streams, small enough that little is read ahead of
/// a write that fails.
const READ_WINDOW: usize = 16 << 20;

/// Asks the kernel to read the pages of `bytes` in, in the background
/// (`MADV_WILLNEED`: read-ahead of a mapped file's pages; a hint, nothing
/// changes if it is not taken).
fn will_need(bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    // SAFETY: sysconf reads a constant of the system; no memory of ours.
    let page = *PAGE.get_or_init(|| match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as usize,
        _ => 4096,
    });
    let start = bytes.as_ptr() as usize;
    let first = start / page * page;
    let end = (start + bytes.len()).next_multiple_of(page);
    // SAFETY: every page of `first..end` holds a byte of `bytes`, which is
    // borrowed, so each is mapped for the call (mappings cover whole
    // pages). MADV_WILLNEED reads no memory of ours and changes no byte of
    // it: it starts reading the pages in.
    unsafe {
        libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_WILLNEED);
    }
}

/// Zeros at `pos..pos + n` of `file`: the whole blocks among them a hole
/// (`fallocate`, punching it, the file's length kept), the rest written; all
/// written where the file system makes no holes.
fn zero(file: &File, pos: u64, n: u64) -> io::Result<()> {
    static ZEROS: [u8; BLOCK as usize] = [0; BLOCK as usize];
    let end = pos.saturating_add(n);
    let (first, last) = (pos.next_multiple_of(BLOCK).min(end), end / BLOCK * BLOCK);
    let punched = last > first && {
        let (offset, len) = (
            i64::try_from(first).unwrap_or(i64::MAX),
            i64::try_from(last - first).unwrap_or(i64::MAX),
        );
        // SAFETY: fallocate on a descriptor `file` owns; it reads no memory
        // of ours, and where it fails nothing changed.
        let rc = unsafe {
            libc::fallocate(
                file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                offset,
                len,
            )
        };
        rc == 0
    };
    let mut at = pos;
    while at < end {
        if punched && at == first {
            at = last;
            continue;
        }
        let step = (end - at).min(BLOCK - at % BLOCK);
        file.write_all_at(&ZEROS[..step as usize], at)?;
        at += step;
    }
    Ok(())
}

/// A writer that seeks over aligned blocks of zeros.
struct Sparse<W: Write + Seek> {
    w: W,
    /// Where the next byte goes.
    pos: u64,
}

impl<W: Write + Seek> Sparse<W> {
    /// Writes `b`, each whole aligned block of zeros in it as a hole; a run
    /// of blocks that are not is written with one call (straight from `b`,
    /// not through the buffer).
    fn bytes(&mut self, mut b: &[u8]) -> io::Result<()> {
        const B: usize = BLOCK as usize;
        let zero = |c: &[u8]| c.iter().all(|&x| x == 0);
        while !b.is_empty() {
            let n = ((BLOCK - self.pos % BLOCK) as usize).min(b.len());
            let (chunk, rest) = if n < B {
                // Part of a block: written.
                b.split_at(n)
            } else {
                // Whole blocks from here: as many as are alike.
                let holes = zero(&b[..B]);
                let run = b.chunks_exact(B).take_while(|c| zero(c) == holes).count();
                let (run, rest) = b.split_at(run * B);
                if holes {
                    let step = i64::try_from(run.len()).map_err(|_| {
                        io::Error::new(io::ErrorKind::InvalidInput, "hole too large")
                    })?;
                    self.w.seek(SeekFrom::Current(step))?;
                    self.pos += run.len() as u64;
                    b = rest;
                    continue;
                }
                (run, rest)
            };
            self.w.write_all(chunk)?;
            self.pos += chunk.len() as u64;
            b = rest;
        }
        Ok(())
    }

    /// Writes `n` zeros: the whole aligned blocks among them as holes.
    fn zeros(&mut self, mut n: u64) -> io::Result<()> {
        static ZEROS: [u8; BLOCK as usize] = [0; BLOCK as usize];
        while n > 0 {
            let head = (BLOCK - self.pos % BLOCK).min(n);
            if head < BLOCK {
                self.w.write_all(&ZEROS[..head as usize])?;
                self.pos += head;
                n -= head;
                continue;
            }
            let whole = n / BLOCK * BLOCK;
            let step = i64::try_from(whole)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "hole too large"))?;
            self.w.seek(SeekFrom::Current(step))?;
            self.pos += whole;
            n -= whole;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `o` written sparse to a new file: the bytes read back, and the bytes
    /// of the blocks the disk keeps for it.
    fn written(o: &Output<'_>, tag: &str) -> (Vec<u8>, u64) {
        use std::os::unix::fs::MetadataExt;
        let path = std::env::temp_dir().join(format!("offload-slim-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut f = File::options()
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        o.write_sparse(&mut f).unwrap();
        drop(f);
        let blocks = std::fs::metadata(&path).unwrap().blocks() * 512;
        let back = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        (back, blocks)
    }

    #[test]
    fn pieces_write_in_order() {
        let mut o = Output::default();
        o.push(Piece::Copy(b"ab"));
        o.push(Piece::Zeros(0));
        o.pad_to(4);
        o.push(Piece::Owned(b"cd".to_vec()));
        o.pad_to(3);
        assert_eq!(o.len(), 6);
        assert_eq!(o.to_vec(), b"ab\0\0cd");
    }

    /// Copied bytes with blocks of zeros among runs of data, from an
    /// aligned and an unaligned start: read back the same, the aligned
    /// blocks of zeros as holes.
    #[test]
    fn copied_runs_of_data_and_zeros_read_back_the_same() {
        let block = |fill: u8| vec![fill; BLOCK as usize];
        let bytes: Vec<u8> = [1, 0, 0, 2, 3, 0, 4, 0, 0, 0]
            .iter()
            .flat_map(|&f| block(f))
            .chain([5; 100])
            .collect();
        // Blocks that hold data: 5 from an aligned start; shifted by 100
        // bytes, the runs of 2 and 3 blocks of zeros hold 1 and 2 whole ones.
        for (lead, data) in [(0usize, 5), (100, 8)] {
            let mut o = Output::default();
            o.push(Piece::Owned(vec![9; lead]));
            o.push(Piece::Copy(&bytes));
            let (back, blocks) = written(&o, &format!("runs-{lead}"));
            assert!(back == o.to_vec(), "{lead}");
            assert!(blocks <= data * BLOCK, "{lead}: {blocks}");
        }
    }

    /// An output that edits its base: written into a file that holds the
    /// base, it reads back as written whole, its whole blocks of zeros holes;
    /// a copy from elsewhere, or of another length, is no edit.
    #[test]
    fn edits_written_where_they_stand_read_back_as_the_whole() {
        let base: Vec<u8> = (0..10 * BLOCK as usize)
            .map(|i| (i % 251) as u8 + 1)
            .collect();
        let mut o = Output::default();
        o.push(Piece::Copy(&base[..100]));
        o.push(Piece::Owned(b"new".to_vec()));
        o.push(Piece::Copy(&base[103..5000]));
        // Zeros from an unaligned start over 6 whole blocks.
        o.push(Piece::Zeros(BLOCK * 7 - 5000 + 100));
        o.push(Piece::Copy(&base[(BLOCK * 7 + 100) as usize..]));
        assert!(o.edits(&base));
        let path = std::env::temp_dir().join(format!("offload-slim-edits-{}", std::process::id()));
        std::fs::write(&path, &base).unwrap();
        let f = File::options().write(true).open(&path).unwrap();
        o.write_edits(&f).unwrap();
        drop(f);
        use std::os::unix::fs::MetadataExt;
        let blocks = std::fs::metadata(&path).unwrap().blocks() * 512;
        let back = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(back == o.to_vec());
        // Blocks 2 to 6 are holes: 5 of 10 keep data.
        assert!(blocks <= 5 * BLOCK, "{blocks}");
        // Copied from another offset, or shorter: no edit.
        let mut moved = Output::default();
        moved.push(Piece::Copy(&base[1..]));
        moved.push(Piece::Owned(vec![0]));
        assert!(!moved.edits(&base));
        assert!(!Output::whole(&base[..100]).edits(&base));
        assert!(Output::whole(&base).edits(&base));
    }

    /// Edits laid over an output that copies their base with a block cut
    /// out: the bytes are the edited base with that block cut out; runs not
    /// copied exactly once, whole, moved by whole blocks, refuse.
    #[test]
    fn edits_laid_over_a_moved_copy_are_the_edited_base_moved() {
        let b = BLOCK as usize;
        let base: Vec<u8> = (0..10 * b).map(|i| (i % 251) as u8 + 1).collect();
        // Block 1 cut out: what follows moves back by a block.
        let cut = |base: &[u8], block: usize| -> Vec<u8> {
            [&base[..block], &base[2 * block..]].concat()
        };
        let mut packed = Output::default();
        packed.push(Piece::Copy(&base[..b]));
        packed.push(Piece::Copy(&base[2 * b..]));
        // "xyz" at `new`, a block of zeros at `zeros`.
        let edits = |new: usize, zeros: usize| {
            let mut e = Output::default();
            e.push(Piece::Copy(&base[..new]));
            e.push(Piece::Owned(b"xyz".to_vec()));
            e.push(Piece::Copy(&base[new + 3..zeros]));
            e.push(Piece::Zeros(BLOCK));
            e.push(Piece::Copy(&base[zeros + b..]));
            e
        };
        let (new, zeros) = (5 * b + 10, 7 * b);
        let laid = packed
            .clone()
            .overlay(&base, edits(new, zeros))
            .expect("laid over");
        assert_eq!(laid.len(), packed.len());
        assert!(laid.to_vec() == cut(&edits(new, zeros).to_vec(), b));
        // A run in the block cut out is not copied.
        assert!(packed.clone().overlay(&base, edits(b + 10, zeros)).is_err());
        // Copied twice.
        let mut twice = packed.clone();
        twice.push(Piece::Copy(&base[7 * b..8 * b]));
        assert!(twice.overlay(&base, edits(new, zeros)).is_err());
        // Split between two copies.
        let mut split = Output::default();
        split.push(Piece::Copy(&base[..7 * b + 100]));
        split.push(Piece::Copy(&base[7 * b + 100..]));
        assert!(split.overlay(&base, edits(new, zeros)).is_err());
        // Moved by less than a block.
        let mut shifted = Output::default();
        shifted.push(Piece::Copy(&base[..100]));
        shifted.push(Piece::Copy(&base[200..]));
        assert!(shifted.overlay(&base, edits(new, zeros)).is_err());
        // Not an edit of the base: refused whole.
        assert!(packed.overlay(&base, Output::whole(&base[1..])).is_err());
    }

    /// Long runs of zeros become holes; the bytes read back are the same,
    /// a hole at the end included.
    #[test]
    fn sparse_writes_read_back_the_same() {
        static COPIED: [u8; 1 << 20] = [0; 1 << 20];
        let mut o = Output::default();
        o.push(Piece::Copy(b"start"));
        o.push(Piece::Zeros(1 << 20));
        // Zeros among copied bytes (a hole of an earlier pass) too.
        o.push(Piece::Copy(&COPIED));
        o.push(Piece::Owned(b"middle".to_vec()));
        o.push(Piece::Zeros(100));
        o.push(Piece::Copy(b"end"));
        o.push(Piece::Zeros(1 << 20));
        // Three MiB of zeros, three MiB of holes: the disk keeps a few blocks.
        let (back, blocks) = written(&o, "sparse");
        assert_eq!(back.len() as u64, o.len());
        assert!(blocks < 1 << 20, "{blocks} bytes of blocks");
        assert!(back == o.to_vec());
        // Only given zeros count: from byte 5 to 5 + 2^20, 255 whole
        // blocks; the last run, from 2^21 + 114 to the end, 255 more.
        assert_eq!(o.zero_blocks(), 2 * 255 * BLOCK);
    }
}
