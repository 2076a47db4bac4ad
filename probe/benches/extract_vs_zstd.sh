#!/usr/bin/env bash
# `offload-probe --extract` against `zstd -d` plus the MD5 of the same
# payloads, one core for one core (taskset -c 0), on the 45 CCOB v3 bundles
# of jax-rocm7-pjrt 0.12.0's xla_rocm_plugin.so; then both on every core.
# usage: probe/benches/extract_vs_zstd.sh [WHEEL_DIR]   (needs hyperfine, zstd, python3)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
wheels=${1:-${OFFLOAD_LOADER_WHEELS:-$HOME/.cache/offload-loader/wheels}}
probe=$root/target/release/offload-probe
[[ -x $probe ]] || cargo build --release -p offload-probe --manifest-path "$root/Cargo.toml"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
wheel=$(ls "$wheels"/jax_rocm7_pjrt-0.12.0-*.whl 2>/dev/null | head -n 1)
[[ -n $wheel ]] || python3 -m pip download -q --no-deps -d "$wheels" jax-rocm7-pjrt==0.12.0
wheel=$(ls "$wheels"/jax_rocm7_pjrt-0.12.0-*.whl | head -n 1)
python3 -m zipfile -e "$wheel" "$work/w"
lib=$work/w/jax_plugins/xla_rocm7/xla_rocm_plugin.so
# The zstd frames of the bundles, cut where the probe's JSON says they are
# (a CCOB v3 header is 32 bytes).
"$probe" "$lib" --json | python3 -c '
import json, sys
lib, out = sys.argv[1], sys.argv[2]
data = open(lib, "rb").read()
for c in json.load(sys.stdin)["objects"][0]["containers"]:
    o, n = c["offset"], c["size"]
    open(f"{out}/{o}.zst", "wb").write(data[o + 32 : o + n])
' "$lib" "$work"
ls "$work"/*.zst | wc -l
hyperfine -N --warmup 1 --runs 5 \
  -n "offload-probe --extract (gfx942, 1 core)" \
  "taskset -c 0 $probe $lib --device gfx942:sramecc+:xnack- --extract $work/out" \
  -n "zstd -d | md5sum (1 core)" \
  "taskset -c 0 sh -c 'for f in $work/*.zst; do zstd -q -d -c \$f | md5sum >/dev/null; done'" \
  -n "offload-probe --extract (all cores)" \
  "$probe $lib --device gfx942:sramecc+:xnack- --extract $work/out"
