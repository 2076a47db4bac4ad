#!/usr/bin/env bash
# Scanning a directory of libraries for GPU code: offload-probe against
# `find | xargs readelf -S | grep`, which only says which files have a
# `.hip_fatbin` section (and lists nothing inside it), in one run.
# usage: probe/benches/scan_vs_readelf.sh [DIR]   (default /usr/lib/x86_64-linux-gnu)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:-/usr/lib/x86_64-linux-gnu}
probe=$root/target/release/offload-probe
[[ -x $probe ]] || cargo build --release -p offload-probe --manifest-path "$root/Cargo.toml"
echo "$(find "$dir" -type f | wc -l) files, $(du -sh "$dir" | cut -f1)"
json=$(mktemp)
trap 'rm -f "$json"' EXIT
hyperfine -N --warmup 3 --runs "${RUNS:-30}" --export-json "$json" \
  -n "offload-probe DIR --json" "$probe $dir --json --device gfx90a:sramecc+:xnack-" \
  -n "find | xargs readelf -S | grep" \
  "sh -c 'find $dir -type f -print0 | xargs -0 readelf -SW 2>/dev/null | grep -c hip_fatbin'"
# The medians and their ratio: one slow run (this machine's timings drift)
# moves a mean more than a median.
python3 - "$json" <<'PY'
import json, statistics, sys
runs = json.load(open(sys.argv[1]))["results"]
medians = [statistics.median(r["times"]) * 1000 for r in runs]
for r, m in zip(runs, medians):
    print(f"{r['command']}: median {m:.1f} ms")
print(f"ratio of medians: {medians[1] / medians[0]:.2f}x")
PY
