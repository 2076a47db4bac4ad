#!/usr/bin/env bash
# Fetches NVIDIA's CUDA 13 toolchain and two NVIDIA libraries from PyPI, once,
# into $OFFLOAD_LOADER_CACHE (default ~/.cache/offload-loader): no GPU and no
# CUDA installer needed. The NVIDIA tests (tests/nvidia.rs) build real
# programs with this nvcc and compare with this cuobjdump.
#
#   cuda13/nvidia/cu13/bin/{nvcc,cuobjdump,fatbinary,nvlink,ptxas}
#   libs/nvidia/cu13/lib/{libcurand.so.10,libcusparse.so.12}
#
# The wheels are kept in wheels/ and unzipped into one prefix each; a stamp
# file names the set, so a changed set is fetched again.
set -euo pipefail
cache=${OFFLOAD_LOADER_CACHE:-$HOME/.cache/offload-loader}
toolkit=(nvidia-cuda-nvcc==13.5.37 nvidia-nvvm==13.5.37 nvidia-cuda-runtime==13.5.37
         nvidia-cuda-crt==13.5.37 nvidia-cuda-cccl==13.3.5.0.6 nvidia-cuda-cuobjdump==13.4.92)
libraries=(nvidia-curand==10.4.5.25 nvidia-cusparse==12.9.4.2)
stamp="${toolkit[*]} ${libraries[*]}"
if [[ -f $cache/wheels.stamp && $(cat "$cache/wheels.stamp") == "$stamp" ]]; then
  echo "CUDA wheels: cached in $cache"
  exit 0
fi
command -v pip >/dev/null || command -v pip3 >/dev/null ||
  { echo "error: pip not found (apt-get install python3-pip)" >&2; exit 1; }
command -v unzip >/dev/null || { echo "error: unzip not found (apt-get install unzip)" >&2; exit 1; }
pip=$(command -v pip || command -v pip3)
mkdir -p "$cache/wheels"
echo "CUDA wheels: downloading into $cache/wheels"
"$pip" download -q --no-deps -d "$cache/wheels" "${toolkit[@]}" "${libraries[@]}"
unpack() { # prefix, wheel names...
  local prefix=$1; shift
  rm -rf "$prefix"; mkdir -p "$prefix"
  for spec in "$@"; do
    local name=${spec%%==*} version=${spec##*==}
    local wheel
    wheel=$(ls "$cache/wheels/${name//-/_}-${version}-"*.whl | head -n 1)
    unzip -q -o "$wheel" -d "$prefix"
  done
}
unpack "$cache/cuda13" "${toolkit[@]}"
unpack "$cache/libs" "${libraries[@]}"
chmod +x "$cache"/cuda13/nvidia/cu13/bin/* "$cache"/cuda13/nvidia/cu13/nvvm/bin/* 2>/dev/null || true
"$cache/cuda13/nvidia/cu13/bin/nvcc" --version | tail -n 2
echo "$stamp" > "$cache/wheels.stamp"
