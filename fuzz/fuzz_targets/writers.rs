//! The writers: read a container, remove some entries, write, read again.
//!
//! The input's first byte is a keep-mask (bit i keeps entry i, cycling); the
//! rest is a bundle, a `CCOB`, an offload binary or an NVIDIA fat binary. Invariants: keeping
//! every entry gives back the same bytes (bundles the bundler could have
//! laid out; fat binaries always); what is written reads back with exactly
//! the kept entries, in order, each byte for byte the original's; a `CCOB`
//! written from a bundle inflates to it with its hash; a bundle reordered
//! reads back with its entries in that order, each with its code object.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_loader::bundle::{self, Bundle};
use offload_loader::compressed::{self, CompressedBundle, Method};
use offload_loader::nv_fatbin::{self, NvFatbin};
use offload_loader::offload_binary::{self, OffloadBinary};
use offload_loader::Limits;

fuzz_target!(|input: &[u8]| {
    let Some((&mask, data)) = input.split_first() else { return };
    let keep = |i: usize| mask & (1 << (i % 8)) != 0;
    let limits = Limits { max_uncompressed: 1 << 20, ..Limits::default() };

    if let Ok(read) = Bundle::parse(data, &limits) {
        // Reversed, every entry reads back with its own code object.
        let order: Vec<usize> = (0..read.entries().len()).rev().collect();
        let ids: Vec<&str> = read.entries().iter().map(|e| e.id).collect();
        if let Some(reversed) = bundle::write::reordered(&read, &order, &ids) {
            let again = Bundle::parse(&reversed, &limits).expect("what was reordered reads back");
            let got: Vec<_> = again.entries().iter().map(|e| (e.id, again.code_object(e).unwrap())).collect();
            let want: Vec<_> = order.iter().map(|&i| &read.entries()[i]).map(|e| (e.id, read.code_object(e).unwrap())).collect();
            assert_eq!(got, want);
        }
        if let Some(all) = bundle::write::keep(&read, |_| true) {
            // The same bytes, but for the padding between code objects,
            // which the bundler writes as zeros (the input may not).
            let original = &data[..read.len() as usize];
            assert_eq!(all.len(), original.len());
            let mut padding = vec![true; original.len()];
            let table_end = read.entries().last().map_or(32, |e| e.record_offset + 24 + e.id.len() as u64);
            padding[..table_end as usize].fill(false);
            for e in read.entries() {
                padding[e.offset as usize..(e.offset + e.size) as usize].fill(false);
            }
            for (i, (a, b)) in all.iter().zip(original).enumerate() {
                assert!(a == b || (padding[i] && *a == 0), "keeping everything changed byte {i}");
            }
            let fewer = bundle::write::keep(&read, keep).expect("the alignment is known");
            let again = Bundle::parse(&fewer, &limits).expect("what was written reads back");
            let want: Vec<_> = read
                .entries()
                .iter()
                .enumerate()
                .filter(|(i, _)| keep(*i))
                .map(|(_, e)| (e.id, read.code_object(e).unwrap()))
                .collect();
            let got: Vec<_> = again.entries().iter().map(|e| (e.id, again.code_object(e).unwrap())).collect();
            assert_eq!(got, want);
            for (version, method) in [(2, Method::Zstd), (3, Method::Zlib)] {
                let ccob = compressed::write::compress(&fewer, version, method, Some(1)).unwrap();
                let c = CompressedBundle::parse(&ccob).unwrap();
                assert_eq!(c.decompress(&limits).unwrap(), fewer);
            }
        }
    }

    if let Ok(read) = OffloadBinary::parse(data, &limits) {
        // Whatever the input's string table looks like, what is written
        // reads back with the kept entries, each as it was.
        if let Ok(Some(fewer)) = offload_binary::write::keep(&read, keep) {
            let again = OffloadBinary::parse(&fewer, &limits).expect("what was written reads back");
            fn view(e: &offload_binary::OffloadEntry<'_>) -> (u16, u16, u32, Vec<(String, String)>, Vec<u8>) {
                let strings = e.strings.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
                (e.image_kind, e.offload_kind_bits, e.flags, strings, e.image.to_vec())
            }
            let want: Vec<_> = read.entries().iter().enumerate().filter(|(i, _)| keep(*i)).map(|(_, e)| view(e)).collect();
            let got: Vec<_> = again.entries().iter().map(view).collect();
            assert_eq!(got, want);
            assert_eq!(again.version, read.version);
        }
    }

    if let Ok(read) = NvFatbin::parse(data, &limits) {
        // Every entry that is not a group (members included), with its code
        // when it has any.
        let code = |f: &NvFatbin<'_>| -> Vec<(usize, u16, u32, u64, Option<Vec<u8>>)> {
            (0..f.entries().len())
                .filter(|&i| !(f.entries()[i].group.is_none() && f.entries()[i].kind == nv_fatbin::kind::CONCAT))
                .map(|i| {
                    let e = &f.entries()[i];
                    (i, e.kind, e.sm, e.flags, f.code(i, &limits).ok().map(|c| c.into_owned()))
                })
                .collect()
        };
        let same = nv_fatbin::write::keep(&read, |_| true, &limits).expect("keeping all copies");
        assert_eq!(same, &data[..read.len() as usize]);
        // A group losing members must inflate; one that does not is an error.
        if let Ok(fewer) = nv_fatbin::write::keep(&read, keep, &limits) {
            let again = NvFatbin::parse(&fewer, &limits).expect("what was written reads back");
            let want: Vec<_> = code(&read).into_iter().filter(|t| keep(t.0)).map(|t| (t.1, t.2, t.3, t.4)).collect();
            let got: Vec<_> = code(&again).into_iter().map(|t| (t.1, t.2, t.3, t.4)).collect();
            assert_eq!(got, want);
        }
    }
});
