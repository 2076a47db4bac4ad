#!/usr/bin/env bash
# The whole suite RUNS times in a row (default 3) while `stress-ng --cpu N`
# (default: the number of cores) loads the machine: tests make no timing
# assumptions, so every run must pass. Needs stress-ng (apt-get install stress-ng).
# usage: .ci/stress.sh [RUNS] [CPUS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
cpus=${2:-$(nproc)}
if ! command -v stress-ng >/dev/null; then
  if [[ ${CI:-} == true ]]; then echo "error: stress-ng not found" >&2; exit 1; fi
  echo "warning: stress-ng not found (apt-get install stress-ng): the loaded runs are skipped" >&2
  exit 0
fi
cargo build --workspace
stress-ng --cpu "$cpus" --timeout 0 >/dev/null 2>&1 &
load=$!
trap 'kill $load 2>/dev/null' EXIT
for i in $(seq "$runs"); do
  start=$SECONDS
  log=$(mktemp)
  if ! CI=true cargo test --workspace >"$log" 2>&1; then
    tail -n 40 "$log"
    echo "run $i failed after $((SECONDS - start)) s (log: $log)" >&2
    exit 1
  fi
  passed=$(grep -o '[0-9]* passed' "$log" | awk '{s += $1} END {print s}')
  echo "run $i: $passed tests passed in $((SECONDS - start)) s under stress-ng --cpu $cpus"
  rm -f "$log"
done
