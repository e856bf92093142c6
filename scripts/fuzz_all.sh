#!/usr/bin/env bash
# Runs every cargo-fuzz target until it has done RUNS executions or TIME seconds have
# passed (whichever comes first), JOBS targets at a time, and prints one line per target:
# executions, seconds, executions per second, corpus entries, crashes.
#
#   scripts/fuzz_all.sh                      # 10 million runs or 30 minutes each, 2 at a time
#   RUNS=1000000 TIME=300 scripts/fuzz_all.sh mpa_deframer ddp_parse
#
# Hand-made first inputs in fuzz/seeds/TARGET/ (if any) are read beside the corpus.
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
# The daemon's targets (ipc_*, iwarpd_*) are built with debug assertions as well (overflow
# checks in the daemon's arithmetic), in a target directory of their own so that the two
# builds do not undo each other.
flags() { case "$1" in ipc_* | iwarpd_*) echo "-O -a" ;; *) echo "-O" ;; esac; }
tdir() { case "$1" in ipc_* | iwarpd_*) echo "$CARGO_TARGET_DIR-a" ;; *) echo "$CARGO_TARGET_DIR" ;; esac; }
# libFuzzer options of a target beyond the common ones. iwarpd_servant runs a few hundred
# inputs a second, too few for libFuzzer's slow growth of the input length (its entries
# are 256 octets), and its inputs may take seconds; nothing in it or ipc_wqe allocates
# more than a few MiB at once (a staged claim allocated unchecked would).
opts() {
  case "$1" in
    iwarpd_servant) echo "-len_control=0 -max_len=2048 -timeout=120 -malloc_limit_mb=64" ;;
    ipc_wqe) echo "-malloc_limit_mb=16" ;;
  esac
}
for t in "${targets[@]}"; do
  # shellcheck disable=SC2046
  CARGO_TARGET_DIR=$(tdir "$t") cargo fuzz build $(flags "$t") "$t" >/dev/null 2>&1 ||
    { echo "$t: build failed"; exit 1; }
done
run() {
  local t=$1
  mkdir -p "corpus/$t"
  local seeds=()
  if [ -d "seeds/$t" ]; then seeds=("seeds/$t"); fi
  # shellcheck disable=SC2046
  CARGO_TARGET_DIR=$(tdir "$t") cargo fuzz run $(flags "$t") "$t" "corpus/$t" "${seeds[@]}" -- \
    -runs="$RUNS" -max_total_time="$TIME" -print_final_stats=1 $(opts "$t") \
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
