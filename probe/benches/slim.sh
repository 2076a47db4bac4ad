#!/usr/bin/env bash
# offload-probe slim, measured side by side in one run:
#  1. rocSPARSE (1.3 GB) slimmed for one device against a plain cp of it,
#     and the heap's peak while slimming (valgrind massif);
#  2. sizes before and after for the real libraries, for one and two targets;
#  3. against NVIDIA's nvprune on an nvcc 13 object and archive (nvprune
#     refuses executables and shared libraries), when NVPRUNE names it
#     (Debian non-free nvidia-cuda-toolkit: ../shared/REFERENCES.md says how);
#  4. compressed bundles: a clang-22 HIP library of 8 CCOBs slimmed with 1
#     and 2 threads, against inflating and compressing its payloads again
#     with the zstd tool (level 3, long-distance matching, as the bundler).
# usage: probe/benches/slim.sh   (needs hyperfine, valgrind; the CUDA wheels and
#        the cupy-rocm wheel fetched by .ci/run)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
probe=$root/target/release/offload-probe
cargo build -q --release -p offload-probe --manifest-path "$root/Cargo.toml"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rocsparse=/usr/lib/x86_64-linux-gnu/librocsparse.so.0
libs=${OFFLOAD_LOADER_CACHE:-$HOME/.cache/offload-loader}/libs/nvidia/cu13/lib

echo "== 1. rocSPARSE for gfx90a:sramecc+:xnack-: slim against cp"
cat "$rocsparse" >/dev/null
hyperfine -N --warmup 1 --runs 10 --prepare "rm -rf $work/out $work/copy" \
  -n "cp" "cp $rocsparse $work/copy" \
  -n "offload-probe slim --output" "$probe slim $rocsparse --device gfx90a:sramecc+:xnack- --output $work/out" \
  -n "offload-probe slim --dry-run" "$probe slim $rocsparse --device gfx90a:sramecc+:xnack- --dry-run"
rm -rf "$work/out"
valgrind --tool=massif --massif-out-file="$work/massif" "$probe" slim "$rocsparse" \
  --device gfx90a:sramecc+:xnack- --output "$work/out" >/dev/null 2>&1
echo "heap peak: $(sed -n 's/^mem_heap_B=//p' "$work/massif" | sort -n | tail -n 1) bytes"

echo "== 2. sizes"
size() { # FILE DEVICE...
  local f=$1
  shift
  local args=()
  for d in "$@"; do args+=(--device "$d"); done
  echo "$(basename "$f") [$*]: $("$probe" slim "$f" "${args[@]}" --dry-run | tail -n 1)"
}
size "$rocsparse" gfx90a:sramecc+:xnack-
size "$rocsparse" gfx90a:sramecc+:xnack- gfx1030
size "$libs/libcusparse.so.12" sm_90
size "$libs/libcusparse.so.12" sm_80 sm_90
size "$libs/libcurand.so.10" sm_90
cupy=$(ls -d /tmp/offload-loader-venv-cupy_rocm_7_0-14.2.0-/lib/python3/site-packages 2>/dev/null || true)
if [[ -n $cupy ]]; then
  echo "cupy-rocm-7-0 14.2.0 [gfx90a]: $("$probe" slim "$cupy/cupy" "$cupy/cupy_backends" --device gfx90a --dry-run | tail -n 1)"
  echo "cupy-rocm-7-0 14.2.0 [gfx90a gfx942]: $("$probe" slim "$cupy/cupy" "$cupy/cupy_backends" --device gfx90a --device gfx942 --dry-run | tail -n 1)"
fi

if [[ -n ${NVPRUNE:-} ]]; then
  echo "== 3. against $NVPRUNE"
  export PATH=${OFFLOAD_LOADER_CACHE:-$HOME/.cache/offload-loader}/cuda13/nvidia/cu13/bin:$PATH
  python3 - "$work/big.cu" <<'PY'
import random, sys
def pad(seed):
    r = random.Random(seed)
    return "__device__ unsigned long long pad[16384] = {%s};\n" % ",".join("%#xull" % r.getrandbits(64) for _ in range(16384))
