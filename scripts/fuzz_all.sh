#!/usr/bin/env bash
# Runs every cargo-fuzz target until it has done RUNS executions or TIME seconds have
# passed (whichever comes first), JOBS targets at a time, and prints one line per target:
# executions, seconds, executions per second, corpus entries, crashes.
#
#   scripts/fuzz_all.sh                      # 10 million runs or 30 minutes each, 2 at a time
#   RUNS=1000000 TIME=300 scripts/fuzz_all.sh mpa_deframer ddp_parse
#
# Needs `cargo install cargo-fuzz`. Logs go to $LOGS (default /tmp/iwarp-fuzz-logs).
set -u
cd "$(dirname "$0")/../fuzz"
RUNS=${RUNS:-10000000}
TIME=${TIME:-1800}
JOBS=${JOBS:-2}
LOGS=${LOGS:-/tmp/iwarp-fuzz-logs}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/tmp/target-fuzz}
export RUSTC_BOOTSTRAP=1
mkdir -p "$LOGS"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo fuzz list)
fi
for t in "${targets[@]}"; do cargo fuzz build -O "$t" >/dev/null 2>&1 || { echo "$t: build failed"; exit 1; }; done
run() {
  local t=$1
  mkdir -p "corpus/$t"
  cargo fuzz run -O "$t" -- -runs="$RUNS" -max_total_time="$TIME" -print_final_stats=1 \
    >"$LOGS/$t.log" 2>&1
  local rc=$?
  local done_line execs secs
  done_line=$(grep -E '^Done [0-9]+ runs in [0-9]+ second' "$LOGS/$t.log" | tail -1)
  execs=$(echo "$done_line" | awk '{print $2}')
  secs=$(echo "$done_line" | awk '{print $5}')
  local crashes
  crashes=$(ls "artifacts/$t" 2>/dev/null | grep -c '^crash-' || true)
  printf '%-20s %12s runs %6s s %9s/s corpus %6s crashes %s exit %s\n' "$t" "${execs:-?}" \
    "${secs:-?}" "$([ -n "${secs:-}" ] && [ "${secs:-0}" -gt 0 ] && echo $((execs / secs)) || echo '?')" \
    "$(ls "corpus/$t" | wc -l)" "$crashes" "$rc"
}
i=0
for t in "${targets[@]}"; do
  run "$t" &
  i=$((i + 1))
  if [ $((i % JOBS)) -eq 0 ]; then wait; fi
done
wait
