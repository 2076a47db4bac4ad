//! A file to write, as pieces: runs of the original's bytes (borrowed from
//! the mapped file, never copied), bytes made anew, and runs of zeros. The
//! output of a 1.3 GB library is written from the mapping piece by piece,
//! so memory holds only what was made anew.

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};

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

    /// Writes the output to `file` (new and empty), leaving runs of zeros of
    /// a page or more unwritten: holes, which read as zeros and take no disk
    /// blocks where the file system supports them.
    pub fn write_sparse(&self, file: &mut File) -> io::Result<()> {
        const HOLE: u64 = 4096;
        let mut w = io::BufWriter::with_capacity(1 << 20, file);
        for piece in &self.pieces {
            match piece {
                Piece::Zeros(n) if *n >= HOLE => {
                    let step = i64::try_from(*n).map_err(|_| {
                        io::Error::new(io::ErrorKind::InvalidInput, "hole too large")
                    })?;
                    w.seek(SeekFrom::Current(step))?;
                }
                other => Output::write_piece(other, &mut w)?,
            }
        }
        w.flush()?;
        let file = w.into_inner().map_err(|e| e.into_error())?;
        // A hole at the end: the length says where the file ends.
        file.set_len(self.len)
    }

    /// The output as one buffer (tests, small files).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len as usize);
        self.write_to(&mut out).expect("writing to a Vec");
        out
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
        let mut o = Output::default();
        o.push(Piece::Copy(b"start"));
        o.push(Piece::Zeros(1 << 20));
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
        let back = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(back == o.to_vec());
    }
}
