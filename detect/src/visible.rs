//! The visible-devices lists, as the runtimes that own them read them.
//!
//! Who applies what:
//! - `ROCR_VISIBLE_DEVICES`: the HSA runtime itself, inside `hsa_init`
//!   (ROCR-Runtime `core/runtime/amd_filter_device.cpp`, `RvdFilter`). This
//!   crate applies it ([`rocr`]) only to devices found through KFD, where no
//!   runtime ran.
//! - `HIP_VISIBLE_DEVICES`: the HIP runtime, on top of what HSA reports
//!   (clr `rocclr/device/rocm/rocdevice.cpp`, `Device::init`). This crate
//!   applies it ([`hip`]) to AMD devices from HSA or KFD. HIP falls back to
//!   `CUDA_VISIBLE_DEVICES` on AMD when `HIP_VISIBLE_DEVICES` is empty; this
//!   crate does not, because here `CUDA_VISIBLE_DEVICES` belongs to the NVIDIA
//!   devices of the same process.
//! - `CUDA_VISIBLE_DEVICES`: the CUDA driver itself, inside `cuInit` (indices,
//!   `GPU-<uuid>` and `MIG-<uuid>`); this crate leaves it to the driver, so
//!   every form the driver accepts works.
//!
//! Both lists keep the devices they name in the order they name them. They
//! apply to anything [`Listed`]: KFD nodes and devices.

/// A GPU in enumeration order, as the visible-devices lists see it.
pub(crate) trait Listed {
    /// Its UUID, `GPU-<16 hex digits>`, if it has one.
    fn uuid(&self) -> Option<&str>;
}

/// Applies `ROCR_VISIBLE_DEVICES` = `list` to the GPUs in enumeration order,
/// as `RvdFilter` does: an empty list hides every GPU; tokens are split on
/// `,`, trimmed and upper-cased; at most as many tokens as GPUs are read; a
/// token starting with `G` is a UUID prefix (5 to 20 characters, matching
/// exactly one `GPU-<16 hex digits>`), any other a `strtol(token, 0)` index
/// (so `0x1` is 1, `010` is 8, and an empty token is 0); the first token that
/// is illegal, out of range, ambiguous or names a GPU already chosen ends the
/// list.
pub(crate) fn rocr<T: Listed>(devices: Vec<T>, list: &str) -> Vec<T> {
    let uuids: Vec<Option<String>> = devices
        .iter()
        .map(|d| d.uuid().map(|u| u.to_ascii_uppercase()))
        .collect();
    let mut chosen: Vec<usize> = Vec::new();
    if !list.is_empty() {
        for token in list.split(',').take(devices.len()) {
            let token = token.trim().to_ascii_uppercase();
            let index = if token.starts_with('G') {
                uuid_index(&uuids, &token)
            } else {
                strtol_base0(&token).and_then(|i| usize::try_from(i).ok())
            };
            match index {
                Some(i) if i < devices.len() && !chosen.contains(&i) => chosen.push(i),
                _ => break,
            }
        }
    }
    pick(devices, &chosen)
}

/// The one GPU whose UUID starts with `token` (`RvdFilter::ProcessUuidToken`).
fn uuid_index(uuids: &[Option<String>], token: &str) -> Option<usize> {
    if !(5..=20).contains(&token.len()) {
        return None;
    }
    let mut found = None;
    for (i, uuid) in uuids.iter().enumerate() {
        if uuid.as_deref().is_some_and(|u| u.starts_with(token)) {
            if found.is_some() {
                return None;
            }
            found = Some(i);
        }
    }
    found
}