body = "".join(f"#{'if' if i == 0 else 'elif'} __CUDA_ARCH__ == {a}\n{pad(i)}" for i, a in enumerate([800, 900, 1000])) + "#else\n" + pad(9) + "#endif\n"
open(sys.argv[1], "w").write(body + '__device__ int scale = 1;\nextern "C" __global__ void add_one(int *x) { x[threadIdx.x] += scale + (int)pad[threadIdx.x]; }\n')
PY
  (cd "$work" && nvcc -c big.cu -o big.o -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a \
     -gencode arch=compute_100a,code=sm_100a -gencode arch=compute_90,code=compute_90 && ar rcs libbig.a big.o)
  "$NVPRUNE" -arch sm_80 "$work/big.o" -o "$work/pruned.o"
  "$NVPRUNE" -arch sm_80 "$work/libbig.a" -o "$work/pruned.a"
  "$probe" slim "$work/big.o" "$work/libbig.a" --device sm_80 --output "$work/slim" >/dev/null
  for f in big.o libbig.a; do
    p=pruned.${f##*.}
    echo "$f: $(stat -c %s "$work/$f") bytes; nvprune $(stat -c %s "$work/$p"); offload-probe slim $(stat -c %s "$work/slim/$f")"
  done
  hyperfine -N --warmup 2 --runs 20 \
    -n "nvprune -arch sm_80 (object)" "$NVPRUNE -arch sm_80 $work/big.o -o $work/p.o" \
    -n "offload-probe slim --device sm_80 (object)" "$probe slim $work/big.o --device sm_80 --output $work/s1" \
    -n "nvprune -arch sm_80 (archive)" "$NVPRUNE -arch sm_80 $work/libbig.a -o $work/p.a" \
    -n "offload-probe slim --device sm_80 (archive)" "$probe slim $work/libbig.a --device sm_80 --output $work/s2"
fi

echo "== 4. compressed bundles: 8 CCOBs, 1 and 2 threads, against zstd's own inflation and compression"
clang=/usr/lib/llvm-22/bin/clang
python3 - "$work" <<'PY'
import random, sys
for t in range(8):
    def pad(seed):
        r = random.Random(seed)
        return "__attribute__((device)) unsigned long long pad%d[65536] = {%s};\n" % (t, ",".join("%#xull" % r.getrandbits(64) for _ in range(65536)))
    body = "".join(f"#{'if' if i == 0 else 'elif'} defined(__{a}__)\n{pad(t * 10 + i)}" for i, a in enumerate(["gfx90a", "gfx942", "gfx1100"])) + f"#else\n__attribute__((device)) unsigned long long pad{t}[1];\n#endif\n"
    open(f"{sys.argv[1]}/tu{t}.hip", "w").write(
        "typedef unsigned long size_t;\nstruct dim3 { unsigned x, y, z; };\n"
        'extern "C" int hipLaunchKernel(const void *, dim3, dim3, void **, size_t, void *);\n'
        'extern "C" unsigned __hipPopCallConfiguration(dim3 *, dim3 *, size_t *, void **);\n'
        + body + f'extern "C" __attribute__((global)) void k{t}(unsigned long long *x) {{ x[0] = pad{t}[x[1]]; }}\n')
PY
(cd "$work" && "$clang" -x hip --offload-arch=gfx90a --offload-arch=gfx942 --offload-arch=gfx1100 \
   --offload-compress -nogpulib -nogpuinc -fPIC -shared tu*.hip -o libccob.so)
objcopy -O binary --only-section=.hip_fatbin "$work/libccob.so" "$work/fatbin"
python3 - "$work" <<'PY'
import struct, sys
d = open(f"{sys.argv[1]}/fatbin", "rb").read()
at, n = d.find(b"CCOB"), 0
while at >= 0:
    version = struct.unpack_from("<H", d, at + 4)[0]
    total, head = (struct.unpack_from("<I", d, at + 8)[0], 24) if version == 2 else (struct.unpack_from("<Q", d, at + 8)[0], 32)
    open(f"{sys.argv[1]}/payload{n}.zst", "wb").write(d[at + head:at + total])
    n += 1
    at = d.find(b"CCOB", at + total)
print(f"libccob.so: {len(d)} bytes of .hip_fatbin in {n} CCOBs")
PY
ls -l "$work/libccob.so" | awk '{print "libccob.so:", $5, "bytes"}'
hyperfine -N --warmup 1 --runs 10 --prepare "rm -rf $work/c1 $work/c2" \
  -n "zstd -d (every payload)" "bash -c 'zstd -q -d -c $work/payload*.zst >/dev/null'" \
  -n "zstd -d | zstd -3 --long (every payload)" "bash -c 'zstd -q -d -c $work/payload*.zst | zstd -q -3 --long -c >/dev/null'" \
  -n "offload-probe slim (1 thread)" "env RAYON_NUM_THREADS=1 $probe slim $work/libccob.so --device gfx90a --output $work/c1" \
  -n "offload-probe slim (2 threads)" "env RAYON_NUM_THREADS=2 $probe slim $work/libccob.so --device gfx90a --output $work/c2"
"$probe" slim "$work/libccob.so" --device gfx90a --dry-run | tail -n 1
