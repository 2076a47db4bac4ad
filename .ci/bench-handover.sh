#!/usr/bin/env bash
# Hand-over cost (issue 37): a shared library of 5,000 HIP fat binaries as
# clang-22 writes them (gfx11-generic, gfx1100, gfx90a; each bundle's table
# on a page of its own) dlopened once by a program linked with Debian's
# libamdhip64, without this library and with it first, on a machine where
# KFD lists no AMD GPU, a gfx90a, or a gfx1100 (OFFLOAD_LOADER_KFD_ROOT: a
# gfx1100 makes every bundle need reordering). Prints the median dlopen
# time (ms) and anonymous memory added (kB) of RUNS runs each, and the
# ratios to the program without this library.
# Usage: bash .ci/bench-handover.sh [RUNS]   (after cargo build --release)
set -euo pipefail
runs=${1:-21}
root=$(cd "$(dirname "$0")/.." && pwd)
lib="$root/target/release"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
cat > one.hip <<'HIP'
#include "hip_prelude.h"
static __attribute__((global)) void k(int *p) { *p = 1; }
void *use_k() { return (void *)k; }
HIP
clang-22 -x hip -nogpulib -nogpuinc --offload-arch=gfx11-generic --offload-arch=gfx1100 \
  --offload-arch=gfx90a -I"$root/tests/programs" -I"$root/ffi/include" -fPIC -c one.hip -o one.o
# Every symbol local: the same object links 5,000 times.
objcopy --wildcard --localize-symbol='*' one.o one_local.o
for _ in $(seq 5000); do echo one_local.o; done > objects.rsp
clang-22 -shared -fuse-ld=lld @objects.rsp -o lib5000.so
mkdir -p loader && cp "$lib/liboffload_loader.so" loader/ && ln -sf liboffload_loader.so loader/liboffload_loader.so.0
clang-22 "$root/tests/programs/open_once.c" -Wl,--no-as-needed -lamdhip64 -o plain
clang-22 "$root/tests/programs/open_once.c" -L"$work/loader" -loffload_loader -Wl,-rpath,"$work/loader" \
  -Wl,--no-as-needed -lamdhip64 -o beside
topology() { # name [gfx_target_version]: a CPU node, then the GPU if given
  mkdir -p "$1/0" && echo "gfx_target_version 0" > "$1/0/properties"
  if [ $# -gt 1 ]; then
    mkdir -p "$1/1" && printf 'gfx_target_version %s\nunique_id 1\n' "$2" > "$1/1/properties"
  fi
}
topology none; topology gfx90a 90010; topology gfx1100 110000
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
measure() { # label exe kfd
  local out; out=$(for _ in $(seq "$runs"); do OFFLOAD_LOADER_KFD_ROOT="$work/$3" "./$2" "$work/lib5000.so"; done)
  echo "$1 $(echo "$out" | cut -d' ' -f1 | median) $(echo "$out" | cut -d' ' -f2 | median)"
}
{
  measure plain plain none
  measure "beside, no AMD GPU" beside none
  measure "beside, a gfx90a" beside gfx90a
  measure "beside, a gfx1100 (every bundle reordered)" beside gfx1100
} | awk 'NR == 1 {t = $2; m = $3} {printf "%-45s %8.2f ms (%.2fx) %7d kB (%.2fx)\n", substr($0, 1, length($0) - length($NF) - length($(NF-1)) - 2), $(NF-1), $(NF-1) / t, $NF, $NF / m}'
