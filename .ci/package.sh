#!/usr/bin/env bash
# The crates as crates.io and docs.rs take them: each packages and builds
# from its package alone, in dependency order (`cargo package --workspace`
# resolves the path dependencies' versions through a local registry, as
# publishing them in order would), the documentation builds without
# warnings, and `cargo install --path probe` installs the probe.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== cargo package (offload-loader, offload-detect, offload-loader-ffi, offload-slim, offload-probe)"
log=$(mktemp)
# In a target directory of its own, as a user who downloads the crates
# builds them: verified beside the workspace's own build, cargo 1.95 built
# offload-slim's registry copy of offload-loader without the `write` feature
# it asks for.
# Cargo extracts each packaged crate into its registry sources under a
# directory named for the local registry's path, which is the same from one
# run to the next, and does not extract a crate again whose name and version
# it finds there: a copy from an earlier run (same version, older code)
# would be built instead of this one. These crates are never fetched from
# crates.io, so their extracted copies go.
rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/offload-{loader,detect,slim,probe,loader-ffi}-[0-9]*
# Likewise the local registry an earlier run in this checkout left: the
# verification of a crate took its dependencies' older packages from it.
rm -rf target/package-check/package
if ! CARGO_TARGET_DIR=target/package-check cargo package --workspace --allow-dirty \
  --exclude offload-loader-workspace --exclude offload-test-drivers >"$log" 2>&1; then
  cat "$log"
  exit 1
fi
grep -E "^\s*(Packaged|Verifying|warning)" "$log"
rm -f "$log"
echo "== cargo doc (warnings are errors)"
# The C library's crate shares its library name with offload-loader: documented apart.
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -q -p offload-loader -p offload-detect -p offload-slim -p offload-probe
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -q -p offload-loader-ffi
echo "== cargo install --path probe"
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
cargo install -q --locked --path probe --root "$root"
"$root/bin/offload-probe" --version