/// C's `strtol(s, &end, 0)` accepting only when `*end == '\0'`: optional
/// sign, `0x` hexadecimal, leading-`0` octal, otherwise decimal. With no
/// digits at all `end` stays at the start, so only the empty string passes
/// (as 0).
fn strtol_base0(s: &str) -> Option<i64> {
    if s.is_empty() {
        return Some(0);
    }
    let (negative, rest) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let (radix, digits) = match rest.as_bytes() {
        [b'0', b'x' | b'X', next, ..] if next.is_ascii_hexdigit() => (16, &rest[2..]),
        [b'0', ..] => (8, rest),
        _ => (10, rest),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    // Overflow saturates in C; saturated values are out of range either way.
    let value = i64::from_str_radix(digits, radix).unwrap_or(i64::MAX);
    Some(if negative { -value } else { value })
}

/// Applies `HIP_VISIBLE_DEVICES` = `list` (non-empty) as clr's
/// `roc::Device::init` does: tokens split on `,` (not trimmed); a token
/// containing `GPU-` is replaced by the index of the first GPU whose UUID
/// contains it; a token must then be a canonical decimal index (`01`, ` 1`,
/// `-0` are not) below the GPU count, or the list ends there; a repeated index
/// is skipped.
pub(crate) fn hip<T: Listed>(devices: Vec<T>, list: &str) -> Vec<T> {
    let mut chosen: Vec<usize> = Vec::new();
    for token in list.split(',') {
        let mut token = token.to_string();
        if token.contains("GPU-") {
            if let Some(i) = devices
                .iter()
                .position(|d| d.uuid().is_some_and(|u| u.contains(&token)))
            {
                token = i.to_string();
            }
        }
        match token.parse::<usize>() {
            Ok(i) if i.to_string() == token && i < devices.len() => {
                if !chosen.contains(&i) {
                    chosen.push(i);
                }
            }
            _ => break,
        }
    }
    pick(devices, &chosen)
}

fn pick<T>(devices: Vec<T>, chosen: &[usize]) -> Vec<T> {
    let mut slots: Vec<Option<T>> = devices.into_iter().map(Some).collect();
    chosen
        .iter()
        .filter_map(|&i| slots.get_mut(i)?.take())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GPU on KFD node `node`.
    struct Gpu {
        node: u32,
        uuid: String,
    }

    impl Listed for Gpu {
        fn uuid(&self) -> Option<&str> {
            Some(&self.uuid)
        }
    }

    fn gpus(n: usize) -> Vec<Gpu> {
        (0..n)
            .map(|i| Gpu {
                node: i as u32 + 1,
                uuid: format!("GPU-{:016x}", 0xabba_0000_0000_0000u64 + i as u64),
            })
            .collect()
    }

    fn nodes(list: &[Gpu]) -> Vec<u32> {
        list.iter().map(|d| d.node).collect()
    }

    #[test]
    fn rocr_rules() {
        let r = |list: &str| nodes(&rocr(gpus(4), list));
        assert_eq!(r("2,0"), [3, 1]);
        assert_eq!(r(""), [] as [u32; 0]);
        assert_eq!(r("-1"), [] as [u32; 0]);
        assert_eq!(r("1,1,2"), [2]);
        assert_eq!(r("1,x,2"), [2]);
        assert_eq!(r("3, 0x1 ,9,0"), [4, 2]);
        assert_eq!(r("010"), [] as [u32; 0]); // octal 8
        assert_eq!(r("2,,1"), [3, 1, 2]); // the empty token is index 0
        assert_eq!(r("gpu-abba000000000002,GPU-XX"), [3]);
        assert_eq!(r("GPU-ABBA,1"), [] as [u32; 0]); // ambiguous prefix
        assert_eq!(r("1,2,3,0,1"), [2, 3, 4, 1]);
    }

    #[test]
    fn hip_rules() {
        let h = |list: &str| nodes(&hip(gpus(3), list));
        assert_eq!(h("2,0"), [3, 1]);
        assert_eq!(h("1,1,2"), [2, 3]);
        assert_eq!(h("1,bogus,0"), [2]);
        assert_eq!(h("01"), [] as [u32; 0]);
        assert_eq!(h(" 1"), [] as [u32; 0]);
        assert_eq!(h("5,0"), [] as [u32; 0]);
        assert_eq!(h("1,"), [2]);
        assert_eq!(h("GPU-abba000000000002,0"), [3, 1]);
    }

    #[test]
    fn strtol() {
        assert_eq!(strtol_base0("12"), Some(12));
        assert_eq!(strtol_base0("0X1F"), Some(31));
        assert_eq!(strtol_base0("0x"), None);
        assert_eq!(strtol_base0("017"), Some(15));
        assert_eq!(strtol_base0("09"), None);
        assert_eq!(strtol_base0("+3"), Some(3));
        assert_eq!(strtol_base0("-1"), Some(-1));
        assert_eq!(strtol_base0("+"), None);
        assert_eq!(strtol_base0("1 "), None);
    }
}
