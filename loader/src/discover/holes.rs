//! The holes of a sparse file: ranges with no blocks, which read as zeros,
//! listed with `lseek(2)`'s `SEEK_HOLE` and `SEEK_DATA` (Linux 3.1,
//! POSIX.1-2024), so that a scan for containers passes over them instead
//! of reading them (each page of a hole read through a mapping is a page
//! the kernel zeroes). What `slim` leaves where it removes images, or
//! keeps containers at their addresses, is holes.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;

/// At most this many holes are listed; past them the file is read.
const MAX_HOLES: usize = 4096;

/// Holes smaller than this are read: passing over them gains nothing.
const SMALLEST: u64 = 64 << 10;

/// A file's holes: ranges of file offsets `(start, end)`, in order, apart.
/// Only a shortcut: a range not listed is read.
#[derive(Debug, Default, Clone)]
pub(crate) struct Holes(Vec<(u64, u64)>);

impl Holes {
    /// The holes of `file` (of metadata `meta`), as they are now. A file
    /// whose blocks cover its length has none and is not asked.
    pub(crate) fn of(file: &File, meta: &std::fs::Metadata) -> Holes {
        let len = meta.len();
        if meta.blocks().saturating_mul(512) >= len {
            return Holes::default();
        }
        let fd = file.as_raw_fd();
        let seek = |at: u64, whence| {
            let at = i64::try_from(at).ok()?;
            // SAFETY: lseek on a descriptor `file` holds open reads and
            // writes no memory of ours; it moves the descriptor's offset,
            // which nothing here reads from (the file is mapped).
            let to = unsafe { libc::lseek(fd, at, whence) };
            u64::try_from(to).ok()
        };
        let mut holes = Vec::new();
        let mut at = 0;
        while at < len && holes.len() < MAX_HOLES {
            // Where the file system keeps no holes, the only one is past
            // the end.
            let Some(start) = seek(at, libc::SEEK_HOLE).filter(|&s| s < len) else {
                break;
            };
            // No data after it (ENXIO): a hole to the end.
            let end = seek(start, libc::SEEK_DATA).map_or(len, |d| d.min(len));
            if end <= start {
                break;
            }
            if end - start >= SMALLEST {
                holes.push((start, end));
            }
            at = end;
        }
        Holes(holes)
    }

    /// The holes of the part `start..start + len` of the file, as that
    /// part's own.
    pub(crate) fn part(&self, start: u64, len: u64) -> Holes {
        Holes(
            self.within(start, len)
                .into_iter()
                .map(|(a, b)| (a as u64, b as u64))
                .collect(),
        )
    }

    /// The holes within `start..start + len`, relative to `start`.
    pub(crate) fn within(&self, start: u64, len: u64) -> Vec<(usize, usize)> {
        let end = start.saturating_add(len);
        self.0
            .iter()
            .filter(|&&(a, b)| a < end && b > start)
            .map(|&(a, b)| {
                (
                    (a.max(start) - start) as usize,
                    (b.min(end) - start) as usize,
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::Limits;
    use crate::MappedFile;
    use std::os::unix::fs::FileExt;

    /// A sparse file's holes are listed where the file system keeps them:
    /// in order, apart, each reading as zeros; and the containers of a
    /// mapped sparse file are those of its bytes read whole.
    #[test]
    fn a_sparse_file_is_listed_and_scanned_as_its_bytes() {
        let section = crate::container::tests::sparse_section();
        let path = std::env::temp_dir().join(format!("holes-{}.bundle", std::process::id()));
        let file = File::create(&path).unwrap();
        // Only the bytes that are not zeros are written: the rest is holes
        // where the file system makes them.
        file.set_len(section.len() as u64).unwrap();
        for (i, chunk) in section.chunks(4096).enumerate() {
            if chunk.iter().any(|&b| b != 0) {
                file.write_all_at(chunk, (i * 4096) as u64).unwrap();
            }
        }
        file.sync_all().unwrap();
        let holes = Holes::of(&file, &file.metadata().unwrap());
        let mut last = 0;
        for &(a, b) in &holes.0 {
            assert!(a >= last && b > a && b <= section.len() as u64, "{holes:?}");
            assert!(section[a as usize..b as usize].iter().all(|&x| x == 0));
            last = b;
        }
        let within = holes.within(4096, 1 << 20);
        assert!(
            within.iter().all(|&(a, b)| a < b && b <= 1 << 20),
            "{within:?}"
        );
        let mapped = MappedFile::open(&path).unwrap();
        let limits = Limits::default();
        let around = mapped.containers(&limits).unwrap();
        let read = crate::discover::file::containers(mapped.bytes(), &limits).unwrap();
        assert_eq!(format!("{around:?}"), format!("{read:?}"));
        assert_eq!(around[0].containers.len(), 4);
        drop(mapped);
        std::fs::remove_file(&path).unwrap();
    }
}
