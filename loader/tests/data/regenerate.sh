#!/bin/sh
# Regenerates the ELF-header and PTX fixtures read by the unit tests in
# loader/src/elf/ (amdgpu.rs, ptx.rs). Each AMDGPU fixture is only the first
# 64 bytes (the ELF64 header) of a code object clang-22 writes; the tests
# compare what the parser reads with what `llvm-readelf-22 -h` printed for the
# full object (recorded in the tests).
#
# Made with: Debian clang version 22.1.8 (1~deb12u1), Target: x86_64-pc-linux-gnu
#   (clang-22 --version). NVPTX cubins need NVIDIA's ptxas, which is not
#   installed here, so there is no cubin fixture: clang-22 -c for nvptx64 fails
#   with "ptxas command failed".
set -eu
cd "$(dirname "$0")"
CLANG=${CLANG:-clang-22}
"$CLANG" --version | head -1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'int f(int x) { return x + 1; }\n' > "$tmp/x.c"

# name                        triple               -mcpu                       code object version
while read -r name triple cpu cov; do
  ver=""
  [ "$cov" = "-" ] || ver="-mcode-object-version=$cov"
  # shellcheck disable=SC2086
  "$CLANG" --target="$triple" -mcpu="$cpu" $ver -nogpulib -O2 -c "$tmp/x.c" -o "$tmp/$name.o"
  head -c 64 "$tmp/$name.o" > "$name.ehdr"
  printf '%s: ' "$name"
  llvm-readelf-22 -h "$tmp/$name.o" | grep -E 'OS/ABI|ABI Version|Flags' | tr -s ' ' | tr '\n' ' '
  echo
done <<'LIST'
gfx90a_xnack+_v4          amdgcn-amd-amdhsa   gfx90a:xnack+               4
gfx90a_v4                 amdgcn-amd-amdhsa   gfx90a                      4
gfx90a_sramecc-_xnack-_v5 amdgcn-amd-amdhsa   gfx90a:sramecc-:xnack-      5
gfx1100_v5                amdgcn-amd-amdhsa   gfx1100                     5
gfx90a_sramecc+_v6        amdgcn-amd-amdhsa   gfx90a:sramecc+             6
gfx11-generic_v6          amdgcn-amd-amdhsa   gfx11-generic               6
gfx9-4-generic_xnack-_v6  amdgcn-amd-amdhsa   gfx9-4-generic:xnack-       6
gfx906_xnack+_mesa3d      amdgcn-mesa-mesa3d  gfx906:xnack+               -
LIST

# PTX text: clang-22 has no CUDA installation here and defaults to PTX ISA 4.2,
# which is too old for sm_80, so the PTX version is given as a target feature.
"$CLANG" --target=nvptx64-nvidia-cuda -march=sm_80 -Xclang -target-feature -Xclang +ptx70 \
  -O2 -S -o sm_80.ptx "$tmp/x.c"
