#!/usr/bin/env bash
# A short libFuzzer run of every fuzz target from the committed seed corpus.
# cargo-fuzz needs nightly flags; the stable toolchain accepts them with
# RUSTC_BOOTSTRAP=1, and the targets build without a sanitizer (-s none):
# panics, hangs (-timeout) and runaway memory (-rss_limit_mb) are what we catch.
# usage: .ci/fuzz-smoke.sh [SECONDS per target, default 5]
set -euo pipefail
seconds=${1:-5}
cd "$(dirname "$0")/../fuzz"
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz"
  cargo install cargo-fuzz --locked --quiet
fi
export RUSTC_BOOTSTRAP=1
cargo fuzz build -s none -O 2>&1 | tail -n 1
failed=0
for target in $(cargo fuzz list); do
  corpus=$(mktemp -d)
  cp corpus/"$target"/* "$corpus"/ 2>/dev/null || true
  log=$(mktemp)
  if cargo fuzz run -s none -O "$target" "$corpus" -- \
      -max_total_time="$seconds" -rss_limit_mb=512 -timeout=5 >"$log" 2>&1; then
    execs=$(grep -oE '^#[0-9]+' "$log" | tail -n 1)
    echo "fuzz $target: ok, ${execs#\#} executions in ${seconds}s"
  else
    echo "fuzz $target: FAILED"; tail -n 30 "$log"; failed=1
  fi
  rm -rf "$corpus" "$log"
done
exit $failed
