#!/usr/bin/env bash
# Regenerates the seed corpus from real clang output.
# Toolchains used for the committed corpus: Debian clang-22 / llvm-22 1:22.1.8-1~deb12u1,
# clang-19 1:19.1.7-3~deb12u1.  usage: fuzz/make-corpus.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=/usr/lib/llvm-22/bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
cat > k.hip <<'SRC'
typedef struct { unsigned x, y, z; } dim3;
extern "C" int hipLaunchKernel(const void *, dim3, dim3, void **, unsigned long, void *);
extern "C" int __hipPopCallConfiguration(dim3 *, dim3 *, unsigned long *, void **);
__attribute__((global)) void kern(int *p) { *p = 1; }
__attribute__((device)) int dvar = 3;
SRC
printf 'int g = 1;\n#pragma omp declare target(g)\nint f(void) { int x = 0;\n#pragma omp target map(tofrom: x)\n{ x = g; }\nreturn x; }\n' > o.c
printf 'void k(int *p) { *p = 1; }\n' > n.c
archs="--offload-arch=gfx90a:xnack- --offload-arch=gfx1100 --offload-arch=gfx11-generic"
hipc="clang-22 -x hip -nogpulib -nogpuinc -c $archs"
$hipc k.hip -o plain.o
$hipc --offload-compress k.hip -o ccob3.o
COMPRESSED_BUNDLE_FORMAT_VERSION=2 $hipc --offload-compress k.hip -o ccob2.o
clang-19 -x hip -nogpulib -nogpuinc -c --offload-arch=gfx90a --offload-compress k.hip -o ccob19.o
clang-22 -fopenmp --offload-arch=gfx90a:xnack+,gfx1100 -nogpulib -c o.c -o omp.o
clang-22 --target=nvptx64-nvidia-cuda -march=sm_80 -Xclang -target-feature -Xclang +ptx78 -S n.c -o n.ptx
clang-22 --target=amdgcn-amd-amdhsa -mcpu=gfx90a:sramecc+:xnack- -nogpulib -c n.c -o gfx90a.o
clang-22 --target=amdgcn-amd-amdhsa -mcpu=gfx11-generic -nogpulib -c n.c -o generic.o
$bin/llvm-offload-binary -o ptx.bin --image=file=n.ptx,triple=nvptx64-nvidia-cuda,arch=sm_80,kind=cuda
dump() { $bin/llvm-objcopy --dump-section="$2=$3" "$1" "$tmp/discard"; }
for o in plain ccob3 ccob2 ccob19; do dump $o.o .hip_fatbin $o.fatbin; done
dump omp.o .llvm.offloading omp.offloading
clang-22 -x hip -nogpulib -nogpuinc --offload-arch=gfx90a k.hip -fuse-ld=lld -shared -fPIC -o k.so
dump k.so .hipFatBinSegment k.segment
put() { mkdir -p "$here/corpus/$1"; cp "$2" "$here/corpus/$1/$3"; }
for t in bundle container_scan select; do put $t plain.fatbin plain; done
for t in compressed_bundle container_scan select; do
  put $t ccob3.fatbin ccob3; put $t ccob2.fatbin ccob2; put $t ccob19.fatbin ccob19
done
for t in offload_binary container_scan select; do put $t omp.offloading omp; put $t ptx.bin ptx; done
put registration k.segment hip-wrapper
head -c 64 gfx90a.o > gfx90a.head; head -c 64 generic.o > generic.head
put elf gfx90a.head gfx90a; put elf generic.head generic; put elf n.ptx ptx
# An NVIDIA fat binary laid out as nv_fatbin.rs reads it (no nvcc here):
# one PTX entry for sm_80 holding n.ptx.
python3 - "$tmp/n.ptx" "$tmp/nv.fatbin" <<'PY'
import struct, sys
ptx = open(sys.argv[1], 'rb').read()
padded = (len(ptx) + 7) // 8 * 8
entry = struct.pack('<HHIQIIIIIIQQQ', 1, 0x0101, 64, padded, 0, len(ptx), 0, 80, 64, 0, 1, 0, 0)
entry += ptx + b'\0' * (padded - len(ptx))
open(sys.argv[2], 'wb').write(struct.pack('<IHHQ', 0xBA55ED50, 1, 16, len(entry)) + entry)
PY
put nv_fatbin nv.fatbin ptx-sm80; put container_scan nv.fatbin nv
mkdir -p "$here/corpus/target_id" "$here/corpus/entries"
for s in gfx90a:sramecc+:xnack- gfx11-generic fiji sm_90a compute_80 hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+ host-x86_64-unknown-linux-gnu openmp-nvptx64-nvidia-cuda--sm_80; do
  printf '%s' "$s" > "$here/corpus/target_id/$(echo "$s" | tr ':/' '__')"
done
# An LLVM 20+ entry table (one kernel) and a legacy one (one variable).
python3 - "$here/corpus/entries" <<'PY'
import struct, sys
d = sys.argv[1]
open(d + '/v1', 'wb').write(struct.pack('<QHHIQQQQQ', 0, 1, 4, 0, 0x1000, 0x2000, 0, 0, 0))
open(d + '/legacy', 'wb').write(struct.pack('<QQQii', 0x1000, 0x2000, 4, 0, 0))
PY
echo "corpus written to $here/corpus"
