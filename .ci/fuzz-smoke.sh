#!/usr/bin/env bash
# A short libFuzzer run of every fuzz target in fuzz/, from the committed seed
# corpus plus the committed crash reproducers (fuzz/regressions/<target>/).
#
# cargo-fuzz passes nightly-only flags (-Zsanitizer, -Cpasses=sancov-module);
# the stable toolchain accepts them with RUSTC_BOOTSTRAP=1. The targets build
# without a sanitizer (-s none): safe Rust needs none to catch what matters
# here, which is panics (overflow checks and debug assertions stay on: no -O),
# hangs (-timeout) and runaway memory (-rss_limit_mb). libfuzzer-sys compiles
# libFuzzer from C++ source, so a C++ compiler is needed.
#
# Per target: first the committed reproducers in fuzz/regressions/<target>/
# are replayed once each, then libFuzzer runs for SECONDS from a scratch copy
# of fuzz/corpus/<target>/ (libFuzzer adds what it finds to its first corpus
# directory, and CI must not modify the checkout). A crashing input is kept in
# fuzz/artifacts/<target>/ (git-ignored).
#
# usage: .ci/fuzz-smoke.sh [SECONDS per target, default 5]
# env:   CI=true         a missing tool is an error (otherwise: a warning, exit 0)
#        FUZZ_TARGET_DIR  cargo target directory (default fuzz/target)
#        FUZZ_SANITIZER   none (default) or address
set -euo pipefail
seconds=${1:-5}
sanitizer=${FUZZ_SANITIZER:-none}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root/fuzz"
start=$SECONDS

missing() {
  if [[ ${CI:-} == true ]]; then
    echo "error: $1" >&2
    exit 1
  fi
  echo "warning: $1; skipping the fuzz smoke run" >&2
  exit 0
}

command -v cargo >/dev/null || missing "cargo not found"
command -v c++ >/dev/null || command -v g++ >/dev/null || command -v clang++ >/dev/null ||
  missing "no C++ compiler (c++, g++ or clang++): libfuzzer-sys builds libFuzzer from source"
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz"
  cargo install cargo-fuzz --locked --quiet || missing "cargo install cargo-fuzz failed"
  cargo fuzz --version >/dev/null 2>&1 || missing "cargo-fuzz not usable after installing it"
fi

export RUSTC_BOOTSTRAP=1
args=(-s "$sanitizer")
[[ -n ${FUZZ_TARGET_DIR:-} ]] && args+=(--target-dir "$FUZZ_TARGET_DIR")

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

echo "building the fuzz targets ($(cargo fuzz --version), sanitizer $sanitizer)"
if ! cargo fuzz build "${args[@]}" >"$scratch/build.log" 2>&1; then
  tail -n 40 "$scratch/build.log"
  echo "fuzz build: FAILED" >&2
  exit 1
fi
echo "built in $((SECONDS - start)) s"

limits=(-rss_limit_mb=512 -timeout=5)
failed=()
for target in $(cargo fuzz list); do
  t0=$SECONDS
  log=$scratch/$target.log
  # 1. Replay the committed reproducers, each once.
  regressions=()
  if [[ -d regressions/$target ]]; then
    while IFS= read -r f; do regressions+=("$f"); done < <(find "regressions/$target" -maxdepth 1 -type f ! -name '.*' | sort)
  fi
  if ((${#regressions[@]})) &&
     ! cargo fuzz run "${args[@]}" "$target" "${regressions[@]}" -- "${limits[@]}" >"$log" 2>&1; then
    echo "fuzz $target: FAILED replaying fuzz/$(grep -oE 'Running: \S+' "$log" | tail -n 1 | cut -d' ' -f2)"
    grep -E 'panicked|SUMMARY|ERROR|out-of-memory|libFuzzer: timeout' "$log" | head -n 8 | sed 's/^/  /' || true
    failed+=("$target")
    continue
  fi
  # 2. Fuzz from a scratch copy of the seed corpus.
  corpus=$scratch/corpus-$target
  mkdir -p "$corpus"
  if [[ -d corpus/$target ]]; then
    find "corpus/$target" -maxdepth 1 -type f ! -name '.*' ! -name '*.md' -exec cp {} "$corpus"/ \;
  fi
  seeds=$(find "$corpus" -type f | wc -l)
  if cargo fuzz run "${args[@]}" "$target" "$corpus" -- \
      -max_total_time="$seconds" "${limits[@]}" >"$log" 2>&1; then
    done_line=$(grep -aE '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1 || true)
    runs=$(grep -oE '^#[0-9]+' <<<"$done_line" | tr -d '#' || true)
    rate=$(grep -oE 'exec/s: [0-9]+' <<<"$done_line" || true)
    echo "fuzz $target: ok, ${runs:-?} runs (${rate:-exec/s: ?}) from $seeds seeds," \
         "${#regressions[@]} reproducers replayed, $((SECONDS - t0)) s"
  else
    echo "fuzz $target: FAILED after $((SECONDS - t0)) s"
    grep -E 'panicked|SUMMARY|ERROR|Test unit written|out-of-memory|libFuzzer: timeout' "$log" | head -n 8 | sed 's/^/  /' || true
    tail -n 30 "$log" | sed 's/^/  | /'
    failed+=("$target")
  fi
done
echo "fuzz smoke: $((SECONDS - start)) s in all"
if ((${#failed[@]})); then
  echo "fuzz smoke: FAILED: ${failed[*]} (inputs: fuzz/regressions/<target>/ or fuzz/artifacts/<target>/)" >&2
  exit 1
fi
