#!/usr/bin/env bash
# Hand-over cost (issue 37): a shared library of 5,000 HIP fat binaries as
# clang-22 writes them (gfx11-generic, gfx1100, gfx90a; each bundle's table
# on a page of its own) dlopened once by a program linked with Debian's
# libamdhip64, without this library and with it first, on a machine where
# KFD lists no AMD GPU, a gfx90a, or a gfx1100 (OFFLOAD_LOADER_KFD_ROOT: on
# a gfx1100 every bundle's gfx1100 code object, which it would take over
# gfx11-generic's, has its header read). Prints the median dlopen
# time (ms) and anonymous memory added (kB) of RUNS runs each, and the
# ratios to the program without this library (the runs of the four
# interleaved). Then the floor of deciding at registration: the median time
# to read the 5,000 bundle tables of the library mapped afresh, by touching
# each table's page, by reading the header and IDs of each (as a
# registration reads them, but one table after another, so that their
# memory waits overlap), and by pread(2) of each from the file.
# Both with the library in the page cache as the linker wrote it and as
# read back from disk (as an installed library is).
# Usage: bash .ci/bench-handover.sh [RUNS]   (after cargo build --release -p offload-loader-ffi)
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
cat > tables.c <<'C'
/* Reads every bundle table of argv[1] (each starts a 4096-aligned page with
 * the bundle magic) once: argv[2] "touch" reads a byte of each table in a
 * fresh read-only mapping of the file, "read" its first 256 bytes (the
 * header and entry IDs a decision compares) there, "pread" its first 256
 * bytes from the file. Prints the milliseconds the reads took. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
static double ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}
int main(int argc, char **argv) {
  int fd = open(argv[1], O_RDONLY);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) || argc < 3)
    return 2;
  char *all = malloc(st.st_size);
  long *at = malloc(sizeof(long) * (st.st_size / 4096 + 1)), n = 0;
  volatile long sum = 0; /* the reads are kept */
  if (!all || !at || pread(fd, all, st.st_size, 0) != st.st_size)
    return 2;
  for (long o = 0; o + 24 <= st.st_size; o += 4096)
    if (!memcmp(all + o, "__CLANG_OFFLOAD_BUNDLE__", 24))
      at[n++] = o;
  free(all);
  char *m = mmap(0, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0), buf[256];
  if (m == MAP_FAILED)
    return 2;
  double t = ms();
  for (long i = 0; i < n; i++)
    if (!strcmp(argv[2], "touch"))
      sum += m[at[i] + 24];
    else if (!strcmp(argv[2], "read"))
      for (int j = 0; j < 256; j += 8)
        sum += *(volatile long *)(m + at[i] + j);
    else if (pread(fd, buf, sizeof buf, at[i]) == sizeof buf)
      sum += buf[24];
  printf("%.3f %ld\n", ms() - t, n);
  return 0;
}
C
clang-22 -O2 tables.c -o tables
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
# label|program KFD-topology; the first is the reference of the ratios.
configs=("plain|plain none" "beside, no AMD GPU|beside none" "beside, a gfx90a|beside gfx90a"
  "beside, a gfx1100 (each gfx1100 header read)|beside gfx1100")
report() {
  # The runs of every configuration interleaved, so that a slower minute of
  # a shared machine falls on all of them alike.
  rm -f out.*
  for _ in $(seq "$runs"); do
    for i in "${!configs[@]}"; do
      read -r exe kfd <<<"${configs[$i]#*|}"
      OFFLOAD_LOADER_KFD_ROOT="$work/$kfd" "./$exe" "$work/lib5000.so" >> "out.$i"
    done
    for how in touch read pread; do ./tables lib5000.so "$how" | cut -d' ' -f1 >> "out.$how"; done
  done
  for i in "${!configs[@]}"; do
    echo "${configs[$i]%%|*}|$(cut -d' ' -f1 "out.$i" | median)|$(cut -d' ' -f2 "out.$i" | median)"
  done | awk -F'|' 'NR == 1 {t = $2; m = $3} {printf "%-45s %8.2f ms (%.2fx) %7d kB (%.2fx)\n", $1, $2, $2 / t, $3, $3 / m}'
  for how in touch read pread; do
    printf '%-45s %8.2f ms\n' "reading the tables ($how)" "$(median < "out.$how")"
  done
}
echo "== the library in the page cache as the linker wrote it"
report
# As a library installed earlier is: its pages dropped from the cache
# (written back, then POSIX_FADV_DONTNEED, which dd's nocache asks) and read
# from disk again, which fills the cache with larger folios than the
# linker's writes made (each page fault then maps more of the file).
sync lib5000.so
dd if=lib5000.so iflag=nocache count=0 status=none
cat lib5000.so > /dev/null
echo "== the library read from disk"
report
