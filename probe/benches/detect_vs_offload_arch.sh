#!/usr/bin/env bash
# Device detection on this machine, side by side in one hyperfine run:
# `offload-probe` (no argument: the GPUs here, with a reason per backend),
# LLVM 22's `offload-arch`, and a program that only stats what a GPU driver
# leaves in /dev, /proc and /sys (the floor: the cost of looking); and the
# probe with the HSA runtime named, which opens it whatever /dev says, as
# every run did before detection looked first.
# usage: probe/benches/detect_vs_offload_arch.sh   (needs hyperfine, cc, clang-tools-22)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
probe=$root/target/release/offload-probe
cargo build -q --release -p offload-probe --manifest-path "$root/Cargo.toml"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/stat_only.c" <<'C'
#include <stdio.h>
#include <sys/stat.h>
int main(void) {
  const char *paths[] = {"/dev/kfd", "/dev/dxg", "/sys/devices/virtual/kfd/kfd/topology/nodes",
                         "/proc/driver/nvidia", "/dev/nvidiactl"};
  struct stat st;
  int found = 0;
  for (unsigned i = 0; i < sizeof paths / sizeof *paths; i++) found += stat(paths[i], &st) == 0;
  printf("%d\n", found);
  return 0;
}
C
cc -O2 "$work/stat_only.c" -o "$work/stat-only"
hyperfine -N -i --warmup 5 --runs 200 --export-json "$work/runs.json" \
  -n "offload-probe" "$probe" \
  -n "offload-arch (LLVM 22)" /usr/lib/llvm-22/bin/offload-arch \
  -n "stat only" "$work/stat-only" \
  -n "offload-probe, HSA named (opened as before the device-node check)" \
  "env OFFLOAD_LOADER_HSA_LIBRARY=libhsa-runtime64.so.1 $probe"
# Medians, and each one's ratio to offload-probe's.
python3 - "$work/runs.json" <<'PY'
import json, statistics, sys
runs = json.load(open(sys.argv[1]))["results"]
probe = statistics.median(next(r for r in runs if r["command"] == "offload-probe")["times"])
print("| command | median | ratio to offload-probe |")
print("|---|---|---|")
for r in runs:
    m = statistics.median(r["times"])
    print(f"| {r['command']} | {m * 1e3:.2f} ms | {m / probe:.2f}× |")
PY
