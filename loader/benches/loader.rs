//! `cargo bench -p offload-loader`: listing and selecting on rocSPARSE's 1.3 GB
//! fat binary (Debian librocsparse0), and CCOB decompression against the zstd
//! library decoding the same payload.

use std::io::Read;

use criterion::{criterion_group, criterion_main, Criterion};
use offload_loader::compressed::{hash, CompressedBundle};
use offload_loader::{magic, select, DeviceTarget, Limits, MappedFile, Policy};

const ROCSPARSE: &str = "/usr/lib/x86_64-linux-gnu/librocsparse.so.0.1";

fn listing(c: &mut Criterion) {
    let Ok(file) = MappedFile::open(ROCSPARSE) else {
        eprintln!("skipped: {ROCSPARSE} not installed (librocsparse0)");
        return;
    };
    c.bench_function("list rocsparse (111 bundles, 888 entries)", |b| {
        b.iter(|| {
            let sections = file.containers(&Limits::default()).unwrap();
            sections.iter().map(|s| s.containers.len()).sum::<usize>()
        })
    });
    let device = DeviceTarget::parse("gfx90a:sramecc+:xnack-").unwrap();
    c.bench_function("list + select rocsparse for gfx90a", |b| {
        b.iter(|| {
            let sections = file.containers(&Limits::default()).unwrap();
            let mut chosen = 0;
            for s in sections {
                for container in s.containers.iter().flatten() {
                    chosen += usize::from(
                        select(&device, container, &Policy::default())
                            .chosen
                            .is_some(),
                    );
                }
            }
            chosen
        })
    });
}

/// A CCOB v3 (zstd, as clang-22 writes it) of the first bundle of rocSPARSE,
/// or of synthetic code-object-like bytes when rocSPARSE is not installed.
fn ccob() -> (Vec<u8>, usize) {
    let raw: Vec<u8> = MappedFile::open(ROCSPARSE)
        .ok()
        .and_then(|f| {
            let s = f.containers(&Limits::default()).ok()?;
            let c = s.first()?.containers.first()?.as_ref().ok()?;
            let start = usize::try_from(c.offset()).ok()?;
            Some(f.bytes().get(start..)?.get(..c.len() as usize)?.to_vec())
        })
        .unwrap_or_else(|| {
            (0..4_000_000u32)
                .flat_map(|i| (i % 977).to_le_bytes())
                .collect()
        });
    let payload = zstd::bulk::compress(&raw, 9).unwrap();
    let mut out = magic::COMPRESSED_BUNDLE.to_vec();
    out.extend(3u16.to_le_bytes());
    out.extend(1u16.to_le_bytes());
    out.extend((32 + payload.len() as u64).to_le_bytes());
    out.extend((raw.len() as u64).to_le_bytes());
    out.extend(hash(&raw).to_le_bytes());
    out.extend(payload);
    (out, raw.len())
}

fn decompression(c: &mut Criterion) {
    let (data, size) = ccob();
    let ccob = CompressedBundle::parse(&data).unwrap();
    let mut group = c.benchmark_group(format!("inflate {size}-byte bundle"));
    group.bench_function("zstd library alone", |b| {
        b.iter(|| {
            let mut out = Vec::new();
            zstd::stream::read::Decoder::with_buffer(ccob.payload)
                .unwrap()
                .read_to_end(&mut out)
                .unwrap();
            out.len()
        })
    });
    let unchecked = Limits {
        verify_hash: false,
        ..Limits::default()
    };
    group.bench_function("CompressedBundle::decompress, hash not checked", |b| {
        b.iter(|| ccob.decompress(&unchecked).unwrap().len())
    });
    group.bench_function("CompressedBundle::decompress, MD5 checked (default)", |b| {
        b.iter(|| ccob.decompress(&Limits::default()).unwrap().len())
    });
    group.finish();
}

criterion_group!(benches, listing, decompression);
criterion_main!(benches);
