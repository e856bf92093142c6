#!/usr/bin/env bash
# Runs a test command N times while K processes spin on the CPUs, and counts the runs
# that pass: how the through-iwarpd flakes of issue 34 were reproduced (5 of 8 passed
# before their fixes, 12 of 12 after). Logs of failed runs are kept in target/under-load/.
#
#   scripts/under_load.sh 8 3 cargo test -p cverbs --test through_iwarpd
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
runs=${1:?runs}; hogs=${2:?hogs}; shift 2
[ $# -gt 0 ] || { echo "usage: $0 RUNS HOGS COMMAND..." >&2; exit 2; }
"$@" --no-run >/dev/null 2>&1 || true   # build first, not under load
mkdir -p target/under-load
pids=()
for _ in $(seq 1 "$hogs"); do (while :; do :; done) & pids+=($!); done
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
passed=0
for i in $(seq 1 "$runs"); do
  if "$@" > "target/under-load/run-$i.log" 2>&1; then
    passed=$((passed + 1)); rm -f "target/under-load/run-$i.log"; echo "run $i: ok"
  else
    echo "run $i: FAILED (target/under-load/run-$i.log)"
  fi
done
echo "$passed of $runs passed, with $hogs spinning processes"
[ "$passed" -eq "$runs" ]
