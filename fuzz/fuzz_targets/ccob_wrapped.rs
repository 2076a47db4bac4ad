//! The bundle behind a `CCOB`: the input (after one selector byte) is
//! compressed here, zstd or zlib, into a v1, v2 or v3 `CCOB` with the right
//! sizes and hash, so that mutations reach the inflated table and entries
//! instead of dying in the compressed stream (why the other targets never
//! found the listing bomb). Then the section is scanned, every image listed,
//! extracted and selected for a few devices, with a 1 MiB inflation cap and
//! a small entry limit.
//!
//! Invariants: the CCOB is found as one container covering the whole input
//! or refused with an error inside it or inside its inflated bundle; an extracted image has its stated
//! size; selection never chooses a rejected image.
#![no_main]
use std::io::Write;

use libfuzzer_sys::fuzz_target;
use offload_loader::compressed::hash;
use offload_loader::{scan, select, DeviceTarget, ImageSource, Limits, Policy};

fn ccob(selector: u8, raw: &[u8]) -> Vec<u8> {
    let zstd = selector & 1 == 1;
    let version: u16 = [1, 2, 3, 3][usize::from(selector >> 1) & 3];
    let payload = if zstd {
        zstd::bulk::compress(raw, 1).unwrap_or_default()
    } else {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        let _ = e.write_all(raw);
        e.finish().unwrap_or_default()
    };
    let mut out = b"CCOB".to_vec();
    out.extend(version.to_le_bytes());
    out.extend(u16::from(zstd).to_le_bytes());
    let n = raw.len() as u64;
    match version {
        1 => out.extend((n as u32).to_le_bytes()),
        2 => {
            out.extend(((24 + payload.len()) as u32).to_le_bytes());
            out.extend((n as u32).to_le_bytes());
        }
        _ => {
            out.extend((32 + payload.len() as u64).to_le_bytes());
            out.extend(n.to_le_bytes());
        }
    }
    out.extend(hash(raw).to_le_bytes());
    out.extend(payload);
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, raw)) = data.split_first() else {
        return;
    };
    let section = ccob(selector, raw);
    let limits = Limits {
        max_uncompressed: 1 << 20,
        max_entries: 256,
        ..Limits::default()
    };
    let devices: Vec<DeviceTarget> = ["gfx90a:sramecc+:xnack-", "gfx1100", "gfx1103", "sm_80"]
        .iter()
        .filter_map(|d| DeviceTarget::parse(d).ok())
        .collect();
    for found in scan(&section, &limits) {
        let container = match found {
            Ok(c) => c,
            Err(e) => {
                // An error inside the inflated bundle has an offset into
                // it, not into the section (see the report).
                assert!(e.offset <= (section.len() + raw.len()) as u64, "{e}");
                let _ = e.to_string();
                continue;
            }
        };
        assert!(container.offset() + container.len() <= section.len() as u64);
        assert!(container.images().len() <= 256, "the entry limit holds");
        for i in 0..container.images().len() {
            let _ = container.read_content(i);
            if let Ok(bytes) = container.image_bytes(i) {
                assert_eq!(bytes.len() as u64, container.images()[i].size);
            }
        }
        for device in &devices {
            let s = select(device, &container, &Policy::default());
            if let Some(chosen) = s.chosen {
                assert!(chosen < container.images().len());
                assert!(s.rejected.iter().all(|(i, _)| *i != chosen));
            }
        }
    }
});
