#!/usr/bin/env bash
# Regenerates the seed corpus from real clang output.
# Toolchains used for the committed corpus: Debian clang-22 / llvm-22 1:22.1.8-1~deb12u1,
# clang-19 1:19.1.7-3~deb12u1, lld-22 (for the HIP shared object), python3.
# usage: fuzz/make-corpus.sh [OUT]   (OUT defaults to fuzz/corpus; give a
# scratch directory to compare a regeneration with the committed files)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=/usr/lib/llvm-22/bin
out=$(mkdir -p "${1:-$here/corpus}" && cd "${1:-$here/corpus}" && pwd)
for tool in clang-22 clang-19 python3 $bin/llvm-objcopy $bin/llvm-offload-binary $bin/llvm-ar; do
  command -v "$tool" >/dev/null || { echo "error: $tool not found" >&2; exit 1; }
done
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
put() { mkdir -p "$out/$1"; cp "$2" "$out/$1/$3"; chmod 644 "$out/$1/$3"; }
for t in bundle container_scan select; do put $t plain.fatbin plain; done
for t in compressed_bundle container_scan select; do
  put $t ccob3.fatbin ccob3; put $t ccob2.fatbin ccob2; put $t ccob19.fatbin ccob19
done
for t in offload_binary container_scan select; do put $t omp.offloading omp; put $t ptx.bin ptx; done
put registration k.segment hip-wrapper
# Whole files for discover_file: a compressed-bundle object, an OpenMP object
# (.llvm.offloading, llvm_offload_entries), a -fgpu-rdc object (one
# __CLANG_OFFLOAD_BUNDLE__<id> section per entry), the HIP shared object, and an
# archive of two of them.
clang-22 -x hip -nogpulib -nogpuinc -fgpu-rdc -c --offload-arch=gfx90a k.hip -o rdc.o
$bin/llvm-ar rcs lib.a rdc.o omp.o
put discover_file ccob3.o hip-ccob.o; put discover_file omp.o openmp.o; put discover_file rdc.o hip-rdc.o
put discover_file k.so hip.so; put discover_file lib.a archive.a
head -c 64 gfx90a.o > gfx90a.head; head -c 64 generic.o > generic.head
put elf_amdgpu gfx90a.head gfx90a; put elf_amdgpu generic.head generic; put ptx n.ptx sm80
# Cubin ELF headers (no ptxas here): the 64-byte header of an AMDGPU object
# with e_machine EM_CUDA, OS/ABI 0x33 and the two e_flags layouts: ABI
# version 7 (SM in bits 0-7, 0x800 arch-specific) and 8 (SM in bits 8-15, 0x8).
python3 - "$tmp/gfx90a.head" "$out/elf_nvptx" <<'PY'
import os, struct, sys
head = bytearray(open(sys.argv[1], 'rb').read())
os.makedirs(sys.argv[2], exist_ok=True)
for name, abi, flags in [('sm80-abi7', 7, 0x00500550), ('sm90a-abi8', 8, (90 << 8) | 0x8)]:
    h = bytearray(head)
    h[7], h[8] = 0x33, abi
    h[18:20] = struct.pack('<H', 190)
    h[48:52] = struct.pack('<I', flags)
    open(os.path.join(sys.argv[2], name), 'wb').write(h)
PY
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
mkdir -p "$out/target_id" "$out/entries"
for s in gfx90a:sramecc+:xnack- gfx11-generic fiji sm_90a compute_80 hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+ host-x86_64-unknown-linux-gnu openmp-nvptx64-nvidia-cuda--sm_80; do
  printf '%s' "$s" > "$out/target_id/$(echo "$s" | tr ':/' '__')"
done
# An LLVM 20+ entry table (one kernel) and a legacy one (one variable).
python3 - "$out/entries" <<'PY'
import struct, sys
d = sys.argv[1]
open(d + '/v1', 'wb').write(struct.pack('<QHHIQQQQQ', 0, 1, 4, 0, 0x1000, 0x2000, 0, 0, 0))
open(d + '/legacy', 'wb').write(struct.pack('<QQQii', 0x1000, 0x2000, 4, 0, 0))
PY
echo "corpus written to $out"
