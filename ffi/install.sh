#!/usr/bin/env bash
# Installs liboffload_loader the way C and C++ projects expect to find it:
#
#   $DESTDIR$PREFIX/lib/liboffload_loader.so.MAJOR.MINOR.PATCH   stripped, SONAME liboffload_loader.so.MAJOR
#   $DESTDIR$PREFIX/lib/liboffload_loader.so.MAJOR -> .so.MAJOR.MINOR.PATCH, liboffload_loader.so -> .so.MAJOR
#   $DESTDIR$PREFIX/lib/liboffload_loader.a       one object defining only the C API globally
#   $DESTDIR$PREFIX/include/offload_loader.h
#   $DESTDIR$PREFIX/lib/pkgconfig/offload_loader.pc
#   $DESTDIR$PREFIX/lib/cmake/offload_loader/offload_loader{Config,ConfigVersion}.cmake
#
# usage: [PREFIX=/usr/local] [DESTDIR=] [LIBDIR=lib] ffi/install.sh [PREFIX]
#   OFFLOAD_LOADER_BUILT=DIR installs the libraries already built in DIR
#   (e.g. target/debug) instead of building the release ones.
set -euo pipefail
prefix=${1:-${PREFIX:-/usr/local}}
prefix=${prefix%/}
destdir=${DESTDIR:-}
libdir=${LIBDIR:-lib}
root=$(cd "$(dirname "$0")/.." && pwd)
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/ffi/Cargo.toml" | head -n1)
major=${version%%.*}

if [[ -n ${OFFLOAD_LOADER_BUILT:-} ]]; then
  built=$OFFLOAD_LOADER_BUILT
else
  cargo build --release -p offload-loader-ffi --manifest-path "$root/Cargo.toml"
  built=${CARGO_TARGET_DIR:-$root/target}/release
fi
for f in liboffload_loader.so liboffload_loader.a; do
  [[ -f $built/$f ]] || { echo "error: $built/$f is missing" >&2; exit 1; }
done

dest=$destdir$prefix
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$dest/$libdir/pkgconfig" "$dest/$libdir/cmake/offload_loader" "$dest/include"

# The shared library: stripped; only the C API is exported (rustc's version
# script for a cdylib), which is also the list the static library keeps.
so=liboffload_loader.so.$version
install -m 0755 "$built/liboffload_loader.so" "$dest/$libdir/$so"
strip --strip-unneeded "$dest/$libdir/$so"
ln -sfn "$so" "$dest/$libdir/liboffload_loader.so.$major"
ln -sfn "liboffload_loader.so.$major" "$dest/$libdir/liboffload_loader.so"
nm -D --defined-only "$dest/$libdir/$so" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | sort -u > "$work/api"

# The static library: every member linked into one relocatable object whose
# globals, but for the C API, become local; so the Rust standard library and
# the bundled zstd (ZSTD_*, HUF_*, FSE_*) cannot clash with a program's own.
# Undefined references (libc, libpthread, libdl, libm) stay as they are.
# Sections nothing in the C API reaches are dropped (--gc-sections from the
# API's symbols; .init_array/.fini_array are always kept), as linking the
# archive member by member would leave them out.
roots=()
while read -r symbol; do roots+=(-u "$symbol"); done < "$work/api"
ld -r --gc-sections "${roots[@]}" --whole-archive "$built/liboffload_loader.a" -o "$work/offload_loader.o"
# The standard library's objects carry their LLVM bitcode (.llvmbc, .llvmcmd,
# for cross-language LTO): dropped, since binutils offers every object to the
# LTO plugins in /usr/lib/bfd-plugins and LLVM 14's aborts on newer bitcode
# ("LLVM ERROR: Invalid encoding"), which would break `ar`, `nm` and `ld`.
objcopy --strip-debug --remove-section=.llvmbc --remove-section=.llvmcmd \
  --keep-global-symbols="$work/api" "$work/offload_loader.o"
ar rcs "$work/liboffload_loader.a" "$work/offload_loader.o"
install -m 0644 "$work/liboffload_loader.a" "$dest/$libdir/liboffload_loader.a"

install -m 0644 "$root/ffi/include/offload_loader.h" "$dest/include/"
sed -e "s|@PREFIX@|$prefix|" -e "s|@LIBDIR@|$libdir|" -e "s|@VERSION@|$version|" \
  "$root/ffi/offload_loader.pc.in" > "$dest/$libdir/pkgconfig/offload_loader.pc"
sed -e "s|@VERSION@|$version|" -e "s|@MAJOR@|$major|" -e "s|@LIBDIR@|$libdir|" \
  "$root/ffi/cmake/offload_loaderConfig.cmake.in" > "$dest/$libdir/cmake/offload_loader/offload_loaderConfig.cmake"
sed -e "s|@VERSION@|$version|" \
  "$root/ffi/cmake/offload_loaderConfigVersion.cmake.in" > "$dest/$libdir/cmake/offload_loader/offload_loaderConfigVersion.cmake"
echo "installed liboffload_loader $version into $dest (pkg-config: $prefix/$libdir/pkgconfig; CMake: find_package(offload_loader CONFIG))"
