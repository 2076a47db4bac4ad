#!/usr/bin/env bash
# Fetches rocBLAS 2.47 once: Debian trixie's librocblas0 5.5.1+dfsg-7 (ROCm
# 5.5.1), unpacked (dpkg -x) into $OFFLOAD_LOADER_CACHE (default
# ~/.cache/offload-loader)/rocblas-5.5.1+dfsg-7: librocblas.so.0.1 (a
# .hip_fatbin for ten GPUs) and its Tensile kernels, one raw code object per
# GPU (rocblas/2.47.0/library/TensileLibrary_gfx*.co,
# Kernels.so-000-gfx*.hsaco) beside the TensileLibrary.dat index. The
# slim tests (tests/slim_tree.rs) leave out the files for other GPUs.
#
# The package comes from a private package list (this machine's own apt
# sources are not touched): apt-get download of that exact version, its
# SHA-256 checked; a stamp beside it (rocblas-VERSION.stamp) says the
# unpacking finished.
set -euo pipefail
cache=${OFFLOAD_LOADER_CACHE:-$HOME/.cache/offload-loader}
version=5.5.1+dfsg-7
sha256=951dfa1a46ee275dace455f396640cfc63a47927455a0903b73c4e50030574c1
dest=$cache/rocblas-$version
if [[ -f $dest.stamp && -d $dest ]]; then
  echo "rocBLAS: cached in $dest"
  exit 0
fi
command -v apt-get >/dev/null && command -v dpkg >/dev/null ||
  { echo "error: apt-get and dpkg are needed (Debian)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
echo 'deb http://deb.debian.org/debian trixie main' > "$work/sources.list"
apt=(apt-get -q -o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
     -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache" -o Debug::NoLocking=1
     -o APT::Sandbox::User="$(id -un)")
echo "rocBLAS: downloading librocblas0 $version from Debian trixie"
"${apt[@]}" update >/dev/null
(cd "$work" && "${apt[@]}" download "librocblas0=$version" >/dev/null)
deb=$(ls "$work"/librocblas0_*_amd64.deb)
echo "$sha256  $deb" | sha256sum -c --quiet
rm -rf "$dest.partial"
mkdir -p "$dest.partial"
dpkg -x "$deb" "$dest.partial"
rm -rf "$dest"
mv "$dest.partial" "$dest"
touch "$dest.stamp"
echo "rocBLAS: unpacked into $dest"
