#!/usr/bin/env bash
# The CUDA path on a real NVIDIA GPU, where the `device` tool lends one (CI has
# none). Run from the repository root with the release probe and library in
# .device/ (see tests/device/README.md); writes its log to $OUT (or /tmp).
#   1. the probe detects the GPU through the real libcuda, lists the PyPI CUDA
#      libraries there and gives each its verdict;
#   2. slim rewrites cuFFT, cuBLASLt and NCCL for that GPU, and PyTorch runs an
#      FFT, a matrix product and an NCCL all-reduce with the slimmed libraries
#      preloaded: the results must equal those of the originals;
#   3. an `nvcc -cudart none` program registers through liboffload_loader and
#      launches the kernel the library loaded, on the handle it returned;
#   4. a program with a module for this GPU and one for sm_80 only, slimmed:
#      the emptied module fails at its launch as before, the other runs.
set -u
out=${OUT:-/tmp/device-out}
mkdir -p "$out" /tmp/dev
exec > >(tee "$out/log.txt") 2>&1
here=$PWD
probe=$here/.device/offload-probe
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader
lib() { python3 - "$1" <<'PY'
import glob, os, site, sys
for d in site.getsitepackages():
    for p in sorted(glob.glob(os.path.join(d, "nvidia", "**", sys.argv[1]), recursive=True)):
        print(p); sys.exit(0)
PY
}
cufft=$(lib 'libcufft.so.*'); cublaslt=$(lib 'libcublasLt.so.*'); nccl=$(lib 'libnccl.so.*')
echo "libraries: $cufft $cublaslt $nccl"

echo "== 1. probe, devices detected here"
time "$probe" "$cufft" "$cublaslt" "$nccl" > /tmp/dev/probe.txt; echo "probe exit $?"
grep -E "^\s+\[|^devices|^  cuda|=>" /tmp/dev/probe.txt | grep -v "^\s*\[[0-9]*\] cuda-" | head -20

echo "== 2. slim for this GPU, then PyTorch on the slimmed libraries"
rm -rf /tmp/dev/slim
time "$probe" slim "$cufft" "$cublaslt" "$nccl" --output /tmp/dev/slim > /tmp/dev/slim.txt 2>&1
echo "slim exit $?"; grep -E "^/|holes|total|error" /tmp/dev/slim.txt | cut -c1-300
du -k "$cufft" "$cublaslt" "$nccl" /tmp/dev/slim/*
cat > /tmp/dev/work.py <<'PY'
import os, torch, torch.distributed as dist
torch.manual_seed(0)
x = torch.randn(4096, 4096, device="cuda")
f = torch.fft.fft2(x).abs().sum().item()
g = torch.fft.rfft(x[0]).abs().sum().item()
a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
m = (a @ a).float().abs().sum().item()
h = (a.half() @ a.half()).float().abs().sum().item()
dist.init_process_group("nccl", init_method="file:///tmp/dev/pg" + os.environ.get("TAG", ""), rank=0, world_size=1)
t = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
dist.all_reduce(t)
torch.cuda.synchronize()
n = t.sum().item()
dist.destroy_process_group()
maps = open("/proc/self/maps").read()
used = sorted({l.split()[-1] for l in maps.splitlines() if "/tmp/dev/slim" in l})
print("results", f, g, m, h, n)
print("slimmed libraries mapped:", used)
PY
TAG=a python3 /tmp/dev/work.py 2>&1 | grep -E "results|mapped|Error|error" > /tmp/dev/orig.txt
pre=$(ls /tmp/dev/slim/* | tr '\n' ':')
TAG=b LD_PRELOAD=$pre python3 /tmp/dev/work.py 2>&1 | grep -E "results|mapped|Error|error" > /tmp/dev/slimmed.txt
echo "original: $(cat /tmp/dev/orig.txt)"; echo "slimmed:  $(cat /tmp/dev/slimmed.txt)"
if [[ $(grep results /tmp/dev/orig.txt) == "$(grep results /tmp/dev/slimmed.txt)" ]]; then
  echo "SAME RESULTS"; else echo "RESULTS DIFFER"; fi

echo "== 3. nvcc -cudart none program through liboffload_loader, launched"
cd /tmp/dev
nvcc -cudart none -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a \
  -gencode arch=compute_75,code=compute_75 -Xfatbin -compress-all \
  -I "$here/ffi/include" "$here/tests/device/launch.cu" -o launch \
  -L "$here/.device" -L "$(dirname "$(command -v nvcc)")/../lib64/stubs" \
  -loffload_loader -lcuda -Xlinker -rpath="$here/.device" && \
  OFFLOAD_LOADER_INFO=1 ./launch; echo "launch exit $?"

echo "== 4. an emptied module fails at its launch as before"
nvcc -gencode arch=compute_90,code=sm_90 -c "$here/tests/device/two_modules.cu" -o two.o && \
nvcc -gencode arch=compute_80,code=sm_80 -c "$here/tests/device/other_module.cu" -o other.o && \
nvcc two.o other.o -o two && ./two > two-orig.txt
"$probe" slim two --output slim2 | grep -E "nv-fatbin|total"; ls -ls two slim2/two
./slim2/two > two-slim.txt; echo "slimmed exit $?"
echo "original: $(cat two-orig.txt | tr '\n' ';')"; echo "slimmed:  $(cat two-slim.txt | tr '\n' ';')"
cmp -s two-orig.txt two-slim.txt && echo "SAME BEHAVIOUR" || echo "BEHAVIOUR DIFFERS"
"$probe" two --json > two.json; "$probe" slim2/two | grep -E "nv-fatbin|=>"
