#!/usr/bin/env bash
# Installs liboffload_loader (.so and .a), its header and a pkg-config file.
# usage: ffi/install.sh PREFIX     (builds the release library first)
set -euo pipefail
prefix=${1:?usage: ffi/install.sh PREFIX}
root=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release -p offload-loader-ffi --manifest-path "$root/Cargo.toml"
target=${CARGO_TARGET_DIR:-$root/target}/release
mkdir -p "$prefix/lib/pkgconfig" "$prefix/include"
install -m 0755 "$target/liboffload_loader.so" "$prefix/lib/"
install -m 0644 "$target/liboffload_loader.a" "$prefix/lib/"
install -m 0644 "$root/ffi/include/offload_loader.h" "$prefix/include/"
sed "s|@PREFIX@|$prefix|" "$root/ffi/offload_loader.pc.in" > "$prefix/lib/pkgconfig/offload_loader.pc"
echo "installed into $prefix (PKG_CONFIG_PATH=$prefix/lib/pkgconfig)"
