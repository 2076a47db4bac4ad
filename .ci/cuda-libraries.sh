#!/usr/bin/env bash
# Fetches the NVIDIA libraries that keep GPU code outside `.nv_fatbin` (issue
# 26), once, into $OFFLOAD_LOADER_CACHE/libraries (default
# ~/.cache/offload-loader): cuFFT, cuBLAS(Lt) and NCCL for CUDA 12 and 13, and
# faiss-gpu-cu12 (sm_70/sm_80 code only). Only the shared libraries the tests
# read are kept, one folder per wheel:
#
#   libraries/<wheel name>/<library file name>
#
# tests/nvidia_libraries.rs reads them; a stamp file names the set.
set -euo pipefail
cache=${OFFLOAD_LOADER_CACHE:-$HOME/.cache/offload-loader}
wheels=(nvidia-cufft-cu12==11.4.1.4 nvidia-cufft==12.5.0.14
        nvidia-cublas-cu12==12.9.3.13 nvidia-cublas==13.10.0.20
        nvidia-nccl-cu12==2.32.3 nvidia-nccl-cu13==2.32.3
        faiss-gpu-cu12==1.14.1.post1)
dest=$cache/libraries
stamp="${wheels[*]}"
if [[ -f $dest/stamp && $(cat "$dest/stamp") == "$stamp" ]]; then
  echo "NVIDIA libraries: cached in $dest"
  exit 0
fi
pip=$(command -v pip || command -v pip3) ||
  { echo "error: pip not found (apt-get install python3-pip)" >&2; exit 1; }
command -v unzip >/dev/null || { echo "error: unzip not found (apt-get install unzip)" >&2; exit 1; }
download=$(mktemp -d)
trap 'rm -rf "$download"' EXIT
echo "NVIDIA libraries: downloading ${#wheels[@]} wheels"
"$pip" download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_5_x86_64 -d "$download" "${wheels[@]}"
rm -rf "$dest"
for spec in "${wheels[@]}"; do
  name=${spec%%==*}
  wheel=$(ls "$download/${name//-/_}-${spec##*==}-"*.whl | head -n 1)
  mkdir -p "$dest/$name"
  # The GPU libraries only, without their folders.
  unzip -q -j -o "$wheel" '*/libcufft.so.*' '*/libcublas*.so.*' '*/libnccl.so.*' \
    '*/libfaiss-*.so' -d "$dest/$name" 2>/dev/null || true
  ls "$dest/$name" | grep -q . || { echo "error: no library in $wheel" >&2; exit 1; }
done
echo "$stamp" > "$dest/stamp"
ls -l "$dest"/*
