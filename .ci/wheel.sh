#!/usr/bin/env bash
# `pip install offload-probe` from a clean clone: builds the wheel as the
# README says (maturin, --zig for glibc 2.17), checks its platform tag with
# auditwheel and that the binary is stripped, installs it into a fresh venv
# and runs the probe from there on rocSPARSE. Then the same for aarch64
# (Grace and other ARM GPU nodes), run under qemu-user with Debian's arm64
# libc. maturin, ziglang and auditwheel come from PyPI into a cached venv.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${OFFLOAD_LOADER_CACHE:-$HOME/.cache/offload-loader}
tools=$cache/wheel-tools
if [[ ! -x $tools/bin/maturin || ! -x $tools/bin/auditwheel ]]; then
  python3 -m venv "$tools"
  "$tools/bin/pip" install -q "maturin>=1.5,<2" ziglang auditwheel
fi
export PATH=$tools/bin:$PATH
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
rocsparse=/usr/lib/x86_64-linux-gnu/librocsparse.so.0

check() { # TARGET-TRIPLE PLATFORM-TAG RUNNER...
  local triple=$1 tag=$2
  shift 2
  echo "== wheel for $triple"
  maturin build --release --zig --target "$triple" -m probe/Cargo.toml -o "$out/$triple" 2>&1 | tail -n 1
  local wheel
  wheel=$(ls "$out/$triple"/offload_probe-*.whl)
  case $wheel in
    *"$tag"*) ;;
    *) echo "error: $wheel is not tagged $tag" >&2; exit 1 ;;
  esac
  auditwheel show "$wheel" | tr '\n' ' ' | grep -q "consistent with the following platform tag: \"$tag\"" \
    || { auditwheel show "$wheel"; echo "error: auditwheel does not find $tag" >&2; exit 1; }
  local venv=$out/venv-$triple
  python3 -m venv "$venv"
  # The venv's pip would refuse a foreign-architecture wheel: unpack it as
  # pip would install it (its scripts into bin/).
  if [[ $triple == x86_64-* ]]; then
    "$venv/bin/pip" install -q --no-index "$wheel"
  else
    python3 -m zipfile -e "$wheel" "$venv/unpacked"
    install -m 0755 "$venv"/unpacked/offload_probe-*.data/scripts/offload-probe "$venv/bin/"
  fi
  local exe=$venv/bin/offload-probe
  file "$exe" | grep -q ", stripped" || { file "$exe"; echo "error: not stripped" >&2; exit 1; }
  echo "   $(basename "$wheel"): $(stat -c %s "$wheel") bytes; binary $(stat -c %s "$exe") bytes"
  "$@" "$exe" --version
  "$@" "$exe" "$rocsparse" --device gfx90a:sramecc+:xnack- \
    | grep -q "device \[0\] gfx90a:sramecc+:xnack- loads \[7\] hipv4-amdgcn-amd-amdhsa--gfx90a:xnack- in 111/111" \
    || { echo "error: the installed probe did not select from rocSPARSE" >&2; exit 1; }
}

check x86_64-unknown-linux-gnu manylinux_2_17_x86_64 env
rustup target add aarch64-unknown-linux-gnu >/dev/null 2>&1 || true
check aarch64-unknown-linux-gnu manylinux_2_17_aarch64 qemu-aarch64 -L /usr/aarch64-linux-gnu
