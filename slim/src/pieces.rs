//! A file to write, as pieces: runs of the original's bytes (borrowed from
//! the mapped file, never copied), bytes made anew, and runs of zeros. The
//! output of a 1.3 GB library is written from the mapping piece by piece,
//! so memory holds only what was made anew.

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};

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
                Piece::Copy(b) => w.bytes(b)?,
                Piece::Owned(b) => w.bytes(b)?,
                Piece::Zeros(n) => w.zeros(*n)?,
            }
        }
        w.w.flush()?;
        let file = w.w.into_inner().map_err(|e| e.into_error())?;
        // A hole at the end: the length says where the file ends.
        file.set_len(self.len)
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

/// A writer that seeks over aligned blocks of zeros.
struct Sparse<W: Write + Seek> {
    w: W,
    /// Where the next byte goes.
    pos: u64,
}

impl<W: Write + Seek> Sparse<W> {
    /// Writes `b`, each whole aligned block of zeros in it as a hole.
    fn bytes(&mut self, mut b: &[u8]) -> io::Result<()> {
        while !b.is_empty() {
            let n = ((BLOCK - self.pos % BLOCK) as usize).min(b.len());
            let (chunk, rest) = b.split_at(n);
            if n as u64 == BLOCK && chunk.iter().all(|&x| x == 0) {
                self.w.seek(SeekFrom::Current(BLOCK as i64))?;
            } else {
                self.w.write_all(chunk)?;
            }
            self.pos += n as u64;
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
        let path = std::env::temp_dir().join(format!("offload-slim-sparse-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut f = File::options()
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        o.write_sparse(&mut f).unwrap();
        drop(f);
        // Three MiB of zeros, three MiB of holes: the disk keeps a few blocks.
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.len(), o.len());
        assert!(meta.blocks() * 512 < 1 << 20, "{} blocks", meta.blocks());
        let back = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(back == o.to_vec());
        // Only given zeros count: from byte 5 to 5 + 2^20, 255 whole
        // blocks; the last run, from 2^21 + 114 to the end, 255 more.
        assert_eq!(o.zero_blocks(), 2 * 255 * BLOCK);
    }
}
